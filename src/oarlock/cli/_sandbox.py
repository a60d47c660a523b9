"""``oarlock sandbox check|list|show|prune``: what isolation this host gives sandboxed
calls, and the runs' workspaces."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from oarlock._render import block, dumps, line
from oarlock.cli import EXIT_INVALID, EXIT_OK, refused
from oarlock.errors import OarlockError, ToolError

__all__ = ["dispatch"]

_SHOW_MAX = 64 * 1024
_LIST_MAX = 10_000  # files `show` lists


def _workspaces(args: argparse.Namespace) -> object:
    from oarlock.sandbox._workspace import Workspaces

    return Workspaces(Path(args.workspaces).expanduser() if args.workspaces else None)


def _check(args: argparse.Namespace) -> int:
    """What this host gives a sandboxed call, each guarantee tried by a real call through the
    entry program; not zero where one the asked isolation needs is missing."""
    from oarlock.sandbox._host import check_guarantees, host_support

    asked = getattr(args, "isolation", None) or "bubblewrap"
    support = host_support()
    found, why = check_guarantees(asked)
    ok = not why and all(g.ok for g in found if g.required)
    if args.json:
        print(
            dumps(
                {
                    "isolation": asked,
                    "ok": ok,
                    "strongest": support.strongest,
                    "bubblewrap": support.bubblewrap,
                    "unshare": support.unshare,
                    "ownUser": support.drop_user,
                    "landlockAbi": support.landlock,
                    "unavailable": why or None,
                    "guarantees": {
                        g.name: {"ok": g.ok, "required": g.required, "detail": g.detail}
                        for g in found
                    },
                    "notes": list(support.notes),
                }
            )
        )
        return EXIT_OK if ok else EXIT_INVALID
    yes = {True: "yes", False: "NO"}
    print(f"isolation      {asked}: {'every guarantee holds' if ok else 'NOT AVAILABLE'}")
    print(f"  bubblewrap   {yes[support.bubblewrap]}")
    print(f"  unshare      {yes[support.unshare]} (only where an agent file or policy names it)")
    if why:
        print(f"  {asked}: {line(why)}")
    for g in found:
        mark = "yes" if g.ok else ("NO" if g.required else "no (a second fence)")
        print(f"  {g.name:<13}{mark}: {line(g.detail)}")
    for note in support.notes:
        print(f"  note: {line(note)}")
    return EXIT_OK if ok else EXIT_INVALID


def _list(args: argparse.Namespace) -> int:
    from oarlock.sandbox._workspace import Workspaces

    ws = _workspaces(args)
    assert isinstance(ws, Workspaces)
    found = ws.all()
    if args.json:
        rows = [
            {"workspaceId": i.workspace_id, "files": i.files, "bytes": i.bytes,
             "modified": i.modified, "path": str(i.path)}
            for i in found
        ]  # fmt: skip
        print(dumps(rows))
    elif not found:
        print(f"no workspaces in {line(ws.root)}")
    for i in [] if args.json else found:
        age = time.strftime("%Y-%m-%d %H:%M", time.localtime(i.modified))
        print(f"{line(i.workspace_id)}  {i.files} files  {i.bytes} bytes  {age}")
    return EXIT_OK


def _show(args: argparse.Namespace) -> int:
    from oarlock.sandbox._workspace import Workspaces, read_file

    ws = _workspaces(args)
    assert isinstance(ws, Workspaces)
    if args.path is None:
        for shown, name in enumerate(ws.files(args.workspace_id), 1):
            if shown > _LIST_MAX:
                print(f"[more files than {_LIST_MAX}; the first {_LIST_MAX} are shown]")
                break
            print(line(name))
        return EXIT_OK
    workspace = ws.existing(args.workspace_id)
    data, size = read_file(workspace, args.path, max_bytes=_SHOW_MAX)
    print(block(data.decode("utf-8", "replace"), indent=""))
    if size > len(data):
        print(f"[{size - len(data)} more bytes]")
    return EXIT_OK


def _prune(args: argparse.Namespace) -> int:
    from oarlock.sandbox._workspace import Workspaces

    ws = _workspaces(args)
    assert isinstance(ws, Workspaces)
    gone = ws.prune(args.older_than * 86400)
    print(f"removed {len(gone)} workspace(s) untouched for {args.older_than} day(s)")
    return EXIT_OK


def dispatch(args: argparse.Namespace) -> int:
    actions = {"check": _check, "list": _list, "show": _show, "prune": _prune}
    try:
        return actions[args.action](args)
    except (OarlockError, ToolError) as exc:
        return refused(exc)
    except OSError as exc:
        return refused(OarlockError(f"{exc.filename or ''}: {exc.strerror}", code="io_error"))

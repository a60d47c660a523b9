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


def _workspaces(args: argparse.Namespace) -> object:
    from oarlock.sandbox._workspace import Workspaces

    return Workspaces(Path(args.workspaces).expanduser() if args.workspaces else None)


def _check(args: argparse.Namespace) -> int:
    from oarlock.sandbox._host import host_support

    support = host_support()
    if args.json:
        print(
            dumps(
                {
                    "isolation": support.strongest,
                    "bubblewrap": support.bubblewrap,
                    "unshare": support.unshare,
                    "ownUser": support.drop_user,
                    "limits": support.prlimit,
                    "notes": list(support.notes),
                }
            )
        )
    else:
        yes = {True: "yes", False: "no"}
        print(f"isolation      {support.strongest}")
        print(f"  bubblewrap   {yes[support.bubblewrap]}")
        print(f"  unshare      {yes[support.unshare]}")
        own = yes[support.drop_user]
        print(f"  own user     {own} (each workspace's calls run as a uid of their own)")
        print(f"  limits       {yes[support.prlimit]} (prlimit)")
        for note in support.notes:
            print(f"  note: {line(note)}")
    return EXIT_OK if support.strongest != "none" else EXIT_INVALID


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
    info = ws.info(args.workspace_id)
    if args.path is None:
        for folder, _dirs, names in sorted(_walk(info.path)):
            for name in sorted(names):
                print(line(str((folder / name).relative_to(info.path))))
        return EXIT_OK
    workspace = ws.ensure(args.workspace_id)
    data, size = read_file(workspace, args.path, max_bytes=_SHOW_MAX)
    print(block(data.decode("utf-8", "replace"), indent=""))
    if size > len(data):
        print(f"[{size - len(data)} more bytes]")
    return EXIT_OK


def _walk(root: Path) -> list[tuple[Path, list[str], list[str]]]:
    import os

    return [(Path(f), d, n) for f, d, n in os.walk(root)]


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

"""``oarlock validate`` and ``oarlock upgrade``."""

from __future__ import annotations

import argparse
import os
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

from oarlock._input import display_name, max_input_bytes, read_input
from oarlock._render import dumps, line
from oarlock.cli import EXIT_INVALID, EXIT_OK, EXIT_USAGE
from oarlock.errors import ConfigError, DocumentInvalid, FormatError, UpgradeError, UsageError
from oarlock.formats import Problem, Report, downgrade, loads_strict, upgrade, validate

__all__ = ["run_upgrade", "run_validate"]


def _fail(message: str, code: int = EXIT_USAGE) -> int:
    print(f"oarlock: {line(message)}", file=sys.stderr)
    return code


def _expand(paths: list[str]) -> list[str] | str:
    """Every file to check, or the message of a usage error. A path that is not a folder
    is read as it is (a file, a fifo, a device, ``/dev/stdin``), within the input limit."""
    files: list[str] = []
    for raw in paths:
        if raw == "-":
            files.append(raw)
            continue
        path = Path(raw)
        if path.is_dir():
            files.extend(str(p) for p in sorted(path.rglob("*.json")) if p.is_file())
        elif path.exists():
            files.append(raw)
        else:
            return f"no such file or folder: {raw}"
    return files


def _read(name: str) -> bytes:
    """The bytes of a document, read within the input limit (ConfigError beyond it)."""
    return read_input(name, what="document")


def _unread(name: str, exc: ConfigError) -> Problem:
    message = exc.message.removeprefix(f"{display_name(name)}: ")
    rule = "limit" if exc.code == "input_too_large" else "io"
    return Problem("", rule, message)


def _check(name: str, kind: Any, schema_only: bool) -> Report:
    try:
        data = _read(name)
    except ConfigError as exc:
        return Report(None if kind == "auto" else kind, [_unread(name, exc)])
    return validate(data, kind, schema_only=schema_only)


def run_validate(args: argparse.Namespace) -> int:
    if not args.paths:
        return _fail("validate needs at least one PATH (a file, a folder, or -)")
    try:
        max_input_bytes()
    except UsageError as exc:
        return _fail(str(exc))
    files = _expand(args.paths)
    if isinstance(files, str):
        return _fail(files)
    if not files:
        return _fail("no *.json documents found under " + ", ".join(args.paths), EXIT_INVALID)
    reports = [(name, _check(name, args.kind, args.schema_only)) for name in files]
    if not args.schema_only:
        _cross_check(reports)
    valid = all(r.valid for _, r in reports)
    if args.json:
        out = {"valid": valid, "files": [{"path": n, **r.to_json()} for n, r in reports]}
        print(dumps(out))
    else:
        for name, report in reports:
            _print_report(name, report)
        bad = sum(1 for _, r in reports if not r.valid)
        print(f"{len(reports) - bad} valid, {bad} invalid")
    return EXIT_OK if valid else EXIT_INVALID


def _cross_check(reports: list[tuple[str, Report]]) -> None:
    """Rules across the files checked together: the receipt of a ``sandbox``-class
    invocation given beside it must record the sandbox that invocation planned (S1)."""
    import json

    from oarlock.formats._rules import sandbox_problem

    def parsed(name: str) -> dict[str, Any] | None:
        try:
            data = json.loads(_read(name))
        except (ConfigError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    invocations: dict[str, dict[str, Any]] = {}
    receipts: list[tuple[Report, dict[str, Any]]] = []
    for name, report in reports:
        if not report.valid or report.kind not in ("invocation", "receipt") or name == "-":
            continue
        doc = parsed(name)
        if doc is None:
            continue
        if report.kind == "invocation":
            invocations[doc["invocationId"]] = doc
        else:
            receipts.append((report, doc))
    for report, receipt in receipts:
        invocation = invocations.get(receipt["invocationId"])
        problem = None if invocation is None else sandbox_problem(invocation, receipt)
        if problem is not None:
            report.errors.append(Problem("/usage/sandbox", "S1", problem))


def _print_report(name: str, report: Report) -> None:
    what: str = report.kind or "unknown kind"
    if report.format:
        what += f", {report.format}"
    what = line(what)
    if report.valid:
        print(f"{line(name)}: valid ({what}{', schema only' if report.schema_only else ''})")
        return
    print(f"{line(name)}: invalid ({what})")
    for p in report.errors:
        print(_problem(p))
    if report.more:
        print(f"  … {line(report.more)}")


def _problem(p: Problem) -> str:
    return f"  {line(p.pointer or '/')}  [{line(p.rule)}]  {line(p.message)}"


def run_upgrade(args: argparse.Namespace) -> int:
    if args.path != "-" and (not Path(args.path).exists() or Path(args.path).is_dir()):
        return _fail(f"no such file: {args.path}")
    if args.in_place and args.path == "-":
        return _fail("--in-place needs a file, not standard input")
    try:
        max_input_bytes()
    except UsageError as exc:
        return _fail(str(exc))
    try:
        document = loads_strict(_read(args.path))
        if not isinstance(document, dict):
            return _fail(f"{args.path}: a run document must be a JSON object", EXIT_INVALID)
        converted = upgrade(document) if args.to == "oar/0.2" else downgrade(document)
    except DocumentInvalid as exc:
        for p in exc.report.errors:
            print(_problem(p), file=sys.stderr)
        if exc.report.more:
            print(f"  … {line(exc.report.more)}", file=sys.stderr)
        return _fail(f"{args.path}: not a valid run document; nothing written", EXIT_INVALID)
    except (FormatError, UpgradeError) as exc:
        return _fail(f"{args.path}: {exc}", EXIT_INVALID)
    except ConfigError as exc:  # unreadable, or beyond the input limit
        return _fail(str(exc), EXIT_INVALID)
    text = dumps(converted, redact=False) + "\n"  # lossless: escapes, never redaction
    target = args.path if args.in_place else args.output
    if target is None:
        sys.stdout.write(text)
        return EXIT_OK
    try:
        _write_atomic(Path(target), text)
    except OSError as exc:
        return _fail(f"cannot write {target}: {exc.strerror or exc}", EXIT_INVALID)
    return EXIT_OK


def _write_atomic(path: Path, text: str) -> None:
    """Write through a temporary file and rename, so a crash leaves old or new, not half."""
    fd, tmp = tempfile.mkstemp(dir=path.parent or ".", prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        # mkstemp makes the file 0600: keep the mode of the file replaced, else the umask's
        if path.exists():
            mode = stat.S_IMODE(path.stat().st_mode)
        else:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise

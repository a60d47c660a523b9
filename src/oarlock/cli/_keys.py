"""``oarlock keys create|list``: approvers' signing keys and the file that trusts them.

``keys create`` writes a new Ed25519 key (mode 0600, in a folder made 0700; an existing
file is never overwritten), its public half beside it (``.pub``), and, unless
``--no-trust``, an entry in the approvers file that trusts it for one principal. Keep both
files where the run database's writers cannot change them: whoever can add a key to the
approvers file can approve."""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any

from oarlock._render import dumps, line
from oarlock.cli import EXIT_OK, _user, refused
from oarlock.errors import OarlockError
from oarlock.governance._approvers import (
    TrustedApprovers,
    default_approvers_path,
    default_key_path,
)
from oarlock.governance._ledger import generate_key, key_id, public_key_pem, save_private_key

__all__ = ["dispatch", "principal_default"]


def principal_default() -> str:
    """``$OARLOCK_PRINCIPAL``, else ``user:`` and the login name."""
    return os.environ.get("OARLOCK_PRINCIPAL") or _user()


def _private_folder(path: Path) -> None:
    """Make ``path``'s folder (0700 when oarlock creates it)."""
    folder = path.parent
    if not folder.exists():
        folder.mkdir(mode=0o700, parents=True)


def _trust(approvers: Path, principal: str, public: Path) -> None:
    """Append ``{principal, key}`` to the approvers file, checked before and after."""
    import yaml

    entries: list[Any] = []
    if approvers.exists():
        TrustedApprovers.from_file(approvers)  # refuse to extend a file that is not valid
        loaded = yaml.safe_load(approvers.read_text("utf-8")) or {}
        entries = list(loaded.get("approvers") or [])
    entries.append({"principal": principal, "key": str(public.resolve())})
    text = "# Keys whose signed approvals oarlock accepts (oarlock keys create).\n"
    text += yaml.safe_dump({"approvers": entries}, sort_keys=False, allow_unicode=True)
    _private_folder(approvers)
    fd, tmp = tempfile.mkstemp(dir=approvers.parent, prefix=f".{approvers.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, approvers)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    TrustedApprovers.from_file(approvers)


def _create(args: argparse.Namespace) -> int:
    path = Path(args.path).expanduser() if args.path else default_key_path()
    principal = args.principal or principal_default()
    if path.name in ("", ".", "..") or path.is_dir():
        raise OarlockError(f"{path} is a folder: name the key's file", code="usage")
    public = path.with_name(path.name + ".pub")
    if path.exists() or public.exists():
        raise OarlockError(f"{path} or its .pub already exists; not overwritten", code="usage")
    try:
        _private_folder(path)
    except OSError as exc:
        raise OarlockError(f"cannot create {path.parent}: {exc.strerror}", code="usage") from None
    key = generate_key()
    try:
        save_private_key(key, path)
        public.write_text(public_key_pem(key), "utf-8")
    except OSError as exc:
        raise OarlockError(f"cannot write {path}: {exc.strerror}", code="usage") from None
    kid = key_id(key.public_key())
    print(f"approver key {kid} for {line(principal)}: {line(path)} (mode 0600)")
    print(f"public key: {line(public)}")
    if not args.no_trust:
        given = args.approvers
        approvers = Path(given).expanduser() if given else default_approvers_path()
        _trust(approvers, principal, public)
        print(f"trusted in {line(approvers)}")
    return EXIT_OK


def _list(args: argparse.Namespace) -> int:
    path = Path(args.approvers).expanduser() if args.approvers else default_approvers_path()
    if not path.exists():
        raise OarlockError(f"no approvers file at {path}", code="not_found")
    trusted = TrustedApprovers.from_file(path)
    rows = [{"keyId": k.key_id, "principals": list(k.principals)} for k in trusted.entries()]
    if args.json:
        print(dumps({"approvers": str(path), "keys": rows}))
    elif not rows:
        print(f"{line(path)}: no keys")
    for r in [] if args.json else rows:
        print(f"{r['keyId']}  {line(', '.join(r['principals']))}")
    return EXIT_OK


def dispatch(args: argparse.Namespace) -> int:
    try:
        return _create(args) if args.action == "create" else _list(args)
    except OarlockError as exc:
        return refused(exc)

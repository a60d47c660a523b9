"""``oarlock keys create|list``: approvers' signing keys and the file that trusts them, and
the key ``oarlock approve`` signs with.

``keys create`` makes a new Ed25519 key (mode 0600, in a folder made 0700), its public half
beside it (``.pub``), and, unless ``--no-trust``, an entry in the approvers file that
trusts it for one principal: the entry first, each file written whole at once, and nothing
printed before all of it is on disk (see :mod:`oarlock.governance._userkey`), so a reader
of its output that goes away (``keys create | head -1``) never leaves a key without its
trust. An existing key file is never overwritten; a key that an interrupted run left
without its trust entry (or its ``.pub``) is completed by running the command again. Keep
both files where the run database's writers cannot change them: whoever can add a key to
the approvers file can approve."""

from __future__ import annotations

import argparse
import os
import stat
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oarlock._render import dumps, line
from oarlock.cli import EXIT_OK, _user, refused
from oarlock.errors import ConfigError, OarlockError
from oarlock.governance._approvers import (
    ApproverKey,
    FileApprovers,
    TrustedApprovers,
    default_approvers,
    default_approvers_path,
    default_key_path,
    principal_for,
)
from oarlock.governance._ledger import key_id, load_private_key

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from oarlock.engine._agent import Agent

__all__ = ["approval_signer", "dispatch", "principal_default"]


def principal_default() -> str:
    """``$OARLOCK_PRINCIPAL``, else ``user:`` and the login name."""
    return os.environ.get("OARLOCK_PRINCIPAL") or _user()


def approval_signer(args: argparse.Namespace, agent: Agent) -> ApproverKey | None:
    """The key ``oarlock approve`` signs with: ``--key``, else the user's own key (made on
    first use, which is said on standard error), as ``--as``, else as the one principal the
    agent's trust names for the key, else as the user (:func:`principal_default`). None
    when the user's key cannot be made: the approval is then signed with this process's own
    key, which only this process trusts, and so ``--no-resume`` refuses."""
    from oarlock.governance._userkey import UNAVAILABLE, user_key

    private: Ed25519PrivateKey
    if args.key:
        private = load_private_key(Path(args.key).expanduser())
    else:
        try:
            user = user_key()
        except ConfigError as exc:
            if exc.code != UNAVAILABLE:
                raise
            if args.no_resume:
                raise OarlockError(
                    f"{exc}: an approval that another process acts on (--no-resume) must "
                    "be signed with a kept key (--key PEM, or $OARLOCK_APPROVER_KEY)",
                    code="approval_unauthenticated",
                ) from None
            print(
                f"oarlock: {line(exc)}; signed with this process's own key, which only "
                "this process trusts",
                file=sys.stderr,
            )
            return None
        if user.made:
            print(
                f"oarlock: made your approver key {user.key_id} ({line(user.path)}, mode "
                f"0600), trusted in {line(user.approvers)} for any principal",
                file=sys.stderr,
            )
        private = user.private_key
    trusted = agent.approvers if agent.approvers is not None else default_approvers()
    who = args.principal or principal_for(key_id(private.public_key()), trusted)
    return ApproverKey(who or principal_default(), private)


def _owned(path: Path) -> bool:
    """Whether ``path`` is a file of this user that no one else may read or write (a key
    this user made, an interrupted ``keys create`` left)."""
    try:
        s = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(s.st_mode) and s.st_uid == os.geteuid() and not s.st_mode & 0o077


def _approvers_of(args: argparse.Namespace) -> Path:
    return Path(args.approvers).expanduser() if args.approvers else default_approvers_path()


def _existing(args: argparse.Namespace, path: Path, principal: str) -> int:
    """``keys create`` of a key that exists (the lock of ``path`` held): complete what an
    interrupted run left (its trust entry, its ``.pub``), else refuse to overwrite it."""
    from oarlock.governance._userkey import mend_public, trust_key

    try:
        key = load_private_key(path)
    except ConfigError as exc:
        raise OarlockError(f"{exc}; it is not overwritten", code="file_exists") from None
    kid = key_id(key.public_key())
    mended = mend_public(path, key)
    approvers = None if args.no_trust else _approvers_of(args)
    trusted = None if approvers is None else FileApprovers(approvers, optional=True).key(kid)
    if approvers is None or (trusted is not None and trusted.allows(principal)):
        where = "" if approvers is None else f", trusted in {line(approvers)}"
        done = f" ({line(path)}.pub written again)" if mended else ""
        raise OarlockError(
            f"{path} already holds approver key {kid}{where}{done}; not overwritten "
            "(name another path to make another key)",
            code="file_exists",
        )
    if trusted is not None:
        raise OarlockError(
            f"{path} holds approver key {kid}, which {approvers} trusts for "
            f"{', '.join(trusted.principals)}, not for {principal}; not changed (edit "
            "the approvers file, or name another path to make another key)",
            code="file_exists",
        )
    if not _owned(path):
        raise OarlockError(
            f"{path} holds approver key {kid}, which {approvers} does not trust; it is not "
            "this user's private file (mode 0600), so it is not trusted here: remove it, "
            "or name another path",
            code="file_exists",
        )
    trust_key(approvers, key, (principal,))
    print(
        f"approver key {kid} for {line(principal)}: {line(path)} (mode 0600), left without "
        "its trust by an interrupted keys create, completed"
    )
    print(f"trusted in {line(approvers)}")
    return EXIT_OK


def _create(args: argparse.Namespace) -> int:
    from oarlock.governance._userkey import locked, make_key, private_folder

    path = Path(args.path).expanduser() if args.path else default_key_path()
    principal = args.principal or principal_default()
    if path.name in ("", ".", "..") or path.is_dir():
        raise OarlockError(f"{path} is a folder: name the key's file", code="usage")
    public = path.with_name(path.name + ".pub")
    try:
        private_folder(path.parent)
        with locked(path):
            if path.exists() or path.is_symlink():
                return _existing(args, path, principal)
            if public.exists():
                raise OarlockError(
                    f"{public} exists without its private key {path}: remove it, or name "
                    "another path",
                    code="file_exists",
                )
            approvers = None if args.no_trust else _approvers_of(args)
            key = make_key(path, (principal,), approvers)
    except OSError as exc:
        raise OarlockError(f"cannot write {path}: {exc.strerror}", code="usage") from None
    # printed once everything is on disk: a reader that goes away loses lines, not trust
    print(f"approver key {key_id(key.public_key())} for {line(principal)}: {line(path)} "
          "(mode 0600)")  # fmt: skip
    print(f"public key: {line(public)}")
    if approvers is not None:
        print(f"trusted in {line(approvers)}")
    return EXIT_OK


def _list(args: argparse.Namespace) -> int:
    path = _approvers_of(args)
    if not path.exists():
        raise OarlockError(f"no approvers file at {path}", code="not_found")
    trusted = TrustedApprovers.from_file(path)
    rows: list[dict[str, Any]] = [
        {"keyId": k.key_id, "principals": list(k.principals)} for k in trusted.entries()
    ]
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

"""Approver key files: the user's own key, made on first use, and the trust entry of a key.

**The user's own key** (:func:`user_key`): ``$OARLOCK_APPROVER_KEY``, else
``$XDG_CONFIG_HOME/oarlock/approver.key``. When the default file does not exist, the first
process that needs it (a decision with no key named: ``oarlock approve``,
``Runner.decide``, ``oarlock serve``, a Temporal worker) makes it: an Ed25519 key, mode
0600, in a folder made 0700, trusted in the user's approvers file
(:func:`~oarlock.governance._approvers.default_approvers_path`) for any principal. A file
named by ``$OARLOCK_APPROVER_KEY`` is never made: one that is missing is an error.

**Writes, in this order** (:func:`make_key`, also what ``oarlock keys create`` does):

1. the trust entry: the approvers file rewritten whole with the public key as PEM text in
   it (a temporary file beside it, flushed to disk, renamed over it, the folder flushed);
2. the private key: a temporary file, flushed, then linked to its name, which fails if
   the name exists (a key file is never overwritten, whoever races);
3. its public half (``.pub``), the same way.

An interruption leaves nothing, a trust entry for a key nobody holds (harmless: its
private half was in the memory of the process that died), or a key trusted already whose
``.pub`` is missing; never a key that is not trusted. Two processes making the key at once
take turns on a lock (``flock`` of ``.approver.key.lock`` beside the key; writers of an
approvers file take ``.approvers.yaml.lock``, always after the key's), so one key is made
and the other process uses it; the exclusive link refuses a second key even without the
lock."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from oarlock.errors import ConfigError, UsageError
from oarlock.governance._approvers import (
    ApproverKey,
    _read,
    _read_keys,
    default_approvers,
    default_approvers_path,
    default_key_path,
    principal_for,
    process_approver,
)
from oarlock.governance._ledger import generate_key, key_id, load_private_key, public_key_pem

__all__ = [
    "UNAVAILABLE",
    "UserKey",
    "default_signer",
    "locked",
    "make_key",
    "mend_public",
    "private_folder",
    "trust_key",
    "user_key",
    "write_new",
]

UNAVAILABLE = "approver_key_unavailable"
"""The code of the ConfigError raised when the user's key cannot be made or read."""

_HEADER = "# Keys whose signed approvals oarlock accepts (oarlock keys create).\n"
_log = logging.getLogger("oarlock.approvers")


# -- files ---------------------------------------------------------------------------------


def private_folder(folder: Path) -> None:
    """Make ``folder`` (0700 for each folder oarlock creates)."""
    if not folder.exists():  # another process may make it meanwhile
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold the lock of ``path`` (``flock`` of ``.NAME.lock`` beside it) while the block
    runs. Its folder must exist."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - no flock here: the exclusive link still holds
        yield
        return
    fd = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # which releases the lock


def _fsync_folder(folder: Path) -> None:
    with contextlib.suppress(OSError):  # a folder that cannot be opened or flushed
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _temporary(path: Path, data: bytes, mode: int) -> str:
    """A temporary file beside ``path`` holding ``data``, flushed to disk."""
    import tempfile

    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), mode)  # whatever the umask
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return tmp


def write_new(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to ``path``, which must not exist (FileExistsError otherwise, and
    nothing is changed): complete or not there at all."""
    tmp = _temporary(path, data, mode)
    try:
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise
        except OSError as exc:  # no hard links here: an exclusive create instead
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
                raise
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
    finally:
        Path(tmp).unlink(missing_ok=True)
    _fsync_folder(path.parent)


def _write_replacing(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` at once (a reader sees the old file or the new one),
    keeping its mode (0600 for a new file)."""
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        mode = 0o600
    tmp = _temporary(path, data, mode)
    try:
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_folder(path.parent)


# -- trust entries ---------------------------------------------------------------------------


def _dumped(entries: list[Any]) -> str:
    import yaml

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True  # the reader refuses anchors and aliases

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        style = "|" if "\n" in value else None  # a PEM key as a block
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    dumped: str = yaml.dump(
        {"approvers": entries}, Dumper=Dumper, sort_keys=False, allow_unicode=True
    )
    return _HEADER + dumped


def trust_key(approvers: Path, private: Ed25519PrivateKey, principals: Sequence[str]) -> None:
    """Add an entry trusting ``private``'s public key for ``principals`` to the approvers
    file (made if missing), at once (see the module). A file that is not valid is refused
    (ConfigError), never extended; the file is read back and checked after."""
    entry: dict[str, Any] = (
        {"principal": principals[0]}
        if len(principals) == 1 and not any(c in principals[0] for c in "*?[")
        else {"principals": list(principals)}
    )
    entry["key"] = public_key_pem(private)
    if approvers.is_symlink():  # the file it links to is changed, the link kept
        approvers = approvers.resolve()
    private_folder(approvers.parent)
    with locked(approvers):
        entries: list[Any] = []
        if approvers.exists():
            _read_keys(approvers)  # every entry valid, or the file is left as it is
            entries = list(_read(approvers))
        _write_replacing(approvers, _dumped([*entries, entry]).encode("utf-8"))
        keys, _ = _read_keys(approvers)
    if key_id(private.public_key()) not in keys:  # pragma: no cover - a rule of the reader
        raise ConfigError(f"{approvers}: the entry written does not read back")


def _public_path(path: Path) -> Path:
    return path.with_name(path.name + ".pub")


def _private_pem(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def make_key(path: Path, principals: Sequence[str], approvers: Path | None) -> Ed25519PrivateKey:
    """A new key at ``path`` (and ``path.pub``), trusted first in ``approvers`` for
    ``principals`` (unless None); the caller holds ``locked(path)``. UsageError (code
    ``file_exists``) when either file exists: nothing is overwritten."""
    public = _public_path(path)
    for existing in (path, public):
        if existing.exists() or existing.is_symlink():
            raise UsageError(f"{existing} already exists; not overwritten", code="file_exists")
    key = generate_key()
    if approvers is not None:
        trust_key(approvers, key, principals)
    try:
        write_new(path, _private_pem(key), 0o600)
    except FileExistsError:
        raise UsageError(f"{path} already exists; not overwritten", code="file_exists") from None
    with contextlib.suppress(FileExistsError):  # made by a racer without the lock: theirs
        write_new(public, public_key_pem(key).encode("ascii"), 0o644)
    return key


def mend_public(path: Path, key: Ed25519PrivateKey) -> bool:
    """Write ``path.pub`` when an interruption left ``path`` without it; whether it was
    written. UsageError when it exists and holds another key."""
    public = _public_path(path)
    if not public.exists():
        write_new(public, public_key_pem(key).encode("ascii"), 0o644)
        return True
    try:
        held = public.read_text("utf-8", "replace")
    except OSError as exc:
        raise UsageError(f"cannot read {public}: {exc.strerror}", code="file_exists") from None
    if held.strip() != public_key_pem(key).strip():
        raise UsageError(
            f"{public} does not hold the public half of {path}; move one of them away",
            code="file_exists",
        )
    return False


# -- the user's own key ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UserKey:
    """The user's approver key: its file, and whether this process made it just now (and
    trusted it in ``approvers``)."""

    private_key: Ed25519PrivateKey = field(repr=False)
    path: Path
    made: bool = False
    approvers: Path | None = None
    key_id: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key_id", key_id(self.private_key.public_key()))


_LOADED: dict[Path, tuple[tuple[int, ...], UserKey]] = {}
_LOADED_LOCK = threading.Lock()


def _unavailable(path: Path, exc: BaseException) -> ConfigError:
    why = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return ConfigError(f"cannot make the approver key {path}: {why}", code=UNAVAILABLE)


def _loaded(path: Path) -> UserKey | None:
    """The key at ``path`` if it exists (read again when the file changes)."""
    try:
        s = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        why = f"{path}: cannot read the key file ({exc.strerror})"
        raise ConfigError(why, code="key_invalid") from None
    stamp = (s.st_dev, s.st_ino, s.st_size, s.st_mtime_ns)
    with _LOADED_LOCK:
        cached = _LOADED.get(path)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    found = UserKey(load_private_key(path), path)
    with _LOADED_LOCK:
        _LOADED[path] = (stamp, found)
    return found


def user_key() -> UserKey:
    """The user's approver key, made on first use (see the module). ConfigError: code
    ``key_invalid`` for a key file that is not a key or a missing
    ``$OARLOCK_APPROVER_KEY``; code ``approver_key_unavailable`` when it cannot be made
    (no home folder, a folder that cannot be written)."""
    try:
        path = default_key_path()
    except RuntimeError as exc:  # no home folder to find the configuration in
        raise ConfigError(f"cannot find the approver key: {exc}", code=UNAVAILABLE) from None
    found = _loaded(path)
    if found is not None:
        return found
    if "OARLOCK_APPROVER_KEY" in os.environ:
        raise ConfigError(
            f"$OARLOCK_APPROVER_KEY names {path}, which does not exist (make it with: "
            "oarlock keys create)",
            code="key_invalid",
        )
    try:
        approvers = default_approvers_path()
        private_folder(path.parent)
        with locked(path):
            found = _loaded(path)  # made by another process meanwhile
            if found is not None:
                return found
            key = make_key(path, ("*",), approvers)
    except (OSError, RuntimeError) as exc:
        raise _unavailable(path, exc) from None
    made = UserKey(key, path, made=True, approvers=approvers)
    _log.info("made the approver key %s (%s), trusted in %s", made.key_id, path, approvers)
    return made


_SIGNERS: dict[tuple[str, str], ApproverKey] = {}
_SIGNERS_MAX = 64


def default_signer(principal: str | None) -> ApproverKey:
    """Who signs a decision no key was given for: the user's own key (:func:`user_key`),
    as ``principal``, else as the one principal the user's approvers file trusts it for,
    else as ``human``. When the key cannot be made, this process's own key (which no other
    process trusts), said in a warning; a key file that is not valid is an error."""
    try:
        user = user_key()
    except ConfigError as exc:
        if exc.code != UNAVAILABLE:
            raise
        _log.warning("%s; signed with this process's own key, which no other process trusts", exc)
        return process_approver(principal or "human")
    who = principal or principal_for(user.key_id, default_approvers()) or "human"
    signer = _SIGNERS.get((user.key_id, who))
    if signer is None or signer.private_key is not user.private_key:
        if len(_SIGNERS) >= _SIGNERS_MAX:
            _SIGNERS.pop(next(iter(_SIGNERS)))
        signer = _SIGNERS[(user.key_id, who)] = ApproverKey(who, user.private_key)
    return signer

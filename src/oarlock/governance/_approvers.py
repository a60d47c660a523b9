"""Authenticated approvals: who may approve, and proof that they did.

A row in a database is not an approval: anyone who can write the database could add one.
An approval a human gives is therefore a signed statement. The approver holds an Ed25519
signing key (:class:`ApproverKey`, kept outside the database with mode 0600) and signs the
approval's canonical body: its id, run, call, tool, arguments hash, scope, principal, time,
expiry and key id (the JCS form of the ``oarlock-approval/2`` record without its
``signature``). Before a call runs, the governed executor checks the signature against the
public keys it trusts (:class:`TrustedApprovers`, configured outside the database: an
``approvers`` file named by the agent file, or given in Python) and that the key is
trusted for the principal the approval names; otherwise the call is refused (``Denied``,
code ``approval_unauthenticated``).

An approvers file is YAML::

    approvers:
      - principal: user:ana              # the principal this key may approve as
        key: ana.pub                     # a PEM public key file (relative to this file)
      - principals: ["user:*"]           # globs: a service that signs for the people it
        key: |                           # authenticates (an approval inbox)
          -----BEGIN PUBLIC KEY-----
          ...
          -----END PUBLIC KEY-----

**Trust follows the file.** An approvers file is read again whenever it changes (its
inode, size, modification or change time, or those of a key file it names): it is looked
at before every check of an approval (so before any call runs under one) and every
decision, and at most a second apart for anything else (a listing). A key removed from the
file is refused from then on, a key added is honoured, in every process that reads it. A
file that cannot be read, or is no longer valid, trusts no key until it is mended (fail
closed), and the refusal says why.

**An agent that names no approvers** (:func:`default_approvers`) trusts approvals signed in
this very process (with a key of its own, made when first needed and never stored) or by a
key that the user's approvers file (``$OARLOCK_APPROVERS``, else
``$XDG_CONFIG_HOME/oarlock/approvers.yaml``) trusts. The user's own approver key
(``$OARLOCK_APPROVER_KEY``, else ``$XDG_CONFIG_HOME/oarlock/approver.key``) is made on first
use and trusted there for any principal (see :mod:`oarlock.governance._userkey`), so a
decision made by one process of the user is honoured by any other of the same user (a
resume, a worker, a server), while a row written into the database by anyone else is
still refused.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import fnmatch
import math
import os
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from oarlock.errors import ConfigError, IntegrityError, UsageError
from oarlock.formats._jcs import canonicalize
from oarlock.governance._ledger import (
    LedgerEntry,
    LedgerProblem,
    key_id,
    load_private_key,
    load_public_key,
)
from oarlock.governance._records import Approval

__all__ = [
    "ApproverKey",
    "DefaultApprovers",
    "FileApprovers",
    "approval_problems",
    "TrustedApprovers",
    "TrustedKey",
    "default_approvers",
    "default_approvers_path",
    "default_key_path",
    "in_process_approvers",
    "principal_for",
    "process_approver",
]

_SIGNATURE_BYTES = 64
_VERIFIED_MAX = 4096
_VERIFIED: dict[tuple[bytes, str, bytes], None] = {}
_VERIFIED_LOCK = threading.Lock()


def _raw(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _remember(public: bytes, signature: str, body: bytes) -> None:
    """Keep (key, signature, signed bytes) that verified, or that this process signed: the
    same statement is then not verified again (an Ed25519 check costs about 0.1 ms). A
    key's signature over these exact bytes proves the same thing however often it is read."""
    with _VERIFIED_LOCK:
        if len(_VERIFIED) >= _VERIFIED_MAX:
            _VERIFIED.pop(next(iter(_VERIFIED)))
        _VERIFIED[(public, signature, body)] = None


@dataclass(frozen=True, slots=True)
class ApproverKey:
    """An approver's signing key and the principal it signs as."""

    principal: str
    private_key: Ed25519PrivateKey = field(repr=False)
    key_id: str = field(init=False, repr=False)
    public_raw: bytes = field(init=False, repr=False)

    def __post_init__(self) -> None:
        public = self.private_key.public_key()  # derived once: about 30 us each time
        object.__setattr__(self, "key_id", key_id(public))
        object.__setattr__(self, "public_raw", _raw(public))

    @classmethod
    def generate(cls, principal: str) -> ApproverKey:
        """A new random key (kept in memory only, unless saved)."""
        return cls(principal, Ed25519PrivateKey.generate())

    @classmethod
    def load(cls, path: str | os.PathLike[str], principal: str) -> ApproverKey:
        """The key in the PEM file at ``path`` (ConfigError, code ``key_invalid``)."""
        return cls(principal, load_private_key(path))

    @property
    def public_key(self) -> Ed25519PublicKey:
        return self.private_key.public_key()

    def sign(self, approval: Approval) -> Approval:
        """``approval`` as this approver's signed statement (its principal and key id set)."""
        unsigned = dataclasses.replace(
            approval, principal=self.principal, key_id=self.key_id, signature=None
        )
        body = canonicalize(unsigned.signed_body())
        signature = base64.b64encode(self.private_key.sign(body)).decode("ascii")
        _remember(self.public_raw, signature, body)
        return dataclasses.replace(unsigned, signature=signature)


@dataclass(frozen=True, slots=True)
class TrustedKey:
    """A public key and the principals (globs) it may approve as."""

    public_key: Ed25519PublicKey = field(repr=False)
    principals: tuple[str, ...]
    source: str = "configured"
    key_id: str = field(init=False)
    public_raw: bytes = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key_id", key_id(self.public_key))
        object.__setattr__(self, "public_raw", _raw(self.public_key))

    def allows(self, principal: str) -> bool:
        return any(fnmatch.fnmatchcase(principal, p) for p in self.principals)


class TrustedApprovers:
    """The keys whose signatures make an approval: configured outside the database.

    This one holds the keys it was given; :meth:`from_file` gives one that follows its
    file (see the module)."""

    def __init__(self, keys: Iterable[TrustedKey] = (), *, source: str = "") -> None:
        self._keys: dict[str, TrustedKey] = {}
        self.source = source
        for k in keys:
            self.add(k)

    @classmethod
    def of(cls, *approvers: ApproverKey) -> TrustedApprovers:
        """Trust these approvers' keys, each for its own principal."""
        return cls(TrustedKey(a.public_key, (a.principal,), "in process") for a in approvers)

    def _view(self, fresh: bool) -> tuple[Mapping[str, TrustedKey], str | None]:
        """The keys trusted now, by key id, and why some may be missing (an approvers file
        that cannot be read). ``fresh``: as they stand now, else as they stood at most a
        second ago."""
        return self._keys, None

    def add(self, key: TrustedKey) -> None:
        self._keys[key.key_id] = key

    def __bool__(self) -> bool:
        return bool(self._view(False)[0])

    def __len__(self) -> int:
        return len(self._view(False)[0])

    def entries(self) -> list[TrustedKey]:
        return list(self._view(False)[0].values())

    def key(self, key_id: str) -> TrustedKey | None:
        """The trusted key of this id, as trust stands now."""
        return self._view(True)[0].get(key_id)

    def trusts(self, signer: ApproverKey) -> bool:
        trusted = self.key(signer.key_id)
        return trusted is not None and trusted.allows(signer.principal)

    def problem(self, approval: Approval, *, fresh: bool = True) -> str | None:
        """Why ``approval`` is not an authenticated statement of its principal, or None.
        ``fresh`` (the default, and what the executor asks before a call runs): judged by
        the trust as it stands now."""
        if approval.key_id is None or approval.signature is None:
            return "the approval is not signed by an approver's key"
        keys, broken = self._view(fresh)
        trusted = keys.get(approval.key_id)
        if trusted is None:
            why = f" ({broken})" if broken else ""
            return f"the approval is signed by {approval.key_id}, which is not a trusted key{why}"
        if not trusted.allows(approval.principal):
            return f"key {approval.key_id} is not trusted to approve as {approval.principal!r}"
        body = canonicalize(approval.signed_body())
        if (trusted.public_raw, approval.signature, body) in _VERIFIED:
            return None  # this very statement was signed or verified here before
        try:
            raw = base64.b64decode(approval.signature.encode("ascii"), validate=True)
            if len(raw) != _SIGNATURE_BYTES:
                raise InvalidSignature
            trusted.public_key.verify(raw, body)
        except (InvalidSignature, binascii.Error, UnicodeEncodeError, ValueError):
            return f"the approval's signature does not verify with key {approval.key_id}"
        _remember(trusted.public_raw, approval.signature, body)
        return None

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> TrustedApprovers:
        """The keys an approvers file trusts (see the module documentation), read again
        whenever the file changes. ConfigError (code ``approvers_invalid``) naming the
        file, the entry and the rule when it is not valid now."""
        return FileApprovers(Path(path))


# -- approvers files -----------------------------------------------------------------------

_LOOK_EVERY = 1.0  # seconds: the longest a listing of trust goes without looking at its file
_Stat = tuple[int, ...] | None
_Stamp = tuple[_Stat, tuple[_Stat, ...]]


def _stat(path: Path) -> _Stat:
    """What tells that a file changed: its device, inode, size, modification and change
    times (ns); None when there is no such file."""
    try:
        s = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, ValueError) as exc:  # unreadable: a stamp of its own, read to say why
        return (-1, getattr(exc, "errno", None) or 0)
    return (s.st_dev, s.st_ino, s.st_size, s.st_mtime_ns, s.st_ctime_ns)


class FileApprovers(TrustedApprovers):
    """The keys an approvers file trusts, following the file (see the module): read again
    when its stamp (or that of a key file it names) changes, looked at before every check
    of an approval and every decision, at most :data:`_LOOK_EVERY` seconds apart otherwise.
    A file that cannot be read or is not valid trusts no key (fail closed). ``optional``: a
    file that does not exist trusts no key and is no error (the user's own file).
    ``strict``: a file not valid when first read is refused (ConfigError)."""

    def __init__(self, path: Path, *, optional: bool = False, strict: bool = True) -> None:
        super().__init__(source=str(path))
        self.path, self.optional = path, optional
        self._lock = threading.Lock()
        self._looked = -math.inf
        self._seen: _Stamp | None = None
        self._named: tuple[Path, ...] = ()  # the key files the file names
        self._error: ConfigError | None = None
        self._view(True)
        if strict and self._error is not None:
            raise self._error

    def add(self, key: TrustedKey) -> None:
        raise UsageError(f"the keys of {self.path} are the file's: add them to the file")

    def _stamp(self) -> _Stamp:
        return _stat(self.path), tuple(_stat(p) for p in self._named)

    def _view(self, fresh: bool) -> tuple[Mapping[str, TrustedKey], str | None]:
        if not fresh and time.monotonic() - self._looked < _LOOK_EVERY:
            return self._keys, None if self._error is None else str(self._error)
        with self._lock:
            self._looked = time.monotonic()
            before = self._stamp()
            if before != self._seen:
                self._reload(before)
            return self._keys, None if self._error is None else str(self._error)

    def _reload(self, before: _Stamp) -> None:
        named = self._named
        keys: dict[str, TrustedKey] = {}
        try:
            if before[0] is None and self.optional:
                self._named = ()
            else:
                keys, self._named = _read_keys(self.path)
        except ConfigError as exc:  # fail closed: no key, and the refusals say why
            self._keys, self._error, self._seen = {}, exc, before
            return
        self._keys, self._error = keys, None
        # what was read is what the stamp tells only if nothing changed while it was read;
        # else the next look reads again
        after = self._stamp()
        self._seen = after if (named == self._named and after == before) else None


def _read_keys(file: Path) -> tuple[dict[str, TrustedKey], tuple[Path, ...]]:
    """The keys of an approvers file, by key id, and the key files it names."""
    keys: dict[str, TrustedKey] = {}
    named: list[Path] = []
    for i, item in enumerate(_read(file)):
        trusted, key_file = _entry(item, i, file)
        keys[trusted.key_id] = trusted
        if key_file is not None:
            named.append(key_file)
    return keys, tuple(named)


def _read(file: Path) -> list[Any]:
    from oarlock._input import decode_text, read_input
    from oarlock._yaml import load_yaml

    what, code = "approvers file", "approvers_invalid"
    name = str(file)
    raw = load_yaml(
        decode_text(read_input(file, what=what, code=code), name, what=what, code=code),
        name,
        code=code,
    )
    if raw is None:
        return []
    if not isinstance(raw, dict) or set(raw) != {"approvers"}:
        raise _invalid(file, "must be a mapping with one key, 'approvers'")
    items = raw["approvers"] or []
    if not isinstance(items, list):
        raise _invalid(file, "'approvers' must be a list")
    return items


def _invalid(file: Path, message: str) -> ConfigError:
    return ConfigError(f"{file}: {message}", code="approvers_invalid")


def _entry(item: Any, index: int, file: Path) -> tuple[TrustedKey, Path | None]:
    """One entry's trusted key, and the key file it names (None for PEM text)."""
    where = f"approvers[{index}]"
    if not isinstance(item, Mapping):
        raise _invalid(file, f"{where}: must be a mapping with 'principal' and 'key'")
    unknown = sorted(str(k) for k in set(item) - {"principal", "principals", "key"})
    if unknown:
        raise _invalid(file, f"{where}: unknown key {unknown[0]!r} (principal, principals, key)")
    principals = _principals(item, where, file)
    key = item.get("key")
    if not isinstance(key, str) or not key.strip():
        raise _invalid(file, f"{where}.key: must be a PEM file's path or PEM text")
    key_file = None if key.lstrip().startswith("-----BEGIN") else _relative(key, file)
    try:
        pem = key if key_file is None else key_file.read_text("utf-8", "replace")
    except (OSError, ValueError) as exc:
        why = getattr(exc, "strerror", None) or str(exc)
        raise _invalid(file, f"{where}.key: cannot read {key_file} ({why})") from None
    if "PRIVATE KEY" in pem:
        raise _invalid(file, f"{where}.key: holds a private key; list public keys only")
    try:
        public = load_public_key(pem)
    except ConfigError as exc:
        raise _invalid(file, f"{where}.key: {exc}") from None
    return TrustedKey(public, principals, str(file)), key_file


def _principals(item: Mapping[str, Any], where: str, file: Path) -> tuple[str, ...]:
    if ("principal" in item) == ("principals" in item):
        raise _invalid(file, f"{where}: give one of 'principal' or 'principals'")
    raw: Any = [item["principal"]] if "principal" in item else item["principals"]
    if not isinstance(raw, Sequence) or isinstance(raw, str) or not raw:
        raise _invalid(file, f"{where}.principals: must be a non-empty list of names")
    for p in raw:
        if not isinstance(p, str) or not p.strip():
            raise _invalid(file, f"{where}: a principal must be non-empty text, not {p!r}")
    return tuple(raw)


def _relative(path: str, file: Path) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() else file.parent / p


# -- this process's key, and the default trust ---------------------------------------------

_PROCESS_KEY: list[Ed25519PrivateKey] = []
_PROCESS_SIGNERS: dict[str, ApproverKey] = {}  # by principal, the last _SIGNERS_MAX used
_SIGNERS_MAX = 64


def process_approver(principal: str) -> ApproverKey:
    """``principal`` signing with this process's own key: made on first use, held in
    memory only, so that no other process (nor anyone writing the database) has it. The
    signer of a principal is made once (its key id and public bytes derived once) and kept
    for the next decision."""
    signer = _PROCESS_SIGNERS.get(principal)
    if signer is not None:
        return signer
    if not _PROCESS_KEY:
        _PROCESS_KEY.append(Ed25519PrivateKey.generate())
    signer = ApproverKey(principal, _PROCESS_KEY[0])
    if len(_PROCESS_SIGNERS) >= _SIGNERS_MAX:
        _PROCESS_SIGNERS.pop(next(iter(_PROCESS_SIGNERS)))
    _PROCESS_SIGNERS[principal] = signer
    return signer


_USER_FILES_MAX = 16


class DefaultApprovers(TrustedApprovers):
    """What an agent that names no approvers trusts: this process's own key, for any
    principal, and the keys of the user's approvers file (:func:`default_approvers_path`,
    found again on every look, followed as any approvers file; none while it does not
    exist). Nothing of it comes from the database."""

    def __init__(self) -> None:
        own = TrustedKey(process_approver("*").public_key, ("*",), "this process")
        super().__init__([own], source="this process and the user's approvers file")
        self._files: dict[tuple[Path, bool], FileApprovers] = {}
        self._merged: tuple[Mapping[str, TrustedKey], dict[str, TrustedKey]] | None = None

    def user_file(self) -> FileApprovers:
        """The user's approvers file, as the environment names it now."""
        path = default_approvers_path()
        optional = "OARLOCK_APPROVERS" not in os.environ  # a file named must exist
        found = self._files.get((path, optional))
        if found is None:
            if len(self._files) >= _USER_FILES_MAX:
                self._files.pop(next(iter(self._files)))
            found = self._files[(path, optional)] = FileApprovers(
                path, optional=optional, strict=False
            )
        return found

    def _view(self, fresh: bool) -> tuple[Mapping[str, TrustedKey], str | None]:
        keys, broken = self.user_file()._view(fresh)
        if not keys:
            return self._keys, broken
        merged = self._merged
        if merged is None or merged[0] is not keys:
            merged = self._merged = (keys, {**keys, **self._keys})
        return merged[1], broken


@cache
def default_approvers() -> TrustedApprovers:
    """What an agent without configured approvers trusts (:class:`DefaultApprovers`): one
    object for the process, which follows the user's approvers file."""
    return DefaultApprovers()


in_process_approvers = default_approvers  # the name the executor knew it by


def principal_for(key_id: str, trusted: TrustedApprovers) -> str | None:
    """The principal a key signs as when none is named: the one ``trusted`` names for it,
    when it names exactly one and that is no glob; else None."""
    found = trusted.key(key_id)
    if found is None or len(found.principals) != 1:
        return None
    only = found.principals[0]
    return None if any(c in only for c in "*?[") else only


def _config_home() -> Path:
    config = os.environ.get("XDG_CONFIG_HOME", "")
    return Path(config) if os.path.isabs(config) else Path.home() / ".config"


def default_key_path() -> Path:
    """The approver's signing key: ``$OARLOCK_APPROVER_KEY``, else
    ``$XDG_CONFIG_HOME/oarlock/approver.key`` (``~/.config/oarlock/approver.key``)."""
    if explicit := os.environ.get("OARLOCK_APPROVER_KEY"):
        return Path(explicit).expanduser()
    return _config_home() / "oarlock" / "approver.key"


def default_approvers_path() -> Path:
    """The user's approvers file: ``$OARLOCK_APPROVERS``, else
    ``$XDG_CONFIG_HOME/oarlock/approvers.yaml`` (``~/.config/oarlock/approvers.yaml``)."""
    if explicit := os.environ.get("OARLOCK_APPROVERS"):
        return Path(explicit).expanduser()
    return _config_home() / "oarlock" / "approvers.yaml"


def approval_problems(
    entries: Iterable[LedgerEntry], trusted: TrustedApprovers
) -> list[LedgerProblem]:
    """Every human approval in the ledger that is not signed by a key ``trusted`` for its
    principal (code ``approval_unauthenticated``): for a verifier who holds the approvers'
    public keys, that no approval on record was made without an approver."""
    problems = []
    for entry in entries:
        if entry.kind != "approval":
            continue
        try:
            approval = Approval.from_json(entry.body)
        except IntegrityError as exc:
            problems.append(LedgerProblem(entry.seq, "record_invalid", f"entry {entry.seq}: {exc}"))
            continue
        if approval.decided_by != "human":
            continue
        problem = trusted.problem(approval, fresh=False)
        if problem is not None:
            text = (
                f"entry {entry.seq} (approval of call {approval.tool_call_id} of run "
                f"{approval.run_id} by {approval.principal}): {problem}"
            )
            problems.append(LedgerProblem(entry.seq, "approval_unauthenticated", text))
    return problems

"""Authenticated approvals: who may approve, and proof that they did.

A row in a database is not an approval: anyone who can write the database could add one.
An approval a human gives is therefore a signed statement. The approver holds an Ed25519
signing key (:class:`ApproverKey`, made with ``oarlock keys create``, kept outside the
database with mode 0600) and signs the approval's canonical body: its id, run, call, tool,
arguments hash, scope, principal, time, expiry and key id (the JCS form of the
``oarlock-approval/2`` record without its ``signature``). Before a call runs, the governed
executor checks the signature against the public keys it trusts (:class:`TrustedApprovers`,
configured outside the database: an ``approvers`` file named by the agent file, or given
in Python) and that the key is trusted for the principal the approval names; otherwise the
call is refused (``Denied``, code ``approval_unauthenticated``).

An approvers file is YAML::

    approvers:
      - principal: user:ana              # the principal this key may approve as
        key: ana.pub                     # a PEM public key file (relative to this file)
      - principals: ["user:*"]           # globs: a service that signs for the people it
        key: |                           # authenticates (an approval inbox)
          -----BEGIN PUBLIC KEY-----
          ...
          -----END PUBLIC KEY-----

An agent that trusts no key at all still accepts approvals signed in the same process
(each :class:`~oarlock.engine.Runner` then signs with a key of its own, made when it starts
and never stored): a decision made and acted on by one process works without set-up, while
a row written into the database by anyone else is refused. An approval that another
process acts on (``oarlock approve --no-resume``, a worker, a server) needs a configured key.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import fnmatch
import os
import threading
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

from oarlock.errors import ConfigError, IntegrityError
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
    "approval_problems",
    "TrustedApprovers",
    "TrustedKey",
    "default_approvers_path",
    "default_key_path",
    "in_process_approvers",
    "process_approver",
    "user_approvers",
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
    """The keys whose signatures make an approval: configured outside the database."""

    def __init__(self, keys: Iterable[TrustedKey] = (), *, source: str = "") -> None:
        self._keys: dict[str, TrustedKey] = {}
        self.source = source
        for k in keys:
            self.add(k)

    @classmethod
    def of(cls, *approvers: ApproverKey) -> TrustedApprovers:
        """Trust these approvers' keys, each for its own principal."""
        return cls(TrustedKey(a.public_key, (a.principal,), "in process") for a in approvers)

    def add(self, key: TrustedKey) -> None:
        self._keys[key.key_id] = key

    def __bool__(self) -> bool:
        return bool(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def entries(self) -> list[TrustedKey]:
        return list(self._keys.values())

    def trusts(self, signer: ApproverKey) -> bool:
        trusted = self._keys.get(signer.key_id)
        return trusted is not None and trusted.allows(signer.principal)

    def problem(self, approval: Approval) -> str | None:
        """Why ``approval`` is not an authenticated statement of its principal, or None."""
        if approval.key_id is None or approval.signature is None:
            return "the approval is not signed by an approver's key"
        trusted = self._keys.get(approval.key_id)
        if trusted is None:
            return f"the approval is signed by {approval.key_id}, which is not a trusted key"
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
        """Read an approvers file (see the module documentation); ConfigError (code
        ``approvers_invalid``) naming the file, the entry and the rule otherwise."""
        file = Path(path)
        return cls(
            (_entry(item, i, file) for i, item in enumerate(_read(file))),
            source=str(file),
        )


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


def _entry(item: Any, index: int, file: Path) -> TrustedKey:
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
    text = key if key.lstrip().startswith("-----BEGIN") else str(_relative(key, file))
    try:
        pem = text if text is key else Path(text).read_text("utf-8", "replace")
    except OSError as exc:
        raise _invalid(file, f"{where}.key: cannot read {text} ({exc.strerror})") from None
    if "PRIVATE KEY" in pem:
        raise _invalid(file, f"{where}.key: holds a private key; list public keys only")
    try:
        public = load_public_key(pem)
    except ConfigError as exc:
        raise _invalid(file, f"{where}.key: {exc}") from None
    return TrustedKey(public, principals, str(file))


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


@cache
def in_process_approvers() -> TrustedApprovers:
    """What an agent without configured approvers trusts: approvals signed in this very
    process (by :func:`process_approver`), for any principal."""
    key = process_approver("*").public_key
    return TrustedApprovers([TrustedKey(key, ("*",), "this process")], source="this process")


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


def user_approvers() -> TrustedApprovers | None:
    """The user's approvers file when ``$OARLOCK_APPROVERS`` names one (it must exist)
    or the default one exists; None otherwise."""
    path = default_approvers_path()
    if "OARLOCK_APPROVERS" in os.environ or path.exists():
        return TrustedApprovers.from_file(path)
    return None


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
        problem = trusted.problem(approval)
        if problem is not None:
            text = (
                f"entry {entry.seq} (approval of call {approval.tool_call_id} of run "
                f"{approval.run_id} by {approval.principal}): {problem}"
            )
            problems.append(LedgerProblem(entry.seq, "approval_unauthenticated", text))
    return problems

"""The governance ledger: a hash chain of records, with signed checkpoints.

Every governance record (a tool invocation, an approval, a receipt, a reconciliation) is
appended to the ledger as one entry. Entries are numbered ``seq`` = 1, 2, 3, ... without
gaps, and each entry names the hash of the entry before it, so that editing, removing,
inserting or reordering entries shows.

Entries
-------
An entry has six fields:

``seq``
    Its position: 1 for the first entry, then each entry one more than the one before.
``kind``
    One of ``invocation``, ``approval``, ``receipt``, ``reconciliation``.
``at``
    When it was appended, an RFC 3339 date-time string (for example
    ``2026-11-02T09:15:31.000000Z``).
``body``
    The record itself, a JSON object.
``prevHash``
    The ``entryHash`` of entry ``seq - 1``; for entry 1 the genesis hash
    ``sha256:`` followed by 64 zeros.
``entryHash``
    The digest of the entry's other five fields, computed as follows.

The entry hash is the oarlock digest of the JSON object with exactly the five members
``seq`` (a JSON integer), ``kind``, ``at``, ``body`` and ``prevHash``: the object is
serialized in the RFC 8785 JSON Canonicalization Scheme (JCS: members sorted by key, no
insignificant whitespace, numbers in their shortest ECMAScript form, UTF-8), and the hash
is ``sha256:`` followed by the lowercase hexadecimal SHA-256 of those bytes. ``at`` is
hashed as the exact string stored, not as the instant it names. For example, the first
entry's hash is the SHA-256 of the bytes::

    {"at":"2026-11-02T09:15:31.000000Z","body":{...},"kind":"receipt",
     "prevHash":"sha256:0000...0000","seq":1}

(on one line, with the body in its own canonical form). Because ``entryHash`` covers
``prevHash``, each hash covers the whole history before it: changing any earlier entry
changes every later hash.

Chains
------
A ledger is one chain or several: the PostgreSQL store keeps one chain per tenant (so that
writers of different tenants do not wait for one another), the memory and SQLite stores one,
named ``default``. Each chain is numbered and hashed on its own, from the genesis hash, and
is verified on its own.

Checkpoints
-----------
A hash chain alone does not stop someone who rewrites an entry and then recomputes every
hash after it. A checkpoint closes that gap: it is a statement "entry ``seq`` of the ledger
chain ``chain`` has hash ``entryHash``", signed with an Ed25519 key kept away from the
database. Its JSON form is::

    {"type": "oarlock-ledger-checkpoint/2", "chain": "acme", "seq": 120,
     "entryHash": "sha256:...", "at": "2026-11-02T10:00:00.000000Z",
     "keyId": "ed25519:1a2b3c4d5e6f7a8b", "signature": "<base64>"}

A checkpoint of type ``oarlock-ledger-checkpoint/1`` has no ``chain`` member (and its
signature does not cover one): it is a checkpoint of the ``default`` chain. Both are read;
:func:`sign_checkpoint` makes one of the second version when given a chain, of the first
without.

``keyId`` is ``ed25519:`` followed by the first 16 hexadecimal digits of the SHA-256 of the
32-byte raw public key. The signature is the Ed25519 signature over the JCS bytes of the
checkpoint without its ``signature`` member (the object with members ``type``, ``seq``,
``entryHash``, ``at``, ``keyId`` and, in the second version, ``chain``), written in
standard base64 with padding.

Verification
------------
:func:`verify_chain` reads the entries in ``seq`` order, once, and checks for each entry,
in this order, that its fields have the right types (``malformed``), that its ``seq`` is
the next number (``seq_gap``), that its ``entryHash`` is the digest of its content
(``hash_mismatch``), that its ``prevHash`` is the previous entry's hash (``chain_broken``)
and that its kind is known (``unknown_kind``); and, for the receipt of a ``sandbox``-class
call, that the sandbox it ran in is the one its invocation records (``sandbox_mismatch``:
an isolation, egress profile or workspace other than planned, or a call that ran with
none; see :func:`oarlock.formats._rules.sandbox_problem`); and that no approval is on it
twice (``approval_duplicated``) nor used by two invocations of side-effecting calls
(``approval_reused``: a new attempt of a ``read`` or ``sandbox`` call may carry its
approval again). A problem does not end the
walk: it is reported, and the walk goes on from the entry as stored (the next entry is
expected to follow its ``seq`` and to link to its stored ``entryHash``), so that every bad
entry is reported once and a bad entry never hides the state of the entries after it.
Along the way it compares the ledger with each checkpoint: a checkpoint whose entry has
another hash (``checkpoint_mismatch``) means the history up to that entry was rewritten;
when the walk reaches the end, a checkpoint naming an entry after the last one
(``truncated``) means entries were removed from the end. When trusted public keys are
given, every checkpoint's signature is checked first (``unknown_key``, ``bad_signature``),
and a checkpoint that fails is not used for the comparison. Without a checkpoint, a
removed tail and a rewrite that recomputed every later hash cannot be told from an honest
ledger.

Problems are listed earliest first. A problem's ``seq`` is the position at which the
ledger went wrong: the seq the entry there should have (for a missing entry, the missing
seq), or the seq a checkpoint names.

The ``at`` times are not checked for order: clocks can step back, and the order that
counts is ``seq``.
"""

from __future__ import annotations

import base64
import binascii
import copy
import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from oarlock.errors import CanonicalizationError, ConfigError, IntegrityError, UsageError
from oarlock.formats._jcs import canonicalize, digest, digest_bytes
from oarlock.formats._rules import sandbox_problem
from oarlock.formats._time import is_rfc3339

__all__ = [
    "DEFAULT_CHAIN",
    "GENESIS_HASH",
    "LEDGER_ENTRY_KINDS",
    "Checkpoint",
    "entry_hash_canonical",
    "LedgerEntry",
    "LedgerProblem",
    "VerifyReport",
    "checkpoint_message",
    "entry_hash",
    "generate_key",
    "key_id",
    "load_private_key",
    "load_public_key",
    "next_entry",
    "public_key_pem",
    "save_private_key",
    "sign_checkpoint",
    "verify_chain",
    "verify_chains",
]

GENESIS_HASH = "sha256:" + "0" * 64
LEDGER_ENTRY_KINDS = frozenset({"invocation", "approval", "receipt", "reconciliation"})

DEFAULT_CHAIN = "default"
_CHECKPOINT_TYPE_V1 = "oarlock-ledger-checkpoint/1"
_CHECKPOINT_TYPE = "oarlock-ledger-checkpoint/2"
_CHECKPOINT_MEMBERS_V1 = frozenset({"type", "seq", "entryHash", "at", "keyId", "signature"})
_CHECKPOINT_MEMBERS = _CHECKPOINT_MEMBERS_V1 | {"chain"}
_CHAIN_MAX = 256  # characters of a chain's name (a tenant)
_HASH_RE = re.compile(r"sha256:[0-9a-f]{64}", re.ASCII)
_KEY_ID_RE = re.compile(r"ed25519:[0-9a-f]{16}", re.ASCII)
_SIGNATURE_BYTES = 64


# --------------------------------------------------------------------------- entries


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One ledger entry. ``body`` must not be changed after the entry is made."""

    seq: int
    kind: str
    at: str
    body: dict[str, Any]
    prev_hash: str
    entry_hash: str


def entry_hash(seq: int, kind: str, at: str, body: Mapping[str, Any], prev_hash: str) -> str:
    """The hash of an entry: the digest of ``{"seq", "kind", "at", "body", "prevHash"}``.

    Raises :class:`~oarlock.errors.CanonicalizationError` when ``body`` has no JCS form.
    """
    return digest({"seq": seq, "kind": kind, "at": at, "body": body, "prevHash": prev_hash})


def _plain(text: str) -> bool:
    """Text whose JSON string is itself in quotes (printable ASCII, no quote or backslash)."""
    return text.isascii() and text.isprintable() and '"' not in text and "\\" not in text


def entry_hash_canonical(seq: int, kind: str, at: str, body_jcs: bytes, prev_hash: str) -> str:
    """:func:`entry_hash` from the body's JCS bytes, which a store keeps anyway.

    JCS writes an object's members sorted by name (``at``, ``body``, ``kind``, ``prevHash``,
    ``seq``) with canonical values, so the entry's form is those members around the body's
    own canonical bytes; property tests hold it byte-identical to :func:`entry_hash`."""
    if not (type(seq) is int and _plain(at) and _plain(kind) and _plain(prev_hash)
            and abs(seq) < 2**53):  # fmt: skip
        return entry_hash(seq, kind, at, json.loads(body_jcs), prev_hash)
    # text that needs no escaping and a safe integer: written as they are, they are JCS
    return digest_bytes(
        f'{{"at":"{at}","body":'.encode()
        + body_jcs
        + f',"kind":"{kind}","prevHash":"{prev_hash}","seq":{seq}}}'.encode()
    )


def next_entry(head: LedgerEntry | None, kind: str, at: str, body: dict[str, Any]) -> LedgerEntry:
    """The entry that follows ``head`` (the first entry when ``head`` is None).

    ``body`` is copied, so later changes to the caller's dict do not reach the entry.
    Raises :class:`~oarlock.errors.UsageError` (code ``ledger_entry_invalid``) for an unknown
    kind, a time that is not RFC 3339 or a body that is not a JSON object, and
    :class:`~oarlock.errors.CanonicalizationError` for a body with no JCS form.
    """
    if kind not in LEDGER_ENTRY_KINDS:
        kinds = ", ".join(sorted(LEDGER_ENTRY_KINDS))
        raise UsageError(
            f"unknown ledger entry kind {kind!r}: use one of {kinds}", code="ledger_entry_invalid"
        )
    if not is_rfc3339(at):
        raise UsageError(
            f"ledger entry time {at!r} is not an RFC 3339 date-time", code="ledger_entry_invalid"
        )
    if not isinstance(body, dict):
        raise UsageError(
            f"ledger entry body must be a JSON object (dict), not {type(body).__name__}",
            code="ledger_entry_invalid",
        )
    seq = 1 if head is None else head.seq + 1
    prev = GENESIS_HASH if head is None else head.entry_hash
    body = copy.deepcopy(body)
    return LedgerEntry(seq, kind, at, body, prev, entry_hash(seq, kind, at, body, prev))


# --------------------------------------------------------------------------- checkpoints


def checkpoint_message(
    seq: int, entry_hash: str, at: str, key_id: str, chain: str | None = None
) -> bytes:
    """The bytes a checkpoint signature covers: the JCS form of the unsigned checkpoint
    (of the first version without ``chain``, of the second with it)."""
    if chain is None:
        return canonicalize(
            {"type": _CHECKPOINT_TYPE_V1, "seq": seq, "entryHash": entry_hash, "at": at,
             "keyId": key_id}
        )  # fmt: skip
    return canonicalize(
        {"type": _CHECKPOINT_TYPE, "chain": chain, "seq": seq, "entryHash": entry_hash,
         "at": at, "keyId": key_id}
    )  # fmt: skip


def _invalid(message: str) -> IntegrityError:
    return IntegrityError(f"ledger checkpoint is invalid: {message}", code="checkpoint_invalid")


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A signed statement "entry ``seq`` of the ledger chain ``chain`` has hash
    ``entry_hash``". ``chain`` None is a checkpoint of the first version, which names no
    chain: one of the default chain (see :attr:`ledger_chain`)."""

    seq: int
    entry_hash: str
    at: str
    key_id: str
    signature: str
    chain: str | None = None

    @property
    def ledger_chain(self) -> str:
        """The chain the checkpoint is of."""
        return DEFAULT_CHAIN if self.chain is None else self.chain

    def message(self) -> bytes:
        """The bytes :attr:`signature` signs (see :func:`checkpoint_message`)."""
        return checkpoint_message(self.seq, self.entry_hash, self.at, self.key_id, self.chain)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"type": _CHECKPOINT_TYPE_V1}
        if self.chain is not None:
            data = {"type": _CHECKPOINT_TYPE, "chain": self.chain}
        return data | {
            "seq": self.seq,
            "entryHash": self.entry_hash,
            "at": self.at,
            "keyId": self.key_id,
            "signature": self.signature,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Checkpoint:
        """Read the JSON form; :class:`~oarlock.errors.IntegrityError` (code
        ``checkpoint_invalid``) when a member is missing, unknown or of the wrong form.

        The signature is checked for form (64 bytes, canonical padded base64) but not
        verified: that takes the public key, see :func:`verify_chain`.
        """
        if not isinstance(data, Mapping):
            raise _invalid(f"expected a JSON object, got {type(data).__name__}")
        kind = data.get("type")
        members = _CHECKPOINT_MEMBERS if kind == _CHECKPOINT_TYPE else _CHECKPOINT_MEMBERS_V1
        missing = sorted(members - data.keys())
        if missing:
            raise _invalid(f"missing member(s) {', '.join(missing)}")
        unknown = sorted(str(k) for k in data.keys() - members)
        if unknown:
            raise _invalid(f"unknown member(s) {', '.join(unknown)}")
        if kind not in (_CHECKPOINT_TYPE_V1, _CHECKPOINT_TYPE):
            raise _invalid(
                f"'type' must be {_CHECKPOINT_TYPE!r} or {_CHECKPOINT_TYPE_V1!r}, not {kind!r}"
            )
        chain = data.get("chain")
        if kind == _CHECKPOINT_TYPE and not (
            isinstance(chain, str) and 0 < len(chain) <= _CHAIN_MAX
        ):
            raise _invalid(f"'chain' must be a name of 1 to {_CHAIN_MAX} characters")
        seq, hash_, at, kid, sig = (
            data["seq"],
            data["entryHash"],
            data["at"],
            data["keyId"],
            data["signature"],
        )
        if type(seq) is not int or seq < 1:
            raise _invalid(f"'seq' must be an integer of at least 1, not {seq!r}")
        if not isinstance(hash_, str) or not _HASH_RE.fullmatch(hash_):
            raise _invalid(f"'entryHash' must be 'sha256:' and 64 lowercase hex, not {hash_!r}")
        if not is_rfc3339(at):
            raise _invalid(f"'at' must be an RFC 3339 date-time, not {at!r}")
        if not isinstance(kid, str) or not _KEY_ID_RE.fullmatch(kid):
            raise _invalid(f"'keyId' must be 'ed25519:' and 16 lowercase hex, not {kid!r}")
        if not isinstance(sig, str) or _decode_signature(sig) is None:
            raise _invalid("'signature' must be the padded base64 of a 64-byte Ed25519 signature")
        return cls(seq=seq, entry_hash=hash_, at=at, key_id=kid, signature=sig, chain=chain)


def _decode_signature(text: str) -> bytes | None:
    """The 64 signature bytes of canonical padded base64 ``text``, else None."""
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        return None
    if len(raw) != _SIGNATURE_BYTES or base64.b64encode(raw).decode("ascii") != text:
        return None
    return raw


def sign_checkpoint(
    head: LedgerEntry, key: Ed25519PrivateKey, at: str, chain: str | None = None
) -> Checkpoint:
    """A checkpoint for ``head`` (normally the newest entry of its chain), signed with
    ``key``: of the second version, naming ``chain``, when given; else of the first (a
    checkpoint of the default chain)."""
    if chain is not None and not (isinstance(chain, str) and 0 < len(chain) <= _CHAIN_MAX):
        raise UsageError(
            f"a ledger chain is a name of 1 to {_CHAIN_MAX} characters",
            code="ledger_entry_invalid",
        )
    if not is_rfc3339(at):
        raise UsageError(
            f"checkpoint time {at!r} is not an RFC 3339 date-time", code="ledger_entry_invalid"
        )
    kid = key_id(key.public_key())
    signature = key.sign(checkpoint_message(head.seq, head.entry_hash, at, kid, chain))
    return Checkpoint(
        seq=head.seq,
        entry_hash=head.entry_hash,
        at=at,
        key_id=kid,
        signature=base64.b64encode(signature).decode("ascii"),
        chain=chain,
    )


# --------------------------------------------------------------------------- keys


def key_id(public_key: Ed25519PublicKey) -> str:
    """``ed25519:`` + the first 16 hex digits of the SHA-256 of the raw public key."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "ed25519:" + hashlib.sha256(raw).hexdigest()[:16]


def generate_key() -> Ed25519PrivateKey:
    """A new random Ed25519 signing key."""
    return Ed25519PrivateKey.generate()


def save_private_key(key: Ed25519PrivateKey, path: str | os.PathLike[str]) -> None:
    """Write ``key`` to a new file as unencrypted PKCS#8 PEM, readable by its owner only.

    The file is created with mode 0o600; an existing file is never overwritten
    (:class:`~oarlock.errors.UsageError`, code ``file_exists``).
    """
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise UsageError(
            f"{os.fspath(path)} already exists; refusing to overwrite a key file",
            code="file_exists",
        ) from None
    with os.fdopen(fd, "wb") as out:
        if hasattr(os, "fchmod"):
            os.fchmod(out.fileno(), 0o600)  # whatever the umask
        out.write(pem)


def _key_error(where: str, problem: str) -> ConfigError:
    return ConfigError(f"{where}: {problem}", code="key_invalid")


_KEY_FILE_MAX = 64 * 1024  # a PEM key is a few hundred bytes


def _read_key_file(path: str | os.PathLike[str], what: str) -> bytes:
    name = os.fspath(path)
    try:
        with open(name, "rb") as fh:
            data = fh.read(_KEY_FILE_MAX + 1)
    except FileNotFoundError:
        raise _key_error(name, f"{what} file does not exist") from None
    except IsADirectoryError:
        raise _key_error(name, f"is a directory, not a {what} file") from None
    except OSError as exc:
        raise _key_error(name, f"cannot read the {what} file ({exc.strerror})") from None
    except ValueError as exc:  # a NUL in the path
        raise _key_error(name, f"cannot read the {what} file ({exc})") from None
    if len(data) > _KEY_FILE_MAX:
        raise _key_error(name, f"is larger than {_KEY_FILE_MAX} bytes: not a {what} file")
    return data


def _not_ed25519(key: object) -> str:
    return f"holds a {type(key).__name__.lstrip('_')} key, not an Ed25519 key"


def _private_from_pem(data: bytes, where: str) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise _key_error(
            where, "the private key is encrypted; oarlock needs an unencrypted PKCS#8 PEM key"
        ) from None
    except (ValueError, UnsupportedAlgorithm):
        raise _key_error(
            where, "not a PEM private key (expected '-----BEGIN PRIVATE KEY-----')"
        ) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise _key_error(where, _not_ed25519(key))
    return key


def load_private_key(path: str | os.PathLike[str]) -> Ed25519PrivateKey:
    """The Ed25519 private key in the PEM file at ``path``.

    :class:`~oarlock.errors.ConfigError` (code ``key_invalid``) when the file is missing,
    unreadable, not a PEM private key, encrypted, or holds another kind of key.
    """
    return _private_from_pem(_read_key_file(path, "private key"), os.fspath(path))


def public_key_pem(key: Ed25519PrivateKey) -> str:
    """The public half of ``key`` as a SubjectPublicKeyInfo PEM text."""
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode("ascii")
    )


def load_public_key(path_or_pem: str | os.PathLike[str]) -> Ed25519PublicKey:
    """An Ed25519 public key from PEM text or from the path of a PEM file.

    A string that starts with ``-----BEGIN`` (after whitespace) is read as PEM text;
    anything else is a path. The PEM may hold a public key or a private key (whose public
    half is used). :class:`~oarlock.errors.ConfigError` (code ``key_invalid``) otherwise.
    """
    if isinstance(path_or_pem, str) and path_or_pem.lstrip().startswith("-----BEGIN"):
        data, where = path_or_pem.encode("utf-8"), "public key text"
    else:
        data, where = _read_key_file(path_or_pem, "key"), os.fspath(path_or_pem)
    if b"PRIVATE KEY-----" in data:
        return _private_from_pem(data, where).public_key()
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm):
        raise _key_error(
            where, "not a PEM public key (expected '-----BEGIN PUBLIC KEY-----')"
        ) from None
    if not isinstance(key, Ed25519PublicKey):
        raise _key_error(where, _not_ed25519(key))
    return key


# --------------------------------------------------------------------------- verification


@dataclass(frozen=True, slots=True)
class LedgerProblem:
    """One thing wrong with a ledger.

    ``seq`` is the position where the ledger went wrong: for an entry problem, the seq the
    entry there should have (for a missing entry, the missing seq); for a checkpoint
    problem, the checkpoint's seq; None for a problem that is not at one entry, such as a
    truncated tail or a checkpoint that is not one.
    ``code`` is one of ``malformed``, ``seq_gap``, ``hash_mismatch``, ``chain_broken``,
    ``unknown_kind``, ``checkpoint_mismatch``, ``truncated``, ``unknown_key``,
    ``bad_signature``, ``sandbox_mismatch`` (a sandbox-class call's receipt whose sandbox
    is not the one its invocation records, or none), ``approval_reused`` (two invocations
    of side-effecting calls under one approval) and ``approval_duplicated`` (one approval
    appended twice).
    """

    seq: int | None
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """What :func:`verify_chain` found.

    ``entries`` counts the entries that verified; ``head_seq`` and ``head_hash`` are the
    last entry read, as stored (0 and the genesis hash for an empty ledger).
    ``checkpoints_checked`` counts the checkpoints compared with the ledger.
    ``signatures_verified`` is False when no trusted key was given, in which case
    checkpoint signatures were not checked at all.
    """

    ok: bool
    entries: int
    head_seq: int
    head_hash: str
    checkpoints_checked: int
    signatures_verified: bool
    problems: tuple[LedgerProblem, ...]

    @property
    def first(self) -> LedgerProblem | None:
        """The first problem (the earliest in the ledger), or None when all is well."""
        return self.problems[0] if self.problems else None


def _describe(entry: LedgerEntry) -> str:
    return f"entry {entry.seq} ({entry.kind})"


def _field_types(entry: LedgerEntry, expected: int) -> str:
    wanted = (
        ("seq", int, entry.seq),
        ("kind", str, entry.kind),
        ("at", str, entry.at),
        ("body", dict, entry.body),
        ("prev_hash", str, entry.prev_hash),
        ("entry_hash", str, entry.entry_hash),
    )
    bad = [
        f"{name} is {type(value).__name__}, not {kind.__name__}"
        for name, kind, value in wanted
        if not isinstance(value, kind) or (kind is int and type(value) is not int)
    ]
    return f"entry {expected}: {'; '.join(bad)}"


def _well_typed(entry: object) -> bool:
    return (
        isinstance(entry, LedgerEntry)
        and type(entry.seq) is int
        and isinstance(entry.kind, str)
        and isinstance(entry.at, str)
        and isinstance(entry.body, dict)
        and isinstance(entry.prev_hash, str)
        and isinstance(entry.entry_hash, str)
    )


def _entry_problem(entry: object, expected: int, prev: str) -> LedgerProblem | None:
    """The first thing wrong with ``entry`` at position ``expected`` after hash ``prev``."""
    if not isinstance(entry, LedgerEntry):
        return LedgerProblem(
            expected, "malformed", f"entry {expected}: got a {type(entry).__name__}, not an entry"
        )
    if not _well_typed(entry):
        return LedgerProblem(expected, "malformed", _field_types(entry, expected))
    if entry.seq != expected:
        after = f" after entry {expected - 1}" if expected > 1 else " first"
        if entry.seq > expected:
            gone = (
                f"entry {expected} is"
                if entry.seq == expected + 1
                else f"entries {expected} to {entry.seq - 1} are"
            )
            tail = f"{gone} missing or out of order"
        else:
            tail = "entries are out of order or duplicated"
        text = f"expected entry {expected}{after} but found {_describe(entry)}: {tail}"
        return LedgerProblem(expected, "seq_gap", text)
    try:
        computed = entry_hash(entry.seq, entry.kind, entry.at, entry.body, entry.prev_hash)
    except CanonicalizationError as exc:
        return LedgerProblem(
            expected, "malformed", f"{_describe(entry)}: the body has no canonical form ({exc})"
        )
    if computed != entry.entry_hash:
        return LedgerProblem(
            expected,
            "hash_mismatch",
            f"{_describe(entry)}: stored hash does not match its content; it was edited",
        )
    if entry.prev_hash != prev:
        if expected == 1:
            text = (
                f"{_describe(entry)}: does not start from the genesis hash; "
                "entries before it were removed"
            )
        else:
            text = (
                f"{_describe(entry)}: its previous-hash link does not match entry "
                f"{expected - 1}; an entry before it was removed, replaced or inserted"
            )
        return LedgerProblem(expected, "chain_broken", text)
    if entry.kind not in LEDGER_ENTRY_KINDS:
        return LedgerProblem(
            expected,
            "unknown_kind",
            f"{_describe(entry)}: {entry.kind!r} is not a ledger entry kind",
        )
    return None


def _signature_problem(
    cp: Checkpoint, trusted: Mapping[str, Ed25519PublicKey]
) -> LedgerProblem | None:
    """What is wrong with the signature of ``cp`` (None if it verifies)."""
    where = f"checkpoint of entry {cp.seq} (at {cp.at})"
    public = trusted.get(cp.key_id)
    if public is None:
        return LedgerProblem(
            cp.seq, "unknown_key", f"{where}: signed by {cp.key_id}, which is not a trusted key"
        )
    raw = _decode_signature(cp.signature)
    try:
        if raw is None:
            raise InvalidSignature
        public.verify(raw, cp.message())
    except InvalidSignature:
        return LedgerProblem(
            cp.seq,
            "bad_signature",
            f"{where}: the signature does not verify with key {cp.key_id}; "
            "the checkpoint was forged or altered",
        )
    return None


def _checkpoint_shape_problem(cp: object) -> LedgerProblem | None:
    if not isinstance(cp, Checkpoint):
        return LedgerProblem(None, "malformed", f"got a {type(cp).__name__}, not a checkpoint")
    if type(cp.seq) is not int or cp.seq < 1:
        return LedgerProblem(None, "malformed", f"checkpoint seq {cp.seq!r} is not a positive int")
    fields = (cp.entry_hash, cp.at, cp.key_id, cp.signature, cp.ledger_chain)
    if not all(isinstance(f, str) for f in fields):
        return LedgerProblem(
            cp.seq, "malformed", f"checkpoint of entry {cp.seq}: wrong field types"
        )
    return None


def _sandbox_entry_problem(
    entry: object, sandboxed: dict[str, dict[str, Any]]
) -> LedgerProblem | None:
    """A receipt whose sandbox is not its invocation's (``sandbox_mismatch``): the
    invocations of ``sandbox``-class calls are remembered as they are read."""
    if not isinstance(entry, LedgerEntry) or not isinstance(entry.body, dict):
        return None
    body = entry.body
    if entry.kind == "invocation" and body.get("sideEffectClass") == "sandbox":
        invocation_id = body.get("invocationId")
        if isinstance(invocation_id, str):
            sandboxed[invocation_id] = body
        return None
    if entry.kind != "receipt":
        return None
    key = body.get("invocationId")
    invocation = sandboxed.get(key) if isinstance(key, str) else None
    if invocation is None:
        return None
    problem = sandbox_problem(invocation, body)
    if problem is None:
        return None
    text = f"{_describe(entry)}: invocation {body.get('invocationId')}: {problem}"
    return LedgerProblem(entry.seq, "sandbox_mismatch", text)


_NO_APPROVAL = "00000000-0000-0000-0000-000000000000"
_RERUNNABLE = frozenset({"read", "sandbox"})  # a new attempt of one call may reuse its approval


def _approval_entry_problem(
    entry: object, seen: dict[tuple[str, str], int]
) -> LedgerProblem | None:
    """An approval used twice: a second invocation of a side-effecting call carrying an
    approval id an earlier one carried (``approval_reused``), or an approval appended
    twice (``approval_duplicated``): what a database writer who reset an approval's use
    and replayed it leaves on the ledger."""
    if not isinstance(entry, LedgerEntry) or not isinstance(entry.body, dict):
        return None
    body = entry.body
    if entry.kind == "approval":
        approval_id, what, code = body.get("approvalId"), "approval", "approval_duplicated"
    elif entry.kind == "invocation" and body.get("sideEffectClass") not in _RERUNNABLE:
        approval_id, what, code = body.get("approvalId"), "invocation", "approval_reused"
    else:
        return None
    if not isinstance(approval_id, str) or approval_id == _NO_APPROVAL:
        return None
    first = seen.setdefault((what, approval_id), entry.seq)
    if first == entry.seq:
        return None
    text = (
        f"{_describe(entry)}: approval {approval_id} is on the ledger's {what} of entry "
        f"{first} already; an approval covers one call, once"
    )
    return LedgerProblem(entry.seq, code, text)


def approval_ledger_problem(
    entries: Sequence[LedgerEntry], approval_id: str
) -> tuple[str, str] | None:
    """Why the ledger forbids using approval ``approval_id`` for a side-effecting call
    (code and message), or None. ``entries`` are the ledger from the approval's own entry
    to the chain's head (``GovernanceStore.approval_ledger``): the first must be that
    approval; the others must follow it link by link (each its seq, its hash over its
    content, its ``prevHash`` the entry before), so that an entry removed since is seen
    (``ledger_broken``); and none may be an invocation of a side-effecting call carrying
    the approval (``approval_used``), whatever the rows that index the approval say."""
    if not entries:
        return "ledger_broken", f"approval {approval_id} has no entry on the ledger"
    first = entries[0]
    if first.kind != "approval" or first.body.get("approvalId") != approval_id:
        return "ledger_broken", (
            f"the ledger entry {first.seq} indexed as approval {approval_id} is not that "
            "approval"
        )
    prev: LedgerEntry | None = None
    for entry in entries:
        problem = None if prev is None else _entry_problem(entry, prev.seq + 1, prev.entry_hash)
        if problem is None and prev is None:
            problem = _entry_problem(entry, entry.seq, entry.prev_hash)
        if problem is not None:
            return "ledger_broken", (
                f"the ledger after approval {approval_id} is broken ({problem.code}: "
                f"{problem.message}); nothing runs under it until `oarlock audit verify` "
                "is clean"
            )
        body = entry.body
        if (
            entry.kind == "invocation"
            and body.get("approvalId") == approval_id
            and body.get("sideEffectClass") not in _RERUNNABLE
        ):
            return "approval_used", (
                f"the ledger shows approval {approval_id} used by invocation "
                f"{body.get('invocationId')} (entry {entry.seq}); an approval covers one "
                "call, once"
            )
        prev = entry
    return None


def verify_chain(
    entries: Iterable[LedgerEntry],
    checkpoints: Iterable[Checkpoint] = (),
    public_keys: Iterable[Ed25519PublicKey] = (),
) -> VerifyReport:
    """Check a ledger read in ``seq`` order against its own hashes and its checkpoints.

    ``entries`` is read once, in one pass, holding one entry at a time, so it can be an
    iterator over any number of rows. ``public_keys`` are the trusted checkpoint keys; when
    none is given, signatures are not checked (the report says so) but checkpoints are
    still compared with the ledger. See the module documentation for the checks and codes.
    """
    trusted = {key_id(k): k for k in public_keys}
    found: list[tuple[int, LedgerProblem]] = []  # (rank, problem); rank orders ties

    pending: dict[int, list[Checkpoint]] = {}
    for cp in checkpoints:
        problem = _checkpoint_shape_problem(cp)
        if problem is None and trusted:
            problem = _signature_problem(cp, trusted)
        if problem is not None:
            found.append((1, problem))
        else:
            pending.setdefault(cp.seq, []).append(cp)

    expected, prev, checked, good, last = 1, GENESIS_HASH, 0, 0, 0
    sandboxed: dict[str, dict[str, Any]] = {}  # sandbox-class invocations by id
    approvals: dict[tuple[str, str], int] = {}  # (kind of use, approval id) -> first seq
    for entry in entries:
        crossed = _sandbox_entry_problem(entry, sandboxed) or _approval_entry_problem(
            entry, approvals
        )
        if crossed is not None:
            found.append((0, crossed))
        problem = _entry_problem(entry, expected, prev)
        if problem is not None:
            found.append((0, problem))
            if not _well_typed(entry):
                expected += 1
                continue
            if problem.code == "seq_gap":
                if entry.seq < expected:  # a duplicate or an entry out of order: skip it
                    continue
                # entries are missing: said once; this entry is then checked as what it is
                expected = entry.seq
                later = _entry_problem(entry, expected, entry.prev_hash)
                if later is not None:
                    found.append((0, later))
        else:
            good += 1
        prev, last = entry.entry_hash, expected
        for cp in pending.pop(expected, ()):
            checked += 1
            if cp.entry_hash != prev:
                text = (
                    f"{_describe(entry)}: has hash {prev}, but the checkpoint signed at "
                    f"{cp.at} by {cp.key_id} says {cp.entry_hash}; the history up to "
                    f"entry {expected} was rewritten"
                )
                found.append((1, LedgerProblem(expected, "checkpoint_mismatch", text)))
        expected += 1
    head = last

    # every entry was read: a checkpoint beyond the last one names removed entries
    for seq in sorted(pending):
        for cp in pending[seq]:
            checked += 1
            ends = f"ends at entry {head}; entries after it" if head else "is empty; entries"
            text = (
                f"the checkpoint signed at {cp.at} names entry {seq}, but the ledger "
                f"{ends} were removed"
            )
            found.append((2, LedgerProblem(None, "truncated", text)))

    found.sort(key=lambda rp: (rp[1].seq is None, rp[1].seq or 0, rp[0]))
    problems = tuple(p for _, p in found)
    return VerifyReport(
        ok=not problems,
        entries=good,
        head_seq=head,
        head_hash=prev,
        checkpoints_checked=checked,
        signatures_verified=bool(trusted),
        problems=problems,
    )


def verify_chains(
    chains: Mapping[str, Iterable[LedgerEntry]],
    checkpoints: Iterable[Checkpoint] = (),
    public_keys: Iterable[Ed25519PublicKey] = (),
) -> dict[str, VerifyReport]:
    """:func:`verify_chain` for each chain of a ledger (by name, entries in ``seq``
    order), each against the checkpoints of that chain. A chain that only a checkpoint
    names is checked as an empty chain (its entries were removed: ``truncated``).
    Reports by chain name, in name order."""
    keys = list(public_keys)
    by_chain: dict[str, list[Checkpoint]] = {}
    for cp in checkpoints:
        name = cp.ledger_chain if isinstance(cp, Checkpoint) else DEFAULT_CHAIN
        by_chain.setdefault(name, []).append(cp)
    names = sorted(set(chains) | set(by_chain))
    return {
        name: verify_chain(chains.get(name, ()), by_chain.get(name, ()), keys) for name in names
    }

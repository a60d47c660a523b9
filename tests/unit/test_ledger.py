"""The governance ledger: entry hashes (checked against an independent RFC 8785 + hashlib
computation), every kind of tampering verify_chain must name, signed checkpoints, and the
key files."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import stat
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from oarlock.errors import CanonicalizationError, ConfigError, IntegrityError, UsageError
from oarlock.governance._ledger import (
    GENESIS_HASH,
    LEDGER_ENTRY_KINDS,
    Checkpoint,
    LedgerEntry,
    checkpoint_message,
    entry_hash,
    generate_key,
    key_id,
    load_private_key,
    load_public_key,
    next_entry,
    public_key_pem,
    save_private_key,
    sign_checkpoint,
    verify_chain,
)

# --------------------------------------------------------------------------- helpers

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(name: str) -> dict[str, Any]:
    value = json.loads((EXAMPLES / name).read_text("utf-8"))
    assert isinstance(value, dict)
    return value


def independent_entry_hash(seq: int, kind: str, at: str, body: Any, prev: str) -> str:
    envelope = {"seq": seq, "kind": kind, "at": at, "body": body, "prevHash": prev}
    return "sha256:" + hashlib.sha256(rfc8785.dumps(envelope)).hexdigest()


def _approval(n: int) -> dict[str, Any]:
    return {
        "type": "oarlock-approval/1",
        "approvalId": f"8b7a6c5d-4e3f-4a1b-9c0d-{n:012d}",
        "runId": "0b7f2c7e-3f7a-4d39-9a53-2f5f5a3f9c11",
        "toolCallId": f"call_{n}",
        "toolId": "issue_refund",
        "argumentsHash": "sha256:" + hashlib.sha256(str(n).encode()).hexdigest(),
        "scope": {"tenantId": "acme", "projectId": "support", "environment": "production"},
        "decidedBy": "human",
        "principal": "zoë.müller@example.com",
        "decidedAt": "2026-11-02T09:15:30.000000Z",
        "expiresAt": None,
    }


def _reconciliation(n: int) -> dict[str, Any]:
    return {
        "type": "oarlock-reconciliation/1",
        "reconciliationId": f"rec-{n}",
        "outcome": "succeeded" if n % 2 else "not-applied",
        "evidence": {
            "note": "confirmed by the bank: 払い戻し済み 🚀",
            "amounts": [42.5, 0.1, -7, 1e21, 1e-7, 2**53 - 1],
            "checked": True,
            "nested": {"a": [{"b": None}, [], {}], "Ω": "omega"},
        },
    }


def realistic_body(kind: str, n: int) -> dict[str, Any]:
    if kind == "invocation":
        body = load_example(
            "invocations/refund-spend.json" if n % 2 else "invocations/lookup-read.json"
        )
        body["stepNumber"] = n
        if "approvalId" in body:  # an approval covers one call, once
            body["approvalId"] = f"7a1b2c3d-4e5f-4a6b-8c7d-{n:012d}"
        return body
    if kind == "receipt":
        names = ("refund-succeeded", "lookup-denied", "refund-uncertain")
        return load_example(f"receipts/{names[n % 3]}.json")
    if kind == "approval":
        return _approval(n)
    return _reconciliation(n)


KIND_CYCLE = ("invocation", "approval", "invocation", "receipt", "reconciliation")


def at_time(n: int) -> str:
    return f"2026-11-02T09:{n // 60 % 60:02d}:{n % 60:02d}.{n:06d}Z"


def build_chain(length: int) -> list[LedgerEntry]:
    entries: list[LedgerEntry] = []
    head = None
    for n in range(length):
        kind = KIND_CYCLE[n % len(KIND_CYCLE)]
        head = next_entry(head, kind, at_time(n), realistic_body(kind, n))
        entries.append(head)
    return entries


def rehash(entry: LedgerEntry, **changes: Any) -> LedgerEntry:
    """``entry`` with ``changes`` and an entry hash recomputed to match (a careful forger)."""
    e = dataclasses.replace(entry, **changes)
    return dataclasses.replace(e, entry_hash=entry_hash(e.seq, e.kind, e.at, e.body, e.prev_hash))


def relink(entries: list[LedgerEntry], start: int) -> list[LedgerEntry]:
    """Recompute ``prev_hash`` and ``entry_hash`` from index ``start`` on (history rewrite)."""
    out = list(entries)
    for i in range(start, len(out)):
        prev = out[i - 1].entry_hash if i else GENESIS_HASH
        out[i] = rehash(out[i], seq=i + 1, prev_hash=prev)
    return out


@pytest.fixture(scope="module")
def chain() -> list[LedgerEntry]:
    return build_chain(40)


@pytest.fixture(scope="module")
def key() -> Ed25519PrivateKey:
    return generate_key()


# --------------------------------------------------------------------------- entries


def test_entry_hash_is_sha256_of_the_documented_canonical_bytes() -> None:
    body = {"z": [1, 2.5, "é"], "a": {"y": None, "b": True}}
    expected_bytes = (
        b'{"at":"2026-01-01T00:00:00Z","body":{"a":{"b":true,"y":null},"z":[1,2.5,"\xc3\xa9"]},'
        b'"kind":"receipt","prevHash":"sha256:' + b"0" * 64 + b'","seq":1}'
    )
    expected = "sha256:" + hashlib.sha256(expected_bytes).hexdigest()
    assert entry_hash(1, "receipt", "2026-01-01T00:00:00Z", body, GENESIS_HASH) == expected
    first = next_entry(None, "receipt", "2026-01-01T00:00:00Z", body)
    assert first.entry_hash == expected


def test_next_entry_numbers_links_and_hashes(chain: list[LedgerEntry]) -> None:
    assert chain[0].seq == 1
    assert chain[0].prev_hash == GENESIS_HASH == "sha256:" + "0" * 64
    for i, e in enumerate(chain):
        assert e.seq == i + 1
        assert e.kind in LEDGER_ENTRY_KINDS
        if i:
            assert e.prev_hash == chain[i - 1].entry_hash
        assert e.entry_hash == independent_entry_hash(e.seq, e.kind, e.at, e.body, e.prev_hash)
    assert len({e.entry_hash for e in chain}) == len(chain)


def test_entry_hash_covers_every_field() -> None:
    base = (3, "receipt", "2026-01-01T00:00:00Z", {"x": 1}, "sha256:" + "1" * 64)
    variants = [
        (4, *base[1:]),
        (base[0], "approval", *base[2:]),
        (*base[:2], "2026-01-01T00:00:01Z", *base[3:]),
        (*base[:3], {"x": 2}, base[4]),
        (*base[:4], "sha256:" + "2" * 64),
    ]
    hashes = {entry_hash(*base), *(entry_hash(*v) for v in variants)}
    assert len(hashes) == 6


def test_next_entry_copies_the_body() -> None:
    body: dict[str, Any] = {"amounts": [1, 2], "who": "alice"}
    entry = next_entry(None, "approval", "2026-01-01T00:00:00Z", body)
    body["amounts"].append(3)
    body["who"] = "mallory"
    assert entry.body == {"amounts": [1, 2], "who": "alice"}
    assert verify_chain([entry]).ok


@pytest.mark.parametrize(
    ("kind", "at", "body", "fragment"),
    [
        ("gossip", "2026-01-01T00:00:00Z", {}, "unknown ledger entry kind 'gossip'"),
        ("receipt", "yesterday", {}, "not an RFC 3339"),
        ("receipt", "2026-01-01 00:00:00", {}, "not an RFC 3339"),
        ("receipt", "2026-01-01T00:00:00Z", ["not", "an", "object"], "must be a JSON object"),
    ],
)
def test_next_entry_refuses_bad_arguments(kind: str, at: str, body: Any, fragment: str) -> None:
    with pytest.raises(UsageError, match=fragment) as info:
        next_entry(None, kind, at, body)
    assert info.value.code == "ledger_entry_invalid"


def test_next_entry_refuses_a_body_without_canonical_form() -> None:
    with pytest.raises(CanonicalizationError):
        next_entry(None, "receipt", "2026-01-01T00:00:00Z", {"x": float("nan")})
    with pytest.raises(CanonicalizationError):
        next_entry(None, "receipt", "2026-01-01T00:00:00Z", {"x": 2**60})


# --------------------------------------------------------------------------- clean chains


@pytest.mark.parametrize("length", [0, 1, 2, 5, 40])
def test_untampered_chain_verifies(length: int) -> None:
    entries = build_chain(length)
    report = verify_chain(entries)
    assert report.ok
    assert report.problems == ()
    assert report.first is None
    assert report.entries == length
    assert report.head_seq == length
    assert report.head_hash == (entries[-1].entry_hash if entries else GENESIS_HASH)
    assert report.checkpoints_checked == 0
    assert report.signatures_verified is False


def test_verify_reads_a_generator_once_and_lazily(chain: list[LedgerEntry]) -> None:
    consumed = 0

    def rows() -> Iterator[LedgerEntry]:
        nonlocal consumed
        for e in chain:
            consumed += 1
            yield e

    assert verify_chain(rows()).ok
    assert consumed == len(chain)

    consumed = 0
    edited = dict(chain[9].body, tampered=True)
    bad = [*chain[:9], dataclasses.replace(chain[9], body=edited), *chain[10:]]

    def bad_rows() -> Iterator[LedgerEntry]:
        nonlocal consumed
        for e in bad:
            consumed += 1
            yield e

    report = verify_chain(bad_rows())
    assert report.first is not None
    assert report.first.seq == 10
    assert consumed == 40  # read to the end: a bad entry hides nothing after it
    assert [p.seq for p in report.problems] == [10]


def test_verify_memory_does_not_grow_with_the_ledger() -> None:
    def generated(count: int) -> Iterator[LedgerEntry]:
        head = None
        for n in range(count):
            head = next_entry(head, "receipt", at_time(n), {"n": n, "note": "x" * 400})
            yield head

    tracemalloc.start()
    try:
        report = verify_chain(generated(3000))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report.ok
    assert report.entries == 3000
    # the 3000 entries hold about 1.5 MB of bodies; a streaming walk holds a few entries
    assert peak < 200_000


# --------------------------------------------------------------------------- tampering


@pytest.mark.parametrize("index", [0, 17, 39])
@pytest.mark.parametrize(
    "field",
    ["body_value", "body_nested", "body_added_key", "kind", "at", "prev_hash", "seq_in_body"],
)
def test_edited_entry_is_a_hash_mismatch_at_its_seq(
    chain: list[LedgerEntry], index: int, field: str
) -> None:
    e = chain[index]
    body = json.loads(json.dumps(e.body))
    if field == "body_value":
        first_key = sorted(body)[0]
        body[first_key] = "changed"
        changed = dataclasses.replace(e, body=body)
    elif field == "body_nested":
        body["deep"] = {"list": [1, {"x": "ü"}]}
        changed = dataclasses.replace(e, body=body)
    elif field == "body_added_key":
        body["approvedBy"] = "mallory"
        changed = dataclasses.replace(e, body=body)
    elif field == "kind":
        other = sorted(LEDGER_ENTRY_KINDS - {e.kind})[0]
        changed = dataclasses.replace(e, kind=other)
    elif field == "at":
        changed = dataclasses.replace(e, at="2027-01-01T00:00:00Z")
    elif field == "prev_hash":
        changed = dataclasses.replace(e, prev_hash="sha256:" + "f" * 64)
    else:
        body["seq"] = e.seq + 1
        changed = dataclasses.replace(e, body=body)
    entries = [*chain[:index], changed, *chain[index + 1 :]]
    report = verify_chain(entries)
    assert not report.ok
    assert report.problems == (report.first,)  # one edit, one problem; the rest verifies
    assert report.first is not None
    assert report.first.code == "hash_mismatch"
    assert report.first.seq == index + 1
    assert report.first.message == (
        f"entry {index + 1} ({changed.kind}): stored hash does not match its content; it was edited"
    )
    assert report.entries == len(chain) - 1
    assert report.head_seq == len(chain)
    assert report.head_hash == chain[-1].entry_hash


def test_numerically_equal_body_is_not_an_edit(chain: list[LedgerEntry]) -> None:
    # a store that reads bodies back from JSON text gets 1 for 1.0 and keys in any order
    e = next_entry(chain[-1], "receipt", at_time(99), {"amount": 100.0, "b": 1, "a": 2})
    same = dataclasses.replace(e, body={"a": 2, "b": 1, "amount": 100})
    assert verify_chain([*chain, same]).ok


@pytest.mark.parametrize("index", [0, 1, 20, 38])
def test_deleted_entry_is_a_seq_gap_at_the_missing_seq(
    chain: list[LedgerEntry], index: int
) -> None:
    entries = chain[:index] + chain[index + 1 :]
    report = verify_chain(entries)
    assert report.first is not None
    assert (report.first.code, report.first.seq) == ("seq_gap", index + 1)
    assert f"entry {index + 1} is missing" in report.first.message
    assert f"entry {index + 2} ({chain[index + 1].kind})" in report.first.message
    assert report.problems == (report.first,)  # the entries after the gap verify
    assert report.entries == len(chain) - 2  # all but the one that follows the gap


def test_several_deleted_entries_are_named_as_a_range(chain: list[LedgerEntry]) -> None:
    report = verify_chain(chain[:5] + chain[9:])
    assert report.first is not None
    assert (report.first.code, report.first.seq) == ("seq_gap", 6)
    assert "entries 6 to 9 are missing" in report.first.message


def test_deleted_then_renumbered_entry_is_caught_by_hash(chain: list[LedgerEntry]) -> None:
    # renumbering the following entries without recomputing: the seq is in the hash
    entries = chain[:7] + [dataclasses.replace(e, seq=e.seq - 1) for e in chain[8:]]
    report = verify_chain(entries)
    assert report.first is not None
    assert (report.first.code, report.first.seq) == ("hash_mismatch", 8)


def test_deleted_and_rehashed_entry_is_a_broken_chain(chain: list[LedgerEntry]) -> None:
    # renumbered and every own hash recomputed, but the links left alone
    entries = chain[:7] + [rehash(e, seq=e.seq - 1) for e in chain[8:]]
    report = verify_chain(entries)
    assert report.first is not None
    assert (report.first.code, report.first.seq) == ("chain_broken", 8)
    assert "previous-hash link does not match entry 7" in report.first.message


def test_deleted_last_entry_needs_a_checkpoint(chain: list[LedgerEntry], key: Any) -> None:
    assert verify_chain(chain[:-1]).ok  # nothing in the chain itself shows a cut tail
    checkpoint = sign_checkpoint(chain[-1], key, "2026-11-02T10:00:00Z")
    report = verify_chain(chain[:-1], [checkpoint], [key.public_key()])
    assert report.first is not None
    assert (report.first.code, report.first.seq) == ("truncated", None)
    assert "names entry 40, but the ledger ends at entry 39" in report.first.message


@pytest.mark.parametrize(("i", "j"), [(0, 1), (3, 4), (5, 30), (38, 39)])
def test_swapped_entries_are_a_seq_gap_at_the_first_position(
    chain: list[LedgerEntry], i: int, j: int
) -> None:
    entries = list(chain)
    entries[i], entries[j] = entries[j], entries[i]
    report = verify_chain(entries)
    assert report.first is not None
    assert (report.first.code, report.first.seq) == ("seq_gap", i + 1)
    assert f"entry {j + 1} ({chain[j].kind})" in report.first.message


def test_swapped_bodies_are_hash_mismatches(chain: list[LedgerEntry]) -> None:
    entries = list(chain)
    entries[4] = dataclasses.replace(chain[4], body=chain[9].body, kind=chain[9].kind)
    entries[9] = dataclasses.replace(chain[9], body=chain[4].body, kind=chain[4].kind)
    report = verify_chain(entries)
    assert report.first is not None
    assert (report.first.code, report.first.seq) == ("hash_mismatch", 5)


def test_inserted_entry_with_recomputed_hash_breaks_the_chain(chain: list[LedgerEntry]) -> None:
    # a forged entry 11 that links properly to entry 10; the old entries from 11 on are
    # renumbered and their own hashes recomputed, but their links still name the old chain
    forged = next_entry(chain[9], "approval", at_time(10), _approval(999))
    shifted = [rehash(e, seq=e.seq + 1) for e in chain[10:]]
    report = verify_chain([*chain[:10], forged, *shifted])
    assert report.first is not None
    assert (report.first.code, report.first.seq) == ("chain_broken", 12)
    # every later entry was rehashed, so every later link names a hash that is gone
    assert [(p.code, p.seq) for p in report.problems] == [
        ("chain_broken", seq) for seq in range(12, 42)
    ]
    assert report.entries == 11


def test_inserted_entry_without_renumbering_is_a_seq_gap(chain: list[LedgerEntry]) -> None:
    forged = next_entry(chain[9], "approval", at_time(10), _approval(999))
    report = verify_chain([*chain[:10], forged, *chain[10:]])
    assert report.first is not None
    assert (report.first.code, report.first.seq) == ("seq_gap", 12)
    assert "out of order or duplicated" in report.first.message


def test_replaced_entry_with_recomputed_hash_breaks_the_chain(chain: list[LedgerEntry]) -> None:
    forged = rehash(chain[20], body={**chain[20].body, "approvedBy": "mallory"})
    report = verify_chain([*chain[:20], forged, *chain[21:]])
    assert report.first is not None
    assert (report.first.code, report.first.seq) == ("chain_broken", 22)


def test_first_entry_must_start_at_genesis(chain: list[LedgerEntry]) -> None:
    forged = rehash(chain[0], prev_hash="sha256:" + "a" * 64)
    report = verify_chain([forged, *chain[1:]])
    assert report.first is not None
    assert (report.first.code, report.first.seq) == ("chain_broken", 1)
    assert "genesis" in report.first.message


def test_rewritten_history_passes_alone_and_fails_a_checkpoint(
    chain: list[LedgerEntry], key: Any
) -> None:
    early = sign_checkpoint(chain[9], key, "2026-11-02T09:30:00Z")
    late = sign_checkpoint(chain[-1], key, "2026-11-02T10:00:00Z")
    edited = dataclasses.replace(chain[14], body={**chain[14].body, "amount": 1_000_000})
    rewritten = relink([*chain[:14], edited, *chain[15:]], 14)

    assert verify_chain(rewritten).ok  # a consistent rewrite: only a checkpoint shows it

    report = verify_chain(rewritten, [early, late], [key.public_key()])
    assert not report.ok
    assert report.checkpoints_checked == 2
    assert [(p.code, p.seq) for p in report.problems] == [("checkpoint_mismatch", 40)]
    assert rewritten[-1].entry_hash in report.problems[0].message
    assert late.entry_hash in report.problems[0].message
    assert "rewritten" in report.problems[0].message


def test_truncated_tail_is_caught_by_a_checkpoint(chain: list[LedgerEntry], key: Any) -> None:
    checkpoint = sign_checkpoint(chain[-1], key, "2026-11-02T10:00:00Z")
    report = verify_chain(chain[:25], [checkpoint], [key.public_key()])
    assert not report.ok
    assert [(p.code, p.seq) for p in report.problems] == [("truncated", None)]
    assert report.entries == 25
    assert report.checkpoints_checked == 1
    empty = verify_chain([], [checkpoint], [key.public_key()])
    assert empty.first is not None
    assert empty.first.code == "truncated"
    assert "the ledger is empty" in empty.first.message


def test_unknown_kind_with_a_consistent_hash(chain: list[LedgerEntry]) -> None:
    odd = rehash(chain[3], kind="gossip")
    report = verify_chain([*chain[:3], odd])
    assert report.first is not None
    assert (report.first.code, report.first.seq) == ("unknown_kind", 4)
    assert "'gossip'" in report.first.message


@pytest.mark.parametrize(
    ("item", "fragment"),
    [
        ("not an entry", "got a str, not an entry"),
        ({"seq": 3}, "got a dict, not an entry"),
        ("seq_str", "seq is str, not int"),
        ("seq_bool", "seq is bool, not int"),
        ("body_list", "body is list, not dict"),
        ("nan_body", "no canonical form"),
    ],
)
def test_malformed_entries(chain: list[LedgerEntry], item: Any, fragment: str) -> None:
    third = chain[2]
    replacements = {
        "seq_str": dataclasses.replace(third, seq="3"),
        "seq_bool": dataclasses.replace(third, seq=True),
        "body_list": dataclasses.replace(third, body=[1, 2]),
        "nan_body": dataclasses.replace(third, body={"x": float("inf")}),
    }
    bad = replacements.get(item, item) if isinstance(item, str) else item
    report = verify_chain([*chain[:2], bad, *chain[3:]])
    assert report.first is not None
    assert (report.first.code, report.first.seq) == ("malformed", 3)
    assert fragment in report.first.message


# --------------------------------------------------------------------------- checkpoints


def test_checkpoint_round_trip(chain: list[LedgerEntry], key: Any) -> None:
    checkpoint = sign_checkpoint(chain[-1], key, "2026-11-02T10:00:00Z")
    assert checkpoint.seq == 40
    assert checkpoint.entry_hash == chain[-1].entry_hash
    assert checkpoint.key_id == key_id(key.public_key())

    report = verify_chain(chain, [checkpoint], [key.public_key()])
    assert report.ok
    assert report.checkpoints_checked == 1
    assert report.signatures_verified is True

    # the signature is a plain Ed25519 signature over the documented JCS bytes
    message = checkpoint_message(
        40, chain[-1].entry_hash, "2026-11-02T10:00:00Z", checkpoint.key_id
    )
    assert message == rfc8785.dumps(
        {
            "type": "oarlock-ledger-checkpoint/1",
            "seq": 40,
            "entryHash": chain[-1].entry_hash,
            "at": "2026-11-02T10:00:00Z",
            "keyId": checkpoint.key_id,
        }
    )
    assert message.startswith(b'{"at":"2026-11-02T10:00:00Z","entryHash":"sha256:')
    raw = base64.b64decode(checkpoint.signature, validate=True)
    assert len(raw) == 64
    key.public_key().verify(raw, message)  # raises if wrong


def test_several_checkpoints_all_checked(chain: list[LedgerEntry], key: Any) -> None:
    checkpoints = [sign_checkpoint(chain[i], key, at_time(i)) for i in (0, 9, 9, 39)]
    report = verify_chain(iter(chain), iter(checkpoints), [key.public_key()])
    assert report.ok
    assert report.checkpoints_checked == 4


def test_checkpoint_by_an_untrusted_key_is_unknown_key(chain: list[LedgerEntry], key: Any) -> None:
    other = generate_key()
    checkpoint = sign_checkpoint(chain[-1], other, "2026-11-02T10:00:00Z")
    report = verify_chain(chain, [checkpoint], [key.public_key()])
    assert [(p.code, p.seq) for p in report.problems] == [("unknown_key", 40)]
    assert key_id(other.public_key()) in report.problems[0].message
    assert report.checkpoints_checked == 0  # an untrusted checkpoint is not used


def test_forged_signature_is_bad_signature(chain: list[LedgerEntry], key: Any) -> None:
    good = sign_checkpoint(chain[-1], key, "2026-11-02T10:00:00Z")
    raw = bytearray(base64.b64decode(good.signature))
    raw[5] ^= 0x01
    flipped = dataclasses.replace(good, signature=base64.b64encode(bytes(raw)).decode())
    # signed by another key, claiming the trusted key's id
    impostor = generate_key()
    claimed = base64.b64encode(impostor.sign(good.message())).decode()
    impersonated = dataclasses.replace(good, signature=claimed)
    # the signed statement changed after signing (a forger moving a checkpoint)
    moved = dataclasses.replace(good, seq=39, entry_hash=chain[38].entry_hash)
    garbage = dataclasses.replace(good, signature="not base64!")
    for bad in (flipped, impersonated, moved, garbage):
        report = verify_chain(chain, [bad], [key.public_key()])
        assert [p.code for p in report.problems] == ["bad_signature"], bad
        assert "forged or altered" in report.problems[0].message
        assert report.checkpoints_checked == 0


def test_without_keys_checkpoints_are_compared_but_not_verified(
    chain: list[LedgerEntry], key: Any
) -> None:
    good = sign_checkpoint(chain[-1], key, "2026-11-02T10:00:00Z")
    unsigned = dataclasses.replace(good, entry_hash="sha256:" + "e" * 64, signature="x")
    report = verify_chain(chain, [good, unsigned])
    assert report.signatures_verified is False
    assert report.checkpoints_checked == 2
    assert [(p.code, p.seq) for p in report.problems] == [("checkpoint_mismatch", 40)]


def test_signatures_are_checked_past_a_bad_entry(
    chain: list[LedgerEntry], key: Any
) -> None:
    other = generate_key()
    cp_early = sign_checkpoint(chain[2], other, "2026-11-02T10:00:00Z")
    cp_late = sign_checkpoint(chain[30], other, "2026-11-02T10:00:00Z")
    cp_good = sign_checkpoint(chain[35], key, "2026-11-02T10:00:00Z")
    edited = dataclasses.replace(chain[9], at="2030-01-01T00:00:00Z")
    entries = [*chain[:9], edited, *chain[10:]]
    report = verify_chain(entries, [cp_late, cp_good, cp_early], [key.public_key()])
    # earliest first; the walk goes past the bad entry, so the good checkpoint is checked
    assert [(p.code, p.seq) for p in report.problems] == [
        ("unknown_key", 3),
        ("hash_mismatch", 10),
        ("unknown_key", 31),
    ]
    assert report.checkpoints_checked == 1


def test_checkpoint_json_round_trip(chain: list[LedgerEntry], key: Any) -> None:
    checkpoint = sign_checkpoint(chain[4], key, "2026-11-02T10:00:00.5+01:00")
    data = json.loads(json.dumps(checkpoint.to_json()))
    assert data["type"] == "oarlock-ledger-checkpoint/1"
    assert set(data) == {"type", "seq", "entryHash", "at", "keyId", "signature"}
    again = Checkpoint.from_json(data)
    assert again == checkpoint
    assert verify_chain(chain, [again], [key.public_key()]).ok


def _valid_checkpoint_json() -> dict[str, Any]:
    key = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
    head = next_entry(None, "receipt", "2026-01-01T00:00:00Z", {"x": 1})
    return sign_checkpoint(head, key, "2026-01-01T00:00:01Z").to_json()


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"seq": None}, "'seq' must be an integer"),
        ({"seq": 0}, "'seq' must be an integer"),
        ({"seq": True}, "'seq' must be an integer"),
        ({"seq": "1"}, "'seq' must be an integer"),
        ({"seq": 1.0}, "'seq' must be an integer"),
        ({"entryHash": "sha256:abc"}, "'entryHash'"),
        ({"entryHash": "sha256:" + "A" * 64}, "'entryHash'"),
        ({"at": "noon"}, "'at' must be an RFC 3339"),
        ({"keyId": "ed25519:XYZ"}, "'keyId'"),
        ({"keyId": "rsa:0123456789abcdef"}, "'keyId'"),
        ({"signature": "not base64!"}, "'signature'"),
        ({"signature": base64.b64encode(b"short").decode()}, "'signature'"),
        ({"signature": base64.b64encode(b"\0" * 64).decode().rstrip("=")}, "'signature'"),
        ({"signature": 12}, "'signature'"),
        ({"type": "oarlock-ledger-checkpoint/3"}, "'type' must be"),
        ({"extra": 1}, "unknown member(s) extra"),
    ],
)
def test_malformed_checkpoint_json_is_refused(change: dict[str, Any], fragment: str) -> None:
    data = {**_valid_checkpoint_json(), **change}
    with pytest.raises(
        IntegrityError, match=fragment.replace("(", r"\(").replace(")", r"\)")
    ) as info:
        Checkpoint.from_json(data)
    assert info.value.code == "checkpoint_invalid"
    assert str(info.value).startswith("ledger checkpoint is invalid: ")


@pytest.mark.parametrize("member", ["type", "seq", "entryHash", "at", "keyId", "signature"])
def test_checkpoint_json_missing_member_is_refused(member: str) -> None:
    data = _valid_checkpoint_json()
    del data[member]
    with pytest.raises(IntegrityError, match=f"missing member\\(s\\) {member}") as info:
        Checkpoint.from_json(data)
    assert info.value.code == "checkpoint_invalid"


@pytest.mark.parametrize("data", [[], "checkpoint", None, 7])
def test_checkpoint_json_must_be_an_object(data: Any) -> None:
    with pytest.raises(IntegrityError, match="expected a JSON object") as info:
        Checkpoint.from_json(data)
    assert info.value.code == "checkpoint_invalid"


def test_sign_checkpoint_refuses_a_bad_time(chain: list[LedgerEntry], key: Any) -> None:
    with pytest.raises(UsageError, match="RFC 3339"):
        sign_checkpoint(chain[0], key, "now")


# --------------------------------------------------------------------------- keys


def test_key_id_is_prefix_of_sha256_of_raw_public_key() -> None:
    key = Ed25519PrivateKey.from_private_bytes(b"\x07" * 32)
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert key_id(key.public_key()) == "ed25519:" + hashlib.sha256(raw).hexdigest()[:16]
    assert len(key_id(generate_key().public_key())) == len("ed25519:") + 16
    assert key_id(generate_key().public_key()) != key_id(generate_key().public_key())


def _raw_private(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o277])
def test_private_key_save_and_load(tmp_path: Path, umask: int) -> None:
    key = generate_key()
    path = tmp_path / "ledger.key"
    old_umask = os.umask(umask)  # the mode is exactly 0o600 whatever the umask
    try:
        save_private_key(key, path)
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text("ascii").startswith("-----BEGIN PRIVATE KEY-----\n")
    loaded = load_private_key(path)
    assert _raw_private(loaded) == _raw_private(key)
    assert _raw_private(load_private_key(str(path))) == _raw_private(key)


def test_save_refuses_to_overwrite(tmp_path: Path) -> None:
    path = tmp_path / "ledger.key"
    path.write_text("precious")
    with pytest.raises(UsageError, match="already exists") as info:
        save_private_key(generate_key(), path)
    assert info.value.code == "file_exists"
    assert path.read_text() == "precious"


def test_load_private_key_errors(tmp_path: Path) -> None:
    missing = tmp_path / "nope.key"
    with pytest.raises(ConfigError) as info:
        load_private_key(missing)
    assert info.value.code == "key_invalid"
    assert str(info.value) == f"{missing}: private key file does not exist"

    garbage = tmp_path / "garbage.key"
    garbage.write_text("hello")
    with pytest.raises(ConfigError, match="not a PEM private key") as info:
        load_private_key(garbage)
    assert info.value.code == "key_invalid"

    ec_key = ec.generate_private_key(ec.SECP256R1())
    ec_path = tmp_path / "ec.key"
    ec_path.write_bytes(
        ec_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    with pytest.raises(ConfigError, match="not an Ed25519 key") as info:
        load_private_key(ec_path)
    assert info.value.code == "key_invalid"
    assert str(ec_path) in str(info.value)

    encrypted = tmp_path / "enc.key"
    encrypted.write_bytes(
        generate_key().private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    with pytest.raises(ConfigError, match="encrypted"):
        load_private_key(encrypted)

    with pytest.raises(ConfigError, match="is a directory"):
        load_private_key(tmp_path)

    public_only = tmp_path / "public.pem"
    public_only.write_text(public_key_pem(generate_key()))
    with pytest.raises(ConfigError, match="not a PEM private key"):
        load_private_key(public_only)


def test_public_key_from_text_and_files(tmp_path: Path) -> None:
    key = generate_key()
    pem = public_key_pem(key)
    assert pem.startswith("-----BEGIN PUBLIC KEY-----\n")
    expected = key_id(key.public_key())

    assert key_id(load_public_key(pem)) == expected
    assert key_id(load_public_key("\n  " + pem)) == expected

    public_path = tmp_path / "ledger.pub"
    public_path.write_text(pem)
    assert key_id(load_public_key(public_path)) == expected
    assert key_id(load_public_key(str(public_path))) == expected

    private_path = tmp_path / "ledger.key"
    save_private_key(key, private_path)
    assert key_id(load_public_key(private_path)) == expected

    # the loaded key verifies what the private key signed
    head = next_entry(None, "receipt", "2026-01-01T00:00:00Z", {"x": 1})
    checkpoint = sign_checkpoint(head, key, "2026-01-01T00:00:01Z")
    assert verify_chain([head], [checkpoint], [load_public_key(public_path)]).ok


def test_load_public_key_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist") as info:
        load_public_key(tmp_path / "missing.pub")
    assert info.value.code == "key_invalid"

    with pytest.raises(ConfigError, match="not a PEM public key"):
        load_public_key("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")

    ec_pem = (
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    ec_path = tmp_path / "ec.pub"
    ec_path.write_bytes(ec_pem)
    with pytest.raises(ConfigError, match="not an Ed25519 key"):
        load_public_key(ec_path)
    with pytest.raises(ConfigError, match="not an Ed25519 key"):
        load_public_key(ec_pem.decode())

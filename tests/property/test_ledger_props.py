"""Properties of the governance ledger, checked with hypothesis on random chains:

1. an untampered chain verifies, and every entry hash equals an independent computation
   (``rfc8785`` + ``hashlib``) of the documented format;
2. one random mutation (edit a body value, delete an entry, swap two entries, cut the tail
   under a checkpoint of the old head) always fails verification, and the first problem has
   the code and seq that the mutation predicts;
3. a history rewritten with every hash recomputed passes on its own and fails against a
   checkpoint of the original head;
4. checkpoints survive JSON and always verify with their key, never with another.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import re
from datetime import datetime
from typing import Any

import pytest
import rfc8785
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oarlock.governance._ledger import (
    GENESIS_HASH,
    LEDGER_ENTRY_KINDS,
    Checkpoint,
    LedgerEntry,
    entry_hash,
    key_id,
    next_entry,
    sign_checkpoint,
    verify_chain,
)

SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

MUTATION_SETTINGS = settings(SETTINGS, max_examples=100)
KEY = Ed25519PrivateKey.from_private_bytes(hashlib.sha256(b"ledger test key").digest())
OTHER_KEY = Ed25519PrivateKey.from_private_bytes(hashlib.sha256(b"another key").digest())
INT_MAX = 2**53 - 1

json_leaf = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-INT_MAX, max_value=INT_MAX)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10)
)
json_value = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)
bodies = st.dictionaries(st.text(max_size=8), json_value, max_size=4)
times = st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(2200, 1, 1)).map(
    lambda d: d.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
)
records = st.tuples(st.sampled_from(sorted(LEDGER_ENTRY_KINDS)), times, bodies)


def build(items: list[tuple[str, str, dict[str, Any]]]) -> list[LedgerEntry]:
    entries: list[LedgerEntry] = []
    head = None
    for kind, at, body in items:
        head = next_entry(head, kind, at, body)
        entries.append(head)
    return entries


chains = st.lists(records, min_size=1, max_size=10).map(build)


def independent(e: LedgerEntry) -> str:
    envelope = {"seq": e.seq, "kind": e.kind, "at": e.at, "body": e.body, "prevHash": e.prev_hash}
    return "sha256:" + hashlib.sha256(rfc8785.dumps(envelope)).hexdigest()


@SETTINGS
@given(chains)
def test_untampered_chains_verify(entries: list[LedgerEntry]) -> None:
    prev = GENESIS_HASH
    for i, e in enumerate(entries):
        assert e.seq == i + 1
        assert e.prev_hash == prev
        assert e.entry_hash == independent(e)
        prev = e.entry_hash
    checkpoint = sign_checkpoint(entries[-1], KEY, entries[-1].at)
    report = verify_chain(iter(entries), [checkpoint], [KEY.public_key()])
    assert report.ok, report.problems
    assert (report.entries, report.head_seq) == (len(entries), len(entries))
    assert report.head_hash == entries[-1].entry_hash
    assert report.checkpoints_checked == 1


# --------------------------------------------------------------------------- one mutation


def _edit_value(body: dict[str, Any], pick: int) -> dict[str, Any]:
    """``body`` with one value changed so that its canonical form surely differs."""
    edited = copy.deepcopy(body)
    if not edited:
        edited["tampered"] = True
        return edited
    key = sorted(edited)[pick % len(edited)]
    edited[key] = [edited[key]]  # wrapping in a list always changes the JSON value
    return edited


@st.composite
def mutated(draw: st.DrawFn, mutation: str) -> tuple[list[LedgerEntry], list[Any], tuple[Any, ...]]:
    """(original entries, mutated entries, (code, seq) expected first) for ``mutation``."""
    entries = draw(chains)
    n = len(entries)
    out: list[Any] = list(entries)
    if mutation == "edit":
        i = draw(st.integers(0, n - 1))
        out[i] = dataclasses.replace(
            entries[i], body=_edit_value(entries[i].body, draw(st.integers(0, 10)))
        )
        expected: tuple[Any, ...] = ("hash_mismatch", i + 1)
    elif mutation == "delete":
        i = draw(st.integers(0, n - 1))
        del out[i]
        # the missing seq is named; a deleted last entry leaves a valid shorter chain
        expected = ("seq_gap", i + 1) if i < n - 1 else ()
    elif mutation == "swap":
        if n < 2:
            entries = [*entries, next_entry(entries[-1], "receipt", entries[-1].at, {})]
            out = list(entries)
            n = 2
        i = draw(st.integers(0, n - 2))
        j = draw(st.integers(i + 1, n - 1))
        out[i], out[j] = out[j], out[i]
        expected = ("seq_gap", i + 1)
    else:
        m = draw(st.integers(0, n - 1))
        out = out[:m]
        expected = ("truncated", None)
    return entries, out, expected


@pytest.mark.parametrize("mutation", ["edit", "delete", "swap", "truncate"])
@MUTATION_SETTINGS
@given(data=st.data())
def test_one_mutation_is_found_where_it_was_made(mutation: str, data: st.DataObject) -> None:
    original, entries, expected = data.draw(mutated(mutation))
    checkpoints = []
    if mutation == "truncate":
        checkpoints = [sign_checkpoint(original[-1], KEY, original[-1].at)]
    report = verify_chain(iter(entries), checkpoints, [KEY.public_key()])
    if not expected:  # deleted the last entry: undetectable without a checkpoint
        assert report.ok
        assert report.head_seq == len(original) - 1
        return
    assert not report.ok
    first = report.first
    assert first is not None
    assert (first.code, first.seq) == expected
    assert report.problems[0] is first
    if first.seq is not None:
        assert re.search(rf"\bentry {first.seq}\b", first.message)
        # the walk goes on past the problem: every entry is read, the last as stored
        assert report.head_seq == max(e.seq for e in entries)
        if mutation in ("edit", "delete"):  # one change, one problem; the rest verifies
            assert len(report.problems) == 1
            assert report.entries == len(entries) - 1
            assert report.head_hash == entries[-1].entry_hash
        else:  # entries out of order: each entry out of its place is named
            assert all(p.code == "seq_gap" for p in report.problems)
            assert report.entries == len(entries) - len(report.problems)
    else:
        assert report.entries == len(entries)
        assert f"names entry {len(original)}" in first.message


@SETTINGS
@given(chains, st.data())
def test_rewritten_history_needs_a_checkpoint(
    entries: list[LedgerEntry], data: st.DataObject
) -> None:
    n = len(entries)
    i = data.draw(st.integers(0, n - 1))
    checkpoint = sign_checkpoint(entries[-1], KEY, entries[-1].at)
    rewritten = list(entries)
    rewritten[i] = dataclasses.replace(entries[i], body=_edit_value(entries[i].body, i))
    for k in range(i, n):  # recompute every hash from the edit on, relinking the chain
        prev = rewritten[k - 1].entry_hash if k else GENESIS_HASH
        e = dataclasses.replace(rewritten[k], prev_hash=prev)
        rewritten[k] = dataclasses.replace(
            e, entry_hash=entry_hash(e.seq, e.kind, e.at, e.body, prev)
        )
    assert verify_chain(rewritten).ok
    report = verify_chain(rewritten, [checkpoint], [KEY.public_key()])
    assert report.first is not None
    assert (report.first.code, report.first.seq) == ("checkpoint_mismatch", n)
    assert len(report.problems) == 1


# --------------------------------------------------------------------------- checkpoints


@SETTINGS
@given(chains, st.data(), times)
def test_checkpoints_survive_json_and_bind_to_their_key(
    entries: list[LedgerEntry], data: st.DataObject, at: str
) -> None:
    head = entries[data.draw(st.integers(0, len(entries) - 1))]
    checkpoint = sign_checkpoint(head, KEY, at)
    again = Checkpoint.from_json(json.loads(json.dumps(checkpoint.to_json())))
    assert again == checkpoint
    assert verify_chain(entries, [again], [KEY.public_key()]).ok
    assert verify_chain(entries, [again], [KEY.public_key(), OTHER_KEY.public_key()]).ok

    wrong = verify_chain(entries, [again], [OTHER_KEY.public_key()])
    assert [(p.code, p.seq) for p in wrong.problems] == [("unknown_key", head.seq)]
    assert key_id(KEY.public_key()) in wrong.problems[0].message

    # re-pointing the checkpoint at another entry invalidates the signature
    other = entries[(head.seq) % len(entries)]
    if other.seq != head.seq:
        moved = dataclasses.replace(again, seq=other.seq, entry_hash=other.entry_hash)
        bad = verify_chain(entries, [moved], [KEY.public_key()])
        assert [(p.code, p.seq) for p in bad.problems] == [("bad_signature", other.seq)]


@settings(max_examples=300, deadline=None)
@given(
    seq=st.integers(1, 2**53 - 1),
    kind=st.sampled_from(sorted(LEDGER_ENTRY_KINDS)) | st.text(max_size=6),
    at=st.text(max_size=30),
    prev=st.text(max_size=70),
    body=st.dictionaries(
        st.text(max_size=5),
        st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text(max_size=8),
        max_size=5,
    ),
)
def test_entry_hash_from_canonical_bytes_is_the_entry_hash(seq, kind, at, prev, body) -> None:
    from oarlock.formats._jcs import canonicalize
    from oarlock.governance._ledger import entry_hash, entry_hash_canonical

    try:
        jcs = canonicalize(body)
        expected = entry_hash(seq, kind, at, body, prev)
    except Exception:
        return  # no JCS form (lone surrogates): nothing to compare
    assert entry_hash_canonical(seq, kind, at, jcs, prev) == expected

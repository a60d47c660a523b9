"""Tampering with the governance ledger in its SQLite file, with the sqlite3 module (and,
to read a row, oarlock's codec of its stored form alone), and what :func:`verify_chain`
makes of the entries read back through ``SQLiteStore(path).governance().ledger()``.

The ledger built for every test: three ``charge`` calls and one ``lookup`` made through
the governed executor, eleven entries::

    1 approval   2 invocation (A-1, 25)   3 receipt
    4 approval   5 invocation (A-2, 40)   6 receipt
    7 invocation (lookup A-1)             8 receipt
    9 approval  10 invocation (A-3, 55)  11 receipt

What a hash chain alone cannot see, and the tests document: the removal of entries at its
end, and a rewrite that recomputes every later hash. A signed checkpoint (kept where the
database's writer cannot reach it) closes both gaps.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import executor_driver as drv
import pytest

from oarlock.formats._jcs import canonicalize
from oarlock.formats._time import now_rfc3339
from oarlock.governance import GovernedExecutor, generate_key, sign_checkpoint, verify_chain
from oarlock.governance._ledger import Checkpoint, LedgerEntry, VerifyReport, entry_hash, key_id
from oarlock.store import SQLiteStore
from oarlock.store._sqlite_governance import unpack_body, unpack_hash

CHARGES = [("c1", "A-1", 25), ("c2", "A-2", 40), ("c4", "A-3", 55)]
KINDS = [
    "approval", "invocation", "receipt",
    "approval", "invocation", "receipt",
    "invocation", "receipt",
    "approval", "invocation", "receipt",
]  # fmt: skip
KEY = generate_key()
PUBLIC = KEY.public_key()


# --- building, reading and tampering -------------------------------------------------------


async def _build(db: Path, effects: Path) -> None:
    async with SQLiteStore(db) as runs:
        executor = GovernedExecutor(runs.governance(), policy=drv.POLICY)
        charge, lookup = drv.make_charge(effects), drv.make_lookup(effects)
        for call_id, order, amount in CHARGES[:2]:
            args = {"order_id": order, "amount": amount}
            part = await executor.execute(
                charge, drv.make_call("charge", args, call_id), args, drv.context()
            )
            assert not part.is_error, part.content
        args = {"order_id": "A-1"}
        part = await executor.execute(
            lookup, drv.make_call("lookup", args, "c3"), args, drv.context(turn=2)
        )
        assert not part.is_error, part.content
        call_id, order, amount = CHARGES[2]
        args = {"order_id": order, "amount": amount}
        part = await executor.execute(
            charge, drv.make_call("charge", args, call_id), args, drv.context(turn=3)
        )
        assert not part.is_error, part.content


def read_ledger(db: Path) -> list[LedgerEntry]:
    async def go() -> list[LedgerEntry]:
        async with SQLiteStore(db) as runs:
            return await runs.governance().ledger()

    return asyncio.run(go())


def read_checkpoints(db: Path) -> list[Checkpoint]:
    async def go() -> list[Checkpoint]:
        async with SQLiteStore(db) as runs:
            return await runs.governance().checkpoints()

    return asyncio.run(go())


def store_checkpoint(db: Path, checkpoint: Checkpoint) -> None:
    async def go() -> None:
        async with SQLiteStore(db) as runs:
            await runs.governance().add_checkpoint(checkpoint)

    asyncio.run(go())


def checkpoint_head(db: Path, seq: int | None = None) -> Checkpoint:
    """Sign the entry ``seq`` (the head by default) and store the checkpoint."""
    entries = read_ledger(db)
    entry = entries[-1] if seq is None else entries[seq - 1]
    checkpoint = sign_checkpoint(entry, KEY, now_rfc3339())
    store_checkpoint(db, checkpoint)
    return checkpoint


@contextmanager
def raw(db: Path) -> Iterator[sqlite3.Connection]:
    """The file through the sqlite3 module alone, committed on exit."""
    with closing(sqlite3.connect(db)) as conn:
        conn.row_factory = sqlite3.Row
        yield conn
        conn.commit()


def row(conn: sqlite3.Connection, seq: int) -> dict[str, Any]:
    """A row with its body as JCS text and its hashes as ``sha256:`` text, the form rows
    had before schema version 5 (and which the store still reads): written back so."""
    found = conn.execute(
        "SELECT seq, kind, at, body, prev_hash, entry_hash FROM ledger WHERE seq = ?", (seq,)
    ).fetchone()
    assert found is not None, seq
    values = dict(found)
    body = unpack_body(values["body"])
    return values | {
        "body": body.decode("utf-8") if isinstance(body, bytes) else body,
        "prev_hash": unpack_hash(values["prev_hash"]),
        "entry_hash": unpack_hash(values["entry_hash"]),
    }


def write_row(conn: sqlite3.Connection, values: dict[str, Any]) -> None:
    conn.execute(
        "UPDATE ledger SET kind = :kind, at = :at, body = :body, prev_hash = :prev_hash, "
        "entry_hash = :entry_hash WHERE seq = :seq",
        values,
    )


def jcs(body: dict[str, Any]) -> str:
    return canonicalize(body).decode("utf-8")


def edit_body(conn: sqlite3.Connection, seq: int, change: Callable[[dict[str, Any]], None]) -> None:
    values = row(conn, seq)
    body = json.loads(values["body"])
    change(body)
    write_row(conn, {**values, "body": jcs(body)})


def rehash_from(conn: sqlite3.Connection, start: int) -> None:
    """Recompute the entry hash of ``start`` and every later row, each linking to the
    row before it: what a forger who knows the format does after an edit."""
    prev = row(conn, start - 1)["entry_hash"] if start > 1 else "sha256:" + "0" * 64
    for (seq,) in conn.execute("SELECT seq FROM ledger WHERE seq >= ? ORDER BY seq", (start,)):
        values = row(conn, seq)
        body = json.loads(values["body"])
        values |= {
            "prev_hash": prev,
            "entry_hash": entry_hash(seq, values["kind"], values["at"], body, prev),
        }
        write_row(conn, values)
        prev = values["entry_hash"]


def codes(report: VerifyReport) -> list[tuple[int | None, str]]:
    return [(p.seq, p.code) for p in report.problems]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "gov.db"
    asyncio.run(_build(path, tmp_path / "effects"))
    entries = read_ledger(path)
    assert [e.kind for e in entries] == KINDS
    assert [e.seq for e in entries] == list(range(1, 12))
    assert entries[4].body["arguments"] == {"order_id": "A-2", "amount": 40}
    report = verify_chain(entries)
    assert report.ok, report.problems
    assert report.entries == 11
    return path


# --- (a) an edited entry -------------------------------------------------------------------


def _amount(body: dict[str, Any]) -> None:
    body["arguments"]["amount"] = 4000


def _status(body: dict[str, Any]) -> None:
    body["status"] = "Failed"


def _decided_by(body: dict[str, Any]) -> None:
    body["principal"] = "alice@example.com"
    body["decidedBy"] = "human"


EDITS = [
    pytest.param(5, _amount, id="invocation-amount"),
    pytest.param(6, _status, id="receipt-status"),
    pytest.param(1, _decided_by, id="approval-principal"),
    pytest.param(11, _status, id="last-receipt-status"),
]


@pytest.mark.parametrize(("seq", "change"), EDITS)
def test_an_edited_body_is_a_hash_mismatch_at_that_entry(
    db: Path, seq: int, change: Callable[[dict[str, Any]], None]
) -> None:
    with raw(db) as conn:
        edit_body(conn, seq, change)
    entries = read_ledger(db)
    report = verify_chain(entries)
    assert not report.ok
    assert codes(report) == [(seq, "hash_mismatch")]  # and every other entry verifies
    assert report.entries == 10
    assert (report.head_seq, report.head_hash) == (11, entries[-1].entry_hash)


def test_edited_time_and_unreadable_body_are_hash_mismatches(db: Path) -> None:
    with raw(db) as conn:
        conn.execute("UPDATE ledger SET at = ? WHERE seq = 3", ("2000-01-01T00:00:00.000000Z",))
    assert codes(verify_chain(read_ledger(db))) == [(3, "hash_mismatch")]
    with raw(db) as conn:
        conn.execute("UPDATE ledger SET body = ? WHERE seq = 2", ('{"arguments": {"amou',))
    entries = read_ledger(db)
    assert "unreadable" in entries[1].body
    assert codes(verify_chain(entries)) == [(2, "hash_mismatch"), (3, "hash_mismatch")]


def test_the_same_edit_by_text_is_found(db: Path) -> None:
    """A byte-level edit of the stored JCS text (no JSON round trip)."""
    with raw(db) as conn:
        body = row(conn, 5)["body"]
        assert '"amount":40' in body
        conn.execute(
            "UPDATE ledger SET body = ? WHERE seq = 5", (body.replace('"amount":40', '"amount":4'),)
        )
    assert codes(verify_chain(read_ledger(db))) == [(5, "hash_mismatch")]


# --- (b) a removed entry -------------------------------------------------------------------


@pytest.mark.parametrize("seq", [1, 6, 7])
def test_a_deleted_row_is_a_seq_gap_at_its_seq(db: Path, seq: int) -> None:
    with raw(db) as conn:
        conn.execute("DELETE FROM ledger WHERE seq = ?", (seq,))
    entries = read_ledger(db)
    assert len(entries) == 10
    report = verify_chain(entries)
    assert codes(report) == [(seq, "seq_gap")]  # the rows after the gap verify
    assert report.entries == 9


def test_a_deleted_row_with_later_rows_renumbered_is_found(db: Path) -> None:
    """Renumbered only: the seq is in every hash, so the first moved row mismatches."""
    with raw(db) as conn:
        conn.execute("DELETE FROM ledger WHERE seq = 6")
        for seq in range(7, 12):
            conn.execute("UPDATE ledger SET seq = ? WHERE seq = ?", (seq - 1, seq))
    entries = read_ledger(db)
    assert [e.seq for e in entries] == list(range(1, 11))
    # the seq is in every hash: each renumbered row is found
    assert codes(verify_chain(entries)) == [(seq, "hash_mismatch") for seq in range(6, 11)]


def test_a_deleted_row_with_moved_rows_rehashed_breaks_the_chain(db: Path) -> None:
    """Renumbered, and each moved row's own hash recomputed, links left alone: the first
    moved row names the removed row's hash as its previous one."""
    with raw(db) as conn:
        conn.execute("DELETE FROM ledger WHERE seq = 6")
        for seq in range(7, 12):
            values = row(conn, seq)
            conn.execute("DELETE FROM ledger WHERE seq = ?", (seq,))
            new = seq - 1
            body = json.loads(values["body"])
            values |= {
                "seq": new,
                "entry_hash": entry_hash(
                    new, values["kind"], values["at"], body, values["prev_hash"]
                ),
            }
            conn.execute(
                "INSERT INTO ledger (seq, kind, at, body, prev_hash, entry_hash) "
                "VALUES (:seq, :kind, :at, :body, :prev_hash, :entry_hash)",
                values,
            )
    report = verify_chain(read_ledger(db))
    # each moved row was rehashed, so each link after the gap names a hash that is gone
    assert codes(report) == [(seq, "chain_broken") for seq in range(6, 11)]
    assert report.entries == 5


# --- (c) reordered entries -----------------------------------------------------------------


def _swap(conn: sqlite3.Connection, a: int, b: int, *, rehash: bool) -> None:
    first, second = row(conn, a), row(conn, b)
    for seq, values in ((a, second), (b, first)):
        moved = {**values, "seq": seq}
        if rehash:  # each moved row's own hash made right for its new place
            body = json.loads(moved["body"])
            moved["entry_hash"] = entry_hash(
                seq, moved["kind"], moved["at"], body, moved["prev_hash"]
            )
        write_row(conn, moved)


@pytest.mark.parametrize(("a", "b"), [(4, 7), (5, 6), (1, 2), (10, 11)])
def test_swapped_rows_are_found_at_the_first_swapped_seq(db: Path, a: int, b: int) -> None:
    with raw(db) as conn:
        _swap(conn, a, b, rehash=False)
    entries = read_ledger(db)
    assert [e.seq for e in entries] == list(range(1, 12))
    report = verify_chain(entries)
    found = codes(report)
    assert found[0] == (a, "hash_mismatch")
    assert {seq for seq, _ in found} <= {a, a + 1, b, b + 1}  # only where rows moved
    assert report.entries == 11 - len(found)


@pytest.mark.parametrize(("a", "b"), [(4, 7), (5, 6), (1, 2)])
def test_swapped_rows_with_their_own_hashes_recomputed_break_the_chain(
    db: Path, a: int, b: int
) -> None:
    with raw(db) as conn:
        _swap(conn, a, b, rehash=True)
    report = verify_chain(read_ledger(db))
    found = codes(report)
    assert found[0] == (a, "chain_broken")
    assert {code for _, code in found} == {"chain_broken"}
    assert {seq for seq, _ in found} <= {a, a + 1, b, b + 1}


# --- (d) a truncated tail ------------------------------------------------------------------


def test_tail_truncation_passes_without_a_checkpoint_and_fails_with_one(db: Path) -> None:
    checkpoint = checkpoint_head(db)
    assert checkpoint.seq == 11
    with raw(db) as conn:
        conn.execute("DELETE FROM ledger WHERE seq > 9")
    entries = read_ledger(db)
    assert [e.seq for e in entries] == list(range(1, 10))

    # a hash chain cannot see its own end removed: what is left is a valid, shorter chain
    alone = verify_chain(entries)
    assert alone.ok
    assert alone.entries == 9
    assert alone.head_hash == entries[-1].entry_hash

    stored = read_checkpoints(db)
    assert stored == [checkpoint]
    report = verify_chain(entries, stored, [PUBLIC])
    assert not report.ok
    assert codes(report) == [(None, "truncated")]
    assert report.signatures_verified
    assert report.checkpoints_checked == 1
    assert report.entries == 9  # the entries that are there do verify
    assert "names entry 11" in report.problems[0].message
    # the comparison needs no key: an unverified checkpoint still shows the truncation
    assert codes(verify_chain(entries, stored)) == [(None, "truncated")]


def test_truncation_before_an_older_checkpoint_is_not_found_by_it(db: Path) -> None:
    """A checkpoint speaks only for the entries up to its own seq."""
    old = checkpoint_head(db, seq=8)
    with raw(db) as conn:
        conn.execute("DELETE FROM ledger WHERE seq > 9")
    report = verify_chain(read_ledger(db), read_checkpoints(db), [PUBLIC])
    assert report.ok
    assert report.checkpoints_checked == 1
    assert old.seq == 8


# --- (e) rewritten history -----------------------------------------------------------------


def test_rewritten_history_passes_the_chain_and_fails_an_earlier_checkpoint(db: Path) -> None:
    early = checkpoint_head(db, seq=3)  # before the edited entry
    head = checkpoint_head(db)  # the head when it was signed
    with raw(db) as conn:
        edit_body(conn, 5, _amount)
        rehash_from(conn, 5)
    entries = read_ledger(db)
    assert entries[4].body["arguments"]["amount"] == 4000

    # every hash recomputed: the chain alone is consistent
    alone = verify_chain(entries)
    assert alone.ok
    assert alone.entries == 11

    report = verify_chain(entries, read_checkpoints(db), [PUBLIC])
    assert not report.ok
    assert codes(report) == [(11, "checkpoint_mismatch")]
    assert head.entry_hash in report.problems[0].message
    assert report.checkpoints_checked == 2  # the early one matched: it precedes the edit
    assert early.entry_hash == entries[2].entry_hash


def test_a_rewrite_before_a_checkpointed_entry_fails_that_checkpoint(db: Path) -> None:
    """Edit entry 8 and rehash everything after it: the checkpoint of entry 9 (taken
    before) now names another hash than the ledger's entry 9."""
    checkpoint_head(db, seq=9)
    with raw(db) as conn:
        edit_body(conn, 8, _status)
        rehash_from(conn, 8)
    report = verify_chain(read_ledger(db), read_checkpoints(db), [PUBLIC])
    assert codes(report) == [(9, "checkpoint_mismatch")]


# --- (f) forged checkpoints ----------------------------------------------------------------


def _flip_signature(cp: Checkpoint) -> Checkpoint:
    raw_sig = bytearray(base64.b64decode(cp.signature))
    raw_sig[0] ^= 0x01
    return replace(cp, signature=base64.b64encode(bytes(raw_sig)).decode("ascii"))


def _other_hash(cp: Checkpoint) -> Checkpoint:
    return replace(cp, entry_hash="sha256:" + "ab" * 32)


def _other_signer(cp: Checkpoint) -> Checkpoint:
    """Signed by another key, claiming the trusted key's id."""
    forged = sign_checkpoint(
        LedgerEntry(cp.seq, "receipt", cp.at, {}, "", cp.entry_hash), generate_key(), cp.at
    )
    return replace(forged, key_id=cp.key_id)


FORGERIES = [
    pytest.param(_flip_signature, id="flipped-signature-bit"),
    pytest.param(_other_hash, id="other-entry-hash-same-signature"),
    pytest.param(_other_signer, id="signed-by-another-key"),
]


@pytest.mark.parametrize("forge", FORGERIES)
def test_a_forged_checkpoint_is_a_bad_signature(
    db: Path, forge: Callable[[Checkpoint], Checkpoint]
) -> None:
    head = read_ledger(db)[-1]
    forged = forge(sign_checkpoint(head, KEY, now_rfc3339()))
    store_checkpoint(db, forged)
    (stored,) = read_checkpoints(db)
    assert stored == forged
    report = verify_chain(read_ledger(db), [stored], [PUBLIC])
    assert not report.ok
    assert codes(report) == [(11, "bad_signature")]
    assert report.checkpoints_checked == 0  # a checkpoint that fails is not used


def test_a_checkpoint_edited_in_the_file_is_a_bad_signature(db: Path) -> None:
    checkpoint = checkpoint_head(db)
    with raw(db) as conn:
        (body,) = conn.execute("SELECT body FROM checkpoints").fetchone()
        data = json.loads(body)
        data["seq"] = 9
        conn.execute("UPDATE checkpoints SET seq = 9, body = ?", (json.dumps(data),))
    (stored,) = read_checkpoints(db)
    assert stored.seq == 9
    assert stored.signature == checkpoint.signature
    report = verify_chain(read_ledger(db), [stored], [PUBLIC])
    assert codes(report) == [(9, "bad_signature")]


def test_a_checkpoint_by_an_untrusted_key_is_an_unknown_key(db: Path) -> None:
    other = generate_key()
    cp = sign_checkpoint(read_ledger(db)[-1], other, now_rfc3339())
    assert cp.key_id == key_id(other.public_key()) != key_id(PUBLIC)
    report = verify_chain(read_ledger(db), [cp], [PUBLIC])
    assert codes(report) == [(11, "unknown_key")]
    # without trusted keys the signature is not checked at all, and the report says so
    unchecked = verify_chain(read_ledger(db), [cp])
    assert unchecked.ok
    assert not unchecked.signatures_verified


def test_a_genuine_checkpoint_verifies(db: Path) -> None:
    checkpoint_head(db)
    report = verify_chain(read_ledger(db), read_checkpoints(db), [PUBLIC])
    assert report.ok, report.problems
    assert report.signatures_verified
    assert report.checkpoints_checked == 1


# --- every bad entry is reported, and a float's JCS form reads back as itself -------------


def test_every_edited_entry_is_reported_and_the_rest_still_checked(db: Path) -> None:
    with raw(db) as conn:
        edit_body(conn, 3, _status)
        edit_body(conn, 8, _status)
    report = verify_chain(read_ledger(db))
    assert codes(report) == [(3, "hash_mismatch"), (8, "hash_mismatch")]
    assert report.entries == 9


def test_a_body_holding_a_float_beyond_2_53_verifies(db: Path) -> None:
    """JCS writes 1e20 as 100000000000000000000; read back, it is the float it was, not an
    integer without a canonical form (which once made every later entry unverifiable)."""
    with raw(db) as conn:
        prev = row(conn, 11)

        def big(body: dict[str, Any]) -> None:
            body["usage"]["bytesIn"] = 1e20

        values = dict(prev)
        body = json.loads(values["body"])
        big(body)
        values["body"] = jcs(body)
        assert "100000000000000000000" in values["body"]
        values["entry_hash"] = entry_hash(
            11, values["kind"], values["at"], body, values["prev_hash"]
        )
        write_row(conn, values)
    report = verify_chain(read_ledger(db))
    assert report.ok, report.problems

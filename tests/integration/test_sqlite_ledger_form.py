"""The stored form of ledger rows and claims in SQLite (schema version 5): 32-byte hashes,
and a body compressed from 512 bytes of JCS on; rows of the earlier form (JCS text,
``sha256:`` text) read as they are, in one chain with the new ones; tampering with the
packed bytes is found.

The approvals recorded: those of even numbers have a long principal (a body of more than
512 bytes, stored compressed), the others a short one (a body kept as text)."""

from __future__ import annotations

import asyncio
import sqlite3
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oarlock.formats._jcs import canonicalize, loads_jcs
from oarlock.governance import verify_chain
from oarlock.governance._ledger import GENESIS_HASH, LedgerEntry, entry_hash
from oarlock.governance._records import Approval, Claim
from oarlock.store import SQLiteStore, _sqlite, _sqlite_governance
from oarlock.store._sqlite_governance import pack_body, pack_hash, unpack_body, unpack_hash

AT = "2026-11-02T09:15:31.000000Z"
ARGS_HASH = "sha256:" + "7e" * 32


def approval(n: int) -> Approval:
    return Approval(
        approval_id=f"ap-{n}",
        run_id="run-1",
        tool_call_id=f"call_{n}",
        tool_id="charge",
        arguments_hash=ARGS_HASH,
        scope={"tenantId": "default"},
        decided_by="human",
        principal="alice@example.com" + ("/x" * 200 if n % 2 == 0 else ""),
        decided_at=AT,
    )


def claim(key: str, arguments_hash: str = ARGS_HASH) -> Claim:
    return Claim(
        tenant_id="acme",
        tool_id="charge",
        idempotency_key=key,
        invocation_id=f"inv-{key}",
        arguments_hash=arguments_hash,
        owner="h:1:1",
        claimed_at=AT,
        lease_until=0.0,
    )


def invocation(key: str) -> dict[str, Any]:
    return {"invocationId": f"inv-{key}", "runId": "run-1", "sideEffectClass": "read"}


async def _record(path: Path, first: int, count: int) -> None:
    async with SQLiteStore(path) as store:
        for n in range(first, first + count):
            await store.governance().record_approval(approval(n))


def record(path: Path, first: int, count: int) -> None:
    asyncio.run(_record(path, first, count))


def read_ledger(path: Path) -> list[LedgerEntry]:
    async def go() -> list[LedgerEntry]:
        async with SQLiteStore(path) as store:
            return await store.governance().ledger()

    return asyncio.run(go())


def rows(path: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as conn:
        return conn.execute(
            "SELECT seq, kind, at, body, prev_hash, entry_hash FROM ledger ORDER BY seq"
        ).fetchall()


def problems(path: Path) -> list[tuple[int | None, str]]:
    return [(p.seq, p.code) for p in verify_chain(read_ledger(path)).problems]


def test_new_rows_are_packed_and_read_back_as_written(tmp_path: Path) -> None:
    path = tmp_path / "g.db"
    record(path, 1, 4)
    stored = rows(path)
    for seq, kind, _, body, prev, hashed in stored:
        jcs = canonicalize(approval(seq).to_json())
        if seq % 2 == 0:
            assert len(jcs) >= 512 and isinstance(body, bytes) and body[0] == 1
            assert len(body) < len(jcs) / 2
        else:
            assert len(jcs) < 512 and body == jcs.decode("utf-8")
        assert isinstance(prev, bytes) and len(prev) == 32
        assert isinstance(hashed, bytes) and len(hashed) == 32
        assert kind == "approval"
    entries = read_ledger(path)
    assert [e.body for e in entries] == [approval(n).to_json() for n in (1, 2, 3, 4)]
    assert entries[0].prev_hash == GENESIS_HASH
    assert [e.prev_hash for e in entries[1:]] == [e.entry_hash for e in entries[:-1]]
    for e in entries:
        assert e.entry_hash == entry_hash(e.seq, e.kind, e.at, e.body, e.prev_hash)
    assert verify_chain(entries).ok


def test_a_claims_arguments_hash_is_packed_and_any_other_text_kept(tmp_path: Path) -> None:
    async def go() -> None:
        async with SQLiteStore(tmp_path / "c.db") as store:
            gov = store.governance()
            for key, hashed in (("a", ARGS_HASH), ("b", "sha256:x"), ("c", ARGS_HASH.upper())):
                taken = await gov.begin(
                    invocation(key), claim(key, hashed), approval_id=None, grant=None, at=AT
                )
                assert taken is None
                held = await gov.claim_of("acme", "charge", key)
                assert held is not None and held.claim == claim(key, hashed)
            assert sorted(c.arguments_hash for c in await gov.open_claims()) == sorted(
                [ARGS_HASH, "sha256:x", ARGS_HASH.upper()]
            )

    asyncio.run(go())
    with sqlite3.connect(tmp_path / "c.db") as conn:
        stored = dict(conn.execute("SELECT idempotency_key, arguments_hash FROM claims"))
    assert stored == {"a": bytes.fromhex("7e" * 32), "b": "sha256:x", "c": ARGS_HASH.upper()}


def test_a_file_of_version_4_keeps_its_rows_and_extends_its_chain(tmp_path: Path) -> None:
    """Rows written before version 5 (text) and after (packed) make one chain."""
    path = tmp_path / "v4.db"
    conn = sqlite3.connect(path)
    for _, script in _sqlite._migrations()[:4]:
        conn.executescript(script)
    conn.execute("PRAGMA user_version = 4")
    prev = GENESIS_HASH
    with conn:
        for seq in (1, 2):
            body = approval(seq).to_json()
            hashed = entry_hash(seq, "approval", AT, body, prev)
            conn.execute(
                "INSERT INTO ledger VALUES (?, 'approval', ?, ?, ?, ?)",
                (seq, AT, canonicalize(body).decode("utf-8"), prev, hashed),
            )
            conn.execute(
                "INSERT INTO approvals VALUES (?, 'run-1', ?, NULL, ?)",
                (f"ap-{seq}", f"call_{seq}", seq),
            )
            prev = hashed
        conn.execute(
            "INSERT INTO claims VALUES ('acme', 'charge', 'k', 'inv-k', ?, 'h:1:1', ?, 0, "
            "NULL, NULL)",
            (ARGS_HASH, AT),
        )
    conn.close()
    record(path, 3, 2)

    stored = rows(path)
    assert [type(r[3]) for r in stored] == [str, str, str, bytes]
    assert [type(r[5]) for r in stored] == [str, str, bytes, bytes]
    entries = read_ledger(path)
    assert [e.body for e in entries] == [approval(n).to_json() for n in (1, 2, 3, 4)]
    assert entries[2].prev_hash == entries[1].entry_hash == prev
    assert verify_chain(entries).ok

    async def go() -> None:
        async with SQLiteStore(path) as store:
            gov = store.governance()
            found, used = await gov.approval_for("run-1", "call_1")
            assert (found, used) == (approval(1), None)
            held = await gov.claim_of("acme", "charge", "k")
            assert held is not None and held.claim.arguments_hash == ARGS_HASH

    asyncio.run(go())
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == _sqlite.schema_version()
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []


@pytest.mark.parametrize("where", [1, 5, 40])
def test_a_flipped_bit_in_a_compressed_body_is_found_at_its_entry(
    tmp_path: Path, where: int
) -> None:
    path = tmp_path / "g.db"
    record(path, 1, 4)
    with sqlite3.connect(path) as conn:
        (body,) = conn.execute("SELECT body FROM ledger WHERE seq = 2").fetchone()
        edited = bytearray(body)
        edited[where] ^= 0x04
        conn.execute("UPDATE ledger SET body = ? WHERE seq = 2", (bytes(edited),))
    assert problems(path) == [(2, "hash_mismatch")]


def test_a_cut_or_unknown_body_is_unreadable_and_found(tmp_path: Path) -> None:
    path = tmp_path / "g.db"
    record(path, 1, 4)
    with sqlite3.connect(path) as conn:
        (body,) = conn.execute("SELECT body FROM ledger WHERE seq = 2").fetchone()
        conn.execute("UPDATE ledger SET body = ? WHERE seq = 2", (body[:-3],))
        conn.execute("UPDATE ledger SET body = ? WHERE seq = 4", (b"\x09" + body[1:],))
    entries = read_ledger(path)
    assert "unreadable" in entries[1].body and "unreadable" in entries[3].body
    assert problems(path) == [(2, "hash_mismatch"), (4, "hash_mismatch")]


def test_a_body_made_to_expand_without_bound_is_unreadable_and_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row that would expand past the bound (a compression bomb planted in the file) is
    read as corrupt, not expanded into memory."""
    monkeypatch.setattr(_sqlite_governance, "_MAX_BODY", 1 << 20)
    path = tmp_path / "g.db"
    record(path, 1, 3)
    compressor = zlib.compressobj(9, zlib.DEFLATED, -11, 9, zlib.Z_DEFAULT_STRATEGY,
                                  _sqlite_governance._DICTIONARIES[1])  # fmt: skip
    bomb = b"\x01" + compressor.compress(b" " * (2 << 20)) + compressor.flush()
    assert len(bomb) < 10_000
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE ledger SET body = ? WHERE seq = 2", (bomb,))
    assert unpack_body(bomb) is None
    assert "unreadable" in read_ledger(path)[1].body
    assert problems(path) == [(2, "hash_mismatch")]


def test_edited_hash_bytes_are_found(tmp_path: Path) -> None:
    path = tmp_path / "g.db"
    record(path, 1, 4)
    with sqlite3.connect(path) as conn:
        (hashed,) = conn.execute("SELECT entry_hash FROM ledger WHERE seq = 2").fetchone()
        conn.execute("UPDATE ledger SET entry_hash = ? WHERE seq = 2", (hashed[:-1] + b"\0",))
    assert problems(path) == [(2, "hash_mismatch"), (3, "chain_broken")]
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE ledger SET entry_hash = ? WHERE seq = 2", (hashed,))
        conn.execute("UPDATE ledger SET prev_hash = ? WHERE seq = 4", (hashed[:31],))
    assert problems(path) == [(4, "hash_mismatch")]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=12), JSON, max_size=6), st.integers(0, 5000))
def test_a_packed_body_reads_back_byte_for_byte(body: dict[str, Any], pad: int) -> None:
    body = body | {"pad": "x" * pad}  # beyond the 2 KB window too
    jcs = canonicalize(body)
    packed = pack_body(jcs)
    if len(jcs) < 512:
        assert packed == jcs.decode("utf-8")
        return
    assert isinstance(packed, bytes) and packed[0] == 1
    assert unpack_body(packed) == jcs
    assert loads_jcs(unpack_body(packed)) == loads_jcs(jcs)


def test_the_hash_form_round_trips() -> None:
    for text in (GENESIS_HASH, ARGS_HASH, "sha256:x", ARGS_HASH.upper(), "", "sha256:" + "0" * 63):
        assert unpack_hash(pack_hash(text)) == text
    assert pack_hash(ARGS_HASH) == bytes.fromhex("7e" * 32)
    assert unpack_body("{}") == "{}" and unpack_body(b"{}") == b"{}"
    assert unpack_body(b"\x01\xff\xff") is None

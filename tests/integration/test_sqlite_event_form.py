"""The stored form of events in SQLite (schema version 6): data of 512 bytes of JSON or more
compressed with the events' preset dictionary, smaller data and the events of earlier
versions as JSON text, all read back as written; a damaged or unknown row is refused with
an IntegrityError that names the run and the event. Version 6 also drops an index no query
reads (invocations_by_run)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import echo_agent
from oarlock.engine import Runner
from oarlock.engine._core import new_run
from oarlock.errors import IntegrityError
from oarlock.formats import RunDocument, dump_json
from oarlock.formats._time import now_rfc3339
from oarlock.store import Event, SQLiteStore, _sqlite, _sqlite_rows
from oarlock.store._packing import Packing

RUN = "run-events"
AT = "2026-11-02T09:15:31.000000Z"
SPAN = {"drive": "6042437a898f3b0b", "driveStartUs": 1796143464715391,
        "startUs": 1796143464715461, "durationMs": 0.341}  # fmt: skip
EVENTS = [
    Event("run_created", AT, {"agent": "a", "model": "scripted:script", "tags": {}}),
    Event("user_message", AT, {"text": "été ☃ " * 40}),
    Event("model_responded", AT, {"turn": 1, "inputTokens": 0, "outputTokens": 0,
                                  "costUsd": 0.0, "toolCalls": ["call_1_1"], "span": SPAN}),
    Event("tool_called", AT, {"toolCallId": "call_1_1", "toolName": "echo", "isError": False,
                              "contentChars": 179, "span": {"status": "Succeeded", **SPAN}}),
    Event("custom", "not a time", {"big": "x" * 5000, "n": [1.5, None, True, {"k": "v"}]}),
    Event("status_changed", AT, {"from": "running", "to": "completed"}),
]  # fmt: skip


def compact(data: dict[str, Any]) -> bytes:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def doc() -> RunDocument:
    return new_run(run_id=RUN, agent="a", model="m", input="go", now=now_rfc3339())[0]


async def _write(path: Path, events: list[Event]) -> None:
    async with SQLiteStore(path) as store:
        await store.create(doc(), events[:1])
        await store.save(doc(), 1, events[1:])


def write(path: Path, events: list[Event] = EVENTS) -> None:
    asyncio.run(_write(path, events))


def read(path: Path, run_id: str = RUN) -> tuple[list[Event], list[dict[str, Any]]]:
    async def go() -> tuple[list[Event], list[dict[str, Any]]]:
        async with SQLiteStore(path) as store:
            return await store.events(run_id), store.read_events(run_id)

    return asyncio.run(go())


def stored(path: Path) -> list[Any]:
    with sqlite3.connect(path) as conn:
        return [row[0] for row in conn.execute("SELECT data FROM events ORDER BY run_num, seq")]


def test_events_are_packed_from_512_bytes_and_read_back_as_written(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    write(path)
    for event, data in zip(EVENTS, stored(path), strict=True):
        raw = compact(event.data)
        if len(raw) < 512:
            assert data == raw.decode("utf-8")
        else:
            assert isinstance(data, bytes) and data[0] == 2
            assert len(data) < len(raw) / 2
    events, rows = read(path)
    assert [(e.seq, e.kind, e.at, e.data) for e in events] == [
        (n, e.kind, e.at, e.data) for n, e in enumerate(EVENTS, 1)
    ]
    assert rows == [
        {"seq": e.seq, "kind": e.kind, "at": e.at, "data": e.data} for e in events
    ]


def test_a_turns_events_stay_json_text(tmp_path: Path) -> None:
    """The events of a 10-turn run, each under 512 bytes, are kept as their JSON text:
    compressing each alone cost more time than its bytes were worth."""
    path = tmp_path / "e.db"

    async def go() -> str:
        async with SQLiteStore(path) as store:
            return (await Runner(echo_agent("bytes", 10), store).start("go")).id

    run_id = asyncio.run(go())
    events, _ = read(path, run_id)
    assert len(events) == 23
    assert [json.loads(d) for d in stored(path)] == [e.data for e in events]


def indexes(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}


def as_version_5(path: Path) -> None:
    """A file as version 5 wrote it: its schema, a run and two events as JSON text."""
    conn = sqlite3.connect(path)
    for _, script in _sqlite._migrations()[:5]:
        conn.executescript(script)
    conn.execute("PRAGMA user_version = 5")
    with conn:
        conn.execute(
            "INSERT INTO runs (num, id, agent, status, turns, created_at, updated_at, version, "
            "document) VALUES (1, ?, 'a', 'running', 0, ?, ?, 1, ?)",
            (RUN, AT, AT, dump_json(doc())),
        )
        for seq, event in enumerate(EVENTS[:4], 1):
            conn.execute(
                "INSERT INTO events VALUES (1, ?, ?, ?, ?)",
                (seq, event.kind, event.at, compact(event.data).decode("utf-8")),
            )
    conn.close()


def test_a_version_5_file_keeps_its_events_and_appends_packed_ones(tmp_path: Path) -> None:
    path = tmp_path / "v5.db"
    as_version_5(path)
    assert "invocations_by_run" in indexes(path)
    before = stored(path)
    assert all(isinstance(d, str) for d in before)

    async def go() -> None:
        async with SQLiteStore(path) as store:
            stored_run = await store.load(RUN)
            await store.save(stored_run.document, stored_run.version, EVENTS[4:])

    asyncio.run(go())
    after = stored(path)
    assert after[:4] == before  # the rows of version 5 are kept as they were
    assert isinstance(after[4], bytes) and after[4][0] == 2
    events, _ = read(path)
    assert [(e.seq, e.kind, e.data) for e in events] == [
        (n, e.kind, e.data) for n, e in enumerate(EVENTS, 1)
    ]
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == _sqlite.schema_version()
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    assert "invocations_by_run" not in indexes(path)  # read by no query (0006)


def bomb() -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, -11, 9, zlib.Z_DEFAULT_STRATEGY,
                                  _sqlite_rows._EVENT_DICTIONARY)  # fmt: skip
    return b"\x02" + compressor.compress(b" " * (2 << 20)) + compressor.flush()


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("flipped", "event 3 is (corrupt|not JSON)"),
        ("truncated", "event 3 is corrupt"),
        ("trailing", "event 3 is corrupt"),
        ("unknown", r"event 3 is in an unknown format \(byte 7\)"),
        ("ledger", r"event 3 is in an unknown format \(byte 1\)"),
        ("empty", r"event 3 is in an unknown format \(nothing\)"),
        ("bomb", "event 3 is corrupt"),
        ("not-json", "data of event 3 is not JSON"),
    ],
)
def test_damaged_event_data_is_an_integrity_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str, message: str
) -> None:
    monkeypatch.setattr(_sqlite_rows, "_MAX_EVENT", 1 << 20)
    monkeypatch.setattr(_sqlite_rows, "_EVENT_PACK_FROM", 64)  # event 3 (a turn's) packed too
    path = tmp_path / "e.db"
    write(path)
    packed = stored(path)[2]
    assert isinstance(packed, bytes)
    edited = {
        "flipped": packed[:9] + bytes([packed[9] ^ 0x10]) + packed[10:],
        "truncated": packed[:-3],
        "trailing": packed + b"\0",
        "unknown": b"\x07" + packed[1:],
        "ledger": b"\x01" + packed[1:],
        "empty": b"",
        "bomb": bomb(),
        "not-json": Packing({2: _sqlite_rows._EVENT_DICTIONARY}, 2).pack(b'{"turn":1,'),
    }[damage]
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE events SET data = ? WHERE seq = 3", (edited,))

    async def go() -> None:
        async with SQLiteStore(path) as store:
            with pytest.raises(IntegrityError, match=f"run {RUN}: .*{message}"):
                await store.events(RUN)
            with pytest.raises(IntegrityError, match=message):
                store.read_events(RUN)

    asyncio.run(go())


def test_json_bytes_in_a_blob_are_read_as_json(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    write(path)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE events SET data = ? WHERE seq = 3", (b'{"edited":true}',))
    events, _ = read(path)
    assert events[2].data == {"edited": True}


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text(max_size=40)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=12), JSON, max_size=6), st.integers(0, 5000))
def test_event_data_reads_back_as_written(data: dict[str, Any], pad: int) -> None:
    data = data | {"pad": "é" * pad}  # beyond the 2 KB window too
    (row,) = _sqlite_rows._event_rows(RUN, [Event("custom", AT, data)])
    raw = compact(data)
    if len(raw) < 512:
        assert row["data"] == raw.decode("utf-8")
    else:
        assert isinstance(row["data"], bytes) and row["data"][0] == 2
    assert _sqlite_rows._event_data(RUN, 1, row["data"]) == json.loads(raw)

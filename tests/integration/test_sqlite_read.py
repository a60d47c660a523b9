"""The synchronous reads of the read-only commands (``SQLiteStore.read_document``,
``read_events``, ``read_runs``) against real files: they give what ``load``, ``events`` and
``list_runs`` give, as JSON, and refuse a corrupt document with the very error ``load``
raises (the corruption tests of test_sqlite_store.py, through the quick path)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from oarlock.errors import IntegrityError, NotFound, StoreError
from oarlock.formats import RunDocument, dump_json, dump_run, parse_run
from oarlock.store import Event, SQLiteStore

EXAMPLE = Path(__file__).parents[2] / "examples" / "runs" / "refund-waiting-approval.json"
RUN_ID = "read-run"


def make_doc(run_id: str = RUN_ID, **members: Any) -> RunDocument:
    return parse_run({**dump_run(parse_run(EXAMPLE.read_bytes())), "id": run_id, **members})


def stored_json(**members: Any) -> dict[str, Any]:
    """The JSON of a stored document, with ``members`` set without the models' checks."""
    value: dict[str, Any] = {**json.loads(dump_json(make_doc())), **members}
    return value


def create(path: Path, doc: RunDocument, events: list[Event]) -> None:
    async def go() -> None:
        async with SQLiteStore(path) as store:
            await store.create(doc, events)

    asyncio.run(go())


def tamper(path: Path, document: object) -> None:
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE runs SET document = ? WHERE id = ?", (document, RUN_ID))
    conn.close()


def loaded(path: Path) -> dict[str, Any]:
    """What ``load`` reads, as JSON."""

    async def go() -> RunDocument:
        async with SQLiteStore(path) as store:
            return (await store.load(RUN_ID)).document

    value: dict[str, Any] = json.loads(dump_json(asyncio.run(go())))
    return value


def load_error(path: Path) -> IntegrityError:
    async def go() -> None:
        async with SQLiteStore(path) as store:
            await store.load(RUN_ID)

    with pytest.raises(IntegrityError) as info:
        asyncio.run(go())
    return info.value


GARBAGE = {
    "bytes": b"\x00\xff\xfe garbage",
    "truncated": b'{"format": "oar/0.2", "id": "read-r',
    "not-a-run": b'{"a": 1}',
    "array": b"[]",
    "integer": 42,
    "other-run": dump_json(make_doc("someone-else")),
    "negative-turns": json.dumps(stored_json(turns=-1)),
    "lone-surrogate": json.dumps(stored_json(input="\ud800")),
    "nan": json.dumps(stored_json(usage={"inputTokens": float("nan")})),
}


@pytest.mark.parametrize("garbage", GARBAGE.values(), ids=GARBAGE.keys())
def test_read_document_refuses_what_load_refuses_with_the_same_error(
    tmp_path: Path, garbage: object
) -> None:
    path = tmp_path / "x.db"
    create(path, make_doc(), [])
    tamper(path, garbage)
    expected = load_error(path)
    with SQLiteStore(path) as store, pytest.raises(IntegrityError) as info:
        store.read_document(RUN_ID)
    assert str(info.value) == str(expected)
    assert RUN_ID in str(info.value)
    assert info.value.code == "integrity"


ACCEPTED = {
    "valid": {},
    "failed": {"status": "failed", "error": "boom"},
    "null-result": {"result": None},  # the models allow null, the schema does not
    "null-tags": {"tags": None},
    "float-turns": {"turns": 2.0},  # JSON Schema's integer: read as 2, written back as 2.0
    "surrogate-pair": {"input": "\U0001f600"},  # escaped in the stored JSON: the full check
}


@pytest.mark.parametrize("members", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_read_document_is_what_load_reads(tmp_path: Path, members: dict[str, Any]) -> None:
    """Whether the quick check vouches for it or the full check decides, the same JSON."""
    path = tmp_path / "x.db"
    create(path, make_doc(), [])
    tamper(path, json.dumps(stored_json(**members)))
    with SQLiteStore(path) as store:
        assert store.read_document(RUN_ID) == loaded(path)


def test_a_member_spelled_like_a_python_name_is_read_as_load_reads_it(tmp_path: Path) -> None:
    """The models keep ``is_error`` as an unknown member, as the (open) schema does, never
    as ``isError``; the quick check leaves such a document to them, so both reads agree."""
    path = tmp_path / "x.db"
    create(path, make_doc(), [])
    doc = stored_json()
    doc["bufferedToolResults"][0]["is_error"] = True
    tamper(path, json.dumps(doc))
    assert loaded(path)["bufferedToolResults"][0] == doc["bufferedToolResults"][0]
    assert "isError" not in loaded(path)["bufferedToolResults"][0]
    with SQLiteStore(path) as store:
        assert store.read_document(RUN_ID) == loaded(path)


def test_read_events_and_read_runs_are_events_and_list_runs_as_json(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    events = [Event("run_created", "t0", {"a": [1, 2]}), Event("status_changed", "t1", {})]
    create(path, make_doc(tags={"team": "x"}), events)

    async def go() -> tuple[list[Event], list[Any]]:
        async with SQLiteStore(path) as store:
            return await store.events(RUN_ID), await store.list_runs(tags={"team": "x"})

    stored_events, summaries = asyncio.run(go())
    assert [e.seq for e in stored_events] == [1, 2]
    assert len(summaries) == 1
    with SQLiteStore(path) as store:
        assert store.read_events(RUN_ID) == [dataclasses.asdict(e) for e in stored_events]
        assert store.read_runs(tags={"team": "x"}) == [dataclasses.asdict(s) for s in summaries]
        assert store.read_runs(status="completed") == []


def test_reads_of_an_unknown_run_raise_not_found(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "x.db") as store:
        with pytest.raises(NotFound):
            store.read_document("nope")
        with pytest.raises(NotFound):
            store.read_events("nope")


def test_corrupt_event_data_raises_integrity_error(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    create(path, make_doc(), [Event("run_created", "t", {"a": 1})])
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(
            "UPDATE events SET data = '{oops' WHERE run_num = (SELECT num FROM runs WHERE id = ?)",
            (RUN_ID,),
        )
    conn.close()
    with SQLiteStore(path) as store, pytest.raises(IntegrityError, match=RUN_ID):
        store.read_events(RUN_ID)


def test_the_with_block_closes_the_store(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "x.db") as store:
        pass
    with pytest.raises(StoreError, match="closed"):
        store.read_runs()

"""Schema version 7 of the SQLite store: the messages of a running run whose document has
reached ``SPLIT_FROM`` bytes are rows of their own, so that a save writes the messages the
run gained, not the whole document again. Such a document is stored without its messages
(``runs.document``) beside a count of its rows (``runs.message_rows``); a smaller one, and
a run at rest, is stored whole (at rest compressed), its rows deleted. Whatever the store
wrote, a load gives back the document saved, and a store that cannot tell what is stored
(another process's save, a message replaced) writes the rows anew."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import zlib
from pathlib import Path
from typing import Any

import pytest

from oarlock.errors import ConflictError, IntegrityError
from oarlock.formats import RunDocument, dump_json, dump_run, parse_run
from oarlock.formats._models import UserMessage
from oarlock.store import SQLiteStore
from oarlock.store._sqlite_rows import SPLIT_FROM

EXAMPLE = Path(__file__).parents[2] / "examples" / "runs" / "refund-waiting-approval.json"
RUN_ID = "messages-run"


PADDING = 30  # messages of about 330 bytes: the document past SPLIT_FROM


def running_doc(run_id: str = RUN_ID, padding: int = PADDING) -> RunDocument:
    data = dump_run(parse_run(EXAMPLE.read_bytes()))
    doc = parse_run({**data, "id": run_id, "status": "running", "pendingApprovals": []})
    for n in range(padding):
        said(doc, f"message {n} " + "x" * 300)
    return doc


def said(doc: RunDocument, text: str) -> None:
    doc.messages.append(UserMessage.model_validate({"role": "user", "content": [
        {"type": "text", "text": text}]}))  # fmt: skip


def rows(path: Path, run_id: str = RUN_ID) -> tuple[Any, Any, list[tuple[int, Any]]]:
    """The run's document column, its message count and its message rows, as stored."""
    conn = sqlite3.connect(path)
    try:
        document, count, num = conn.execute(
            "SELECT document, message_rows, num FROM runs WHERE id = ?", (run_id,)
        ).fetchone()
        found = conn.execute(
            "SELECT idx, data FROM messages WHERE run_num = ? ORDER BY idx", (num,)
        ).fetchall()
    finally:
        conn.close()
    return document, count, found


def wal_frames(path: Path) -> int:
    return (os.path.getsize(f"{path}-wal") - 32) // (24 + 4096)


async def saved_twice(path: Path) -> tuple[SQLiteStore, RunDocument, int]:
    store = SQLiteStore(path)
    doc = running_doc()
    version = await store.create(doc, [])
    said(doc, "one")
    version = await store.save(doc, version, [])
    return store, doc, version


def test_a_running_document_is_stored_without_its_messages_beside_their_rows(
    tmp_path: Path,
) -> None:
    async def go() -> None:
        store, doc, _ = await saved_twice(tmp_path / "x.db")
        document, count, found = rows(tmp_path / "x.db")
        assert "messages" not in json.loads(document)
        assert count == len(doc.messages) == 5 + PADDING
        assert [json.loads(data) for _, data in found] == json.loads(dump_json(doc))["messages"]
        assert dump_json((await store.load(RUN_ID)).document) == dump_json(doc)
        assert store.read_document(RUN_ID) == json.loads(dump_json(doc))
        await store.close()

    asyncio.run(go())


def test_a_save_appends_only_the_messages_the_run_gained(tmp_path: Path) -> None:
    async def go() -> None:
        store, doc, version = await saved_twice(tmp_path / "x.db")
        traced: list[str] = []
        store.db().set_trace_callback(traced.append)
        said(doc, "two")
        said(doc, "three")
        version = await store.save(doc, version, [])
        inserted = [sql for sql in traced if sql.startswith("INSERT INTO messages")]
        assert len(inserted) == 2  # the two new ones, not all of them
        assert not any("DELETE FROM messages" in sql for sql in traced)
        _, count, found = rows(tmp_path / "x.db")
        assert count == 7 + PADDING and [idx for idx, _ in found] == list(range(count))
        assert dump_json((await store.load(RUN_ID)).document) == dump_json(doc)
        await store.close()

    asyncio.run(go())


def test_the_pages_a_save_writes_do_not_grow_with_the_run(tmp_path: Path) -> None:
    """Past SPLIT_FROM, a save of a 40 KB document writes no more pages than one of a
    10 KB document: before version 7, the document was rewritten whole at every save, its
    overflow pages freed and allocated again."""

    async def frames_of_a_save(path: Path, messages: int) -> int:
        store = SQLiteStore(path)
        doc = running_doc(padding=messages)
        version = await store.create(doc, [])
        said(doc, "first")
        version = await store.save(doc, version, [])
        store.db().execute("PRAGMA wal_checkpoint(TRUNCATE)")
        said(doc, "one more")
        await store.save(doc, version, [])
        frames = wal_frames(path)
        await store.close()
        return frames

    short = asyncio.run(frames_of_a_save(tmp_path / "short.db", 30))
    long = asyncio.run(frames_of_a_save(tmp_path / "long.db", 120))
    assert long <= short <= 5, (short, long)


def test_a_store_that_does_not_know_what_is_stored_writes_every_row_again(
    tmp_path: Path,
) -> None:
    async def go() -> None:
        path = tmp_path / "x.db"
        store, doc, version = await saved_twice(path)
        other = SQLiteStore(path)  # another process, as far as the rows go
        theirs = (await other.load(RUN_ID)).document
        said(theirs, "theirs")
        version = await other.save(theirs, version, [])
        with pytest.raises(ConflictError):
            await store.save(doc, version - 1, [])  # the stale copy is refused
        mine = (await store.load(RUN_ID)).document
        mine.messages[0] = UserMessage.model_validate(
            {"role": "user", "content": [{"type": "text", "text": "replaced"}]}
        )
        said(mine, "mine")
        version = await store.save(mine, version, [])
        _, count, found = rows(path)
        assert count == len(mine.messages) == 7 + PADDING
        assert [json.loads(data) for _, data in found] == json.loads(dump_json(mine))["messages"]
        assert dump_json((await other.load(RUN_ID)).document) == dump_json(mine)
        await store.close()
        await other.close()

    asyncio.run(go())


def test_a_run_at_rest_is_stored_whole_and_its_rows_deleted(tmp_path: Path) -> None:
    async def go() -> None:
        path = tmp_path / "x.db"
        store, doc, version = await saved_twice(path)
        doc.status = "completed"
        await store.save(doc, version, [])
        document, count, found = rows(path)
        assert count is None and found == []
        assert json.loads(zlib.decompress(document)) == json.loads(dump_json(doc))
        assert dump_json((await store.load(RUN_ID)).document) == dump_json(doc)
        await store.close()

    asyncio.run(go())


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        ("DELETE FROM messages WHERE idx = 2", "stored messages are not whole"),
        ("UPDATE runs SET message_rows = 9", "stored messages are not whole"),
        ("UPDATE runs SET message_rows = 'five'", "stored messages are not whole"),
        ("UPDATE messages SET idx = 99 WHERE idx = 4", "stored messages are not whole"),
        ("UPDATE messages SET data = '{\"role\": ' WHERE idx = 1", "stored document is corrupt"),
        ("UPDATE messages SET data = '{\"role\": \"robot\"}' WHERE idx = 1",
         "stored document is corrupt"),
        ("UPDATE runs SET document = 'not json'", "stored document is corrupt"),
        ("UPDATE messages SET data = 7 WHERE idx = 0", "stored document is corrupt"),
    ],
)  # fmt: skip
def test_damaged_message_rows_are_refused_on_load_and_read(
    tmp_path: Path, damage: str, says: str
) -> None:
    path = tmp_path / "x.db"

    async def made() -> None:
        store, _, _ = await saved_twice(path)
        await store.close()

    asyncio.run(made())
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(damage)
    conn.close()

    async def load() -> None:
        async with SQLiteStore(path) as store:
            with pytest.raises(IntegrityError, match=says):
                await store.load(RUN_ID)
            with pytest.raises(IntegrityError, match=says):
                store.read_document(RUN_ID)

    asyncio.run(load())


def test_a_version_6_file_keeps_its_runs_whole_and_saves_them_in_parts(tmp_path: Path) -> None:
    """A file migrated from version 6 has no message rows: its documents are whole, and the
    first save of a running one writes its rows."""
    path = tmp_path / "x.db"

    async def made() -> None:
        async with SQLiteStore(path) as store:
            await store.create(running_doc(), [])

    asyncio.run(made())
    conn = sqlite3.connect(path)
    with conn:  # as version 6 left it: no messages table, no count
        conn.execute("DROP TABLE messages")
        conn.execute("ALTER TABLE runs DROP COLUMN message_rows")
        conn.execute("PRAGMA user_version = 6")
    conn.close()

    async def reopened() -> None:
        async with SQLiteStore(path) as store:
            stored = await store.load(RUN_ID)
            doc = stored.document
            assert json.loads(rows(path)[0])["messages"]  # whole
            said(doc, "after the migration")
            await store.save(doc, stored.version, [])
            _, count, _ = rows(path)
            assert count == len(doc.messages) == 5 + PADDING
            assert dump_json((await store.load(RUN_ID)).document) == dump_json(doc)

    asyncio.run(reopened())


def test_a_small_running_document_is_stored_whole_until_it_grows_past_the_threshold(
    tmp_path: Path,
) -> None:
    async def go() -> None:
        path = tmp_path / "x.db"
        store = SQLiteStore(path)
        doc = running_doc(padding=0)
        version = await store.create(doc, [])
        said(doc, "small")
        version = await store.save(doc, version, [])
        document, count, found = rows(path)
        assert count is None and found == [] and json.loads(document)["messages"]
        while len(dump_json(doc)) < SPLIT_FROM:
            said(doc, "y" * 500)
        version = await store.save(doc, version, [])
        _, count, found = rows(path)
        assert count == len(doc.messages) == len(found)
        assert dump_json((await store.load(RUN_ID)).document) == dump_json(doc)
        await store.close()

    asyncio.run(go())


def test_a_run_loaded_in_parts_is_saved_by_appending_to_its_rows(tmp_path: Path) -> None:
    """A store that loads a run (a worker's drive, a Temporal activity) knows its rows as
    loaded: the next save appends the new message, and the document stays what it was."""

    async def go() -> None:
        path = tmp_path / "x.db"
        store, _, _ = await saved_twice(path)
        await store.close()
        fresh = SQLiteStore(path)
        stored = await fresh.load(RUN_ID)
        doc = stored.document
        traced: list[str] = []
        fresh.db().set_trace_callback(traced.append)
        said(doc, "after the load")
        await fresh.save(doc, stored.version, [])
        assert len([sql for sql in traced if "INSERT INTO messages" in sql]) == 1
        assert not any("DELETE FROM messages" in sql for sql in traced)
        _, count, found = rows(path)
        assert count == len(doc.messages) == len(found) == 6 + PADDING
        async with SQLiteStore(path) as third:
            assert dump_json((await third.load(RUN_ID)).document) == dump_json(doc)
        await fresh.close()

    asyncio.run(go())


@pytest.mark.parametrize("status", ["running", "waiting_approval"])
def test_a_run_saved_whole_and_loaded_again_keeps_the_bytes_of_its_messages(
    tmp_path: Path, status: str
) -> None:
    """A document this store saved whole (small and running, or at rest and compressed),
    loaded again at that version with the column's very bytes, gives its next save the
    JSON its messages had (the very bytes objects: nothing serialized again); one whose
    column changed meanwhile (the same version, other bytes) is serialized anew, from what
    was loaded."""
    from oarlock.formats._codec import dump_run_json, dump_run_parts

    async def go() -> None:
        path = tmp_path / "x.db"
        async with SQLiteStore(path) as store:
            doc = running_doc(padding=0)
            doc.status = status  # type: ignore[assignment]
            version = await store.create(doc, [])
            said(doc, "one")
            version = await store.save(doc, version, [])
            document, count, _ = rows(path)
            assert count is None and (document[:1] == b"{") == (status == "running")
            saved = dump_run_parts(doc)[1]
            loaded = (await store.load(RUN_ID)).document
            again = dump_run_parts(loaded)[1]
            assert again == saved and all(a is b for a, b in zip(again, saved, strict=True))

            said(loaded, "two")
            version = await store.save(loaded, version, [])
            conn = sqlite3.connect(path)
            other = running_doc(padding=0)
            other.status = status  # type: ignore[assignment]
            said(other, "one")
            said(other, "two, changed by another writer")  # as many messages as saved
            column = dump_json(other) if status == "running" else zlib.compress(dump_json(other))
            conn.execute("UPDATE runs SET document = ? WHERE id = ?", (column, RUN_ID))
            conn.commit()
            conn.close()
            changed = (await store.load(RUN_ID)).document
            assert dump_run_json(changed) == dump_run_json(other)  # through its cache

    asyncio.run(go())


def test_a_large_run_saved_whole_at_rest_is_not_kept(tmp_path: Path) -> None:
    """What the store keeps of the runs it saved whole stays bounded: a run at rest whose
    messages take SPLIT_FROM bytes or more (stored whole, compressed) is not remembered, so
    a load of it serializes its messages anew at the next save."""
    from oarlock.formats._codec import dump_run_parts
    from oarlock.store._sqlite_rows import SPLIT_FROM

    async def go() -> None:
        path = tmp_path / "x.db"
        async with SQLiteStore(path) as store:
            doc = running_doc(padding=0)
            doc.status = "completed"
            while sum(map(len, dump_run_parts(doc)[1])) < SPLIT_FROM:
                said(doc, "y" * 500)
            version = await store.create(doc, [])
            said(doc, "the last")
            await store.save(doc, version, [])
            assert rows(path)[1] is None  # whole
            saved = dump_run_parts(doc)[1]
            loaded = (await store.load(RUN_ID)).document
            again = dump_run_parts(loaded)[1]
            assert again == saved and not any(a is b for a, b in zip(again, saved, strict=True))

    asyncio.run(go())

"""The PostgreSQL store as a database: its schema and migrations, hostile contents, its
URL (whose password is never shown), its connections ended under it (``pg_terminate_
backend``, as a restart of the server does) while runs go on, and use from successive
event loops."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from typing import Any

import psycopg
import pytest

import pgtest
from oarlock.demo import AGENT_FILE
from oarlock.engine._agentfile import load_agent
from oarlock.engine._runner import Runner
from oarlock.errors import IntegrityError, NotFound, StoreError, UsageError
from oarlock.formats import dump_run, parse_run
from oarlock.governance._ledger import verify_chains
from oarlock.store import Event
from oarlock.store._postgres import PostgresStore
from oarlock.store._postgres_base import display_url, pg_queries, pg_schema_version

REQUEST = "Order A-1001 arrived broken. Please refund it."


def raw(url: str, query: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


def tables(url: str) -> set[str]:
    rows = raw(url, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
    return {str(r[0]) for r in rows}


def doc(run_id: str) -> Any:
    from conftest import load_example

    data = load_example("runs/refund-completed.json")
    data["id"] = run_id
    return parse_run(data)


# --- schema --------------------------------------------------------------------------


async def test_a_read_only_open_of_a_database_without_tables_makes_none() -> None:
    url = pgtest.empty_database()
    store = PostgresStore(url, create=False)
    with pytest.raises(NotFound) as info:
        await store.list_runs()
    assert info.value.code == "no_database"
    assert tables(url) == set()
    await store.close()


async def test_the_schema_is_made_once_by_racing_stores_and_recorded() -> None:
    url = pgtest.empty_database()
    stores = [PostgresStore(url) for _ in range(4)]
    await asyncio.gather(*(s.open() for s in stores))
    for s in stores:
        await s.close()
    versions = raw(url, "SELECT version FROM oarlock_schema ORDER BY version")
    assert [v for (v,) in versions] == list(range(1, pg_schema_version() + 1))
    assert {"runs", "events", "ledger", "ledger_heads", "claims", "workers"} <= tables(url)


def test_every_named_query_plans_against_the_migrated_schema() -> None:
    url = pgtest.new_database()
    with psycopg.connect(url, autocommit=True) as conn:
        for filename in ("postgres_queries.sql", "postgres_governance.sql"):
            for name, query in pg_queries(filename).items():
                if not query.lstrip().upper().startswith(("SELECT", "INSERT", "UPDATE", "WITH")):
                    continue
                if name in ("schema_lock",):
                    continue
                params = dict.fromkeys(re.findall(r"%\((\w+)\)s", query))
                conn.execute("EXPLAIN " + query, params)  # raises for a missing column


async def test_a_newer_schema_is_refused_and_left_alone() -> None:
    url = pgtest.new_database()
    raw(url, "INSERT INTO oarlock_schema (version) VALUES (%s)", (pg_schema_version() + 1,))
    store = PostgresStore(url)
    with pytest.raises(StoreError) as info:
        await store.list_runs()
    assert info.value.code == "schema_too_new"
    assert f"knows versions up to {pg_schema_version()}" in str(info.value)
    await store.close()
    assert raw(url, "SELECT max(version) FROM oarlock_schema")[0][0] == pg_schema_version() + 1


async def test_a_garbled_schema_version_is_refused() -> None:
    url = pgtest.new_database()
    raw(url, "ALTER TABLE oarlock_schema ALTER COLUMN version TYPE text")
    raw(url, "INSERT INTO oarlock_schema (version) VALUES ('two')")
    store = PostgresStore(url)
    with pytest.raises(StoreError) as info:
        await store.open()
    assert info.value.code == "schema_invalid"
    await store.close()


# --- hostile contents ----------------------------------------------------------------


async def test_stored_garbage_is_an_integrity_error() -> None:
    url = pgtest.new_database()
    async with PostgresStore(url) as store:
        await store.create(doc("r1"), [Event("run_created", "t", {"a": 1})])
        await store.create(doc("r2"), [])
        raw(url, "UPDATE runs SET document = 'not json'::bytea WHERE id = 'r1'")
        raw(url, "UPDATE events SET data = '[1]' WHERE run_id = 'r1'")
        raw(url, "UPDATE runs SET document = convert_to(replace(convert_from(document, "
                 "'UTF8'), '\"r2\"', '\"r3\"'), 'UTF8') WHERE id = 'r2'")  # fmt: skip
        with pytest.raises(IntegrityError, match="corrupt"):
            await store.load("r1")
        with pytest.raises(IntegrityError, match="event data"):
            await store.events("r1")
        with pytest.raises(IntegrityError, match="has id r3"):
            await store.load("r2")
        raw(url, "UPDATE runs SET tags = '[1]' WHERE id = 'r2'")
        with pytest.raises(IntegrityError, match="tags"):
            await store.list_runs()


async def test_text_postgresql_cannot_hold_is_a_clear_refusal() -> None:
    url = pgtest.new_database()
    async with PostgresStore(url) as store:
        nul = parse_run({**dump_run(doc("r0")), "tags": {"k": "a\x00b"}})
        with pytest.raises(StoreError) as info:
            await store.create(nul, [])
        assert "creating run r0" in str(info.value)
        with pytest.raises(NotFound):
            await store.load("r0")
        # a lone surrogate in event data is stored escaped, and read back as it was
        await store.create(doc("r1"), [Event("run_created", "t", {"s": "\udcff"})])
        assert (await store.events("r1"))[0].data == {"s": "\udcff"}
        # the events go as one JSON parameter: quotes, backslashes, escapes and text
        # beyond the BMP come back as they were; a kind holding NUL is refused
        tricky = {"q": 'a"b\\c\\u0000\u00e9\U0001f600', "n": [1.5, None, True]}
        await store.create(doc("r2"), [Event("run_created", 't"\\', tricky)])
        [back] = await store.events("r2")
        assert (back.kind, back.at, back.data) == ("run_created", 't"\\', tricky)
        with pytest.raises(StoreError) as info:
            await store.create(doc("r3"), [Event("run\x00created", "t", {})])
        assert info.value.code == "store_refused" and "NUL" in str(info.value)
        with pytest.raises(NotFound):
            await store.load("r3")


# --- URL -----------------------------------------------------------------------------


async def test_the_password_of_the_url_is_never_shown() -> None:
    url = "postgresql://someone:pa55-w0rd-secret@127.0.0.1:1/nowhere"
    store = PostgresStore(url, connect_timeout=2)
    assert "pa55-w0rd-secret" not in repr(store) and "[redacted]" in repr(store)
    assert display_url(url) == "postgresql://someone:[redacted]@127.0.0.1:1/nowhere"
    with pytest.raises(StoreError) as info:
        await store.load("r1")
    assert info.value.code == "store_unavailable"
    assert "pa55-w0rd-secret" not in str(info.value)
    assert "127.0.0.1:1/nowhere" in str(info.value)
    await store.close()
    with pytest.raises(UsageError):
        PostgresStore("sqlite:///x.db")


# --- connections ended under the store -----------------------------------------------


async def test_every_connection_ended_between_steps_the_run_carries_on() -> None:
    url = pgtest.new_database()
    ended: list[int] = []
    commits: list[int] = []

    def on_commit(doc: Any, events: Any) -> None:
        commits.append(doc.turns)
        ended.append(pgtest.terminate(url))  # as a restart of the server would

    async with PostgresStore(url) as store:
        runner = Runner(load_agent(AGENT_FILE), store, on_commit=on_commit)
        first = await runner.start(REQUEST)
        assert first.status == "waiting_approval"
        pending = first.pending_approvals[0].tool_call_id
        await runner.decide(first.id, pending, "approved")
        final = await runner.resume(first.id)
        assert final.status == "completed"
        assert sum(ended) >= len(commits) > 3  # every step ran on new connections
        stored = await store.load(first.id)
        assert stored.document.status == "completed"
        events = await store.events(first.id)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        gov = store.governance()
        chains = {name: await gov.ledger(name) for name in await gov.chains()}
        assert chains and all(r.ok for r in verify_chains(chains).values())


def test_connections_ended_at_random_lose_no_acknowledged_save() -> None:
    """A thread ends every connection of the database every few milliseconds while saves
    go on; each save either returns (acknowledged) or raises StoreError. Every
    acknowledged save is stored, with its events."""
    url = pgtest.new_database()
    stop = threading.Event()

    def terminator() -> None:
        while not stop.is_set():
            pgtest.terminate(url)
            stop.wait(0.005)

    async def where_it_stands(store: PostgresStore) -> int:
        for _ in range(100):  # a read may meet ended connections too: it is tried again
            try:
                return (await store.load("r1")).version
            except StoreError:
                await asyncio.sleep(0.01)
        raise AssertionError("the store never read the run back")

    async def go() -> tuple[int, int]:
        acknowledged, failures = 0, 0
        codes: set[str] = set()
        async with PostgresStore(url, timeout=10) as store:
            document = doc("r1")
            version = await store.create(document, [])
            thread = threading.Thread(target=terminator)
            thread.start()
            try:
                for n in range(150):
                    try:
                        version = await store.save(
                            document, version, [Event("status_changed", f"{n}")]
                        )
                        acknowledged = version
                    except StoreError as exc:
                        codes.add(exc.code)
                        failures += 1
                        version = await where_it_stands(store)
            finally:
                stop.set()
                thread.join()
            stored = await store.load("r1")
            assert stored.version >= acknowledged
            events = await store.events("r1")
            assert len(events) == stored.version - 1  # one event per save that committed
        assert codes <= {"commit_unknown", "store_unavailable"}, codes
        return acknowledged, failures

    acknowledged, failures = asyncio.run(go())
    assert acknowledged > 75 and failures < 75


def test_a_store_outlives_the_event_loops_that_use_it() -> None:
    url = pgtest.new_database()
    store = PostgresStore(url)
    for i in range(5):  # each asyncio.run its own pool, closed with its loop
        asyncio.run(store.create(doc(f"r{i}"), []))
    assert len(asyncio.run(store.list_runs())) == 5
    asyncio.run(store.close())
    with pytest.raises(StoreError, match="closed"):
        asyncio.run(store.load("r1"))
    # no connection of the store is left open on the server (a backend whose client has
    # closed leaves pg_stat_activity a moment later: looked at for up to 5 s)
    database = url.rsplit("/", 1)[1]
    deadline = time.monotonic() + 5
    while True:
        left = raw(pgtest.SERVER, "SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
                   "AND application_name = 'oarlock'", (database,))  # fmt: skip
        if left[0][0] == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert left[0][0] == 0


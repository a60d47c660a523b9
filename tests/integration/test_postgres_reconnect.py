"""A connection lost just after a statement ran, before its result came back: the writes a
worker repeats every few seconds (a lease's renewal and release, a heartbeat) are run
again on a new connection, since running them twice changes nothing more; a save whose
commit's outcome is unknown is settled by reading the run back (stored once, with its
events once, or run again); a claim of runs is never run twice blindly (its outcome is
unknown: ``commit_unknown``). Every connection of the database ended at once while many
transactions are under way: each is run again on a new connection and none fails. Tasks
that first use a store at once share the one pool it opens."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import pytest

import pgtest
from oarlock.errors import StoreError
from oarlock.formats import RunDocument, dump_run, parse_run
from oarlock.store import Event
from oarlock.store._postgres import PostgresStore
from oarlock.store._postgres_base import PgBase
from oarlock.store._queue import WorkerInfo

NOW = "2026-01-01T00:00:00Z"


def doc(run_id: str, status: str = "running") -> RunDocument:
    from conftest import load_example

    data = load_example("runs/refund-waiting-approval.json")
    data.update(id=run_id, status=status, pendingApprovals=[])
    return parse_run(data)


def raw(url: str, query: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


class LostReplies:
    """Makes the next ``times`` pieces of database work lose their connection: ``after``,
    once the work ran (its statement done, the reply lost); else before it ran."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, after: bool = True) -> None:
        self.left = 0
        self.after = after
        self.ran: list[str] = []
        real = PgBase.run

        async def run(self: PgBase, doing: str, work: Callable[..., Awaitable[Any]],
                      **options: Any) -> Any:
            async def flaky(conn: Any) -> Any:
                if spy.left and not spy.after:
                    spy.left -= 1
                    raise psycopg.OperationalError("server closed the connection unexpectedly")
                result = await work(conn)
                spy.ran.append(doing)
                if spy.left:
                    spy.left -= 1
                    raise psycopg.OperationalError("server closed the connection unexpectedly")
                return result

            return await real(self, doing, flaky, **options)

        spy = self
        monkeypatch.setattr(PgBase, "run", run)


@pytest.fixture
def url() -> str:
    return pgtest.new_database()


@pytest.fixture
def lost(monkeypatch: pytest.MonkeyPatch) -> LostReplies:
    return LostReplies(monkeypatch)


async def test_renewals_releases_and_heartbeats_are_run_again(
    url: str, lost: LostReplies
) -> None:
    async with PostgresStore(url) as store:
        await store.create(doc("r1"), [])
        [lease] = await store.claim("w1", limit=1, lease_seconds=30)
        lost.left = 1
        renewed = await store.renew(lease, 60)
        assert lost.ran[-2:] == ["renewing the lease on run r1"] * 2 and lost.left == 0
        assert renewed.until > lease.until
        lost.left = 1
        await store.heartbeat(WorkerInfo("w1", "h", 1, NOW, "2099-01-01T00:00:00Z", 1))
        assert [w.owner for w in await store.workers(within_seconds=30)] == ["w1"]
        lost.left = 1
        await store.release(lease)
        assert lost.ran[-2:] == ["releasing run r1"] * 2
        assert await store.leases() == []
        [again] = await store.claim("w2", limit=1, lease_seconds=30)  # runnable once more
        assert again.epoch == 2


async def test_a_claim_whose_reply_was_lost_is_not_run_again(
    url: str, lost: LostReplies
) -> None:
    async with PostgresStore(url) as store:
        await store.create(doc("r1"), [])
        lost.left, lost.ran[:] = 1, []
        with pytest.raises(StoreError) as caught:
            await store.claim("w1", limit=1, lease_seconds=30)
        assert caught.value.code == "commit_unknown"
        assert lost.ran == ["claiming runs"]
        [(owner, epoch)] = raw(url, "SELECT lease_owner, lease_epoch FROM runs")
        assert (owner, epoch) == ("w1", 1)  # it did commit: the lease runs out in time


async def test_a_save_whose_reply_was_lost_is_read_back_and_stored_once(
    url: str, lost: LostReplies
) -> None:
    async with PostgresStore(url) as store:
        first = doc("r1")
        version = await store.create(first, [])
        second = parse_run({**dump_run(first), "turns": first.turns + 1})
        lost.left, lost.ran[:] = 1, []
        saved = await store.save(second, version, [Event("status_changed", "{}")])
        assert saved == version + 1
        assert lost.ran == ["saving run r1", "reading run r1 back"]  # found: not run again
        stored = await store.load("r1")
        assert (stored.version, stored.document.turns) == (saved, second.turns)
        assert [e.kind for e in await store.events("r1")] == ["status_changed"]


async def test_a_save_lost_before_it_ran_is_run_again(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    lost = LostReplies(monkeypatch, after=False)
    async with PostgresStore(url) as store:
        first = doc("r1")
        version = await store.create(first, [])
        second = parse_run({**dump_run(first), "turns": first.turns + 1})
        lost.left, lost.ran[:] = 1, []
        assert await store.save(second, version, [Event("status_changed", "{}")]) == 2
        assert lost.ran == ["reading run r1 back", "saving run r1"]  # not found: run again
        assert (await store.load("r1")).document.turns == second.turns
        assert len(await store.events("r1")) == 1


def test_every_connection_ended_under_concurrent_transactions_none_fails(url: str) -> None:
    """Twelve tasks save their own runs (every other save without a flush) and read them
    back while a thread ends every connection of the database every 0.3 s, at least 40
    times each and until three rounds of ending were made: no call fails."""
    stop = threading.Event()
    ended: list[int] = []

    def terminator() -> None:
        while not stop.wait(0.3):
            ended.append(pgtest.terminate(url))

    async def one(store: PostgresStore, run_id: str) -> int:
        document = doc(run_id)
        version = await store.create(document, [])
        n = 0
        while n < 40 or len(ended) < 3:
            n += 1
            version = await store.save(
                document, version, [Event("status_changed", f"{n}")], flush=n % 2 == 0)
            assert (await store.load(run_id)).version == version
            await asyncio.sleep(0.01)
        return version

    async def go() -> list[int]:
        async with PostgresStore(url) as store:
            await store.list_runs()  # the pool exists before the first connection ends
            thread = threading.Thread(target=terminator)
            thread.start()
            try:
                return await asyncio.gather(*(one(store, f"r{i}") for i in range(12)))
            finally:
                stop.set()
                thread.join()

    versions = asyncio.run(go())
    assert min(versions) >= 41
    assert len(ended) >= 3 and sum(ended) >= 3, ended
    assert raw(url, "SELECT count(*) FROM events") == [(sum(v - 1 for v in versions),)]


async def test_tasks_that_first_use_a_store_at_once_share_one_pool(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[object] = []
    real = PgBase._open_pool

    async def counted(self: PgBase, loop: asyncio.AbstractEventLoop) -> Any:
        pool = await real(self, loop)
        opened.append(pool)
        return pool

    monkeypatch.setattr(PgBase, "_open_pool", counted)
    store = PostgresStore(url)
    try:
        listed = await asyncio.gather(*(store.list_runs() for _ in range(30)))
        assert listed == [[]] * 30
        assert len(opened) == 1  # one pool (and its tasks), not one per task
    finally:
        await store.close()
    broken = PostgresStore(url.rsplit("/", 1)[0] + "/oarlock_no_such_database")
    failures = await asyncio.gather(*(broken.list_runs() for _ in range(5)),
                                    return_exceptions=True)
    assert all(isinstance(f, StoreError) for f in failures), failures  # each told why
    await broken.close()


def _committed(query: Any, params: Any, cursor: Any) -> bool:
    """Whether a statement committed a write the store used to make in BEGIN ... COMMIT:
    a claim, a receipt or a read's record in one statement (its outcome 'ok'), a
    creation, or a save without a flush (given ``lazy``) that took (a row)."""
    from oarlock.store._postgres_base import pg_queries

    gov = pg_queries("postgres_governance.sql")
    runs = pg_queries("postgres_queries.sql")
    if query in (gov["begin_fast"], gov["finish_fast"], gov["record_fast"]):
        return bool(cursor.pgresult.get_value(0, 0) == b"ok")
    if not (isinstance(params, dict) and params.get("lazy") is True):
        return False
    return query == runs["create_run"] or (query == runs["save_run"] and cursor.rowcount > 0)


class EndedAfterCommit:
    """The server ends the connection as a commit goes through: the ``COMMIT`` (or a
    statement that commits a transaction of its own: a claim's, a receipt's, a save's or
    a creation's without a flush) is run, then ``AdminShutdown`` (57P01) comes in its
    reply's place, as when ``pg_terminate_backend`` lands between the commit and its
    reply. Every ``every``-th such commit does so, from the ``first``-th on."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, every: int, first: int = 0) -> None:
        self.commits = -first if first else 0
        self.ended = 0
        real = psycopg.AsyncConnection.execute
        spy = self

        async def execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            result = await real(self, query, *args, **kwargs)
            params = args[0] if args else kwargs.get("params")
            if query == "COMMIT" or _committed(query, params, result):
                spy.commits += 1
                if spy.commits >= 0 and spy.commits % every == 0:
                    spy.ended += 1
                    raise psycopg.errors.AdminShutdown("terminating connection")
            return result

        monkeypatch.setattr(psycopg.AsyncConnection, "execute", execute)


@pytest.mark.parametrize("every", [2, 3, 4])
async def test_writes_whose_commit_went_through_as_the_connection_ended_stand_once(
    url: str, monkeypatch: pytest.MonkeyPatch, every: int
) -> None:
    """Each unflushed save, claim and receipt is run again after its COMMIT went through
    but its reply was the server ending the connection: the run completes with every call
    run once, one claim, invocation and receipt per call (none Uncertain), its events once,
    and a ledger that verifies."""
    from helpers import echo
    from oarlock.engine import Agent, Runner
    from oarlock.governance import RulePolicy
    from oarlock.governance._ledger import verify_chains
    from oarlock.models import ScriptedModel
    from oarlock.tools import tool

    ran: list[str] = []

    @tool(side_effect="external")
    async def note(text: str) -> str:
        """Write a note."""
        ran.append(text)
        return f"noted {text}"

    turns: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "echo", "arguments": {"text": "a"}}]},
        {"tool_calls": [{"name": "note", "arguments": {"text": "b"}}]},
        {"tool_calls": [{"name": "echo", "arguments": {"text": "c"}},
                        {"name": "note", "arguments": {"text": "d"}}]},
        {"tool_calls": [{"name": "echo", "arguments": {"text": "e"}}]},
        {"tool_calls": [{"name": "echo", "arguments": {"text": "f"}}]},
        {"text": "done"},
    ]  # fmt: skip
    rule = {"id": "notes", "effect": "allow", "match": {"tool": "note"}}
    agent = Agent("w", ScriptedModel(turns), tools=[echo, note],
                  policy=RulePolicy({"policy": "notes", "rules": [rule]}))  # fmt: skip
    async with PostgresStore(url) as store:
        ended = EndedAfterCommit(monkeypatch, every)
        doc = await Runner(agent, store).start("go")
        assert doc.status == "completed", doc.error
        monkeypatch.undo()
        assert ended.ended == ended.commits // every >= 2
        assert ran == ["b", "d"]  # each effect once
        receipts = raw(url, "SELECT status FROM receipts")
        assert sorted(s for (s,) in receipts) == ["Succeeded"] * 6
        assert raw(url, "SELECT count(*) FROM invocations") == [(6,)]
        assert raw(url, "SELECT count(*) FROM claims") == [(6,)]
        kinds = [e.kind for e in await store.events(doc.id)]
        assert kinds.count("tool_called") == 6 and kinds.count("model_responded") == 6
        gov = store.governance()
        chains = {name: await gov.ledger(name) for name in await gov.chains()}
        assert chains and all(r.ok for r in verify_chains(chains).values())


async def test_a_decision_whose_commit_went_through_as_the_connection_ended_stands_once(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The approval's COMMIT (the first of the decision) and every other one after it go
    through as the connection ends: the decision is recorded once, the approved call runs
    once under it, and the ledger verifies."""
    from helpers import echo_agent
    from oarlock.engine import Runner
    from oarlock.governance._ledger import verify_chains

    async with PostgresStore(url) as store:
        paused = await Runner(echo_agent("d", 1, pay_last=True), store).start("go")
        assert paused.status == "waiting_approval"
        call = paused.pending_approvals[0].tool_call_id
        ended = EndedAfterCommit(monkeypatch, every=2, first=1)
        runner = Runner(echo_agent("d", 1, pay_last=True), store)
        await runner.decide(paused.id, call, "approved")
        done = await runner.resume(paused.id)
        monkeypatch.undo()
        assert done.status == "completed", done.error
        assert ended.ended >= 2
        assert raw(url, "SELECT count(*) FROM approvals") == [(1,)]
        assert sorted(raw(url, "SELECT status FROM receipts")) == [("Succeeded",)] * 2
        gov = store.governance()
        chains = {name: await gov.ledger(name) for name in await gov.chains()}
        assert chains and all(r.ok for r in verify_chains(chains).values())

"""The run queue and fencing of the PostgreSQL store, beyond the queue contract
(tests/contract/test_queue_contract.py, which runs on PostgreSQL too): claimers on
connections of their own behind a barrier each take a full batch and never a run twice,
the claim query is planned on its index, a version-1 database keeps its queue order when
migrated, a lease lost to a later epoch refuses every write of its holder (the run's save,
and the begin, take-over, finish and refusal of its tool calls) and nothing it tried is
stored, wake-ups reach another store's listener and a new listener finds work made
runnable before it listened, heartbeats are dated on the database's clock."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import psycopg
import pytest

import pgtest
from helpers import invocation_record
from oarlock.errors import ConflictError, LeaseLost, UsageError
from oarlock.formats import RunDocument, dump_run, parse_run
from oarlock.formats._jcs import digest
from oarlock.formats._time import now_rfc3339, shift_rfc3339
from oarlock.governance._records import Claim
from oarlock.store import Event
from oarlock.store._postgres import PostgresStore
from oarlock.store._postgres_base import pg_queries
from oarlock.store._queue import Lease, WorkerInfo

EXAMPLE = "examples/runs/refund-waiting-approval.json"
NOW = "2026-01-01T00:00:00.000000Z"


def doc(run_id: str, status: str = "running") -> RunDocument:
    from conftest import load_example

    data = load_example(EXAMPLE.removeprefix("examples/"))
    data.update(id=run_id, status=status)
    if status != "waiting_approval":
        data["pendingApprovals"] = []
    return parse_run(data)


def changed(document: RunDocument, **members: Any) -> RunDocument:
    return parse_run({**dump_run(document), **members})


@pytest.fixture
def url() -> str:
    return pgtest.new_database()


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def raw(url: str, query: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


async def test_claims_behind_a_barrier_never_take_a_run_twice(url: str) -> None:
    async with PostgresStore(url) as store:
        for i in range(60):
            await store.create(doc(f"r{i:02d}"), [], tenant=f"t{i % 3}")
    claimed: list[list[Lease]] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(8, timeout=30)

    def worker(n: int) -> None:
        async def go() -> list[Lease]:
            async with PostgresStore(url) as store:
                await store.open()
                barrier.wait()
                return await store.claim(f"w{n}", limit=5, lease_seconds=30)

        try:
            claimed.append(asyncio.run(go()))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    leases = [lease for batch in claimed for lease in batch]
    ids = [lease.run_id for lease in leases]
    assert len(ids) == len(set(ids)) == 40  # 8 claimers x 5, none twice
    assert {lease.epoch for lease in leases} == {1}
    rows = raw(url, "SELECT id, lease_owner, lease_epoch FROM runs WHERE lease_owner IS NOT NULL")
    assert {(r[0], r[1]) for r in rows} == {(lease.run_id, lease.owner) for lease in leases}


@pytest.mark.parametrize(
    ("tenants", "every", "limit"),
    [(7, 10, 10), (1, 1, 16)],  # 2,000 of 20,000 runnable in 7 tenants; all of one tenant
    ids=["some-runnable", "all-runnable"],
)
def test_the_claim_query_uses_an_index(url: str, tenants: int, every: int, limit: int) -> None:
    raw(
        url,
        "INSERT INTO runs (id, tenant, queue, agent, status, turns, created_at, updated_at, "
        f"version, document, ready_at) SELECT 'run-' || g, 't' || (g % {tenants}), "
        f"'default', 'a', CASE WHEN g % {every} = 0 THEN 'running' ELSE 'completed' END, 1, "
        f"'x', 'x', 1, '\\x7b7d'::bytea, CASE WHEN g % {every} = 0 THEN g END "
        "FROM generate_series(1, 20000) g",
    )
    raw(url, "ANALYZE runs")
    params = {"owner": "w", "limit": limit, "seconds": 30.0, "tenants": None, "queues": None}
    with psycopg.connect(url, autocommit=True) as conn:
        plan = "\n".join(
            row[0]
            for row in conn.execute(
                "EXPLAIN " + pg_queries("postgres_queries.sql")["claim_runs"], params
            ).fetchall()
        )
    assert "runs_runnable" in plan, plan
    assert "Seq Scan on runs" not in plan, plan


async def test_a_version_1_database_keeps_its_queue_order_and_gets_approval_deadlines() -> None:
    from oarlock.formats import dump_json
    from oarlock.store._postgres_base import _migrations, pg_schema_version

    url = pgtest.empty_database()
    waiting = dump_run(doc("waiting", status="waiting_approval"))
    waiting["pendingApprovals"][0]["expiresAt"] = "2026-01-01T00:00:00Z"
    runs = [  # as version 1 stored them: running runs by place, ties by id
        ("a-second", "running", 2, None, None, doc("a-second")),
        ("b-first", "running", 1, None, None, doc("b-first")),
        ("held", "running", 3, "w1", time.time() + 3600, doc("held")),
        ("waiting", "waiting_approval", None, None, None, parse_run(waiting)),
    ]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(pg_queries("postgres_queries.sql")["schema_table"])
        conn.execute(_migrations()[0][1].encode("utf-8"))
        conn.execute("INSERT INTO oarlock_schema (version) VALUES (1)")
        for run_id, status, place, owner, until, document in runs:
            conn.execute(
                "INSERT INTO runs (id, tenant, queue, agent, status, turns, created_at, "
                "updated_at, version, document, place, lease_owner, lease_epoch, lease_until) "
                "VALUES (%s, 'default', 'default', 'a', %s, 1, 'x', 'x', 1, %s, %s, %s, "
                "CASE WHEN %s::text IS NULL THEN 0 ELSE 3 END, %s)",
                (run_id, status, dump_json(document), place, owner, owner, until),
            )
    async with PostgresStore(url) as store:
        leases = await store.claim("w2", limit=5, lease_seconds=30)
        assert [(x.run_id, x.epoch) for x in leases] == [("b-first", 1), ("a-second", 1)]
        assert [(x.run_id, x.owner, x.epoch) for x in await store.leases()][-1] == (
            "held", "w1", 3)  # fmt: skip
        deadline = 1767225600.0  # 2026-01-01T00:00:00Z
        assert await store.lapsed_approvals(now=deadline - 1, limit=10) == []
        assert await store.lapsed_approvals(now=deadline, limit=10) == ["waiting"]
    versions = raw(url, "SELECT version FROM oarlock_schema ORDER BY version")
    assert [v for (v,) in versions] == list(range(1, pg_schema_version() + 1))


async def test_a_lease_lost_to_a_later_epoch_refuses_every_write(url: str) -> None:
    async with PostgresStore(url) as store:
        gov = store.governance()
        first_doc = doc("r1")
        await store.create(first_doc, [Event("run_created", NOW)])
        (zombie,) = await store.claim("zombie", limit=1, lease_seconds=0.2)
        await asyncio.sleep(0.4)
        (live,) = await store.claim("live", limit=1, lease_seconds=30)
        assert live.epoch == zombie.epoch + 1
        before = raw(url, "SELECT version, document FROM runs")
        events = await store.events("r1")

        with pytest.raises(LeaseLost, match="epoch"):
            await store.save(changed(first_doc, turns=9), 1, [Event("status_changed", NOW)],
                             lease=zombie)  # fmt: skip
        inv = invocation("k1")
        claim = claim_for(inv, "r1", zombie.epoch)
        with pytest.raises(LeaseLost):
            await gov.begin(inv, claim, approval_id=None, grant=None, at=NOW, fence=zombie)
        with pytest.raises(LeaseLost):
            await gov.refuse(inv, receipt_for(inv, "Denied"), NOW, fence=zombie)
        assert raw(url, "SELECT version, document FROM runs") == before
        assert await store.events("r1") == events
        assert raw(url, "SELECT count(*) FROM claims")[0][0] == 0
        assert await gov.ledger() == []

        # the live holder writes; then the zombie cannot finish or take over its call
        assert await store.save(changed(first_doc, turns=2), 1, [], lease=live) == 2
        live_claim = claim_for(inv, "r1", live.epoch)
        assert await gov.begin(inv, live_claim, approval_id=None, grant=None, at=NOW,
                               fence=live) is None  # fmt: skip
        held = await gov.claim_of("acme", "charge", "k1")
        assert held is not None
        assert (held.claim.run_id, held.claim.epoch, held.run_epoch) == ("r1", 2, 2)
        with pytest.raises(LeaseLost):
            await gov.finish(receipt_for(inv), result=b"x", at=NOW, fence=zombie)
        retry = invocation("k1")
        with pytest.raises(LeaseLost):
            await gov.take_over(live_claim, claim_for(retry, "r1", zombie.epoch), retry, NOW,
                                fence=zombie)  # fmt: skip
        assert (await gov.load(inv["invocationId"]))[1] is None
        await gov.finish(receipt_for(inv), result=b"x", at=NOW, fence=live)
        assert [e.kind for e in await gov.ledger()] == ["invocation", "receipt"]

        # a save with a lease of another run, a stale version under a live lease
        with pytest.raises(LeaseLost):
            await store.save(doc("r2"), 1, [], lease=live)
        with pytest.raises(ConflictError) as info:
            await store.save(changed(first_doc, turns=3), 1, [], lease=live)
        assert not isinstance(info.value, LeaseLost)
        # a claim of the run by another moves the epoch on: the live holder loses it too
        await store.release(live)
        await store.claim_run("r1", "operator", lease_seconds=30)
        with pytest.raises(LeaseLost):
            await store.save(changed(first_doc, turns=3), 2, [], lease=live)


async def test_wake_ups_are_sent_when_a_run_becomes_runnable(url: str) -> None:
    async with PostgresStore(url) as waiter, PostgresStore(url) as writer:
        await waiter.wait_for_work(0.01)  # listening from now on

        async def woken(action: Any) -> float:
            started = time.monotonic()
            task = asyncio.create_task(waiter.wait_for_work(10))
            await asyncio.sleep(0.05)
            await action()
            await asyncio.wait_for(task, 10)
            return time.monotonic() - started

        assert await woken(lambda: writer.create(doc("r1"), [])) < 5
        waiting = doc("r2", status="waiting_approval")
        await writer.create(waiting, [])
        running = changed(waiting, status="running", pendingApprovals=[])
        assert await woken(lambda: writer.save(running, 1, [])) < 5
        (lease,) = await writer.claim("w", limit=1, lease_seconds=30)
        assert await woken(lambda: writer.release(lease)) < 5
        # nothing runnable appears: the wait lasts its timeout
        started = time.monotonic()
        await waiter.wait_for_work(0.3)
        assert time.monotonic() - started >= 0.25


async def test_a_new_listener_finds_work_made_runnable_before_it_listened(url: str) -> None:
    async with PostgresStore(url) as waiter, PostgresStore(url) as writer:
        await writer.create(doc("r1"), [])  # its wake-up went to nobody
        started = time.monotonic()
        await waiter.wait_for_work(10)
        assert time.monotonic() - started < 5
        await writer.claim("w", limit=1, lease_seconds=30)
        started = time.monotonic()
        await waiter.wait_for_work(0.3)  # listening already, and nothing runnable
        assert time.monotonic() - started >= 0.25


async def test_work_made_runnable_as_a_listener_starts_wakes_it_once(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run made runnable between the new listener's LISTEN and its look for runnable
    runs is found by the look, and its notification, in by then, wakes no later wait."""
    async with PostgresStore(url) as waiter, PostgresStore(url) as writer:
        await waiter.list_runs()  # the waiter's pool exists
        real = waiter.connect

        async def connect() -> Any:
            conn = await real()
            execute = conn.execute

            async def listen_then_create(query: Any, *args: Any, **kwargs: Any) -> Any:
                result = await execute(query, *args, **kwargs)
                if str(query).startswith("LISTEN"):
                    await writer.create(doc("r1"), [])  # notified to this listener
                    await asyncio.sleep(0.1)  # its notification has come in
                return result

            conn.execute = listen_then_create
            return conn

        monkeypatch.setattr(waiter, "connect", connect)
        started = time.monotonic()
        await waiter.wait_for_work(10)
        assert time.monotonic() - started < 5  # found by the look
        await writer.claim("w", limit=1, lease_seconds=30)
        started = time.monotonic()
        await waiter.wait_for_work(0.3)  # nothing new since: not woken by r1's notification
        assert time.monotonic() - started >= 0.25


async def test_a_heartbeat_is_as_old_as_the_worker_says_on_the_database_clock(
    url: str,
) -> None:
    async with PostgresStore(url) as store:
        await store.heartbeat(WorkerInfo("w1", "h", 1, NOW, now_rfc3339(), 1))
        await store.heartbeat(WorkerInfo("w2", "h", 2, NOW, shift_rfc3339(now_rfc3339(), -100), 1))
        assert [w.owner for w in await store.workers(within_seconds=30)] == ["w1"]
        await store.heartbeat(WorkerInfo("w2", "h", 2, NOW, now_rfc3339(), 1))
        assert [w.owner for w in await store.workers(within_seconds=30)] == ["w1", "w2"]
        await store.heartbeat(WorkerInfo("w1", "h", 1, NOW, "1970-01-01T00:00:00Z", 1))  # gone
        assert [w.owner for w in await store.workers(within_seconds=30)] == ["w2"]
        ahead = WorkerInfo("w3", "h", 3, NOW, shift_rfc3339(now_rfc3339(), 3600), 1)
        await store.heartbeat(ahead)  # a clock ahead: recorded as now, not in the future
        [(age,)] = raw(url, "SELECT extract(epoch FROM statement_timestamp() - heartbeat_at) "
                       "FROM workers WHERE owner = 'w3'")
        assert 0 <= float(age) < 30
        with pytest.raises(UsageError, match="not an RFC 3339 date-time"):
            await store.heartbeat(WorkerInfo("w4", "h", 4, NOW, "yesterday", 1))


# --- records ---------------------------------------------------------------------------


def invocation(key: str) -> dict[str, Any]:
    return invocation_record(key, side_effect="spend", at=NOW)


def claim_for(inv: dict[str, Any], run_id: str, epoch: int) -> Claim:
    return Claim("acme", inv["toolId"], inv["idempotencyKey"], inv["invocationId"],
                 inv["argumentsHash"], "h:1:1", NOW, 0.0, run_id, epoch)  # fmt: skip


def receipt_for(inv: dict[str, Any], status: str = "Succeeded") -> dict[str, Any]:
    body: dict[str, Any] = {"invocationId": inv["invocationId"], "status": status, "startedAt": NOW}
    if status == "Denied":
        body["error"] = {"code": "denied", "message": "x"}
    body["receiptHash"] = digest(body)
    return body

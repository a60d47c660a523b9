"""One contract for every run queue (``oarlock.store._queue``): claims, leases, epochs,
fenced writes of runs and governance records, fairness across tenants, heartbeats, the
wake-up hint and the approval sweep. Each test runs against each of BACKENDS.

To add a backend, add one entry to BACKENDS: how to make a store in a test's folder, and
how another process opens the same one, given that folder (``None``: the store is shared
by threads of this process instead). The PostgreSQL one gets a database of its own for
each test (``pgtest``), whose URL it leaves in the folder for other processes; an
unreachable server fails the test, never skips it.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

import pgtest
from helpers import invocation_record
from oarlock.errors import ConflictError, LeaseLost, NotFound, RunBusy
from oarlock.formats import RunDocument, dump_json, dump_run, parse_run
from oarlock.formats._jcs import digest
from oarlock.formats._time import now_rfc3339, shift_rfc3339
from oarlock.governance import Claim
from oarlock.store import Event, MemoryStore, PostgresStore, SQLiteStore
from oarlock.store._queue import Lease, RunQueue, Sweeping, WorkerInfo

T = TypeVar("T")
EXAMPLE = Path(__file__).parents[2] / "examples" / "runs" / "refund-waiting-approval.json"
SPAWN = mp.get_context("spawn")


def open_sqlite(folder: Path) -> Any:
    return SQLiteStore(folder / "queue.db")


def make_postgres(folder: Path) -> Any:
    url = pgtest.new_database()
    (folder / "postgres.url").write_text(url, "utf-8")
    return PostgresStore(url)


def open_postgres(folder: Path) -> Any:
    return PostgresStore((folder / "postgres.url").read_text("utf-8"))


@dataclass(frozen=True)
class Backend:
    make: Callable[[Path], Any]
    other_process: Callable[[Path], Any] | None  # module-level, for spawned processes


BACKENDS: dict[str, Backend] = {
    "memory": Backend(lambda _tmp: MemoryStore(), None),
    "sqlite": Backend(open_sqlite, open_sqlite),
    "postgres": Backend(make_postgres, open_postgres),
}


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@pytest.fixture(params=list(BACKENDS))
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store(backend: str, tmp_path: Path) -> Iterator[Any]:
    made = BACKENDS[backend].make(tmp_path)
    yield made
    run(made.close())


def make_doc(run_id: str, *, status: str = "running", deadline: str | None = None) -> RunDocument:
    data = dump_run(parse_run(EXAMPLE.read_bytes()))
    data.update(id=run_id, status=status)
    if status == "waiting_approval":
        if deadline is not None:
            data["pendingApprovals"][0]["expiresAt"] = deadline
    else:
        data["pendingApprovals"] = []
    return parse_run(data)


def add(store: Any, run_id: str, *, tenant: str = "default", queue: str = "default",
        status: str = "running", agent_ref: str | None = None) -> str:
    run(store.create(make_doc(run_id, status=status), [Event("run_created", "t", {})],
                     agent_ref=agent_ref, tenant=tenant, queue=queue))
    return run_id


def claim(store: Any, owner: str = "w1", limit: int = 10, seconds: float = 30.0,
          **filters: Any) -> list[Lease]:
    return run(store.claim(owner, limit=limit, lease_seconds=seconds, **filters))


def claimed(store: Any, owner: str = "w1", limit: int = 10, **filters: Any) -> list[str]:
    return sorted(lease.run_id for lease in claim(store, owner, limit, **filters))


def test_is_a_run_queue_that_sweeps(store: Any) -> None:
    assert isinstance(store, RunQueue)
    assert isinstance(store, Sweeping)


# -- claims ------------------------------------------------------------------------------

def test_a_claim_leases_runnable_runs_with_their_first_epoch(store: Any) -> None:
    add(store, "r1", tenant="acme", queue="q", agent_ref="agents/a.yaml")
    add(store, "waiting", status="waiting_approval", queue="q")
    add(store, "done", status="completed", queue="q")
    before = time.time()
    [lease] = claim(store, "w1", seconds=30, queues=["q"])
    assert (lease.run_id, lease.owner, lease.epoch) == ("r1", "w1", 1)
    assert (lease.tenant, lease.queue, lease.agent_ref) == ("acme", "q", "agents/a.yaml")
    assert before + 30 <= lease.until <= time.time() + 30
    assert claim(store, "w2", queues=["q"]) == []  # held: nobody else gets it
    assert claim(store, "w1", queues=["q"]) == []  # nor its own holder, a second time


def test_a_claim_takes_at_most_limit_and_nothing_for_zero(store: Any) -> None:
    for i in range(5):
        add(store, f"r{i}")
    assert claim(store, limit=0) == []
    assert len(claim(store, limit=2)) == 2
    assert len(claim(store, limit=10)) == 3
    assert claim(store) == []


def test_a_claim_keeps_to_its_tenants_and_queues(store: Any) -> None:
    add(store, "a-default", tenant="a")
    add(store, "a-bulk", tenant="a", queue="bulk")
    add(store, "b-default", tenant="b")
    add(store, "c-bulk", tenant="c", queue="bulk")
    assert claimed(store, queues=["nothing"]) == []
    assert claimed(store, tenants=["zzz"]) == []
    assert claimed(store, tenants=["a"], queues=["bulk"]) == ["a-bulk"]
    assert claimed(store, queues=["bulk"]) == ["c-bulk"]
    assert claimed(store, tenants=["a", "b"]) == ["a-default", "b-default"]
    assert claimed(store) == []


def test_an_expired_lease_is_claimed_again_with_the_next_epoch(store: Any) -> None:
    add(store, "r1")
    [first] = claim(store, "w1", seconds=0.05)
    time.sleep(0.1)
    [second] = claim(store, "w2")
    assert (second.run_id, second.owner, second.epoch) == ("r1", "w2", first.epoch + 1)


def test_a_released_run_is_runnable_again_and_its_epoch_never_reused(store: Any) -> None:
    add(store, "r1")
    epochs = []
    for owner in ("w1", "w2", "w1"):
        [lease] = claim(store, owner)
        epochs.append(lease.epoch)
        run(store.release(lease))
    assert epochs == [1, 2, 3]
    run(store.release(lease))  # a second release of a lease given back changes nothing
    assert claim(store)[0].epoch == 4


def test_a_run_that_stopped_running_is_not_runnable_after_its_release(store: Any) -> None:
    add(store, "r1")
    [lease] = claim(store)
    doc = make_doc("r1", status="completed")
    run(store.save(doc, 1, [Event("status_changed", "t", {})], lease=lease))
    run(store.release(lease))
    assert claim(store) == []


# -- claim_run, renew, release ---------------------------------------------------------

def test_claim_run_takes_a_run_whatever_its_status_unless_another_holds_it(store: Any) -> None:
    add(store, "w", status="waiting_approval")
    lease = run(store.claim_run("w", "proc:a", lease_seconds=30))
    assert (lease.run_id, lease.owner, lease.epoch) == ("w", "proc:a", 1)
    with pytest.raises(RunBusy, match=r"run w is being driven by proc:a until \d{4}-"):
        run(store.claim_run("w", "proc:b", lease_seconds=30))
    again = run(store.claim_run("w", "proc:a", lease_seconds=30))  # its holder: a new epoch
    assert again.epoch == 2
    with pytest.raises(NotFound, match="ghost"):
        run(store.claim_run("ghost", "proc:a", lease_seconds=30))


def test_claim_run_takes_over_an_expired_lease(store: Any) -> None:
    add(store, "r1")
    run(store.claim_run("r1", "proc:a", lease_seconds=0.05))
    time.sleep(0.1)
    lease = run(store.claim_run("r1", "proc:b", lease_seconds=30))
    assert (lease.owner, lease.epoch) == ("proc:b", 2)


def test_renew_extends_a_held_lease_and_refuses_a_lost_one(store: Any) -> None:
    add(store, "r1")
    [lease] = claim(store, "w1", seconds=0.2)
    renewed = run(store.renew(lease, 30))
    assert (renewed.run_id, renewed.owner, renewed.epoch) == ("r1", "w1", lease.epoch)
    assert renewed.until >= time.time() + 29
    time.sleep(0.25)
    assert claim(store, "w2") == []  # renewed: still held past the first deadline
    run(store.release(renewed))
    [taken] = claim(store, "w2")
    with pytest.raises(LeaseLost, match=r"run r1 \(epoch 1\) was lost: .* epoch 2"):
        run(store.renew(lease, 30))
    run(store.release(lease))  # the lost lease's release leaves the new holder alone
    assert [x.owner for x in run(store.leases())] == ["w2"]
    assert run(store.renew(taken, 30)).epoch == 2


def test_leases_lists_the_live_leases_only(store: Any) -> None:
    for name in ("a", "b", "c"):
        add(store, name)
    held = {lease.run_id: lease for lease in claim(store, "w1", seconds=30, limit=2)}
    run(store.claim_run("c", "w2", lease_seconds=0.05))
    time.sleep(0.1)
    leases = run(store.leases())
    assert {(x.run_id, x.owner, x.epoch) for x in leases} == {
        (r, "w1", 1) for r in held}


# -- fenced writes -----------------------------------------------------------------------

def state(store: Any, run_id: str) -> tuple[bytes, int, list[Event]]:
    stored = run(store.load(run_id))
    return dump_json(stored.document), stored.version, run(store.events(run_id))


def test_a_fenced_save_needs_the_runs_current_epoch_and_owner(store: Any) -> None:
    add(store, "r1")
    [old] = claim(store, "w1", seconds=0.05)
    time.sleep(0.1)
    [new] = claim(store, "w2")
    before = state(store, "r1")
    changed = make_doc("r1", status="completed")
    with pytest.raises(LeaseLost) as info:  # the version is right; the epoch is not
        run(store.save(changed, 1, [Event("status_changed", "t", {})], lease=old))
    assert isinstance(info.value, ConflictError)
    assert state(store, "r1") == before
    impostor = Lease("r1", "w1", new.epoch, new.until)  # the right epoch, another owner
    with pytest.raises(LeaseLost):
        run(store.save(changed, 1, [], lease=impostor))
    assert state(store, "r1") == before
    assert run(store.save(changed, 1, [Event("status_changed", "t", {})], lease=new)) == 2


def test_a_released_lease_fences_off_its_former_holder(store: Any) -> None:
    add(store, "r1")
    [lease] = claim(store)
    run(store.release(lease))
    with pytest.raises(LeaseLost):
        run(store.save(make_doc("r1"), 1, [], lease=lease))
    assert run(store.save(make_doc("r1"), 1, [])) == 2  # unfenced: fine


def test_a_fenced_save_on_a_stale_version_is_a_conflict_not_a_lost_lease(store: Any) -> None:
    add(store, "r1")
    [lease] = claim(store)
    run(store.save(make_doc("r1"), 1, []))  # a decision, written without a lease
    with pytest.raises(ConflictError) as info:
        run(store.save(make_doc("r1"), 1, [], lease=lease))
    assert not isinstance(info.value, LeaseLost)
    assert run(store.save(make_doc("r1"), 2, [], lease=lease)) == 3


def test_a_fenced_save_of_a_missing_run_is_not_found(store: Any) -> None:
    lease = Lease("ghost", "w1", 1, time.time() + 30)
    with pytest.raises(NotFound):
        run(store.save(make_doc("ghost"), 1, [], lease=lease))


def invocation(run_id: str, key: str, side_effect: str = "spend") -> dict[str, Any]:
    record = invocation_record(
        key, arguments={"order_id": key}, side_effect=side_effect, at=now_rfc3339()
    )
    record["approvalId"] = str(uuid.uuid4())
    return record


def claim_of(inv: dict[str, Any], run_id: str, epoch: int | None) -> Claim:
    return Claim("acme", inv["toolId"], inv["idempotencyKey"], inv["invocationId"],
                 inv["argumentsHash"], "h:1:1", now_rfc3339(), time.time() + 60,
                 run_id=run_id, epoch=epoch)


def receipt(inv: dict[str, Any], status: str = "Succeeded") -> dict[str, Any]:
    body: dict[str, Any] = {"invocationId": inv["invocationId"], "status": status,
                            "startedAt": now_rfc3339(), "finishedAt": now_rfc3339()}
    if status != "Succeeded":
        body["error"] = {"code": "x", "message": "x"}
    body["receiptHash"] = digest(body)
    return body


def test_governance_writes_are_fenced_by_the_runs_lease(store: Any) -> None:
    add(store, "r1")
    gov = store.governance()
    [old] = claim(store, "w1", seconds=0.05)
    kept = invocation("r1", "kept")
    assert run(gov.begin(kept, claim_of(kept, "r1", old.epoch), approval_id=None, grant=None,
                         at=now_rfc3339(), fence=old)) is None
    time.sleep(0.1)
    [new] = claim(store, "w2")
    ledger = run(gov.ledger())
    late = invocation("r1", "late")
    with pytest.raises(LeaseLost):
        run(gov.begin(late, claim_of(late, "r1", old.epoch), approval_id=None, grant=None,
                      at=now_rfc3339(), fence=old))
    with pytest.raises(LeaseLost):
        run(gov.finish(receipt(kept), result=b"x", at=now_rfc3339(), fence=old))
    with pytest.raises(LeaseLost):
        run(gov.refuse(late, receipt(late, "Denied"), now_rfc3339(), fence=old))
    with pytest.raises(LeaseLost):
        run(gov.record(late, claim_of(late, "r1", old.epoch), receipt(late), result=b"z",
                       at=now_rfc3339(), fence=old))  # fmt: skip
    retry = {**kept, "invocationId": str(uuid.uuid4())}
    with pytest.raises(LeaseLost):
        run(gov.take_over(claim_of(kept, "r1", old.epoch), claim_of(retry, "r1", old.epoch),
                          retry, now_rfc3339(), fence=old))
    assert run(gov.ledger()) == ledger  # nothing of the old holder landed
    assert run(gov.claim_of("acme", "charge", "late")) is None
    held = run(gov.claim_of("acme", "charge", "kept"))
    assert held is not None and held.receipt is None
    assert (held.claim.run_id, held.claim.epoch, held.run_epoch) == ("r1", old.epoch, new.epoch)
    # the new holder's writes land
    assert run(gov.take_over(held.claim, claim_of(retry, "r1", new.epoch), retry,
                             now_rfc3339(), fence=new))
    run(gov.finish(receipt(retry), result=b"y", at=now_rfc3339(), fence=new))
    after = run(gov.claim_of("acme", "charge", "kept"))
    assert after is not None and after.receipt is not None
    assert (after.claim.epoch, after.run_epoch) == (new.epoch, new.epoch)


def test_a_fence_of_a_missing_run_is_refused(store: Any) -> None:
    gov = store.governance()
    inv = invocation("ghost", "k")
    fence = Lease("ghost", "w1", 1, time.time() + 30)
    with pytest.raises(LeaseLost, match="no longer exists"):
        run(gov.begin(inv, claim_of(inv, "ghost", 1), approval_id=None, grant=None,
                      at=now_rfc3339(), fence=fence))
    assert run(gov.ledger()) == []


def test_a_claim_without_a_run_has_no_run_epoch(store: Any) -> None:
    gov = store.governance()
    inv = invocation("r1", "k")
    plain = Claim("acme", "charge", "k", inv["invocationId"], inv["argumentsHash"], "h:1:1",
                  now_rfc3339(), time.time() + 60)
    run(gov.begin(inv, plain, approval_id=None, grant=None, at=now_rfc3339()))
    held = run(gov.claim_of("acme", "charge", "k"))
    assert held is not None
    assert (held.claim.run_id, held.claim.epoch, held.run_epoch) == (None, None, None)
    assert run(gov.open_claims()) == [plain]


# -- fairness ------------------------------------------------------------------------------

def test_one_tenant_flooding_the_queue_does_not_starve_another(store: Any) -> None:
    flood = [add(store, f"a{i:03d}", tenant="a") for i in range(60)]
    time.sleep(0.01)
    add(store, "b0", tenant="b")
    # never served, a's oldest run goes first; then b, served never, before a again
    assert claimed(store, limit=1) == ["a000"]
    assert claimed(store, limit=1) == ["b0"]
    assert claimed(store, limit=1) == ["a001"]
    add(store, "b1", tenant="b")
    assert claimed(store, limit=1) == ["b1"]  # b was served longer ago than a
    assert claimed(store, limit=3) == ["a002", "a003", "a004"]
    assert len(claim(store, limit=100)) == len(flood) - 5


def test_a_claim_goes_round_the_tenants_in_turn(store: Any) -> None:
    for tenant, count in (("a", 4), ("b", 1), ("c", 2)):
        for i in range(count):
            add(store, f"{tenant}{i}", tenant=tenant)
    # one round: one run of each tenant; then a's and c's second; then a's third
    assert claimed(store, limit=3) == ["a0", "b0", "c0"]
    assert claimed(store, limit=3) == ["a1", "a2", "c1"]
    assert claimed(store, limit=3) == ["a3"]


def test_a_tenants_runs_go_in_the_order_they_became_runnable(store: Any) -> None:
    for name in ("r1", "r2", "r3"):
        add(store, name)
    [first] = claim(store, limit=1)
    assert first.run_id == "r1"
    run(store.release(first))  # runnable again, behind the others
    assert [x.run_id for x in claim(store, limit=1)] == ["r2"]
    assert [x.run_id for x in claim(store, limit=1)] == ["r3"]
    assert [x.run_id for x in claim(store, limit=1)] == ["r1"]


# -- concurrent claimers -----------------------------------------------------------------

RUNS, CLAIMERS = 60, 4


def claim_until_empty(store: Any, owner: str) -> list[tuple[str, int]]:
    async def go() -> list[tuple[str, int]]:
        got: list[tuple[str, int]] = []
        while leases := await store.claim(owner, limit=1 + len(got) % 3, lease_seconds=60):
            got += [(x.run_id, x.epoch) for x in leases]
        return got

    return asyncio.run(go())


def claimer_process(backend: str, folder: str, owner: str, barrier: Any, out: Any) -> None:
    opener = BACKENDS[backend].other_process
    assert opener is not None
    store = opener(Path(folder))
    barrier.wait(60)
    out.put(claim_until_empty(store, owner))
    asyncio.run(store.close())


def test_concurrent_claimers_never_claim_one_run_twice(backend: str, tmp_path: Path,
                                                       store: Any) -> None:
    for i in range(RUNS):
        add(store, f"r{i:02d}", tenant=f"t{i % 3}")
    results: list[list[tuple[str, int]]] = []
    if BACKENDS[backend].other_process is None:  # one store, threads with loops of their own
        barrier = threading.Barrier(CLAIMERS)

        def claimer(owner: str) -> None:
            barrier.wait(60)
            results.append(claim_until_empty(store, owner))

        threads = [threading.Thread(target=claimer, args=(f"w{i}",)) for i in range(CLAIMERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    else:  # processes, each with a store of its own on the same database
        barrier, out = SPAWN.Barrier(CLAIMERS), SPAWN.Queue()
        procs = [SPAWN.Process(target=claimer_process,
                               args=(backend, str(tmp_path), f"w{i}", barrier, out))
                 for i in range(CLAIMERS)]
        for p in procs:
            p.start()
        results = [out.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(60)
            assert p.exitcode == 0
    taken = [run_id for got in results for run_id, _ in got]
    assert sorted(taken) == [f"r{i:02d}" for i in range(RUNS)]  # each once, none lost
    assert {epoch for got in results for _, epoch in got} == {1}
    assert len(results) == CLAIMERS


# -- heartbeats, workers, the wake-up ---------------------------------------------------

def worker(owner: str, beat: str) -> WorkerInfo:
    return WorkerInfo(owner=owner, host="h", pid=7, started_at="2026-01-01T00:00:00Z",
                      heartbeat_at=beat, concurrency=4)


def test_workers_lists_the_live_workers_with_the_runs_they_hold(store: Any) -> None:
    add(store, "r1")
    add(store, "r2")
    run(store.heartbeat(worker("w1", shift_rfc3339(now_rfc3339(), -100))))
    run(store.heartbeat(worker("w2", now_rfc3339())))
    assert [w.owner for w in run(store.workers(within_seconds=30))] == ["w2"]
    run(store.heartbeat(worker("w1", now_rfc3339())))  # refreshed, never listed twice
    claim(store, "w1", limit=2)
    listed = run(store.workers(within_seconds=30))
    assert [(w.owner, w.held) for w in listed] == [("w1", ("r1", "r2")), ("w2", ())]
    assert (listed[0].host, listed[0].pid, listed[0].concurrency) == ("h", 7, 4)


def test_list_runs_shows_the_tenant_and_the_live_lease(store: Any) -> None:
    add(store, "r1", tenant="acme")
    add(store, "r2", tenant="other")
    [lease] = claim(store, "w1", tenants=["acme"])
    by_id = {r.id: r for r in run(store.list_runs())}
    assert (by_id["r1"].tenant, by_id["r1"].holder) == ("acme", "w1")
    assert by_id["r1"].lease_until == pytest.approx(lease.until)
    assert (by_id["r2"].tenant, by_id["r2"].holder, by_id["r2"].lease_until) == (
        "other", None, None)
    assert [r.id for r in run(store.list_runs(tenant="other"))] == ["r2"]
    run(store.release(lease))
    assert run(store.list_runs(tenant="acme"))[0].holder is None


async def woken_within(store: Any, make_work: Callable[[], Coroutine[Any, Any, Any]]) -> float:
    waiting = asyncio.ensure_future(store.wait_for_work(10))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    t0 = time.monotonic()
    await make_work()
    await asyncio.wait_for(waiting, 5)
    return time.monotonic() - t0


def test_wait_for_work_returns_when_a_run_becomes_runnable_here(store: Any) -> None:
    async def go() -> None:
        new = make_doc("new")
        assert await woken_within(store, lambda: store.create(new, [])) < 1
        lease = await store.claim_run("new", "w1", lease_seconds=30)
        assert await woken_within(store, lambda: store.release(lease)) < 1
        waiting = make_doc("waiting", status="waiting_approval")
        await store.create(waiting, [])
        decided = make_doc("waiting")  # running again: a decision was recorded
        assert await woken_within(store, lambda: store.save(decided, 1, [])) < 1
        t0 = time.monotonic()
        await store.wait_for_work(0.2)  # nothing new: the timeout
        assert time.monotonic() - t0 >= 0.19

    run(go())


# -- the approval sweep ------------------------------------------------------------------

def test_one_leader_at_a_time_until_its_row_expires(store: Any) -> None:
    ttl = 2.0  # a safety margin of 0.2 s: time for a store a network away to answer
    assert run(store.lead("sweep", "w1", ttl_seconds=ttl))
    assert not run(store.lead("sweep", "w2", ttl_seconds=ttl))
    assert run(store.lead("other", "w2", ttl_seconds=ttl))  # another role is another row
    time.sleep(ttl / 5)  # past the first row's margin by the time its renewal expires
    assert run(store.lead("sweep", "w1", ttl_seconds=ttl))  # renewed by its holder
    renewed = time.monotonic()  # the row lasts until renewed + ttl at the latest

    def sleep_until(moment: float) -> None:
        time.sleep(max(0.0, moment - time.monotonic()))

    sleep_until(renewed + ttl + 0.01)
    assert not run(store.lead("sweep", "w2", ttl_seconds=ttl))  # within the safety margin
    sleep_until(renewed + ttl * 1.1 + 0.01)
    assert run(store.lead("sweep", "w2", ttl_seconds=ttl))
    assert not run(store.lead("sweep", "w1", ttl_seconds=ttl))


def test_lapsed_approvals_are_the_waiting_runs_past_their_deadline(store: Any) -> None:
    now = time.time()
    past, later = now_rfc3339(), shift_rfc3339(now_rfc3339(), 3600)
    older = shift_rfc3339(past, -60)
    for run_id, deadline in (("late", past), ("later", later), ("latest", older)):
        run(store.create(make_doc(run_id, status="waiting_approval", deadline=deadline), []))
    run(store.create(make_doc("none", status="waiting_approval"), []))
    add(store, "running")
    assert run(store.lapsed_approvals(now=now + 1, limit=10)) == ["latest", "late"]
    assert run(store.lapsed_approvals(now=now + 1, limit=1)) == ["latest"]
    decided = make_doc("late")  # decided: running again, nothing due
    run(store.save(decided, 1, []))
    assert run(store.lapsed_approvals(now=now + 1, limit=10)) == ["latest"]
    assert run(store.lapsed_approvals(now=now + 7200, limit=10)) == ["latest", "later"]

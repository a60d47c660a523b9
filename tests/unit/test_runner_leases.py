"""The runner on a run queue: every drive holds the run's lease (taken, renewed on a timer,
given back), fences every write with it, stops at once when it is lost, refuses a run
another holds, and drives under a worker's lease when given one."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from typing import Any

import pytest

from helpers import echo_agent
from oarlock.engine import Agent, Limits, Runner
from oarlock.errors import LeaseLost, RunBusy, StoreError, UsageError
from oarlock.models import ScriptedModel
from oarlock.store import MemoryStore
from oarlock.store._leases import process_holder
from oarlock.store._queue import Lease
from oarlock.testing import ValidatingStore
from oarlock.tools import tool

STARTED: list[str] = []
QUICK: list[bool] = []  # when set, wait_a_while returns at once


@tool(side_effect="read")
async def wait_a_while(seconds: float) -> str:
    """Take ``seconds``."""
    STARTED.append("wait_a_while")
    await asyncio.sleep(0 if QUICK else seconds)
    return f"waited {seconds}"


def waiting_agent(seconds: float, name: str = "waiter", tenant: str = "default") -> Agent:
    turns: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "wait_a_while", "arguments": {"seconds": seconds}}]},
        {"text": "done"},
    ]
    return Agent(name, ScriptedModel(turns), tools=[wait_a_while], tenant=tenant,
                 limits=Limits(max_turns=5))


@pytest.fixture(autouse=True)
def _reset() -> None:
    STARTED.clear()
    QUICK.clear()


async def live(store: MemoryStore) -> list[Lease]:
    return await store.leases()


async def test_a_drive_takes_the_runs_lease_and_gives_it_back() -> None:
    store = MemoryStore()
    epochs: list[int] = []
    runner = Runner(echo_agent("a", 2), ValidatingStore(store))
    real_save = store.save

    async def save(document: Any, expected: int, events: Any, *, lease: Any = None,
                   flush: bool = True, **records: Any) -> int:
        assert lease is not None and lease.owner == process_holder()
        epochs.append(lease.epoch)
        return await real_save(document, expected, events, lease=lease, flush=flush,
                               **records)  # fmt: skip

    store.save = save  # type: ignore[method-assign]
    doc = await runner.start("go")
    assert doc.status == "completed"
    assert set(epochs) == {1} and len(epochs) == doc.turns + 2  # every save fenced
    assert await live(store) == []  # given back
    again = await runner.resume(doc.id)  # a second drive: the next epoch
    assert again.status == "completed"
    assert (await store.claim_run(doc.id, "x", lease_seconds=1)).epoch == 3


async def test_a_run_another_holds_is_refused_and_nothing_is_written() -> None:
    store = MemoryStore()
    runner = Runner(echo_agent("a", 1, pay_last=True), store)
    paused = await runner.start("go")
    await runner.decide(paused.id, paused.pending_approvals[0].tool_call_id, "approved")
    held = await store.claim_run(paused.id, "worker:elsewhere:1:a", lease_seconds=30)
    before = await store.load(paused.id)
    with pytest.raises(RunBusy, match=r"is being driven by worker:elsewhere:1:a until"):
        await runner.resume(paused.id)
    after = await store.load(paused.id)
    assert (after.version, after.document.status) == (before.version, "running")
    assert [x.epoch for x in await live(store)] == [held.epoch]


async def test_a_new_run_a_worker_claimed_first_is_left_to_it() -> None:
    class Claimed(MemoryStore):  # a worker claims every new run as soon as it is stored
        async def create(self, document: Any, events: Any, **kw: Any) -> int:
            version = await super().create(document, events, **kw)
            await self.claim_run(document.id, "worker:w:1:x", lease_seconds=30)
            return version

    store = Claimed()
    agent = waiting_agent(0.0)
    doc = await Runner(agent, store).start("go")
    assert (doc.status, doc.turns) == ("running", 0)  # the worker's now: nothing driven
    assert STARTED == []
    assert [x.owner for x in await live(store)] == ["worker:w:1:x"]


async def test_the_lease_is_renewed_while_a_drive_outlasts_it() -> None:
    store = MemoryStore()
    runner = Runner(waiting_agent(0.5), store, lease_seconds=0.15)
    task = asyncio.ensure_future(runner.start("go"))
    await asyncio.sleep(0.35)
    [lease] = await live(store)  # still held, past two lease lengths
    assert lease.epoch == 1
    with pytest.raises(RunBusy):
        await store.claim_run(lease.run_id, "other", lease_seconds=1)
    doc = await task
    assert doc.status == "completed"
    assert await live(store) == []


async def test_a_lost_lease_stops_the_drive_at_once_and_nothing_more_is_written() -> None:
    store = MemoryStore()
    runner = Runner(waiting_agent(30), store, lease_seconds=0.3)
    task = asyncio.ensure_future(runner.start("go"))
    while not STARTED:
        await asyncio.sleep(0.01)
    [lease] = await live(store)
    await store.release(lease)  # the lease passes to another, as after a long stall
    thief = await store.claim_run(lease.run_id, "worker:thief:1:t", lease_seconds=30)
    before = await store.load(lease.run_id)
    ledger = await store.governance().ledger()
    t0 = time.monotonic()
    with pytest.raises(LeaseLost):
        await asyncio.wait_for(task, 5)
    assert time.monotonic() - t0 < 1  # at the next renewal, not when the tool ends
    after = await store.load(lease.run_id)
    assert (after.version, after.document.status) == (before.version, "running")
    assert await store.governance().ledger() == ledger  # not even the tool's receipt
    assert [(x.owner, x.epoch) for x in await live(store)] == [(thief.owner, thief.epoch)]


async def test_a_lease_found_lost_by_a_write_ends_the_drive_with_lease_lost() -> None:
    class Stalled(MemoryStore):  # renewals fail: the lease runs out while the tool waits
        async def renew(self, lease: Lease, lease_seconds: float) -> Lease:
            raise StoreError("the disk is full")

    store = Stalled()
    runner = Runner(waiting_agent(0.4), store, lease_seconds=0.15)
    task = asyncio.ensure_future(runner.start("go"))
    while not STARTED:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.2)
    run_id = (await store.list_runs())[0].id
    await store.claim_run(run_id, "worker:next:1:n", lease_seconds=30)  # it had expired
    with pytest.raises(LeaseLost):
        await asyncio.wait_for(task, 5)
    assert (await store.governance().receipts()) == []
    assert (await store.load(run_id)).document.status == "running"


async def test_cancelling_a_drive_cancels_the_run_and_gives_the_lease_back() -> None:
    store = MemoryStore()
    task = asyncio.ensure_future(Runner(waiting_agent(30), store).start("go"))
    while not STARTED:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    [summary] = await store.list_runs()
    assert summary.status == "cancelled"
    assert await live(store) == []


async def test_a_runner_given_a_workers_lease_drives_under_it_and_leaves_it() -> None:
    store = MemoryStore()
    agent = waiting_agent(30)
    doc = await Runner(agent, store).submit("go")
    [lease] = await store.claim("worker:w:1:a", limit=1, lease_seconds=30)
    runner = Runner(agent, store, lease=lease)
    with pytest.raises(UsageError, match="under its lease"):
        await runner.resume("another-run")
    task = asyncio.ensure_future(runner.resume(doc.id))
    while not STARTED:
        await asyncio.sleep(0.01)
    task.cancel()  # the worker stops the drive (shutting down, or its lease lost)
    with pytest.raises(asyncio.CancelledError):
        await task
    stored = await store.load(doc.id)
    assert stored.document.status == "running"  # left to be resumed, not cancelled
    assert [(x.owner, x.epoch) for x in await live(store)] == [(lease.owner, lease.epoch)]
    # the read cut off was never recorded (its record rides on its step's save): it runs
    # again, claimed first this time
    assert await store.governance().receipts() == []
    QUICK.append(True)
    done = await Runner(waiting_agent(0), store, lease=lease).resume(doc.id)
    assert done.status == "completed"
    assert STARTED == ["wait_a_while", "wait_a_while"]
    [receipt] = await store.governance().receipts()
    assert receipt.status == "Succeeded"
    assert [x.epoch for x in await live(store)] == [lease.epoch]  # the worker releases it


async def test_submit_only_enqueues_the_run_in_its_tenant_and_queue() -> None:
    store = MemoryStore()
    doc = await Runner(waiting_agent(0, tenant="acme"), store).submit(
        "go", tags={"k": "v"}, queue="bulk", agent_ref="agents/w.yaml")
    assert (doc.status, doc.turns, doc.tags) == ("running", 0, {"k": "v"})
    assert STARTED == []
    assert await store.claim("w", limit=5, lease_seconds=5, queues=["default"]) == []
    [lease] = await store.claim("w", limit=5, lease_seconds=5, queues=["bulk"])
    assert (lease.run_id, lease.tenant, lease.agent_ref) == (doc.id, "acme", "agents/w.yaml")


async def test_a_run_held_by_a_dead_process_of_this_host_is_resumed_at_once() -> None:
    store = MemoryStore()
    runner = Runner(echo_agent("a", 1, pay_last=True), store)
    paused = await runner.start("go")
    await runner.decide(paused.id, paused.pending_approvals[0].tool_call_id, "approved")
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead = f"proc:{process_holder().split(':')[1]}:{gone.stdout.strip()}"
    await store.claim_run(paused.id, dead, lease_seconds=300)
    with pytest.raises(RunBusy):  # a live holder elsewhere is waited for
        await store.claim_run(paused.id, "other", lease_seconds=1)
    doc = await runner.resume(paused.id)
    assert doc.status == "completed"


def test_a_lease_length_that_is_not_a_positive_number_is_refused() -> None:
    for bad in (0, -1, float("nan"), float("inf"), True, "30"):
        with pytest.raises(UsageError, match="lease_seconds"):
            Runner(waiting_agent(0), MemoryStore(), lease_seconds=bad)  # type: ignore[arg-type]


def test_a_store_is_taken_for_a_run_queue_exactly_when_it_is_one() -> None:
    from oarlock.store._leases import as_queue
    from oarlock.store._queue import RunQueue

    class Plain:
        async def claim(self) -> None: ...

    for store in (MemoryStore(), ValidatingStore(MemoryStore()), Plain(),
                  ValidatingStore(Plain())):  # type: ignore[arg-type]
        assert (as_queue(store) is store) == isinstance(store, RunQueue)
    assert as_queue(MemoryStore()) is not None and as_queue(Plain()) is None


async def test_a_decision_then_resume_holds_the_lease_from_before_the_decision() -> None:
    holders: list[list[str]] = []

    class Watched(MemoryStore):
        async def save(self, document: Any, expected: int, events: Any, *,
                       lease: Any = None, flush: bool = True) -> int:
            holders.append([x.owner for x in await self.leases()])
            return await super().save(document, expected, events, lease=lease, flush=flush)

    store = Watched()
    runner = Runner(echo_agent("a", 0, pay_last=True), store)
    paused = await runner.start("go")
    call = paused.pending_approvals[0].tool_call_id
    holders.clear()
    done = await runner.decide(paused.id, call, "approved", resume=True)
    assert done.status == "completed"
    assert holders and all(h == [process_holder()] for h in holders)  # the decision too
    assert await live(store) == []


async def test_a_decision_on_a_run_another_holds_is_recorded_and_left_to_it() -> None:
    store = MemoryStore()
    runner = Runner(echo_agent("a", 0, pay_last=True), store)
    paused = await runner.start("go")
    await store.claim_run(paused.id, "worker:w:1:x", lease_seconds=30)
    doc = await runner.decide(paused.id, paused.pending_approvals[0].tool_call_id,
                              "approved", resume=True)
    assert (doc.status, doc.pending_approvals[0].decision) == ("running", "approved")
    assert [x.owner for x in await live(store)] == ["worker:w:1:x"]


async def test_a_watch_whose_look_at_the_store_fails_stops_the_work_it_watched() -> None:
    """The watcher of a step's tool calls reads the run every ``watch_interval``; when that
    read fails (the database away), the step's calls are stopped with the drive, not left
    running unobserved."""
    started, stopped = asyncio.Event(), []

    @tool(side_effect="read")
    async def slow(x: str) -> str:
        """Take a long time."""
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            stopped.append(x)
            raise
        return x

    class Failing(MemoryStore):
        fail = False

        async def load(self, run_id: str) -> Any:
            if self.fail:
                raise StoreError("the database went away")
            return await super().load(run_id)

    store = Failing()
    model = ScriptedModel(
        [{"tool_calls": [{"name": "slow", "arguments": {"x": "one"}}]}, {"text": "done"}])
    runner = Runner(Agent("watched", model, tools=[slow]), store, watch_interval=0.05)

    async def away() -> None:
        await started.wait()
        store.fail = True

    going = asyncio.ensure_future(away())
    with pytest.raises(StoreError, match="the database went away"):
        await asyncio.wait_for(runner.start("go"), 10)
    await going
    assert stopped == ["one"]  # stopped by the drive's end, not left running

"""The worker in one process, on the memory store: claims up to its slots, drives runs to
their end under their leases, hands them back between steps on shutdown, stops a drive past
its maximum run time or whose lease was lost, fails a run whose agent cannot be loaded, and
sweeps lapsed approvals (one worker at a time)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from helpers import echo_agent
from oarlock.engine import Agent, Limits, Runner
from oarlock.errors import UsageError
from oarlock.governance import RulePolicy
from oarlock.models import ScriptedModel
from oarlock.store import MemoryStore
from oarlock.store._queue import RunQueue
from oarlock.testing import ValidatingStore
from oarlock.tools import tool
from oarlock.worker import Worker, WorkerEvent, WorkerSettings

FAST = WorkerSettings(concurrency=3, poll=0.05, heartbeat=0.05, lease=0.5, drain=5)
CALLS: list[str] = []


@tool(side_effect="read")
async def nap(seconds: float) -> str:
    """Sleep a while."""
    CALLS.append(f"nap {seconds}")
    await asyncio.sleep(seconds)
    return "rested"


@tool(side_effect="spend")
async def spend_slowly(seconds: float) -> str:
    """Spend, slowly."""
    CALLS.append(f"spend {seconds}")
    await asyncio.sleep(seconds)
    return "spent"


def napper(seconds: float, name: str = "napper", *, spend: bool = False, turns: int = 1,
           tenant: str = "default") -> Agent:
    tool_name = "spend_slowly" if spend else "nap"
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"name": tool_name, "arguments": {"seconds": seconds}}]}
        for _ in range(turns)
    ] + [{"text": "done"}]
    policy = RulePolicy.from_dict({"policy": "p", "rules": [
        {"id": "ok", "effect": "allow", "match": {"tool": "spend_slowly"}}]})
    return Agent(name, ScriptedModel(script), tools=[nap, spend_slowly], tenant=tenant,
                 policy=policy, limits=Limits(max_turns=turns + 3))


@pytest.fixture(autouse=True)
def _reset() -> None:
    CALLS.clear()


class Running:
    """A worker running in the background of a test, with what it said."""

    def __init__(self, store: Any, settings: WorkerSettings = FAST, **kwargs: Any) -> None:
        self.events: list[WorkerEvent] = []
        self.worker = Worker(store, settings, on_event=self.events.append, **kwargs)
        self.task = asyncio.ensure_future(self.worker.run())

    def kinds(self, run_id: str | None = None) -> list[str]:
        return [e.kind for e in self.events if run_id is None or e.run_id == run_id]

    async def stop(self) -> None:
        self.worker.stop()
        await asyncio.wait_for(self.task, 10)


async def until(check: Callable[[], Awaitable[bool]], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def statuses(store: Any) -> dict[str, str]:
    return {r.id: r.status for r in await store.list_runs(limit=1000)}


async def all_done(store: Any) -> bool:
    return all(s != "running" for s in (await statuses(store)).values())


async def test_a_worker_drives_every_submitted_run_to_its_end() -> None:
    store = ValidatingStore(MemoryStore())
    agents = {"echo": echo_agent("echo", 2), "napper": napper(0.05)}
    ids = [(await Runner(agents["echo"], store).submit(f"go {i}")).id for i in range(7)]
    ids += [(await Runner(agents["napper"], store).submit("nap")).id for _ in range(3)]
    w = Running(store, agents=agents)
    await until(lambda: all_done(store))
    await w.stop()
    assert set((await statuses(store)).values()) == {"completed"}
    assert sorted(e.run_id for e in w.events if e.kind == "claimed") == sorted(ids)
    assert w.kinds().count("finished") == len(ids)
    assert await store.leases() == []  # every lease given back
    assert await store.workers(within_seconds=60) == []  # gone, at once
    assert w.kinds()[0] == "started" and w.kinds()[-1] == "stopped"


async def test_a_worker_takes_no_more_runs_than_its_slots() -> None:
    store = MemoryStore()
    agent = napper(0.3)
    for _ in range(5):
        await Runner(agent, store).submit("nap")
    w = Running(store, WorkerSettings(concurrency=2, poll=0.05, heartbeat=0.05, lease=0.5),
                agents={"napper": agent})
    await until(lambda: _held(store, 2))
    await asyncio.sleep(0.1)
    assert len(await store.leases()) == 2
    assert len(w.worker.held()) == 2
    await until(lambda: all_done(store))
    await w.stop()


async def _held(store: Any, count: int) -> bool:
    return len(await store.leases()) == count


async def test_a_worker_keeps_to_its_tenants_and_queue() -> None:
    store = MemoryStore()
    mine, other = napper(0, "mine", tenant="a"), napper(0, "other", tenant="b")
    kept = await Runner(mine, store).submit("x", queue="bulk")
    left = await Runner(other, store).submit("x", queue="bulk")
    default = await Runner(mine, store).submit("x")
    w = Running(store, WorkerSettings(tenants=("a",), queues=("bulk",), poll=0.05,
                                      heartbeat=0.05, lease=0.5),
                agents={"mine": mine, "other": other})
    await until(lambda: _status(store, kept.id, "completed"))
    await asyncio.sleep(0.2)
    await w.stop()
    runs = await statuses(store)
    assert (runs[left.id], runs[default.id]) == ("running", "running")


async def _status(store: Any, run_id: str, status: str) -> bool:
    return (await statuses(store)).get(run_id) == status


async def test_a_decided_run_is_picked_up_by_a_worker() -> None:
    store = MemoryStore()
    agent = echo_agent("echo", 1, pay_last=True)
    w = Running(store, agents={"echo": agent})
    doc = await Runner(agent, store).submit("pay")
    await until(lambda: _status(store, doc.id, "waiting_approval"))
    assert w.kinds(doc.id) == ["claimed", "finished"]
    decided = await Runner(agent, store).decide(
        doc.id, (await store.load(doc.id)).document.pending_approvals[0].tool_call_id,
        "approved")
    assert decided.status == "running"
    await until(lambda: _status(store, doc.id, "completed"))
    await w.stop()
    assert w.kinds(doc.id) == ["claimed", "finished", "claimed", "finished"]


async def test_shutdown_hands_runs_back_between_steps() -> None:
    store = MemoryStore()
    agent = napper(0.3, turns=3)
    doc = await Runner(agent, store).submit("nap")
    w = Running(store, agents={"napper": agent})
    await until(lambda: _calls(1))
    w.worker.stop()  # mid-step: the step (the nap and its commit) finishes first
    await asyncio.wait_for(w.task, 10)
    stored = (await store.load(doc.id)).document
    assert (stored.status, stored.turns, len(CALLS)) == ("running", 1, 1)
    assert len(stored.messages) == 3  # the tool's result was committed before the hand-back
    assert await store.leases() == []
    assert w.kinds(doc.id) == ["claimed", "handed_back"]
    finish = Running(store, agents={"napper": agent})  # another worker carries on
    await until(lambda: _status(store, doc.id, "completed"))
    await finish.stop()
    assert len(CALLS) == 3


async def _calls(count: int) -> bool:
    return len(CALLS) >= count


async def test_a_drive_past_the_drain_is_stopped_and_its_spend_call_is_uncertain() -> None:
    store = MemoryStore()
    agent = napper(30, spend=True)
    doc = await Runner(agent, store).submit("spend")
    w = Running(store, WorkerSettings(poll=0.05, heartbeat=0.05, lease=0.5, drain=0.2),
                agents={"napper": agent})
    await until(lambda: _calls(1))
    t0 = time.monotonic()
    await w.stop()
    assert time.monotonic() - t0 < 5
    [item] = await store.governance().receipts()
    assert item.receipt["status"] == "Uncertain"
    assert (await store.load(doc.id)).document.status == "running"  # not cancelled
    assert await store.leases() == []
    assert w.kinds(doc.id) == ["claimed", "handed_back"]


async def test_a_run_cancelled_by_another_process_stops_its_drive_at_once() -> None:
    from oarlock.engine._runner import cancel_run

    store = MemoryStore()
    agent = napper(30)
    doc = await Runner(agent, store).submit("nap")
    w = Running(store, agents={"napper": agent})
    await until(lambda: _calls(1))
    t0 = time.monotonic()
    await cancel_run(store, doc.id, "not needed")  # written without a lease, as a command does
    await until(lambda: _kind(w, "finished"))
    assert time.monotonic() - t0 < 2  # the watch saw it: the nap was not waited out
    await w.stop()
    assert (await store.load(doc.id)).document.status == "cancelled"
    assert [e.detail for e in w.events if e.run_id == doc.id] == [
        "epoch 1, tenant default", "cancelled"]
    assert await store.leases() == []


async def test_a_drive_past_the_maximum_run_time_fails_its_run() -> None:
    store = MemoryStore()
    agent = napper(30)
    doc = await Runner(agent, store).submit("nap")
    w = Running(store, WorkerSettings(poll=0.05, heartbeat=0.05, lease=0.5, max_run_time=0.3),
                agents={"napper": agent})
    await until(lambda: _status(store, doc.id, "failed"))
    await w.stop()
    stored = (await store.load(doc.id)).document
    assert stored.error == "stopped after the maximum run time of 0.3 s"
    assert w.kinds(doc.id) == ["claimed", "failed"]
    assert await store.leases() == []


async def test_a_lease_lost_under_a_drive_stops_it_and_writes_nothing_more() -> None:
    store = MemoryStore()
    agent = napper(30, spend=True)
    doc = await Runner(agent, store).submit("spend")
    w = Running(store, agents={"napper": agent})
    await until(lambda: _calls(1))
    [lease] = await store.leases()
    await store.release(lease)  # as if the worker had stalled past its lease
    thief = await store.claim_run(doc.id, "worker:other:1:x", lease_seconds=60)
    ledger = await store.governance().ledger()
    await until(lambda: _kind(w, "lease_lost"))
    await w.stop()
    assert await store.governance().ledger() == ledger  # no receipt of the stopped call
    assert [(x.owner, x.epoch) for x in await store.leases()] == [(thief.owner, thief.epoch)]
    assert (await store.load(doc.id)).document.status == "running"


async def _kind(w: Running, kind: str) -> bool:
    return kind in w.kinds()


async def test_a_run_whose_agent_cannot_be_loaded_fails_saying_why(tmp_path: Path) -> None:
    store = MemoryStore()
    agent = napper(0, "unknown")
    no_ref = await Runner(agent, store).submit("x")
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [not a name\n")
    bad_ref = await Runner(agent, store).submit("x", agent_ref=str(broken))
    w = Running(store)
    await until(lambda: all_done(store))
    await w.stop()
    runs = {r: (await store.load(r)).document for r in (no_ref.id, bad_ref.id)}
    assert runs[no_ref.id].status == "failed"
    assert "has no agent on record" in (runs[no_ref.id].error or "")
    assert runs[bad_ref.id].status == "failed"
    assert str(broken) in (runs[bad_ref.id].error or "")


async def test_a_run_of_an_agent_file_is_driven_with_its_agent_loaded_once(
    tmp_path: Path,
) -> None:
    (tmp_path / "script.yaml").write_text("- text: hello\n")
    agent_file = tmp_path / "greeter.yaml"
    agent_file.write_text("name: greeter\nmodel: scripted:script.yaml\n")
    from oarlock.engine._agentfile import load_agent

    store = MemoryStore()
    greeter = load_agent(agent_file)
    ids = [(await Runner(greeter, store).submit("hi", agent_ref=str(agent_file))).id
           for _ in range(3)]
    w = Running(store)
    await until(lambda: all_done(store))
    await w.stop()
    assert {(await store.load(i)).document.result for i in ids} == {"hello"}
    assert len(w.worker._agents._loaded) == 1


def approval_ttl_agent(ttl: float) -> Agent:
    policy = RulePolicy.from_dict({"policy": "p", "approval_ttl": ttl, "rules": []})
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "spend_slowly", "arguments": {"seconds": 0}}]},
        {"text": "understood"},
    ]
    return Agent("expiring", ScriptedModel(script), tools=[spend_slowly], policy=policy)


async def test_lapsed_approvals_are_denied_by_one_worker_and_the_run_ends() -> None:
    store = MemoryStore()
    agent = approval_ttl_agent(0.3)
    doc = await Runner(agent, store).start("pay")
    assert doc.status == "waiting_approval"
    workers = [Running(store, agents={"expiring": agent}) for _ in range(2)]
    await until(lambda: _status(store, doc.id, "completed"))
    for w in workers:
        await w.stop()
    [decided] = [e.data for e in await store.events(doc.id) if e.kind == "approval_decided"]
    assert (decided["decision"], decided["decidedBy"]) == ("denied", "policy")
    assert decided["reason"].startswith("expired: no decision by ")
    assert sum(w.kinds(doc.id).count("expired") for w in workers) == 1
    assert CALLS == []


class NoSweeping:
    """A run queue without the optional Sweeping methods."""

    def __init__(self, inner: MemoryStore) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        if name in ("lead", "lapsed_approvals"):
            raise AttributeError(name)
        return getattr(self.inner, name)


async def test_without_sweeping_the_smallest_live_worker_sweeps() -> None:
    inner = MemoryStore()
    store = NoSweeping(inner)
    assert isinstance(store, RunQueue)
    agent = approval_ttl_agent(0.3)
    doc = await Runner(agent, inner).start("pay")
    workers = [Running(store, agents={"expiring": agent}, owner=f"worker:h:1:{c}")
               for c in ("b", "a")]
    await until(lambda: _status(inner, doc.id, "completed"))
    for w in workers:
        await w.stop()
    assert [w.kinds(doc.id).count("expired") for w in workers] == [0, 1]


def test_settings_are_checked() -> None:
    for bad, message in (
        ({"concurrency": 0}, "concurrency"),
        ({"concurrency": 2.5}, "concurrency"),
        ({"poll": float("nan")}, "poll"),
        ({"heartbeat": -1}, "heartbeat"),
        ({"lease": 5, "heartbeat": 3}, "two heartbeats"),
        ({"max_run_time": 0}, "max_run_time"),
        ({"tenants": "acme"}, "tenants"),
        ({"queues": ()}, "queues"),
    ):
        with pytest.raises(UsageError, match=message):
            WorkerSettings(**bad)
    assert WorkerSettings(max_run_time=None, tenants=None, queues=None).queues is None


def test_a_worker_needs_a_run_queue() -> None:
    class Plain:
        pass

    with pytest.raises(UsageError, match="run queue"):
        Worker(Plain())  # type: ignore[arg-type]

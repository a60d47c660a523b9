"""The one dispatch of where a run is driven (``oarlock.engine._dispatch``), without a
Temporal server: what it says for each action, a caller's runner that never drives a
run Temporal drives (refused, or sent to a frontend that cannot be reached, the run
unchanged), the activities' runner that does, the denial rule, a native run that never
imports Temporal's SDK, and the wait at exit for the SDK's threads."""

from __future__ import annotations

import _thread
import asyncio
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from oarlock._driven import TemporalTarget
from oarlock.engine import Agent, Runner
from oarlock.engine._dispatch import check_decision, driver
from oarlock.errors import ConfigError, DecisionRefused, RunStateError
from oarlock.formats import dump_run
from oarlock.models._base import ModelRequest, ModelResponse
from oarlock.testing import MemoryStore, ScriptedModel, ValidatingStore
from oarlock.tools import tool

RAN: list[str] = []
NOWHERE = TemporalTarget("127.0.0.1:1", "q")  # nothing listens on port 1


@tool(side_effect="spend")
def refund(order_id: str, amount: int) -> str:
    """Refund an order."""
    RAN.append(order_id)
    return f"refunded {amount} on {order_id}"


WAITING = {"tool_calls": [{"name": "refund", "arguments": {"order_id": "A1", "amount": 8},
                           "id": "c_refund"}]}  # fmt: skip


class NeverAsked:
    """A model that fails the test when asked: a run driven here would ask it."""

    model_id = "never-asked"

    async def respond(self, request: ModelRequest) -> ModelResponse:
        raise AssertionError("the run was driven in the calling process")


@pytest.fixture(autouse=True)
def _clear() -> None:
    RAN.clear()


async def _waiting_on_temporal(store: Any) -> str:
    """A run waiting for the approval of its refund, then handed to Temporal (its
    ``drivenBy`` member naming a frontend nobody listens at)."""
    native = Runner(Agent("agent", ScriptedModel([WAITING, {"text": "done"}]), tools=[refund]),
                    store)  # fmt: skip
    doc = await native.start("refund A1")
    assert doc.status == "waiting_approval"
    stored = await store.load(doc.id)
    setattr(stored.document, "drivenBy", NOWHERE.member())  # noqa: B010 - an extension member
    await store.save(stored.document, stored.version, [])
    return str(doc.id)


async def _as_stored(store: Any, run_id: str) -> tuple[dict[str, Any], int, int]:
    stored = await store.load(run_id)
    return dump_run(stored.document), stored.version, len(await store.events(run_id))


def test_driver_says_where_each_action_goes() -> None:
    from oarlock.engine import _core as core

    doc, _ = core.new_run(run_id="r", agent="a", model="m", input="hi",
                          now="2026-01-01T00:00:00Z")  # fmt: skip
    for action in ("decide", "resume", "cancel", "continue", "retry"):
        assert driver(doc, action) is None  # type: ignore[arg-type]
    setattr(doc, "drivenBy", NOWHERE.member())  # noqa: B010
    for action in ("decide", "cancel", "continue", "retry"):
        assert driver(doc, action) == NOWHERE  # type: ignore[arg-type]
    with pytest.raises(RunStateError) as refused:
        driver(doc, "resume")
    assert refused.value.code == "temporal_driven"
    assert "driven by Temporal" in str(refused.value)
    # the runner of a Temporal worker's activities takes the steps of the runs Temporal drives
    assert driver(doc, "resume", "temporal") is None
    assert driver(doc, "decide", "temporal") is None


@pytest.mark.parametrize("reason", [None, "", "   ", "\n\t"])
def test_a_denial_needs_a_reason(reason: str | None) -> None:
    with pytest.raises(DecisionRefused) as refused:
        check_decision("denied", reason)
    assert refused.value.code == "reason_required"
    check_decision("denied", "too much")
    check_decision("approved", reason)
    check_decision("responded", reason)


def test_a_callers_runner_never_drives_a_run_temporal_drives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OARLOCK_TEMPORAL_ADDRESS", raising=False)

    async def main() -> None:
        store = ValidatingStore(MemoryStore())
        run_id = await _waiting_on_temporal(store)
        commits: list[Any] = []
        runner = Runner(Agent("agent", NeverAsked(), tools=[refund]), store,
                        on_commit=lambda doc, events: commits.append(events))  # fmt: skip
        before = await _as_stored(store, run_id)

        with pytest.raises(RunStateError) as resumed:
            await runner.resume(run_id)
        assert resumed.value.code == "temporal_driven"
        with pytest.raises(DecisionRefused) as unexplained:
            await runner.decide(run_id, "c_refund", "denied", reason=" ")
        assert unexplained.value.code == "reason_required"
        attempts = [
            runner.decide(run_id, "c_refund", "approved", resume=True),
            runner.decide(run_id, "c_refund", "denied", reason="no"),
            runner.cancel(run_id, "withdrawn"),
            runner.continue_run(run_id, "more"),
            runner.retry(run_id),
        ]
        for attempt in attempts:  # sent to its workflow, whose frontend does not answer
            with pytest.raises(ConfigError) as unreachable:
                await attempt
            assert unreachable.value.code == "temporal_unreachable"
            said = str(unreachable.value)
            assert said.startswith(f"run {run_id} is driven by Temporal (its drivenBy member)")
            assert "cannot reach Temporal at 127.0.0.1:1" in said
        assert await _as_stored(store, run_id) == before  # nothing changed, nothing driven
        assert commits == []
        assert RAN == []

        # the frontend of a stored run: $OARLOCK_TEMPORAL_ADDRESS when set
        monkeypatch.setenv("OARLOCK_TEMPORAL_ADDRESS", "127.0.0.1:2")
        with pytest.raises(ConfigError) as moved:
            await runner.decide(run_id, "c_refund", "approved")
        assert "cannot reach Temporal at 127.0.0.1:2" in str(moved.value)

    asyncio.run(main())


def test_the_activities_runner_takes_the_steps_of_a_run_temporal_drives() -> None:
    from oarlock.temporal._activities import _StepRunner

    async def main() -> None:
        store = ValidatingStore(MemoryStore())
        run_id = await _waiting_on_temporal(store)
        agent = Agent("agent", ScriptedModel([WAITING, {"text": "done"}]), tools=[refund])
        runner = _StepRunner(agent, store)
        with pytest.raises(DecisionRefused) as unexplained:  # the rule holds here too
            await runner.decide(run_id, "c_refund", "denied")
        assert unexplained.value.code == "reason_required"
        doc = await runner.decide(run_id, "c_refund", "approved")
        assert doc.pending_approvals[0].decision == "approved"
        doc = await runner.resume(run_id)
        assert doc.status == "completed"
        assert RAN == ["A1"]

    asyncio.run(main())


NATIVE_SCRIPT = """
import asyncio, sys
from oarlock.engine import Agent, Runner
from oarlock.testing import MemoryStore, ScriptedModel
from oarlock.tools import tool

@tool(side_effect="spend")
def refund(order_id: str) -> str:
    "Refund."
    return "refunded"

async def main():
    turns = [{"tool_calls": [{"name": "refund", "arguments": {"order_id": "A"}, "id": "c"}]},
             {"text": "done"}, {"text": "more"}]
    runner = Runner(Agent("a", ScriptedModel(turns), tools=[refund]), MemoryStore())
    doc = await runner.start("go")
    doc = await runner.decide(doc.id, "c", "approved", resume=True)
    doc = await runner.continue_run(doc.id, "and?")
    await runner.cancel((await runner.start("again")).id, "stop")
    print(doc.status, "temporalio" in sys.modules)

asyncio.run(main())
"""


def test_a_native_run_is_dispatched_without_temporals_sdk() -> None:
    done = subprocess.run([sys.executable, "-c", NATIVE_SCRIPT], capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["completed", "False"]


def test_settle_waits_until_only_python_threads_hold_thread_states() -> None:
    from oarlock.temporal import _exit

    assert _exit.thread_states() == len(threading.enumerate())
    gate = threading.Event()
    ended = threading.Event()

    def foreign() -> None:  # a thread threading does not know, as the SDK's are
        gate.wait(10)
        ended.set()

    _thread.start_new_thread(foreign, ())
    deadline = time.monotonic() + 10
    while _exit.thread_states() == len(threading.enumerate()):  # until it has started
        assert time.monotonic() < deadline
        time.sleep(0.001)
    assert _exit.settle(bound=0.05) is False  # it still holds one: waited, in vain
    threading.Timer(0.2, gate.set).start()
    started = time.monotonic()
    assert _exit.settle(bound=10) is True
    assert ended.is_set()
    assert time.monotonic() - started >= 0.15

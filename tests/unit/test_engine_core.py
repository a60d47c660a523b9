"""Every status transition of the turn loop, driven through the Runner.

Every run goes through ``ValidatingStore(MemoryStore())``, so every document the runner
writes is proven valid (schema and semantic rules) on the way. Model calls are counted
with a wrapper model, so "the model was not asked again" is checked, not assumed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest

import oarlock
from helpers import result_text
from oarlock.engine import Agent, Limits, RetryPolicy, Runner
from oarlock.errors import ConfigError, DecisionRefused, RunStateError
from oarlock.formats import dump_run
from oarlock.models import ModelRequest, ModelResponse, Price
from oarlock.testing import MemoryStore, ScriptedModel, ValidatingStore
from oarlock.tools import tool

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


class CountingModel:
    """Delegates to another model and counts every request (failed attempts included)."""

    def __init__(self, inner: Any, model_id: str | None = None) -> None:
        self.inner = inner
        self.calls = 0
        self._model_id = model_id

    @property
    def model_id(self) -> str:
        return self._model_id or self.inner.model_id

    async def respond(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        return await self.inner.respond(request)


class BrokenAdapter:
    """An adapter with a bug: it raises something that is not a ModelError."""

    def __init__(self) -> None:
        self.calls = 0

    @property
    def model_id(self) -> str:
        return "scripted:broken"

    async def respond(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        raise RuntimeError("adapter bug")


@tool(side_effect="read")
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


REFUNDS: list[dict[str, Any]] = []


@tool(side_effect="spend")
def refund(order_id: str, amount: int) -> str:
    """Refund an order."""
    REFUNDS.append({"order_id": order_id, "amount": amount})
    return f"refunded {amount} on {order_id}"


def tool_turn(i: int = 0, **usage: int) -> dict[str, Any]:
    turn: dict[str, Any] = {"tool_calls": [{"name": "lookup", "arguments": {"key": f"k{i}"}}]}
    if usage:
        turn["usage"] = usage
    return turn


def refund_turn(amount: int = 5) -> dict[str, Any]:
    return {"tool_calls": [{"name": "refund", "arguments": {"order_id": "A1", "amount": amount}}]}


def setup(
    turns: list[dict[str, Any]], *, limits: Limits | None = None,
    prices: dict[str, Price] | None = None, retry: RetryPolicy | None = None,
    name: str = "script",
) -> tuple[Runner, CountingModel, ValidatingStore]:
    model = CountingModel(ScriptedModel(turns, name=name))
    store = ValidatingStore(MemoryStore())
    agent = Agent("agent", model, tools=[lookup, refund], limits=limits, prices=prices)
    runner = Runner(agent, store, retry=retry or RetryPolicy(attempts=1, base_delay=0))
    return runner, model, store


async def transitions(store: ValidatingStore, run_id: str) -> list[tuple[str, str]]:
    return [(e.data["from"], e.data["to"]) for e in await store.events(run_id)
            if e.kind == "status_changed"]


async def stored(store: ValidatingStore, run_id: str) -> tuple[dict[str, Any], int]:
    s = await store.load(run_id)
    return dump_run(s.document), s.version


def assert_valid(doc: Any) -> None:
    report = oarlock.validate(dump_run(doc), "run")
    assert report.valid, [(p.pointer, p.rule, p.message) for p in report.errors]


@pytest.fixture(autouse=True)
def _clear_refunds() -> None:
    REFUNDS.clear()


# -- running -> completed ------------------------------------------------------------------
def test_final_answer_completes_with_the_text_as_result() -> None:
    runner, model, store = setup([{"text": "the answer is 42"}])

    async def go() -> None:
        doc = await runner.start("question")
        assert doc.status == "completed"
        assert doc.result == "the answer is 42"
        assert doc.turns == 1
        assert doc.error is None
        assert model.calls == 1
        assert [m.role for m in doc.messages] == ["user", "assistant"]
        assert await transitions(store, doc.id) == [("running", "completed")]
        saved, _ = await stored(store, doc.id)
        assert saved == dump_run(doc)
        assert_valid(doc)

    run(go())
    assert store.writes == 2  # created, then the model turn: both proven valid


def test_tool_turns_then_final_answer_completes() -> None:
    runner, model, store = setup([tool_turn(1), tool_turn(2), {"text": "done"}])

    async def go() -> None:
        doc = await runner.start("q")
        assert doc.status == "completed"
        assert doc.result == "done"
        assert doc.turns == 3
        assert model.calls == 3
        assert await transitions(store, doc.id) == [("running", "completed")]
        results = [p for m in doc.messages if m.role == "user" for p in m.content
                   if p.type == "tool_result"]
        assert [result_text(r) for r in results] == ["value of k1", "value of k2"]
        assert not any(r.is_error for r in results)

    run(go())


# -- running -> waiting_approval -> running -> completed -----------------------------------
def test_waiting_approval_then_running_then_completed() -> None:
    runner, model, store = setup([refund_turn(7), {"text": "refunded"}])

    async def go() -> None:
        doc = await runner.start("refund A1")
        assert doc.status == "waiting_approval"
        assert [a.tool_call_id for a in doc.pending_approvals] == ["call_1_1"]
        assert doc.pending_approvals[0].decision is None
        assert REFUNDS == []  # nothing ran before the approval
        assert model.calls == 1

        doc = await runner.decide(doc.id, "call_1_1", "approved")
        assert doc.status == "running"
        assert REFUNDS == []  # decide records; resume runs

        doc = await runner.resume(doc.id)
        assert doc.status == "completed"
        assert doc.result == "refunded"
        assert REFUNDS == [{"order_id": "A1", "amount": 7}]
        assert doc.pending_approvals == []
        assert doc.buffered_tool_results == []
        assert model.calls == 2
        assert await transitions(store, doc.id) == [
            ("running", "waiting_approval"), ("waiting_approval", "running"),
            ("running", "completed")]
        assert_valid(doc)

    run(go())


def test_resume_of_a_waiting_run_stays_waiting_and_runs_nothing() -> None:
    runner, model, store = setup([refund_turn(), {"text": "x"}])

    async def go() -> None:
        doc = await runner.start("q")
        before = await stored(store, doc.id)
        doc = await runner.resume(doc.id)
        assert doc.status == "waiting_approval"
        assert await stored(store, doc.id) == before
        assert model.calls == 1
        assert REFUNDS == []

    run(go())


# -- halted_max_turns ----------------------------------------------------------------------
@pytest.mark.parametrize("max_turns", [1, 2, 3])
def test_max_turns_halts_at_the_exact_boundary(max_turns: int) -> None:
    script = [tool_turn(i) for i in range(1, 7)] + [{"text": "never reached"}]
    runner, model, store = setup(script, limits=Limits(max_turns=max_turns))

    async def go() -> None:
        doc = await runner.start("q")
        assert doc.status == "halted_max_turns"
        assert model.calls == max_turns  # the (max_turns + 1)th request never happens
        assert doc.turns == max_turns
        assert f"turn limit ({max_turns})" in (doc.error or "")
        assert doc.messages[-1].role == "user"  # the last tool results are kept
        assert doc.result is None
        assert await transitions(store, doc.id) == [("running", "halted_max_turns")]
        doc = await runner.resume(doc.id)  # a halted run stays halted
        assert doc.status == "halted_max_turns"
        assert model.calls == max_turns
        assert_valid(doc)

    run(go())


def test_max_turns_two_exactly_two_model_calls() -> None:
    runner, model, _ = setup([tool_turn(1), tool_turn(2), {"text": "third"}],
                             limits=Limits(max_turns=2))
    doc = run(runner.start("q"))
    assert doc.status == "halted_max_turns"
    assert model.calls == 2
    assert sum(1 for m in doc.messages if m.role == "assistant") == 2


def test_max_turns_zero_halts_before_any_model_call() -> None:
    runner, model, store = setup([{"text": "never"}], limits=Limits(max_turns=0))

    async def go() -> None:
        doc = await runner.start("q")
        assert doc.status == "halted_max_turns"
        assert model.calls == 0
        assert doc.turns == 0
        assert len(doc.messages) == 1
        assert await transitions(store, doc.id) == [("running", "halted_max_turns")]
        assert_valid(doc)

    run(go())


def test_final_answer_on_the_last_allowed_turn_completes() -> None:
    runner, model, _ = setup([tool_turn(1), {"text": "just in time"}],
                             limits=Limits(max_turns=2))
    doc = run(runner.start("q"))
    assert doc.status == "completed"
    assert doc.result == "just in time"
    assert model.calls == 2


# -- halted_budget -------------------------------------------------------------------------
PRICED = {"scripted:priced": Price(1_000_000.0, 0.0)}  # 1 USD per input token


@pytest.mark.parametrize(("limit", "expected_calls"), [
    (0.0, 0), (0.5, 1), (1.0, 1), (1.5, 2), (2.0, 2), (2.25, 3), (3.0, 3),
])
def test_cost_limit_halts_when_spent_reaches_it_not_before(
    limit: float, expected_calls: int,
) -> None:
    script = [tool_turn(i, input_tokens=1) for i in range(1, 8)] + [{"text": "never"}]
    runner, model, store = setup(script, limits=Limits(max_cost_usd=limit), prices=PRICED,
                                 name="priced")

    async def go() -> None:
        doc = await runner.start("q")
        assert doc.status == "halted_budget"
        assert model.calls == expected_calls
        assert doc.usage.cost_usd == pytest.approx(float(expected_calls))
        assert doc.usage.cost_usd >= limit
        assert "cost limit" in (doc.error or "")
        assert await transitions(store, doc.id) == [("running", "halted_budget")]
        assert_valid(doc)

    run(go())


def test_cost_limit_boundary_is_decimal_not_binary() -> None:
    """0.7 + 0.1 is 0.7999999999999999 in binary floating point: a run that has spent
    0.8 USD of a 0.8 USD limit must halt all the same."""
    prices = {"scripted:priced": Price(100_000.0, 0.0)}  # 0.1 USD per input token
    script = [tool_turn(1, input_tokens=7), tool_turn(2, input_tokens=1),
              tool_turn(3, input_tokens=1), {"text": "never"}]
    runner, model, _ = setup(script, limits=Limits(max_cost_usd=0.8), prices=prices,
                             name="priced")
    doc = run(runner.start("q"))
    assert doc.status == "halted_budget"
    assert model.calls == 2
    assert doc.usage.cost_usd == pytest.approx(0.8)


def test_cost_is_priced_per_input_and_output_token() -> None:
    prices = {"scripted:priced": Price(2.0, 8.0)}
    runner, _, _ = setup([tool_turn(1, input_tokens=1000, output_tokens=500),
                          {"text": "ok", "usage": {"input_tokens": 3000, "output_tokens": 0}}],
                         prices=prices, name="priced")
    doc = run(runner.start("q"))
    assert doc.status == "completed"
    assert doc.usage.input_tokens == 4000
    assert doc.usage.output_tokens == 500
    assert doc.usage.cost_usd == pytest.approx((4000 * 2.0 + 500 * 8.0) / 1_000_000)


@pytest.mark.parametrize(("per_turn", "limit", "expected_calls"), [
    (5, 10, 2), (4, 10, 3), (10, 10, 1), (11, 10, 1), (9, 10, 2), (1, 0, 0),
])
@pytest.mark.parametrize("kind", ["input", "output"])
def test_token_limits_halt_when_spent_reaches_them_not_before(
    kind: str, per_turn: int, limit: int, expected_calls: int,
) -> None:
    usage = {f"{kind}_tokens": per_turn}
    script = [tool_turn(i, **usage) for i in range(1, 8)] + [{"text": "never"}]
    limits = (Limits(max_input_tokens=limit) if kind == "input"
              else Limits(max_output_tokens=limit))
    runner, model, _ = setup(script, limits=limits)
    doc = run(runner.start("q"))
    assert doc.status == "halted_budget"
    assert model.calls == expected_calls
    spent = doc.usage.input_tokens if kind == "input" else doc.usage.output_tokens
    assert spent == per_turn * expected_calls
    assert f"{kind} tokens limit" in (doc.error or "")
    assert_valid(doc)


def test_cost_limit_on_an_unpriced_model_is_a_config_error() -> None:
    model = CountingModel(ScriptedModel([{"text": "x"}]), model_id="acme:unpriced-1")
    with pytest.raises(ConfigError) as caught:
        Agent("agent", model, limits=Limits(max_cost_usd=1.0))
    assert caught.value.code == "unpriced_model"
    # a token limit needs no price, and a price given by the user is enough
    Agent("agent", model, limits=Limits(max_input_tokens=10))
    Agent("agent", model, limits=Limits(max_cost_usd=1.0),
          prices={"acme:unpriced-1": Price(1.0, 1.0)})


def test_unpriced_model_without_cost_limit_marks_cost_unknown() -> None:
    model = CountingModel(ScriptedModel([{"text": "ok", "usage": {"input_tokens": 3}}]),
                          model_id="acme:unpriced-1")
    store = ValidatingStore(MemoryStore())
    doc = run(Runner(Agent("agent", model), store).start("q"))
    assert doc.status == "completed"
    usage = dump_run(doc)["usage"]
    assert usage["costKnown"] is False
    assert usage["inputTokens"] == 3


@pytest.mark.parametrize("bad", [-1, -0.5, True])
def test_negative_or_boolean_limits_are_refused(bad: Any) -> None:
    with pytest.raises(ConfigError):
        Limits(max_turns=bad)


# -- failed after retries ------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["rate_limit", "server_error"])
@pytest.mark.parametrize("failures", [3, 4, 7])
def test_as_many_or_more_failures_than_attempts_fails_the_run(kind: str, failures: int) -> None:
    turn = {"text": "never", "fail": [{"kind": kind}] * failures}
    runner, model, store = setup([turn], retry=RetryPolicy(attempts=3, base_delay=0))

    async def go() -> None:
        doc = await runner.start("q")
        assert doc.status == "failed"
        assert model.calls == 3  # exactly `attempts` requests, no more
        assert f"({kind})" in (doc.error or "")
        assert "3 attempts" in (doc.error or "")
        assert doc.turns == 0
        assert doc.result is None
        assert await transitions(store, doc.id) == [("running", "failed")]
        assert_valid(doc)

    run(go())


@pytest.mark.parametrize("failures", [0, 1, 2])
def test_fewer_failures_than_attempts_succeeds(failures: int) -> None:
    turn = {"text": "made it", "fail": [{"kind": "rate_limit"}] * failures}
    runner, model, _ = setup([turn], retry=RetryPolicy(attempts=3, base_delay=0))
    doc = run(runner.start("q"))
    assert doc.status == "completed"
    assert doc.result == "made it"
    assert model.calls == failures + 1


def test_retries_apply_to_every_turn_separately() -> None:
    script = [{**tool_turn(1), "fail": [{"kind": "server_error"}] * 2},
              {"text": "ok", "fail": [{"kind": "rate_limit"}] * 2}]
    runner, model, _ = setup(script, retry=RetryPolicy(attempts=3, base_delay=0))
    doc = run(runner.start("q"))
    assert doc.status == "completed"
    assert model.calls == 6


RECORDED: list[tuple[int, float | None, float]] = []


class RecordingRetry(RetryPolicy):
    """Records each delay the runner asks for, and what the real policy answers."""

    def delay(self, attempt: int, retry_after: float | None) -> float:
        value = super().delay(attempt, retry_after)
        RECORDED.append((attempt, retry_after, value))
        return value


def test_retry_after_from_the_provider_is_passed_to_the_policy() -> None:
    RECORDED.clear()
    turn = {"text": "ok", "fail": [{"kind": "rate_limit", "retry_after": 0.02},
                                   {"kind": "server_error"},
                                   {"kind": "rate_limit", "retry_after": 99}]}
    runner, model, _ = setup([turn], retry=RecordingRetry(attempts=4, base_delay=0,
                                                          max_delay=0.03))
    doc = run(runner.start("q"))
    assert doc.status == "completed"
    assert model.calls == 4
    assert RECORDED == [(1, 0.02, 0.02), (2, None, 0.0), (3, 99, 0.03)]


def test_retry_after_is_really_waited_for() -> None:
    turn = {"text": "ok", "fail": [{"kind": "rate_limit", "retry_after": 0.25}]}
    runner, _, _ = setup([turn], retry=RetryPolicy(attempts=2, base_delay=0, max_delay=5))
    began = time.monotonic()
    doc = run(runner.start("q"))
    assert doc.status == "completed"
    assert time.monotonic() - began >= 0.24


def test_retry_after_is_capped_by_max_delay() -> None:
    turn = {"text": "ok", "fail": [{"kind": "rate_limit", "retry_after": 3600}]}
    runner, _, _ = setup([turn], retry=RetryPolicy(attempts=2, base_delay=0, max_delay=0.01))
    began = time.monotonic()
    doc = run(runner.start("q"))
    assert doc.status == "completed"
    assert time.monotonic() - began < 5


def test_retry_policy_delay() -> None:
    policy = RetryPolicy(attempts=5, base_delay=0.5, max_delay=4.0)
    assert policy.delay(1, 2.5) == 2.5
    assert policy.delay(3, 0.0) == 0.0
    assert policy.delay(1, 60.0) == 4.0  # capped
    assert policy.delay(1, -1.0) == 0.0  # never negative
    for attempt, full in ((1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (9, 4.0)):
        for _ in range(20):
            assert full * 0.5 <= policy.delay(attempt, None) <= full


# -- failed at once --------------------------------------------------------------------------
def test_fatal_model_error_fails_at_once_without_retry() -> None:
    turn = {"text": "never", "fail": [{"kind": "fatal", "message": "bad key"}]}
    runner, model, store = setup([turn], retry=RetryPolicy(attempts=5, base_delay=0))

    async def go() -> None:
        doc = await runner.start("q")
        assert doc.status == "failed"
        assert model.calls == 1
        assert "scripted_fatal" in (doc.error or "")
        assert "bad key" in (doc.error or "")
        assert await transitions(store, doc.id) == [("running", "failed")]
        assert_valid(doc)
        doc = await runner.resume(doc.id)  # failed is final
        assert doc.status == "failed"
        assert model.calls == 1

    run(go())


def test_fatal_error_after_tool_turns_keeps_the_history() -> None:
    script = [tool_turn(1), {"text": "x", "fail": [{"kind": "fatal"}]}]
    runner, model, _ = setup(script, retry=RetryPolicy(attempts=3, base_delay=0))
    doc = run(runner.start("q"))
    assert doc.status == "failed"
    assert doc.turns == 1
    assert model.calls == 2
    assert [m.role for m in doc.messages] == ["user", "assistant", "user"]


def test_an_adapter_crash_fails_the_run_without_retry() -> None:
    model = BrokenAdapter()
    store = ValidatingStore(MemoryStore())
    runner = Runner(Agent("agent", model), store, retry=RetryPolicy(attempts=4, base_delay=0))
    doc = run(runner.start("q"))
    assert doc.status == "failed"
    assert model.calls == 1
    assert "adapter_error" in (doc.error or "")
    assert "RuntimeError" in (doc.error or "")


def test_an_exhausted_script_fails_the_run() -> None:
    runner, _, _ = setup([tool_turn(1)])
    doc = run(runner.start("q"))
    assert doc.status == "failed"
    assert "script_exhausted" in (doc.error or "")


# -- cancelled ---------------------------------------------------------------------------------
def test_cancel_a_running_run_before_it_is_resumed() -> None:
    runner, model, store = setup([{"text": "never"}])

    async def go() -> None:
        doc, _ = await runner.create("q")
        assert doc.status == "running"
        doc = await runner.cancel(doc.id, "changed my mind")
        assert doc.status == "cancelled"
        assert doc.error == "changed my mind"
        doc = await runner.resume(doc.id)
        assert doc.status == "cancelled"
        assert model.calls == 0
        assert await transitions(store, doc.id) == [("running", "cancelled")]
        assert_valid(doc)

    run(go())


def test_cancel_after_all_decisions_runs_no_approved_tool() -> None:
    runner, model, _ = setup([refund_turn(9), {"text": "never"}])

    async def go() -> None:
        doc = await runner.start("q")
        doc = await runner.decide(doc.id, "call_1_1", "approved")
        assert doc.status == "running"
        doc = await runner.cancel(doc.id)
        assert doc.status == "cancelled"
        doc = await runner.resume(doc.id)
        assert doc.status == "cancelled"
        assert REFUNDS == []
        assert model.calls == 1
        assert_valid(doc)

    run(go())


def test_cancel_while_waiting_keeps_the_undecided_approvals() -> None:
    script = [{"tool_calls": [
        {"name": "refund", "arguments": {"order_id": "A", "amount": 1}},
        {"name": "refund", "arguments": {"order_id": "B", "amount": 2}},
        {"name": "lookup", "arguments": {"key": "k"}}]}, {"text": "never"}]
    runner, model, store = setup(script)

    async def go() -> None:
        doc = await runner.start("q")
        doc = await runner.decide(doc.id, "call_1_1", "approved")
        assert doc.status == "waiting_approval"
        before = dump_run(doc)
        doc = await runner.cancel(doc.id)
        assert doc.status == "cancelled"
        after = dump_run(doc)
        assert after["pendingApprovals"] == before["pendingApprovals"]
        assert after["bufferedToolResults"] == before["bufferedToolResults"]
        assert [(a.tool_call_id, a.decision) for a in doc.pending_approvals] == [
            ("call_1_1", "approved"), ("call_1_2", None)]
        saved, _ = await stored(store, doc.id)
        assert saved["pendingApprovals"] == before["pendingApprovals"]
        assert saved["status"] == "cancelled"
        assert await transitions(store, doc.id) == [
            ("running", "waiting_approval"), ("waiting_approval", "cancelled")]
        with pytest.raises(DecisionRefused) as caught:
            await runner.decide(doc.id, "call_1_2", "approved")
        assert caught.value.code == "run_not_waiting"
        doc = await runner.resume(doc.id)
        assert doc.status == "cancelled"
        assert REFUNDS == []
        assert model.calls == 1
        assert_valid(doc)

    run(go())


@pytest.mark.parametrize("final", ["completed", "failed", "halted_max_turns", "cancelled"])
def test_cancelling_a_finished_run_is_refused_and_changes_nothing(final: str) -> None:
    scripts: dict[str, tuple[list[dict[str, Any]], Limits | None]] = {
        "completed": ([{"text": "ok"}], None),
        "failed": ([{"text": "x", "fail": [{"kind": "fatal"}]}], None),
        "halted_max_turns": ([tool_turn(1), {"text": "x"}], Limits(max_turns=1)),
        "cancelled": ([{"text": "x"}], None),
    }
    script, limits = scripts[final]
    runner, _, store = setup(script, limits=limits)

    async def go() -> None:
        if final == "cancelled":
            doc, _ = await runner.create("q")
            doc = await runner.cancel(doc.id)
        else:
            doc = await runner.start("q")
        assert doc.status == final
        before = await stored(store, doc.id)
        events_before = len(await store.events(doc.id))
        with pytest.raises(RunStateError) as caught:
            await runner.cancel(doc.id, "too late")
        assert caught.value.code == "run_finished"
        assert await stored(store, doc.id) == before
        assert len(await store.events(doc.id)) == events_before

    run(go())

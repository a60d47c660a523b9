"""Telemetry in one process: refusals and unknown outcomes as span errors with their code,
idempotent replays, expired approvals, a stored trace context that is not one, off by
default, and the span tree drawn from event logs that are old or hostile."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from oarlock.engine import Agent, Runner
from oarlock.errors import ModelError, OutcomeUnknown, RetryableModelError
from oarlock.formats._codec import dump
from oarlock.formats._models import TextPart
from oarlock.governance import RulePolicy
from oarlock.models import ScriptedModel
from oarlock.models._base import ModelRequest, ModelResponse, assistant_message
from oarlock.telemetry import Telemetry, default_observer, render_tree, span_tree
from oarlock.testing import MemoryStore
from oarlock.tools import tool

sys.path.insert(0, str(Path(__file__).parents[1] / "integration"))
from telemetry_driver import metrics_json, providers, span_json


@tool(side_effect="read")
def lookup(order_id: str) -> str:
    """Look an order up."""
    return f"order {order_id}"


@tool(side_effect="spend", idempotency_key=lambda args: f"charge:{args['order_id']}")
def charge(order_id: str) -> str:
    """Charge an order."""
    return f"charged {order_id}"


@tool(side_effect="spend")
def wire(order_id: str) -> str:
    """Wire money: the bank never says whether it went."""
    raise OutcomeUnknown("the bank did not answer")


def _script(*calls: tuple[str, str]) -> list[dict[str, Any]]:
    return [
        {"tool_calls": [{"id": cid, "name": name, "arguments": {"order_id": "o1"}}
                        for cid, name in calls],
         "usage": {"input_tokens": 10, "output_tokens": 2}},
        {"text": "done", "usage": {"input_tokens": 12, "output_tokens": 1}},
    ]  # fmt: skip


class Recorded:
    def __init__(self) -> None:
        self.tracer_provider, self.exporter, self.meter_provider, self.reader = providers()
        self.observer = Telemetry(
            tracer_provider=self.tracer_provider, meter_provider=self.meter_provider
        )

    def spans(self) -> list[dict[str, Any]]:
        return [span_json(s) for s in self.exporter.get_finished_spans()]

    def metrics(self) -> list[dict[str, Any]]:
        return metrics_json(self.reader)

    def span(self, name: str) -> list[dict[str, Any]]:
        return [s for s in self.spans() if s["name"] == name]


def _runner(rec: Recorded, store: MemoryStore, *calls: tuple[str, str], **agent: Any) -> Runner:
    a = Agent("desk", ScriptedModel(_script(*calls)), tools=[lookup, charge, wire], **agent)
    return Runner(a, store, observer=rec.observer)


async def test_a_refused_call_and_an_unknown_outcome_are_span_errors_with_their_code() -> None:
    rec, store = Recorded(), MemoryStore()
    policy = RulePolicy.from_dict(
        {"policy": "p", "rules": [{"id": "no-charges", "effect": "deny",
                                   "match": {"tool": "charge"}}]}
    )  # fmt: skip
    runner = _runner(rec, store, ("c1", "charge"), ("c2", "wire"), policy=policy)
    doc = await runner.start("go")
    assert doc.status == "waiting_approval"  # wire waits; charge was refused at once
    doc = await runner.decide(doc.id, "c2", "approved", resume=True)
    assert doc.status == "completed"
    [denied] = rec.span("execute_tool charge")
    assert denied["status"] == "ERROR" and denied["description"] == "policy_denied"
    assert denied["attributes"]["error.type"] == "policy_denied"
    assert denied["attributes"]["oarlock.policy.effect"] == "deny"
    assert denied["attributes"]["oarlock.policy.rule_id"] == "no-charges"
    assert denied["attributes"]["oarlock.receipt.status"] == "Denied"
    [unknown] = rec.span("execute_tool wire")
    assert unknown["attributes"]["oarlock.receipt.status"] == "Uncertain"
    assert unknown["status"] == "ERROR" and unknown["description"] == "outcome_unknown"
    rows = rec.metrics()
    uncertain = [r for r in rows if r["name"] == "oarlock.receipts.uncertain"]
    assert [(r["attributes"], r["value"]) for r in uncertain] == [({"gen_ai.tool.name": "wire"}, 1)]
    rec.observer.reconciled("wire")  # as oarlock receipts reconcile tells it
    outstanding = [r for r in rec.metrics() if r["name"] == "oarlock.receipts.uncertain"]
    assert [r["value"] for r in outstanding] == [0]
    statuses = {r["attributes"]["oarlock.receipt.status"]: r["count"]
                for r in rows if r["name"] == "oarlock.tool.duration"}  # fmt: skip
    assert statuses == {"Denied": 1, "Uncertain": 1}


async def test_an_idempotent_replay_is_marked_and_counted() -> None:
    rec, store = Recorded(), MemoryStore()
    for _ in range(2):  # two runs charge the same order: the second gets the first's receipt
        runner = _runner(rec, store, ("c1", "charge"))
        doc = await runner.start("go")
        doc = await runner.decide(doc.id, "c1", "approved", resume=True)
        assert doc.status == "completed"
    first, second = rec.span("execute_tool charge")
    assert first["attributes"]["oarlock.idempotency.outcome"] == "executed"
    assert second["attributes"]["oarlock.idempotency.outcome"] == "replayed"
    assert second["attributes"]["oarlock.receipt.hash"] == first["attributes"][
        "oarlock.receipt.hash"]  # fmt: skip
    replays = [r for r in rec.metrics() if r["name"] == "oarlock.tool.replays"]
    assert [r["value"] for r in replays] == [1]
    events = [{"seq": e.seq, "kind": e.kind, "at": e.at, "data": e.data}
              for e in await store.events(doc.id)]  # fmt: skip
    _, roots = span_tree(dump(doc), events)
    replayed = [c for c in roots[0].children[-1].children if c.name == "execute_tool charge"]
    assert [c.detail for c in replayed] == ["Succeeded (replayed)"]


async def test_a_run_cancelled_while_waiting_awaits_no_approval_any_more() -> None:
    rec, store = Recorded(), MemoryStore()
    runner = _runner(rec, store, ("c1", "charge"), ("c2", "wire"))
    doc = await runner.start("go")
    assert len(doc.pending_approvals) == 2
    await runner.cancel(doc.id, "not today")
    rows = rec.metrics()
    pending = [r["value"] for r in rows if r["name"] == "oarlock.approvals.pending"]
    finished = [(r["attributes"]["oarlock.run.status"], r["value"])
                for r in rows if r["name"] == "oarlock.runs.finished"]  # fmt: skip
    assert pending == [0] and finished == [("cancelled", 1)]


async def test_an_expired_approval_is_a_wait_span_of_the_drive_that_moves_on_and_counted() -> None:
    rec, store = Recorded(), MemoryStore()
    times = iter(["2026-01-01T00:00:00.000000Z"] * 40 + ["2026-01-01T00:05:00.000000Z"] * 40)
    policy = RulePolicy.from_dict({"policy": "p", "approval_ttl": 60})
    a = Agent("desk", ScriptedModel(_script(("c1", "charge"))), tools=[charge], policy=policy)
    runner = Runner(a, store, observer=rec.observer, clock=lambda: next(times))
    doc = await runner.start("go")
    while not runner.clock().startswith("2026-01-01T00:05"):
        pass
    await runner.expire_approvals(doc.id)  # as a worker's sweep does: no drive
    assert rec.span("await_approval charge") == []
    assert (await runner.resume(doc.id)).status == "completed"
    [wait] = rec.span("await_approval charge")
    [first, resumed] = rec.span("invoke_agent desk")
    assert wait["parentId"] == resumed["parentId"] == first["spanId"]
    assert wait["attributes"]["oarlock.approval.decision"] == "denied"
    assert wait["attributes"]["oarlock.approval.decided_by"] == "policy"
    assert wait["attributes"]["oarlock.approval.expired"] is True
    assert wait["end"] - wait["start"] == 300 * 10**9  # from the request to the expiry
    expired = [r for r in rec.metrics() if r["name"] == "oarlock.approvals.expired"]
    assert [r["value"] for r in expired] == [1]
    waited = [r for r in rec.metrics() if r["name"] == "oarlock.approval.wait"]
    assert [(r["count"], r["sum"]) for r in waited] == [(1, 300.0)]


async def test_a_wait_decided_where_nothing_is_traced_is_told_once_by_the_resume() -> None:
    rec, store = Recorded(), MemoryStore()
    traced = _runner(rec, store, ("c1", "charge"))
    doc = await traced.start("go")
    untraced = _runner(rec, store, ("c1", "charge"))
    untraced.observer = Telemetry()  # no SDK in this process: records nothing
    await untraced.decide(doc.id, "c1", "approved", principal="ops:bo")
    assert rec.span("await_approval charge") == []
    doc = await traced.resume(doc.id)
    assert doc.status == "completed"
    [wait] = rec.span("await_approval charge")
    assert wait["attributes"]["oarlock.approval.principal"] == "ops:bo"
    assert [(d.model_extra or {}).get("traced") for d in doc.decisions] == [True]
    stored = dump((await store.load(doc.id)).document)
    assert [d.get("traced") for d in stored["decisions"]] == [True]  # committed with it
    await traced.continue_run(doc.id, "and again")  # a later drive tells it no more
    assert len(rec.span("await_approval charge")) == 1


@pytest.mark.parametrize(
    "stored",
    ["junk", 7, {"traceparent": "00-" + "0" * 32 + "-" + "0" * 16 + "-01"},
     {"traceparent": "x" * 100_000}, {"traceparent": ["00-a"]}],
)  # fmt: skip
async def test_a_stored_trace_context_that_is_not_one_starts_a_new_trace(stored: Any) -> None:
    rec, store = Recorded(), MemoryStore()
    runner = _runner(rec, store, ("c1", "lookup"))
    doc, version = await runner.create("go")
    setattr(doc, "traceContext", stored)  # noqa: B010 - an extension member
    await store.save(doc, version, [])
    done = await runner.resume(doc.id)
    assert done.status == "completed"
    [root] = rec.span("invoke_agent desk")
    assert root["parentId"] is None
    kept = dump((await store.load(doc.id)).document)["traceContext"]
    assert kept["traceparent"].startswith(f"00-{root['traceId']}-{root['spanId']}-")


async def test_off_by_default_a_drive_is_not_watched_and_events_still_carry_timings() -> None:
    observer = default_observer()  # no SDK configured in this process
    store = MemoryStore()
    a = Agent("desk", ScriptedModel(_script(("c1", "lookup"))), tools=[lookup])
    runner = Runner(a, store)
    assert runner.observer is observer
    doc, _ = await runner.create("go")
    assert observer.drive(doc) is None
    done = await runner.resume(doc.id)
    assert "traceContext" not in dump(done)
    events = [{"seq": e.seq, "kind": e.kind, "at": e.at, "data": e.data}
              for e in await store.events(doc.id)]  # fmt: skip
    trace_id, [root] = span_tree(dump(done), events)
    assert trace_id is None
    assert [c.name for c in root.children] == ["chat script", "execute_tool lookup", "chat script"]
    lines = render_tree(doc.id, trace_id, [root])
    assert "not traced" in lines[0]


def test_the_span_tree_of_a_hostile_event_log_is_drawn_escaped_and_never_raises() -> None:
    doc = {"id": "r1", "agent": "desk\x1b[2J", "model": "scripted:m\u202e",
           "traceContext": {"traceparent": "00-zz-01"}}  # fmt: skip
    events: list[Any] = [
        {"seq": 1, "kind": "model_responded", "at": "2026-01-01T00:00:01Z",
         "data": {"inputTokens": float("nan"), "span": {"drive": "d\x1b", "durationMs": -4}}},
        {"seq": 2, "kind": "tool_called", "at": "not a time",
         "data": {"toolName": "rm\x1b]0;pwned\x07", "span": {"startUs": -5, "spanId": "\n",
                                                            "status": ["x"], "durationMs": True}}},
        {"seq": 3, "kind": "approval_decided", "at": None, "data": {"toolCallId": 3}},
        {"seq": 4, "kind": "status_changed", "at": "2026-01-01T00:00:02Z", "data": "nope"},
        "not an event",
        {"seq": 5, "kind": "tool_called", "at": "2026-01-01T00:00:03Z", "data": {"span": []}},
    ]  # fmt: skip
    trace_id, roots = span_tree(doc, [e for e in events if isinstance(e, dict)])
    assert trace_id is None
    text = "\n".join(render_tree("r1\x1b", trace_id, roots))
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "\\x1b" in text
    chat = roots[0].children[0]
    assert chat.duration_ms is None or chat.duration_ms >= 0
    assert chat.detail == ""  # a token count that is not one is not shown


def test_a_wait_not_decided_yet_lasts_until_now() -> None:
    doc = {"id": "r1", "agent": "desk", "model": "scripted:m"}
    events = [
        {"seq": 1, "kind": "model_responded", "at": "2026-01-01T00:00:01Z", "data": {}},
        {"seq": 2, "kind": "approval_requested", "at": "2026-01-01T00:00:02Z",
         "data": {"toolCallId": "c1", "toolName": "pay"}},
        {"seq": 3, "kind": "status_changed", "at": "2026-01-01T00:00:02Z",
         "data": {"from": "running", "to": "waiting_approval"}},
    ]  # fmt: skip
    now = 1767225602 * 1e6 + 90 * 1e6  # 2026-01-01T00:00:02Z and a minute and a half
    _, [root] = span_tree(doc, events, now_us=now)
    [wait] = [c for c in root.children if c.name == "await_approval pay"]
    assert (wait.status, wait.detail, wait.duration_ms) == ("open", "waiting, so far", 90_000.0)
    assert "await_approval pay  1m 30s  open: waiting, so far" in render_tree("r1", None, [root])[3]


def test_the_span_tree_of_a_run_from_before_the_span_member_is_drawn_from_times() -> None:
    doc = {"id": "r1", "agent": "desk", "model": "scripted:m"}
    events = [
        {"seq": 1, "kind": "run_created", "at": "2026-01-01T00:00:00Z", "data": {}},
        {"seq": 2, "kind": "model_responded", "at": "2026-01-01T00:00:01Z",
         "data": {"inputTokens": 3, "outputTokens": 4}},
        {"seq": 3, "kind": "tool_called", "at": "2026-01-01T00:00:02Z",
         "data": {"toolName": "lookup", "isError": True}},
        {"seq": 4, "kind": "status_changed", "at": "2026-01-01T00:00:03Z",
         "data": {"from": "running", "to": "failed"}},
    ]  # fmt: skip
    _, [root] = span_tree(doc, events)
    assert root.status == "error" and root.detail == "failed"
    assert root.duration_ms == 2000.0
    assert [(c.name, c.status, c.detail) for c in root.children] == [
        ("chat m", "ok", "3 in, 4 out tokens"),
        ("execute_tool lookup", "error", "not run"),
    ]


def test_the_runner_event_loop_is_not_left_with_watches() -> None:
    rec, store = Recorded(), MemoryStore()
    runner = _runner(rec, store, ("c1", "lookup"))
    asyncio.run(runner.start("go"))
    assert runner._drives == {} and runner._calls == {} and runner._timed == {}


class Flaky:
    """A model rate limited on its first request, then answering; or failing for good."""

    model_id = "acme:m1"

    def __init__(self, fail: bool = False) -> None:
        self.calls, self.fail = 0, fail

    async def respond(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        if self.fail:
            raise ModelError("the key sk-proj-abcdefghijklmnopqrstuv is revoked", code="auth")
        if self.calls == 1:
            raise RetryableModelError("slow down", code="rate_limited", retry_after=0)
        return ModelResponse(assistant_message([TextPart(type="text", text="hi")]), 5, 1, 2)


async def test_retries_are_events_of_the_chat_span_and_a_failed_request_an_error() -> None:
    rec = Recorded()
    runner = Runner(Agent("desk", Flaky()), MemoryStore(), observer=rec.observer)
    assert (await runner.start("go")).status == "completed"
    [chat] = rec.span("chat m1")
    assert chat["events"] == ["gen_ai.request.retry"]
    assert chat["attributes"]["gen_ai.provider.name"] == "acme"
    assert chat["attributes"]["gen_ai.usage.cache_read.input_tokens"] == 2
    assert chat["attributes"]["gen_ai.response.finish_reasons"] == ["stop"]

    rec = Recorded()
    runner = Runner(Agent("desk", Flaky(fail=True)), MemoryStore(), observer=rec.observer)
    assert (await runner.start("go")).status == "failed"
    [chat] = rec.span("chat m1")
    assert chat["status"] == "ERROR" and chat["description"] == "auth"
    [drive] = rec.span("invoke_agent desk")
    assert drive["status"] == "ERROR" and drive["attributes"]["error.type"] == "failed"
    durations = [r for r in rec.metrics() if r["name"] == "gen_ai.client.operation.duration"]
    assert [r["attributes"].get("error.type") for r in durations] == ["auth"]
    assert not any("sk-proj" in str(s) for s in rec.spans())


def test_a_global_provider_set_after_the_observer_was_made_is_seen() -> None:
    code = """
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from oarlock.engine._core import new_run
from oarlock.telemetry import default_observer
observer = default_observer()
doc, events = new_run(run_id="r", agent="a", model="x:m", input="go", now="2026-01-01T00:00:00Z")
assert observer.drive(doc) is None
reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
observer.committed(doc, events)
data = reader.get_metrics_data()
names = [m.name for r in data.resource_metrics for s in r.scope_metrics for m in s.metrics]
assert names == ["oarlock.runs.started"], names
watch = observer.drive(doc)
assert watch is not None and watch.span_id is None  # metrics only: no span recorded
trace.set_tracer_provider(TracerProvider())
watch = observer.drive(doc)
assert watch is not None and watch.span_id is not None and "traceContext" in doc.model_extra
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr

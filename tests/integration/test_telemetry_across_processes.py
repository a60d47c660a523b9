"""Traces and metrics of a run that calls three tools, pauses for an approval and is
resumed in another process: one trace, the wait for the decision as a span, the right
parents, the GenAI attributes and the governance of each call; the counters of both
processes; content recorded only when asked for; the span tree from the event log."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from telemetry_driver import metrics_json, providers, span_json

import oarlock.demo
from oarlock import validate
from oarlock.cli import main
from oarlock.engine import Runner
from oarlock.engine._agentfile import load_agent
from oarlock.formats._codec import dump
from oarlock.store import SQLiteStore
from oarlock.telemetry import Telemetry, span_tree

HERE = Path(__file__).parent
AGENT_FILE = str(Path(oarlock.demo.__file__).parent / "refund-desk.yaml")
HEX32, HEX16 = r"[0-9a-f]{32}", r"[0-9a-f]{16}"


async def _first_part(db: Path, observer: Telemetry) -> str:
    store = SQLiteStore(db)
    try:
        runner = Runner(load_agent(AGENT_FILE), store, observer=observer)
        doc = await runner.start("Refund order A-1001: it arrived broken")
    finally:
        await store.close()
    assert doc.status == "waiting_approval"
    assert [a.tool_name for a in doc.pending_approvals] == ["issue_refund"]
    return doc.id


def _other_process(db: Path, run_id: str, call_id: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(HERE / "telemetry_driver.py"), str(db), AGENT_FILE, run_id, call_id],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def _points(rows: list[dict[str, Any]], name: str, **attrs: Any) -> list[dict[str, Any]]:
    return [
        r for r in rows
        if r["name"] == name and all(r["attributes"].get(k) == v for k, v in attrs.items())
    ]  # fmt: skip


def _value(rows: list[dict[str, Any]], name: str, **attrs: Any) -> Any:
    found = _points(rows, name, **attrs)
    assert len(found) == 1, (name, attrs, found)
    return found[0].get("value", found[0].get("count"))


@pytest.fixture(scope="module")
def paused_and_resumed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    db = tmp_path_factory.mktemp("otel") / "runs.db"
    tracer_provider, exporter, meter_provider, reader = providers()
    observer = Telemetry(tracer_provider=tracer_provider, meter_provider=meter_provider)
    run_id = asyncio.run(_first_part(db, observer))
    first = {
        "spans": [span_json(s) for s in exporter.get_finished_spans()],
        "metrics": metrics_json(reader),
    }
    store = SQLiteStore(db, create=False)
    stored = asyncio.run(store.load(run_id)).document
    call_id = stored.pending_approvals[0].tool_call_id
    store.close_now()
    second = _other_process(db, run_id, call_id)
    return {"db": db, "run_id": run_id, "call_id": call_id, "first": first, "second": second}


def test_one_trace_across_the_pause_with_the_wait_and_the_right_parents(
    paused_and_resumed: dict[str, Any],
) -> None:
    first, second = paused_and_resumed["first"], paused_and_resumed["second"]
    assert second["status"] == "completed"
    spans = first["spans"] + second["spans"]
    assert len({s["traceId"] for s in spans}) == 1  # one trace, two processes
    by_name: dict[str, list[dict[str, Any]]] = {}
    for s in spans:
        by_name.setdefault(s["name"], []).append(s)

    [root] = [s for s in first["spans"] if s["parentId"] is None]
    assert root["name"] == "invoke_agent refund-desk"
    assert [s["name"] for s in first["spans"] if s["parentId"] == root["spanId"]] == [
        "chat refund-desk",
        "execute_tool lookup_order",
        "chat refund-desk",
        "execute_tool refund_policy",
    ]
    # the resumed drive, in the other process, continues the trace under the first drive
    [resumed] = [s for s in second["spans"] if s["name"] == "invoke_agent refund-desk"]
    assert resumed["parentId"] == root["spanId"]
    assert [s["name"] for s in second["spans"] if s["parentId"] == resumed["spanId"]] == [
        "execute_tool issue_refund",
        "chat refund-desk",
    ]
    # the wait for the human: from the request (first process) to the decision (second)
    [wait] = by_name["await_approval issue_refund"]
    assert wait["parentId"] == root["spanId"]
    assert wait["attributes"]["oarlock.approval.decision"] == "approved"
    assert wait["attributes"]["oarlock.approval.decided_by"] == "human"
    assert wait["attributes"]["oarlock.approval.principal"] == "ops:ana"
    assert wait["attributes"]["gen_ai.tool.call.id"] == paused_and_resumed["call_id"]
    assert root["start"] < wait["start"] <= root["end"] <= wait["end"] <= resumed["start"]
    assert root["status"] == "UNSET" and root["attributes"]["oarlock.run.status"] == (
        "waiting_approval"
    )
    assert resumed["status"] == "OK" and resumed["attributes"]["oarlock.run.status"] == "completed"


def test_model_and_tool_spans_carry_the_genai_and_governance_attributes(
    paused_and_resumed: dict[str, Any],
) -> None:
    spans = paused_and_resumed["first"]["spans"] + paused_and_resumed["second"]["spans"]
    chats = [s for s in spans if s["name"].startswith("chat ")]
    assert len(chats) == 3
    first_chat = chats[0]["attributes"]
    assert first_chat["gen_ai.operation.name"] == "chat"
    assert first_chat["gen_ai.provider.name"] == "scripted"
    assert first_chat["gen_ai.request.model"] == "refund-desk"
    assert first_chat["gen_ai.response.model"] == "refund-desk"
    assert first_chat["gen_ai.usage.input_tokens"] == 412
    assert first_chat["gen_ai.usage.output_tokens"] == 38
    assert first_chat["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert chats[2]["attributes"]["gen_ai.response.finish_reasons"] == ["stop"]

    [refund] = [s for s in spans if s["name"] == "execute_tool issue_refund"]
    a = refund["attributes"]
    assert a["gen_ai.operation.name"] == "execute_tool"
    assert a["gen_ai.tool.name"] == "issue_refund"
    assert a["gen_ai.tool.call.id"] == paused_and_resumed["call_id"]
    assert a["oarlock.tool.side_effect_class"] == "spend"
    assert a["oarlock.policy.effect"] in ("allow", "require_approval")
    assert a["oarlock.idempotency.outcome"] == "executed"
    assert a["oarlock.receipt.status"] == "Succeeded"
    assert a["oarlock.receipt.hash"].startswith("sha256:")
    assert len(a["oarlock.approval.id"]) == 36 and len(a["oarlock.invocation.id"]) == 36
    assert refund["status"] == "UNSET"
    [lookup] = [s for s in spans if s["name"] == "execute_tool lookup_order"]
    assert lookup["attributes"]["oarlock.tool.side_effect_class"] == "read"
    assert "oarlock.approval.id" not in lookup["attributes"]

    # content is absent unless asked for
    for s in spans:
        assert not any(k.startswith(("gen_ai.input", "gen_ai.output", "gen_ai.system"))
                       for k in s["attributes"])  # fmt: skip
        assert "gen_ai.tool.call.arguments" not in s["attributes"]
        assert "gen_ai.tool.call.result" not in s["attributes"]


def test_the_counters_of_both_processes(paused_and_resumed: dict[str, Any]) -> None:
    first = paused_and_resumed["first"]["metrics"]
    second = paused_and_resumed["second"]["metrics"]
    agent = {"gen_ai.agent.name": "refund-desk"}
    assert _value(first, "oarlock.runs.started", **agent) == 1
    assert _points(first, "oarlock.runs.finished") == []
    assert _value(first, "oarlock.turns", **agent) == 2
    assert _value(second, "oarlock.turns", **agent) == 1
    completed = {"oarlock.run.status": "completed"}
    assert _value(second, "oarlock.runs.finished", **agent, **completed) == 1
    tokens = _points(first, "gen_ai.client.token.usage", **{"gen_ai.token.type": "input"})
    assert [(p["count"], p["sum"]) for p in tokens] == [(2, 412 + 530)]
    assert tokens[0]["unit"] == "{token}"
    out = _points(second, "gen_ai.client.token.usage", **{"gen_ai.token.type": "output"})
    assert [(p["count"], p["sum"]) for p in out] == [(1, 41)]
    [latency] = _points(first, "gen_ai.client.operation.duration")
    assert latency["count"] == 2 and latency["unit"] == "s"
    ok = {"oarlock.receipt.status": "Succeeded"}
    lookup, refund = {"gen_ai.tool.name": "lookup_order"}, {"gen_ai.tool.name": "issue_refund"}
    assert _value(first, "oarlock.tool.duration", **lookup, **ok) == 1
    assert _value(second, "oarlock.tool.duration", **refund, **ok) == 1
    # the approval: asked for in the first process, decided in the second
    assert _value(first, "oarlock.approvals.pending", **agent) == 1
    assert _value(second, "oarlock.approvals.pending", **agent) == -1
    [wait] = _points(second, "oarlock.approval.wait", **{"oarlock.approval.decision": "approved"})
    assert wait["count"] == 1 and wait["sum"] >= 0
    assert _points(second, "oarlock.approvals.expired") == []
    assert _points(first + second, "oarlock.tool.replays") == []
    assert _points(first + second, "oarlock.receipts.uncertain") == []


def test_the_span_tree_from_the_event_log_matches_the_trace(
    paused_and_resumed: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    db, run_id = paused_and_resumed["db"], paused_and_resumed["run_id"]
    spans = paused_and_resumed["first"]["spans"] + paused_and_resumed["second"]["spans"]
    store = SQLiteStore(db, create=False)
    try:
        stored = asyncio.run(store.load(run_id)).document
        events = [{"seq": e.seq, "kind": e.kind, "at": e.at, "data": e.data}
                  for e in asyncio.run(store.events(run_id))]  # fmt: skip
    finally:
        store.close_now()
    exported = dump(stored)
    assert set(exported["traceContext"]) == {"traceparent"}  # an extension member ...
    assert validate(exported).valid  # ... that the run format accepts
    trace_id, roots = span_tree(exported, events)
    assert trace_id == spans[0]["traceId"]
    [root] = roots
    ids = {s["spanId"]: s["name"] for s in spans}
    assert root.span_id is not None and ids[root.span_id] == root.name
    names = [c.name for c in root.children]
    assert names == [
        "chat refund-desk", "execute_tool lookup_order",
        "chat refund-desk", "execute_tool refund_policy",
        "await_approval issue_refund", "invoke_agent refund-desk",
    ]  # fmt: skip
    for child in root.children:  # each span of the log is the span the collector got
        if child.span_id is not None:
            assert ids[child.span_id] == child.name
    wait, resumed = root.children[4], root.children[5]
    assert wait.status == "ok" and wait.detail == "approved by human (ops:ana)"
    assert [c.name for c in resumed.children] == ["execute_tool issue_refund", "chat refund-desk"]
    assert resumed.children[0].detail == "Succeeded" and resumed.detail == "completed"
    assert all(c.duration_ms is not None and c.duration_ms >= 0 for c in root.children)

    assert main(["--db", str(db), "runs", "show", run_id, "--trace"]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert shown[0] == f"run {run_id}  trace {trace_id}"
    assert shown[1].startswith("invoke_agent refund-desk  ")
    assert any(line.startswith("├─ await_approval issue_refund  ") and "approved by human" in line
               for line in shown)  # fmt: skip
    assert any(line.startswith("   ├─ execute_tool issue_refund  ") and "ok: Succeeded" in line
               for line in shown)  # fmt: skip


async def _captured(db: Path, capture: bool) -> list[dict[str, Any]]:
    tracer_provider, exporter, meter_provider, _ = providers()
    observer = Telemetry(
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        capture_content=capture,
        max_content_chars=300,
    )
    store = SQLiteStore(db)
    try:
        runner = Runner(load_agent(AGENT_FILE), store, observer=observer)
        await runner.start(
            "Refund A-1001 \x1b[31mnow\x1b[0m \u202e key sk-proj-abcdefghijklmnopqrstuv "
            + "please " * 200
        )
    finally:
        await store.close()
    return [span_json(s) for s in exporter.get_finished_spans()]


def test_content_is_recorded_only_when_asked_for_sanitized_and_capped(tmp_path: Path) -> None:
    off = asyncio.run(_captured(tmp_path / "off.db", False))
    on = asyncio.run(_captured(tmp_path / "on.db", True))
    content_keys = ("gen_ai.input.messages", "gen_ai.output.messages",
                    "gen_ai.system_instructions", "gen_ai.tool.call.arguments",
                    "gen_ai.tool.call.result")  # fmt: skip
    assert not [k for s in off for k in content_keys if k in s["attributes"]]
    chat = next(s for s in on if s["name"].startswith("chat "))["attributes"]
    prompt = chat["gen_ai.input.messages"]
    assert "Refund A-1001" in prompt
    assert "abcdefghijklmnop" not in prompt and "[redacted]" in prompt  # no secret leaves
    assert "\x1b" not in prompt and "\u202e" not in prompt  # escaped, or taken out
    assert "output truncated" in prompt and len(prompt) <= 300 + 80  # capped (and says so)
    assert "Look the order up" in chat["gen_ai.system_instructions"]
    assert "Let me look up the order" in chat["gen_ai.output.messages"]
    lookup = next(s for s in on if s["name"] == "execute_tool lookup_order")["attributes"]
    assert json.loads(lookup["gen_ai.tool.call.arguments"]) == {"order_id": "A-1001"}
    assert "ceramic teapot" in lookup["gen_ai.tool.call.result"]

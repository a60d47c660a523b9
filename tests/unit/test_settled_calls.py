"""Every call the model asked for ends with an invocation and a receipt on the ledger,
whoever settled it: a human's approval (the call ran), a human's denial, a human's answer
in the tool's place, the policy at the approval's deadline, the run's cancellation. Each
record is stored once, however often it is recorded (a crash between a decision's commit
and its record is mended on the next drive); the ledger verifies; every record is valid
(``ValidatingStore`` checks each one written)."""

from __future__ import annotations

import asyncio
from typing import Any

from oarlock.engine import Agent, Runner
from oarlock.engine._settled import record_settled_calls
from oarlock.governance import verify_chain
from oarlock.governance._executor import NO_APPROVAL
from oarlock.testing import MemoryStore, ScriptedModel, ValidatingStore
from oarlock.tools import tool

RAN: list[str] = []


@tool(side_effect="spend")
def refund(order_id: str, amount: int) -> str:
    """Refund an order."""
    RAN.append(f"refund {order_id}")
    return f"refunded {amount} on {order_id}"


@tool(side_effect="external", allow_response=True)
def ask_expert(question: str) -> str:
    """Ask an expert."""
    RAN.append("ask_expert")
    return "the tool answered"


TURN = {"tool_calls": [
    {"name": "refund", "arguments": {"order_id": "A1", "amount": 80}, "id": "c_a1"},
    {"name": "refund", "arguments": {"order_id": "A2", "amount": 5}, "id": "c_a2"},
    {"name": "ask_expert", "arguments": {"question": "which?"}, "id": "c_ask"},
]}  # fmt: skip


def make() -> tuple[Runner, Any]:
    store: Any = ValidatingStore(MemoryStore())
    model = ScriptedModel([TURN, {"text": "done"}])
    return Runner(Agent("agent", model, tools=[refund, ask_expert]), store), store


async def by_call(store: Any) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """Each call's records: (status, receipt), from the ledger's invocations and receipts."""
    entries = await store.governance().ledger()
    calls: dict[str, str] = {}
    found: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for entry in entries:
        if entry.kind == "invocation":
            call = entry.body["idempotencyKey"].rsplit(":", 1)[-1]
            calls[entry.body["invocationId"]] = call
        elif entry.kind == "receipt":
            call = calls[entry.body["invocationId"]]
            found.setdefault(call, []).append((entry.body["status"], entry.body))
    assert verify_chain(entries).ok
    return found


def test_denial_answer_and_approval_each_end_on_the_ledger() -> None:
    async def go() -> None:
        runner, store = make()
        doc = await runner.start("refund", run_id="r1")
        assert doc.status == "waiting_approval"
        await runner.decide("r1", "c_a2", "denied", reason="too small to refund",
                            principal="user:ana")  # fmt: skip
        await runner.decide("r1", "c_ask", "responded", response="the blue one",
                            principal="user:bo")  # fmt: skip
        await runner.decide("r1", "c_a1", "approved", resume=True)
        records = await by_call(store)
        assert [s for s, _ in records["c_a1"]] == ["Succeeded"]
        [(status, denied)] = records["c_a2"]
        assert status == "Denied" and denied["error"]["code"] == "denied_by_human"
        assert denied["error"]["message"] == "denied by user:ana: too small to refund"
        [(status, answered)] = records["c_ask"]
        assert status == "Denied" and answered["error"]["code"] == "answered_by_human"
        assert "user:bo" in answered["error"]["message"]
        assert RAN == ["refund A1"]
        invocations = {e.body["invocationId"]: e.body for e in await store.governance().ledger()
                       if e.kind == "invocation"}  # fmt: skip
        settled = invocations[denied["invocationId"]]
        assert settled["approvalId"] == NO_APPROVAL  # none was used
        assert settled["policyDecision"]["effect"] == "require_approval"
        assert settled["arguments"] == {"order_id": "A2", "amount": 5}

    RAN.clear()
    asyncio.run(go())


def test_a_cancelled_run_records_its_undecided_calls() -> None:
    async def go() -> None:
        runner, store = make()
        await runner.start("refund", run_id="r2")
        await runner.decide("r2", "c_a2", "denied", reason="no")
        await runner.cancel("r2", "changed my mind")
        records = await by_call(store)
        assert {c: [r["error"]["code"] for _, r in v] for c, v in records.items()} == {
            "c_a2": ["denied_by_human"],
            "c_a1": ["run_cancelled"],
            "c_ask": ["run_cancelled"],
        }

    RAN.clear()
    asyncio.run(go())
    assert RAN == []


def test_an_expired_approval_is_recorded_as_expired() -> None:
    async def go() -> None:
        clock = ["2026-12-04T10:00:00Z"]
        store: Any = ValidatingStore(MemoryStore())
        model = ScriptedModel([TURN, {"text": "done"}])
        agent = Agent("agent", model, tools=[refund, ask_expert])
        runner = Runner(agent, store, clock=lambda: clock[0])
        await runner.start("refund", run_id="r3")
        doc = (await store.load("r3")).document
        for pending in doc.pending_approvals:  # a deadline of an hour, as a policy sets
            setattr(pending, "expiresAt", "2026-12-04T11:00:00Z")  # noqa: B010
        stored = await store.load("r3")
        await store.save(doc, stored.version, [])
        clock[0] = "2026-12-04T12:00:00Z"
        await runner.expire_approvals("r3")
        records = await by_call(store)
        codes = sorted(r["error"]["code"] for v in records.values() for _, r in v)
        assert codes == ["approval_expired"] * 3

    asyncio.run(go())


def test_a_record_is_stored_once_however_often_it_is_recorded() -> None:
    async def go() -> None:
        runner, store = make()
        await runner.start("refund", run_id="r4")
        await runner.decide("r4", "c_a2", "denied", reason="no")
        before = len(await store.governance().ledger())
        doc = (await store.load("r4")).document
        assert await record_settled_calls(runner.agent, runner.executor, doc,
                                          runner._ctx(doc)) == 0  # fmt: skip
        assert len(await store.governance().ledger()) == before

    asyncio.run(go())


def test_a_record_lost_to_a_crash_is_mended_by_the_next_drive() -> None:
    async def go() -> None:
        runner, store = make()
        await runner.start("refund", run_id="r5")
        real = runner.executor.record_settled  # type: ignore[attr-defined]

        async def lost(*args: Any, **kwargs: Any) -> bool:  # the process died before it
            return False

        runner.executor.record_settled = lost  # type: ignore[attr-defined]
        await runner.decide("r5", "c_a2", "denied", reason="no")
        await runner.decide("r5", "c_ask", "denied", reason="no")
        assert "c_a2" not in await by_call(store)
        runner.executor.record_settled = real  # type: ignore[attr-defined]
        await runner.decide("r5", "c_a1", "approved", resume=True)
        records = await by_call(store)
        assert [s for s, _ in records["c_a2"]] == ["Denied"]
        assert [s for s, _ in records["c_ask"]] == ["Denied"]
        assert [s for s, _ in records["c_a1"]] == ["Succeeded"]

    asyncio.run(go())


def test_the_command_lines_cancel_and_deny_put_the_calls_on_the_ledger(tmp_path: Any) -> None:
    """``oarlock cancel`` (which has no runner of its own) and ``oarlock deny`` as a user
    types them, on the demo agent."""
    import json
    import os
    import subprocess
    import sys

    from oarlock.demo import AGENT_FILE

    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config")}
    env.pop("OARLOCK_DB", None)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "oarlock.cli", "--db", str(tmp_path / "r.db"), *args],
            capture_output=True, text=True, env=env, check=False, timeout=60,
        )  # fmt: skip

    ids = []
    for _ in range(2):
        started = cli("run", str(AGENT_FILE), "Refund order A-1001")
        assert started.returncode == 0, started.stderr
        ids.append(json.loads(cli("runs", "list", "--json").stdout)[0]["id"])
    assert cli("cancel", ids[0], "--reason", "not today").returncode == 0
    assert cli("deny", ids[1], "call_2_1", "--reason", "not this one").returncode == 0
    for run_id, code in zip(ids, ["run_cancelled", "denied_by_human"], strict=True):
        listed = json.loads(cli("receipts", "list", "--run", run_id, "--json").stdout)
        refund = [r for r in listed if r["tool"] == "issue_refund"]
        assert [(r["status"], r["error"]["code"]) for r in refund] == [("Denied", code)], listed
    assert cli("audit", "verify").returncode == 0

"""How many commits a run costs on SQLite, and which of them wait for the disk: the floor
under every durable figure in bench/results.md, and the runner's flush rule (see
``Runner._step``) pinned.

A 10-turn run of one read tool flushes each model response (10 calls for tools, then the
answer: 11). Its creation and each step's read results ride on the next flush (11 unflushed
commits), each governed read call's one write after it ran (its claim, invocation and
receipt) in its step's own transaction, and the drive's lease taken (1); the lease is given
back in the
transaction of the drive's last save, the answer, and flushed with it. A step that ran a
call with an effect outside the sandbox is flushed with its results and receipts. Resuming
a paused run flushes four: the decision, the spend call's claim (before the tool runs), the
results and the answer (with the lease given back); the lease taken by the drive adds one
unflushed commit, the approval and the receipt two more."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from helpers import echo, echo_agent
from oarlock.engine import Agent, Runner
from oarlock.governance import RulePolicy
from oarlock.governance._ledger import verify_chains
from oarlock.models import ScriptedModel
from oarlock.store import SQLiteStore
from oarlock.tools import tool


def agent(tool_turns: int, final_call: str | None = None) -> Agent:
    return echo_agent("counts", tool_turns, pay_last=final_call == "pay")


def count_commits(store: SQLiteStore) -> dict[str, int]:
    """Count the store's COMMITs from now on, by the synchronous setting they ran under."""
    counts = {"FULL": 0, "NORMAL": 0}
    setting = ["FULL" if store.db().execute("PRAGMA synchronous").fetchone()[0] == 2 else "?"]

    def trace(sql: str) -> None:
        if sql.startswith("PRAGMA synchronous = "):
            setting[0] = sql.rsplit(" ", 1)[1]
        elif sql == "COMMIT":
            counts[setting[0]] += 1

    store.db().set_trace_callback(trace)
    return counts


async def test_a_ten_turn_run_of_reads_flushes_its_eleven_model_responses(
    tmp_path: Path,
) -> None:
    async with SQLiteStore(tmp_path / "c.db") as store:
        counts = count_commits(store)
        doc = await Runner(agent(10), store).start("go")
        assert doc.status == "completed" and doc.turns == 11
        governance = store.governance()
        receipts = await governance.receipts()
        chains = {name: await governance.ledger(name) for name in await governance.chains()}
    # unflushed: the creation, 10 steps of read results (each with its read's claim,
    # invocation and receipt, written after it ran), the lease taken (given back with the
    # answer)
    assert counts == {"FULL": 11, "NORMAL": 12}
    assert [r.receipt["status"] for r in receipts] == ["Succeeded"] * 10
    assert sum(len(entries) for entries in chains.values()) == 20  # invocation and receipt
    assert all(report.ok for report in verify_chains(chains).values())


@tool(side_effect="external")
async def note(text: str) -> str:
    """Write a note (an effect outside the sandbox, allowed without approval below)."""
    return f"noted {text}"


async def test_a_step_with_an_effect_flushes_its_results(tmp_path: Path) -> None:
    turns: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "echo", "arguments": {"text": "a"}}]},
        {"tool_calls": [{"name": "echo", "arguments": {"text": "b"}},
                        {"name": "note", "arguments": {"text": "c"}}]},
        {"text": "done"},
    ]  # fmt: skip
    rule = {"id": "notes", "effect": "allow", "match": {"tool": "note"}}
    policy = RulePolicy({"policy": "notes", "rules": [rule]})
    writer = Agent("w", ScriptedModel(turns), tools=[echo, note], policy=policy)
    async with SQLiteStore(tmp_path / "c.db") as store:
        counts = count_commits(store)
        doc = await Runner(writer, store).start("go")
        assert doc.status == "completed", doc.error
    # flushed: 3 model responses, the mixed step's results (with its read's claim,
    # invocation and receipt), the write's claim; unflushed: the creation, the read step's
    # results (with its read's records), the write's receipt, the lease taken
    assert counts == {"FULL": 5, "NORMAL": 4}


async def test_resuming_after_an_approval_flushes_four_commits(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    async with SQLiteStore(path) as store:
        paused = await Runner(agent(9, final_call="pay"), store).start("go")
    assert paused.status == "waiting_approval"
    call = paused.pending_approvals[0].tool_call_id
    async with SQLiteStore(path) as store:
        counts = count_commits(store)
        runner = Runner(agent(9, final_call="pay"), store)
        await runner.decide(paused.id, call, "approved")
        done = await runner.resume(paused.id)
        assert done.status == "completed"
    # flushed: decision, claim, results (the spend's step), answer (the lease given back
    # in its transaction); unflushed: the approval, the receipt, the lease taken
    assert counts == {"FULL": 4, "NORMAL": 3}

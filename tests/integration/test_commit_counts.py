"""How many commits a run costs on SQLite, and which of them wait for the disk: the floor
under every durable figure in bench/results.md. A 10-turn run of one read tool commits its
creation, each turn's model response and tool results, and the answer, each flushed before
the run goes on (22); each governed read call adds two unflushed commits (its claim before the
tool runs, its receipt after), and the drive two more (the run's lease taken and given back).
Resuming a paused run flushes four: the decision, the spend call's claim (before the tool
runs), the results and the answer; the lease of the drive adds two unflushed commits."""

from __future__ import annotations

from pathlib import Path

from helpers import echo_agent
from oarlock.engine import Agent, Runner
from oarlock.store import SQLiteStore


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


async def test_a_ten_turn_run_flushes_22_commits_and_adds_two_unflushed_per_call_and_drive(
    tmp_path: Path,
) -> None:
    async with SQLiteStore(tmp_path / "c.db") as store:
        counts = count_commits(store)
        doc = await Runner(agent(10), store).start("go")
        assert doc.status == "completed" and doc.turns == 11
    # unflushed: 10 claims and 10 receipts of the reads; the lease taken, then given back
    assert counts == {"FULL": 22, "NORMAL": 22}


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
    # flushed: decision, claim, results, answer; unflushed: the approval, the receipt, the
    # lease of the resume taken and given back
    assert counts == {"FULL": 4, "NORMAL": 4}

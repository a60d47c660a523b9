"""oarlock side of bench/compare.py: run with oarlock's own venv. Prints one JSON object.

Workload: one agent, one trivial tool ``echo``; oarlock's ScriptedModel calls it on each of
10 turns, then answers (11 model turns). The governed executor is always on: every call
goes through policy, an idempotency claim, a receipt and the ledger.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    MODEL_TURNS,
    RESUMES,
    SHARED_RUNS,
    TOOL_TURNS,
    arguments,
    checkpointed_size,
    emit,
    quiet,
    row_bytes,
)

REAL_STDOUT = quiet()

import oarlock  # noqa: E402
from oarlock.engine import Agent, Limits, Runner  # noqa: E402
from oarlock.formats._models import ToolResultPart  # noqa: E402
from oarlock.models import FunctionModel, ModelRequest, ScriptedModel  # noqa: E402
from oarlock.store import MemoryStore, SQLiteStore  # noqa: E402
from oarlock.tools import tool  # noqa: E402


@tool(side_effect="read")
async def echo(text: str) -> str:
    """Return the text."""
    return text


@tool(side_effect="read", name="echo")
def echo_sync(text: str) -> str:
    """Return the text."""
    return text


@tool(side_effect="spend")
async def pay(amount: float) -> str:
    """Pay an amount (needs approval)."""
    return f"paid {amount}"


def script(tool_turns: int, final_call: str | None = None) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "echo", "arguments": {"text": f"turn {i}"}}]}
        for i in range(tool_turns)
    ]
    if final_call:
        turns.append({"tool_calls": [{"name": final_call, "arguments": {"amount": 5}}]})
    turns.append({"text": "done"})
    return turns


def history_model(tool_turns: int, final_call: str | None = None) -> FunctionModel:
    """Decides each reply from the conversation, as the peers' fakes do: calls ``echo``
    until ``tool_turns`` results are in it (then ``final_call`` once if set), then answers."""

    def decide(request: ModelRequest) -> dict[str, Any]:
        done = sum(
            1 for m in request.messages for p in m.content if isinstance(p, ToolResultPart)
        )
        if done < tool_turns:
            return {"tool_calls": [{"name": "echo", "arguments": {"text": f"turn {done}"}}]}
        if final_call and done == tool_turns:
            return {"tool_calls": [{"name": final_call, "arguments": {"amount": 5}}]}
        return {"text": "done"}

    return FunctionModel(decide, name="bench")


def agent_for(
    tool_turns: int, final_call: str | None = None, *, sync: bool = False, history: bool = False
) -> Agent:
    model = (
        history_model(tool_turns, final_call)
        if history
        else ScriptedModel(script(tool_turns, final_call))
    )
    return Agent(
        "bench",
        model,
        tools=[echo_sync if sync else echo, pay],
        limits=Limits(max_turns=tool_turns + 10),
    )


async def one_run(store: Any, turns: int = TOOL_TURNS, **kind: bool) -> float:
    runner = Runner(agent_for(turns, **kind), store)
    t0 = time.perf_counter()
    doc = await runner.start("go")
    elapsed = time.perf_counter() - t0
    if doc.status != "completed" or doc.turns != turns + 1:
        raise RuntimeError(f"unexpected end: {doc.status} after {doc.turns}")
    return elapsed


async def per_turn(store: Any, rounds: int, runs: int, **kind: bool) -> list[float]:
    for _ in range(3):
        await one_run(store, **kind)
    return [
        statistics.median([await one_run(store, **kind) for _ in range(runs)]) / MODEL_TURNS
        for _ in range(rounds)
    ]


async def resume_once(path: Path) -> float:
    """Pause on approval after 9 echo turns (the 10th call is ``pay``); then, with a fresh
    store object and Runner on the same file: load, record the approval, finish."""
    agent = agent_for(TOOL_TURNS - 1, final_call="pay")
    async with SQLiteStore(path) as store:
        doc = await Runner(agent, store).start("go")
    if doc.status != "waiting_approval":
        raise RuntimeError(f"not paused as planned: {doc.status}")
    call = doc.pending_approvals[0].tool_call_id
    t0 = time.perf_counter()
    store = SQLiteStore(path)
    fresh = Runner(agent, store)
    await fresh.decide(doc.id, call, "approved")
    done = await fresh.resume(doc.id)
    elapsed = time.perf_counter() - t0
    await store.close()
    if done.status != "completed":
        raise RuntimeError(done.status)
    return elapsed


async def stored_bytes(tmp: Path, turns: int) -> dict[str, Any]:
    empty = tmp / f"empty-{turns}.db"
    async with SQLiteStore(empty) as store:
        await store.list_runs()  # opens and migrates
    full = tmp / f"full-{turns}.db"
    async with SQLiteStore(full) as store:
        await one_run(store, turns)
    base = checkpointed_size(empty)
    size = checkpointed_size(full)
    rows = row_bytes(full)
    return {
        "file_bytes": size - base,
        "empty_file_bytes": base,
        "shared_file_bytes": await shared_bytes(tmp, turns),
        "row_bytes": sum(rows.values()),
        "row_bytes_by_table": rows,
    }


async def shared_bytes(tmp: Path, turns: int) -> int:
    """What one run adds to a database that holds runs already (SHARED_RUNS of 10 turns)."""
    path = tmp / f"shared-{turns}.db"
    async with SQLiteStore(path) as store:
        for _ in range(SHARED_RUNS):
            await one_run(store)
    before = checkpointed_size(path)
    async with SQLiteStore(path) as store:
        await one_run(store, turns)
    return checkpointed_size(path) - before


async def make_run(db: Path) -> str:
    async with SQLiteStore(db) as store:
        doc = await Runner(agent_for(TOOL_TURNS), store).start("go")
    return doc.id


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {
        "framework": "oarlock",
        "version": oarlock.__version__ if hasattr(oarlock, "__version__") else None,
    }
    with tempfile.TemporaryDirectory() as tmpname:
        tmp = Path(tmpname)
        rr = args.rounds, args.runs
        for key, kind in KINDS.items():
            out[f"memory{key}_per_turn_s"] = await per_turn(MemoryStore(), *rr, **kind)
        for key, kind in KINDS.items():
            async with SQLiteStore(tmp / f"durable{key}.db") as store:
                out[f"durable{key}_per_turn_s"] = await per_turn(store, *rr, **kind)
        out["commits_per_run"] = await commits_per_run(tmp / "count.db")
        await resume_once(tmp / "warm.db")
        out["resume_s"] = [
            await resume_once(tmp / f"resume-{i}.db") for i in range(args.rounds * RESUMES)
        ]
        out["bytes"] = {str(n): await stored_bytes(tmp, n) for n in (TOOL_TURNS, 100)}
        out["commit_s"] = flushed_commits(tmp / "commits.db", args.commits)
        out["unflushed_commit_s"] = flushed_commits(tmp / "normal.db", args.commits, "NORMAL")
    if args.pg:
        await postgres_rows(out, args)
    return out


async def postgres_rows(out: dict[str, Any], args: argparse.Namespace) -> None:
    """Per turn on PostgresStore (the same workload), and what one commit costs there,
    synchronous (flushed) and with synchronous_commit off."""
    from oarlock.store import PostgresStore

    async with PostgresStore(args.pg) as store:
        out["durable_pg_history_per_turn_s"] = await per_turn(
            store, args.rounds, args.runs, history=True
        )
    out["pg_commit_s"] = pg_commits(args.pg, True, args.commits)
    out["pg_unflushed_commit_s"] = pg_commits(args.pg, False, args.commits)


def pg_commits(url: str, sync: bool, n: int) -> list[float]:
    """One commit of a 2 KB row, n times, in its least form: one statement in autocommit
    (a single round trip), synchronous_commit on (it waits for the WAL's flush) or off."""
    import psycopg

    row = b"x" * 2048
    out = []
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_commits (id serial PRIMARY KEY, body bytea)")
        conn.execute(f"SET synchronous_commit = {'on' if sync else 'off'}")
        for _ in range(n):
            t0 = time.perf_counter()
            conn.execute("INSERT INTO bench_commits (body) VALUES (%s)", (row,))
            out.append(time.perf_counter() - t0)
    return out


def flushed_commits(path: Path, n: int, synchronous: str = "FULL") -> list[float]:
    """The floor under every durable figure: one commit of a 2 KB row to a WAL file with
    synchronous=FULL (one flush of the disk), n times; with NORMAL, a commit that waits for
    no disk."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body BLOB)")
    row = b"x" * 2048
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t VALUES (?, ?)", (i, row))
        conn.execute("COMMIT")
        out.append(time.perf_counter() - t0)
    conn.close()
    return out


KINDS: dict[str, dict[str, bool]] = {
    "": {},  # scripted model, async tool
    "_sync_tool": {"sync": True},  # scripted model, def tool
    "_history": {"history": True},  # history-decided model, async tool
    "_history_sync_tool": {"history": True, "sync": True},
}


async def commits_per_run(path: Path) -> dict[str, int]:
    """The commits one 10-turn run makes, by whether they waited for the disk (FULL) or
    rode on a later flush (NORMAL): the count the floor multiplies."""
    async with SQLiteStore(path) as store:
        await one_run(store)  # the store's tables made
        counts = {"FULL": 0, "NORMAL": 0}
        mode = ["FULL" if store.db().execute("PRAGMA synchronous").fetchone()[0] == 2 else "?"]

        def trace(sql: str) -> None:
            if sql.startswith("PRAGMA synchronous = "):
                mode[0] = sql.rsplit(" ", 1)[1]
            elif sql == "COMMIT":
                counts[mode[0]] += 1

        store.db().set_trace_callback(trace)
        await one_run(store)
        store.db().set_trace_callback(None)
    return counts


def main() -> int:
    ap = arguments()
    ap.add_argument("--make-run", metavar="DB", help="store one 10-turn run in DB, print its id")
    ap.add_argument("--pg", metavar="URL", help="also measure PostgresStore on this database")
    ap.add_argument(
        "--commits", type=int, default=200, help="commits timed for each floor (default 200)"
    )
    args = ap.parse_args()
    if args.make_run:
        emit(REAL_STDOUT, {"run_id": asyncio.run(make_run(Path(args.make_run)))})
        return 0
    emit(REAL_STDOUT, asyncio.run(main_async(args)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

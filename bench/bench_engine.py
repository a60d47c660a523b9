"""Per-turn overhead of the run engine, in memory and durable on SQLite, and the time to
resume a paused 50-message run after an approval.

Workload: an agent with one trivial async tool; the scripted model calls it on each of 10
turns, then answers (11 model turns). Only framework overhead is measured: the model and
the tool return at once.

Run: ``python bench/bench_engine.py [--rounds N] [--json OUT]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from oarlock.engine import Agent, Limits, Runner
from oarlock.models import ScriptedModel
from oarlock.store import MemoryStore, SQLiteStore
from oarlock.tools import tool


@tool(side_effect="read")
async def echo(text: str) -> str:
    """Return the text."""
    return text


@tool(side_effect="spend")
async def pay(amount: float) -> str:
    """Pay an amount (needs approval)."""
    return f"paid {amount}"


def script(tool_turns: int, final_call: str | None = None) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = [
        {
            "tool_calls": [{"name": "echo", "arguments": {"text": f"turn {i}"}}],
            "usage": {"input_tokens": 100, "output_tokens": 10},
        }
        for i in range(tool_turns)
    ]
    if final_call:
        turns.append({"tool_calls": [{"name": final_call, "arguments": {"amount": 5}}]})
    turns.append({"text": "done", "usage": {"input_tokens": 100, "output_tokens": 5}})
    return turns


async def one_run(store: Any, turns: int) -> float:
    agent = Agent("bench", ScriptedModel(script(turns)), tools=[echo], limits=Limits(max_turns=100))
    runner = Runner(agent, store)
    t0 = time.perf_counter()
    doc = await runner.start("go")
    elapsed = time.perf_counter() - t0
    if doc.status != "completed" or doc.turns != turns + 1:
        raise RuntimeError(f"unexpected end: {doc.status} after {doc.turns}")
    return elapsed / doc.turns


async def resume_once(store: Any) -> float:
    """A run paused on approval with 50 messages: load, approve, finish."""
    agent = Agent(
        "bench",
        ScriptedModel(script(24, final_call="pay")),
        tools=[echo, pay],
        limits=Limits(max_turns=100),
    )
    runner = Runner(agent, store)
    doc = await runner.start("go")
    if doc.status != "waiting_approval" or len(doc.messages) != 50:
        raise RuntimeError(f"not paused as planned: {doc.status}, {len(doc.messages)}")
    call = doc.pending_approvals[0].tool_call_id
    fresh = Runner(agent, store)
    t0 = time.perf_counter()
    await fresh.decide(doc.id, call, "approved")
    done = await fresh.resume(doc.id)
    elapsed = time.perf_counter() - t0
    if done.status != "completed":
        raise RuntimeError(done.status)
    return elapsed


def summarize(samples: list[float], scale: float = 1000.0) -> dict[str, float]:
    return {
        "median_ms": round(statistics.median(samples) * scale, 3),
        "min_ms": round(min(samples) * scale, 3),
        "max_ms": round(max(samples) * scale, 3),
    }


async def main_async(rounds: int, runs_per_round: int) -> dict[str, dict[str, float]]:
    out: dict[str, list[float]] = {
        "memory": [],
        "sqlite": [],
        "resume_memory": [],
        "resume_sqlite": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        sqlite = SQLiteStore(Path(tmp) / "bench.db")
        memory = MemoryStore()
        for _ in range(2):  # warm-up
            await one_run(memory, 10)
            await one_run(sqlite, 10)
        for _ in range(rounds):
            out["memory"].append(
                statistics.median([await one_run(memory, 10) for _ in range(runs_per_round)])
            )
            out["sqlite"].append(
                statistics.median([await one_run(sqlite, 10) for _ in range(runs_per_round)])
            )
            out["resume_memory"].append(await resume_once(memory))
            out["resume_sqlite"].append(await resume_once(sqlite))
        await sqlite.close()
    return {k: summarize(v) for k, v in out.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--runs", type=int, default=10, help="runs per round")
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args(argv)
    results = asyncio.run(main_async(args.rounds, args.runs))
    labels = {
        "memory": "per tool turn, in memory",
        "sqlite": "per tool turn, SQLite (WAL, synchronous=FULL, commit per step)",
        "resume_memory": "resume 50-message run after approval, in memory",
        "resume_sqlite": "resume 50-message run after approval, SQLite",
    }
    print(f"{'case':66} {'median ms':>10} {'spread ms':>18}")
    for key, r in results.items():
        print(f"{labels[key]:66} {r['median_ms']:>10.3f} {r['min_ms']:>8.3f}..{r['max_ms']:<8.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

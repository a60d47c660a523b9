"""Scale: listing the runs that wait for approval among many stored runs, and many
concurrent runs in one process against a model that takes 100 ms to answer.

1. ``--stored N`` runs (default 100,000) are written to a SQLite file, 1 in 100 waiting
   for approval; the seeding goes through the store's own named insert in large
   transactions (it is set-up, not measured). Measured: ``list_runs(status=
   "waiting_approval", limit=1000)`` and ``list_runs(limit=50)``.
2. ``--concurrent N`` runs (default 10,000) start at once in one event loop; each makes one
   tool call and answers, and every model response takes ``--latency`` seconds (100 ms).
   The ideal wall time is two model latencies; the efficiency is ideal / measured. The
   process's CPU time is given too: one event loop does all the work, so past a few
   hundred runs the wall time is the CPU time, not the waiting.
3. Memory: the same N runs held at their first model request (every one of them waiting
   on the model at once); the resident set's growth over the process before they started,
   per waiting run.

Run: ``python bench/bench_scale.py [--stored N] [--concurrent N] [--json OUT]``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from oarlock.engine import Agent, Runner
from oarlock.engine import _core as core
from oarlock.models import ModelRequest, ModelResponse, ScriptedModel
from oarlock.store import MemoryStore, SQLiteStore
from oarlock.store._sqlite import _columns, named_queries
from oarlock.tools import tool


@tool(side_effect="read")
async def echo(text: str) -> str:
    """Return the text."""
    return text


class SlowModel:
    """The scripted model, answering after ``latency`` seconds."""

    def __init__(self, latency: float) -> None:
        self.inner = ScriptedModel(
            [{"tool_calls": [{"name": "echo", "arguments": {"text": "hi"}}]}, {"text": "done"}]
        )
        self.latency = latency

    @property
    def model_id(self) -> str:
        return "scripted:slow"

    async def respond(self, request: ModelRequest) -> ModelResponse:
        await asyncio.sleep(self.latency)
        return await self.inner.respond(request)


class GatedModel(SlowModel):
    """Holds every request until ``count`` of them wait at once, then measures the
    process's resident set and lets them go."""

    def __init__(self, count: int) -> None:
        super().__init__(0.0)
        self.count, self.waiting, self.rss = count, 0, 0
        self.gate = asyncio.Event()

    async def respond(self, request: ModelRequest) -> ModelResponse:
        self.waiting += 1
        if self.waiting == self.count:
            gc.collect()
            self.rss = rss_bytes()
            self.gate.set()
        await self.gate.wait()
        return await self.inner.respond(request)


def rss_bytes() -> int:
    """The process's resident set now (Linux: /proc/self/statm)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def seed(path: Path, count: int) -> None:
    store = SQLiteStore(path)
    conn, q = store.db(), named_queries()
    batch = 5000
    for start in range(0, count, batch):
        with store.transaction("seeding runs"):
            for i in range(start, min(start + batch, count)):
                doc, _ = core.new_run(
                    run_id=f"run-{i:07d}",
                    agent="scale",
                    model="scripted:slow",
                    input="hello",
                    now=f"2026-01-01T{i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}.000000Z",
                    tags={"batch": str(i // batch)},
                )
                if i % 100 == 0:
                    doc.status = "waiting_approval"
                columns, _ = _columns(doc)
                conn.execute(  # tags too
                    q["create_run"],
                    {**columns, "agent_ref": None, "tenant": "default", "queue": "default",
                     "now": 0.0},
                )
    asyncio.run(store.close())


def listing(path: Path, rounds: int) -> dict[str, Any]:
    async def go() -> tuple[list[float], list[float], int]:
        waiting, newest, found = [], [], 0
        async with SQLiteStore(path) as store:
            for _ in range(rounds):
                t = time.perf_counter()
                runs = await store.list_runs(status="waiting_approval", limit=1000)
                waiting.append(time.perf_counter() - t)
                found = len(runs)
                t = time.perf_counter()
                await store.list_runs(limit=50)
                newest.append(time.perf_counter() - t)
        return waiting, newest, found

    waiting, newest, found = asyncio.run(go())
    return {
        "waiting_ms": statistics.median(waiting) * 1000,
        "newest_50_ms": statistics.median(newest) * 1000,
        "waiting_found": found,
    }


def concurrent(count: int, latency: float, store_kind: str, folder: Path) -> dict[str, Any]:
    async def go() -> tuple[float, float]:
        store = MemoryStore() if store_kind == "memory" else SQLiteStore(folder / "c.db")
        runner = Runner(Agent("scale", SlowModel(latency), tools=[echo]), store)
        await runner.start("warm-up")
        start, cpu = time.perf_counter(), time.process_time()
        docs = await asyncio.gather(*(runner.start(f"run {i}") for i in range(count)))
        took, cpu = time.perf_counter() - start, time.process_time() - cpu
        if any(d.status != "completed" for d in docs):
            raise RuntimeError("a run did not complete")
        await store.close()
        return took, cpu

    took, cpu = asyncio.run(go())
    ideal = 2 * latency
    return {
        "runs": count,
        "wall_s": took,
        "cpu_s": cpu,
        "cpu_per_run_ms": cpu / count * 1000,
        "ideal_s": ideal,
        "efficiency": ideal / took,
    }


def waiting_memory(count: int, store_kind: str, folder: Path) -> dict[str, Any]:
    """The resident set's growth per run while ``count`` runs wait on the model at once,
    in a process of its own (memory freed by earlier work would hide the growth)."""
    proc = subprocess.run(
        [sys.executable, __file__, "--rss", store_kind, "--concurrent", str(count)],
        capture_output=True, text=True, check=True, cwd=folder,
    )
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def _waiting_memory(count: int, store_kind: str, folder: Path) -> dict[str, Any]:

    async def go() -> tuple[int, int]:
        store = MemoryStore() if store_kind == "memory" else SQLiteStore(folder / "m.db")
        await Runner(Agent("scale", SlowModel(0.0), tools=[echo]), store).start("warm-up")
        model = GatedModel(count)
        runner = Runner(Agent("scale", model, tools=[echo]), store)
        gc.collect()
        before = rss_bytes()
        docs = await asyncio.gather(*(runner.start(f"run {i}") for i in range(count)))
        if any(d.status != "completed" for d in docs):
            raise RuntimeError("a run did not complete")
        await store.close()
        return before, model.rss

    before, held = asyncio.run(go())
    return {"runs": count, "rss_before_bytes": before, "rss_waiting_bytes": held,
            "bytes_per_waiting_run": (held - before) / count}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--stored", type=int, default=100_000)
    parser.add_argument("--concurrent", type=int, default=10_000)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--json", metavar="OUT")
    parser.add_argument("--rss", choices=["memory", "sqlite"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rss:  # one memory measurement, in this fresh process
        print(json.dumps(_waiting_memory(args.concurrent, args.rss, Path.cwd())))
        return
    folder = Path(tempfile.mkdtemp(prefix="oarlock-scale-"))
    seed(folder / "runs.db", args.stored)
    results: dict[str, Any] = {"stored_runs": args.stored}
    results["listing"] = listing(folder / "runs.db", 7)
    results["concurrent_memory"] = concurrent(args.concurrent, args.latency, "memory", folder)
    results["concurrent_sqlite"] = concurrent(args.concurrent, args.latency, "sqlite", folder)
    for kind in ("memory", "sqlite"):
        results[f"waiting_{kind}"] = waiting_memory(args.concurrent, kind, folder)
    print(json.dumps(results, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n", "utf-8")


if __name__ == "__main__":
    main()

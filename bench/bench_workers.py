"""Workers (``oarlock.worker.Worker``, one per process) draining a run queue on PostgreSQL,
and on SQLite for contrast, in one invocation.

Every run is driven by a worker process: the agent's scripted model sleeps ``--model-ms``
(100 ms) asynchronously before each response, as a remote model would; the run calls one
trivial ``read`` tool, then answers (two model responses: 200 ms of model time per run).

1. Throughput: 1, 2 and 4 worker processes (``--concurrency`` runs each) start, and once
   every one has sent its heartbeat, ``--runs`` runs are submitted (``Runner.submit``, as
   ``oarlock run --detach`` does) and drained. Runs per second, from the first submission
   to the last run completed. Each worker times every claim statement it makes (``claim``
   with free slots): p50 and p99 of the claims that took a run.
2. Decision to tool: ``--decisions`` runs wait for approval of a ``spend`` call; with two
   workers running, each is approved from this process (``Runner.decide``, no resume),
   one at a time; the time from ``decide`` returning (the decision stored) to the tool
   starting in a worker (the tool writes the time it starts).
3. Drain: ``--drain`` runs (10,000) queued before 2 workers start; the time from the first
   claim to the last run completed. With the queue full, the claim statement's plan
   (``EXPLAIN``) is shown: it reads the queue through an index.

The server is ``$OARLOCK_BENCH_PG`` (default ``postgresql://postgres@127.0.0.1:5432/test``);
each part makes a database of its own there and drops it. This machine has 2 cores,
shared by the server, the workers, this process and anything else running.

Run: ``python bench/bench_workers.py [--runs N] [--workers 1,2,4] [--concurrency N]
[--decisions N] [--drain N] [--model-ms MS] [--no-sqlite] [--json OUT]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

from oarlock.engine import Agent, Runner
from oarlock.governance._approvers import ApproverKey, TrustedApprovers
from oarlock.models import ModelRequest, ModelResponse, ScriptedModel
from oarlock.store import PostgresStore, SQLiteStore
from oarlock.store._postgres_base import pg_queries
from oarlock.tools import tool
from oarlock.worker import Worker, WorkerEvent, WorkerSettings

SERVER = os.environ.get("OARLOCK_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
SPAWN = multiprocessing.get_context("spawn")
APPROVER = "user:bench"


# --- the agents --------------------------------------------------------------------------


@tool(side_effect="read")
async def echo(text: str) -> str:
    """Return the text."""
    return text


@tool(side_effect="spend")
async def act(mark: str) -> str:
    """Write the time this call started to ``$BENCH_MARKS``."""
    with open(os.environ["BENCH_MARKS"], "a") as marks:
        marks.write(f"{mark} {time.time():.6f}\n")
    return "done"


class SlowModel:
    """A scripted model that sleeps ``seconds`` (asynchronously) before each response."""

    def __init__(self, seconds: float, tool_name: str = "echo") -> None:
        self.seconds, self.tool_name = seconds, tool_name

    @property
    def model_id(self) -> str:
        return "scripted:slow"

    async def respond(self, request: ModelRequest) -> ModelResponse:
        await asyncio.sleep(self.seconds)
        arguments = {"text": "hi"} if self.tool_name == "echo" else {"mark": _input_of(request)}
        turn = {"tool_calls": [{"name": self.tool_name, "arguments": arguments}]}
        return await ScriptedModel([turn, {"text": "done"}]).respond(request)


def _input_of(request: ModelRequest) -> str:
    first = request.messages[0]
    return "".join(getattr(p, "text", "") for p in first.content)


def agents(model_seconds: float, key: ApproverKey) -> dict[str, Agent]:
    trusted = TrustedApprovers.of(key)
    return {
        "bench": Agent("bench", SlowModel(model_seconds), tools=[echo]),
        "decide": Agent("decide", SlowModel(0.0, "act"), tools=[act], approvers=trusted),
    }


# --- databases ---------------------------------------------------------------------------


def pg_database() -> str:
    from urllib.parse import urlsplit, urlunsplit

    name = f"oarlock_bench_workers_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(SERVER, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return urlunsplit(urlsplit(SERVER)._replace(path="/" + name))


def drop(db: str) -> None:
    if not db.startswith("postgres"):
        return
    name = db.rsplit("/", 1)[1]
    with psycopg.connect(SERVER, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def open_db(db: str) -> Any:
    return PostgresStore(db, max_size=4) if db.startswith("postgres") else SQLiteStore(Path(db))


def new_db(kind: str, folder: Path) -> str:
    if kind == "postgresql":
        return pg_database()
    return str(folder / f"runs-{uuid.uuid4().hex[:6]}.db")


# --- a worker process --------------------------------------------------------------------


def worker_process(db: str, concurrency: int, model_seconds: float, key_raw: bytes,
                   out: str, marks: str) -> None:
    """One worker until SIGTERM; then its claim timings to ``out``."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    os.environ["BENCH_MARKS"] = marks
    key = ApproverKey(APPROVER, Ed25519PrivateKey.from_private_bytes(key_raw))
    claims: list[tuple[float, float, int]] = []  # start, seconds, runs taken

    async def go() -> None:
        store = open_db(db)
        real = store.claim

        async def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.time()
            got = await real(*args, **kwargs)
            claims.append((t0, time.time() - t0, len(got)))
            return got

        store.claim = timed
        settings = WorkerSettings(concurrency=concurrency, poll=1.0, heartbeat=2.0, lease=30.0)
        worker = Worker(store, settings, agents=agents(model_seconds, key), on_event=_say)
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, worker.stop)
        try:
            await worker.run()
        finally:
            await store.close()

    asyncio.run(go())
    Path(out).write_text(json.dumps(claims))


def _say(event: WorkerEvent) -> None:
    """What goes wrong in a worker, on its standard error."""
    if event.kind in ("error", "failed", "lease_lost"):
        print(f"worker {os.getpid()}: {event.kind} {event.run_id}: {event.detail}",
              file=sys.stderr, flush=True)


class Fleet:
    """``count`` worker processes on ``db``."""

    def __init__(self, db: str, count: int, args: argparse.Namespace, key: ApproverKey,
                 folder: Path) -> None:
        from cryptography.hazmat.primitives import serialization

        raw = key.private_key.private_bytes(
            serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
            serialization.NoEncryption())
        self.outs = [folder / f"claims-{uuid.uuid4().hex[:6]}.json" for _ in range(count)]
        self.marks = folder / "marks.txt"
        self.procs = [
            SPAWN.Process(target=worker_process, args=(
                db, args.concurrency, args.model_ms / 1000, raw, str(out), str(self.marks)))
            for out in self.outs
        ]
        for proc in self.procs:
            proc.start()

    def stop(self) -> list[tuple[float, float, int]]:
        for proc in self.procs:
            if proc.pid is not None and proc.is_alive():
                os.kill(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            proc.join(120)
        claims: list[tuple[float, float, int]] = []
        for out in self.outs:
            if out.exists():
                claims.extend((c[0], c[1], c[2]) for c in json.loads(out.read_text()))
        return claims


async def wait_for_workers(store: Any, count: int) -> None:
    deadline = time.monotonic() + 120
    while len(await store.workers(within_seconds=60)) < count:
        if time.monotonic() > deadline:
            raise SystemExit("the workers never started")
        await asyncio.sleep(0.05)


async def wait_until_done(store: Any, total: int, every: float = 0.05) -> float:
    """Poll until ``total`` runs completed; the time it was seen."""
    while True:
        done = len(await store.list_runs(status="completed", limit=total + 1))
        if done >= total:
            return time.time()
        await asyncio.sleep(every)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def claim_stats(claims: list[tuple[float, float, int]]) -> dict[str, Any]:
    taking = [seconds * 1000 for _, seconds, got in claims if got]
    return {
        "claims": len(claims),
        "claims_taking_runs": len(taking),
        "claim_p50_ms": percentile(taking, 0.5),
        "claim_p99_ms": percentile(taking, 0.99),
    }


# --- 1. throughput -----------------------------------------------------------------------


def throughput(kind: str, count: int, args: argparse.Namespace, key: ApproverKey,
               folder: Path) -> dict[str, Any]:
    db = new_db(kind, folder)

    async def setup() -> None:
        async with open_db(db) as store:
            await store.list_runs(limit=1)

    asyncio.run(setup())
    fleet = Fleet(db, count, args, key, folder)
    try:
        async def go() -> tuple[float, float]:
            async with open_db(db) as store:
                await wait_for_workers(store, count)
                runner = Runner(agents(args.model_ms / 1000, key)["bench"], store)
                t0 = time.time()
                for i in range(args.runs):
                    await runner.submit(f"run {i}")
                return t0, await wait_until_done(store, args.runs)

        t0, t1 = asyncio.run(go())
    finally:
        claims = fleet.stop()
        drop(db)
    wall = t1 - t0
    ideal = count * args.concurrency / (2 * args.model_ms / 1000)
    return {
        "backend": kind,
        "workers": count,
        "concurrency_each": args.concurrency,
        "runs": args.runs,
        "wall_s": wall,
        "runs_per_s": args.runs / wall,
        "model_bound_runs_per_s": ideal,
        **claim_stats(claims),
    }


# --- 2. decision to tool -----------------------------------------------------------------


def decisions(kind: str, args: argparse.Namespace, key: ApproverKey,
              folder: Path) -> dict[str, Any]:
    db = new_db(kind, folder)
    marks = folder / "marks.txt"
    marks.unlink(missing_ok=True)

    async def prepare() -> list[tuple[str, str]]:
        waiting = []
        async with open_db(db) as store:
            runner = Runner(agents(0.0, key)["decide"], store, approver=key)
            for i in range(args.decisions):
                doc = await runner.start(f"d{i}")
                assert doc.status == "waiting_approval", (doc.status, doc.error)
                waiting.append((doc.id, doc.pending_approvals[0].tool_call_id))
        return waiting

    waiting = asyncio.run(prepare())
    fleet = Fleet(db, 2, args, key, folder)
    latencies: list[float] = []
    try:
        async def go() -> None:
            async with open_db(db) as store:
                await wait_for_workers(store, 2)
                runner = Runner(agents(0.0, key)["decide"], store, approver=key)
                for i, (run_id, call) in enumerate(waiting):
                    await runner.decide(run_id, call, "approved")
                    decided = time.time()
                    started = await _marked(marks, f"d{i}")
                    latencies.append((started - decided) * 1000)
                    await asyncio.sleep(0.05)

        asyncio.run(go())
    finally:
        fleet.stop()
        drop(db)
    return {
        "backend": kind,
        "decisions": len(latencies),
        "p50_ms": percentile(latencies, 0.5),
        "p99_ms": percentile(latencies, 0.99),
        "max_ms": max(latencies),
    }


async def _marked(marks: Path, mark: str) -> float:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if marks.exists():
            for text in marks.read_text().splitlines():
                name, _, at = text.partition(" ")
                if name == mark:
                    return float(at)
        await asyncio.sleep(0.002)
    raise SystemExit(f"the tool of {mark} never started")


# --- 3. drain ----------------------------------------------------------------------------


def claim_plan(db: str) -> str:
    params = {"owner": "w", "limit": 16, "seconds": 30.0, "tenants": None,
              "queues": ["default"]}
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("ANALYZE runs")
        rows = conn.execute(
            "EXPLAIN " + pg_queries("postgres_queries.sql")["claim_runs"], params).fetchall()
    return "\n".join(str(row[0]) for row in rows)


def drain(args: argparse.Namespace, key: ApproverKey, folder: Path) -> dict[str, Any]:
    db = new_db("postgresql", folder)

    async def fill() -> float:
        async with open_db(db) as store:
            runner = Runner(agents(args.model_ms / 1000, key)["bench"], store)
            t0 = time.time()
            for start in range(0, args.drain, 50):
                await asyncio.gather(*(runner.submit(f"run {i}")
                                       for i in range(start, min(start + 50, args.drain))))
            return time.time() - t0

    queued_in = asyncio.run(fill())
    plan = claim_plan(db)
    fleet = Fleet(db, 2, args, key, folder)
    try:
        async def go() -> float:
            async with open_db(db) as store:
                return await wait_until_done(store, args.drain, every=0.5)

        t1 = asyncio.run(go())
    finally:
        claims = fleet.stop()
        drop(db)
    first = min(start for start, _, got in claims if got)
    return {
        "runs": args.drain,
        "workers": 2,
        "concurrency_each": args.concurrency,
        "queued_in_s": queued_in,
        "drain_s": t1 - first,
        "runs_per_s": args.drain / (t1 - first),
        **claim_stats(claims),
        "claim_plan": plan,
    }


# --- main --------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=400, help="runs per throughput case")
    parser.add_argument("--workers", default="1,2,4", help="worker processes per case")
    parser.add_argument("--concurrency", type=int, default=16, help="runs each worker drives")
    parser.add_argument("--decisions", type=int, default=40)
    parser.add_argument("--drain", type=int, default=10_000)
    parser.add_argument("--model-ms", type=float, default=100.0)
    parser.add_argument("--no-sqlite", action="store_true", help="PostgreSQL only")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    counts = [int(n) for n in args.workers.split(",")]
    kinds = ["postgresql"] if args.no_sqlite else ["postgresql", "sqlite"]
    key = ApproverKey.generate(APPROVER)
    results: dict[str, Any] = {"cpus": os.cpu_count(), "model_ms": args.model_ms}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        results["throughput"] = [throughput(kind, n, args, key, folder)
                                 for kind in kinds for n in counts]
        for row in results["throughput"]:
            print(f"{row['backend']:10} {row['workers']} worker(s): "
                  f"{row['runs_per_s']:7.1f} runs/s  claim p50 {row['claim_p50_ms']:.2f} ms "
                  f"p99 {row['claim_p99_ms']:.2f} ms", flush=True)
        results["decision_to_tool"] = [decisions(kind, args, key, folder) for kind in kinds]
        for row in results["decision_to_tool"]:
            print(f"{row['backend']:10} decision to tool: p50 {row['p50_ms']:.1f} ms "
                  f"p99 {row['p99_ms']:.1f} ms", flush=True)
        if args.drain:
            results["drain"] = drain(args, key, folder)
            row = results["drain"]
            print(f"drain {row['runs']} runs, 2 workers: {row['drain_s']:.1f} s "
                  f"({row['runs_per_s']:.1f} runs/s)\n{row['claim_plan']}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())

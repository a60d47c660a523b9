"""The PostgreSQL store measured beside SQLite and memory, in one invocation.

1. Per tool turn: the workload of ``bench_engine.py`` (an agent whose scripted model calls
   one trivial ``read`` tool on each of 10 turns, then answers), in memory, on SQLite and
   on PostgreSQL; with the commits each turn makes (counted by a store that wraps the real
   one) and the floor they imply: the commit latency measured here, times the commits;
   on PostgreSQL, the statements a turn sends too (each a round trip of its own).
2. Ledger write throughput: writers in 4 processes (4 concurrent tasks each) append
   records as fast as they can, all of one tenant (one chain: every append waits for the
   chain's head row) or of 4 tenants (4 chains). Two records: a standing approval
   (``record_approval``, committed with ``synchronous_commit = off``) and the claim of a
   ``spend`` call (``begin``: a synchronous commit, flushed while the head is locked).
3. The driver's own cost of a statement: ``SELECT 1`` sent ``--driver`` times through libpq
   alone (psycopg's ``pq`` layer, blocking), through psycopg's ``Connection.execute`` and
   through its ``AsyncConnection.execute`` (the store's way, each wait a reader on the
   event loop): the round trip's wall time and the process's CPU time, which no work of
   oarlock's is in. A turn sends two statements.

The server is ``$OARLOCK_BENCH_PG`` (default ``postgresql://postgres@127.0.0.1:5432/test``);
the benchmark makes a database of its own there and drops it. This machine has 2 cores,
shared by the server, the writers and everything else.

Run: ``python bench/bench_postgres.py [--rounds N] [--records N] [--driver N] [--json OUT]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).parent))
from bench_engine import one_run

from oarlock.formats._jcs import digest
from oarlock.governance._records import Approval, Claim
from oarlock.store import MemoryStore, SQLiteStore
from oarlock.store._postgres import PostgresStore

SERVER = os.environ.get("OARLOCK_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
NOW = "2026-01-01T00:00:00.000000Z"
PROCESSES, TASKS = 4, 4


def database_url(name: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    return urlunsplit(urlsplit(SERVER)._replace(path="/" + name))


# --- 1. per turn --------------------------------------------------------------------------


class Counting:
    """Counts the commits a store makes: synchronous ones (the run's own, a
    side-effecting claim) and the rest."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.sync, self.lazy = inner, 0, 0
        gov, counter = inner.governance(), self

        class Gov:
            def __getattr__(self, name: str) -> Any:
                return getattr(gov, name)

            async def begin(self, invocation: Any, *a: Any, **k: Any) -> Any:
                safe = invocation["sideEffectClass"] in ("read", "sandbox")
                counter.lazy += safe
                counter.sync += not safe
                return await gov.begin(invocation, *a, **k)

            async def finish(self, *a: Any, **k: Any) -> Any:
                counter.lazy += 1
                return await gov.finish(*a, **k)

            async def record(self, *a: Any, **k: Any) -> Any:  # a read: claim and receipt
                counter.lazy += 1
                return await gov.record(*a, **k)

        self._gov = Gov()

    def governance(self) -> Any:
        return self._gov

    async def create(self, *a: Any, **k: Any) -> Any:
        self._count(k.get("flush", True))
        return await self.inner.create(*a, **k)

    async def save(self, *a: Any, **k: Any) -> Any:
        self._count(k.get("flush", True))
        return await self.inner.save(*a, **k)

    def _count(self, flush: bool) -> None:
        self.sync += flush
        self.lazy += not flush

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def sqlite_commit_ms(path: Path, flush: bool, n: int = 200) -> float:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {'FULL' if flush else 'NORMAL'}")
    conn.execute("CREATE TABLE IF NOT EXISTS t (x INTEGER)")
    t0 = time.perf_counter()
    for i in range(n):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t VALUES (?)", (i,))
        conn.execute("COMMIT")
    elapsed = (time.perf_counter() - t0) / n * 1000
    conn.close()
    return elapsed


def pg_commit_ms(url: str, sync: bool, n: int = 300) -> float:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_commit (x integer)")
        t0 = time.perf_counter()
        for i in range(n):
            if sync:
                conn.execute("INSERT INTO bench_commit VALUES (%s)", (i,))
            else:  # one statement, as the store commits one that need not wait for the disk
                conn.execute(
                    "WITH mode AS (SELECT set_config('synchronous_commit', 'off', true)) "
                    "INSERT INTO bench_commit SELECT %s FROM mode",
                    (i,),
                )
        return (time.perf_counter() - t0) / n * 1000


def _libpq_select(conn: psycopg.Connection[Any]) -> None:
    pg = conn.pgconn
    pg.send_query(b"SELECT 1")
    while pg.get_result() is not None:  # blocks until the server answers
        pass


async def driver_floor(url: str, n: int) -> dict[str, dict[str, float]]:
    """``SELECT 1``'s round trip through each layer: medians of the wall time and the mean
    of the process's CPU time, in microseconds, after a tenth of ``n`` as warm-up."""

    def timed(samples: list[tuple[float, float]]) -> dict[str, float]:
        kept = samples[n // 10 :]
        return {"wall_us": statistics.median(w for w, _ in kept) * 1e6,
                "cpu_us": statistics.fmean(c for _, c in kept) * 1e6}  # fmt: skip

    async def one(call: Any) -> tuple[float, float]:
        c0, t0 = time.process_time(), time.perf_counter()
        done = call()
        if asyncio.iscoroutine(done):
            await done
        return time.perf_counter() - t0, time.process_time() - c0

    out: dict[str, dict[str, float]] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        out["libpq"] = timed([await one(lambda: _libpq_select(conn)) for _ in range(n)])
        out["psycopg"] = timed([await one(lambda: conn.execute("SELECT 1")) for _ in range(n)])
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as aconn:
        out["psycopg_async"] = timed(
            [await one(lambda: aconn.execute("SELECT 1")) for _ in range(n)]
        )
    return out


async def statements_per_run(store: PostgresStore) -> int:
    """The statements one run sends (each a round trip: the store sends no pipelines on
    this path)."""
    sent = [0]
    real = psycopg.AsyncCursor.execute

    async def execute(self: Any, *a: Any, **k: Any) -> Any:
        sent[0] += 1
        return await real(self, *a, **k)

    psycopg.AsyncCursor.execute = execute  # type: ignore[method-assign]
    try:
        await one_run(store, 10)
    finally:
        psycopg.AsyncCursor.execute = real  # type: ignore[method-assign]
    return sent[0]


async def per_turn(url: str, tmp: Path, rounds: int, runs: int) -> dict[str, Any]:
    stores: dict[str, Any] = {
        "memory": MemoryStore(),
        "sqlite": SQLiteStore(tmp / "bench.db"),
        "postgres": PostgresStore(url),
    }
    out: dict[str, Any] = {}
    for name, store in stores.items():
        for _ in range(2):
            await one_run(store, 10)  # warm-up
        samples = [
            statistics.median([await one_run(store, 10) for _ in range(runs)])
            for _ in range(rounds)
        ]
        counting = Counting(store)
        await one_run(counting, 10)
        if name == "postgres":
            statements = round(await statements_per_run(store) / 11, 2)
        out[name] = {
            "median_ms": round(statistics.median(samples) * 1000, 3),
            "min_ms": round(min(samples) * 1000, 3),
            "max_ms": round(max(samples) * 1000, 3),
            "sync_commits_per_turn": round(counting.sync / 11, 2),
            "lazy_commits_per_turn": round(counting.lazy / 11, 2),
        }
        if name == "postgres":
            out[name]["statements_per_turn"] = statements
        await store.close()
    latencies = {
        "sqlite": (sqlite_commit_ms(tmp / "c.db", True), sqlite_commit_ms(tmp / "c.db", False)),
        "postgres": (pg_commit_ms(url, True), pg_commit_ms(url, False)),
    }
    for name, (sync_ms, lazy_ms) in latencies.items():
        r = out[name]
        r["sync_commit_ms"], r["lazy_commit_ms"] = round(sync_ms, 3), round(lazy_ms, 3)
        r["floor_ms"] = round(
            r["sync_commits_per_turn"] * sync_ms + r["lazy_commits_per_turn"] * lazy_ms, 3
        )
    return out


# --- 2. ledger throughput --------------------------------------------------------------


def _approval(tenant: str) -> Approval:
    return Approval(
        approval_id=str(uuid.uuid4()), run_id=str(uuid.uuid4()), tool_call_id="c1",
        tool_id="charge", arguments_hash=digest({"a": 1}), scope={"tenantId": tenant},
        decided_by="policy", principal="rule", decided_at=NOW,
    )  # fmt: skip


def _spend(tenant: str) -> tuple[dict[str, Any], Claim]:
    arguments = {"order_id": str(uuid.uuid4())}
    inv = {
        "invocationId": str(uuid.uuid4()), "toolId": "charge", "schemaVersion": "1",
        "scope": {"tenantId": tenant}, "runId": str(uuid.uuid4()), "stepId": str(uuid.uuid4()),
        "attemptId": str(uuid.uuid4()), "sideEffectClass": "spend",
        "idempotencyKey": arguments["order_id"], "arguments": arguments,
        "argumentsHash": digest(arguments),
        "policyDecision": {"decisionId": str(uuid.uuid4()), "effect": "allow",
                           "policyId": "p", "evaluatedAt": NOW},
    }  # fmt: skip
    claim = Claim(tenant, "charge", inv["idempotencyKey"], inv["invocationId"],
                  inv["argumentsHash"], "bench", NOW, 0.0)  # fmt: skip
    return inv, claim


def _writer(url: str, kind: str, tenants: list[str], records: int, barrier: Any, q: Any) -> None:
    async def go() -> None:
        store = PostgresStore(url, max_size=TASKS)
        gov = store.governance()
        await store.open()

        async def task(tenant: str) -> None:
            for _ in range(records):
                if kind == "approval":
                    await gov.record_approval(_approval(tenant))
                else:
                    inv, claim = _spend(tenant)
                    await gov.begin(inv, claim, approval_id=None, grant=None, at=NOW)

        barrier.wait()
        t0 = time.perf_counter()
        await asyncio.gather(*(task(tenants[i % len(tenants)]) for i in range(TASKS)))
        q.put(time.perf_counter() - t0)
        await store.close()

    asyncio.run(go())


def throughput(url: str, kind: str, tenant_count: int, records: int) -> float:
    ctx = multiprocessing.get_context("spawn")
    barrier, q = ctx.Barrier(PROCESSES), ctx.Queue()
    names = [f"tenant-{i}" for i in range(tenant_count)]
    procs = []
    for p in range(PROCESSES):  # each process starts its tasks at another tenant
        turn = p % tenant_count
        tenants = names[turn:] + names[:turn]
        procs.append(
            ctx.Process(target=_writer, args=(url, kind, tenants, records, barrier, q))
        )
    for p in procs:
        p.start()
    for p in procs:
        p.join(600)
    took = max(q.get(timeout=5) for _ in procs)
    return PROCESSES * TASKS * records / took


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=10, help="runs per round")
    ap.add_argument("--records", type=int, default=150, help="records per writer task")
    ap.add_argument("--driver", type=int, default=2000, help="statements per driver case")
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args(argv)
    name = f"oarlock_bench_{os.getpid()}"
    with psycopg.connect(SERVER, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = database_url(name)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            turns = asyncio.run(per_turn(url, Path(tmp), args.rounds, args.runs))
        driver = asyncio.run(driver_floor(url, args.driver))
        ledger = {
            f"{kind}_{n}_tenants": round(throughput(url, kind, n, args.records))
            for kind in ("approval", "spend_claim")
            for n in (1, 4)
        }
    finally:
        with psycopg.connect(SERVER, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    print("per tool turn (11 model turns, 10 tool calls)")
    print(f"{'store':10} {'median ms':>10} {'spread ms':>16} {'sync+lazy commits/turn':>24}"
          f" {'commit ms sync/lazy':>20} {'floor ms':>9}")  # fmt: skip
    for store, r in turns.items():
        commits = f"{r['sync_commits_per_turn']}+{r['lazy_commits_per_turn']}"
        lat = f"{r.get('sync_commit_ms', 0):.3f}/{r.get('lazy_commit_ms', 0):.3f}"
        print(f"{store:10} {r['median_ms']:>10.3f} {r['min_ms']:>7.3f}..{r['max_ms']:<7.3f}"
              f" {commits:>24} {lat:>20} {r.get('floor_ms', 0):>9.3f}")  # fmt: skip
    if "statements_per_turn" in turns["postgres"]:
        print(f"postgres statements per turn: {turns['postgres']['statements_per_turn']}")
    print(f"\nSELECT 1, {args.driver} times: round trip (median) and the process's CPU (mean)")
    for layer, r in driver.items():
        print(f"  {layer:14} wall {r['wall_us']:7.0f} us  cpu {r['cpu_us']:7.0f} us")
    print(f"\nledger appends per second ({PROCESSES} processes x {TASKS} tasks, 2 cores)")
    for key, value in ledger.items():
        print(f"  {key:28} {value:>8}")
    if args.json:
        out = {"per_turn": turns, "ledger": ledger, "driver": driver}
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Where a turn's time goes: the workload of ``bench/compare.py`` (one agent, one ``read``
tool ``echo``, a model that decides from the conversation: 10 tool turns and an answer),
its wall time split among the parts of the turn, in memory and on a durable SQLite file.

Each part is timed exclusively (a part's time leaves out the parts it calls), by wrapping
the functions that make it up; what is left is the runner, the event loop and Python's own
calls between the parts. The runs go one after another, so the timers never overlap.

- model adapter: the fake model deciding and its reply made into a message
- engine core: the pure state machine (what to do next, each step's transition)
- tool planning: the model's calls matched to tools, arguments checked
- governed executor: policy, approval check, the invocation and receipt records, their
  hashes, the idempotency key (the store calls below left out)
- governance store: a read's one write after it ran (its claim with its invocation, the
  receipt with its artifact), inside its step's save (``write_records``; on PostgreSQL in
  the save's statement, so in the statements' time below), or the claim and the receipt
  of any other call, and their ledger entries, as written by the store (JCS bytes, entry
  hashes, statements)
- run store: a step's commit (the document's JSON, its events, the statements)
- SQLite commits: ``COMMIT`` itself, flushed (``synchronous=FULL``) or not (``NORMAL``)
- PostgreSQL statements: each statement's round trip, as the client waits for it (the
  client's work in psycopg, the server's, the commit's wait for the disk when it waits);
  the client's CPU in them is measured apart
- the tool: the call of ``echo`` itself

Instrumentation adds a few microseconds per timed call; the total is given beside the
uninstrumented per-turn time measured in the same invocation.

Run: ``python bench/bench_profile.py [--runs N] [--pg URL] [--json OUT]`` (the PostgreSQL
column in a database of its own on the server at URL, made and dropped; ``--pg ''`` leaves
it out).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))
from oarlock_bench import MODEL_TURNS, one_run

from oarlock.engine import _core as core
from oarlock.engine import _runner as runner_module
from oarlock.formats import _codec
from oarlock.governance._executor import GovernedExecutor
from oarlock.governance._store import MemoryGovernanceStore
from oarlock.models._function import FunctionModel
from oarlock.store import MemoryStore, SQLiteStore
from oarlock.store import _sqlite as sqlite_module
from oarlock.store._sqlite_governance import SQLiteGovernanceStore
from oarlock.tools._tool import Tool

PARTS = [
    "model adapter",
    "engine core",
    "tool planning",
    "governed executor",
    "governance store",
    "run store",
    "SQLite commit, flushed",
    "SQLite commit, not flushed",
    "PostgreSQL statements",
    "the tool",
]
STATEMENTS = "PostgreSQL statements"


class Timer:
    """Exclusive time per part: a part's clock stops while a part it calls runs."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.cpu: dict[str, float] = defaultdict(float)  # process time, for the parts timed so
        self._stack: list[list[Any]] = []  # [part, started, time of its inner parts]

    def enter(self, part: str) -> None:
        self._stack.append([part, time.perf_counter(), 0.0])

    def leave(self) -> None:
        part, started, inner = self._stack.pop()
        took = time.perf_counter() - started
        self.spent[part] += took - inner
        self.calls[part] += 1
        if self._stack:
            self._stack[-1][2] += took

    @contextmanager
    def part(self, name: str) -> Iterator[None]:
        self.enter(name)
        try:
            yield
        finally:
            self.leave()

    def reset(self) -> None:
        self.spent.clear()
        self.calls.clear()
        self.cpu.clear()


def _wrap_async(timer: Timer, owner: Any, attr: str, part: str) -> Callable[[], None]:
    original = getattr(owner, attr)

    @functools.wraps(original)
    async def timed(*args: Any, **kwargs: Any) -> Any:
        timer.enter(part)
        try:
            return await original(*args, **kwargs)
        finally:
            timer.leave()

    setattr(owner, attr, timed)
    return lambda: setattr(owner, attr, original)


def _wrap_sync(timer: Timer, owner: Any, attr: str, part: str) -> Callable[[], None]:
    original = getattr(owner, attr)

    @functools.wraps(original)
    def timed(*args: Any, **kwargs: Any) -> Any:
        timer.enter(part)
        try:
            return original(*args, **kwargs)
        finally:
            timer.leave()

    setattr(owner, attr, timed)
    return lambda: setattr(owner, attr, original)


def _timed_statements(timer: Timer) -> Callable[[], None]:
    """Each PostgreSQL statement's round trip (wall time, and the client's CPU in it)."""
    import psycopg

    original = psycopg.AsyncCursor.execute

    @functools.wraps(original)
    async def execute(self: Any, *args: Any, **kwargs: Any) -> Any:
        cpu = time.process_time()
        timer.enter(STATEMENTS)
        try:
            return await original(self, *args, **kwargs)
        finally:
            timer.leave()
            timer.cpu[STATEMENTS] += time.process_time() - cpu

    psycopg.AsyncCursor.execute = execute  # type: ignore[method-assign]
    return lambda: setattr(psycopg.AsyncCursor, "execute", original)


def _timed_transaction(timer: Timer) -> Callable[[], None]:
    """SQLite's ``COMMIT`` timed apart from the statements before it."""
    original = sqlite_module.SQLiteStore._transaction

    def transaction(self: Any, conn: Any, doing: str, *, flush: bool = True) -> Any:
        class Conn:  # COMMIT timed; every other statement, and the rest, passed through
            def execute(self, sql: str, *args: Any) -> Any:
                if sql == "COMMIT":
                    name = "SQLite commit, " + ("flushed" if flush else "not flushed")
                    with timer.part(name):
                        return conn.execute(sql, *args)
                return conn.execute(sql, *args)

            def __getattr__(self, name: str) -> Any:
                return getattr(conn, name)

        return original(self, Conn(), doing, flush=flush)

    sqlite_module.SQLiteStore._transaction = transaction  # type: ignore[method-assign]
    return lambda: setattr(sqlite_module.SQLiteStore, "_transaction", original)


def instrument(timer: Timer, postgres: bool = False) -> list[Callable[[], None]]:
    undo = [
        _wrap_async(timer, FunctionModel, "respond", "model adapter"),
        _wrap_async(timer, GovernedExecutor, "execute", "governed executor"),
        _wrap_async(timer, Tool, "call", "the tool"),
        _wrap_sync(timer, runner_module, "plan_call", "tool planning"),
        _timed_transaction(timer),
    ]
    steps = ("next_action", "on_model_response", "on_tools_planned", "on_tools_ran", "halt")
    for name in (*steps, "new_run"):  # the runner calls them as the module's attributes
        if hasattr(core, name):
            undo.append(_wrap_sync(timer, core, name, "engine core"))
    for store in (MemoryStore, SQLiteStore):
        for attr in ("save", "create"):
            undo.append(_wrap_async(timer, store, attr, "run store"))
    for gov in (MemoryGovernanceStore, SQLiteGovernanceStore):
        for attr in ("begin", "finish", "record", "take_over", "refuse"):
            undo.append(_wrap_async(timer, gov, attr, "governance store"))
        # a fresh read's claim, invocation and receipt, written inside its step's save
        undo.append(_wrap_sync(timer, gov, "write_records", "governance store"))
    undo.append(_wrap_sync(timer, _codec, "dump_run_parts", "run store"))
    if postgres:
        from oarlock.store._postgres import PostgresStore
        from oarlock.store._postgres_governance import PostgresGovernanceStore

        for attr in ("save", "create"):
            undo.append(_wrap_async(timer, PostgresStore, attr, "run store"))
        # a fresh read's records go in its step's save statement: no call of their own
        for attr in ("begin", "finish", "record", "take_over", "refuse", "write_records"):
            undo.append(_wrap_async(timer, PostgresGovernanceStore, attr, "governance store"))
        undo.append(_timed_statements(timer))
    return undo


async def _per_turn(store: Any, runs: int) -> float:
    for _ in range(3):
        await one_run(store, history=True)
    times = [await one_run(store, history=True) for _ in range(runs)]
    return statistics.median(times) / MODEL_TURNS


async def profile(
    store_of: Callable[[], Any], runs: int, *, postgres: bool = False
) -> dict[str, Any]:
    store = store_of()
    try:
        plain = await _per_turn(store, runs)
        timer = Timer()
        undo = instrument(timer, postgres)
        try:
            for _ in range(3):
                await one_run(store, history=True)
            timer.reset()
            t0, cpu0 = time.perf_counter(), time.process_time()
            for _ in range(runs):
                await one_run(store, history=True)
            total, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        finally:
            for u in reversed(undo):
                u()
    finally:
        await store.close()
    turns = runs * MODEL_TURNS
    parts = {p: timer.spent.get(p, 0.0) / turns * 1e6 for p in PARTS}
    rest = total / turns * 1e6 - sum(parts.values())
    return {
        "per_turn_us": plain * 1e6,
        "instrumented_per_turn_us": total / turns * 1e6,
        "parts_us": parts,
        "calls_per_turn": {p: timer.calls.get(p, 0) / turns for p in PARTS},
        "rest_us": rest,
        "cpu_per_turn_us": cpu / turns * 1e6,  # the process's, instrumented
        "statements_cpu_us": timer.cpu.get(STATEMENTS, 0.0) / turns * 1e6,
    }


def markdown(res: dict[str, dict[str, Any]]) -> str:
    kinds = list(res)
    out = [
        "| part of a turn | " + " | ".join(f"{k} µs" for k in kinds) + " |",
        "| --- |" + " ---: |" * len(kinds),
    ]
    for p in PARTS:
        cells = [res[k]["parts_us"][p] for k in kinds]
        if not any(cells):
            continue
        out.append(f"| {p} | " + " | ".join(f"{c:,.0f}" for c in cells) + " |")
    out.append(
        "| runner, event loop, the rest | "
        + " | ".join(f"{res[k]['rest_us']:,.0f}" for k in kinds)
        + " |"
    )
    out.append(
        "| **total, instrumented** | "
        + " | ".join(f"**{res[k]['instrumented_per_turn_us']:,.0f}**" for k in kinds)
        + " |"
    )
    out.append(
        "| per turn, not instrumented (median of runs) | "
        + " | ".join(f"{res[k]['per_turn_us']:,.0f}" for k in kinds)
        + " |"
    )
    out.append(
        "| the process's CPU a turn, instrumented | "
        + " | ".join(f"{res[k]['cpu_per_turn_us']:,.0f}" for k in kinds)
        + " |"
    )
    if any(res[k]["statements_cpu_us"] for k in kinds):
        out.append(
            f"| of which in {STATEMENTS.lower()} (the client's) | "
            + " | ".join(f"{res[k]['statements_cpu_us']:,.0f}" for k in kinds)
            + " |"
        )
    return "\n".join(out)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        res = {
            "memory": await profile(MemoryStore, args.runs),
            "SQLite": await profile(lambda: SQLiteStore(Path(tmp) / "profile.db"), args.runs),
        }
    if args.pg:
        from compare import postgres_databases  # a database of its own, dropped after

        from oarlock.store import PostgresStore

        with postgres_databases(args.pg, ["profile"]) as made:
            url = made["profile"][1]  # ["--pg", URL]
            res["PostgreSQL"] = await profile(lambda: PostgresStore(url), args.runs, postgres=True)
    return res


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument(
        "--pg",
        default=os.environ.get("OARLOCK_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test"),
        help="PostgreSQL server for the PostgreSQL column ('' to leave it out)",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    res = asyncio.run(main_async(args))
    print(markdown(res))
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

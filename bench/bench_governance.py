"""What a governed tool call costs: policy, approval check, idempotency claim, receipt and
ledger around a tool that returns at once, in memory and durable on SQLite.

Cases: a ``read`` call (allowed by default), and a ``spend`` call allowed by a policy rule
(a standing approval recorded with the claim). Each call has a fresh idempotency key, so
every call claims, runs and writes its receipt; a replay of a stored key is measured too.

Run: ``python bench/bench_governance.py [--calls N] [--rounds N] [--json OUT]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from oarlock.formats._models import ToolCallPart
from oarlock.governance import CallContext, GovernedExecutor, MemoryGovernanceStore, RulePolicy
from oarlock.store import SQLiteStore
from oarlock.tools import tool


@tool(side_effect="read")
async def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


@tool(side_effect="spend")
async def charge(order_id: str, amount: int) -> str:
    """Charge an order."""
    return f"charged {amount}"


POLICY = RulePolicy.from_dict(
    {
        "policy": "bench",
        "rules": [
            {
                "id": "small",
                "effect": "allow",
                "reason": "small charges are pre-approved",
                "match": {"tool": "charge", "arguments": {"amount": {"lte": 50}}},
            }
        ],
    }
)


async def per_call(executor: GovernedExecutor, which: str, calls: int, replay: bool) -> float:
    ctx = CallContext("bench-run", "bench", {"tenantId": "acme"}, 1)
    t = lookup if which == "read" else charge
    args: dict[str, Any] = {"key": "k"} if which == "read" else {"order_id": "o", "amount": 5}
    parts = [
        ToolCallPart(type="tool_call", id="c0" if replay else f"c{i}", name=t.name, arguments=args)
        for i in range(calls)
    ]
    if replay:
        await executor.execute(t, parts[0], args, ctx)
    start = time.perf_counter()
    for part in parts:
        result = await executor.execute(t, part, args, ctx)
        if result.is_error:
            raise RuntimeError(result.content)
    return (time.perf_counter() - start) / calls * 1000


async def baseline(calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        await lookup.call({"key": "k"})
    return (time.perf_counter() - start) / calls * 1000


def measure(
    make: Callable[[], tuple[GovernedExecutor, Callable[[], None]]],
    which: str,
    calls: int,
    replay: bool,
) -> float:
    executor, close = make()
    try:
        return asyncio.run(per_call(executor, which, calls, replay))
    finally:
        close()


def memory() -> tuple[GovernedExecutor, Callable[[], None]]:
    return GovernedExecutor(MemoryGovernanceStore(), policy=POLICY), lambda: None


def durable(folder: Path) -> Callable[[], tuple[GovernedExecutor, Callable[[], None]]]:
    def make() -> tuple[GovernedExecutor, Callable[[], None]]:
        store = SQLiteStore(folder / f"g{time.perf_counter_ns()}.db")
        return GovernedExecutor(store.governance(), policy=POLICY), lambda: asyncio.run(
            store.close()
        )

    return make


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", metavar="OUT")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="oarlock-bench-"))
    cases: dict[str, Callable[[], float]] = {
        "tool called directly (no governance)": lambda: asyncio.run(baseline(args.calls)),
        "governed read call, in memory": lambda: measure(memory, "read", args.calls, False),
        "governed spend call (policy approval), in memory": lambda: measure(
            memory, "spend", args.calls, False
        ),
        "replay of a stored key, in memory": lambda: measure(memory, "spend", args.calls, True),
        "governed read call, SQLite (2 commits)": lambda: measure(
            durable(folder), "read", args.calls // 4, False
        ),
        "governed spend call (policy approval), SQLite (2 commits)": lambda: measure(
            durable(folder), "spend", args.calls // 4, False
        ),
        "replay of a stored key, SQLite": lambda: measure(
            durable(folder), "spend", args.calls // 4, True
        ),
    }
    results: dict[str, dict[str, float]] = {}
    print(f"{'case':<62}{'median ms':>12}{'spread ms':>20}")
    for name, run in cases.items():
        samples = sorted(run() for _ in range(args.rounds))
        results[name] = {
            "median_ms": statistics.median(samples),
            "min_ms": samples[0],
            "max_ms": samples[-1],
        }
        print(
            f"{name:<62}{statistics.median(samples):>12.3f}"
            f"{f'{samples[0]:.3f}..{samples[-1]:.3f}':>20}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n", "utf-8")


if __name__ == "__main__":
    main()

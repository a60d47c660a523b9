"""What a sandboxed call costs: the same short command run with ``subprocess.run``, and
through the sandbox runner under bubblewrap and under the ``unshare`` fallback (egress
``none``), and a Python tool run in a child interpreter in the sandbox.

Run: ``python bench/bench_sandbox.py [--calls N] [--rounds N] [--json OUT]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from oarlock.sandbox import SandboxRunner, Workspaces, call_sandboxed
from oarlock.sandbox._host import HostSupport, host_support
from oarlock.tools import tool

COMMAND = ["/bin/sh", "-c", "echo hello"]


@tool(side_effect="sandbox")
def hello(name: str) -> str:
    """Say hello."""
    return f"hello {name}"


def _runner(root: Path, isolation: str) -> SandboxRunner:
    real = host_support()
    support = HostSupport(
        bubblewrap=isolation == "bubblewrap" and real.bubblewrap,
        unshare=real.unshare,
        drop_user=real.drop_user,
        landlock=real.landlock,
    )
    return SandboxRunner(Workspaces(root), isolation=isolation, support=support)


async def _timed(calls: int, once: Callable[[], Awaitable[Any]]) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        await once()
    return (time.perf_counter() - t0) / calls * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", metavar="OUT")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="oarlock-bench-sandbox-", dir="/tmp"))
    root.chmod(0o711)
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        cases: dict[str, Callable[[], Awaitable[Any]]] = {
            "subprocess.run (no isolation)": lambda: asyncio.to_thread(
                subprocess.run, COMMAND, capture_output=True, check=True
            ),
        }
        for isolation in ("bubblewrap", "unshare"):
            runner = _runner(root / isolation, isolation)
            cases[f"sandboxed command, {isolation}"] = (
                lambda r=runner: r.run(COMMAND, workspace_id="bench")
            )
        from bench_sandbox import hello as importable  # the child imports it by module

        py = _runner(root / "py", "bubblewrap")
        cases["sandboxed Python tool, bubblewrap"] = lambda: call_sandboxed(
            py, importable, {"name": "x"}, workspace_id="bench", egress="none"
        )
        results: dict[str, dict[str, float]] = {}
        for name, once in cases.items():
            samples = [asyncio.run(_timed(args.calls, once)) for _ in range(args.rounds)]
            results[name] = {
                "median_ms": statistics.median(samples),
                "min_ms": min(samples),
                "max_ms": max(samples),
            }
    finally:
        shutil.rmtree(root, ignore_errors=True)
    width = max(len(n) for n in results)
    print(f"{'case':<{width}}  {'median ms':>10}  {'spread ms':>16}")
    for name, r in results.items():
        spread = f"{r['min_ms']:.2f}..{r['max_ms']:.2f}"
        print(f"{name:<{width}}  {r['median_ms']:>10.2f}  {spread:>16}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n", "utf-8")


if __name__ == "__main__":
    main()

"""What a resume pays for the store it opens: the pause-and-resume workload of
``bench/compare.py`` (9 ``read`` turns, then a ``spend`` call that waits for approval),
``--runs`` runs paused in one SQLite file, each then approved and finished (``decide``
and ``resume``) alternately by a ``Runner`` on a store opened for it (as the peer table's
row does: a fresh connection, its schema read, every statement compiled once, no copy of
the run's messages' JSON from its save) and by one on a store kept open from the start.
A store stays open throughout, so the write-ahead log is never made anew: what differs
is the store object alone. Run it on a RAM disk (``--folder /dev/shm/...``) to leave the
flushes out.

Run: ``python bench/bench_resume.py [--runs N] [--folder DIR] [--json OUT]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))
from oarlock_bench import TOOL_TURNS, agent_for

from oarlock import Runner
from oarlock.store import SQLiteStore

PARTS = ("open", "decide", "resume", "total")


async def measure(folder: Path, runs: int) -> dict[str, dict[str, float]]:
    path = folder / "resume.db"
    agent = agent_for(TOOL_TURNS - 1, final_call="pay")
    kept = SQLiteStore(path)
    try:
        docs = [await Runner(agent, kept).start("go") for _ in range(2 * runs + 1)]
        if any(d.status != "waiting_approval" for d in docs):
            raise RuntimeError("a run did not pause as planned")
        on_kept = Runner(agent, kept)
        samples: dict[str, dict[str, list[float]]] = {
            case: {part: [] for part in PARTS} for case in ("opened", "kept")
        }
        for i, doc in enumerate(docs):
            opened = i % 2 == 1
            t0 = time.perf_counter()
            store = SQLiteStore(path) if opened else kept
            runner = Runner(agent, store) if opened else on_kept
            t1 = time.perf_counter()
            await runner.decide(doc.id, doc.pending_approvals[0].tool_call_id, "approved")
            t2 = time.perf_counter()
            done = await runner.resume(doc.id)
            t3 = time.perf_counter()
            if opened:
                await store.close()
            if done.status != "completed":
                raise RuntimeError(f"a resumed run ended {done.status}")
            if i == 0:
                continue  # the first, on the kept store, warms the process
            case = samples["opened" if opened else "kept"]
            for part, took in zip(PARTS, (t1 - t0, t2 - t1, t3 - t2, t3 - t0), strict=True):
                case[part].append(took)
    finally:
        await kept.close()
    return {
        case: {f"{part}_ms": statistics.median(v) * 1000 for part, v in parts.items()}
        for case, parts in samples.items()
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=60, help="resumes of each kind (default 60)")
    ap.add_argument("--folder", type=Path, help="where the file goes (default: a temp folder)")
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(dir=args.folder))
    try:
        result: dict[str, Any] = dict(asyncio.run(measure(folder, args.runs)))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    result["settings"] = {"runs": args.runs, "folder": str(args.folder or tempfile.gettempdir())}
    for case in ("opened", "kept"):
        row = "  ".join(f"{p} {result[case][f'{p}_ms']:.3f}" for p in PARTS)
        print(f"store {case:6}  {row}  (ms, medians of {args.runs})")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n", "utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

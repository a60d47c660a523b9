"""Where a turn on Temporal goes: the workload of ``bench_temporal.py`` (one ``read`` call
per turn, then the answer; model and tool return at once), run one at a time, each run's
time split two ways.

* From its workflow history (the server's clock): activities waiting to be picked up
  (scheduled to started), running (started to completed), and workflow tasks waiting
  (scheduled to started) and running in the worker (started to completed); the rest is
  time between a task's completion and the next one's scheduling on the server.
* Inside the activities (this process's clock): loading the run, taking the step (model or
  tool), committing it, and hashing the document for the snapshot.

``--unsandboxed`` runs the workflow outside the SDK's sandbox, to see what the sandbox
costs (an experiment only: oarlock's worker always runs it sandboxed).

Run: ``python bench/profile_temporal.py [--turns 10] [--runs 5] [--unsandboxed] [--json OUT]``."""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from bench_temporal import _temporal_binary, make_agent

from oarlock.engine import Runner
from oarlock.store import SQLiteStore
from oarlock.temporal import (
    RunOptions,
    TemporalTarget,
    _activities,
    make_worker,
    start_run,
)

Spent = dict[str, list[float]]


def _timed(spent: Spent, name: str, call: Callable[..., Any]) -> Callable[..., Any]:
    """``call``, adding each call's milliseconds to ``spent[name]``."""
    if asyncio.iscoroutinefunction(call):

        async def timed_async(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return await call(*args, **kwargs)
            finally:
                spent[name].append((time.perf_counter() - t0) * 1000)

        return timed_async

    def timed(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            spent[name].append((time.perf_counter() - t0) * 1000)

    return timed


def _history_split(history: Any) -> dict[str, float]:
    """Milliseconds of a run's history by phase, and counts of its tasks."""
    out: dict[str, float] = defaultdict(float)
    at: dict[int, float] = {}
    for event in history.events:
        t = event.event_time.ToDatetime().timestamp() * 1000
        at[event.event_id] = t
        kind = event.WhichOneof("attributes")
        if kind == "workflow_task_started_event_attributes":
            out["workflow task: queued"] += t - at[event.workflow_task_started_event_attributes
                                                   .scheduled_event_id]  # fmt: skip
        elif kind == "workflow_task_completed_event_attributes":
            out["workflow task: in the worker"] += (
                t - at[event.workflow_task_completed_event_attributes.started_event_id]
            )
            out["workflow tasks"] += 1
        elif kind == "activity_task_started_event_attributes":
            out["activity: queued"] += t - at[event.activity_task_started_event_attributes
                                              .scheduled_event_id]  # fmt: skip
        elif kind == "activity_task_completed_event_attributes":
            out["activity: running"] += (
                t - at[event.activity_task_completed_event_attributes.started_event_id]
            )
            out["activities"] += 1
    times = [at[i] for i in sorted(at)]
    out["total"] = times[-1] - times[0]
    return out


async def main(args: argparse.Namespace) -> None:
    from temporalio.testing import WorkflowEnvironment

    if args.unsandboxed:
        from temporalio.worker import UnsandboxedWorkflowRunner

        from oarlock.temporal import _client

        _client.workflow_runner = UnsandboxedWorkflowRunner  # type: ignore[assignment]
    agent = make_agent(args.turns)
    spent: Spent = defaultdict(list)
    folder = Path(tempfile.mkdtemp())
    async with SQLiteStore(folder / "profile.db", create=True) as store:
        store.load = _timed(spent, "in activity: store.load", store.load)  # type: ignore[method-assign]
        store.save = _timed(spent, "in activity: store.save", store.save)  # type: ignore[method-assign]
        hashed = _activities._document_hash
        _activities._document_hash = _timed(spent, "in activity: snapshot hash", hashed)
        Runner._step = _timed(spent, "in activity: model step", Runner._step)  # type: ignore[method-assign]
        Runner._executed = _timed(spent, "in activity: tool call", Runner._executed)  # type: ignore[method-assign]
        env = await WorkflowEnvironment.start_local(
            dev_server_existing_path=_temporal_binary(), ip="127.0.0.1",
            dev_server_log_level="error",
        )  # fmt: skip
        async with env:
            target = TemporalTarget(str(env.client.service_client.config.target_host), "profile")
            worker, activities = make_worker(env.client, store, "profile",
                                             agents={"bench": agent})  # fmt: skip
            async with worker:
                splits, per_turn = [], []
                for i in range(args.runs + 1):  # the first warms up
                    spent.clear()
                    t0 = time.perf_counter()
                    doc = await start_run(env.client, store, agent, "go", target,
                                          options=RunOptions())  # fmt: skip
                    handle = env.client.get_workflow_handle(doc.id)
                    done = await handle.result()
                    if i == 0:
                        continue
                    per_turn.append((time.perf_counter() - t0) * 1000 / done["turns"])
                    split = _history_split(await handle.fetch_history())
                    split.update({k: sum(v) for k, v in spent.items()})
                    split["turns"] = done["turns"]
                    splits.append(split)
            await activities.aclose()
    keys = sorted({k for s in splits for k in s} - {"turns"})
    out = {"turns": args.turns + 1, "runs": args.runs,
           "wall_ms": statistics.median(per_turn),
           "per_turn": {k: statistics.median(s.get(k, 0.0) / s["turns"] for s in splits)
                        for k in keys}}  # fmt: skip
    print(f"{args.runs} runs of {args.turns + 1} model turns; per turn, median of runs:")
    print(f"  wall clock (start_run to result): {out['wall_ms']:.1f} ms")
    for key, value in out["per_turn"].items():
        unit = "" if key in ("activities", "workflow tasks") else " ms"
        print(f"  {key}: {value:.2f}{unit}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--unsandboxed", action="store_true")
    parser.add_argument("--json", type=Path)
    asyncio.run(main(parser.parse_args()))

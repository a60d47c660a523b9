"""Record the Temporal histories that ``tests/unit/test_temporal_replay.py`` replays: one
run of each kind (approved, denied after an update refused, expired by the timer,
cancelled, failed because its agent cannot be loaded, continued as new), driven on the
dev server. A history already in the folder is kept: those recorded by earlier releases
of the workflow are what replay guards.

    python tests/integration/record_temporal_histories.py tests/unit/temporal_histories

Record them again only when a workflow change is meant to break replay (then it is no
change but a new workflow name); a change behind ``workflow.patched`` must replay them."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from temporal_env import address, agent_file, agent_folder, dev_server
from temporalio.client import Client, WorkflowUpdateFailedError

from oarlock.demo import AGENT_FILE as DEMO_FILE
from oarlock.engine._agentfile import load_agent
from oarlock.store import SQLiteStore
from oarlock.temporal import (
    RunOptions,
    TemporalTarget,
    cancel_run,
    decide_run,
    make_worker,
    settled,
    start_run,
)
from oarlock.temporal._types import DECIDE_UPDATE, Decision

DEMO = str(DEMO_FILE)
OPTIONS = RunOptions(heartbeat_seconds=2.0, model_seconds=30.0, tool_seconds=60.0,
                     store_seconds=30.0)  # fmt: skip


def _keep(out: Path, name: str, text: str) -> None:
    path = out / f"{name}.json"
    if not path.exists():
        path.write_text(text)


async def _save(client: Client, run_id: str, out: Path, name: str) -> None:
    handle = client.get_workflow_handle(run_id)
    await asyncio.wait_for(handle.result(), 60)
    history = await handle.fetch_history()
    _keep(out, name, history.to_json())


async def main(out: Path) -> None:
    tmp = Path(tempfile.mkdtemp())
    os.environ["EFFECTS"] = str(tmp / "effects.jsonl")
    folder = agent_folder(tmp)
    expiring = agent_file(
        folder, "expiring",
        [{"tool_calls": [{"name": "pay", "arguments": {"order": "E-1", "amount": 5}}]},
         {"text": "not refunded"}],
        "policy: expiring\napproval_ttl: 1\nrules: []\n",
    )  # fmt: skip
    async with await dev_server() as env, SQLiteStore(tmp / "t.db", create=True) as store:
        worker, activities = make_worker(env.client, store, "record")
        target = TemporalTarget(address(env), "record")
        async with worker:

            async def start(agent_path: str, text: str) -> str:
                doc = await start_run(env.client, store, load_agent(agent_path), text, target,
                                      agent_ref=agent_path, options=OPTIONS)  # fmt: skip
                await settled(env.client, doc.id)
                return doc.id

            run = await start(DEMO, "Refund order A-1001")
            waiting = (await store.load(run)).document
            await decide_run(env.client, waiting, "call_2_1", "approved", principal="user:ana")
            await _save(env.client, run, out, "approved")

            run = await start(DEMO, "Refund order A-1001")
            waiting = (await store.load(run)).document
            with contextlib.suppress(WorkflowUpdateFailedError):  # refused: nothing recorded
                await env.client.get_workflow_handle(run).execute_update(
                    DECIDE_UPDATE, Decision("call_2_1", "approved", "sha256:0")
                )
            await decide_run(env.client, waiting, "call_2_1", "denied", reason="too much")
            await _save(env.client, run, out, "denied")

            run = await start(str(expiring), "go")
            await _save(env.client, run, out, "expired")

            run = await start(DEMO, "Refund order A-1001")
            await cancel_run(env.client, run, "withdrawn")
            await _save(env.client, run, out, "cancelled")

            doc = await start_run(env.client, store, load_agent(DEMO), "go", target,
                                  agent_ref=str(tmp / "gone.yaml"), options=OPTIONS)  # fmt: skip
            await _save(env.client, doc.id, out, "failed")  # its agent cannot be loaded
        await activities.aclose()
        await _continued(store, out)


async def _continued(store: SQLiteStore, out: Path) -> None:
    """A run that continues as new (the server suggests it early): both its histories."""
    suggest = "limit.historyCount.suggestContinueAsNew=12"
    async with await dev_server(None, None, suggest) as env:
        worker, activities = make_worker(env.client, store, "record")
        async with worker:
            doc = await start_run(env.client, store, load_agent(DEMO), "Refund order A-1001",
                                  TemporalTarget(address(env), "record"), agent_ref=DEMO,
                                  options=OPTIONS)  # fmt: skip
            await settled(env.client, doc.id)
            waiting = (await store.load(doc.id)).document
            await decide_run(env.client, waiting, "call_2_1", "approved", principal="user:ana")
            await _save(env.client, doc.id, out, "continued-last")
            last = await env.client.get_workflow_handle(doc.id).fetch_history()
            first = last.events[0].workflow_execution_started_event_attributes
            earlier = env.client.get_workflow_handle(
                doc.id, run_id=first.continued_execution_run_id
            )
            _keep(out, "continued-first", (await earlier.fetch_history()).to_json())
        await activities.aclose()


if __name__ == "__main__":
    target_dir = Path(sys.argv[1])
    target_dir.mkdir(parents=True, exist_ok=True)
    asyncio.run(main(target_dir))

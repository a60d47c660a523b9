"""A run that Temporal drives, decided and cancelled through the HTTP API: the server sends
the decision update (or the cancel signal) to the run's workflow, as the command line does,
and the worker stores the decision through the same path; a stale If-Match sends nothing."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporal_env import TemporalWorkerProcess, address, dev_server, environment, oarlock

from oarlock import demo as demo_package
from oarlock.server import ServerSettings, create_app
from oarlock.store import SQLiteStore

pytestmark = pytest.mark.timeout(180)

DEMO = str(Path(demo_package.__file__).parent / "refund-desk.yaml")


async def _start(db: Path, env: dict[str, str], target: str, queue: str) -> tuple[str, str]:
    """A demo run on Temporal, waiting for the approval of its refund: (run, call)."""
    run = await asyncio.to_thread(
        oarlock, db, env, "run", DEMO, "Refund order A-1001", "--on", "temporal",
        "--address", target, "--task-queue", queue,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    async with SQLiteStore(db) as store:
        newest = (await store.list_runs())[0]
        doc = (await store.load(newest.id)).document
    assert doc.status == "waiting_approval"
    return doc.id, doc.pending_approvals[0].tool_call_id


async def _until(client: httpx.AsyncClient, auth: dict[str, str], run_id: str, *to: str) -> Any:
    deadline = time.monotonic() + 60
    while True:
        doc = (await client.get(f"/v1/runs/{run_id}", headers=auth)).json()
        if doc.get("status") in to:
            return doc
        assert time.monotonic() < deadline, f"run {run_id} stayed {doc.get('status')}"
        await asyncio.sleep(0.1)


def test_a_run_on_temporal_decided_and_cancelled_through_the_http_api(tmp_path: Path) -> None:
    env_vars = environment(tmp_path)
    db = tmp_path / "runs.db"
    agents = tmp_path / "served"
    agents.mkdir()

    async def main() -> None:
        async with await dev_server() as env:
            target = address(env)
            worker = TemporalWorkerProcess(db, env_vars, target, "http")
            try:
                run_id, call = await _start(db, env_vars, target, "http")
                other, _ = await _start(db, env_vars, target, "http")
                app = create_app(db, agents, ServerSettings(worker=False))
                async with app.router.lifespan_context(app):
                    token, _ = await app.state.tokens.create(
                        name="ana", tenant="demo", role="admin"
                    )
                    auth = {"Authorization": f"Bearer {token}"}
                    transport = httpx.ASGITransport(app=app)
                    async with httpx.AsyncClient(
                        transport=transport, base_url="http://oarlock.test"
                    ) as client:
                        path = f"/v1/approvals/{run_id}/{call}"
                        version = (await client.get(path, headers=auth)).json()["version"]
                        stale = await client.post(
                            f"{path}/decision",
                            headers={**auth, "If-Match": '"stale"'},
                            json={"decision": "approved"},
                        )
                        assert stale.status_code == 409, stale.text
                        decided = await client.post(
                            f"{path}/decision",
                            headers={**auth, "If-Match": version},
                            json={"decision": "approved"},
                        )
                        assert decided.status_code == 200, decided.text
                        done = await _until(client, auth, run_id, "completed", "failed")
                        assert done["status"] == "completed", done.get("error")
                        cancelled = await client.post(
                            f"/v1/runs/{other}/cancel", headers=auth, json={}
                        )
                        assert cancelled.status_code == 200, cancelled.text
                        await _until(client, auth, other, "cancelled")
                await app.state.store.close()
            finally:
                assert worker.stop() == 0, worker.lines
        async with SQLiteStore(db) as store:
            doc = (await store.load(run_id)).document
            receipts = await store.governance().receipts(run_id=run_id)
        [decision] = doc.decisions
        assert (decision.decision, decision.principal) == ("approved", "ana")
        assert sorted(r.receipt["status"] for r in receipts) == ["Succeeded"] * 3

    asyncio.run(main())

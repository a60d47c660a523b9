"""Runs without the embedded worker (``--no-worker``): a new run waits for a worker;
``resume`` drives it in the server's process (202), a second resume while it is held or
once it is not running is refused (409); ``cancel`` ends a waiting run, once."""

from __future__ import annotations

from pathlib import Path

from oarlock.server import ServerSettings
from server_kit import Kit, run


def test_resume_and_cancel_without_a_worker(tmp_path: Path) -> None:
    async def body(kit: Kit) -> None:
        run_id = await kit.start("operator")
        doc = (await kit.get(f"/v1/runs/{run_id}")).json()
        assert doc["status"] == "running" and doc["turns"] == 0  # nobody drives it
        r = await kit.post(f"/v1/runs/{run_id}/resume", "operator")
        assert r.status_code == 202, r.text
        doc = await kit.until(run_id, "waiting_approval")
        assert doc["turns"] == 2
        r = await kit.post(f"/v1/runs/{run_id}/resume", "operator")
        assert r.status_code == 409 and r.json()["error"]["code"] == "run_state"
        r = await kit.post(f"/v1/runs/{run_id}/cancel", "operator", json={"reason": "wrong order"})
        assert r.status_code == 200 and r.json()["status"] == "cancelled"
        doc = (await kit.get(f"/v1/runs/{run_id}")).json()
        assert doc["status"] == "cancelled" and doc["error"] == "wrong order"
        r = await kit.post(f"/v1/runs/{run_id}/cancel", "operator")
        assert r.status_code == 409 and r.json()["error"]["code"] == "run_finished"
        events = (await kit.get(f"/v1/runs/{run_id}/events?after=2")).json()
        assert events[0]["seq"] == 3 and events[-1]["kind"] == "status_changed"

    run(tmp_path, body, settings=ServerSettings(worker=False, watch_interval=0.1))

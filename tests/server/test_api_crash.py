"""SIGKILL of the server between a decision's commit and its response: on restart, the
decision stands, exactly once (in the run, and as one approval in the ledger), a second
decision is refused, and the embedded worker carries the run on to its end. The server
signs approvals with a key the agents trust (``--key``), so that the approval outlives
the process that made it."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from helpers import write_approver
from server_kit import serve_process

KILLER = Path(__file__).with_name("serve_killed.py")


def test_decision_survives_a_kill_before_its_response(tmp_path: Path) -> None:
    key = write_approver(tmp_path / "keys", principal="ana")
    env = {"OARLOCK_APPROVERS": str(tmp_path / "keys" / "approvers.yaml")}
    with serve_process(tmp_path, "--key", str(key), program=KILLER, env=env) as served:
        token = served.token("admin", "ana")
        auth = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=served.url, headers=auth, timeout=30) as c:
            run_id = c.post("/v1/runs", json={"agent": "refund-desk", "input": "Refund"}).json()[
                "id"
            ]
            deadline = time.monotonic() + 20
            while (doc := c.get(f"/v1/runs/{run_id}").json())["status"] != "waiting_approval":
                assert time.monotonic() < deadline
                time.sleep(0.05)
            call_id = doc["pendingApprovals"][0]["toolCallId"]
            version = c.get(f"/v1/approvals/{run_id}/{call_id}").json()["version"]
            with pytest.raises(httpx.TransportError):  # no response: the server died
                c.post(
                    f"/v1/approvals/{run_id}/{call_id}/decision",
                    headers={"If-Match": version},
                    json={"decision": "approved"},
                )
        assert served.process.wait(timeout=20) == -9
    with serve_process(tmp_path, "--key", str(key), env=env) as served:
        auth = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=served.url, headers=auth, timeout=30) as c:
            deadline = time.monotonic() + 30
            while (doc := c.get(f"/v1/runs/{run_id}").json())["status"] != "completed":
                assert time.monotonic() < deadline, doc["status"]
                time.sleep(0.1)
            [decided] = doc["decisions"]
            assert decided["decision"] == "approved" and decided["principal"] == "ana"
            r = c.post(
                f"/v1/approvals/{run_id}/{call_id}/decision",
                headers={"If-Match": version},
                json={"decision": "approved"},
            )
            assert r.status_code == 409 and r.json()["error"]["code"] == "already_decided"
            rows = c.get(f"/v1/receipts?run={run_id}").json()
            refunds = [x for x in rows if x["tool"] == "issue_refund"]
            assert [x["status"] for x in refunds] == ["Succeeded"]
            verify = c.get("/v1/audit/verify").json()
            assert verify["ok"] is True
    from oarlock.governance._ledger import DEFAULT_CHAIN
    from oarlock.store import SQLiteStore

    store = SQLiteStore(tmp_path / "runs.db", create=False)
    try:
        import asyncio

        entries = asyncio.run(store.governance().ledger(DEFAULT_CHAIN))
        approvals = [e for e in entries if e.kind == "approval"]
        assert len(approvals) == 1
    finally:
        store.close_now()

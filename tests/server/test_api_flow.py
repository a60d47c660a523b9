"""The API's main path: start a run, see its approval, approve it (with an edit), watch
the embedded worker finish the run; the decision recorded under the token's name."""

from __future__ import annotations

from pathlib import Path

from server_kit import Kit, run


def test_approve_flow(tmp_path: Path) -> None:
    async def body(kit: Kit) -> None:
        run_id, call_id = await kit.waiting()
        r = await kit.get("/v1/approvals", "viewer")
        assert r.status_code == 200
        [item] = r.json()["approvals"]
        assert item["runId"] == run_id and item["tool"] == "issue_refund"
        assert item["sideEffect"] == "spend"
        assert item["policy"] == {
            "ruleId": "refunds-need-a-human",
            "reasons": ["Every refund needs a human"],
            "fourEyes": False,
        }
        r = await kit.get(f"/v1/approvals/{run_id}/{call_id}", "viewer")
        assert r.headers["etag"] == f'"{item["version"]}"'
        r = await kit.post(
            f"/v1/approvals/{run_id}/{call_id}/decision",
            "approver",
            headers={"If-Match": r.headers["etag"]},
            json={
                "decision": "approved",
                "editedArguments": {
                    "order_id": "A-1001",
                    "amount": 40.0,
                    "reason": "arrived broken",
                },
            },
        )
        assert r.status_code == 200, r.text
        assert r.json()["decidedBy"] == "approver-ana"
        doc = await kit.until(run_id, "completed")
        [decided] = doc["decisions"]
        assert decided["principal"] == "approver-ana"
        assert decided["editedArguments"]["amount"] == 40.0
        r = await kit.get(f"/v1/receipts?run={run_id}")
        rows = r.json()
        refund = next(x for x in rows if x["tool"] == "issue_refund")
        assert refund["status"] == "Succeeded"
        r = await kit.get(f"/v1/receipts/{refund['invocationId']}")
        assert r.json()["invocation"]["arguments"]["amount"] == 40.0
        r = await kit.get(f"/v1/receipts/{refund['invocationId']}/result", "viewer")
        assert r.status_code == 200 and r.headers["content-type"] == "application/json"
        assert r.json()["amount"] == 40.0
        r = await kit.get("/v1/audit/verify")
        assert r.status_code == 200 and r.json()["ok"] is True
        assert r.json()["entries"] > 0

    run(tmp_path, body)

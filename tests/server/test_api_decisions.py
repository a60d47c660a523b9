"""Decisions over HTTP: bound to the approval's version (If-Match), exactly one of racing
decisions wins, edits refused by the tool's schema and by the policy, a denial needs a
reason, an expired approval is 410; the decision stands in the run and in the ledger under
the token's name."""

from __future__ import annotations

import asyncio
from pathlib import Path

from server_kit import Kit, run


async def _decide(kit: Kit, run_id: str, call_id: str, version: str | None, **body: object):
    headers = {} if version is None else {"If-Match": f'"{version}"'}
    return await kit.post(
        f"/v1/approvals/{run_id}/{call_id}/decision", "approver", headers=headers, json=body
    )


def test_if_match_is_required_and_checked(tmp_path: Path) -> None:
    async def body(kit: Kit) -> None:
        run_id, call_id = await kit.waiting()
        r = await _decide(kit, run_id, call_id, None, decision="approved")
        assert r.status_code == 428 and r.json()["error"]["code"] == "if_match_required"
        r = await _decide(kit, run_id, call_id, None, decision="maybe")  # the header first
        assert r.status_code == 428 and r.json()["error"]["code"] == "if_match_required"
        spec = (await kit.client.get("/openapi.json")).json()
        decision = spec["paths"]["/v1/approvals/{run_id}/{call_id}/decision"]["post"]
        (if_match,) = [p for p in decision["parameters"] if p["name"] == "If-Match"]
        assert if_match["in"] == "header" and if_match["required"] is True
        r = await _decide(kit, run_id, call_id, "0" * 32, decision="approved")
        assert r.status_code == 409 and r.json()["error"]["code"] == "approval_changed"
        r = await _decide(kit, run_id, "no-such-call", "0" * 32, decision="approved")
        assert r.status_code == 404 and r.json()["error"]["code"] == "unknown_call"
        doc = (await kit.get(f"/v1/runs/{run_id}")).json()
        assert doc["status"] == "waiting_approval" and not doc.get("decisions")

    run(tmp_path, body)


def test_racing_decisions_one_wins(tmp_path: Path) -> None:
    async def body(kit: Kit) -> None:
        for choices in (["approved"] * 6, ["approved", "denied"] * 3, ["denied"] * 6):
            run_id, call_id = await kit.waiting()
            version = await kit.version(run_id, call_id)
            replies = await asyncio.gather(
                *(
                    _decide(kit, run_id, call_id, version, decision=c, reason="no")
                    if c == "denied"
                    else _decide(kit, run_id, call_id, version, decision=c)
                    for c in choices
                )
            )
            codes = sorted(r.status_code for r in replies)
            assert codes == [200] + [409] * (len(choices) - 1), [r.text for r in replies]
            assert {r.json()["error"]["code"] for r in replies if r.status_code == 409} <= {
                "already_decided",
                "approval_changed",
                "run_not_waiting",
            }
            [won] = [r.json() for r in replies if r.status_code == 200]
            doc = await kit.until(run_id, "completed")
            [decided] = doc["decisions"]
            assert decided["decision"] == won["decision"]
            assert decided["principal"] == "approver-ana"
            if won["decision"] == "approved":
                approval, _ = await kit.app.state.store.governance().approval_for(run_id, call_id)
                assert approval.principal == "approver-ana"

    run(tmp_path, body)


def test_edits_refused_by_schema_and_policy(tmp_path: Path) -> None:
    async def body(kit: Kit) -> None:
        run_id, call_id = await kit.waiting()
        version = await kit.version(run_id, call_id)
        good = {"order_id": "A-1001", "amount": 30.0, "reason": "broken"}
        for edit, code in (
            ({**good, "amount": "lots"}, "invalid_edit"),
            ({"order_id": "A-1001"}, "invalid_edit"),
            ({**good, "surprise": 1}, "invalid_edit"),
            ({**good, "amount": 500.0}, "edit_denied"),
        ):
            r = await _decide(
                kit, run_id, call_id, version, decision="approved", editedArguments=edit
            )
            assert r.status_code == 422, (edit, r.text)
            assert r.json()["error"]["code"] == code, (edit, r.text)
        r = await _decide(
            kit, run_id, call_id, version, decision="denied", editedArguments=good, reason="x"
        )
        assert r.json()["error"]["code"] == "edit_needs_approval"
        doc = (await kit.get(f"/v1/runs/{run_id}")).json()
        assert not doc.get("decisions") and doc["status"] == "waiting_approval"
        r = await _decide(kit, run_id, call_id, version, decision="approved", editedArguments=good)
        assert r.status_code == 200, r.text
        doc = await kit.until(run_id, "completed")
        assert doc["decisions"][0]["editedArguments"] == good

    run(tmp_path, body)


def test_deny_needs_a_reason_and_respond_needs_the_tool(tmp_path: Path) -> None:
    async def body(kit: Kit) -> None:
        run_id, call_id = await kit.waiting()
        version = await kit.version(run_id, call_id)
        for reason in (None, "", "   "):
            r = await _decide(kit, run_id, call_id, version, decision="denied", reason=reason)
            assert r.status_code == 422 and r.json()["error"]["code"] == "reason_required"
        r = await _decide(kit, run_id, call_id, version, decision="responded", response="done")
        assert r.status_code == 422 and r.json()["error"]["code"] == "response_not_allowed"
        r = await _decide(kit, run_id, call_id, version, decision="maybe")
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request"
        r = await _decide(
            kit, run_id, call_id, version, decision="denied", reason="not \u202e\x1b[2Jour customer"
        )
        assert r.status_code == 200, r.text
        doc = await kit.until(run_id, "completed")
        assert doc["decisions"][0]["reason"] == "not \u202e\x1b[2Jour customer"
        raw = (await kit.get(f"/v1/runs/{run_id}")).text
        assert "\u202e" not in raw and "\x1b" not in raw and "\\u202e" in raw

    run(tmp_path, body)


def test_expired_approval_is_gone(tmp_path: Path) -> None:
    async def body(kit: Kit) -> None:
        run_id, call_id = await kit.waiting()
        version = await kit.version(run_id, call_id)
        await asyncio.sleep(1.2)
        r = await _decide(kit, run_id, call_id, version, decision="approved")
        assert r.status_code == 410, r.text
        assert r.json()["error"]["code"] == "approval_expired"
        doc = await kit.until(run_id, "completed")
        [decided] = doc["decisions"]
        assert decided["decision"] == "denied" and decided["decidedBy"] == "policy"

    run(tmp_path, body, ttl=1)


def test_four_eyes_rule(tmp_path: Path) -> None:
    async def body(kit: Kit) -> None:
        run_id, call_id = await kit.waiting("admin")
        version = await kit.version(run_id, call_id)
        item = (await kit.get(f"/v1/approvals/{run_id}/{call_id}")).json()
        assert item["policy"]["fourEyes"] is True
        r = await kit.post(
            f"/v1/approvals/{run_id}/{call_id}/decision",
            "admin",
            headers={"If-Match": version},
            json={"decision": "approved"},
        )
        assert r.status_code == 403 and r.json()["error"]["code"] == "four_eyes"
        assert not (await kit.get(f"/v1/runs/{run_id}")).json().get("decisions")
        r = await _decide(kit, run_id, call_id, version, decision="approved")
        assert r.status_code == 200, r.text
        doc = await kit.until(run_id, "completed")
        assert doc["decisions"][0]["principal"] == "approver-ana"

    run(tmp_path, body, four_eyes=True)


def test_racing_clients_of_a_running_server(tmp_path: Path) -> None:
    """Eight clients, each on its own connection and thread, decide one approval of a
    running ``oarlock serve`` at once: exactly one 2xx."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    from server_kit import serve_process

    with serve_process(tmp_path) as served:
        tokens = [served.token("approver", f"ana-{i}") for i in range(8)]
        auth = {"Authorization": f"Bearer {tokens[0]}"}
        r = httpx.post(
            f"{served.url}/v1/runs", headers=auth, json={"agent": "refund-desk", "input": "x"}
        )
        assert r.status_code == 403  # an approver starts nothing
        starter = {"Authorization": f"Bearer {served.token('operator', 'ops')}"}
        run_id = httpx.post(
            f"{served.url}/v1/runs", headers=starter, json={"agent": "refund-desk", "input": "x"}
        ).json()["id"]
        deadline = time.monotonic() + 20
        while not (
            found := httpx.get(f"{served.url}/v1/approvals", headers=auth).json()["approvals"]
        ):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        [item] = found

        def decide(token: str) -> int:
            with httpx.Client(base_url=served.url, timeout=30) as c:
                return c.post(
                    f"/v1/approvals/{run_id}/{item['toolCallId']}/decision",
                    headers={"Authorization": f"Bearer {token}", "If-Match": item["version"]},
                    json={"decision": "approved"},
                ).status_code

        with ThreadPoolExecutor(max_workers=8) as pool:
            codes = sorted(pool.map(decide, tokens))
        assert codes == [200] + [409] * 7, codes
        doc = httpx.get(f"{served.url}/v1/runs/{run_id}", headers=auth).json()
        assert len(doc["decisions"]) == 1

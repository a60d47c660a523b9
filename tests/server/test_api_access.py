"""Every endpoint by every role, and the tenant boundary: a role without the permission gets
403 and changes nothing; no token (or a dead one) gets 401; a token of another tenant gets
404 for every run, approval, receipt and artifact of this one, and sees none of them in
any list."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from oarlock.server._tokens import PERMISSIONS
from server_kit import ROLES, Kit, run


async def _objects(kit: Kit) -> dict[str, str]:
    """A completed run (with receipts and a stored result) and a waiting run."""
    done, call = await kit.waiting()
    version = await kit.version(done, call)
    r = await kit.post(
        f"/v1/approvals/{done}/{call}/decision",
        "approver",
        headers={"If-Match": version},
        json={"decision": "approved"},
    )
    assert r.status_code == 200, r.text
    await kit.until(done, "completed")
    rows = (await kit.get(f"/v1/receipts?run={done}")).json()
    inv = next(x["invocationId"] for x in rows if x["tool"] == "issue_refund")
    waiting, wcall = await kit.waiting()
    return {"done": done, "inv": inv, "w": waiting, "c": wcall}


def _endpoints(o: dict[str, str]) -> list[tuple[str, str, str, dict[str, Any] | None]]:
    """(method, path, permission, JSON body) of every endpoint."""
    w, c, d, inv = o["w"], o["c"], o["done"], o["inv"]
    return [
        ("GET", "/v1/me", "read", None),
        ("GET", "/v1/agents", "read", None),
        ("GET", "/v1/agents/refund-desk", "read", None),
        ("GET", "/v1/runs", "read", None),
        ("GET", f"/v1/runs/{w}", "read", None),
        ("GET", f"/v1/runs/{w}/events", "read", None),
        ("GET", "/v1/approvals", "read", None),
        ("GET", f"/v1/approvals/{w}/{c}", "read", None),
        ("GET", "/v1/receipts", "read", None),
        ("GET", f"/v1/receipts?run={d}", "read", None),
        ("GET", f"/v1/receipts/{inv}", "read", None),
        ("GET", f"/v1/receipts/{inv}/result", "read", None),
        ("POST", "/v1/runs", "operate", {"agent": "refund-desk", "input": "Refund A-1001"}),
        ("POST", f"/v1/runs/{d}/cancel", "operate", {}),
        ("POST", f"/v1/runs/{w}/resume", "operate", None),
        ("POST", f"/v1/approvals/{w}/{c}/decision", "decide", {"decision": "approved"}),
        (
            "POST",
            f"/v1/receipts/{inv}/reconcile",
            "admin",
            {"outcome": "succeeded", "evidence": "seen in the bank's statement"},
        ),
        ("GET", "/v1/audit/verify", "admin", None),
    ]


# what a role with the permission gets (the writes are refused as the objects stand, so
# that the walk changes nothing): the run is done, the waiting run is not running, the
# If-Match is stale, the receipt is not Uncertain
_ALLOWED = {
    "POST /v1/runs": 201,
    "POST /v1/runs/{done}/cancel": 409,
    "POST /v1/runs/{w}/resume": 409,
    "POST /v1/approvals/{w}/{c}/decision": 409,
    "POST /v1/receipts/{inv}/reconcile": 409,
}


def _key(method: str, path: str, o: dict[str, str]) -> str:
    for name, value in o.items():
        path = path.replace(value, "{" + name + "}")
    return f"{method} {path}"


async def _call(kit: Kit, method: str, path: str, who: str | None, body: Any) -> Any:
    headers = {"If-Match": '"stale"'} if path.endswith("/decision") else {}
    if who is not None:
        headers |= kit.auth(who) if who in kit.tokens else {"Authorization": who}
    return await kit.client.request(method, path, headers=headers, json=body)


def test_every_endpoint_by_role(tmp_path: Path) -> None:
    async def body(kit: Kit) -> None:
        o = await _objects(kit)
        for method, path, permission, data in _endpoints(o):
            for role in ROLES:
                r = await _call(kit, method, path, role, data)
                key = _key(method, path, o)
                if permission not in PERMISSIONS[role]:
                    assert r.status_code == 403, (key, role, r.text)
                    assert r.json()["error"]["code"] == "forbidden"
                else:
                    assert r.status_code == _ALLOWED.get(key, 200), (key, role, r.text)
        doc = (await kit.get(f"/v1/runs/{o['w']}")).json()
        assert doc["status"] == "waiting_approval"  # nothing above decided it
        assert "decision" not in doc["pendingApprovals"][0]

    run(tmp_path, body)


def test_every_endpoint_needs_a_live_token(tmp_path: Path) -> None:
    async def body(kit: Kit) -> None:
        o = await _objects(kit)
        _, info = await kit.app.state.tokens.create(name="gone", tenant="demo", role="admin")
        revoked, info = await kit.app.state.tokens.create(name="x", tenant="demo", role="admin")
        await kit.app.state.tokens.revoke(info.id)
        for method, path, _, data in _endpoints(o):
            for who in (
                None,
                "Bearer nope",
                "Basic abc",
                f"Bearer {revoked}",
                "Bearer oat_" + "A" * 43,
            ):
                r = await _call(kit, method, path, who, data)
                assert r.status_code == 401, (method, path, who, r.text)
                assert r.json()["error"]["code"] == "unauthenticated"
                assert r.headers["www-authenticate"].startswith("Bearer")

    run(tmp_path, body)


def test_another_tenant_sees_nothing(tmp_path: Path) -> None:
    async def body(kit: Kit) -> None:
        o = await _objects(kit)
        theirs = set(o.values())
        for method, path, _, data in _endpoints(o):
            r = await _call(kit, method, path, "other", data)
            key = _key(method, path, o)
            if "{" in key and "?run=" not in key:  # names one of this tenant's objects
                assert r.status_code == 404, (key, r.text)
                assert r.json()["error"]["code"] in ("not_found", "unknown_call"), r.text
            elif "?run=" in key:
                assert r.status_code == 404, (key, r.text)
            else:
                assert r.status_code in (200, 201), (key, r.text)
                assert not theirs & set(str(r.json()).split("'")), (key, r.text)
        me = (await kit.get("/v1/me", "other")).json()
        assert me == {"name": "mallory", "tenant": "acme", "role": "admin"}
        [agent] = (await kit.get("/v1/agents", "other")).json()
        assert agent["file"] == "acme-desk.yaml"
        runs = (await kit.get("/v1/runs", "other")).json()["runs"]
        assert [r["agent"] for r in runs] == ["refund-desk"]  # its own, started above
        assert not {r["id"] for r in runs} & theirs
        doc = (await kit.get(f"/v1/runs/{o['w']}")).json()
        assert doc["status"] == "waiting_approval"

    run(tmp_path, body)


def test_an_expired_token_is_refused(tmp_path: Path) -> None:
    async def body(kit: Kit) -> None:
        import asyncio

        token, _ = await kit.app.state.tokens.create(
            name="brief", tenant="demo", role="viewer", expires_in=0.5
        )
        auth = {"Authorization": f"Bearer {token}"}
        assert (await kit.client.get("/v1/me", headers=auth)).status_code == 200
        await asyncio.sleep(0.6)
        r = await kit.client.get("/v1/me", headers=auth)
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthenticated"

    run(tmp_path, body)

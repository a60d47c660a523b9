"""The server's details, each as an attacker tried it: a ``Last-Event-ID`` that
``str.isdigit`` takes and ``int`` refuses; ``/docs`` and ``/redoc`` (no login, no CSP,
scripts from a CDN); htmx, loaded by every page and used by none; form posts from another
origin; the 401 message the redactor ate; API JSON without ``Cache-Control: no-store``;
JSON nested deep or with a number of 5,000 digits; and, on SQLite's one ledger chain, a
tenant's audit that moved with another tenant's calls."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx

from server_kit import Kit, run


async def _signed_in(kit: Kit, role: str, **headers: str) -> httpx.AsyncClient:
    c = httpx.AsyncClient(transport=kit.client._transport, base_url="http://oarlock.test")
    page = await c.get("/login")
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert csrf
    r = await c.post(
        "/login", data={"token": kit.tokens[role], "csrf": csrf.group(1)}, headers=headers
    )
    assert r.status_code == 303, r.text
    return c


def test_last_event_id_is_read_strictly(tmp_path: Path) -> None:
    async def body(kit: Kit) -> None:
        run_id, _ = await kit.waiting()
        boot = kit.app.state.hub.boot
        for path, bad in (
            (f"/v1/runs/{run_id}/stream", "\u00b2"),  # isdigit() says yes, int() says no
            (f"/v1/runs/{run_id}/stream", "1\u00b2"),
            (f"/v1/runs/{run_id}/stream", "-1"),
            (f"/v1/runs/{run_id}/stream", "9" * 17),
            ("/v1/approvals/stream", f"{boot}-\u00b2"),
            ("/v1/approvals/stream", "\u00b2"),
            ("/v1/approvals/stream", f"{boot}-1-2"),
        ):
            headers = {**kit.auth("viewer"), "Last-Event-ID": bad.encode("latin-1")}
            r = await kit.client.get(path, headers=headers)  # type: ignore[arg-type]
            assert r.status_code == 400, (path, bad, r.text)
            error = r.json()["error"]
            assert error["code"] == "invalid_last_event_id", (path, bad)
            assert "Last-Event-ID" in error["message"] and "Traceback" not in r.text

    run(tmp_path, body)


def test_no_docs_pages_and_no_htmx(tmp_path: Path) -> None:
    async def body(kit: Kit) -> None:
        for path in ("/docs", "/redoc", "/docs/oauth2-redirect"):
            r = await kit.client.get(path)
            assert r.status_code == 404, path
            assert "cdn" not in r.text.lower() and "<script" not in r.text
        assert (await kit.client.get("/openapi.json")).status_code == 200
        r = await kit.client.get("/static/htmx-2.0.11.min.js")
        assert r.status_code == 404
        run_id, call_id = await kit.waiting()
        c = await _signed_in(kit, "approver")
        for path in ("/login", "/", f"/approvals/{run_id}/{call_id}", f"/runs/{run_id}"):
            page = await c.get(path)
            scripts = re.findall(r"<script[^>]*>", page.text)
            assert scripts == ['<script src="/static/inbox.js" defer>'], (path, scripts)
            assert "htmx" not in page.text and "<style" not in page.text
            assert "style-src 'self'" in page.headers["content-security-policy"]
        await c.aclose()

    run(tmp_path, body)


def test_form_posts_from_another_origin_are_refused(tmp_path: Path) -> None:
    async def body(kit: Kit) -> None:
        run_id, call_id = await kit.waiting()
        own = "http://oarlock.test"
        c = await _signed_in(kit, "approver", Origin=own, **{"Sec-Fetch-Site": "same-origin"})
        page = (await c.get(f"/approvals/{run_id}/{call_id}")).text
        csrf = re.search(r'name="csrf" value="([^"]+)"', page)
        version = re.search(r'name="version" value="([^"]+)"', page)
        assert csrf and version
        form = {"csrf": csrf.group(1), "version": version.group(1), "decision": "denied",
                "reason": "cross-site"}  # fmt: skip
        for headers in (
            {"Origin": "http://evil.test"},
            {"Origin": "null"},
            {"Origin": "https://oarlock.test"},  # another scheme is another origin
            {"Sec-Fetch-Site": "cross-site"},
            {"Sec-Fetch-Site": "same-site"},  # a sibling host
            {"Origin": own, "Sec-Fetch-Site": "cross-site"},
        ):
            for path, data in (
                (f"/approvals/{run_id}/{call_id}", form),
                ("/logout", {"csrf": csrf.group(1)}),
                ("/login", {"token": kit.tokens["admin"], "csrf": "x"}),
            ):
                r = await c.post(path, data=data, headers=headers)
                assert r.status_code == 403, (headers, path, r.text)
                assert r.json()["error"]["code"] == "cross_origin", (headers, path)
        doc = (await kit.get(f"/v1/runs/{run_id}")).json()
        assert doc["status"] == "waiting_approval" and not doc.get("decisions")
        assert (await c.get("/")).status_code == 200  # still signed in: the logout was refused
        r = await c.post(
            f"/approvals/{run_id}/{call_id}",
            data=form,
            headers={"Origin": own, "Sec-Fetch-Site": "same-origin"},
        )
        assert r.status_code == 303, r.text
        await c.aclose()

    run(tmp_path, body)


def test_the_401_message_is_whole(tmp_path: Path) -> None:
    async def body(kit: Kit) -> None:
        for headers in ({}, {"Authorization": "Bearer oat_" + "x" * 43}):
            r = await kit.client.get("/v1/me", headers=headers)
            assert r.status_code == 401
            message = r.json()["error"]["message"]
            assert "[redacted]" not in message, message
            assert "Authorization header" in message and "Bearer <token>" in message

    run(tmp_path, body)


def test_api_responses_are_never_cached(tmp_path: Path) -> None:
    async def body(kit: Kit) -> None:
        run_id, call_id = await kit.waiting()
        version = await kit.version(run_id, call_id)
        r = await kit.post(
            f"/v1/approvals/{run_id}/{call_id}/decision",
            "approver",
            headers={"If-Match": version},
            json={"decision": "approved"},
        )
        assert r.status_code == 200
        await kit.until(run_id, "completed")
        receipts = (await kit.get(f"/v1/receipts?run={run_id}")).json()
        invocation = receipts[0]["invocationId"]
        responses = [r]
        for path in ("/v1/me", "/v1/runs", f"/v1/runs/{run_id}", "/v1/approvals",
                     f"/v1/approvals/{run_id}/{call_id}", f"/v1/receipts/{invocation}",
                     f"/v1/receipts/{invocation}/result", "/v1/audit/verify", "/v1/agents",
                     "/v1/runs/nope"):  # fmt: skip
            responses.append(await kit.get(path))
        responses.append(await kit.client.get("/v1/me"))  # 401
        responses.append(await kit.client.get("/openapi.json"))
        for r in responses:
            assert r.headers.get("cache-control") == "no-store", (r.url, r.headers)
            assert r.headers.get("x-content-type-options") == "nosniff", r.url
            assert "content-security-policy" in r.headers, r.url
        assert [r.status_code for r in responses[-3:]] == [404, 401, 200]
        static = await kit.client.get("/static/oarlock.css")
        assert static.status_code == 200 and static.headers.get("cache-control") != "no-store"

    run(tmp_path, body)


def test_hostile_json_is_invalid_json(tmp_path: Path) -> None:
    async def body(kit: Kit) -> None:
        run_id, call_id = await kit.waiting()
        version = await kit.version(run_id, call_id)
        deep = b"[" * 100_000 + b"]" * 100_000
        just_too_deep = json.dumps({"agent": "refund-desk", "input": "x",
                                    "tags": {"k": "v"}}).encode()[:-1] + b', "x": ' + (
            b"[" * 130 + b"]" * 130) + b"}"  # fmt: skip
        digits = ("9" * 5000).encode()
        for path, raw, said in (
            ("/v1/runs", deep, "nested deeper than"),
            ("/v1/runs", just_too_deep, "nested deeper than"),
            ("/v1/runs", b'{"agent": "refund-desk", "input": "x", "n": ' + digits + b"}",
             "5000 digits"),
            ("/v1/runs", b'{"agent": "refund-desk", "agent": "acme-desk", "input": "x"}',
             "duplicate key"),
            ("/v1/runs", b'{"agent": "refund-desk", "input": "x", "n": NaN}', "NaN"),
            (f"/v1/approvals/{run_id}/{call_id}/decision",
             b'{"decision": "approved", "editedArguments": {"amount": ' + digits + b"}}",
             "5000 digits"),
        ):  # fmt: skip
            r = await kit.post(
                path,
                "admin",
                content=raw,
                headers={"Content-Type": "application/json", "If-Match": version},
            )
            assert r.status_code == 400, (path, r.text[:300])
            error = r.json()["error"]
            assert error["code"] == "invalid_json", (path, error)
            assert said in error["message"], (said, error)
        assert (await kit.get("/v1/runs")).json()["runs"][0]["id"] == run_id  # none started
        doc = (await kit.get(f"/v1/runs/{run_id}")).json()
        assert doc["status"] == "waiting_approval"

    run(tmp_path, body)


async def _finish(kit: Kit, who: str, agent: str) -> None:
    run_id, call_id = await kit.waiting(who, agent)
    version = await kit.version(run_id, call_id, who)
    r = await kit.post(
        f"/v1/approvals/{run_id}/{call_id}/decision",
        who,
        headers={"If-Match": version},
        json={"decision": "approved"},
    )
    assert r.status_code == 200, r.text
    await kit.until(run_id, "completed", who=who)


def test_audit_of_a_shared_chain_tells_the_tenant_its_own(tmp_path: Path) -> None:
    async def body(kit: Kit) -> None:
        await _finish(kit, "admin", "refund-desk")  # tenant demo
        demo: dict[str, Any] = (await kit.get("/v1/audit/verify", "admin")).json()
        assert demo["ok"] is True and demo["shared"] is True and demo["chain"] == "default"
        assert demo["headSeq"] is None and demo["headHash"] is None
        assert demo["latestCheckpoint"] is None
        mine = demo["entries"]
        assert mine > 0
        for _ in range(2):
            await _finish(kit, "other", "refund-desk")  # tenant acme's agent of that name
        assert (await kit.get("/v1/audit/verify", "admin")).json() == demo
        acme = (await kit.get("/v1/audit/verify", "other")).json()
        assert acme["ok"] is True and acme["entries"] > mine  # two runs' entries, its own
        # a broken entry of acme's: demo is told the chain does not hold, not where
        gov = kit.app.state.store.governance()
        entries = await gov.ledger("default")
        theirs = [
            e.seq for e in entries
            if e.kind == "invocation" and e.body["scope"]["tenantId"] == "acme"
        ]  # fmt: skip
        with kit.app.state.store.transaction("tampering"):
            kit.app.state.store.db().execute(
                "UPDATE ledger SET at = '2000-01-01T00:00:00.000000Z' WHERE seq = ?", (theirs[0],)
            )
        told = (await kit.get("/v1/audit/verify", "admin")).json()
        assert told["ok"] is False and told["entries"] == mine
        assert [(p["seq"], p["code"]) for p in told["problems"]] == [(None, "elsewhere")]
        told = (await kit.get("/v1/audit/verify", "other")).json()
        assert told["ok"] is False
        assert (theirs[0], "hash_mismatch") in [(p["seq"], p["code"]) for p in told["problems"]]
        # demo's own calls move demo's count
        await _finish(kit, "admin", "refund-desk")
        assert (await kit.get("/v1/audit/verify", "admin")).json()["entries"] > mine

    run(tmp_path, body)

"""The inbox's pages without JavaScript: sign in with a token (an HttpOnly, SameSite=Strict
cookie), every form needs the session's CSRF token, a decision is a plain form post
(approve as asked, approve an edit, deny with a reason), hostile text is shown escaped
and through the renderer, another tenant's approval is not found, and a revoked token
ends its session."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from server_kit import Kit, run


async def _login(c: httpx.AsyncClient, token: str) -> httpx.Response:
    page = await c.get("/login")
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert csrf
    return await c.post("/login", data={"token": token, "csrf": csrf.group(1)})


async def _signed_in(kit: Kit, role: str = "approver") -> httpx.AsyncClient:
    c = httpx.AsyncClient(transport=kit.client._transport, base_url="http://oarlock.test")
    r = await _login(c, kit.tokens[role])
    assert r.status_code == 303 and r.headers["location"] == "/"
    return c


def _form(html: str) -> dict[str, str]:
    csrf = re.search(r'name="csrf" value="([^"]+)"', html)
    version = re.search(r'name="version" value="([^"]+)"', html)
    assert csrf and version
    return {"csrf": csrf.group(1), "version": version.group(1)}


def test_login_cookie_and_headers(tmp_path: Path) -> None:
    async def body(kit: Kit) -> None:
        r = await kit.client.get("/")
        assert r.status_code == 303 and r.headers["location"] == "/login"
        r = await _login(kit.client, "oat_" + "x" * 43)
        assert r.status_code == 401 and "not a live token" in r.text
        # without the login form's CSRF token (a cross-site login), no session
        fresh = httpx.AsyncClient(transport=kit.client._transport, base_url="http://x.test")
        r = await fresh.post("/login", data={"token": kit.tokens["viewer"]})
        assert r.status_code == 403
        assert "oarlock_session" not in r.headers.get("set-cookie", "")
        await fresh.aclose()
        r = await _login(kit.client, kit.tokens["viewer"])
        cookie = r.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "path=/" in cookie
        assert kit.tokens["viewer"] not in r.headers["set-cookie"]
        c = await _signed_in(kit, "viewer")
        r = await c.get("/")
        assert r.status_code == 200 and "Nothing is waiting" in r.text
        assert "frame-ancestors 'none'" in r.headers["content-security-policy"]
        assert "script-src 'self'" in r.headers["content-security-policy"]
        assert r.headers["x-frame-options"] == "DENY"
        assert "<script>" not in r.text  # no inline script: the CSP allows none
        r = await c.get("/static/inbox.js")  # the pages' one script (no htmx: none used it)
        assert r.status_code == 200 and "EventSource" in r.text
        # the session cookie authenticates the API too (same-site requests of the page)
        assert (await c.get("/v1/me")).json()["name"] == "viewer-ana"
        # but it writes nothing through the API: that takes the token itself
        r = await c.post("/v1/runs", json={"agent": "refund-desk", "input": "x"})
        assert r.status_code == 401
        await c.aclose()

    run(tmp_path, body)


def test_decisions_by_form(tmp_path: Path) -> None:
    async def body(kit: Kit) -> None:
        c = await _signed_in(kit)
        run_id, call_id = await kit.waiting()
        page = await c.get(f"/approvals/{run_id}/{call_id}")
        assert page.status_code == 200
        assert "refunds-need-a-human: Every refund needs a human" in page.text
        assert 'name="arg.amount"' in page.text and 'type="number"' in page.text
        fields = _form(page.text)
        args = {"arg.order_id": "A-1001", "arg.amount": "40", "arg.reason": "broken"}
        # without the CSRF token, or with another, nothing is decided
        for csrf in (None, "forged"):
            data = {**fields, **args, "decision": "approved"}
            if csrf is None:
                del data["csrf"]
            else:
                data["csrf"] = csrf
            r = await c.post(f"/approvals/{run_id}/{call_id}", data=data)
            assert r.status_code == 403 and "csrf" in r.text
        # an edit the policy denies is refused, named, and nothing changes
        r = await c.post(
            f"/approvals/{run_id}/{call_id}",
            data={**fields, **args, "arg.amount": "500", "decision": "approved"},
        )
        assert r.status_code == 422 and "edit_denied" in r.text
        r = await c.post(
            f"/approvals/{run_id}/{call_id}",
            data={**fields, **args, "arg.amount": "lots", "decision": "approved"},
        )
        assert r.status_code == 422 and "invalid_edit" in r.text
        r = await c.post(
            f"/approvals/{run_id}/{call_id}", data={**fields, **args, "decision": "approved"}
        )
        assert r.status_code == 303, r.text
        doc = await kit.until(run_id, "completed")
        assert doc["decisions"][0]["editedArguments"]["amount"] == 40
        assert doc["decisions"][0]["principal"] == "approver-ana"
        page = await c.get(r.headers["location"])
        assert "Succeeded" in page.text and "raw result" in page.text
        # a second run: approved as asked (no edit), then a third denied with a reason
        run2, call2 = await kit.waiting()
        page = await c.get(f"/approvals/{run2}/{call2}")
        r = await c.post(
            f"/approvals/{run2}/{call2}",
            data={
                **_form(page.text),
                "decision": "approved",
                "arg.order_id": "A-1001",
                "arg.amount": "42.5",
                "arg.reason": "arrived broken",
            },
        )
        assert r.status_code == 303
        doc = await kit.until(run2, "completed")
        assert doc["decisions"][0].get("editedArguments") is None
        run3, call3 = await kit.waiting()
        page = await c.get(f"/approvals/{run3}/{call3}")
        r = await c.post(
            f"/approvals/{run3}/{call3}",
            data={**_form(page.text), "decision": "denied", "reason": "fraud"},
        )
        assert r.status_code == 303
        doc = await kit.until(run3, "completed")
        assert doc["decisions"][0]["reason"] == "fraud"
        # a stale page (the version moved on) is refused
        r = await c.post(
            f"/approvals/{run3}/{call3}",
            data={**_form(page.text), "decision": "denied", "reason": "again"},
        )
        assert r.status_code in (409, 410) and "already_decided" in r.text
        await c.aclose()

    run(tmp_path, body)


def test_hostile_text_is_rendered_safely(tmp_path: Path) -> None:
    async def body(kit: Kit) -> None:
        hostile = "<script>alert(1)</script>\x1b]0;pwned\x07 \u202egnp.exe"
        r = await kit.post(
            "/v1/runs",
            "operator",
            json={"agent": "refund-desk", "input": hostile, "tags": {"note": hostile}},
        )
        run_id = r.json()["id"]
        doc = await kit.until(run_id, "waiting_approval")
        call_id = doc["pendingApprovals"][0]["toolCallId"]
        c = await _signed_in(kit)
        for path in (f"/runs/{run_id}", f"/approvals/{run_id}/{call_id}"):
            html = (await c.get(path)).text
            assert "<script>alert" not in html and "&lt;script&gt;alert(1)" in html
            assert "\x1b" not in html and "\u202e" not in html and "\x07" not in html
            assert "\\x1b" in html and "\\u202e" in html
        page = (await c.get(f"/approvals/{run_id}/{call_id}")).text
        assert 'data-original="{&#34;order_id&#34;: &#34;A-1001&#34;, &#34;amount&#34;: 42.5' in (
            page
        )  # an attribute, escaped
        await c.aclose()

    run(tmp_path, body)


def test_other_tenant_and_revoked_token(tmp_path: Path) -> None:
    async def body(kit: Kit) -> None:
        run_id, call_id = await kit.waiting()
        c = await _signed_in(kit, "other")
        for path in (f"/approvals/{run_id}/{call_id}", f"/runs/{run_id}"):
            r = await c.get(path)
            assert r.status_code == 404, path
        assert "Nothing is waiting" in (await c.get("/")).text
        mine = await _signed_in(kit, "approver")
        assert (await mine.get("/")).status_code == 200
        [info] = [t for t in await kit.app.state.tokens.list("demo") if t.name == "approver-ana"]
        await kit.app.state.tokens.revoke(info.id)
        r = await mine.get("/")
        assert r.status_code == 303 and r.headers["location"] == "/login"
        await c.aclose()
        await mine.aclose()

    run(tmp_path, body)

"""Who may decide: one check for every way a decision comes. Every decision entry point of
the server (the API's decision, the inbox's form; approve, deny, respond, edit) is walked
with every role of the run's own tenant and of another: a viewer or an operator is refused
(403 ``forbidden``) and nothing is decided, another tenant's call is not found (404), an
approver or an admin decides under their own name. Under a four-eyes rule whoever started
the run may deny it but not approve it, whichever way they try. The pages offer only what
the role may do."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from decide_kit import SHOWN_URL, URL, decision_forms, run, signed_in, waiting_memo

from oarlock.errors import NotFound
from server_kit import ROLES, Kit

KINDS = ("approve", "deny", "respond", "edit")
ENTRY_POINTS = ("api", "inbox")
EDITED = "Edited, by hand"
_CODE = re.compile(r'<p class="error" role="alert"><strong>([^<]+)</strong>')


def _body(kind: str) -> dict[str, Any]:
    return {
        "approve": {"decision": "approved"},
        "deny": {"decision": "denied", "reason": "not this one"},
        "respond": {"decision": "responded", "response": "sent by hand"},
        # the URL given back as shown: its real value is kept
        "edit": {"decision": "approved", "editedArguments": {"memo": EDITED, "url": SHOWN_URL}},
    }[kind]


async def _api(kit: Kit, who: str, run_id: str, call_id: str, kind: str) -> tuple[int, Any]:
    version = await kit.version(run_id, call_id)
    r = await kit.post(
        f"/v1/approvals/{run_id}/{call_id}/decision",
        who,
        headers={"If-Match": f'"{version}"'},
        json=_body(kind),
    )
    return r.status_code, r.json()["error"]["code"] if r.status_code >= 400 else None


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, page
    return found.group(1)


async def _inbox(
    kit: Kit, c: httpx.AsyncClient, run_id: str, call_id: str, kind: str
) -> tuple[int, Any]:
    """The decision as the inbox's form posts it: the page's own form when it offers one
    (untouched, or with the memo edited), else the post a forged form would make."""
    page = (await c.get(f"/approvals/{run_id}/{call_id}")).text
    offered = decision_forms(page)
    choice = _body(kind)["decision"]
    if choice in offered:
        data = dict(offered[choice])
    else:
        data = {
            "csrf": _csrf(page) if "csrf" in page else "",
            "version": await kit.version(run_id, call_id),
            "arg.memo": '"Hello"',
            "arg.url": f'"{SHOWN_URL}"',
        }
    data["decision"] = choice
    if kind == "edit":
        data["arg.memo"] = f'"{EDITED}"'
    if kind == "deny":
        data["reason"] = "not this one"
    if kind == "respond":
        data["response"] = "sent by hand"
    if not data["csrf"]:  # another tenant's page is 404: take the token from the inbox
        data["csrf"] = _csrf((await c.get("/")).text)
    r = await c.post(f"/approvals/{run_id}/{call_id}", data=data)
    if r.status_code == 303:
        return 303, None
    found = _CODE.search(r.text)
    return r.status_code, found.group(1) if found else r.text


async def _decided(kit: Kit, run_id: str, kind: str, principal: str) -> None:
    doc = await kit.until(run_id, "completed")
    [decision] = doc["decisions"]
    assert decision["decision"] == _body(kind)["decision"], (kind, decision)
    assert decision["principal"] == principal
    if kind == "edit":  # as stored (the API shows the URL's password redacted)
        stored = (await kit.app.state.store.load(run_id)).document
        assert stored.decisions[0].edited_arguments == {"memo": EDITED, "url": URL}
    else:
        assert decision.get("editedArguments") is None, decision


def test_every_entry_point_every_role_every_tenant(tmp_path: Path) -> None:
    async def body(kit: Kit) -> None:
        # the entry points walked here are every decision route the server has
        from oarlock.server._api import router as api
        from oarlock.server._stream import router as streams
        from oarlock.server._web import router as pages

        posts = {
            route.path
            for router in (api, streams, pages)
            for route in router.routes
            if "POST" in getattr(route, "methods", ()) and "approvals" in route.path
        }
        assert posts == {
            "/v1/approvals/{run_id}/{call_id}/decision",  # the API's
            "/approvals/{run_id}/{call_id}",  # the inbox's form
        }
        clients = {}
        for role in ROLES:
            for who in (role, f"acme-{role}"):
                clients[who] = await signed_in(kit, who)
        refused_run, refused_call = await waiting_memo(kit)
        tried = 0
        for entry in ENTRY_POINTS:
            for kind in KINDS:
                for role in ROLES:
                    for who in (role, f"acme-{role}"):
                        own = who == role
                        allowed = own and role in ("approver", "admin")
                        if allowed:
                            run_id, call_id = await waiting_memo(kit)
                        else:
                            run_id, call_id = refused_run, refused_call
                        if entry == "api":
                            status, code = await _api(kit, who, run_id, call_id, kind)
                        else:
                            status, code = await _inbox(kit, clients[who], run_id, call_id, kind)
                        where = (entry, kind, who)
                        tried += 1
                        if allowed:
                            assert status in (200, 303), (where, status, code)
                            await _decided(kit, run_id, kind, f"{role}-ana")
                        elif own:
                            assert (status, code) == (403, "forbidden"), (where, status, code)
                        else:
                            assert (status, code) == (404, "not_found"), (where, status, code)
        assert tried == len(ENTRY_POINTS) * len(KINDS) * len(ROLES) * 2
        # every refusal left the call as it was: undecided, no approval kept
        doc = (await kit.get(f"/v1/runs/{refused_run}")).json()
        assert doc["status"] == "waiting_approval" and not doc.get("decisions")
        with pytest.raises(NotFound):
            await kit.app.state.store.governance().approval_for(refused_run, refused_call)
        for c in clients.values():
            await c.aclose()

    run(tmp_path, body)


def test_four_eyes_whichever_way(tmp_path: Path) -> None:
    async def body(kit: Kit) -> None:
        admin = await signed_in(kit, "admin")
        run_id, call_id = await waiting_memo(kit, who="admin")  # admin-ana started it
        page = (await admin.get(f"/approvals/{run_id}/{call_id}")).text
        assert set(decision_forms(page)) == {"denied", "responded"}
        assert "rule memos-need-four-eyes asks for four eyes" in page
        for kind in ("approve", "edit"):
            assert await _api(kit, "admin", run_id, call_id, kind) == (403, "four_eyes")
            assert await _inbox(kit, admin, run_id, call_id, kind) == (403, "four_eyes")
        doc = (await kit.get(f"/v1/runs/{run_id}")).json()
        assert doc["status"] == "waiting_approval" and not doc.get("decisions")
        # another approver approves it; the starter may deny or respond
        assert (await _api(kit, "approver", run_id, call_id, "approve"))[0] == 200
        await _decided(kit, run_id, "approve", "approver-ana")
        for entry, kind in (("api", "deny"), ("inbox", "respond")):
            run_id, call_id = await waiting_memo(kit, who="admin")
            if entry == "api":
                status, _ = await _api(kit, "admin", run_id, call_id, kind)
            else:
                status, _ = await _inbox(kit, admin, run_id, call_id, kind)
            assert status in (200, 303)
            await _decided(kit, run_id, kind, "admin-ana")
        await admin.aclose()

    run(tmp_path, body)


def test_pages_offer_what_the_role_may_do(tmp_path: Path) -> None:
    async def body(kit: Kit) -> None:
        run_id, call_id = await waiting_memo(kit)
        for role in ROLES:
            c = await signed_in(kit, role)
            page = await c.get(f"/approvals/{run_id}/{call_id}")
            assert page.status_code == 200
            offered = decision_forms(page.text)
            run_page = (await c.get(f"/runs/{run_id}")).text
            if role in ("viewer", "operator"):
                assert offered == {}, (role, offered)
                assert 'id="approve-form"' not in page.text and "Deny</button>" not in page.text
                assert f"role {role} may not decide" in page.text
                assert "Decide on send_memo" not in run_page
                assert "The approval of send_memo" in run_page
            else:
                assert set(offered) == {"approved", "denied", "responded"}, (role, offered)
                assert "may not decide" not in page.text
                assert "Decide on send_memo" in run_page
            other = await signed_in(kit, f"acme-{role}")
            assert (await other.get(f"/approvals/{run_id}/{call_id}")).status_code == 404
            await other.aclose()
            await c.aclose()
        # the exact arguments, through the same check: deciders only, own tenant only
        for who, status in (
            ("viewer", 403), ("operator", 403), ("approver", 200), ("admin", 200),
            ("acme-admin", 404), ("acme-approver", 404),
        ):  # fmt: skip
            r = await kit.get(f"/v1/approvals/{run_id}/{call_id}/arguments", who)
            assert r.status_code == status, (who, r.text)

    run(tmp_path, body)

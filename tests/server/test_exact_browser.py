"""The exact-arguments round trip in a real browser (Debian's chromium, driven by
Playwright) against ``oarlock serve``, with JavaScript and without: the memo desk asks to
send a memo holding a newline, a tab, an ESC and a right-to-left override to a URL holding
a password. The approval page shows them safely (escapes, the password redacted, nothing
the page's Content-Security-Policy refuses) and an untouched submit approves exactly the
call as asked: the approval's argumentsHash is the invocation's, and the tool receives the
original strings. With JavaScript, a value that still holds [redacted] but is not the one
shown is flagged before it is sent."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import rfc8785
from decide_kit import ARGUMENTS, SHOWN_URL, memo_agents

from server_kit import Served, serve_process

CHROMIUM = Path("/usr/bin/chromium")
HASH = "sha256:" + hashlib.sha256(rfc8785.dumps(ARGUMENTS)).hexdigest()


def _waiting(served: Served, operator: str, approver: str) -> tuple[str, str]:
    r = httpx.post(
        f"{served.url}/v1/runs",
        headers={"Authorization": f"Bearer {operator}"},
        json={"agent": "memo-desk", "input": "send it"},
        timeout=30,
    )
    assert r.status_code == 201, r.text
    run_id = str(r.json()["id"])
    deadline = time.monotonic() + 20
    while True:
        doc = httpx.get(
            f"{served.url}/v1/runs/{run_id}", headers={"Authorization": f"Bearer {approver}"}
        ).json()
        if doc["status"] == "waiting_approval":
            return run_id, str(doc["pendingApprovals"][0]["toolCallId"])
        assert time.monotonic() < deadline, doc["status"]
        time.sleep(0.1)


def _ran(served: Served, approver: str, run_id: str, call_id: str) -> dict[str, Any]:
    """The approval's and the invocation's hashes (from the database) and what the tool
    received (its raw result, over the API)."""
    from oarlock.store import SQLiteStore

    auth = {"Authorization": f"Bearer {approver}"}
    deadline = time.monotonic() + 20
    while httpx.get(f"{served.url}/v1/runs/{run_id}", headers=auth).json()["status"] != (
        "completed"
    ):
        assert time.monotonic() < deadline
        time.sleep(0.1)

    async def read() -> dict[str, Any]:
        store = SQLiteStore(served.db, create=False)
        try:
            gov = store.governance()
            approval, invocation_id = await gov.approval_for(run_id, call_id)
            assert invocation_id is not None
            invocation, _ = await gov.load(invocation_id)
            decided = (await store.load(run_id)).document.decisions[0]
            return {
                "approval": approval.arguments_hash,
                "invocation": invocation["argumentsHash"],
                "id": invocation_id,
                "edited": decided.edited_arguments,
            }
        finally:
            await store.close()

    with ThreadPoolExecutor(1) as pool:  # Playwright's loop runs in this thread
        found = pool.submit(asyncio.run, read()).result()
    raw = httpx.get(f"{served.url}/v1/receipts/{found['id']}/result", headers=auth)
    found["received"] = json.loads(raw.content)
    return found


@pytest.mark.parametrize("javascript", [True, False], ids=["with-js", "without-js"])
def test_untouched_form_approves_exactly(tmp_path: Path, javascript: bool) -> None:
    sync_api = pytest.importorskip("playwright.sync_api")
    assert CHROMIUM.exists(), "Debian's chromium is needed: apt-get install -y chromium"
    memo_agents(tmp_path)  # beside the refund desks that serve_process puts in the folder
    with serve_process(tmp_path) as served, sync_api.sync_playwright() as pw:
        approver = served.token("approver", "ana")
        operator = served.token("operator", "ops")
        run_id, call_id = _waiting(served, operator, approver)
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        context = browser.new_context(java_script_enabled=javascript)
        page = context.new_page()
        page.set_default_timeout(20_000)
        complaints: list[str] = []
        page.on(
            "console",
            lambda m: complaints.append(m.text) if m.type in ("error", "warning") else None,
        )
        page.on("pageerror", lambda e: complaints.append(str(e)))
        page.goto(f"{served.url}/login")
        page.get_by_label("API token").fill(approver)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(f"{served.url}/")
        page.goto(f"{served.url}/approvals/{run_id}/{call_id}")
        memo, url = page.locator('[name="arg.memo"]'), page.locator('[name="arg.url"]')
        assert memo.input_value() == '"Hello,\\n\\tthanks\\u001b[31m \\u202egnp.exe"'
        assert url.input_value() == f'"{SHOWN_URL}"'
        html = page.content()
        assert "\x1b" not in html and "\u202e" not in html and ":pw@" not in html
        assert HASH in page.locator("#arguments-hash").inner_text()
        if javascript:
            diff = page.locator("#diff")
            assert "No change" in diff.inner_text()
            url.fill(json.dumps(SHOWN_URL.replace("inv/7", "inv/8")))
            diff.locator("p.error").wait_for()
            assert "still holds [redacted]" in diff.inner_text()
            assert page.get_by_role("button", name="Approve with edits").is_visible()
            url.fill(f'"{SHOWN_URL}"')  # back as shown: no edit
            diff.get_by_text("No change").wait_for()
        page.get_by_role("button", name="Approve", exact=True).click()
        page.wait_for_url(f"**/runs/{run_id}?decided=*")
        assert "recorded" in page.content()
        ran = _ran(served, approver, run_id, call_id)
        assert ran["edited"] is None
        assert ran["approval"] == ran["invocation"] == HASH
        assert ran["received"] == ARGUMENTS
        # nothing the pages did was refused by their own Content-Security-Policy
        assert not [c for c in complaints if "Content Security Policy" in c], complaints
        assert not [c for c in complaints if "Uncaught" in c], complaints
        browser.close()

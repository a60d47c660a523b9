"""The inbox in a real headless browser: Debian's chromium driven by Playwright, against
``oarlock serve`` on a free port of 127.0.0.1. Sign in, see a pending refund appear live
(announced in the aria-live region), reach it with the keyboard, edit the amount and see
the diff, approve, watch the run complete; deny another with a reason. Screenshots of
the inbox and of an approval page are taken (into ``docs/``, as the README shows them,
with ``OARLOCK_SCREENSHOTS=1``; else into the test's folder)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest

from server_kit import serve_process

CHROMIUM = Path("/usr/bin/chromium")
DOCS = Path(__file__).resolve().parents[2] / "docs"


def _start(url: str, token: str) -> str:
    r = httpx.post(
        f"{url}/v1/runs",
        headers={"Authorization": f"Bearer {token}"},
        json={"agent": "refund-desk", "input": "Refund A-1001", "tags": {"desk": "eu"}},
        timeout=30,
    )
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def _run(url: str, token: str, run_id: str) -> dict:
    r = httpx.get(f"{url}/v1/runs/{run_id}", headers={"Authorization": f"Bearer {token}"})
    return json.loads(r.text)


def test_inbox_in_a_browser(tmp_path: Path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api")
    assert CHROMIUM.exists(), "Debian's chromium is needed: apt-get install -y chromium"
    shots = DOCS if os.environ.get("OARLOCK_SCREENSHOTS") == "1" else tmp_path
    with serve_process(tmp_path) as served, sync_api.sync_playwright() as pw:
        approver = served.token("approver", "ana")
        operator = served.token("operator", "ops")
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(20_000)
        page.goto(f"{served.url}/")
        assert page.url.endswith("/login")
        page.get_by_label("API token").fill(approver)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(f"{served.url}/")
        page.get_by_text("Live: new approvals appear here.").wait_for()
        run_id = _start(served.url, operator)
        row = page.locator("#inbox tbody tr[data-key]")
        row.first.wait_for()
        assert "issue_refund" in row.first.inner_text()
        said = page.locator("#announce").inner_text()
        # told as it arrives, or (had the stream connected after it) with the snapshot
        assert "New approval: issue_refund" in said or said == "1 new approval", said
        page.screenshot(path=str(shots / "inbox.png"))
        # the keyboard path: Tab to the approval's link, Enter opens it
        for _ in range(40):
            page.keyboard.press("Tab")
            if page.evaluate("document.activeElement.textContent") == "issue_refund":
                break
        else:
            pytest.fail("the approval's link cannot be reached with Tab")
        page.keyboard.press("Enter")
        page.wait_for_url(f"**/approvals/{run_id}/**")
        amount = page.get_by_label("amount")
        amount.fill("40")
        diff = page.locator("#diff")
        diff.locator("ins").wait_for()
        assert "42.5" in diff.locator("del").inner_text()
        assert "40" in diff.locator("ins").inner_text()
        assert page.get_by_role("button", name="Approve with edits").is_visible()
        page.screenshot(path=str(shots / "approval.png"), full_page=True)
        page.get_by_role("button", name="Approve with edits").click()
        page.wait_for_url(f"**/runs/{run_id}?decided=*")
        page.locator("#run-status", has_text="completed").wait_for()
        doc = _run(served.url, approver, run_id)
        assert doc["status"] == "completed"
        assert doc["decisions"][0]["editedArguments"]["amount"] == 40
        assert doc["decisions"][0]["principal"] == "ana"
        # deny another, with a reason
        other = _start(served.url, operator)
        page.goto(f"{served.url}/")
        page.locator(f'tr[data-key^="{other}"] a').click()
        page.get_by_label("Reason for denying").fill("the customer asked to keep it")
        page.get_by_role("button", name="Deny").click()
        page.locator("#run-status", has_text="completed").wait_for()
        doc = _run(served.url, approver, other)
        assert doc["decisions"][0]["decision"] == "denied"
        assert doc["decisions"][0]["reason"] == "the customer asked to keep it"
        browser.close()

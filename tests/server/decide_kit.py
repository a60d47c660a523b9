"""An agent for the decision tests: ``memo-desk`` (tenant ``demo``) calls ``send_memo``, an
``external`` tool that a human may answer in place of, with a memo holding a newline, a
tab, an ESC and a right-to-left override, and a URL holding a password. Its policy asks
for a human, with four eyes. The tool returns what it received, so that its raw result
shows the exact arguments it ran with."""

from __future__ import annotations

import asyncio
import html.parser
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

from oarlock.server import ServerSettings, create_app
from oarlock.worker import WorkerSettings
from server_kit import ROLES, Kit, agents_dir

MEMO = "Hello,\n\tthanks\x1b[31m \u202egnp.exe"
URL = "https://svc:pw@pay.example/inv/7"
SHOWN_URL = "https://svc:[redacted]@pay.example/inv/7"
ARGUMENTS = {"memo": MEMO, "url": URL}

TOOLS = '''\
from oarlock.tools import tool


@tool(side_effect="external", allow_response=True)
def send_memo(memo: str, url: str) -> dict:
    """Send a memo to an invoice's URL.

    Args:
        memo: The memo's text.
        url: Where to send it.
    """
    return {"memo": memo, "url": url}
'''

SCRIPT = r'''turns:
  - text: Sending the memo.
    tool_calls:
      - name: send_memo
        arguments: {memo: "Hello,\n\tthanks\e[31m \u202Egnp.exe", url: "https://svc:pw@pay.example/inv/7"}
  - text: Sent.
'''

POLICY = """\
policy: memo-desk
rules:
  - id: memos-need-four-eyes
    effect: require_approval
    reason: A memo leaves the house
    four_eyes: true
    match: {tool: send_memo}
"""

AGENT = """\
name: memo-desk
instructions: Send memos.
model: scripted:memo.script.yaml
tenant: demo
tools:
  - memo_tools:send_memo
policy: memo.policy.yaml
limits:
  max_turns: 4
"""


def memo_agents(root: Path) -> Path:
    """The refund desks of ``server_kit`` (tenants ``demo`` and ``acme``) and the memo desk
    (its agent file, script, policy and tool), in one folder."""
    folder = agents_dir(root)
    (folder / "memo_tools.py").write_text(TOOLS)
    (folder / "memo.script.yaml").write_text(SCRIPT)
    (folder / "memo.policy.yaml").write_text(POLICY)
    (folder / "memo.yaml").write_text(AGENT)
    return folder


@asynccontextmanager
async def serving(root: Path) -> AsyncIterator[Kit]:
    """The app over the memo desk, with a token of every role in tenant ``demo`` (by role:
    ``viewer``, ..., named ``ROLE-ana``) and in tenant ``acme`` (``acme-ROLE``, named
    ``ROLE-mallory``)."""
    worker = WorkerSettings(poll=0.05, heartbeat=0.2, lease=1.0, drain=2.0)
    settings = ServerSettings(worker_settings=worker, watch_interval=0.1)
    app = create_app(root / "runs.db", memo_agents(root), settings)
    assert not app.state.problems, app.state.problems
    async with app.router.lifespan_context(app):
        tokens = {}
        for role in ROLES:
            made = app.state.tokens.create
            tokens[role], _ = await made(name=f"{role}-ana", tenant="demo", role=role)
            tokens[f"acme-{role}"], _ = await made(name=f"{role}-mallory", tenant="acme", role=role)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://oarlock.test") as c:
            yield Kit(app, c, tokens)
    await app.state.store.close()


def run(root: Path, body: Callable[[Kit], Awaitable[None]]) -> None:
    async def main() -> None:
        async with serving(root) as kit:
            await body(kit)

    asyncio.run(main())


async def waiting_memo(kit: Kit, who: str = "operator") -> tuple[str, str]:
    """A new run of the memo desk started by ``who``, waiting for the approval of its
    memo: (run id, call id)."""
    run_id = await kit.start(who, "memo-desk")
    doc = await kit.until(run_id, "waiting_approval")
    return run_id, doc["pendingApprovals"][0]["toolCallId"]


async def signed_in(kit: Kit, who: str) -> httpx.AsyncClient:
    """A browser-like client of the inbox, signed in with ``who``'s token."""
    c = httpx.AsyncClient(transport=kit.client._transport, base_url="http://oarlock.test")
    page = await c.get("/login")
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert csrf
    r = await c.post("/login", data={"token": kit.tokens[who], "csrf": csrf.group(1)})
    assert r.status_code == 303, r.text
    return c


class _Forms(html.parser.HTMLParser):
    """The forms of a page: each one's fields (name -> value) as a browser submits them
    untouched, and the value of each of its submit buttons."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[dict[str, Any]] = []
        self._text: tuple[str, list[str]] | None = None
        self._select: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.forms.append({"id": a.get("id", ""), "fields": {}, "buttons": []})
        elif not self.forms:
            return
        elif tag == "input" and "name" in a:
            self.forms[-1]["fields"][a["name"]] = a.get("value", "")
        elif tag == "textarea" and "name" in a:
            self._text = (a["name"], [])
        elif tag == "select" and "name" in a:
            self._select = a["name"]
        elif tag == "option" and self._select is not None and "selected" in a:
            self.forms[-1]["fields"][self._select] = a.get("value", "")
        elif tag == "button" and "name" in a:
            self.forms[-1]["buttons"].append(a.get("value", ""))

    def handle_data(self, data: str) -> None:
        if self._text is not None:
            self._text[1].append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "textarea" and self._text is not None:
            text = "".join(self._text[1])
            # what a browser submits of a textarea: a leading newline dropped, CRLF lines
            text = text.removeprefix("\n").replace("\r\n", "\n").replace("\n", "\r\n")
            self.forms[-1]["fields"][self._text[0]] = text
            self._text = None
        elif tag == "select":
            self._select = None


def forms(page: str) -> list[dict[str, Any]]:
    """The page's forms (see :class:`_Forms`)."""
    parser = _Forms()
    parser.feed(page)
    return parser.forms


def decision_forms(page: str) -> dict[str, dict[str, str]]:
    """The page's decision forms by the decision their button makes: their fields."""
    return {b: f["fields"] for f in forms(page) for b in f["buttons"]}

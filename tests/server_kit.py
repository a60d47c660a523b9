"""The server under test: an app over a fresh SQLite database and a folder of agent files
(the refund desk for tenants ``demo`` and ``acme``, under a policy that asks for a human
for every refund and denies refunds over 100), driven by its embedded worker, called
through httpx's ASGI transport (no network)."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from oarlock.demo import AGENT_FILE
from oarlock.server import ServerSettings, create_app
from oarlock.worker import WorkerSettings

POLICY = """\
policy: test-desk
rules:
  - id: refunds-over-100
    effect: deny
    reason: Refunds over 100 EUR go to finance
    match: {tool: issue_refund, arguments: {amount: {gt: 100}}}
  - id: refunds-need-a-human
    effect: require_approval
    reason: Every refund needs a human
    approval_ttl: TTL
    four_eyes: FOUR_EYES
    match: {tool: issue_refund}
"""


def agents_dir(root: Path, *, ttl: float = 3600, four_eyes: bool = False) -> Path:
    folder = root / "agents"
    folder.mkdir(exist_ok=True)
    shutil.copy(AGENT_FILE.with_name("refund-desk.script.yaml"), folder)
    policy = POLICY.replace("TTL", f"{ttl:g}").replace("FOUR_EYES", str(four_eyes).lower())
    (folder / "desk.policy.yaml").write_text(policy)
    text = AGENT_FILE.read_text()
    assert "tenant: demo\n" in text
    text = text.replace("limits:", "policy: desk.policy.yaml\nlimits:")
    (folder / "refund-desk.yaml").write_text(text)
    (folder / "acme-desk.yaml").write_text(text.replace("tenant: demo\n", "tenant: acme\n"))
    return folder


@dataclass
class Kit:
    app: Any
    client: httpx.AsyncClient
    tokens: dict[str, str]

    def auth(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}

    async def get(self, path: str, who: str = "admin", **kw: Any) -> httpx.Response:
        return await self.client.get(path, headers=self.auth(who), **kw)

    async def post(
        self, path: str, who: str = "admin", headers: dict[str, str] | None = None, **kw: Any
    ) -> httpx.Response:
        return await self.client.post(path, headers={**self.auth(who), **(headers or {})}, **kw)

    async def start(self, who: str = "admin", agent: str = "refund-desk", **tags: str) -> str:
        r = await self.post(
            "/v1/runs", who, json={"agent": agent, "input": "Refund A-1001", "tags": tags}
        )
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    async def until(self, run_id: str, *statuses: str, who: str = "admin") -> dict[str, Any]:
        deadline = time.monotonic() + 20
        while True:
            doc: dict[str, Any] = (await self.get(f"/v1/runs/{run_id}", who)).json()
            if doc.get("status") in statuses:
                return doc
            assert time.monotonic() < deadline, f"run {run_id} stayed {doc.get('status')}"
            await asyncio.sleep(0.05)

    async def waiting(self, who: str = "admin", agent: str = "refund-desk") -> tuple[str, str]:
        """A new run, waiting for the approval of its refund: (run id, call id)."""
        run_id = await self.start(who, agent)
        doc = await self.until(run_id, "waiting_approval", who=who)
        return run_id, doc["pendingApprovals"][0]["toolCallId"]

    async def version(self, run_id: str, call_id: str, who: str = "admin") -> str:
        r = await self.get(f"/v1/approvals/{run_id}/{call_id}", who)
        assert r.status_code == 200, r.text
        return str(r.json()["version"])


ROLES = ("viewer", "operator", "approver", "admin")


@asynccontextmanager
async def serving(
    root: Path,
    *,
    ttl: float = 3600,
    settings: ServerSettings | None = None,
    db: str | None = None,
    four_eyes: bool = False,
) -> AsyncIterator[Kit]:
    worker = WorkerSettings(poll=0.05, heartbeat=0.2, lease=1.0, drain=2.0)
    s = settings or ServerSettings(worker_settings=worker, watch_interval=0.1)
    app = create_app(db or root / "runs.db", agents_dir(root, ttl=ttl, four_eyes=four_eyes), s)
    async with app.router.lifespan_context(app):
        tokens = {}
        for role in ROLES:
            token, _ = await app.state.tokens.create(name=f"{role}-ana", tenant="demo", role=role)
            tokens[role] = token
        tokens["other"], _ = await app.state.tokens.create(
            name="mallory", tenant="acme", role="admin"
        )
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://oarlock.test") as c:
            yield Kit(app, c, tokens)
    await app.state.store.close()


def run(root: Path, body: Callable[[Kit], Awaitable[None]], **kw: Any) -> None:
    async def main() -> None:
        async with serving(root, **kw) as kit:
            await body(kit)

    asyncio.run(main())


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Served:
    """``oarlock serve`` in a process of its own, on a free port of 127.0.0.1."""

    url: str
    db: Path
    process: Any

    def oarlock(self, *args: str) -> str:
        import subprocess
        import sys

        done = subprocess.run(
            [sys.executable, "-m", "oarlock.cli", "--db", str(self.db), *args],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        )
        return done.stdout

    def token(self, role: str, name: str, tenant: str = "demo") -> str:
        import json

        out = self.oarlock(
            "tokens", "create", "--tenant", tenant, "--role", role, "--name", name, "--json"
        )
        return str(json.loads(out)["token"])


def serve_process(
    root: Path, *extra: str, program: Path | None = None, env: dict[str, str] | None = None
) -> Any:
    """A context manager: the server running, as :class:`Served`; stopped with SIGTERM."""
    import contextlib
    import subprocess
    import sys

    @contextlib.contextmanager
    def cm() -> Any:
        port = free_port()
        db = root / "runs.db"
        agents = agents_dir(root)
        command = [sys.executable, "-m", "oarlock.cli"] if program is None else [
            sys.executable, str(program)]  # fmt: skip
        argv = [*command, "--db", str(db), "serve", "--port",
                str(port), "--agents", str(agents), *extra]  # fmt: skip
        log = (root / "serve.log").open("a")
        import os

        process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    if httpx.get(f"{url}/openapi.json", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert process.poll() is None, (root / "serve.log").read_text()
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.1)
            yield Served(url, db, process)
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            log.close()

    return cm()

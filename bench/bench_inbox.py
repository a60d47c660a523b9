"""How long the inbox takes to render with many pending approvals: ``GET /`` (the page)
and ``GET /v1/approvals`` (the JSON) of ``oarlock serve``'s app, signed in, over an
SQLite database of N runs of the demo agent, each waiting for the approval of a refund.

The requests go through httpx's ASGI transport (no network): the time is the server's
(listing the runs, reading the documents of those that changed, judging the calls shown,
rendering), not a socket's. The first page reads and judges everything; later pages
read only what changed since.

Run: ``python bench/bench_inbox.py [--approvals N] [--rounds R] [--json OUT]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from oarlock.demo import AGENT_FILE
from oarlock.engine._agentfile import load_agent
from oarlock.engine._runner import Runner
from oarlock.server import ServerSettings, create_app
from oarlock.store import SQLiteStore


async def _fill(db: Path, agent_file: Path, count: int) -> None:
    store = SQLiteStore(db)
    agent = load_agent(agent_file)
    runner = Runner(agent, store)
    for i in range(count):
        doc = await runner.start(f"Refund A-1001 (#{i})", agent_ref=str(agent_file))
        assert doc.status == "waiting_approval", doc.status
    await store.close()


async def _time(client: httpx.AsyncClient, path: str, rounds: int) -> dict[str, float]:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        r = await client.get(path)
        times.append((time.perf_counter() - start) * 1000)
        assert r.status_code == 200, r.text[:200]
    times.sort()
    return {
        "median_ms": round(statistics.median(times), 1),
        "p95_ms": round(times[max(0, int(len(times) * 0.95) - 1)], 1),
        "min_ms": round(times[0], 1),
    }


async def main(count: int, rounds: int) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="oarlock-bench-inbox-"))
    try:
        agents = root / "agents"
        agents.mkdir()
        shutil.copy(AGENT_FILE, agents)
        shutil.copy(AGENT_FILE.with_name("refund-desk.script.yaml"), agents)
        db = root / "runs.db"
        started = time.perf_counter()
        await _fill(db, agents / AGENT_FILE.name, count)
        fill_s = time.perf_counter() - started
        app = create_app(db, agents, ServerSettings(worker=False))
        async with app.router.lifespan_context(app):
            token, _ = await app.state.tokens.create(name="bench", tenant="demo", role="viewer")
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://bench") as c:
                login = await c.get("/login")
                csrf = login.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
                await c.post("/login", data={"token": token, "csrf": csrf})
                started = time.perf_counter()
                page = await c.get("/")  # the first: every document read, every call judged
                first_ms = (time.perf_counter() - started) * 1000
                assert page.text.count("<tr data-key=") == min(count, 200)
                results = {
                    "approvals": count,
                    "fill_seconds": round(fill_s, 1),
                    "first_page_ms": round(first_ms, 1),
                    "inbox_page": await _time(c, "/", rounds),
                    "approvals_json": await _time(c, "/v1/approvals?limit=200", rounds),
                }
        await app.state.store.close()
        return results
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--approvals", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    out = asyncio.run(main(args.approvals, args.rounds))
    print(json.dumps(out, indent=2))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")

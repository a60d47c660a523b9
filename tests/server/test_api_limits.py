"""Limits and listing: body size (413), page size (422), the decision rate limit (429),
cursor pagination through every run exactly once, filters, hostile input refused by name,
and the OpenAPI document declaring every refusal."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from oarlock.server import ServerSettings
from oarlock.worker import WorkerSettings
from server_kit import Kit, run


def test_body_page_and_rate_limits(tmp_path: Path) -> None:
    async def body(kit: Kit) -> None:
        big = {"agent": "refund-desk", "input": "x" * 5000}
        r = await kit.post("/v1/runs", "operator", json=big)
        assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"

        # a body that lies about its length is cut off as it streams in
        async def chunks():
            for _ in range(10):
                yield b"x" * 1000

        r = await kit.client.post("/v1/runs", headers=kit.auth("operator"), content=chunks())
        assert r.status_code == 413
        r = await kit.get("/v1/runs?limit=1000")
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request"
        assert "limit" in r.json()["error"]["message"]
        r = await kit.get("/v1/runs?limit=0")
        assert r.status_code == 422
        run_id, call_id = await kit.waiting()
        codes = []
        for _ in range(3):
            r = await kit.post(
                f"/v1/approvals/{run_id}/{call_id}/decision",
                "approver",
                headers={"If-Match": '"stale"'},
                json={"decision": "approved"},
            )
            codes.append(r.status_code)
        assert codes == [409, 409, 429], codes
        assert r.json()["error"]["code"] == "rate_limited" and int(r.headers["retry-after"]) >= 1
        # the limit is per principal: another token decides still
        r = await kit.post(
            f"/v1/approvals/{run_id}/{call_id}/decision",
            "admin",
            headers={"If-Match": '"stale"'},
            json={"decision": "approved"},
        )
        assert r.status_code == 409

    settings = ServerSettings(
        max_body_bytes=4096,
        decisions_per_minute=1,
        decision_burst=2,
        worker_settings=WorkerSettings(poll=0.05, heartbeat=0.2, lease=1.0, drain=2.0),
    )
    run(tmp_path, body, settings=settings)


def test_cursor_pagination_and_filters(tmp_path: Path) -> None:
    async def body(kit: Kit) -> None:
        ids = set()
        for i in range(7):
            ids.add(await kit.start("operator", batch="b" if i % 2 else "a"))
        for _ in ids:
            pass
        seen: list[str] = []
        cursor = None
        pages = 0
        while True:
            q = "/v1/runs?limit=3" + (f"&cursor={cursor}" if cursor else "")
            page = (await kit.get(q, "viewer")).json()
            seen += [r["id"] for r in page["runs"]]
            pages += 1
            cursor = page["nextCursor"]
            if cursor is None:
                break
        assert pages == 3 and len(seen) == 7 and set(seen) == ids
        tagged = (await kit.get("/v1/runs?tag=batch=b&limit=50")).json()["runs"]
        assert len(tagged) == 3 and all(r["tags"]["batch"] == "b" for r in tagged)
        assert all(r["tags"]["startedBy"] == "operator-ana" for r in tagged)
        forged = await kit.post("/v1/runs", "operator", json={
            "agent": "refund-desk", "input": "x", "tags": {"startedBy": "admin-ana"}})
        assert forged.json()["tags"]["startedBy"] == "operator-ana"
        none = (await kit.get("/v1/runs?agent=nobody")).json()
        assert none == {"runs": [], "nextCursor": None}
        for bad in ("!!!", "eyJ4IjoxfQ", "W1tdXQ"):
            r = await kit.get(f"/v1/runs?cursor={bad}")
            assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_cursor"
        r = await kit.get("/v1/runs?tag=novalue")
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_tag"

    run(tmp_path, body)


def test_hostile_bodies(tmp_path: Path) -> None:
    async def body(kit: Kit) -> None:
        for raw, status, code in (
            (b"{", 400, "invalid_json"),
            (b"\xca\x9fj\xfc\xa2", 400, "invalid_json"),  # not UTF-8
            (b'{"agent": "refund-desk", "input": "\\ud800"}', 422, "invalid_request"),
            (
                b'{"agent": "refund-desk", "input": "x", "tags": {"k": "\\udfff"}}',
                422,
                "invalid_text",
            ),
            (b'{"agent": "refund-desk", "input": "x", "extra": 1}', 422, "invalid_request"),
            (b'{"agent": "nobody", "input": "x"}', 404, "no_agent"),
            (b"[1, 2]", 422, "invalid_request"),
        ):
            r = await kit.client.post(
                "/v1/runs",
                content=raw,
                headers={**kit.auth("operator"), "Content-Type": "application/json"},
            )
            assert r.status_code == status, (raw, r.text)
            assert r.json()["error"]["code"] == code, (raw, r.text)
        r = await kit.get("/v1/runs/\u202e%1b")
        assert r.status_code == 404 and "\u202e" not in r.text
        runs = (await kit.get("/v1/runs")).json()["runs"]
        assert runs == []

    run(tmp_path, body)


def test_openapi_declares_every_refusal(tmp_path: Path) -> None:
    async def body(kit: Kit) -> None:
        spec = (await kit.client.get("/openapi.json")).json()
        ops = [(p, m, op) for p, item in spec["paths"].items() for m, op in item.items()]
        assert len(ops) == 20
        for path, method, op in ops:
            codes = set(op["responses"])
            if path == "/openapi.json":
                continue
            assert {"401", "403", "413", "422", "429"} <= codes, (path, method, codes)
            if "{" in path:
                assert "404" in codes, (path, method)
            for code in codes - {"200", "201", "202"}:
                assert op["responses"][code]["description"], (path, code)
                schema = op["responses"][code]["content"]["application/json"]["schema"]
                assert schema == {"$ref": "#/components/schemas/ErrorBody"}, (path, code)
        decision = spec["paths"]["/v1/approvals/{run_id}/{call_id}/decision"]["post"]
        assert {"409", "410", "428"} <= set(decision["responses"])

    run(tmp_path, body)


def test_tokens_command(tmp_path: Path) -> None:
    db = tmp_path / "t.db"

    def oarlock(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "oarlock.cli", "--db", str(db), *args],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
        )

    r = oarlock("tokens", "list")
    assert r.returncode == 1 and "no database" in r.stderr
    from oarlock.store import SQLiteStore

    SQLiteStore(db).close_now()
    tables = "SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name"
    before = sqlite3.connect(db).execute(tables).fetchall()
    r = oarlock("tokens", "create", "--tenant", "demo", "--role", "admin", "--name", " ")
    assert r.returncode == 2 and "name" in r.stderr
    assert sqlite3.connect(db).execute(tables).fetchall() == before  # refused, unchanged
    r = oarlock(
        "tokens", "create", "--tenant", "demo", "--role", "approver", "--name", "ana", "--json"
    )
    assert r.returncode == 0, r.stderr
    made = json.loads(r.stdout)
    assert made["token"].startswith("oat_") and made["role"] == "approver"
    assert made["token"].encode() not in db.read_bytes()
    r = oarlock("tokens", "create", "--tenant", "demo", "--role", "root", "--name", "x")
    assert r.returncode == 2
    r = oarlock("tokens", "create", "--tenant", "de\nmo", "--role", "viewer", "--name", "x")
    assert r.returncode == 2 and "tenant" in r.stderr
    r = oarlock("tokens", "list", "--json")
    [listed] = json.loads(r.stdout)
    assert "token" not in listed and listed["id"] == made["id"]
    r = oarlock("tokens", "revoke", made["id"])
    assert r.returncode == 0
    r = oarlock("tokens", "revoke", made["id"])
    assert r.returncode == 1 and "no live token" in r.stderr
    assert json.loads(oarlock("tokens", "list", "--json").stdout)[0]["revokedAt"]

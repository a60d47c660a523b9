"""The server over PostgreSQL: tokens in their own migrated table, tenant scoping and
cursor pagination by the server's SQL, and the approve path with the embedded worker."""

from __future__ import annotations

from pathlib import Path

import pgtest
from server_kit import Kit, run


def test_server_on_postgres(tmp_path: Path) -> None:
    url = pgtest.new_database()

    async def body(kit: Kit) -> None:
        run_id, call_id = await kit.waiting()
        others = [await kit.start("other") for _ in range(2)]
        version = await kit.version(run_id, call_id)
        r = await kit.post(
            f"/v1/approvals/{run_id}/{call_id}/decision",
            "approver",
            headers={"If-Match": version},
            json={"decision": "approved"},
        )
        assert r.status_code == 200, r.text
        doc = await kit.until(run_id, "completed")
        assert doc["decisions"][0]["principal"] == "approver-ana"
        for _ in range(3):
            await kit.start("operator", batch="x")
        seen, cursor = [], None
        while True:
            q = "/v1/runs?limit=2" + (f"&cursor={cursor}" if cursor else "")
            page = (await kit.get(q, "viewer")).json()
            seen += [x["id"] for x in page["runs"]]
            if not (cursor := page["nextCursor"]):
                break
        assert len(seen) == 4 and run_id in seen and not set(others) & set(seen)
        tagged = (await kit.get("/v1/runs?tag=batch=x", "viewer")).json()["runs"]
        assert len(tagged) == 3
        assert (await kit.get(f"/v1/runs/{others[0]}", "viewer")).status_code == 404
        assert (await kit.get(f"/v1/runs/{others[0]}", "other")).status_code == 200
        tokens = kit.app.state.tokens
        await tokens.prepare()  # a second time: already at its version
        listed = await tokens.list("demo")
        assert {t.name for t in listed} == {"viewer-ana", "operator-ana", "approver-ana",
                                            "admin-ana"}  # fmt: skip
        await tokens.revoke(listed[0].id, tenant="demo")
        assert (await kit.get("/v1/me", listed[0].role)).status_code == 401
        r = await kit.get("/v1/audit/verify")
        assert r.json()["ok"] is True and r.json()["chain"] == "demo"

    run(tmp_path, body, db=url)

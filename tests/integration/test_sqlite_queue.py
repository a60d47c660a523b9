"""The run queue on SQLite beyond the contract: a file of schema version 3 migrated to
version 4 (its runs runnable, its waiting runs' deadlines found, its claims naming no run),
the wake-up from another connection's commit, and lease writes that do not wait for the
disk."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

from oarlock.formats import RunDocument, dump_run, parse_run
from oarlock.formats._time import now_rfc3339, shift_rfc3339
from oarlock.store import Event, SQLiteStore, _sqlite

EXAMPLE = Path(__file__).parents[2] / "examples" / "runs" / "refund-waiting-approval.json"


def doc(run_id: str, status: str, deadline: str | None = None) -> RunDocument:
    data = dump_run(parse_run(EXAMPLE.read_bytes()))
    data.update(id=run_id, status=status)
    if status != "waiting_approval":
        data["pendingApprovals"] = []
    elif deadline is not None:
        data["pendingApprovals"][0]["expiresAt"] = deadline
    return parse_run(data)


def as_version_3(path: Path) -> None:
    """A file with the schema of migrations 1 to 3: a running run, a waiting run whose
    approval lapsed an hour ago, a completed run, and a claim."""
    import zlib

    from oarlock.formats import dump_json

    conn = sqlite3.connect(path)
    for _, script in _sqlite._migrations()[:3]:
        conn.executescript(script)
    conn.execute("PRAGMA user_version = 3")
    lapsed = shift_rfc3339(now_rfc3339(), -3600)
    with conn:
        for num, (run_id, status) in enumerate(
            (("going", "running"), ("waiting", "waiting_approval"), ("done", "completed")), 1
        ):
            body = dump_json(doc(run_id, status, lapsed))
            stored = body if status == "running" else zlib.compress(body)
            conn.execute(
                "INSERT INTO runs (num, id, agent, status, turns, created_at, updated_at, "
                "version, agent_ref, document) VALUES (?, ?, 'a', ?, 1, 't', 't', 1, NULL, ?)",
                (num, run_id, status, stored),
            )
            conn.execute("INSERT INTO events VALUES (?, 1, 'run_created', 't', '{}')", (num,))
        conn.execute(
            "INSERT INTO claims VALUES ('acme', 'charge', 'k', 'inv', 'sha256:x', 'h:1:1', "
            "'2026-01-01T00:00:00Z', 0)"
        )
    conn.close()


def test_a_version_3_file_is_migrated_to_the_queue(tmp_path: Path) -> None:
    path = tmp_path / "v3.db"
    as_version_3(path)

    async def go() -> None:
        async with SQLiteStore(path) as store:
            runs = {r.id: r for r in await store.list_runs()}
            assert set(runs) == {"going", "waiting", "done"}
            assert {r.tenant for r in runs.values()} == {"default"}
            assert all(r.holder is None for r in runs.values())
            assert [e.kind for e in await store.events("waiting")] == ["run_created"]
            assert (await store.load("waiting")).document.status == "waiting_approval"
            # the running run is runnable at once; the waiting run's deadline was found
            [lease] = await store.claim("w", limit=5, lease_seconds=30)
            assert (lease.run_id, lease.epoch, lease.queue) == ("going", 1, "default")
            assert await store.lapsed_approvals(now=time.time(), limit=5) == ["waiting"]
            held = await store.governance().claim_of("acme", "charge", "k")
            assert held is not None
            assert (held.claim.run_id, held.claim.epoch, held.run_epoch) == (None, None, None)

    asyncio.run(go())
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == _sqlite.schema_version() >= 4
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    conn.close()


def test_wait_for_work_sees_a_run_made_runnable_by_another_connection(tmp_path: Path) -> None:
    path = tmp_path / "q.db"

    async def go() -> float:
        async with SQLiteStore(path) as waiting, SQLiteStore(path) as other:
            await other.create(doc("held", "running"), [])
            await other.claim_run("held", "w", lease_seconds=60)
            task = asyncio.ensure_future(waiting.wait_for_work(10))
            await asyncio.sleep(0.2)
            await other.save(doc("held", "running"), 1, [Event("status_changed", "t")])
            await asyncio.sleep(0.2)
            assert not task.done()  # another commit, but nothing runnable: still waiting
            t0 = time.monotonic()
            await other.create(doc("new", "running"), [])
            await asyncio.wait_for(task, 5)
            return time.monotonic() - t0

    assert asyncio.run(go()) < 1.0


def test_lease_writes_commit_without_a_flush(tmp_path: Path) -> None:
    from test_commit_counts import count_commits

    async def go() -> dict[str, int]:
        async with SQLiteStore(tmp_path / "q.db") as store:
            await store.create(doc("r", "running"), [])
            counts = count_commits(store)
            lease = await store.claim_run("r", "w", lease_seconds=30)
            lease = await store.renew(lease, 30)
            await store.release(lease)
            [lease] = await store.claim("w", limit=1, lease_seconds=30)
            await store.save(doc("r", "running"), 1, [], lease=lease)
            return counts

    assert asyncio.run(go()) == {"FULL": 1, "NORMAL": 4}


def test_a_save_assigns_the_tags_only_when_they_changed(tmp_path: Path) -> None:
    """A decision's save, a turn's and one at rest each leave tags as stored unassigned (so
    that their statements hold no copy of the trigger on tags), and one that changes them
    assigns them: the listing by tags finds the run by its new tags only."""

    def updates(seen: list[str]) -> list[bool]:
        """Of each UPDATE of runs run, whether it assigns the tags (the trace repeats a
        statement for each statement of a trigger it fires)."""
        run = [s for i, s in enumerate(seen) if i == 0 or s != seen[i - 1]]
        sql = (" ".join(ln for ln in s.splitlines() if not ln.lstrip().startswith("--"))
               for s in run)  # fmt: skip
        return ["tags" in u.split("WHERE")[0] for u in sql if u.lstrip().startswith("UPDATE runs")]

    async def go() -> tuple[list[bool], list[bool], list[str], list[str]]:
        async with SQLiteStore(tmp_path / "q.db") as store:
            seen: list[str] = []
            store.db().set_trace_callback(seen.append)
            await store.create(doc("r", "running"), [])
            version = await store.save(doc("r", "running"), 1, [])  # a decision's
            lease = await store.claim_run("r", "w", lease_seconds=30)
            version = await store.save(doc("r", "running"), version, [], lease=lease)
            version = await store.save(doc("r", "failed"), version, [], lease=lease)
            kept = updates(seen)
            seen.clear()
            tagged = doc("r", "running")
            tagged.tags = {"team": "a"}
            version = await store.save(tagged, version, [])
            lease = await store.claim_run("r", "w", lease_seconds=30)
            tagged.tags = {"team": "b"}
            version = await store.save(tagged, version, [], lease=lease)
            tagged.status, tagged.tags = "completed", {"team": "c"}
            await store.save(tagged, version, [], lease=lease)
            changed = updates(seen)
            found_c = [r.id for r in await store.list_runs(tags={"team": "c"})]
            found_b = [r.id for r in await store.list_runs(tags={"team": "b"})]
            return kept, changed, found_c, found_b

    kept, changed, found_c, found_b = asyncio.run(go())
    # the decision's, the turn's and the one at rest; the lease's claim and release
    assert kept == [False] * 4  # the decision's save, the lease's claim, the turn's, at rest
    assert changed.count(True) == 3  # each save of changed tags, by its second statement
    assert (found_c, found_b) == (["r"], [])


def test_a_holders_save_that_changes_the_status_or_creation_time_keeps_the_listing(
    tmp_path: Path,
) -> None:
    """A turn's save assigns neither status nor created_at (save_run_fenced_turn); one
    that changes them (a failed run taken up again, a document edited) writes them and
    their indexes all the same."""

    async def go() -> list[tuple[str, str]]:
        async with SQLiteStore(tmp_path / "q.db") as store:
            await store.create(doc("r", "running"), [])
            lease = await store.claim_run("r", "w", lease_seconds=30)
            turn = doc("r", "running")
            turn.turns += 1
            assert await store.save(turn, 1, [], lease=lease) == 2
            failed = doc("r", "failed")
            assert await store.save(failed, 2, [], lease=lease) == 3
            lease = await store.claim_run("r", "w", lease_seconds=30)
            again = doc("r", "running")
            again.created_at = "2030-01-01T00:00:00Z"
            assert await store.save(again, 3, [], lease=lease) == 4
            assert (await store.load("r")).document.created_at == "2030-01-01T00:00:00Z"
            rows = store.db().execute(
                "SELECT status, created_at FROM runs INDEXED BY runs_by_status"
                " WHERE status = 'running'"
            )
            return [tuple(row) for row in rows]

    assert asyncio.run(go()) == [("running", "2030-01-01T00:00:00Z")]

"""``oarlock worker``, ``oarlock workers`` and the commands that meet a worker: the runs
list showing who holds a run and until when, a resume refused while a worker drives the
run, an approval signed with a configured key acted on by a worker, and settings refused
before anything is opened."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from worker_fleet import (
    Db,
    WorkerProcess,
    agent_file,
    effects,
    environment,
    fleet_folder,
    oarlock,
    open_db,
    runs,
    wait_until,
)

import pgtest

FAST = ("--poll", "0.2", "--heartbeat", "0.2", "--lease", "2")
TIME = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


@pytest.fixture
def fleet(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    return fleet_folder(tmp_path), tmp_path / "runs.db", environment(tmp_path)


@pytest.fixture(params=["sqlite", "postgresql"])
def either(
    request: pytest.FixtureRequest, tmp_path: Path
) -> tuple[Path, Db, dict[str, str]]:
    """The fleet's folder, its database (an SQLite file, or a PostgreSQL database of its
    own) and environment."""
    db: Db = tmp_path / "runs.db" if request.param == "sqlite" else pgtest.new_database()
    return fleet_folder(tmp_path), db, environment(tmp_path)


def test_a_held_run_shows_its_worker_and_a_second_resume_is_refused(
    either: tuple[Path, Db, dict[str, str]], tmp_path: Path
) -> None:
    folder, db, env = either
    env["LOOK_SECONDS"] = "3"
    path = agent_file(folder, "H-1")
    submitted = oarlock(db, env, "run", str(path), "refund H-1", "--detach")
    assert submitted.returncode == 0, submitted.stderr
    worker = WorkerProcess(db, env, "--concurrency", "2", *FAST)
    try:
        [run] = runs(db, env)
        worker.wait_for(f"run {run['id']}: claimed (epoch 1, tenant acme)")
        [held] = runs(db, env)
        assert held["holder"].startswith("worker:") and f":{worker.pid}:" in held["holder"]
        assert re.fullmatch(TIME, held["leaseUntil"]), held
        table = oarlock(db, env, "runs", "list").stdout.rstrip("\n").split("\t")
        assert table[-2] == held["holder"]  # and its deadline, renewed since
        assert re.fullmatch(TIME, table[-1]) and table[-1] >= held["leaseUntil"]
        listed = json.loads(oarlock(db, env, "workers", "--json").stdout)
        assert [(w["worker"], w["pid"], w["runs"], w["concurrency"]) for w in listed] == [
            (held["holder"], worker.pid, [run["id"]], 2)]
        assert 0 <= listed[0]["heartbeatAgeSeconds"] < 2
        plain = oarlock(db, env, "workers").stdout
        assert plain.startswith(f"{held['holder']}\t") and "1/2" in plain
        second = oarlock(db, env, "resume", run["id"])
        assert second.returncode == 1
        assert re.fullmatch(
            rf"oarlock: run {run['id']} is being driven by {re.escape(held['holder'])} "
            rf"until {TIME}\n", second.stderr), second.stderr
        assert second.stdout == ""
    finally:
        assert worker.stop() == 0
    assert worker.lines[-1] == f"worker {held['holder']} stopped"
    assert json.loads(oarlock(db, env, "workers", "--json").stdout) == []
    assert oarlock(db, env, "workers").stdout == (
        "no worker has sent a heartbeat in the last 60 s\n")


def test_an_approval_signed_with_a_configured_key_is_acted_on_by_a_worker(
    either: tuple[Path, Db, dict[str, str]], tmp_path: Path
) -> None:
    folder, db, env = either
    path = agent_file(folder, "K-1", approval_ttl=3600)  # the refund needs a human
    started = oarlock(db, env, "run", str(path), "refund K-1")
    assert started.returncode == 0, started.stderr
    [run] = runs(db, env)
    assert run["status"] == "waiting_approval"
    [call] = re.findall(r"waiting for a decision on (\S+):", started.stdout)
    assert oarlock(db, env, "keys", "create", "--as", "user:ana").returncode == 0
    worker = WorkerProcess(db, env, *FAST)
    try:
        approved = oarlock(db, env, "approve", run["id"], call, "--no-resume")
        assert approved.returncode == 0, approved.stderr
        wait_until(lambda: runs(db, env)[0]["status"] == "completed")
    finally:
        assert worker.stop() == 0
    assert [e["order"] for e in effects(tmp_path)] == ["K-1"]
    assert worker.said(f"run {run['id']}: completed")


def test_an_approval_of_a_run_a_worker_took_says_who_drives_it(
    either: tuple[Path, Db, dict[str, str]], tmp_path: Path
) -> None:
    import asyncio

    folder, db, env = either
    path = agent_file(folder, "W-1", approval_ttl=3600)
    started = oarlock(db, env, "run", str(path), "refund W-1")
    [call] = re.findall(r"waiting for a decision on (\S+):", started.stdout)
    [run] = runs(db, env)

    async def hold() -> None:  # a worker claims the run as soon as it is decided
        async with open_db(db) as store:
            await store.claim_run(run["id"], "worker:elsewhere:1:w", lease_seconds=600)

    asyncio.run(hold())
    out = oarlock(db, env, "approve", run["id"], call)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == f"{call}: approved"
    assert re.fullmatch(
        rf"run {run['id']} is being driven by worker:elsewhere:1:w until {TIME}", lines[1])
    assert runs(db, env)[0]["status"] == "running"  # decided; left to its holder
    assert effects(tmp_path) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--concurrency", "0"), "give a whole number from 1 to 10000"),
        (("--concurrency", "many"), "is not a whole number"),
        (("--lease", "nan"), "give a number of seconds above 0"),
        (("--poll", "-1"), "give a number of seconds above 0"),
        (("--heartbeat", "10", "--lease", "15"), "must last at least two heartbeats"),
        (("--tenant", ""), "tenants must be a list of non-empty names"),
    ],
)
def test_bad_worker_settings_are_usage_errors(
    fleet: tuple[Path, Path, dict[str, str]], args: tuple[str, ...], message: str
) -> None:
    _, db, env = fleet
    out = oarlock(db, env, "worker", *args)
    assert out.returncode == 2, out
    assert message in out.stderr
    assert "Traceback" not in out.stderr
    assert not db.exists()


def test_a_worker_needs_a_database(fleet: tuple[Path, Path, dict[str, str]]) -> None:
    _, db, env = fleet
    t0 = time.monotonic()
    out = oarlock(db, env, "worker")
    assert (out.returncode, out.stderr) == (1, f"oarlock: no database at {db}\n")
    assert time.monotonic() - t0 < 30
    listed = oarlock(db, env, "workers")
    assert (listed.returncode, listed.stderr) == (1, f"oarlock: no database at {db}\n")

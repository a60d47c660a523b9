"""Secure and working by default: one user on one machine approves in one process and
resumes in another with no set-up. The user's approver key is made on first use (mode
0600, outside the database) and trusted in the user's approvers file; an agent that names
no approvers trusts it, and rows that anyone else writes are still refused. Real
processes, on SQLite and PostgreSQL; concurrent first use makes one key; two approvals of
one call at once record one decision and lose none; ``keys create`` never leaves a key
without its trust."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import stat
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from approver_kit import (
    forge,
    human_agent,
    human_approvals,
    receipts,
    run_id_of,
    together,
)
from worker_fleet import Db, effects, environment, fleet_folder, oarlock, open_db

import pgtest
from oarlock.formats._jcs import digest
from oarlock.formats._time import now_rfc3339
from oarlock.governance._approvers import ApproverKey, TrustedApprovers
from oarlock.governance._records import Approval

PYTHON_DECIDE = """
import asyncio, sys
from oarlock.engine import Runner
from oarlock.engine._agentfile import load_agent
from oarlock.store import PostgresStore, SQLiteStore

db, agent, action, run = sys.argv[1:5]

async def main() -> None:
    store = PostgresStore(db) if db.startswith("postgresql://") else SQLiteStore(db)
    async with store:
        runner = Runner(load_agent(agent), store)
        if action == "decide":  # resume=False: another process acts on the approval
            doc = await runner.decide(run, sys.argv[5], "approved")
        else:
            doc = await runner.resume(run)
    print(doc.status)

asyncio.run(main())
"""


@pytest.fixture(params=["sqlite", "postgresql"])
def setup(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, Db, dict[str, str]]:
    """The fleet's folder, a database (SQLite or PostgreSQL) and an environment whose
    configuration home is empty: no key, no approvers file."""
    db: Db = tmp_path / "runs.db" if request.param == "sqlite" else pgtest.new_database()
    return fleet_folder(tmp_path), db, environment(tmp_path)


def config(env: dict[str, str]) -> Path:
    return Path(env["XDG_CONFIG_HOME"]) / "oarlock"


def python(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PYTHON_DECIDE, *args],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def trusted_ids(env: dict[str, str]) -> dict[str, tuple[str, ...]]:
    found = TrustedApprovers.from_file(config(env) / "approvers.yaml").entries()
    return {k.key_id: k.principals for k in found}


def assert_user_key_made(env: dict[str, str]) -> str:
    """The user's key exists (0600, its folder 0700), is trusted for any principal, and
    is the only key trusted; its id."""
    key = config(env) / "approver.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE(config(env).stat().st_mode) == 0o700
    kid = ApproverKey.load(key, "x").key_id
    assert trusted_ids(env) == {kid: ("*",)}
    return kid


# -- approve in one process, act in another ------------------------------------------------


def test_a_python_decision_without_resume_is_honoured_by_a_resume_in_another_process(
    setup: tuple[Path, Db, dict[str, str]], tmp_path: Path
) -> None:
    folder, db, env = setup
    agent = human_agent(folder, "desk", [["P-1"]])
    run = run_id_of(oarlock(db, env, "run", str(agent), "pay P-1"))
    decided = python(env, str(db), str(agent), "decide", run, "call_1_1")
    assert decided.returncode == 0 and decided.stdout == "running\n", decided.stderr
    kid = assert_user_key_made(env)
    [approval] = human_approvals(db, run)
    assert (approval["keyId"], approval["principal"]) == (kid, "human")
    resumed = python(env, str(db), str(agent), "resume", run)
    assert resumed.returncode == 0 and resumed.stdout == "completed\n", resumed.stderr
    assert receipts(db, run) == {"P-1": ("Succeeded", None)}
    assert [e["order"] for e in effects(tmp_path)] == ["P-1"]


def test_approve_no_resume_then_resume_in_another_process_runs_the_call(
    setup: tuple[Path, Db, dict[str, str]], tmp_path: Path
) -> None:
    folder, db, env = setup
    agent = human_agent(folder, "desk", [["C-1"]])
    run = run_id_of(oarlock(db, env, "run", str(agent), "pay C-1"))
    approved = oarlock(db, env, "approve", run, "call_1_1", "--no-resume")
    assert approved.returncode == 0, approved.stderr
    assert "made your approver key" in approved.stderr
    kid = assert_user_key_made(env)
    [approval] = human_approvals(db, run)
    assert approval["keyId"] == kid and approval["principal"].startswith("user:")
    resumed = oarlock(db, env, "resume", run)
    assert resumed.returncode == 0 and f"run {run}: completed" in resumed.stdout, resumed
    assert receipts(db, run) == {"C-1": ("Succeeded", None)}
    assert [e["order"] for e in effects(tmp_path)] == ["C-1"]
    # the key is made once: the next approval uses it, and says nothing about it
    again = human_agent(folder, "again", [["C-2"]])
    second = run_id_of(oarlock(db, env, "run", str(again), "pay C-2"))
    out = oarlock(db, env, "approve", second, "call_1_1")
    assert out.returncode == 0 and "made your approver key" not in out.stderr, out
    assert human_approvals(db, second)[0]["keyId"] == kid
    assert trusted_ids(env) == {kid: ("*",)}


def test_two_calls_of_one_turn_approved_with_the_commands_the_cli_prints_both_run(
    setup: tuple[Path, Db, dict[str, str]], tmp_path: Path
) -> None:
    folder, db, env = setup
    agent = human_agent(folder, "desk", [["T-1", "T-2"]])
    started = oarlock(db, env, "run", str(agent), "pay T-1 and T-2")
    run = run_id_of(started)
    waiting = re.findall(r"waiting for a decision on (\S+):", started.stdout)
    assert waiting == ["call_1_1", "call_1_2"], started.stdout
    [printed] = [line for line in started.stdout.splitlines() if "decide with:" in line]
    first = printed.split("decide with: ")[1].split("  |  ")[0].replace("CALL_ID", "call_1_1")
    out = subprocess.run(
        [sys.executable, "-m", "oarlock.cli", *shlex.split(first)[1:]],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert f"run {run}: waiting_approval" in out.stdout  # the other call still waits
    [printed] = [line for line in out.stdout.splitlines() if "decide with:" in line]
    second = printed.split("decide with: ")[1].split("  |  ")[0]  # as printed: call_1_2
    assert shlex.split(second)[-2:] == [run, "call_1_2"], second
    out = subprocess.run(
        [sys.executable, "-m", "oarlock.cli", *shlex.split(second)[1:]],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode == 0 and f"run {run}: completed" in out.stdout, out
    assert receipts(db, run) == {"T-1": ("Succeeded", None), "T-2": ("Succeeded", None)}
    assert sorted(e["order"] for e in effects(tmp_path)) == ["T-1", "T-2"]


# -- what a database writer writes is still refused ---------------------------------------


@pytest.mark.parametrize("forgery", ["unsigned", "another key"])
def test_a_forged_approval_row_is_denied_once_the_users_key_is_trusted(
    setup: tuple[Path, Db, dict[str, str]], tmp_path: Path, forgery: str
) -> None:
    folder, db, env = setup
    agent = human_agent(folder, "desk", [["F-1"]])
    first = run_id_of(oarlock(db, env, "run", str(agent), "pay F-1"))
    made = oarlock(db, env, "approve", first, "call_1_1")  # the user's key made, trusted
    assert made.returncode == 0 and "made your approver key" in made.stderr, made.stderr
    kid = assert_user_key_made(env)
    forged = human_agent(folder, "forged", [["F-2"]])
    run = run_id_of(oarlock(db, env, "run", str(forged), "pay F-2"))
    approval = Approval(
        approval_id=str(uuid.uuid4()),
        run_id=run,
        tool_call_id="call_1_1",
        tool_id="pay",
        arguments_hash=digest({"order": "F-2", "amount": 5}),
        scope=human_approvals(db, first)[0]["scope"],
        decided_by="human",
        principal="user:ana",
        decided_at=now_rfc3339(),
    )
    if forgery == "another key":
        approval = ApproverKey.generate("user:ana").sign(approval)
        assert approval.key_id is not None and approval.key_id != kid
    forge(db, run, approval)
    resumed = oarlock(db, env, "resume", run)
    assert resumed.returncode == 0, resumed.stderr
    assert receipts(db, run) == {"F-2": ("Denied", "approval_unauthenticated")}
    assert [e["order"] for e in effects(tmp_path)] == ["F-1"]  # the first run's, only


# -- the key is made once ------------------------------------------------------------------

FIRST_USE = (
    "from oarlock.governance._userkey import user_key; k = user_key(); print(k.key_id, k.made)"
)


@pytest.mark.parametrize("attempt", range(3))
def test_concurrent_first_use_makes_one_key(tmp_path: Path, attempt: int) -> None:
    env = environment(tmp_path)
    done = together(tmp_path / "barrier", env, *[["--python", FIRST_USE]] * 3)
    assert [p.returncode for p in done] == [0, 0, 0], [p.stderr for p in done]
    said = [p.stdout.split() for p in done]
    assert len({kid for kid, _ in said}) == 1, said  # one key, used by all three
    assert sorted(made for _, made in said) == ["False", "False", "True"], said
    assert_user_key_made(env)  # and trusted once
    left = sorted(p.name for p in config(env).iterdir())
    assert left == [".approver.key.lock", ".approvers.yaml.lock", "approver.key",
                    "approver.key.pub", "approvers.yaml"], left  # fmt: skip


def test_an_unmakeable_key_is_said_and_no_resume_is_refused(
    setup: tuple[Path, Db, dict[str, str]], tmp_path: Path
) -> None:
    folder, db, env = setup
    if os.geteuid() == 0:  # root writes anywhere: the configuration home is a file
        Path(env["XDG_CONFIG_HOME"]).write_text("not a folder")
    else:
        Path(env["XDG_CONFIG_HOME"]).mkdir(mode=0o500)
    agent = human_agent(folder, "desk", [["U-1"]])
    run = run_id_of(oarlock(db, env, "run", str(agent), "pay U-1"))
    refused = oarlock(db, env, "approve", run, "call_1_1", "--no-resume")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "cannot make the approver key" in refused.stderr, refused.stderr
    assert "--no-resume" in refused.stderr and human_approvals(db, run) == []
    # acted on here: signed with this process's own key, and said so
    out = oarlock(db, env, "approve", run, "call_1_1")
    assert out.returncode == 0 and f"run {run}: completed" in out.stdout, out
    assert "this process's own key" in out.stderr
    assert receipts(db, run) == {"U-1": ("Succeeded", None)}


# -- two approvals of one call at once -----------------------------------------------------


@pytest.mark.parametrize("attempt", ["at once 1", "at once 2", "at once 3", "holder slow"])
def test_two_approvals_of_one_call_at_once_record_one_and_lose_none(
    setup: tuple[Path, Db, dict[str, str]], tmp_path: Path, attempt: str
) -> None:
    """Started together: whoever wins, one decision, driven to the end. "holder slow":
    the first takes the run's lease and is slow to decide, so the second, finding the run
    held, decides first and leaves the run to the first, which is then refused."""
    folder, db, env = setup
    if attempt == "holder slow":
        env = {**env, "RACER_SLOW_p0": "1.0", "RACER_LATE_p1": "0.4"}
    agent = human_agent(folder, "desk", [["R-1"]])
    run = run_id_of(oarlock(db, env, "run", str(agent), "pay R-1"))
    both = together(
        tmp_path / "barrier", env,
        ["--db", str(db), "approve", run, "call_1_1"],
        ["--db", str(db), "approve", run, "call_1_1"],
    )  # fmt: skip
    codes = sorted(p.returncode for p in both)
    assert codes == [0, 1], [(p.returncode, p.stdout, p.stderr) for p in both]
    loser = next(p for p in both if p.returncode == 1)
    if attempt == "holder slow":
        assert both[0] is loser and "being driven by proc:" in both[1].stdout, both
    assert any(w in loser.stderr for w in ("already", "not waiting", "no pending")), loser
    assert "Traceback" not in loser.stderr
    assert len(human_approvals(db, run)) == 1
    listed = json.loads(oarlock(db, env, "runs", "list", "--json").stdout)
    [(status, holder)] = [(r["status"], r.get("holder")) for r in listed if r["id"] == run]
    assert (status, holder) == ("completed", None), listed  # no lease left behind
    assert receipts(db, run) == {"R-1": ("Succeeded", None)}
    assert [e["order"] for e in effects(tmp_path)] == ["R-1"]  # run once


# -- oarlock keys create ---------------------------------------------------------------------


def _create(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "oarlock.cli", "keys", "create", *args],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_keys_create_whose_reader_went_away_leaves_its_key_trusted(tmp_path: Path) -> None:
    env = environment(tmp_path)  # unbuffered: each line written as it is printed
    proc = subprocess.Popen(
        [sys.executable, "-m", "oarlock.cli", "keys", "create", "--as", "user:ana"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the first line: SIGPIPE (EPIPE)
    proc.wait(60)
    proc.stderr.close()
    key = config(env) / "approver.key"
    assert key.exists() and key.with_name("approver.key.pub").exists()
    assert trusted_ids(env) == {ApproverKey.load(key, "x").key_id: ("user:ana",)}
    # and through a shell pipe, as a user would
    shell = subprocess.run(
        f"{shlex.quote(sys.executable)} -m oarlock.cli keys create {tmp_path}/b.key "
        "--as user:bob | head -1",
        shell=True, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert shell.stdout.startswith("approver key ed25519:"), shell
    bob = ApproverKey.load(tmp_path / "b.key", "x").key_id
    assert trusted_ids(env)[bob] == ("user:bob",)


def test_keys_create_again_completes_or_refuses_a_half_made_key_clearly(tmp_path: Path) -> None:
    env = environment(tmp_path)
    key = config(env) / "approver.key"
    pub = key.with_name("approver.key.pub")
    # a key left without its trust entry (as an interrupted run of an older oarlock left it)
    assert _create(env, "--no-trust", "--as", "user:ana").returncode == 0
    assert not (config(env) / "approvers.yaml").exists()
    out = _create(env, "--as", "user:ana")
    assert out.returncode == 0, out.stderr
    assert "interrupted keys create, completed" in out.stdout
    kid = ApproverKey.load(key, "x").key_id
    assert trusted_ids(env) == {kid: ("user:ana",)}
    # complete now: a rerun refuses, naming the key and its trust, and changes nothing
    before = (config(env) / "approvers.yaml").read_bytes()
    out = _create(env, "--as", "user:ana")
    assert out.returncode == 1 and f"already holds approver key {kid}" in out.stderr
    assert "not overwritten" in out.stderr and "Traceback" not in out.stderr
    assert (config(env) / "approvers.yaml").read_bytes() == before
    # its .pub lost: written again
    pub.unlink()
    out = _create(env, "--as", "user:ana")
    assert out.returncode == 1 and ".pub written again" in out.stderr, out.stderr
    assert ApproverKey.load(key, "x").public_key == _public(pub)
    # trusted for another principal: said, not changed
    out = _create(env, "--as", "user:bob")
    assert out.returncode == 1 and "for user:ana, not for user:bob" in out.stderr
    # a .pub without its key
    key.unlink()
    out = _create(env, "--as", "user:ana")
    assert out.returncode == 1 and "exists without its private key" in out.stderr
    # a key file this user did not keep private is not trusted by a rerun
    pub.unlink()
    other = tmp_path / "shared.key"
    assert _create(env, str(other), "--no-trust").returncode == 0
    other.chmod(0o644)
    out = _create(env, str(other))
    assert out.returncode == 1 and "not this user's private file" in out.stderr
    assert ApproverKey.load(other, "x").key_id not in trusted_ids(env)


def _public(pub: Path) -> Any:
    from oarlock.governance._ledger import load_public_key

    return load_public_key(pub.read_text())


def test_a_key_killed_before_its_files_leaves_a_harmless_entry_and_a_rerun_works(
    tmp_path: Path,
) -> None:
    """Killed after the trust entry, before the key file: the entry trusts a key that
    was only in the dead process's memory; the next run makes a key as if nothing."""
    env = environment(tmp_path)
    stopper = (
        "import os, oarlock.governance._userkey as u\n"
        "real = u.write_new\n"
        "def stop(path, data, mode):\n"
        "    os.kill(os.getpid(), 9)\n"
        "u.write_new = stop\n"
        "from oarlock.cli import main\n"
        "main(['keys', 'create', '--as', 'user:ana'])\n"
    )
    killed = subprocess.run([sys.executable, "-c", stopper], env=env, timeout=60, check=False)
    assert killed.returncode == -signal.SIGKILL
    assert not (config(env) / "approver.key").exists()
    [orphan] = trusted_ids(env)
    out = _create(env, "--as", "user:ana")
    assert out.returncode == 0, out.stderr
    kid = ApproverKey.load(config(env) / "approver.key", "x").key_id
    assert set(trusted_ids(env)) == {orphan, kid}


# -- a decision recorded while another process holds the run: the holder drives it ---------

PAID: list[str] = []


def _paying_agent(*orders: str) -> Any:
    from oarlock.engine import Agent
    from oarlock.models import ScriptedModel
    from oarlock.tools import tool

    @tool(side_effect="spend")
    def pay(order: str) -> str:
        """Pay."""
        PAID.append(order)
        return f"paid {order}"

    calls = [{"name": "pay", "arguments": {"order": o}} for o in orders]
    model = ScriptedModel([{"tool_calls": calls}, {"text": "done"}])
    return Agent("desk", model, tools=[pay], tenant="acme")


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Db:
    return tmp_path / "runs.db" if request.param == "sqlite" else pgtest.new_database()


def _gated(runner: Any, gate: Any, *, after: bool) -> None:
    """Make ``runner``'s decision wait for ``gate``: before it is recorded, or after."""
    real = runner._decide

    async def gated(*args: Any, **kwargs: Any) -> Any:
        if not after:
            await gate.wait()
        doc = await real(*args, **kwargs)
        if after:
            await gate.wait()
        return doc

    runner._decide = gated


async def test_a_holder_refused_as_decided_drives_the_decision_made_meanwhile(db: Db) -> None:
    """A takes the run's lease to approve; B, finding the run held, records its approval of
    the same call first and leaves the run to A; A is refused (already decided), gives the
    lease back, and drives B's decision: the call runs once, nothing is left undriven."""
    import asyncio

    from oarlock.engine import Runner
    from oarlock.errors import DecisionRefused

    PAID.clear()
    agent = _paying_agent("H-1")
    async with open_db(db) as store:
        doc = await Runner(agent, store).start("pay")
        assert doc.status == "waiting_approval"
        a, b = Runner(agent, store, owner="test:A"), Runner(agent, store, owner="test:B")
        gate = asyncio.Event()
        _gated(a, gate, after=False)
        first = asyncio.ensure_future(a.decide(doc.id, "call_1_1", "approved", resume=True))
        while not [lease for lease in await store.leases() if lease.owner == "test:A"]:
            await asyncio.sleep(0.01)  # A holds the run, its decision not yet made
        left = await b.decide(doc.id, "call_1_1", "approved", resume=True)
        assert left.status == "running" and PAID == []  # B's decision, left to A
        gate.set()
        with pytest.raises(DecisionRefused) as refused:
            await first
        assert refused.value.code == "already_decided"
        done = await store.load(doc.id)
        assert done.document.status == "completed" and PAID == ["H-1"]
        assert await store.leases() == []


async def test_a_holder_whose_decision_left_the_run_waiting_drives_the_last_one(db: Db) -> None:
    """Two calls of one turn: A approves the first (the run still waits) and still holds
    the run when B approves the second; A, once it gave the run back, drives it."""
    import asyncio

    from oarlock.engine import Runner

    PAID.clear()
    agent = _paying_agent("W-1", "W-2")
    async with open_db(db) as store:
        doc = await Runner(agent, store).start("pay")
        a, b = Runner(agent, store, owner="test:A"), Runner(agent, store, owner="test:B")
        gate = asyncio.Event()
        _gated(a, gate, after=True)
        first = asyncio.ensure_future(a.decide(doc.id, "call_1_1", "approved", resume=True))
        while len((await store.load(doc.id)).document.pending_approvals) != 2 or not [
            p for p in (await store.load(doc.id)).document.pending_approvals if p.decision
        ]:
            await asyncio.sleep(0.01)  # A's decision recorded, A still holding the run
        left = await b.decide(doc.id, "call_1_2", "approved", resume=True)
        assert left.status == "running" and PAID == []
        gate.set()
        done = await first
        assert done.status == "completed" and sorted(PAID) == ["W-1", "W-2"]
        assert await store.leases() == []


# -- the server signs with the user's key: its decisions outlive it ---------------------------


def test_a_decision_of_oarlock_serve_without_key_is_honoured_after_it_stopped(
    tmp_path: Path,
) -> None:
    import httpx

    from server_kit import serve_process

    with serve_process(tmp_path, "--no-worker") as served:
        auth = {"Authorization": f"Bearer {served.token('approver', 'ana')}"}
        starter = {"Authorization": f"Bearer {served.token('operator', 'ops')}"}
        with httpx.Client(base_url=served.url, timeout=30) as c:
            made = c.post(
                "/v1/runs", headers=starter, json={"agent": "refund-desk", "input": "Refund"}
            )
            run = made.json()["id"]
        drove = subprocess.run(
            [sys.executable, "-m", "oarlock.cli", "--db", str(served.db), "resume", run],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert "waiting_approval" in drove.stdout, drove
        with httpx.Client(base_url=served.url, headers=auth, timeout=30) as c:
            doc = c.get(f"/v1/runs/{run}").json()
            call = doc["pendingApprovals"][0]["toolCallId"]
            version = c.get(f"/v1/approvals/{run}/{call}").json()["version"]
            r = c.post(
                f"/v1/approvals/{run}/{call}/decision",
                headers={"If-Match": version},
                json={"decision": "approved"},
            )
            assert r.status_code == 200, r.text
    said = (tmp_path / "serve.log").read_text()
    assert "decisions signed with approver key ed25519:" in said, said
    key = Path(os.environ["XDG_CONFIG_HOME"]) / "oarlock" / "approver.key"
    kid = ApproverKey.load(key, "x").key_id
    [approval] = human_approvals(tmp_path / "runs.db", run)
    assert (approval["keyId"], approval["principal"]) == (kid, "ana")
    # the server is gone: another process acts on its decision
    out = subprocess.run(
        [sys.executable, "-m", "oarlock.cli", "--db", str(tmp_path / "runs.db"), "resume", run],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode == 0 and f"run {run}: completed" in out.stdout, out
    listed = subprocess.run(
        [sys.executable, "-m", "oarlock.cli", "--db", str(tmp_path / "runs.db"), "receipts",
         "list", "--run", run, "--json"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    refunds = [x for x in json.loads(listed.stdout) if x.get("tool") == "issue_refund"]
    assert [x["status"] for x in refunds] == ["Succeeded"], listed.stdout

"""Trust follows the approvers file, in every process, promptly: a key added is honoured
and a key removed is refused by a process that read the file before the change (a
running ``oarlock worker``, an agent kept in a long-lived process's cache), at the latest
when the approval is checked before its call runs; listings follow within a second. A
file that cannot be read trusts no key."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest
from approver_kit import hold, human_agent, human_approvals, receipts, release
from worker_fleet import (
    Db,
    WorkerProcess,
    effects,
    environment,
    fleet_folder,
    oarlock,
    open_db,
    runs,
    wait_until,
)

import pgtest
from oarlock.engine import Agent, Runner
from oarlock.engine._agentfile import load_agent
from oarlock.engine._run_agents import RunAgents
from oarlock.governance._approvers import (
    ApproverKey,
    TrustedApprovers,
    default_approvers,
    process_approver,
)
from oarlock.governance._ledger import public_key_pem
from oarlock.governance._records import Approval, run_uuid
from oarlock.models import ScriptedModel
from oarlock.testing import MemoryStore
from oarlock.tools import tool

FAST = ("--poll", "0.2", "--heartbeat", "0.2", "--lease", "2")


def write_trust(path: Path, **keys: ApproverKey) -> None:
    """Replace the approvers file at once with entries trusting ``keys`` (by principal)."""
    entries = "".join(
        f"  - principal: {principal}\n    key: |\n"
        + "".join(f"      {text}\n" for text in public_key_pem(k.private_key).splitlines())
        for principal, k in ((k.principal, k) for k in keys.values())
    )
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("approvers:\n" + entries if entries else "approvers: []\n")
    os.replace(tmp, path)


def approval(signer: ApproverKey, run: str = "r1") -> Approval:
    return signer.sign(
        Approval(
            approval_id="a-" + run,
            run_id=run,
            tool_call_id="c1",
            tool_id="pay",
            arguments_hash="sha256:" + "0" * 64,
            scope={},
            decided_by="human",
            principal=signer.principal,
            decided_at="2026-12-01T00:00:00Z",
        )
    )


# -- an approvers file, followed -------------------------------------------------------------


def test_an_approvers_file_is_followed_at_every_check(tmp_path: Path) -> None:
    ana, bob = ApproverKey.generate("user:ana"), ApproverKey.generate("user:bob")
    path = tmp_path / "approvers.yaml"
    write_trust(path, ana=ana)
    trusted = TrustedApprovers.from_file(path)
    assert trusted.trusts(ana) and not trusted.trusts(bob)
    write_trust(path, ana=ana, bob=bob)  # added: honoured at once
    assert trusted.trusts(bob) and trusted.problem(approval(bob)) is None
    write_trust(path, bob=bob)  # removed: refused at once
    assert not trusted.trusts(ana)
    assert "not a trusted key" in str(trusted.problem(approval(ana)))
    path.write_text("approvers: [\n")  # broken: no key at all, and the refusal says why
    problem = trusted.problem(approval(bob))
    assert not trusted.trusts(bob) and problem is not None and "not valid YAML" in problem
    write_trust(path, bob=bob)  # mended
    assert trusted.trusts(bob)
    path.unlink()  # gone: no key
    assert "no such approvers file" in str(trusted.problem(approval(bob)))
    assert not trusted.trusts(bob)


def test_a_listing_follows_the_file_within_a_second(tmp_path: Path) -> None:
    ana, bob = ApproverKey.generate("user:ana"), ApproverKey.generate("user:bob")
    path = tmp_path / "approvers.yaml"
    write_trust(path, ana=ana)
    trusted = TrustedApprovers.from_file(path)
    assert [k.key_id for k in trusted.entries()] == [ana.key_id]
    write_trust(path, bob=bob)
    changed = time.monotonic()
    while [k.key_id for k in trusted.entries()] != [bob.key_id]:
        assert time.monotonic() - changed < 1.5, "a listing missed the change for 1.5 s"
        time.sleep(0.02)
    assert trusted.trusts(bob)


def test_a_key_file_the_approvers_file_names_is_followed_too(tmp_path: Path) -> None:
    ana, other = ApproverKey.generate("user:ana"), ApproverKey.generate("user:ana")
    pub = tmp_path / "ana.pub"
    pub.write_text(public_key_pem(ana.private_key))
    (tmp_path / "approvers.yaml").write_text(
        "approvers:\n  - {principal: user:ana, key: ana.pub}\n"
    )
    trusted = TrustedApprovers.from_file(tmp_path / "approvers.yaml")
    assert trusted.trusts(ana)
    tmp = tmp_path / "ana.pub.tmp"
    tmp.write_text(public_key_pem(other.private_key))
    os.replace(tmp, pub)  # the key file now holds another key
    assert trusted.trusts(other) and not trusted.trusts(ana)


def test_the_default_trust_follows_the_users_file_and_keeps_this_process(tmp_path: Path) -> None:
    ana = ApproverKey.generate("user:ana")
    trusted = default_approvers()
    mine = process_approver("anyone")
    users = Path(os.environ["XDG_CONFIG_HOME"]) / "oarlock" / "approvers.yaml"
    assert not users.exists()
    assert trusted.trusts(mine) and not trusted.trusts(ana)
    users.parent.mkdir(parents=True)
    write_trust(users, ana=ana)  # made after the trust was first asked
    assert trusted.trusts(ana) and trusted.trusts(mine)
    write_trust(users)
    assert not trusted.trusts(ana) and trusted.trusts(mine)


# -- the agents a long-lived process keeps ----------------------------------------------------

PAID: list[str] = []


@tool(side_effect="spend")
def pay(order: str) -> str:
    """Pay."""
    PAID.append(order)
    return f"paid {order}"


def _agent(approvers: TrustedApprovers | None = None) -> Agent:
    model = ScriptedModel(
        [{"tool_calls": [{"name": "pay", "arguments": {"order": "A-1"}}]}, {"text": "done"}]
    )
    return Agent("desk", model, tools=[pay], tenant="acme", approvers=approvers)


async def test_an_approval_whose_key_is_removed_before_its_call_runs_is_denied(
    tmp_path: Path,
) -> None:
    """The same agent object throughout, as a worker keeps it: approved while trusted,
    the key removed, then resumed: Denied; the key added again: a new approval runs."""
    PAID.clear()
    ana = ApproverKey.generate("user:ana")
    path = tmp_path / "approvers.yaml"
    write_trust(path, ana=ana)
    agent, store = _agent(TrustedApprovers.from_file(path)), MemoryStore()
    doc = await Runner(agent, store).start("pay")
    await Runner(agent, store, approver=ana).decide(doc.id, "call_1_1", "approved")
    write_trust(path)  # revoked after the approval was recorded
    done = await Runner(agent, store).resume(doc.id)
    assert done.status == "completed" and PAID == []
    [item] = await store.governance().receipts(run_id=run_uuid(doc.id))
    assert (item.status, item.receipt["error"]["code"]) == ("Denied", "approval_unauthenticated")
    write_trust(path, ana=ana)  # trusted again: the next run's approval runs
    doc = await Runner(agent, store).start("pay")
    done = await Runner(agent, store, approver=ana).decide(
        doc.id, "call_1_1", "approved", resume=True
    )
    assert done.status == "completed" and PAID == ["A-1"]


async def test_the_cached_agent_of_a_run_follows_the_users_approvers_file(
    tmp_path: Path,
) -> None:
    """``RunAgents`` (what a worker and a Temporal worker keep, one agent per agent file
    until the file changes): the agent loaded before a key was added trusts it after."""
    folder = fleet_folder(tmp_path)
    path = human_agent(folder, "desk", [["G-1"]])
    store = MemoryStore()
    doc, _ = await Runner(load_agent(path), store).create("pay", agent_ref=str(path))
    agents = RunAgents()
    first = await agents.of(await store.load(doc.id))
    ana = ApproverKey.generate("user:ana")
    executor = Runner(first, store).executor
    assert not executor.approvers.trusts(ana)  # type: ignore[attr-defined]
    users = Path(os.environ["XDG_CONFIG_HOME"]) / "oarlock" / "approvers.yaml"
    users.parent.mkdir(parents=True)
    write_trust(users, ana=ana)
    again = await agents.of(await store.load(doc.id))
    assert again is first  # the cache kept the agent ...
    assert Runner(again, store).executor.approvers.trusts(ana)  # type: ignore[attr-defined]
    write_trust(users)  # ... and its trust follows the file
    assert not Runner(again, store).executor.approvers.trusts(ana)  # type: ignore[attr-defined]
    await agents.aclose()


# -- a real worker, running across the changes ---------------------------------------------


@pytest.fixture(params=[("sqlite", "user's file"), ("postgresql", "agent's file")], ids="-".join)
def fleet(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, Db, dict[str, str], str]:
    backend, trust = request.param
    db: Db = tmp_path / "runs.db" if backend == "sqlite" else pgtest.new_database()
    return fleet_folder(tmp_path), db, environment(tmp_path), trust


def test_a_running_worker_honours_keys_added_and_refuses_keys_removed(
    fleet: tuple[Path, Db, dict[str, str], str], tmp_path: Path
) -> None:
    folder, db, env, trust = fleet
    users = Path(env["XDG_CONFIG_HOME"]) / "oarlock" / "approvers.yaml"
    approvers = users if trust == "user's file" else folder / "team.yaml"
    if trust == "agent's file":
        approvers.write_text("approvers: []\n")
    named = None if trust == "user's file" else approvers.name

    def started(order: str) -> str:
        """A run submitted, driven by the worker until it waits for a human."""
        agent = human_agent(folder, order, [[order]], approvers=named)
        out = oarlock(db, env, "run", str(agent), f"pay {order}", "--detach")
        assert out.returncode == 0, out.stderr
        run = out.stdout.split()[1]
        wait_until(lambda: status(run) == "waiting_approval")
        return run

    def key(name: str) -> list[str]:
        """A key made while the worker runs, trusted for user:NAME; its --key."""
        path = tmp_path / f"{name}.key"
        made = oarlock(db, env, "keys", "create", str(path), "--as", f"user:{name}",
                       "--approvers", str(approvers))  # fmt: skip
        assert made.returncode == 0, made.stderr
        return ["--key", str(path)]

    def status(run: str) -> str:
        return str(next(r["status"] for r in runs(db, env) if r["id"] == run))

    asyncio.run(_made(db))
    worker = WorkerProcess(db, env, *FAST)
    try:
        worker.wait_for(" started: ")
        # a key made after the worker started (for the user's file: made on first use)
        first = started("K-1")
        signing = [] if trust == "user's file" else key("ana")
        out = oarlock(db, env, "approve", first, "call_1_1", "--no-resume", *signing)
        assert out.returncode == 0, out.stderr
        wait_until(lambda: status(first) == "completed")
        assert receipts(db, first) == {"K-1": ("Succeeded", None)}
        signer = human_approvals(db, first)[0]["keyId"]

        # the key removed between the approval and the worker's pickup of the run
        second = started("K-2")
        lease = hold(db, second)
        out = oarlock(db, env, "approve", second, "call_1_1", "--no-resume", *signing)
        assert out.returncode == 0, out.stderr
        assert human_approvals(db, second)[0]["keyId"] == signer
        tmp = approvers.with_name(approvers.name + ".tmp")
        tmp.write_text("approvers: []\n")
        os.replace(tmp, approvers)  # revoked
        release(db, lease)
        wait_until(lambda: status(second) == "completed")
        assert receipts(db, second) == {"K-2": ("Denied", "approval_unauthenticated")}

        # a key added to the file afterwards: honoured
        third = started("K-3")
        out = oarlock(db, env, "approve", third, "call_1_1", "--no-resume", *key("bob"))
        assert out.returncode == 0, out.stderr
        wait_until(lambda: status(third) == "completed")
        assert receipts(db, third) == {"K-3": ("Succeeded", None)}
        assert worker.proc.poll() is None  # the same worker throughout
    finally:
        assert worker.stop() == 0
    assert [e["order"] for e in effects(tmp_path)] == ["K-1", "K-3"]
    assert all(worker.said(f"run {run}: completed") for run in (first, second, third))


async def _made(db: Db) -> None:
    """The database made, so that the worker finds it."""
    async with open_db(db):
        pass

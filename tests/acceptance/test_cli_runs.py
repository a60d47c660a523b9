"""The ``oarlock`` command end to end: real processes, a database in tmp_path, the bundled
refund desk demo, and no ``OARLOCK_DB`` in the environment."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from oarlock.demo import AGENT_FILE
from oarlock.errors import IntegrityError
from oarlock.formats import dump
from oarlock.governance._records import Approval
from oarlock.governance._sanitize import unfence
from oarlock.store import SQLiteStore

TIMEOUT = 60
CALL = "call_2_1"  # the refund call of the demo script
FINAL = "Done. I refunded the full amount for order A-1001"


class Cli:
    def __init__(self, tmp: Path) -> None:
        self.db = tmp / "data" / "runs.db"
        self.xdg = tmp / "xdg"
        self.xdg.mkdir()
        self.env = {k: v for k, v in os.environ.items() if k != "OARLOCK_DB"}
        self.env["XDG_DATA_HOME"] = str(self.xdg)  # a default database would land here
        self.env["XDG_CONFIG_HOME"] = str(tmp / "config")  # and an approver's key here
        for name in ("OARLOCK_APPROVER_KEY", "OARLOCK_APPROVERS", "OARLOCK_PRINCIPAL"):
            self.env.pop(name, None)

    def make_key(self, principal: str = "user:ana") -> str:
        """``oarlock keys create``: the user's approver key, trusted for ``principal``."""
        return self.ok("keys", "create", "--as", principal)

    def __call__(
        self, *args: str, stdin: str | None = None, db: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "oarlock.cli", *(["--db", str(self.db)] if db else []), *args],
            input=stdin,
            stdin=None if stdin is not None else subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            env=self.env,
            check=False,
        )

    def ok(self, *args: str, stdin: str | None = None) -> str:
        out = self(*args, stdin=stdin)
        assert out.returncode == 0, (args, out.stdout, out.stderr)
        return out.stdout

    def snapshot(self, run_id: str) -> tuple[dict[str, Any], list[Any], list[Any]]:
        """The stored document, its event log and the governance ledger (approvals,
        invocations, receipts), read in this process (cheaper than a CLI)."""

        async def go() -> tuple[dict[str, Any], list[Any], list[Any]]:
            async with SQLiteStore(self.db) as store:
                doc = (await store.load(run_id)).document
                events = await store.events(run_id)
                ledger = await store.governance().ledger()
                return (
                    dump(doc),
                    [(e.seq, e.kind, e.at, e.data) for e in events],
                    [(e.seq, e.kind, e.body) for e in ledger],
                )

        return asyncio.run(go())

    def rows(self) -> list[tuple[Any, ...]]:
        """Every row of the runs table as stored: documents, versions, leases."""
        with sqlite3.connect(self.db) as conn:
            return conn.execute("SELECT * FROM runs ORDER BY num").fetchall()

    def export(self, run_id: str) -> dict[str, Any]:
        doc = json.loads(self.ok("runs", "export", run_id))
        assert isinstance(doc, dict)
        return doc

    def runs(self, *filters: str) -> list[dict[str, Any]]:
        found = json.loads(self.ok("runs", "list", *filters, "--json"))
        assert isinstance(found, list)
        return found


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path)


def leave_waiting(cli: Cli) -> str:
    """``oarlock demo`` with stdin not a terminal and no --yes: the run is left waiting."""
    out = cli("demo")
    assert out.returncode == 0, out.stderr
    assert "left waiting" in out.stdout
    [summary] = cli.runs("--status", "waiting_approval")
    run_id = summary["id"]
    assert isinstance(run_id, str)
    assert f"approve {run_id} {CALL}" in out.stdout
    return run_id


@pytest.fixture
def waiting(cli: Cli) -> str:
    """A waiting run of its own, for a test that changes it."""
    return leave_waiting(cli)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Cli, str]:
    """One waiting run shared by the tests whose commands must change nothing (each
    checks that they did not)."""
    cli = Cli(tmp_path_factory.mktemp("shared"))
    return cli, leave_waiting(cli)


def completed_run(cli: Cli) -> str:
    out = cli("demo", "--yes")
    assert out.returncode == 0, out.stderr
    [summary] = cli.runs("--status", "completed")
    return str(summary["id"])


# --- demo ------------------------------------------------------------------------------


def test_demo_yes_completes_and_prints_the_answer_the_usage_and_the_database(cli: Cli) -> None:
    out = cli("demo", "--yes")
    assert out.returncode == 0, out.stderr
    assert FINAL in out.stdout
    assert "usage: 1643 input tokens, 143 output tokens" in out.stdout
    assert str(cli.db) in out.stdout
    assert cli.db.exists()
    assert not any(cli.xdg.iterdir()), "the default database was used despite --db"
    [summary] = cli.runs()
    assert summary["status"] == "completed"
    assert summary["tags"] == {"demo": "refund-desk"}


def test_demo_without_a_terminal_leaves_the_run_waiting(cli: Cli, waiting: str) -> None:
    doc = cli.export(waiting)
    assert doc["status"] == "waiting_approval"
    [appr] = doc["pendingApprovals"]
    assert appr["toolCallId"] == CALL
    assert "decision" not in appr
    assert cli.runs("--status", "completed") == []


# --- decisions -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "edit",
    [
        '{"order_id": "A-1001", "amount": "all of it", "reason": "broken"}',  # wrong type
        '{"order_id": "A-1001", "amount": 10}',  # a required argument missing
    ],
    ids=["wrong-type", "missing"],
)
def test_approve_with_invalid_edited_arguments_fails_and_changes_nothing(
    shared: tuple[Cli, str], edit: str
) -> None:
    cli, waiting = shared
    before = cli.ok("runs", "export", waiting)
    events_before = cli.ok("runs", "show", waiting)
    stored_before = cli.snapshot(waiting)
    out = cli("approve", waiting, CALL, "--edit", edit)
    assert out.returncode == 1, (out.stdout, out.stderr)
    assert "edited arguments refused" in out.stderr
    assert cli.ok("runs", "export", waiting) == before
    assert cli.ok("runs", "show", waiting) == events_before
    assert cli.snapshot(waiting) == stored_before  # no approval kept either


def test_approve_with_an_edit_that_is_not_a_json_object_is_a_usage_error(
    shared: tuple[Cli, str],
) -> None:
    cli, waiting = shared
    before = cli.snapshot(waiting)
    for edit in ("{not json", "[1, 2]"):
        out = cli("approve", waiting, CALL, "--edit", edit)
        assert out.returncode == 2, (edit, out.stdout, out.stderr)
        assert "--edit" in out.stderr
    assert cli.snapshot(waiting) == before


def test_approve_with_valid_edited_arguments_completes_with_them(cli: Cli, waiting: str) -> None:
    edit = {"order_id": "A-1001", "amount": 20.0, "reason": "partly broken"}
    out = cli("approve", waiting, CALL, "--edit", json.dumps(edit))
    assert out.returncode == 0, out.stderr
    assert f"{CALL}: approved" in out.stdout
    doc = cli.export(waiting)
    assert doc["status"] == "completed"
    [result] = [
        p
        for m in doc["messages"]
        for p in m["content"]
        if p.get("toolCallId") == CALL and p["type"] == "tool_result"
    ]
    assert not result.get("isError"), result
    assert json.loads(unfence(result["content"]))["amount"] == 20.0
    # the call as the model made it is unchanged; the approval carries the edit
    [call] = [p for m in doc["messages"] for p in m["content"] if p.get("id") == CALL]
    assert call["arguments"]["amount"] == 42.5
    shown = cli.ok("runs", "show", waiting)
    assert "arguments edited to" in shown
    assert '"amount": 20.0' in shown
    assert "partly broken" in shown
    # the decision stays with the exported document: who, when, on what
    [decision] = doc["decisions"]
    assert decision["toolCallId"] == CALL and decision["decision"] == "approved"
    assert decision["arguments"]["amount"] == 42.5 and decision["editedArguments"] == edit
    assert decision["principal"].startswith("user:") and decision["decidedAt"]
    assert doc["pendingApprovals"] == []


def test_runs_show_follow_shows_the_decision_and_the_end_as_they_happen(
    cli: Cli, waiting: str
) -> None:
    follower = subprocess.Popen(
        [sys.executable, "-m", "oarlock.cli", "--db", str(cli.db), "runs", "show", waiting,
         "--follow", "--interval", "0.1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli.env,
    )  # fmt: skip
    try:
        assert follower.stdout is not None
        seen = []
        while not any("PENDING" in s for s in seen):  # the timeline so far, then it waits
            seen.append(follower.stdout.readline())
            assert seen[-1], (seen, follower.stderr.read() if follower.stderr else "")
        cli.ok("approve", waiting, CALL, "--as", "user:ana")
        rest, err = follower.communicate(timeout=TIMEOUT)
    finally:
        follower.kill()
    assert follower.returncode == 0, err
    assert f"decision: {CALL} approved by human (user:ana) at " in rest
    assert "status: completed at " in rest
    assert FINAL in rest and "usage:" in rest
    assert rest.index("decision:") < rest.index(FINAL) < rest.index("usage:")


def test_runs_show_follow_of_a_finished_run_shows_it_and_stops(cli: Cli) -> None:
    run_id = completed_run(cli)
    out = cli("runs", "show", run_id, "--follow")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == cli.ok("runs", "show", run_id).strip()


def test_deny_without_a_reason_is_a_usage_error(shared: tuple[Cli, str]) -> None:
    cli, waiting = shared
    before = cli.snapshot(waiting)
    out = cli("deny", waiting, CALL)
    assert out.returncode == 2
    assert "--reason" in out.stderr
    assert cli.snapshot(waiting) == before


def test_deny_with_a_reason_lets_the_model_see_the_denial(cli: Cli, waiting: str) -> None:
    out = cli("deny", waiting, CALL, "--reason", "needs a photo first")
    # the demo script then answers with its last turn: the run completes
    assert out.returncode == 0, out.stderr
    doc = cli.export(waiting)
    [result] = [p for m in doc["messages"] for p in m["content"] if p.get("toolCallId") == CALL]
    assert result["isError"] is True
    assert "needs a photo first" in result["content"]


def test_respond_on_a_tool_that_does_not_allow_it_fails(shared: tuple[Cli, str]) -> None:
    cli, waiting = shared
    before = cli.snapshot(waiting)
    out = cli("respond", waiting, CALL, "refunded by hand")
    assert out.returncode == 1, (out.stdout, out.stderr)
    assert "does not let a human answer" in out.stderr
    assert cli.snapshot(waiting) == before


def test_a_decision_on_an_unknown_call_fails(shared: tuple[Cli, str]) -> None:
    cli, waiting = shared
    before = cli.rows()
    out = cli("approve", waiting, "call_9_9")
    assert out.returncode == 1
    assert "no pending approval" in out.stderr
    assert CALL in out.stderr
    assert cli.rows() == before  # not even the run's lease was taken


def test_continue_or_retry_of_a_waiting_run_is_refused_changing_nothing(
    shared: tuple[Cli, str],
) -> None:
    cli, waiting = shared
    before = cli.rows()
    for args in (("continue", waiting, "and another thing"), ("retry", waiting)):
        out = cli(*args)
        assert out.returncode == 1 and "waiting_approval" in out.stderr, out
        assert cli.rows() == before


def test_approving_for_another_process_signs_with_the_users_own_key(
    cli: Cli, waiting: str
) -> None:
    # no set-up: the user's key is made on first use and trusted in the user's file
    out = cli("approve", waiting, CALL, "--no-resume", "--as", "user:ana")
    assert out.returncode == 0, out.stderr
    assert "made your approver key ed25519:" in out.stderr and "Traceback" not in out.stderr
    assert (cli.xdg.parent / "config" / "oarlock" / "approver.key").stat().st_mode & 0o777 == 0o600
    approvals = [body for _, kind, body in cli.snapshot(waiting)[2] if kind == "approval"]
    assert [a["principal"] for a in approvals] == ["user:ana"]  # the key's principal
    assert approvals[0]["keyId"].startswith("ed25519:") and approvals[0]["signature"]
    assert "completed" in cli.ok("resume", waiting)  # another process honours it
    approvers = str(cli.xdg.parent / "config" / "oarlock" / "approvers.yaml")
    assert cli.ok("audit", "verify", "--approvers", approvers).startswith("ledger ok")

    # a row written by the database's writer: the chain verifies, the signature check not
    async def forge() -> None:
        import dataclasses

        async with SQLiteStore(cli.db) as store:
            genuine = Approval.from_json(approvals[0])
            await store.governance().record_approval(
                dataclasses.replace(
                    genuine, approval_id=str(uuid.uuid4()), tool_call_id="call_x", signature=None
                )
            )

    asyncio.run(forge())
    assert cli("audit", "verify").returncode == 0
    out = cli("audit", "verify", "--approvers", approvers)
    assert out.returncode == 1 and "approval_unauthenticated" in out.stderr
    assert "call_x" in out.stderr


def test_a_second_decision_on_the_same_call_is_refused(cli: Cli, waiting: str) -> None:
    cli.make_key()
    cli.ok("approve", waiting, CALL, "--no-resume")
    before = cli.snapshot(waiting)
    out = cli("deny", waiting, CALL, "--reason", "changed my mind")
    assert out.returncode == 1
    assert "not waiting" in out.stderr or "already" in out.stderr
    assert cli.snapshot(waiting) == before
    assert before[0]["status"] == "running"
    assert "completed" in cli.ok("resume", waiting)
    assert cli.snapshot(waiting)[0]["status"] == "completed"


# --- export, validate, cancel, replay, show ----------------------------------------------


def test_exported_documents_pass_validate(cli: Cli, waiting: str) -> None:
    done = completed_run(cli)
    for run_id in (waiting, done):
        exported = cli.ok("runs", "export", run_id)
        out = cli("validate", "-", stdin=exported)
        assert out.returncode == 0, (out.stdout, out.stderr)
        assert json.loads(exported)["id"] == run_id


def test_cancel_a_waiting_run_then_resume_leaves_it_cancelled(cli: Cli, waiting: str) -> None:
    out = cli("cancel", waiting, "--reason", "customer withdrew")
    assert out.returncode == 0, out.stderr
    assert f"run {waiting}: cancelled" in out.stdout
    cancelled = cli.ok("runs", "export", waiting)
    resumed = cli("resume", waiting)
    assert resumed.returncode == 3, (resumed.stdout, resumed.stderr)  # a run that did not finish
    assert "cancelled" in resumed.stdout
    assert cli.ok("runs", "export", waiting) == cancelled
    doc = json.loads(cancelled)
    assert doc["status"] == "cancelled"
    assert doc["error"] == "customer withdrew"
    # the undecided approval stays; a decision on it is now refused
    late = cli("approve", waiting, CALL)
    assert late.returncode == 1
    assert "not waiting" in late.stderr
    assert cli.ok("runs", "export", waiting) == cancelled
    again = cli("cancel", waiting)
    assert again.returncode == 1
    assert "already cancelled" in again.stderr


def test_replay_of_a_completed_run_reports_no_divergence(cli: Cli) -> None:
    done = completed_run(cli)
    out = cli("replay", done)
    assert out.returncode == 0, (out.stdout, out.stderr)
    assert "no divergence" in out.stdout
    [replay] = cli.runs("--tag", f"replay_of={done}")
    assert replay["status"] == "completed"
    assert replay["id"] != done


def test_runs_show_of_an_unknown_run_fails(shared: tuple[Cli, str]) -> None:
    cli, _ = shared  # a database that exists, with a run in it
    out = cli("runs", "show", "no-such-run")
    assert out.returncode == 1
    assert "no run no-such-run" in out.stderr
    assert cli("resume", "no-such-run").returncode == 1


def test_runs_show_of_a_corrupt_document_fails_as_the_store_refuses_it(cli: Cli) -> None:
    """``runs show`` reads the document without the models when it can; a document it
    cannot vouch for is refused with the store's own error, never shown."""
    done = completed_run(cli)
    shown = cli.ok("runs", "show", done)
    assert shown.startswith(f"run {done}  agent refund-desk")
    doc = cli.export(done)
    doc["turns"] = "three"
    conn = sqlite3.connect(cli.db)
    with conn:
        conn.execute("UPDATE runs SET document = ? WHERE id = ?", (json.dumps(doc), done))
    conn.close()

    async def load() -> None:
        async with SQLiteStore(cli.db) as store:
            await store.load(done)

    with pytest.raises(IntegrityError) as refused:
        asyncio.run(load())
    out = cli("runs", "show", done)
    assert out.returncode == 1
    assert out.stdout == ""
    assert out.stderr == f"oarlock: {refused.value}\n"
    assert "stored document is corrupt" in out.stderr


def test_run_with_a_tag_is_found_by_that_tag(cli: Cli) -> None:
    out = cli("run", str(AGENT_FILE), "Order A-1001 arrived broken.", "--tag", "team=support")
    assert out.returncode == 0, out.stderr
    [found] = cli.runs("--tag", "team=support")
    assert found["tags"] == {"team": "support"}
    assert found["status"] == "waiting_approval"
    assert found["id"] in out.stdout
    assert cli.runs("--tag", "team=billing") == []
    assert cli.runs("--tag", "team=support", "--tag", "tier=gold") == []
    bad = cli("run", str(AGENT_FILE), "hi", "--tag", "nokey")
    assert bad.returncode == 2
    assert "KEY=VALUE" in bad.stderr


def test_run_detach_only_submits_the_run_and_says_to_start_a_worker(cli: Cli) -> None:
    out = cli("run", str(AGENT_FILE), "Order A-1001 arrived broken.", "--detach")
    assert out.returncode == 0, out.stderr
    [created] = cli.runs()
    assert out.stdout == (
        f"run {created['id']} submitted to queue default\n"
        "no worker is running: start one with: oarlock worker\n"
    )
    time.sleep(0.5)  # nothing drives it: no process of its own
    [still] = cli.runs()
    assert (still["status"], still["turns"], still["holder"]) == ("running", 0, None)
    assert still["tenant"] == "demo"
    other = cli("run", str(AGENT_FILE), "x", "--detach", "--queue", "bulk")
    assert other.stdout.endswith("start one with: oarlock worker --queue bulk\n")


def test_main_can_run_twice_in_one_process(cli: Cli) -> None:
    """The command's ``main`` is importable and callable in-process, as tests and embedders
    do; the second call must parse its arguments as the first did."""
    with SQLiteStore(cli.db):
        pass  # an empty database: runs list creates none
    code = (
        "import sys\nfrom oarlock.cli import main\n"
        f"a = main(['--db', {str(cli.db)!r}, 'runs', 'list'])\n"
        f"b = main(['--db', {str(cli.db)!r}, 'runs', 'list'])\n"
        "sys.exit(a or b)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=cli.env,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert out.returncode == 0, out.stderr

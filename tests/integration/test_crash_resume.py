"""Crash and resume with real processes: a driver process runs an agent against an SQLite
file or a PostgreSQL database (each test runs on both) and SIGKILLs itself at a chosen
point; a new process (the CLI) resumes the run; the final document must equal that of a
run that was never interrupted (every fenced tool result unfenced: each call gets its own
nonce), with one exception: an approved spend call killed while it ran is never run
again; its outcome is unknown, an Uncertain receipt says so, and so does the error result
the model gets.

Also: decisions racing from two processes on the same call."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import oarlock
import pgtest
from helpers import unfenced_document, write_approver
from oarlock.formats import dump
from oarlock.governance._records import StoredReceipt
from oarlock.store import SQLiteStore
from oarlock.store._postgres import PostgresStore

DRIVER = Path(__file__).with_name("crash_driver.py")
TIMEOUT = 60
RUN_ID = "crash-run"
INPUT = "Order A-1 arrived damaged; check it and charge the carrier back."
APPROVAL_CALL = "call_2_1"
# every tool call of the script, once each
BASELINE_CALLS = ["lookup_order", "stock_level", "fragile_report", "charge_back", "lookup_order"]
VOLATILE = frozenset({"id", "createdAt", "updatedAt", "requestedAt", "decidedAt"})
TERMINAL = frozenset({"completed", "failed", "halted_budget", "halted_max_turns", "cancelled"})

TOOLS = '''
"""Deterministic tools of the crash tests; CRASH_IN_TOOL=<name> SIGKILLs inside <name>.
Every call that starts appends the tool's name to the file CRASH_CALL_LOG names."""

import os
import signal

from oarlock.tools import tool


def _maybe_die(name: str) -> None:
    log = os.environ.get("CRASH_CALL_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write(name + "\\n")
            f.flush()
            os.fsync(f.fileno())
    if os.environ.get("CRASH_IN_TOOL") == name:
        os.kill(os.getpid(), signal.SIGKILL)


@tool(side_effect="read")
def lookup_order(order_id: str) -> dict:
    """Look an order up.

    Args:
        order_id: The order id.
    """
    _maybe_die("lookup_order")
    return {"order_id": order_id, "total": 25.0, "carrier": "Parcelo"}


@tool(side_effect="read")
def stock_level(sku: str) -> int:
    """How many items of a SKU are in stock.

    Args:
        sku: The SKU.
    """
    _maybe_die("stock_level")
    return 7


@tool(side_effect="read")
def fragile_report(order_id: str) -> str:
    """The damage report of an order.

    Args:
        order_id: The order id.
    """
    _maybe_die("fragile_report")
    return f"order {order_id}: box crushed, contents broken"


@tool(side_effect="spend")
def charge_back(order_id: str, amount: float) -> dict:
    """Charge the carrier back.

    Args:
        order_id: The order id.
        amount: The amount.
    """
    _maybe_die("charge_back")
    return {"order_id": order_id, "amount": amount, "ref": "cb-" + order_id}
'''

SCRIPT = """
turns:
  - text: Looking the order, the stock and the damage report up.
    tool_calls:
      - {name: lookup_order, arguments: {order_id: A-1}}
      - {name: stock_level, arguments: {sku: SKU-9}}
      - {name: fragile_report, arguments: {order_id: A-1}}
    usage: {input_tokens: 100, output_tokens: 20}
  - text: Charging the carrier back and checking the replacement order.
    tool_calls:
      - {name: charge_back, arguments: {order_id: A-1, amount: 12.5}}
      - {name: lookup_order, arguments: {order_id: A-2}}
    usage: {input_tokens: 200, output_tokens: 30}
  - text: Done. The carrier was charged back 12.5 for order A-1.
    usage: {input_tokens: 300, output_tokens: 15}
"""

AGENT = """
name: crash-desk
instructions: You handle damaged orders.
model: scripted:crash.script.yaml
tenant: test
tools:
  - crash_tools:lookup_order
  - crash_tools:stock_level
  - crash_tools:fragile_report
  - path: crash_tools:charge_back
    needs_approval: true
limits: {max_turns: 6}
approvers: approvers.yaml
"""


# --- helpers ---------------------------------------------------------------------------

APPROVER_KEY: list[Path] = []


def write_agent(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "crash_tools.py").write_text(textwrap.dedent(TOOLS), "utf-8")
    (folder / "crash.script.yaml").write_text(SCRIPT, "utf-8")
    APPROVER_KEY.append(write_approver(folder))
    agent = folder / "crash.yaml"
    agent.write_text(AGENT, "utf-8")
    return agent


@dataclass(frozen=True)
class Db:
    """A database of a test: ``target`` is what ``--db`` names (a file or a URL); the
    tools' call log lives in ``folder``."""

    target: Path | str
    folder: Path

    def __str__(self) -> str:
        return str(self.target)

    def store(self) -> SQLiteStore | PostgresStore:
        if isinstance(self.target, str):
            return PostgresStore(self.target)
        return SQLiteStore(self.target)


def new_db(backend: str, folder: Path) -> Db:
    if backend == "postgres":
        return Db(pgtest.new_database(), folder)
    return Db(folder / "runs.db", folder)


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def env(db: Db | None = None, **extra: str) -> dict[str, str]:
    """The environment of a child process; with ``db``, its tools log every call they
    start beside that database (see :func:`calls`)."""
    out = {
        k: v
        for k, v in os.environ.items()
        if k not in ("OARLOCK_DB", "CRASH_IN_TOOL", "CRASH_CALL_LOG")
    }
    if db is not None:
        out["CRASH_CALL_LOG"] = str(call_log(db))
    if APPROVER_KEY:  # approvals are signed with the key write_agent made
        out["OARLOCK_APPROVER_KEY"] = str(APPROVER_KEY[-1])
    return {**out, **extra}


def call_log(db: Db) -> Path:
    return db.folder / "runs.calls"


def calls(db: Db) -> list[str]:
    """The tools called (started) for the runs in ``db``, by every process, in order."""
    log = call_log(db)
    return log.read_text("utf-8").split() if log.exists() else []


def drive(
    agent: Path,
    db: Db,
    mode: str,
    *,
    run_id: str = RUN_ID,
    crash_in_tool: str | None = None,
    approve: str | None = None,
) -> subprocess.CompletedProcess[str]:
    extra = {"CRASH_IN_TOOL": crash_in_tool} if crash_in_tool else {}
    tail = [approve] if approve else []
    return subprocess.run(
        [sys.executable, str(DRIVER), str(agent), str(db), run_id, INPUT, mode, *tail],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env(db, **extra),
        check=False,
    )


def cli(db: Db, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "oarlock.cli", "--db", str(db), *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env(db),
        stdin=subprocess.DEVNULL,
        check=False,
    )


def load(db: Db, run_id: str = RUN_ID) -> tuple[dict[str, Any], list[Any]]:
    """The stored document as JSON, and the event log, read in this process."""

    async def go() -> tuple[dict[str, Any], list[Any]]:
        async with db.store() as store:
            stored = await store.load(run_id)
            doc = stored.document
            doc.format = "oar/0.2"
            return dump(doc), await store.events(run_id)

    return asyncio.run(go())


def receipts(db: Db, tool: str) -> list[StoredReceipt]:
    """The receipts the governed executor stored for the calls of ``tool``."""

    async def go() -> list[StoredReceipt]:
        async with db.store() as store:
            return await store.governance().receipts(limit=1000)

    return [r for r in asyncio.run(go()) if r.invocation["toolId"] == tool]


def results_of(doc: dict[str, Any], call_id: str) -> list[dict[str, Any]]:
    return [
        part
        for msg in doc["messages"]
        for part in msg["content"]
        if part.get("type") == "tool_result" and part.get("toolCallId") == call_id
    ]


def assert_valid(doc: dict[str, Any]) -> None:
    report = oarlock.validate(json.loads(json.dumps(doc)), "run")
    assert report.valid, report.to_json()


def assert_seq(events: list[Any]) -> None:
    seqs = [e.seq for e in events]
    assert seqs == list(range(1, len(seqs) + 1)), seqs


def strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: strip(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [strip(v) for v in value]
    return value


def normal(doc: dict[str, Any]) -> Any:
    """A document as two runs of the same calls share it: volatile members dropped and
    every fenced tool result unfenced (each call is fenced with a nonce of its own)."""
    return strip(unfenced_document(doc))


def finish(db: Db, run_id: str = RUN_ID) -> dict[str, Any]:
    """Drive the run to its end from new processes: resume when running, approve every
    undecided call when waiting."""
    for _ in range(6):
        doc, _ = load(db, run_id)
        if doc["status"] in TERMINAL:
            return doc
        if doc["status"] == "running":
            out = cli(db, "resume", run_id)
            assert out.returncode == 0, out.stderr
            continue
        undecided = [a for a in doc.get("pendingApprovals", []) if "decision" not in a]
        assert undecided, doc
        for appr in undecided:
            out = cli(db, "approve", run_id, appr["toolCallId"])
            assert out.returncode == 0, out.stderr
    raise AssertionError(f"run {run_id} did not finish: {load(db, run_id)[0]['status']}")


@pytest.fixture(scope="module")
def agent_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_agent(tmp_path_factory.mktemp("agent"))


@pytest.fixture(scope="module")
def baseline(agent_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The uninterrupted run: driven to the approval, then approved through the CLI."""
    db = new_db("sqlite", tmp_path_factory.mktemp("baseline"))
    out = drive(agent_file, db, "none")
    assert out.returncode == 0, out.stderr
    assert "waiting_approval commits=5" in out.stdout
    approved = cli(db, "approve", RUN_ID, APPROVAL_CALL)
    assert approved.returncode == 0, approved.stderr
    doc, events = load(db)
    assert doc["status"] == "completed", doc
    assert doc["result"] == "Done. The carrier was charged back 12.5 for order A-1."
    assert_valid(doc)
    assert_seq(events)
    assert sorted(calls(db)) == sorted(BASELINE_CALLS)
    [result] = results_of(doc, APPROVAL_CALL)
    assert not result.get("isError"), result
    [receipt] = receipts(db, "charge_back")
    assert receipt.status == "Succeeded"
    return doc, events


# --- crash and resume ------------------------------------------------------------------

A = APPROVAL_CALL
# (driver mode, tool that kills, call the driver approves,
#  (status, number of messages) the crash leaves)
CRASHES = [
    pytest.param("commit:1", None, None, ("running", 1), id="after-commit-1-created"),
    pytest.param("commit:2", None, None, ("running", 2), id="after-commit-2-model"),
    pytest.param("commit:3", None, None, ("running", 3), id="after-commit-3-tools"),
    pytest.param("commit:4", None, None, ("running", 4), id="after-commit-4-model"),
    pytest.param("commit:5", None, None, ("waiting_approval", 4), id="after-commit-5-waiting"),
    pytest.param("commit:7", None, A, ("running", 5), id="after-commit-7-approved-tool-ran"),
    pytest.param("none", "fragile_report", None, ("running", 2), id="inside-parallel-read-tool"),
    pytest.param("model:0", None, None, ("running", 1), id="inside-first-model-request"),
    pytest.param("model:1", None, None, ("running", 3), id="inside-second-model-request"),
    pytest.param("model:2", None, A, ("running", 5), id="inside-model-request-after-approval"),
    pytest.param("none", "charge_back", A, ("running", 4), id="inside-approved-tool"),
    pytest.param("decision", None, A, ("running", 4), id="after-decision-commit"),
]


@pytest.mark.parametrize(("mode", "crash_in_tool", "approve", "left"), CRASHES)
def test_crash_then_resume_in_a_new_process_matches_an_uninterrupted_run(
    agent_file: Path,
    baseline: Any,
    tmp_path: Path,
    backend: str,
    mode: str,
    crash_in_tool: str | None,
    approve: str | None,
    left: tuple[str, int],
) -> None:
    db = new_db(backend, tmp_path)
    crashed = drive(agent_file, db, mode, crash_in_tool=crash_in_tool, approve=approve)
    assert crashed.returncode == -signal.SIGKILL, (crashed.returncode, crashed.stderr)

    doc, events = load(db)
    assert (doc["status"], len(doc["messages"])) == left
    assert_valid(doc)
    assert_seq(events)

    final = finish(db)
    final_doc, final_events = load(db)
    assert final == final_doc
    assert_valid(final_doc)
    assert_seq(final_events)
    base_doc, base_events = baseline
    assert [e.kind for e in final_events] == [e.kind for e in base_events]
    # the approved spend tool started once, whatever process ran it and wherever it died
    assert calls(db).count("charge_back") == 1, calls(db)
    if crash_in_tool is None:  # what a committed step ran is never run again
        assert sorted(calls(db)) == sorted(BASELINE_CALLS), calls(db)
    elif crash_in_tool == "fragile_report":  # a read cut off is run again, a new attempt
        assert calls(db).count("fragile_report") == 2, calls(db)
    [result] = results_of(final_doc, APPROVAL_CALL)
    [receipt] = receipts(db, "charge_back")
    if crash_in_tool != "charge_back":
        assert receipt.status == "Succeeded"
        assert not result.get("isError"), result
        assert normal(final_doc) == normal(base_doc)
        return
    # killed inside the approved call: the resuming process found its claim without a
    # receipt and its owner dead, and recorded the outcome as unknown instead of paying twice
    assert receipt.status == "Uncertain"
    assert receipt.receipt["error"]["code"] == "interrupted"
    assert result["isError"] is True, result
    assert "outcome of tool 'charge_back' is unknown" in result["content"]
    assert "will not be retried automatically" in result["content"]
    assert receipt.invocation_id in result["content"]  # what an operator must reconcile
    # everything else is as in the uninterrupted run
    expected = json.loads(json.dumps(base_doc))
    [slot] = results_of(expected, APPROVAL_CALL)
    slot.clear()
    slot.update(result)
    assert normal(final_doc) == normal(expected)


def test_reads_whose_step_was_never_saved_leave_no_records_and_run_again(
    agent_file: Path, baseline: Any, tmp_path: Path, backend: str
) -> None:
    """Killed after the first step's three reads ran, before the save of their results:
    their claims, invocations and receipts go with that save, so nothing of them is
    stored; the resumed run claims each before it runs it again, and each call of the run
    ends with one receipt."""
    reads = ["fragile_report", "lookup_order", "stock_level"]
    db = new_db(backend, tmp_path)
    crashed = drive(agent_file, db, "save:3")
    assert crashed.returncode == -signal.SIGKILL, (crashed.returncode, crashed.stderr)
    doc, _ = load(db)
    assert (doc["status"], len(doc["messages"])) == ("running", 2)
    assert sorted(calls(db)) == reads
    assert [receipts(db, tool) for tool in reads] == [[], [], []]
    assert open_claims(db) == []

    final = finish(db)
    assert normal(final) == normal(baseline[0])
    assert sorted(calls(db)) == sorted(BASELINE_CALLS + reads)
    assert [len(receipts(db, tool)) for tool in reads] == [1, 2, 1]  # lookup_order
    assert all(r.status == "Succeeded" for tool in reads for r in receipts(db, tool))
    assert open_claims(db) == []


def open_claims(db: Db) -> list[Any]:
    async def go() -> list[Any]:
        async with db.store() as store:
            return await store.governance().open_claims()

    return asyncio.run(go())


def test_a_crash_after_the_last_commit_leaves_a_run_a_resume_leaves_alone(
    agent_file: Path, baseline: Any, tmp_path: Path, backend: str
) -> None:
    """Killed right after the commit that completes the run: resuming changes nothing."""
    db = new_db(backend, tmp_path)
    crashed = drive(agent_file, db, "commit:8", approve=APPROVAL_CALL)
    assert crashed.returncode == -signal.SIGKILL, (crashed.returncode, crashed.stderr)
    before = load(db)
    assert before[0]["status"] == "completed"
    out = cli(db, "resume", RUN_ID)
    assert out.returncode == 0, out.stderr
    after = load(db)
    assert after[0] == before[0]
    assert [e.seq for e in after[1]] == [e.seq for e in before[1]]
    assert normal(after[0]) == normal(baseline[0])
    assert calls(db).count("charge_back") == 1


# --- decisions racing from two processes ------------------------------------------------

RACER = """
import os, sys, time
from pathlib import Path
import oarlock.cli  # the heavy imports happen before the barrier: the race is the CLI's
import oarlock.cli._show, oarlock.engine._agentfile, oarlock.engine._runner
import oarlock.store._sqlite
folder, me, parties = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
(folder / me).touch()
deadline = time.monotonic() + 50
while len(list(folder.iterdir())) < parties:
    if time.monotonic() > deadline:
        sys.exit(99)
sys.exit(oarlock.cli.main(sys.argv[4:]))
"""


def race(tmp: Path, db: Db, *commands: list[str]) -> list[subprocess.CompletedProcess[str]]:
    """Start one process per command; each waits on a file barrier, then runs the CLI."""
    barrier = tmp / "barrier"
    barrier.mkdir()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                RACER,
                str(barrier),
                f"p{i}",
                str(len(commands)),
                "--db",
                str(db),
                *cmd,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            env=env(db),
        )
        for i, cmd in enumerate(commands)
    ]
    done = []
    for proc, cmd in zip(procs, commands, strict=True):
        out, err = proc.communicate(timeout=TIMEOUT)
        done.append(subprocess.CompletedProcess(cmd, proc.returncode, out, err))
    return done


@pytest.fixture
def waiting_db(agent_file: Path, tmp_path: Path, backend: str) -> Db:
    db = new_db(backend, tmp_path)
    out = drive(agent_file, db, "none")
    assert out.returncode == 0, out.stderr
    assert load(db)[0]["status"] == "waiting_approval"
    return db


def decisions(events: list[Any]) -> list[dict[str, Any]]:
    return [e.data for e in events if e.kind == "approval_decided"]


@pytest.mark.parametrize("attempt", range(2))
def test_approve_and_deny_racing_from_two_processes_record_exactly_one_decision(
    waiting_db: Db, tmp_path: Path, attempt: int
) -> None:
    approve, deny = race(
        tmp_path,
        waiting_db,
        ["approve", RUN_ID, APPROVAL_CALL, "--no-resume"],
        ["deny", RUN_ID, APPROVAL_CALL, "--reason", "x", "--no-resume"],
    )
    codes = sorted((approve.returncode, deny.returncode))
    assert codes == [0, 1], (approve, deny)
    loser = approve if approve.returncode == 1 else deny
    assert "already" in loser.stderr or "not waiting" in loser.stderr, loser.stderr

    doc, events = load(waiting_db)
    assert_valid(doc)
    assert_seq(events)
    [decided] = decisions(events)
    winner = "approved" if approve.returncode == 0 else "denied"
    assert decided["decision"] == winner
    assert decided["toolCallId"] == APPROVAL_CALL
    assert doc["status"] == "running"
    if winner == "approved":
        [appr] = doc["pendingApprovals"]
        assert appr["decision"] == "approved"
    else:  # the denial answered the last open call: the results went to the model
        assert doc.get("pendingApprovals", []) == []
        results = [
            p for p in doc["messages"][-1]["content"] if p.get("toolCallId") == APPROVAL_CALL
        ]
        assert len(results) == 1
        assert results[0]["isError"] is True
        assert "denied" in results[0]["content"]


@pytest.mark.parametrize("no_resume", [True, False], ids=["no-resume", "resume"])
def test_approve_and_cancel_racing_from_two_processes_lose_nothing(
    waiting_db: Db, tmp_path: Path, no_resume: bool
) -> None:
    approve, cancel = race(
        tmp_path,
        waiting_db,
        ["approve", RUN_ID, APPROVAL_CALL, *(["--no-resume"] if no_resume else [])],
        ["cancel", RUN_ID, "--reason", "racing"],
    )
    # approve exits 3 when it recorded its decision but the run it resumed was cancelled
    assert approve.returncode in (0, 1, 3), approve
    assert cancel.returncode in (0, 1), cancel
    assert 0 in (approve.returncode, cancel.returncode), (approve, cancel)

    doc, events = load(waiting_db)
    assert_valid(doc)
    assert_seq(events)
    decided = decisions(events)
    if approve.returncode == 1:
        assert "not waiting" in approve.stderr, approve.stderr
        assert decided == []
    else:
        assert [d["decision"] for d in decided] == ["approved"]
    if cancel.returncode == 0:
        assert doc["status"] == "cancelled"
        assert [e.data["to"] for e in events if e.kind == "status_changed"][-1] == "cancelled"
    else:  # the approval and its resume finished the run first
        assert "already" in cancel.stderr, cancel.stderr
        assert doc["status"] == "completed"
        assert not no_resume
    if no_resume:
        assert doc["status"] == "cancelled"
    if approve.returncode == 3:
        assert doc["status"] == "cancelled"

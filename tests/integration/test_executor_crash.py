"""The governed executor across a real crash: a driver process (executor_driver.py) makes
one tool call against an SQLite file or a PostgreSQL database (every test runs on both)
and SIGKILLs itself at a point of the executor's
protocol; a fresh process then makes the same call (same run, call id and arguments).

* cut off before the claim: nothing was stored, so the call runs now;
* cut off after the claim (tool not started) or after the tool (no receipt): a ``spend``
  call is never run again; the recovering process records an Uncertain receipt for the
  first invocation and tells the model the outcome is unknown; later processes replay
  that very receipt;
* a ``read`` call claimed before it ran (in a replay) and cut off the same way runs again
  as a new attempt of the same step;
* a plain ``read`` call, which runs before its claim, invocation and receipt are written
  in one write, cut off before that write leaves nothing and runs again;
* an operator's reconciliation of the Uncertain receipt is appended, never an edit.

The scenarios run stage by stage (every crash, then every recovery, then every replay),
each stage's processes side by side, each scenario on its own database; every
assertion reads a snapshot of the database taken between stages.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import executor_driver as drv
import pytest

import pgtest
from oarlock.errors import ConflictError
from oarlock.formats._time import now_rfc3339
from oarlock.governance import Reconciliation, unfence, verify_chain
from oarlock.governance._ledger import LedgerEntry
from oarlock.governance._records import Claim, StoredReceipt, step_uuid
from oarlock.governance._store import ClaimHeld

DRIVER = Path(__file__).with_name("executor_driver.py")
TIMEOUT = 60
CHARGE_KEY = f"charge:{drv.ARGUMENTS['order_id']}"
LOOKUP_KEY = f"run:{drv.RUN_ID}:call:{drv.CALL_ID}"
CHARGE_TEXT = json.dumps(drv.charge_result(**drv.ARGUMENTS))
LOOKUP_TEXT = json.dumps({"order_id": "A-1", "total": 25})

# scenario id -> (tool, crash mode)
SCENARIOS: dict[str, tuple[str, str]] = {
    "charge-before-claim": ("charge", "before-claim"),
    "charge-after-claim": ("charge", "after-claim"),
    "charge-after-tool": ("charge", "after-tool"),
    "lookup-after-claim": ("lookup-replayed", "after-claim"),
    "lookup-after-tool": ("lookup-replayed", "after-tool"),
    "lookup-before-record": ("lookup", "after-tool"),
}
# the scenarios a third process replays (a process start is the slow part of these tests)
REPLAYED = ("charge-after-claim", "charge-after-tool")


# --- processes and snapshots -------------------------------------------------------------


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "OARLOCK_DB"}


@dataclass(frozen=True)
class Paths:
    db: Path | str
    effects: Path
    tool: str


@dataclass(frozen=True)
class Proc:
    returncode: int
    stdout: str
    stderr: str

    @property
    def result(self) -> dict[str, Any]:
        assert self.returncode == 0, self.stderr
        lines = self.stdout.strip().splitlines()
        assert lines, self.stderr
        value: dict[str, Any] = json.loads(lines[-1])
        return value


def run_side_by_side(jobs: dict[str, tuple[Paths, str]]) -> dict[str, Proc]:
    """Start one driver per job (``mode`` on its own files) at once; wait for all."""
    started: dict[str, subprocess.Popen[str]] = {}
    for name, (paths, mode) in jobs.items():
        started[name] = subprocess.Popen(
            [sys.executable, str(DRIVER), str(paths.db), mode, str(paths.effects), paths.tool],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            env=_env(),
        )
    done: dict[str, Proc] = {}
    try:
        for name, proc in started.items():
            out, err = proc.communicate(timeout=TIMEOUT)
            done[name] = Proc(proc.returncode, out, err)
    finally:
        for proc in started.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=TIMEOUT)
    return done


@dataclass(frozen=True)
class Snapshot:
    lines: list[str]
    ledger: list[LedgerEntry]
    receipts: list[StoredReceipt]
    open_claims: list[Claim]
    held: ClaimHeld | None


def lines_of(path: Path) -> list[str]:
    return path.read_text("utf-8").splitlines() if path.exists() else []


def snapshot(paths: Paths) -> Snapshot:
    key = CHARGE_KEY if paths.tool == "charge" else LOOKUP_KEY
    tool_name = "charge" if paths.tool == "charge" else "lookup"

    async def go() -> Snapshot:
        async with drv.open_runs(paths.db) as runs:
            store = runs.governance()
            return Snapshot(
                lines_of(paths.effects),
                await store.ledger(),
                await store.receipts(),
                await store.open_claims(),
                await store.claim_of(drv.TENANT, tool_name, key),
            )

    return asyncio.run(go())


@dataclass(frozen=True)
class Scenario:
    paths: Paths
    crash: Proc
    after_crash: Snapshot
    recovery: Proc
    after_recovery: Snapshot
    replay: Proc | None
    after_replay: Snapshot


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def scenarios(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Scenario]:
    base = tmp_path_factory.mktemp("executor-crash")

    def database(name: str) -> Path | str:
        if request.param == "postgres":
            return pgtest.new_database(lasting=True)
        return base / f"{name}.db"

    paths = {
        name: Paths(database(name), base / f"{name}.effects", tool)
        for name, (tool, _) in SCENARIOS.items()
    }
    crashes = run_side_by_side({n: (paths[n], mode) for n, (_, mode) in SCENARIOS.items()})
    after_crash = {n: snapshot(p) for n, p in paths.items()}
    recoveries = run_side_by_side({n: (p, "none") for n, p in paths.items()})
    after_recovery = {n: snapshot(p) for n, p in paths.items()}
    replays: dict[str, Proc | None] = dict.fromkeys(SCENARIOS)
    replays |= run_side_by_side({n: (paths[n], "none") for n in REPLAYED})
    after_replay = {n: snapshot(p) for n, p in paths.items()}
    return {
        n: Scenario(
            paths[n],
            crashes[n],
            after_crash[n],
            recoveries[n],
            after_recovery[n],
            replays[n],
            after_replay[n],
        )
        for n in SCENARIOS
    }


def kinds(snap: Snapshot) -> list[str]:
    return [e.kind for e in snap.ledger]


def first_invocation_id(s: Scenario) -> str:
    """The invocation the crashed process stored (its open claim)."""
    assert len(s.after_crash.open_claims) == 1, s.after_crash.open_claims
    return s.after_crash.open_claims[0].invocation_id


# --- the crash itself --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "lines", "ledger"),
    [
        ("charge-before-claim", 0, []),
        ("charge-after-claim", 0, ["approval", "invocation"]),
        ("charge-after-tool", 1, ["approval", "invocation"]),
        ("lookup-after-claim", 0, ["invocation"]),
        ("lookup-after-tool", 1, ["invocation"]),
        ("lookup-before-record", 1, []),
    ],
)
def test_crash_point_leaves(
    scenarios: dict[str, Scenario], name: str, lines: int, ledger: list[str]
) -> None:
    s = scenarios[name]
    assert s.crash.returncode == -signal.SIGKILL, s.crash.stderr
    assert s.crash.stdout == ""
    snap = s.after_crash
    assert len(snap.lines) == lines
    assert kinds(snap) == ledger
    assert snap.receipts == []
    if ledger:
        # the claim was committed with the invocation, and its owner is gone
        (claim,) = snap.open_claims
        assert snap.held is not None
        assert snap.held.claim == claim
        assert snap.held.receipt is None
        invocation = next(e.body for e in snap.ledger if e.kind == "invocation")
        assert invocation["invocationId"] == claim.invocation_id
        assert claim.owner.split(":")[1] != str(os.getpid())
    else:
        assert snap.open_claims == []
        assert snap.held is None
    assert verify_chain(snap.ledger).ok


# --- a spend call ------------------------------------------------------------------------


def test_cut_off_before_claim_runs_now(scenarios: dict[str, Scenario]) -> None:
    s = scenarios["charge-before-claim"]
    result = s.recovery.result
    assert result["is_error"] is False, result
    assert unfence(result["content"]) == CHARGE_TEXT
    snap = s.after_recovery
    assert len(snap.lines) == 1
    (stored,) = snap.receipts
    assert stored.status == "Succeeded"
    assert stored.invocation["stepId"] == step_uuid(drv.RUN_ID, 1)
    assert snap.open_claims == []
    assert kinds(snap) == ["approval", "invocation", "receipt"]
    assert verify_chain(snap.ledger).ok


@pytest.mark.parametrize(("name", "lines"), [("charge-after-claim", 0), ("charge-after-tool", 1)])
def test_cut_off_spend_call_is_uncertain_never_rerun(
    scenarios: dict[str, Scenario], name: str, lines: int
) -> None:
    s = scenarios[name]
    first = first_invocation_id(s)
    result = s.recovery.result
    assert result["is_error"] is True, result
    assert result["tool_call_id"] == drv.CALL_ID
    assert "outcome of tool 'charge' is unknown" in result["content"]
    assert "will not be retried automatically" in result["content"]
    assert first in result["content"]

    snap = s.after_recovery
    assert len(snap.lines) == lines  # the recovering process did not run the tool
    (stored,) = snap.receipts
    assert result["receipt"] == stored.receipt
    assert stored.status == "Uncertain"
    assert stored.invocation_id == first
    assert stored.receipt["error"]["code"] == "interrupted"
    assert "resultRef" not in stored.receipt
    assert stored.reconciliations == ()
    # only the receipt was appended; the invocation is the crashed process's
    assert snap.ledger[: len(s.after_crash.ledger)] == s.after_crash.ledger
    assert kinds(snap) == [*kinds(s.after_crash), "receipt"]
    assert snap.ledger[-1].body == stored.receipt
    assert stored.invocation == next(e.body for e in snap.ledger if e.kind == "invocation")
    assert snap.open_claims == []
    assert snap.held is not None
    assert snap.held.claim.invocation_id == first
    assert snap.held.receipt == stored.receipt
    assert verify_chain(snap.ledger).ok


@pytest.mark.parametrize(("name", "lines"), [("charge-after-claim", 0), ("charge-after-tool", 1)])
def test_third_process_replays_the_identical_uncertain_receipt(
    scenarios: dict[str, Scenario], name: str, lines: int
) -> None:
    s = scenarios[name]
    assert s.replay is not None
    third = s.replay.result
    assert third["is_error"] is True
    assert third["content"] == s.recovery.result["content"]
    assert third["receipt"] == s.recovery.result["receipt"]  # what each process saw
    assert third["receipt"]["status"] == "Uncertain"
    assert third["receipt"]["receiptHash"] == s.recovery.result["receipt"]["receiptHash"]
    snap = s.after_replay
    assert len(snap.lines) == lines
    (stored,) = snap.receipts
    (before,) = s.after_recovery.receipts
    assert stored.receipt == before.receipt
    assert stored.receipt["receiptHash"] == before.receipt["receiptHash"]
    assert snap.held is not None
    assert snap.held.receipt is not None
    assert snap.held.receipt["receiptHash"] == before.receipt["receiptHash"]
    assert snap.ledger == s.after_recovery.ledger  # a replay writes nothing


# --- a read call -------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "lines"), [("lookup-after-claim", 1), ("lookup-after-tool", 2)])
def test_cut_off_read_call_runs_again_as_a_new_attempt(
    scenarios: dict[str, Scenario], name: str, lines: int
) -> None:
    s = scenarios[name]
    first = first_invocation_id(s)
    prior = next(e.body for e in s.after_crash.ledger if e.kind == "invocation")
    result = s.recovery.result
    assert result["is_error"] is False, result
    assert unfence(result["content"]) == LOOKUP_TEXT

    snap = s.after_recovery
    # at least once: a read the crash cut off after it ran runs a second time
    assert len(snap.lines) == lines
    (stored,) = snap.receipts
    assert stored.status == "Succeeded"
    assert stored.invocation_id != first
    attempt = stored.invocation
    assert attempt["stepId"] == prior["stepId"] == step_uuid(drv.RUN_ID, 1)
    assert attempt["runId"] == prior["runId"]
    assert attempt["attemptId"] != prior["attemptId"]
    assert attempt["idempotencyKey"] == prior["idempotencyKey"] == LOOKUP_KEY
    assert attempt["argumentsHash"] == prior["argumentsHash"]
    assert kinds(snap) == ["invocation", "invocation", "receipt"]
    assert snap.held is not None
    assert snap.held.claim.invocation_id == stored.invocation_id
    assert snap.open_claims == []
    assert verify_chain(snap.ledger).ok

    async def first_has_no_receipt() -> None:
        async with drv.open_runs(s.paths.db) as runs:
            invocation, receipt = await runs.governance().load(first)
            assert invocation == prior
            assert receipt is None

    asyncio.run(first_has_no_receipt())


def test_a_plain_read_cut_off_before_its_record_runs_again(
    scenarios: dict[str, Scenario],
) -> None:
    s = scenarios["lookup-before-record"]
    result = s.recovery.result
    assert result["is_error"] is False, result
    assert unfence(result["content"]) == LOOKUP_TEXT
    snap = s.after_recovery
    assert len(snap.lines) == 2  # at least once: it ran before the crash, and again
    (stored,) = snap.receipts
    assert stored.status == "Succeeded"
    assert stored.invocation["stepId"] == step_uuid(drv.RUN_ID, 1)
    assert stored.invocation["idempotencyKey"] == LOOKUP_KEY
    assert result["receipt"] == stored.receipt
    assert kinds(snap) == ["invocation", "receipt"]
    assert snap.open_claims == []
    assert snap.held is not None
    assert snap.held.claim.invocation_id == stored.invocation_id
    assert snap.held.receipt == stored.receipt
    assert verify_chain(snap.ledger).ok


# --- reconciliation ----------------------------------------------------------------------


def test_reconciling_the_uncertain_receipt_appends_a_record(
    scenarios: dict[str, Scenario],
) -> None:
    s = scenarios["charge-after-tool"]
    (before,) = s.after_replay.receipts
    ledger_before = s.after_replay.ledger
    note = Reconciliation(
        reconciliation_id=str(uuid.uuid4()),
        invocation_id=before.invocation_id,
        outcome="succeeded",
        evidence="ledger line charge A-1 25 found in the payments log",
        by="ops@example.com",
        at=now_rfc3339(),
    )

    async def reconcile() -> tuple[list[StoredReceipt], list[LedgerEntry], Any]:
        async with drv.open_runs(s.paths.db) as runs:
            store = runs.governance()
            await store.reconcile(note)
            invocation, receipt = await store.load(before.invocation_id)
            return await store.receipts(), await store.ledger(), (invocation, receipt)

    receipts, ledger, (invocation, receipt) = asyncio.run(reconcile())
    (after,) = receipts
    assert after.receipt == before.receipt  # the receipt is never edited
    assert receipt == before.receipt
    assert invocation == before.invocation
    assert after.reconciliations == (note,)
    assert len(ledger) == len(ledger_before) + 1
    assert ledger[:-1] == ledger_before
    assert ledger[-1].kind == "reconciliation"
    assert ledger[-1].body == note.to_json()
    assert ledger[-1].prev_hash == ledger_before[-1].entry_hash
    report = verify_chain(ledger)
    assert report.ok, report.problems
    assert report.entries == len(ledger_before) + 1

    # a fourth process is told what the operator found; the tool still does not run
    (fourth,) = run_side_by_side({"fourth": (s.paths, "none")}).values()
    result = fourth.result
    assert result["is_error"] is True
    assert "an operator reconciled invocation" in result["content"]
    assert before.invocation_id in result["content"]
    assert "as succeeded" in result["content"]
    assert lines_of(s.paths.effects) == s.after_replay.lines
    assert snapshot(s.paths).ledger == ledger


def test_only_an_uncertain_receipt_can_be_reconciled(scenarios: dict[str, Scenario]) -> None:
    s = scenarios["charge-before-claim"]
    (stored,) = s.after_replay.receipts
    assert stored.status == "Succeeded"
    note = Reconciliation(
        str(uuid.uuid4()), stored.invocation_id, "not-applied", "no trace", "ops", now_rfc3339()
    )

    async def attempt() -> None:
        async with drv.open_runs(s.paths.db) as runs:
            await runs.governance().reconcile(note)

    with pytest.raises(ConflictError) as caught:
        asyncio.run(attempt())
    assert caught.value.code == "not_uncertain"
    assert snapshot(s.paths).ledger == s.after_replay.ledger

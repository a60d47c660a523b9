"""A ``sandbox``-class call's receipt records the sandbox its invocation planned: the rule
(:func:`oarlock.formats._rules.sandbox_problem`), as ``oarlock audit verify`` applies it
along the ledger (``sandbox_mismatch``) and ``oarlock validate`` across files (S1)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from oarlock.formats._jcs import digest
from oarlock.formats._rules import sandbox_problem
from oarlock.governance._ledger import next_entry, verify_chain

INVOCATION_ID = "0b1c2d3e-4f50-4617-8829-3a4b5c6d7e8f"
PLANNED = {"workspaceId": "ws-1", "egressProfile": "none", "isolation": "bubblewrap"}


def invocation(**changes: Any) -> dict[str, Any]:
    arguments = {"command": "echo hi"}
    doc: dict[str, Any] = {
        "invocationId": INVOCATION_ID,
        "toolId": "sandbox.shell",
        "schemaVersion": "1",
        "scope": {"tenantId": "t"},
        "runId": "1b1c2d3e-4f50-4617-8829-3a4b5c6d7e8f",
        "stepId": "2b1c2d3e-4f50-4617-8829-3a4b5c6d7e8f",
        "attemptId": "3b1c2d3e-4f50-4617-8829-3a4b5c6d7e8f",
        "agentId": "a",
        "sideEffectClass": "sandbox",
        "idempotencyKey": "run:r:call:c",
        "arguments": arguments,
        "argumentsHash": digest(arguments),
        "policyDecision": {
            "decisionId": "4b1c2d3e-4f50-4617-8829-3a4b5c6d7e8f",
            "effect": "allow",
            "policyId": "default",
            "evaluatedAt": "2026-12-04T10:00:00Z",
        },
        "sandbox": dict(PLANNED),
    }
    doc.update(changes)
    return {k: v for k, v in doc.items() if v is not None}


def receipt(status: str = "Succeeded", box: dict[str, Any] | None = None, **extra: Any) -> Any:
    doc: dict[str, Any] = {
        "invocationId": INVOCATION_ID,
        "status": status,
        "startedAt": "2026-12-04T10:00:00Z",
        "finishedAt": "2026-12-04T10:00:01Z",
        "usage": {"bytesIn": 10} if box is None else {"bytesIn": 10, "sandbox": box},
        **extra,
    }
    doc["receiptHash"] = digest(doc)
    return doc


RAN = {**PLANNED, "exitCode": 0, "limits": {}}


@pytest.mark.parametrize(
    ("inv", "rec", "wanted"),
    [
        (invocation(), receipt(box=RAN), None),
        (invocation(), receipt(), "no sandbox on its receipt"),  # ran in the host
        (invocation(), receipt(box={**RAN, "isolation": "unshare"}), "isolation"),
        (invocation(), receipt(box={**RAN, "isolation": "none"}), "isolates nothing"),
        (invocation(), receipt(box={**RAN, "egressProfile": "host"}), "egressProfile"),
        (invocation(), receipt(box={**RAN, "workspaceId": "other"}), "workspaceId"),
        (invocation(sandbox=None), receipt(box=RAN), "records no sandbox"),
        (invocation(), receipt("Denied", error={"code": "policy_denied"}), None),
        (invocation(), receipt("Uncertain", error={"code": "interrupted"}), None),
        (invocation(), receipt("Failed", error={"code": "sandbox_unavailable"}), None),
        (invocation(), receipt("Failed", error={"code": "ValueError"}), "no sandbox"),
        (invocation(), receipt("TimedOut", error={"code": "timeout"}), "no sandbox"),
        (  # a refused argument: the detail without an isolation, never started
            invocation(),
            receipt("Failed", box={"workspaceId": "ws-1"}, error={"code": "argument_refused"}),
            None,
        ),
        (invocation(sideEffectClass="read"), receipt(), None),
    ],
)
def test_the_rule(inv: dict[str, Any], rec: dict[str, Any], wanted: str | None) -> None:
    problem = sandbox_problem(inv, rec)
    if wanted is None:
        assert problem is None
    else:
        assert problem is not None and wanted in problem


def test_audit_verify_reports_a_receipt_that_ran_outside_its_sandbox() -> None:
    at = "2026-12-04T10:00:00Z"
    first = next_entry(None, "invocation", at, invocation())
    ok = next_entry(first, "receipt", at, receipt(box=RAN))
    assert verify_chain([first, ok]).ok
    bare = next_entry(first, "receipt", at, receipt())
    report = verify_chain([first, bare])
    assert not report.ok
    assert [p.code for p in report.problems] == ["sandbox_mismatch"]
    assert report.problems[0].seq == 2 and INVOCATION_ID in report.problems[0].message


def test_validate_checks_an_invocation_and_its_receipt_together(tmp_path: Path) -> None:
    inv, good, bad = tmp_path / "inv.json", tmp_path / "good.json", tmp_path / "bad.json"
    inv.write_text(json.dumps(invocation()))
    good.write_text(json.dumps(receipt(box=RAN)))
    bad.write_text(json.dumps(receipt(box={**RAN, "isolation": "unshare"})))

    def validate(*paths: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "oarlock.cli", "validate", "--json", *map(str, paths)],
            capture_output=True,
            text=True,
            check=False,
        )

    assert validate(inv, good).returncode == 0
    done = validate(inv, bad)
    assert done.returncode != 0
    report = json.loads(done.stdout)
    errors = [e for f in report["files"] for e in f["errors"]]
    assert [e["rule"] for e in errors] == ["S1"]
    assert validate(bad).returncode == 0  # alone, a receipt says nothing of its invocation

"""Stored histories of every kind of run (recorded by
``tests/integration/record_temporal_histories.py``: approved, denied after a refused
update, expired by the timer, cancelled, failed, and continued as new; the first four by
the workflow's first release, before its first patch) replay against the workflow as it
is now, so a change that would break runs in flight fails here; and the histories carry
ids, versions and hashes, never the conversation."""

from __future__ import annotations

import asyncio
import base64
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from oarlock.temporal import RunWorkflow, workflow_runner
from oarlock.temporal._types import WORKFLOW, RunStart, Snapshot, StepInput

HISTORIES = sorted((Path(__file__).parent / "temporal_histories").glob("*.json"))
KINDS = {"approved", "denied", "expired", "cancelled", "failed", "continued-first",
         "continued-last"}  # fmt: skip


def _history(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(path.stem, path.read_text("utf-8"))


def test_every_kind_of_run_is_stored():
    assert {p.stem for p in HISTORIES} == KINDS


@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: p.stem)
def test_history_replays(path):
    replayer = Replayer(workflows=[RunWorkflow], workflow_runner=workflow_runner())
    result = asyncio.run(replayer.replay_workflow(_history(path), raise_on_replay_failure=False))
    assert result.replay_failure is None


@workflow.defn(name=WORKFLOW)
class _Changed:
    """A change that schedules another step first: replay must refuse it."""

    @workflow.run
    async def run(self, start: RunStart) -> Snapshot:
        snap: Snapshot = await workflow.execute_activity(
            "oarlock.model_step.v2", StepInput(start.run_id, 0), result_type=Snapshot,
            start_to_close_timeout=timedelta(seconds=5),
        )  # fmt: skip
        return snap


def test_a_changed_workflow_does_not_replay():
    replayer = Replayer(workflows=[_Changed], workflow_runner=workflow_runner())
    path = next(p for p in HISTORIES if p.stem == "approved")
    result = asyncio.run(replayer.replay_workflow(_history(path), raise_on_replay_failure=False))
    assert result.replay_failure is not None


def _payloads(value: Any) -> list[str]:
    found = []
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "data" and isinstance(item, str):
                found.append(base64.b64decode(item).decode("utf-8", "replace"))
            else:
                found.extend(_payloads(item))
    elif isinstance(value, list):
        for item in value:
            found.extend(_payloads(item))
    return found


@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: p.stem)
def test_history_holds_no_conversation(path):
    payloads = _payloads(json.loads(path.read_text("utf-8")))
    assert payloads
    words = ("Refund order", "teapot", "untrusted-tool-result", "refunded", "instructions")
    assert not [p for p in payloads if any(w in p for w in words)]
    assert max(len(p) for p in payloads) < 1000

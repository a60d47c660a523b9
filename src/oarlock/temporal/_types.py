"""What a run's workflow and its activities exchange: ids, versions, hashes and small
plans, never the conversation, which stays in oarlock's store. Pure (the workflow imports
it): dataclasses and constants only.

The names below are the contract with a Temporal cluster: histories of runs in flight
name them, so they never change; a change of meaning gets a new name (``.v2``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CANCEL_SIGNAL",
    "DECIDE",
    "DECIDE_UPDATE",
    "MODEL_STEP",
    "RECONCILE",
    "STATE_QUERY",
    "TOOL_CALL",
    "WORKFLOW",
    "DecideInput",
    "Decision",
    "Pending",
    "Progress",
    "ReconcileInput",
    "RunOptions",
    "RunStart",
    "Snapshot",
    "StepInput",
    "ToolInput",
]

WORKFLOW = "oarlock.run.v1"
MODEL_STEP = "oarlock.model_step.v1"
TOOL_CALL = "oarlock.tool_call.v1"
RECONCILE = "oarlock.reconcile.v1"
DECIDE = "oarlock.decide.v1"
DECIDE_UPDATE = "oarlock.decide.v1"
CANCEL_SIGNAL = "oarlock.cancel.v1"
STATE_QUERY = "oarlock.state.v1"


@dataclass
class Pending:
    """A call waiting for a decision: its id, the hash of the arguments a human is asked
    to approve (``sha256:`` of their JCS form), its deadline (seconds since the epoch) and
    the decision once made."""

    call_id: str
    arguments_hash: str
    expires_at: float | None = None
    decision: str | None = None


@dataclass
class Snapshot:
    """The run as a commit left it: ``version`` and ``document_hash`` of the stored
    document, its status and turn (the step cursor), and what comes next: ``model`` (a
    model request or a halt), ``tools`` (the calls of ``calls`` to run), ``wait`` (for
    decisions) or ``done``."""

    run_id: str
    version: int
    document_hash: str
    status: str
    turns: int
    next: str
    calls: list[str] = field(default_factory=list)
    pending: list[Pending] = field(default_factory=list)


@dataclass
class RunOptions:
    """Timeouts of the activities a run schedules (seconds)."""

    heartbeat_seconds: float = 10.0
    model_seconds: float = 600.0
    tool_seconds: float = 3600.0
    store_seconds: float = 60.0


@dataclass
class RunStart:
    """The workflow's input: the run, and what a continue-as-new carries over.
    ``version``, the stored version the run was started (or restarted) at, is the version
    the first model step is taken at; at any other (0: unknown, as in the inputs of the
    first release) the first step only looks at the run, and the next one takes it."""

    run_id: str
    options: RunOptions = field(default_factory=RunOptions)
    snapshot: Snapshot | None = None
    cancel_reason: str | None = None
    version: int = 0


@dataclass
class StepInput:
    run_id: str
    version: int  # the step is taken only if the run is still at this version


@dataclass
class ToolInput:
    run_id: str
    call_id: str
    turn: int  # the step the call belongs to


@dataclass
class Decision:
    """A human's decision on a pending call, bound to the hash of its arguments."""

    call_id: str
    decision: str  # approved, denied, responded
    arguments_hash: str
    reason: str | None = None
    edited_arguments: dict[str, Any] | None = None
    response: str | None = None
    principal: str | None = None
    expires_in: float | None = None


@dataclass
class DecideInput:
    run_id: str
    decision: Decision


@dataclass
class ReconcileInput:
    """Bring the stored run in line with the workflow: deny the approvals past their
    deadline (``expire``), cancel it (``cancel``: the reason), or fail it (``fail``)."""

    run_id: str
    expire: bool = False
    cancel: str | None = None
    fail: str | None = None


@dataclass
class Progress:
    """What the state query answers: the last snapshot and the calls in flight."""

    snapshot: Snapshot | None
    running: list[str] = field(default_factory=list)
    cancelling: bool = False

"""oarlock on Temporal (``pip install 'oarlock[temporal]'``): each run a workflow (id =
run id) orchestrating activities that take its steps through oarlock's runner and governed
executor, against oarlock's store, which keeps the document, invocations, receipts and
ledger. See :mod:`oarlock.temporal._workflow`."""

from oarlock.temporal._activities import Activities
from oarlock.temporal._client import (
    TemporalTarget,
    cancel_run,
    connect,
    decide_run,
    driven_by,
    has_worker,
    make_worker,
    restart_run,
    settled,
    start_run,
    workflow_runner,
)
from oarlock.temporal._types import Progress, RunOptions, Snapshot
from oarlock.temporal._workflow import RunWorkflow

__all__ = [
    "Activities",
    "Progress",
    "RunOptions",
    "RunWorkflow",
    "Snapshot",
    "TemporalTarget",
    "cancel_run",
    "connect",
    "decide_run",
    "driven_by",
    "has_worker",
    "make_worker",
    "restart_run",
    "settled",
    "start_run",
    "workflow_runner",
]

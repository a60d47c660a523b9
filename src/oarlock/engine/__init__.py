"""The run engine: agents, the pure turn loop, and the runner that wires its I/O; the
result of a run and the events of a streamed one."""

from oarlock.engine._agent import Agent, Limits
from oarlock.engine._core import TERMINAL
from oarlock.engine._execute import CallContext, Executor
from oarlock.engine._observe import CallWatch, ChatWatch, DriveWatch, RunObserver
from oarlock.engine._result import RunResult
from oarlock.engine._runner import RetryPolicy, Runner
from oarlock.engine._stream import (
    ApprovalRequested,
    Finished,
    ModelResponded,
    StatusChanged,
    StreamEvent,
    TextDelta,
    ToolFinished,
    ToolStarted,
    UserMessageAdded,
)

__all__ = [
    "TERMINAL",
    "Agent",
    "ApprovalRequested",
    "CallContext",
    "CallWatch",
    "ChatWatch",
    "DriveWatch",
    "Executor",
    "Finished",
    "Limits",
    "ModelResponded",
    "RetryPolicy",
    "RunObserver",
    "RunResult",
    "Runner",
    "StatusChanged",
    "StreamEvent",
    "TextDelta",
    "ToolFinished",
    "ToolStarted",
    "UserMessageAdded",
]

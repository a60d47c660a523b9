"""The run engine: agents, the pure turn loop, and the runner that wires its I/O."""

from oarlock.engine._agent import Agent, Limits
from oarlock.engine._core import TERMINAL
from oarlock.engine._execute import CallContext, Executor
from oarlock.engine._runner import RetryPolicy, Runner

__all__ = [
    "TERMINAL",
    "Agent",
    "CallContext",
    "Executor",
    "Limits",
    "RetryPolicy",
    "Runner",
]

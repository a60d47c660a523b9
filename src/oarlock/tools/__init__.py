"""Tools: functions the model may call, with schemas from their type hints."""

from oarlock.tools._context import RunContext
from oarlock.tools._process import ProcessResult, run_process
from oarlock.tools._tool import (
    CAUTIOUS_CLASS,
    ApprovalRule,
    KeyRule,
    Tool,
    ToolArgumentsError,
    ToolEffect,
    ToolOutput,
    Toolset,
    result_text,
    tool,
)

__all__ = [
    "CAUTIOUS_CLASS",
    "ProcessResult",
    "RunContext",
    "run_process",
    "ApprovalRule",
    "KeyRule",
    "Tool",
    "ToolArgumentsError",
    "ToolEffect",
    "ToolOutput",
    "Toolset",
    "result_text",
    "tool",
]

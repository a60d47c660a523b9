"""Tools: functions the model may call, with schemas from their type hints."""

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

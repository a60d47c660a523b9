"""Tools: functions the model may call, with schemas from their type hints."""

from oarlock.tools._tool import (
    CAUTIOUS_CLASS,
    ApprovalRule,
    Tool,
    ToolArgumentsError,
    Toolset,
    result_text,
    tool,
)

__all__ = [
    "CAUTIOUS_CLASS",
    "ApprovalRule",
    "Tool",
    "ToolArgumentsError",
    "Toolset",
    "result_text",
    "tool",
]

"""The formats oarlock reads and writes: Open Agent Run documents (oar/0.1, oar/0.2),
tool invocations (tool-invocation-v1) and tool receipts (tool-receipt-v1).

Names load on first use, so that importing one part (the shipped compiled run check, say)
does not load pydantic."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oarlock._lazy import lazy_exports

if TYPE_CHECKING:
    from oarlock.formats._codec import dump, dump_json, dump_run, parse, parse_json, parse_run
    from oarlock.formats._jcs import canonicalize, digest, digest_bytes
    from oarlock.formats._models import (
        AssistantMessage,
        ExecutionScope,
        Message,
        PendingApproval,
        PolicyDecision,
        RunDocument,
        RunStatus,
        SideEffectClass,
        TextPart,
        ToolCallPart,
        ToolInvocation,
        ToolReceipt,
        ToolResultPart,
        Usage,
        UserMessage,
    )
    from oarlock.formats._report import Kind, Problem, Report
    from oarlock.formats._rules import APPROVAL_REQUIRED_CLASSES, SIDE_EFFECT_CLASSES
    from oarlock.formats._time import now_rfc3339, parse_rfc3339
    from oarlock.formats._upgrade import downgrade, upgrade
    from oarlock.formats._validate import detect_kind, ensure_valid, loads_strict, validate

__all__ = [
    "APPROVAL_REQUIRED_CLASSES",
    "AssistantMessage",
    "ExecutionScope",
    "Kind",
    "Message",
    "PendingApproval",
    "PolicyDecision",
    "Problem",
    "Report",
    "RunDocument",
    "RunStatus",
    "SIDE_EFFECT_CLASSES",
    "SideEffectClass",
    "TextPart",
    "ToolCallPart",
    "ToolInvocation",
    "ToolReceipt",
    "ToolResultPart",
    "Usage",
    "UserMessage",
    "canonicalize",
    "detect_kind",
    "digest",
    "digest_bytes",
    "downgrade",
    "dump",
    "dump_json",
    "dump_run",
    "ensure_valid",
    "loads_strict",
    "now_rfc3339",
    "parse",
    "parse_json",
    "parse_rfc3339",
    "parse_run",
    "upgrade",
    "validate",
]

_WHERE: dict[str, str] = {
    "APPROVAL_REQUIRED_CLASSES": "_rules",
    "AssistantMessage": "_models",
    "ExecutionScope": "_models",
    "Kind": "_report",
    "Message": "_models",
    "PendingApproval": "_models",
    "PolicyDecision": "_models",
    "Problem": "_report",
    "Report": "_report",
    "RunDocument": "_models",
    "RunStatus": "_models",
    "SIDE_EFFECT_CLASSES": "_rules",
    "SideEffectClass": "_models",
    "TextPart": "_models",
    "ToolCallPart": "_models",
    "ToolInvocation": "_models",
    "ToolReceipt": "_models",
    "ToolResultPart": "_models",
    "Usage": "_models",
    "UserMessage": "_models",
    "canonicalize": "_jcs",
    "detect_kind": "_validate",
    "digest": "_jcs",
    "digest_bytes": "_jcs",
    "downgrade": "_upgrade",
    "dump": "_codec",
    "dump_json": "_codec",
    "dump_run": "_codec",
    "ensure_valid": "_validate",
    "loads_strict": "_validate",
    "now_rfc3339": "_time",
    "parse": "_codec",
    "parse_json": "_codec",
    "parse_rfc3339": "_time",
    "parse_run": "_codec",
    "upgrade": "_upgrade",
    "validate": "_validate",
}


__getattr__, __dir__ = lazy_exports(__name__, _WHERE, globals())

"""The formats oarlock reads and writes: Open Agent Run documents (oar/0.1, oar/0.2),
tool invocations (tool-invocation-v1) and tool receipts (tool-receipt-v1)."""

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

"""Typed models of the three formats, for the engine's hot path.

Parsing a valid document and dumping it gives back the same JSON: unknown members are
kept (the run schema is open), optional members that were absent stay absent, and numbers
keep their type. A member is read by its JSON name alone: one spelled like a field's
Python name (``decided_by`` for ``decidedBy``) is an unknown member, kept where the schema
is open and refused where it is closed. An integer member given as an integral number
(``2.0``, which JSON Schema's ``integer`` accepts) is read as that integer and written
back as it was given. Tags (``type``, ``role``) and required members have no defaults, so a
model built in code names them, and a dump (which leaves out members never set) writes
them. Use :func:`parse_run` / :func:`dump_run` (and their siblings) rather
than calling pydantic directly: they fix the options that make the round trip exact.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PlainSerializer,
    PrivateAttr,
    ValidatorFunctionWrapHandler,
    WrapValidator,
)
from pydantic.alias_generators import to_camel

__all__ = [
    "AssistantMessage",
    "ExecutionScope",
    "Message",
    "PendingApproval",
    "PolicyDecision",
    "RunDocument",
    "RunStatus",
    "SideEffectClass",
    "TextPart",
    "ToolCallPart",
    "ToolInvocation",
    "ToolReceipt",
    "ToolResultPart",
    "Usage",
    "UserMessage",
]

RunStatus = Literal[
    "running",
    "waiting_approval",
    "completed",
    "failed",
    "halted_budget",
    "halted_max_turns",
    "cancelled",
]
SideEffectClass = Literal[
    "read",
    "sandbox",
    "shared-write",
    "external",
    "production",
    "publication",
    "spend",
]
Decision = Literal["approved", "denied", "responded"]
Number = int | float
JsonObject = dict[str, Any]


class _WrittenAsFloat(int):
    """An integer that the document wrote as an integral number (``2.0``, ``1e3``, ``-0.0``):
    it is the integer (arithmetic on it gives plain ints), and a dump writes it as written,
    so that the round trip is exact and the canonical form (RFC 8785) unchanged."""

    written: float


def _integer(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """JSON Schema's ``integer``: an int, or a float without a fractional part."""
    if type(value) is float and value.is_integer():
        number = _WrittenAsFloat(handler(int(value)))  # the field's own checks (ge=0) hold
        number.written = value
        return number
    return handler(value)


def _as_written(value: int) -> int | float:
    return value.written if type(value) is _WrittenAsFloat else value


Integer = Annotated[int, WrapValidator(_integer), PlainSerializer(_as_written)]


class _Open(BaseModel):
    """A part of the run document: the schema is open, so unknown members are kept."""

    model_config = ConfigDict(
        extra="allow",
        strict=True,
        alias_generator=to_camel,
        populate_by_name=True,
        serialize_by_alias=True,
        validate_assignment=False,
    )


class _Closed(BaseModel):
    """An executor record: the schema is closed, so unknown members are refused."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        alias_generator=to_camel,
        populate_by_name=True,
        serialize_by_alias=True,
    )


class TextPart(_Open):
    type: Literal["text"]
    text: str


class ToolCallPart(_Open):
    type: Literal["tool_call"]
    id: str
    name: str
    arguments: JsonObject


class ToolResultPart(_Open):
    type: Literal["tool_result"]
    tool_call_id: str
    tool_name: str
    content: str
    is_error: bool = False


UserPart = Annotated[TextPart | ToolResultPart, Discriminator("type")]
AssistantPart = Annotated[TextPart | ToolCallPart, Discriminator("type")]


class UserMessage(_Open):
    role: Literal["user"]
    content: list[UserPart]


class AssistantMessage(_Open):
    role: Literal["assistant"]
    content: list[AssistantPart]

    @property
    def tool_calls(self) -> list[ToolCallPart]:
        return [p for p in self.content if isinstance(p, ToolCallPart)]

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.content if isinstance(p, TextPart))


Message = Annotated[UserMessage | AssistantMessage, Discriminator("role")]


class PendingApproval(_Open):
    tool_call_id: str
    tool_name: str
    arguments: JsonObject
    requested_at: str
    decision: Decision | None = None
    decided_by: Literal["human", "policy"] | None = None
    reason: str | None = None
    edited_arguments: JsonObject | None = None
    response: str | None = None
    principal: str | None = None  # extension: who decided (a verified key id or a name)
    decided_at: str | None = None  # extension: when


class Usage(_Open):
    input_tokens: Number = Field(ge=0)
    output_tokens: Number = Field(ge=0)
    cost_usd: Number = Field(ge=0)


class RunDocument(_Open):
    format: Literal["oar/0.1", "oar/0.2"]
    tags: dict[str, str] | None = None
    id: str = Field(pattern=r"^[A-Za-z0-9_-]+$")
    agent: str = Field(min_length=1)
    model: str = Field(min_length=1)
    input: str
    status: RunStatus
    messages: list[Message]
    pending_approvals: list[PendingApproval]
    buffered_tool_results: list[ToolResultPart]
    usage: Usage
    turns: Integer = Field(ge=0)
    result: str | None = None
    error: str | None = None
    created_at: str
    updated_at: str
    # extension: the approvals once settled, in the order they were decided (the pending
    # list is cleared when the run moves on; the history stays with the document)
    decisions: list[PendingApproval] = Field(default_factory=list)
    # the messages as last dumped and the JSON of each (see _codec.dump_run_json): not
    # part of the document
    _dumped: list[object] = PrivateAttr(default_factory=list)
    _dumped_json: list[bytes] = PrivateAttr(default_factory=list)
    # the tool call ids of the first ``_call_ids_counted`` messages (see
    # engine._core._unique_call_ids): not part of the document
    _call_ids: set[str] = PrivateAttr(default_factory=set)
    _call_ids_counted: int = PrivateAttr(default=0)


class ExecutionScope(_Closed):
    tenant_id: str = Field(min_length=1)
    project_id: str | None = None
    environment: str | None = None
    principal_id: str | None = None
    labels: dict[str, str] | None = None


class PolicyDecision(_Closed):
    decision_id: str
    effect: Literal["allow", "deny", "require_approval"]
    policy_id: str
    evaluated_at: str
    policy_version: str | None = None
    rule_id: str | None = None
    reasons: list[str] | None = None


class Sandbox(_Open):
    workspace_id: str | None = None
    egress_profile: str | None = None


class ToolInvocation(_Closed):
    invocation_id: str
    tool_id: str
    schema_version: str
    mcp_server_id: str | None = None
    scope: ExecutionScope
    run_id: str
    step_id: str
    attempt_id: str
    agent_id: str | None = None
    side_effect_class: SideEffectClass
    idempotency_key: str
    arguments: JsonObject
    arguments_hash: str
    policy_decision: PolicyDecision
    approval_id: str | None = None
    timeout_seconds: Integer | None = None
    sandbox: Sandbox | None = None


class Effect(_Open):
    kind: str | None = None
    external_reference: str | None = None
    reversible: bool | None = None
    effect_hash: str | None = None


class ReceiptUsage(_Open):
    duration_ms: Integer | None = None
    bytes_in: Integer | None = None
    bytes_out: Integer | None = None


class ReceiptError(_Open):
    code: str | None = None
    message: str | None = None


class ToolReceipt(_Closed):
    invocation_id: str
    status: Literal["Succeeded", "Failed", "Denied", "TimedOut", "Uncertain"]
    started_at: str
    finished_at: str | None = None
    effect: Effect | None = None
    result_ref: str | None = None
    sanitized: bool | None = None
    usage: ReceiptUsage | None = None
    error: ReceiptError | None = None
    receipt_hash: str

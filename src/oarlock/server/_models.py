"""The API's request and response bodies (they make its OpenAPI document)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "AgentOut",
    "ApprovalOut",
    "ApprovalPage",
    "AuditOut",
    "CancelIn",
    "DecisionIn",
    "DecisionOut",
    "EventOut",
    "ExactArgumentsOut",
    "PolicyOut",
    "ReceiptOut",
    "ReconcileIn",
    "RunIn",
    "RunOut",
    "RunPageOut",
    "ToolOut",
]

MAX_INPUT = 100_000
MAX_TEXT = 4_000
MAX_TAGS = 32


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ToolOut(BaseModel):
    name: str
    sideEffect: str
    description: str
    allowResponse: bool


class AgentOut(BaseModel):
    name: str
    file: str
    model: str
    instructions: str
    tools: list[ToolOut]
    policy: str | None


class RunIn(_In):
    agent: str = Field(min_length=1, max_length=200)
    input: str = Field(max_length=MAX_INPUT)
    tags: dict[str, str] = Field(default_factory=dict, max_length=MAX_TAGS)


class RunOut(BaseModel):
    """A run as lists show it."""

    id: str
    agent: str
    status: str
    tags: dict[str, str]
    turns: int
    createdAt: str
    updatedAt: str
    holder: str | None = None


class RunPageOut(BaseModel):
    runs: list[RunOut]
    nextCursor: str | None


class EventOut(BaseModel):
    seq: int
    kind: str
    at: str
    data: dict[str, Any]


class CancelIn(_In):
    reason: str | None = Field(default=None, max_length=MAX_TEXT)


class PolicyOut(BaseModel):
    ruleId: str | None
    reasons: list[str]
    fourEyes: bool = False


class ApprovalOut(BaseModel):
    runId: str
    toolCallId: str
    tool: str
    sideEffect: str | None
    allowResponse: bool
    argumentsSchema: dict[str, Any] | None
    arguments: dict[str, Any] = Field(
        description="the call's arguments as shown: secrets redacted (argumentsRedacted says "
        "where); the exact ones are at /v1/approvals/{run_id}/{call_id}/arguments"
    )
    argumentsHash: str | None = Field(
        description="the hash an approval of the call carries, over the arguments as the tool "
        "receives them (the invocation's argumentsHash); null when they have none"
    )
    argumentsRedacted: list[str] = Field(
        description="JSON Pointers (into arguments) of the values shown redacted; in a "
        "decision's editedArguments, such a value given back as shown keeps its real value"
    )
    requestedAt: str
    expiresAt: str | None
    agent: str
    tags: dict[str, str]
    runStatus: str
    policy: PolicyOut | None
    decision: str | None
    decidedBy: str | None
    version: str


class ExactArgumentsOut(BaseModel):
    """A call's exact arguments, for a principal who may decide it: nothing redacted
    (control and bidirectional characters are JSON escapes)."""

    runId: str
    toolCallId: str
    arguments: dict[str, Any]
    argumentsHash: str | None
    version: str


class ApprovalPage(BaseModel):
    approvals: list[ApprovalOut]


class DecisionIn(_In):
    decision: Literal["approved", "denied", "responded"]
    editedArguments: dict[str, Any] | None = None
    reason: str | None = Field(default=None, max_length=MAX_TEXT)
    response: str | None = Field(default=None, max_length=MAX_INPUT)


class DecisionOut(BaseModel):
    runId: str
    toolCallId: str
    decision: str
    decidedBy: str
    runStatus: str


class ReceiptOut(BaseModel):
    invocationId: str
    status: str
    tool: str
    runId: str
    finishedAt: str | None
    effect: dict[str, Any] | None
    error: dict[str, Any] | None
    reconciled: list[str]


class ReconcileIn(_In):
    outcome: Literal["succeeded", "not-applied"]
    evidence: str = Field(min_length=1, max_length=MAX_TEXT)
    supersede: bool = False


class AuditOut(BaseModel):
    ok: bool
    chain: str
    shared: bool = Field(
        default=False,
        description="the chain holds other tenants' records too (SQLite's one chain): the "
        "counts are of this tenant's entries, and the chain's head and checkpoints are not "
        "shown",
    )
    entries: int
    headSeq: int | None
    headHash: str | None
    checkpointsChecked: int
    latestCheckpoint: dict[str, Any] | None
    problems: list[dict[str, Any]]

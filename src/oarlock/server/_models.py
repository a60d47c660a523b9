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
    arguments: dict[str, Any]
    requestedAt: str
    expiresAt: str | None
    agent: str
    tags: dict[str, str]
    runStatus: str
    policy: PolicyOut | None
    decision: str | None
    decidedBy: str | None
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
    entries: int
    headSeq: int | None
    headHash: str | None
    checkpointsChecked: int
    latestCheckpoint: dict[str, Any] | None
    problems: list[dict[str, Any]]

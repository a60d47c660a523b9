"""Errors as JSON: every refusal is ``{"error": {"status", "code", "message"}}``, with the
same codes as the command line (``already_decided``, ``invalid_edit``,
``approval_expired``, ...), and its message through the renderer."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from oarlock._render import line
from oarlock.errors import (
    ConfigError,
    ConflictError,
    DecisionRefused,
    NotFound,
    OarlockError,
    RunStateError,
    StoreError,
    UsageError,
)

__all__ = [
    "IF_MATCH_REQUIRED",
    "ApiError",
    "ErrorBody",
    "ErrorDetail",
    "error_body",
    "responses",
    "status_of",
]


class ErrorDetail(BaseModel):
    status: int
    code: str
    message: str


class ErrorBody(BaseModel):
    """What every refusal returns."""

    error: ErrorDetail


class ApiError(Exception):
    """A refusal of the HTTP layer itself (authentication, roles, limits, preconditions)."""

    def __init__(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers


# a decision without If-Match: 428 (Precondition Required), though the document says, as it
# should, that the header is required, which a validation error (422) would otherwise refuse
IF_MATCH_REQUIRED = ("if_match_required", "a decision needs If-Match: the approval's version")

# decision refusals by code; anything not named is 422 (the request breaks a rule)
_DECISION_STATUS = {
    "already_decided": 409,
    "run_not_waiting": 409,
    "approval_unauthenticated": 409,
    "approval_expired": 410,
    "unknown_call": 404,
}
_CONFLICT_STATUS = {"run_finished": 409, "run_state": 409}


def status_of(exc: OarlockError) -> int:
    """The HTTP status of an error of the engine, the runner or a store."""
    if isinstance(exc, NotFound):
        return 404
    if isinstance(exc, DecisionRefused):
        return _DECISION_STATUS.get(exc.code, 422)
    if isinstance(exc, ConflictError | RunStateError):
        return _CONFLICT_STATUS.get(exc.code, 409)
    if isinstance(exc, UsageError | ConfigError):
        return 422
    if isinstance(exc, StoreError):
        return 503
    return 422


def error_body(status: int, code: str, message: str) -> dict[str, Any]:
    return {"error": {"status": status, "code": line(code), "message": line(message)}}


_WHAT = {
    400: "the request is malformed",
    401: "no valid token",
    403: "the token's role does not allow it",
    404: "no such thing in the token's tenant",
    409: "the state changed or another decision won",
    410: "the approval expired",
    413: "the request body is too large",
    422: "the request breaks a rule",
    428: "If-Match is required",
    429: "too many requests",
}


def responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI responses of an operation's refusals."""
    body = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    return {
        s: {"model": ErrorBody, "description": _WHAT[s], "content": body}
        for s in sorted(set(statuses))
    }

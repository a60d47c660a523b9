"""The one error hierarchy of oarlock.

Every error oarlock raises on purpose derives from :class:`OarlockError` and carries a
stable ``code`` (a short snake_case name a caller can match on) next to its message::

    OarlockError
    ├── FormatError                  a document, record or file breaks a format rule
    │   ├── CanonicalizationError    a value has no RFC 8785 (JCS) form
    │   ├── DocumentInvalid          schema or semantic rules failed (carries the report)
    │   └── UnsupportedFormat        a format version oarlock does not know
    ├── UpgradeError                 a document cannot be converted to the asked format
    ├── UsageError                   a caller asked for something that makes no sense
    ├── ConfigError                  an agent file, policy file or pricing entry is wrong
    ├── DecisionRefused              an approval decision is not allowed (unknown call,
    │                                 already decided, run not waiting, invalid edit)
    ├── RunStateError                an operation does not fit the run's status
    ├── ConflictError                a concurrent writer won (optimistic concurrency)
    │   ├── LeaseLost                a worker's lease on a run passed to another
    │   └── RunBusy                  another live worker holds the run
    ├── NotFound                     a run, receipt or other stored thing does not exist
    ├── StoreError                   the store failed or holds data it cannot trust
    │   └── IntegrityError           stored data was tampered with or is corrupt
    ├── ModelError                   a model provider failed (after retries)
    │   └── RetryableModelError      rate limit or server error, may be retried
    └── ToolError                    a tool could not be found, called or completed
        └── OutcomeUnknown           a tool cannot tell whether its effect happened
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from oarlock.formats._report import Report

__all__ = [
    "CanonicalizationError",
    "ConfigError",
    "ConflictError",
    "DecisionRefused",
    "DocumentInvalid",
    "FormatError",
    "IntegrityError",
    "LeaseLost",
    "ModelError",
    "NotFound",
    "OarlockError",
    "OutcomeUnknown",
    "RetryableModelError",
    "RunBusy",
    "RunStateError",
    "StoreError",
    "ToolError",
    "UnsupportedFormat",
    "UpgradeError",
    "UsageError",
]


class OarlockError(Exception):
    """Base of every error oarlock raises on purpose."""

    code = "oarlock_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        return self.message


class FormatError(OarlockError):
    code = "format_error"


class CanonicalizationError(FormatError):
    code = "jcs_unrepresentable"


class DocumentInvalid(FormatError):
    """A document failed validation; ``report`` holds every error found."""

    code = "document_invalid"

    def __init__(self, report: Report) -> None:
        first = report.errors[0] if report.errors else None
        where = f" at {first.pointer or '/'}" if first else ""
        text = f"{report.kind} document is invalid{where}: {first.message}" if first else "invalid"
        more = len(report.errors) - 1 + report.more_errors
        if more > 0:
            text += f" (and {'at least ' if not report.more_errors_exact else ''}{more} more)"
        super().__init__(text)
        self.report = report


class UnsupportedFormat(FormatError):
    code = "unsupported_format"


class UpgradeError(OarlockError):
    code = "upgrade_refused"


class UsageError(OarlockError):
    code = "usage"


class ConfigError(OarlockError):
    """``problems`` lists every problem found, each naming its file, key and rule; an
    error about one thing lists its message alone."""

    code = "config_error"

    def __init__(
        self, message: str, *, code: str | None = None, problems: Sequence[str] = ()
    ) -> None:
        super().__init__(message, code=code)
        self.problems: tuple[str, ...] = tuple(problems) or (message,)


class DecisionRefused(OarlockError):
    code = "decision_refused"


class RunStateError(OarlockError):
    code = "run_state"


class ConflictError(OarlockError):
    code = "conflict"


class LeaseLost(ConflictError):
    """A write fenced by a lease whose epoch the run has left: nothing was written; the
    worker must drop the run."""

    code = "lease_lost"


class RunBusy(ConflictError):
    """The run is held by another live worker (``owner`` until ``until``)."""

    code = "run_busy"


class NotFound(OarlockError):
    code = "not_found"


class StoreError(OarlockError):
    code = "store_error"


class IntegrityError(StoreError):
    code = "integrity"


class ModelError(OarlockError):
    code = "model_error"


class RetryableModelError(ModelError):
    code = "model_retryable"

    def __init__(
        self, message: str, *, code: str | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message, code=code)
        self.retry_after = retry_after


class ToolError(OarlockError):
    code = "tool_error"


class OutcomeUnknown(ToolError):
    """Raised by a tool whose call may or may not have taken effect (a connection lost
    mid-call, a server that crashed). The governed executor records a side-effecting call
    that raises it as Uncertain, never as Failed."""

    code = "outcome_unknown"

"""What the runner tells an observer (traces, metrics): one interface, asked once per drive.

:meth:`RunObserver.drive` is asked when a drive of a run begins; it returns a
:class:`DriveWatch` that is told of each model request and tool call of that drive, or
None when nothing would be recorded, and then the drive costs the runner nothing more than
that one question. :meth:`RunObserver.committed` is told of every commit the runner makes
(creations, steps, decisions), after it is durable. :mod:`oarlock.telemetry` implements it
over OpenTelemetry."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from oarlock.formats._models import RunDocument, ToolCallPart, ToolResultPart
    from oarlock.governance._executor import CallOutcome
    from oarlock.models._base import ModelRequest, ModelResponse
    from oarlock.store._base import Event
    from oarlock.tools._tool import Tool

__all__ = ["CallWatch", "ChatWatch", "DriveWatch", "RunObserver"]


class ChatWatch(Protocol):
    """One model request (with its retries)."""

    @property
    def span_id(self) -> str | None: ...

    def retried(self, attempt: int, error: Exception, delay: float) -> None: ...

    def done(self, response: ModelResponse, cost: float | None) -> None: ...

    def failed(self, error: BaseException) -> None: ...


class CallWatch(Protocol):
    """One tool call handed to the executor."""

    @property
    def span_id(self) -> str | None: ...

    def active(self) -> AbstractContextManager[object]:
        """Makes the call the current one while the executor runs it."""
        ...

    def outcome(self, outcome: CallOutcome) -> None:
        """What the executor decided and recorded (told before the call returns)."""
        ...

    def done(self, result: ToolResultPart) -> None: ...

    def failed(self, error: BaseException) -> None: ...


class DriveWatch(Protocol):
    """One drive of a run (an attempt): from its start until it returns or raises."""

    @property
    def span_id(self) -> str | None: ...

    def active(self) -> AbstractContextManager[object]: ...

    def chat(self, model_id: str, request: ModelRequest) -> ChatWatch: ...

    def call(self, tool: Tool, call: ToolCallPart, arguments: dict[str, Any]) -> CallWatch: ...

    def end(self, doc: RunDocument | None, error: BaseException | None) -> None: ...


class RunObserver(Protocol):
    def drive(self, doc: RunDocument) -> DriveWatch | None:
        """A watch over the drive of ``doc`` that begins now (it may add members to the
        document, committed with the drive's first step), or None to watch nothing."""
        ...

    def committed(self, doc: RunDocument, events: Sequence[Event]) -> None:
        """Told of every commit the runner made (the document as committed)."""
        ...

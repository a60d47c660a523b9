"""A run as a stream of typed events, for code that shows a run while it goes::

    async for event in runner.stream("Refund order A-1001"):
        match event:
            case TextDelta(text=text):
                print(text, end="")
            case ToolFinished(tool=tool, status=status):
                print(f"\\n{tool}: {status}")
            case Finished(result=result):
                print(result.status)

Events come in the order things happen: a model's text as it streams in, then the
response (``ModelResponded``); each tool call's start and end (with its receipt's status);
an approval asked for; each change of status; and last, ``Finished`` with the
:class:`RunResult`. The same events drive the command line's progress and streamed text.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from oarlock.engine._result import RunResult
    from oarlock.formats._models import RunDocument
    from oarlock.store._base import Event

__all__ = [
    "ApprovalRequested",
    "Finished",
    "ModelResponded",
    "StatusChanged",
    "StreamEvent",
    "TextDelta",
    "ToolFinished",
    "ToolStarted",
    "UserMessageAdded",
    "Streams",
]


@dataclass(frozen=True, slots=True)
class TextDelta:
    run_id: str
    text: str


@dataclass(frozen=True, slots=True)
class ModelResponded:
    run_id: str
    turn: int
    tool_calls: tuple[str, ...]
    input_tokens: int
    output_tokens: int
    cost_usd: float | None


@dataclass(frozen=True, slots=True)
class ToolStarted:
    run_id: str
    call_id: str
    tool: str


@dataclass(frozen=True, slots=True)
class ToolFinished:
    run_id: str
    call_id: str
    tool: str
    ok: bool
    status: str | None  # the receipt's status, when the call got one


@dataclass(frozen=True, slots=True)
class ApprovalRequested:
    run_id: str
    call_id: str
    tool: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class UserMessageAdded:
    run_id: str
    text: str


@dataclass(frozen=True, slots=True)
class StatusChanged:
    run_id: str
    old: str
    new: str


@dataclass(frozen=True, slots=True)
class Finished:
    result: RunResult[Any]


StreamEvent = (
    TextDelta
    | ModelResponded
    | ToolStarted
    | ToolFinished
    | ApprovalRequested
    | UserMessageAdded
    | StatusChanged
    | Finished
)


def from_stored(run_id: str, doc: RunDocument, events: list[Event]) -> list[StreamEvent]:
    """The stream events of a commit's stored events."""
    out: list[StreamEvent] = []
    for ev in events:
        d = ev.data
        if ev.kind == "model_responded":
            out.append(
                ModelResponded(
                    run_id,
                    int(d.get("turn", 0)),
                    tuple(d.get("toolCalls") or ()),
                    int(d.get("inputTokens", 0)),
                    int(d.get("outputTokens", 0)),
                    d.get("costUsd"),
                )
            )
        elif ev.kind == "approval_requested":
            pending = next(
                (a for a in doc.pending_approvals if a.tool_call_id == d.get("toolCallId")),
                None,
            )
            out.append(
                ApprovalRequested(
                    run_id,
                    str(d.get("toolCallId")),
                    str(d.get("toolName", "")),
                    dict(pending.arguments) if pending is not None else {},
                )
            )
        elif ev.kind == "status_changed":
            out.append(StatusChanged(run_id, str(d.get("from")), str(d.get("to"))))
        elif ev.kind == "user_message":
            out.append(UserMessageAdded(run_id, str(d.get("text", ""))))
    return out


class Streams:
    """The runner's open streams, by run: where its hooks send the events."""

    def __init__(self, listener: Callable[[StreamEvent], None] | None = None) -> None:
        self._queues: dict[str, list[asyncio.Queue[StreamEvent | None]]] = {}
        self.receipts: dict[tuple[str, str], str] = {}  # (run, call): receipt status
        self.listener = listener  # every event of every run the runner drives

    def watching(self, run_id: str) -> bool:
        return self.listener is not None or run_id in self._queues

    def emit(self, run_id: str, *events: StreamEvent) -> None:
        for event in events:
            if self.listener is not None:
                self.listener(event)
            for queue in self._queues.get(run_id, ()):
                queue.put_nowait(event)

    async def follow(
        self, run_id: str, work: Callable[[], Awaitable[RunResult[Any]]]
    ) -> AsyncIterator[StreamEvent]:
        """Run ``work`` (a drive of ``run_id``) and yield its events as they come, then
        ``Finished``; an error of the drive is raised after the events before it."""
        queue: asyncio.Queue[StreamEvent | None] = asyncio.Queue()
        self._queues.setdefault(run_id, []).append(queue)

        async def drive() -> RunResult[Any]:
            try:
                return await work()
            finally:
                queue.put_nowait(None)

        task = asyncio.ensure_future(drive())
        try:
            while (event := await queue.get()) is not None:
                yield event
            yield Finished(await task)
        finally:
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            queues = self._queues.get(run_id, [])
            if queue in queues:
                queues.remove(queue)
            if not queues:
                self._queues.pop(run_id, None)
                for key in [k for k in self.receipts if k[0] == run_id]:
                    self.receipts.pop(key, None)

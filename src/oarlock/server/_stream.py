"""Server-Sent Events: a run's events as they are committed, and a tenant's inbox (new
approvals, decisions, status changes). Both resume from ``Last-Event-ID`` and end when
the server shuts down; a run's stream also ends once the run has."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse

from oarlock._render import dumps
from oarlock.engine._core import TERMINAL
from oarlock.server._api import Reader, _service
from oarlock.server._errors import ApiError, responses
from oarlock.server._links import operation_id

__all__ = ["router"]

router = APIRouter(prefix="/v1", generate_unique_id_function=operation_id)
_STREAM: dict[int | str, dict[str, Any]] = {
    200: {"description": "an event stream", "content": {"text/event-stream": {}}}
}
LastEventId = Annotated[str | None, Header(alias="Last-Event-ID", max_length=100)]
# the ids this server gives: a run's event's sequence number; the inbox's BOOT-N
RUN_EVENT_ID = re.compile(r"[0-9]{1,16}", re.ASCII)
INBOX_EVENT_ID = re.compile(r"[0-9]{1,20}-[0-9]{1,16}", re.ASCII)


def _last_event_id(given: str | None, form: re.Pattern[str], what: str) -> str | None:
    """``Last-Event-ID`` when it is an id of the form this stream gives, None without
    one; anything else is refused (400 ``invalid_last_event_id``) before the stream
    starts."""
    if given is None or given == "":
        return None
    if not form.fullmatch(given):
        raise ApiError(
            400, "invalid_last_event_id", f"Last-Event-ID is not an id this stream gives ({what})"
        )
    return given


class EventStream(StreamingResponse):
    """``text/event-stream``, never cached nor buffered by a proxy."""

    media_type = "text/event-stream"

    def __init__(self, content: AsyncIterator[str]) -> None:
        super().__init__(
            content,
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )


def _event(event_id: str, kind: str, data: Any) -> str:
    """One event: its id, its kind and its data as one line of JSON (the renderer's: no
    raw newline can end the data early)."""
    return f"id: {event_id}\nevent: {kind}\ndata: {dumps(data, indent=None)}\n\n"


@router.get(
    "/runs/{run_id}/stream",
    response_class=EventStream,
    status_code=200,
    responses={**_STREAM, **responses(400, 401, 403, 404, 413, 422, 429)},
    tags=["runs"],
)
async def run_stream(
    request: Request,
    principal: Reader,
    run_id: str,
    last_event_id: LastEventId = None,
    after: Annotated[int, Query(ge=0, le=2**53)] = 0,
) -> EventStream:
    """The run's events (id: the event's sequence number), from ``Last-Event-ID`` (or
    ``after``) on, until the run ends."""
    service = _service(request)
    await service.load(principal, run_id)  # 404 before the stream starts
    last = _last_event_id(last_event_id, RUN_EVENT_ID, "a whole number of up to 16 digits")
    start = int(last) if last is not None else after
    interval = request.app.state.settings.stream_interval

    hub = request.app.state.hub

    async def events() -> AsyncIterator[str]:
        seq = start
        while not (hub.closing or hub.closed.is_set()):
            for e in await service.events(principal, run_id, seq):
                seq = e["seq"]
                yield _event(str(seq), e["kind"], e)
            stored = await service.store.load(run_id)
            if stored.document.status in TERMINAL:
                fresh = await service.events(principal, run_id, seq)
                for e in fresh:
                    seq = e["seq"]
                    yield _event(str(seq), e["kind"], e)
                return
            await asyncio.sleep(interval)

    return EventStream(events())


@router.get(
    "/approvals/stream",
    response_class=EventStream,
    status_code=200,
    responses={**_STREAM, **responses(400, 401, 403, 413, 422, 429)},
    tags=["approvals"],
)
async def inbox_stream(
    request: Request, principal: Reader, last_event_id: LastEventId = None
) -> EventStream:
    """The tenant's inbox: ``snapshot`` (every pending approval) first unless resuming,
    then ``approval_requested``, ``approval_decided`` and ``run_status``."""
    hub = request.app.state.hub
    last = _last_event_id(last_event_id, INBOX_EVENT_ID, "two whole numbers: BOOT-N")

    async def events() -> AsyncIterator[str]:
        async for e in hub.subscribe(principal, last):
            yield ": ping\n\n" if e is None else _event(e.id, e.kind, e.data)

    return EventStream(events())

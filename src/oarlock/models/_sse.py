"""Server-sent events, read from the lines of a streamed HTTP body.

The OpenAI adapter reads its streams itself, rather than through the SDK's stream object,
to know what the SDK does not tell: whether a chat stream reached its ``data: [DONE]``
(a stream that did is complete, with or without a ``finish_reason``), and what an error
sent inside the stream said, with its code, whatever its shape.
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, AsyncIterable
from dataclasses import dataclass

_BREAK = re.compile(rb"\r\n|\n|\r")

__all__ = ["Event", "events", "lines"]


@dataclass(frozen=True, slots=True)
class Event:
    """One event: its ``event:`` name (None when it has none) and its data lines, joined."""

    name: str | None
    data: str


async def lines(chunks: AsyncIterable[bytes]) -> AsyncGenerator[str, None]:
    """The lines of a body, split where the specification splits them (CR LF, LF or CR,
    and nowhere else: a U+2028 inside the JSON of an event is text), each decoded as UTF-8
    (a byte that is not becomes U+FFFD)."""
    pending = b""
    for_cr = False  # the last chunk ended in CR: an LF that starts the next belongs to it
    async for chunk in chunks:
        if not chunk:
            continue
        data = chunk[1:] if for_cr and chunk.startswith(b"\n") else chunk
        for_cr = data.endswith(b"\r")
        pending += data
        *done, pending = _BREAK.split(pending)
        for line in done:
            yield line.decode("utf-8", "replace")
    if pending:
        yield pending.decode("utf-8", "replace")


async def events(source: AsyncIterable[str]) -> AsyncGenerator[Event, None]:
    """The events of a stream's lines (the line breaks already taken off), as the
    specification reads them: ``data:`` lines gather until a blank line, ``event:`` names
    the event, lines starting with ``:`` are comments, ``id:`` and ``retry:`` mean nothing
    here. An event the stream ends in, without its blank line, is given too (servers leave
    it out after ``[DONE]``)."""
    name: str | None = None
    data: list[str] = []
    first = True
    async for raw in source:
        line = raw.removeprefix("\ufeff") if first else raw
        first = False
        if not line:
            if data:
                yield Event(name, "\n".join(data))
            name, data = None, []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "data":
            data.append(value)
        elif field == "event":
            name = value or None
    if data:
        yield Event(name, "\n".join(data))

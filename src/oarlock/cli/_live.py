"""What a run shows on a terminal while it goes: one progress line, rewritten in place, and
the model's text as it streams in.

The two share standard error and never overwrite each other: the progress line is ended
before text starts, and a progress update after text starts on a fresh line. Streamed text
goes through the renderer (:func:`oarlock._render.block`), each of its lines indented
under the progress lines, so a line of the model's cannot pass for one of oarlock's.

Text is held back until a line is complete, or until more than :data:`HOLD` characters
wait, then written up to the last space before that tail: a secret or an escape split
across two chunks of the stream is redacted or escaped whole."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, TextIO

from oarlock._render import block, line
from oarlock._secrets import redact

if TYPE_CHECKING:
    from oarlock.engine._stream import StreamEvent

__all__ = ["HOLD", "Live"]

HOLD = 64  # characters of an unfinished line kept back until more of it comes
INDENT = "    "  # streamed text, under the progress lines (indented by two)
_ERASE = "\x1b[K"  # erase to the end of the line


class Live:
    """The terminal view of one command: :meth:`show` takes the runner's stream events
    (``Runner(on_event=live.show)``); :meth:`close` ends the last line."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream
        self._status_open = False  # a progress line is shown and not ended
        self._at_line_start = True  # text: nothing written yet on the current line
        self._held = ""  # text received and not written yet

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stderr

    def enabled(self) -> bool:
        """Whether the stream is a terminal (else nothing is shown)."""
        try:
            return self.stream.isatty()
        except (AttributeError, ValueError):
            return False

    # -- the runner's events --------------------------------------------------------------
    def show(self, event: StreamEvent) -> None:
        """Show one of a runner's stream events (``Runner(on_event=live.show)``)."""
        from oarlock.engine._stream import ModelResponded, StatusChanged, TextDelta

        if not self.enabled():
            return
        if isinstance(event, TextDelta):
            self.text(event.text)
            return
        if isinstance(event, ModelResponded):
            self._end_text()
            calls = len(event.tool_calls)
            called = f", calls {calls} tool(s)" if calls else ""
            self._status(f"turn {event.turn}: model answered{called}")
        elif isinstance(event, StatusChanged):
            self._end_text()
            self._status(f"status {line(event.new)}")
            self._end_status()
        self.stream.flush()

    # -- lines ----------------------------------------------------------------------------
    def _status(self, text: str) -> None:
        self.stream.write(f"\r  {text}{_ERASE}")
        self._status_open = True

    def _end_status(self) -> None:
        if self._status_open:
            self.stream.write("\n")
            self._status_open = False

    # -- streamed text --------------------------------------------------------------------
    def text(self, chunk: str) -> None:
        if not chunk:
            return
        held = redact(self._held + chunk)
        cut = held.rfind("\n") + 1  # every whole line goes out
        if len(held) - cut > HOLD:  # a long unfinished line: out up to a space before the tail
            tail = len(held) - HOLD
            cut = max(cut, held.rfind(" ", cut, tail) + 1, held.rfind("\t", cut, tail) + 1)
        self._held = held[cut:]
        self._write(held[:cut])
        self.stream.flush()

    def _write(self, text: str) -> None:
        if not text:
            return
        self._end_status()
        rendered = block(text, indent=INDENT)
        if self._at_line_start:
            rendered = INDENT + rendered
        self._at_line_start = rendered.endswith("\n" + INDENT)
        if self._at_line_start:
            rendered = rendered[: -len(INDENT)]
        self.stream.write(rendered)

    def _end_text(self) -> None:
        """Write what is held and end the line, so that a progress line starts afresh."""
        held, self._held = self._held, ""
        self._write(held)
        if not self._at_line_start:
            self.stream.write("\n")
            self._at_line_start = True

    def close(self) -> None:
        """End whatever line is open (text or progress)."""
        if not self.enabled():
            return
        self._end_text()
        self._end_status()
        self.stream.flush()

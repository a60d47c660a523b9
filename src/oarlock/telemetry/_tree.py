"""A run's span tree from its event log, with no collector (``oarlock runs show --trace``).

The runner writes a ``span`` member into each ``model_responded`` and ``tool_called``
event: the drive (attempt) it belongs to (``drive``), when that drive and the step began
(``driveStartUs``, ``startUs``: microseconds since the epoch), how long the step took
(``durationMs``), its span id when traced, and a call's receipt status. From these, the
status changes and the approvals asked for and decided, the tree is drawn as a collector
would show the run's trace: the first drive at the root; its model requests, tool calls
and the waits for a decision under it; each later drive under it too. Events of runs from
before the member existed are drawn from their times alone.

Everything here reads the stored event log as untrusted data: a member of the wrong type
is ignored, and text is shown through the renderer."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from oarlock._render import line
from oarlock.formats._time import parse_rfc3339

__all__ = ["SpanNode", "render_tree", "span_tree"]

_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}")
_SPAN_ID = re.compile(r"[0-9a-f]{16}")
_ERRORS = frozenset({"failed", "cancelled", "halted_budget", "halted_max_turns"})


@dataclass
class SpanNode:
    """One span: its name, times (microseconds since the epoch), duration, status
    (``ok``, ``error``, ``unset`` or ``open`` for one still going), what it ended with,
    and its children."""

    name: str
    start: float | None
    end: float | None = None
    duration_ms: float | None = None
    status: str = "unset"
    detail: str = ""
    span_id: str | None = None
    children: list[SpanNode] = field(default_factory=list)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) and number >= 0 else None


def _us(value: object) -> float | None:
    """A time as microseconds since the epoch: a number of them, or RFC 3339 text."""
    if isinstance(value, str):
        parsed = parse_rfc3339(value)
        if parsed is None:
            return None
        second, fraction = parsed
        return second.timestamp() * 1e6 + float(fraction) * 1e6
    return _number(value)


def _between_ms(start: float | None, end: float | None) -> float | None:
    if start is None or end is None:
        return None
    return max((end - start) / 1000.0, 0.0)


def _later(a: float | None, b: float | None) -> float | None:
    """The later of two times (either may be missing)."""
    if a is None:
        return b
    return a if b is None else max(a, b)


def _first(*values: float | None) -> float | None:
    return next((v for v in values if v is not None), None)


def trace_id_of(doc: Mapping[str, Any]) -> str | None:
    """The run's trace id, from its stored trace context (None if it has none)."""
    stored = doc.get("traceContext")
    parent = stored.get("traceparent") if isinstance(stored, dict) else None
    found = _TRACEPARENT.fullmatch(parent) if isinstance(parent, str) else None
    return None if found is None else found.group(1)


class _Builder:
    def __init__(self, doc: Mapping[str, Any]) -> None:
        self.agent = _text(doc.get("agent")) or "?"
        model = _text(doc.get("model")) or "?"
        _, sep, name = model.partition(":")
        self.model = name if sep and name else model  # as the chat spans name it
        self.roots: list[SpanNode] = []
        self.drives: dict[str, SpanNode] = {}
        self.current: SpanNode | None = None
        self.waits: dict[str, SpanNode] = {}

    def _attach(self, node: SpanNode) -> None:
        parent = self.current or (self.roots[0] if self.roots else None)
        (parent.children if parent is not None else self.roots).append(node)

    def _drive(self, key: str, span: Mapping[str, Any], at: float | None) -> SpanNode:
        node = self.drives.get(key)
        if node is None:
            started = _first(_us(span.get("driveStartUs")), _us(span.get("startUs")), at)
            span_id = key if _SPAN_ID.fullmatch(key) else None
            node = SpanNode(f"invoke_agent {self.agent}", started, span_id=span_id)
            self.drives[key] = node
            self.current = None
            self._attach(node)  # the first drive is the root; later ones go under it
        self.current = node
        return node

    def step(self, seq: int, kind: str, at: float | None, data: Mapping[str, Any]) -> None:
        raw = data.get("span")
        span: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
        key = _text(span.get("drive"))
        if key is None:
            key = next((k for k, v in self.drives.items() if v is self.current), f"~{seq}")
        drive = self._drive(key, span, at)
        start = _first(_us(span.get("startUs")), at)
        duration = _number(span.get("durationMs"))
        span_id = _text(span.get("spanId"))
        node = SpanNode("", start, at, duration, span_id=span_id)
        if span_id is not None and not _SPAN_ID.fullmatch(span_id):
            node.span_id = None
        if kind == "model_responded":
            node.name, node.status = f"chat {self.model}", "ok"
            tokens = (_number(data.get("inputTokens")), _number(data.get("outputTokens")))
            if None not in tokens:
                node.detail = f"{tokens[0]:.0f} in, {tokens[1]:.0f} out tokens"
        else:
            self._tool(node, data, span)
        if node.duration_ms is None:
            node.duration_ms = _between_ms(start, at)
        elif start is not None:
            node.end = start + node.duration_ms * 1000.0
        drive.children.append(node)
        drive.end = _later(drive.end, _later(at, node.end))

    def _tool(self, node: SpanNode, data: Mapping[str, Any], span: Mapping[str, Any]) -> None:
        node.name = f"execute_tool {_text(data.get('toolName')) or '?'}"
        receipt = _text(span.get("status"))
        if receipt is not None:
            node.status = "ok" if receipt == "Succeeded" else "error"
            node.detail = receipt + (" (replayed)" if span.get("replayed") is True else "")
        else:
            failed = data.get("isError") is True
            node.status = "error" if failed else "ok"
            node.detail = "not run" if failed else ""

    def status(self, at: float | None, data: Mapping[str, Any]) -> None:
        to = _text(data.get("to"))
        drive = self.current
        if drive is None or to is None:
            return
        drive.end = _later(drive.end, at)
        drive.detail = to
        drive.status = "error" if to in _ERRORS else ("ok" if to == "completed" else "unset")
        if to != "running":
            self.current = None

    def requested(self, at: float | None, data: Mapping[str, Any]) -> None:
        tool = _text(data.get("toolName")) or "?"
        node = SpanNode(f"await_approval {tool}", at, status="open", detail="waiting")
        self._attach(node)
        call_id = _text(data.get("toolCallId"))
        if call_id is not None:
            self.waits[call_id] = node

    def decided(self, at: float | None, data: Mapping[str, Any]) -> None:
        call_id = _text(data.get("toolCallId"))
        node = None if call_id is None else self.waits.pop(call_id, None)
        self.current = None  # a decision comes from outside any drive
        if node is None:
            return
        node.end, node.status = at, "ok"
        node.duration_ms = _between_ms(node.start, at)
        who = _text(data.get("decidedBy")) or "?"
        principal = _text(data.get("principal"))
        node.detail = f"{_text(data.get('decision')) or '?'} by {who}"
        if principal:
            node.detail += f" ({principal})"

    def finish(self, now_us: float) -> list[SpanNode]:
        for wait in self.waits.values():  # not decided yet: how long so far
            wait.duration_ms = _between_ms(wait.start, now_us)
            wait.detail = "waiting, so far"
        for node in self.drives.values():
            if node.duration_ms is None:
                node.duration_ms = _between_ms(node.start, node.end)
            if not node.detail:
                node.detail = "running"
        return self.roots


def span_tree(
    doc: Mapping[str, Any], events: Sequence[Mapping[str, Any]], now_us: float | None = None
) -> tuple[str | None, list[SpanNode]]:
    """The run's trace id (None when it was never traced) and its span tree, drawn from
    the document (as exported: camelCase members) and its events (``seq``, ``kind``,
    ``at``, ``data``); a wait for a decision still open lasts until ``now_us`` (default:
    now)."""
    build = _Builder(doc)
    for i, event in enumerate(events):
        data = event.get("data")
        if not isinstance(data, dict):
            continue
        kind, at = event.get("kind"), _us(_text(event.get("at")))
        seq = event.get("seq")
        if kind in ("model_responded", "tool_called"):
            build.step(seq if isinstance(seq, int) else i, str(kind), at, data)
        elif kind == "status_changed":
            build.status(at, data)
        elif kind == "approval_requested":
            build.requested(at, data)
        elif kind in ("approval_decided", "user_message"):
            build.decided(at, data)
    now = time.time() * 1e6 if now_us is None else now_us
    return trace_id_of(doc), build.finish(now)


def _duration(ms: float | None) -> str:
    if ms is None:
        return "?"
    if ms < 1000:
        return f"{ms:.1f} ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.2f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def _lines(node: SpanNode, lead: str, branch: str, out: list[str]) -> None:
    status = node.status + (f": {node.detail}" if node.detail else "")
    ident = f"  [{node.span_id}]" if node.span_id else ""
    out.append(f"{lead}{branch}{line(node.name)}  {_duration(node.duration_ms)}  "
               f"{line(status)}{ident}")  # fmt: skip
    below = lead + ("" if not branch else ("│  " if branch == "├─ " else "   "))
    for i, child in enumerate(node.children):
        last = i == len(node.children) - 1
        _lines(child, below, "└─ " if last else "├─ ", out)


def render_tree(run_id: str, trace_id: str | None, roots: Sequence[SpanNode]) -> list[str]:
    """The tree as lines for a terminal: each span's name, duration and status."""
    head = f"run {line(run_id)}  trace {trace_id}" if trace_id else f"run {line(run_id)}"
    out = [head if trace_id else f"{head}  (not traced: span ids are the drives' own)"]
    if not roots:
        out.append("no model request or tool call yet")
    for root in roots:
        _lines(root, "", "", out)
    return out

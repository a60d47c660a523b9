"""Readable views of runs: the timeline of ``oarlock runs show`` and the run table.

Each view reads JSON: a run document is a dict with the stored camelCase members, as the
store holds it (``SQLiteStore.read_document``) or as ``dump(doc)`` gives it for a
:class:`RunDocument`; events and runs are as ``SQLiteStore.read_events`` and ``read_runs``
give them. So the views need neither pydantic nor the store's dataclasses, and ``oarlock
runs show`` starts fast.

Every value from a run (ids, names, tags, text, arguments, results, errors) is shown through
the renderer: :func:`~oarlock._render.line` on one line, :func:`~oarlock._render.block` for
text of several lines (its later lines indented under the label), :func:`~oarlock._render.cell`
in the run table."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from oarlock._render import block, cell, line

__all__ = [
    "closing",
    "event_line",
    "heading",
    "lease_text",
    "message_lines",
    "print_pending",
    "print_runs",
    "print_summary",
    "timeline",
]

_LABEL = 9  # width of the timeline's labels ("assistant")
_UNDER = " " * (_LABEL + 2)  # later lines of a labelled text, under its first


def _args(arguments: dict[str, Any]) -> str:
    return line(json.dumps(arguments, ensure_ascii=False, separators=(", ", ": ")))


def _tags(tags: Mapping[str, Any]) -> str:
    return " ".join(line(f"{k}={v}") for k, v in sorted(tags.items()))


def _labelled(label: str, text: str) -> str:
    """``label: text``, the text's later lines under its first."""
    return f"{label:>{_LABEL}}: {block(text, indent=_UNDER)}"


def _text(content: str) -> str:
    """A tool result as shown to people: the text inside its untrusted-data fence."""
    if content.startswith("<untrusted-tool-result"):
        from oarlock.governance._sanitize import unfence

        try:
            return unfence(content)
        except ValueError:
            return content
    return content


def _clip(text: str, width: int = 400) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def timeline(doc: Mapping[str, Any], events: Sequence[Mapping[str, Any]]) -> list[str]:
    """The run (a run document and its events, as JSON) as lines: each message, call,
    result and decision, then usage and status."""
    decisions = {
        e["data"]["toolCallId"]: (e["data"], e.get("at"))
        for e in events
        if e.get("kind") == "approval_decided"
        and isinstance(e.get("data"), dict)
        and isinstance(e["data"].get("toolCallId"), str)
        and isinstance(e["data"].get("decision"), str)
    }
    lines = [*heading(doc), "", *message_lines(doc, decisions)]
    for appr in doc["pendingApprovals"]:
        state = appr.get("decision") or "PENDING"
        lines.append(
            f"{'approval':>{_LABEL}}: {line(appr['toolCallId'])} {line(appr['toolName'])}"
            f"({_args(appr['arguments'])}) {line(state)}"
        )
    for res in doc["bufferedToolResults"]:
        text = f"{line(res['toolCallId'])} {_clip(_text(res['content']))}"
        lines.append(_labelled("buffered", text))
    return [*lines, "", *closing(doc)]


def heading(doc: Mapping[str, Any]) -> list[str]:
    """The run's id, agent, model, status, turns, times and tags."""
    lines = [
        f"run {line(doc['id'])}  agent {line(doc['agent'])}  model {line(doc['model'])}",
        f"status {line(doc['status'])}  turns {line(doc['turns'])}  "
        f"created {line(doc['createdAt'])}  updated {line(doc['updatedAt'])}",
    ]
    if tags := doc.get("tags"):
        lines.append("tags " + _tags(tags))
    return lines


def message_lines(
    doc: Mapping[str, Any], decisions: Mapping[str, tuple[dict[str, Any], str | None]]
) -> list[str]:
    """Each message's texts, calls and results; under a call, its decision if any."""
    lines = []
    for msg in doc["messages"]:
        for part in msg["content"]:
            if part["type"] == "text":
                who = "assistant" if msg["role"] == "assistant" else "user"
                lines.append(_labelled(who, _clip(part["text"])))
            elif part["type"] == "tool_call":
                call_id = part["id"]
                lines.append(
                    f"{'call':>{_LABEL}}: {line(call_id)} {line(part['name'])}"
                    f"({_args(part['arguments'])})"
                )
                if call_id in decisions:
                    lines.append(f"{'decision':>{_LABEL}}: {_decision(*decisions[call_id])}")
            else:
                mark = "error" if part.get("isError", False) else "result"
                text = f"{line(part['toolCallId'])} {_clip(_text(part['content']))}"
                lines.append(_labelled(mark, text))
    return lines


def closing(doc: Mapping[str, Any]) -> list[str]:
    """Usage, then the result or the error."""
    lines = _usage_lines(doc)
    if doc.get("result") is not None:
        lines.append(f"result: {block(doc['result'], indent=_UNDER)}")
    if doc.get("error") is not None:
        lines.append(f"error: {block(doc['error'], indent=_UNDER)}")
    return lines


def event_line(event: Mapping[str, Any]) -> str | None:
    """A line for an event a follower wants to see as it happens (a status change, an
    approval asked for or decided); None for the others, which the messages show."""
    data, at = event.get("data"), event.get("at")
    if not isinstance(data, dict):
        return None
    when = line(at) if isinstance(at, str) else "?"
    kind = event.get("kind")
    if kind == "status_changed":
        return f"{'status':>{_LABEL}}: {line(data.get('to', '?'))} at {when}"
    if kind == "approval_requested":
        args = data.get("arguments")
        shown = _args(args) if isinstance(args, dict) else ""
        return (
            f"{'approval':>{_LABEL}}: {line(data.get('toolCallId', '?'))} "
            f"{line(data.get('toolName', '?'))}({shown}) asked for at {when}"
        )
    if kind == "approval_decided" and isinstance(data.get("decision"), str):
        text = _decision({"decidedBy": "?", **data}, at if isinstance(at, str) else None)
        return f"{'decision':>{_LABEL}}: {line(data.get('toolCallId', '?'))} {text}"
    return None


def _decision(d: dict[str, Any], at: str | None = None) -> str:
    text = f"{line(d['decision'])} by {line(d.get('decidedBy', '?'))}"
    if "principal" in d:
        text += f" ({line(d['principal'])})"
    if at is not None:
        text += f" at {line(at)}"
    if "editedArguments" in d:
        text += f", arguments edited to {_args(d['editedArguments'])}"
    if "reason" in d:
        text += f": {line(d['reason'])}"
    if "response" in d:
        text += f": {line(_clip(str(d['response'])))}"
    return text


def _usage_lines(doc: Mapping[str, Any]) -> list[str]:
    u = doc["usage"]
    known = u.get("costKnown", True)
    cost = f"${u['costUsd']:.6f}" if known else "unknown (no price for this model)"
    return [
        f"usage: {u['inputTokens']} input tokens, {u['outputTokens']} output tokens, cost {cost}"
    ]


def print_pending(doc: Mapping[str, Any]) -> None:
    """The undecided approvals and buffered results of a run document (as JSON)."""
    for appr in doc["pendingApprovals"]:
        if appr.get("decision") is None:
            print(
                f"  waiting for a decision on {line(appr['toolCallId'])}: "
                f"{line(appr['toolName'])}({_args(appr['arguments'])})"
            )
    for res in doc["bufferedToolResults"]:
        text = line(_clip(_text(res["content"]), 120))
        print(f"  buffered result of {line(res['toolCallId'])} ({line(res['toolName'])}): {text}")


def print_summary(doc: Mapping[str, Any], command: str = "oarlock") -> None:
    """Where a run (a run document as JSON) stands, after a command moved it; the decision
    commands to give next start with ``command`` (``oarlock --db PATH`` for a database
    other than the default)."""
    run_id, status = line(doc["id"]), line(doc["status"])
    print(f"run {run_id}: {status} after {line(doc['turns'])} turns")
    if doc["status"] == "waiting_approval":
        print_pending(doc)
        undecided = [a for a in doc["pendingApprovals"] if a.get("decision") is None]
        call = line(undecided[0]["toolCallId"]) if len(undecided) == 1 else "CALL_ID"
        print(
            f"  decide with: {command} approve {run_id} {call}  |  "
            f"{command} deny {run_id} {call} --reason TEXT"
        )
    if doc.get("result") is not None:
        print(f"result: {block(doc['result'], indent=_UNDER)}")
    if doc.get("error") is not None:
        print(f"error: {block(doc['error'], indent=_UNDER)}")
    for text in _usage_lines(doc):
        print(text)


def lease_text(until: float | None) -> str:
    """A lease's deadline (seconds since the epoch) as RFC 3339 UTC; empty for none."""
    if until is None:
        return ""
    from oarlock.store._leases import time_text

    return time_text(until)


def print_runs(runs: Sequence[Mapping[str, Any]]) -> None:
    """The run table; ``runs`` as ``SQLiteStore.read_runs`` gives them, with the holder of
    each run driven now and its lease's deadline. Not on a terminal, one run a line, its
    fields separated by tabs (a tab in a field shows as ``\\t``; a run nobody holds has
    the last two empty); on a terminal, a running run nobody holds is marked: nothing
    drives it (its process died, or it waits for a worker)."""
    import sys

    fields = [
        (
            r["id"],
            r["agent"],
            r["status"],
            r["turns"],
            r["updated_at"],
            _tags(r["tags"]),
            r.get("holder") or "",
            lease_text(r.get("lease_until")),
        )
        for r in runs
    ]
    if not sys.stdout.isatty():
        for row in fields:
            print("\t".join(line(value) for value in row))
        return
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, pad_edge=False)
    for col in ("run", "agent", "status", "turns", "updated", "tags", "held by", "until"):
        table.add_column(col, no_wrap=col in ("run", "updated", "until"))
    stalled = 0
    for row in fields:
        cells = [cell(value) for value in row]
        if row[2] == "running" and not row[6]:  # running, and no one drives it
            stalled += 1
            cells[6] = Text("nobody", style="bold yellow")
        table.add_row(*cells)
    console = Console()
    console.print(table)
    if stalled:
        console.print(
            f"[yellow]{stalled} running run{'s' if stalled > 1 else ''} held by nobody: "
            "nothing drives {0}; oarlock resume RUN_ID drives one here, oarlock worker "
            "drives them all[/]".format("them" if stalled > 1 else "it"),
            highlight=False,
        )

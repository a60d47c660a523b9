"""Readable views of runs: the timeline of ``oarlock runs show`` and the run table."""

from __future__ import annotations

import json
from typing import Any

from oarlock.formats._models import AssistantMessage, RunDocument, TextPart, ToolCallPart
from oarlock.store._base import Event, RunSummary

__all__ = ["print_pending", "print_runs", "print_summary", "timeline"]


def _args(arguments: dict[str, Any]) -> str:
    return json.dumps(arguments, ensure_ascii=False, separators=(", ", ": "))


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


def timeline(doc: RunDocument, events: list[Event]) -> list[str]:
    """The run as lines: each message, call, result and decision, then usage and status."""
    lines = [
        f"run {doc.id}  agent {doc.agent}  model {doc.model}",
        f"status {doc.status}  turns {doc.turns}  created {doc.created_at}  "
        f"updated {doc.updated_at}",
    ]
    if doc.tags:
        lines.append("tags " + " ".join(f"{k}={v}" for k, v in sorted(doc.tags.items())))
    decisions = {e.data["toolCallId"]: e.data for e in events if e.kind == "approval_decided"}
    lines.append("")
    for msg in doc.messages:
        for part in msg.content:
            if isinstance(part, TextPart):
                who = "assistant" if isinstance(msg, AssistantMessage) else "user"
                lines.append(f"{who:>9}: {_clip(part.text)}")
            elif isinstance(part, ToolCallPart):
                lines.append(f"{'call':>9}: {part.id} {part.name}({_args(part.arguments)})")
                if part.id in decisions:
                    lines.append(f"{'decision':>9}: {_decision(decisions[part.id])}")
            else:
                mark = "error" if part.is_error else "result"
                lines.append(f"{mark:>9}: {part.tool_call_id} {_clip(_text(part.content))}")
    for appr in doc.pending_approvals:
        state = appr.decision or "PENDING"
        lines.append(
            f"{'approval':>9}: {appr.tool_call_id} {appr.tool_name}"
            f"({_args(appr.arguments)}) {state}"
        )
    for res in doc.buffered_tool_results:
        lines.append(f"{'buffered':>9}: {res.tool_call_id} {_clip(_text(res.content))}")
    lines.append("")
    lines.extend(_usage_lines(doc))
    if doc.result is not None:
        lines.append(f"result: {doc.result}")
    if doc.error is not None:
        lines.append(f"error: {doc.error}")
    return lines


def _decision(d: dict[str, Any]) -> str:
    text = f"{d['decision']} by {d['decidedBy']}"
    if "editedArguments" in d:
        text += f", arguments edited to {_args(d['editedArguments'])}"
    if "reason" in d:
        text += f": {d['reason']}"
    if "response" in d:
        text += f": {_clip(d['response'])}"
    return text


def _usage_lines(doc: RunDocument) -> list[str]:
    u = doc.usage
    known = (u.model_extra or {}).get("costKnown", True)
    cost = f"${u.cost_usd:.6f}" if known else "unknown (no price for this model)"
    return [f"usage: {u.input_tokens} input tokens, {u.output_tokens} output tokens, cost {cost}"]


def print_pending(doc: RunDocument) -> None:
    for appr in doc.pending_approvals:
        if appr.decision is None:
            print(
                f"  waiting for a decision on {appr.tool_call_id}: "
                f"{appr.tool_name}({_args(appr.arguments)})"
            )
    for res in doc.buffered_tool_results:
        text = _clip(_text(res.content), 120)
        print(f"  buffered result of {res.tool_call_id} ({res.tool_name}): {text}")


def print_summary(doc: RunDocument) -> None:
    print(f"run {doc.id}: {doc.status} after {doc.turns} turns")
    if doc.status == "waiting_approval":
        print_pending(doc)
        print(
            f"  decide with: oarlock approve {doc.id} CALL_ID  |  oarlock deny {doc.id} "
            "CALL_ID --reason TEXT"
        )
    if doc.result is not None:
        print(f"result: {doc.result}")
    if doc.error is not None:
        print(f"error: {doc.error}")
    for line in _usage_lines(doc):
        print(line)


def print_runs(runs: list[RunSummary]) -> None:
    import sys

    if not sys.stdout.isatty():
        for r in runs:
            tags = " ".join(f"{k}={v}" for k, v in sorted(r.tags.items()))
            print("\t".join((r.id, r.agent, r.status, str(r.turns), r.updated_at, tags)))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    for col in ("run", "agent", "status", "turns", "updated", "tags"):
        table.add_column(col, no_wrap=col in ("run", "updated"))
    for r in runs:
        table.add_row(
            r.id,
            r.agent,
            r.status,
            str(r.turns),
            r.updated_at,
            " ".join(f"{k}={v}" for k, v in sorted(r.tags.items())),
        )
    Console().print(table)

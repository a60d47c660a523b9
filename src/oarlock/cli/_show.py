"""Readable views of runs: the timeline of ``oarlock runs show`` and the run table.

Each view reads JSON: a run document is a dict with the stored camelCase members, as the
store holds it (``SQLiteStore.read_document``) or as ``dump(doc)`` gives it for a
:class:`RunDocument`; events and runs are as ``SQLiteStore.read_events`` and ``read_runs``
give them. So the views need neither pydantic nor the store's dataclasses, and ``oarlock
runs show`` starts fast."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

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


def timeline(doc: Mapping[str, Any], events: Sequence[Mapping[str, Any]]) -> list[str]:
    """The run (a run document and its events, as JSON) as lines: each message, call,
    result and decision, then usage and status."""
    lines = [
        f"run {doc['id']}  agent {doc['agent']}  model {doc['model']}",
        f"status {doc['status']}  turns {doc['turns']}  created {doc['createdAt']}  "
        f"updated {doc['updatedAt']}",
    ]
    if tags := doc.get("tags"):
        lines.append("tags " + " ".join(f"{k}={v}" for k, v in sorted(tags.items())))
    decisions = {
        e["data"]["toolCallId"]: e["data"] for e in events if e["kind"] == "approval_decided"
    }
    lines.append("")
    for msg in doc["messages"]:
        for part in msg["content"]:
            if part["type"] == "text":
                who = "assistant" if msg["role"] == "assistant" else "user"
                lines.append(f"{who:>9}: {_clip(part['text'])}")
            elif part["type"] == "tool_call":
                call_id = part["id"]
                lines.append(f"{'call':>9}: {call_id} {part['name']}({_args(part['arguments'])})")
                if call_id in decisions:
                    lines.append(f"{'decision':>9}: {_decision(decisions[call_id])}")
            else:
                mark = "error" if part.get("isError", False) else "result"
                lines.append(f"{mark:>9}: {part['toolCallId']} {_clip(_text(part['content']))}")
    for appr in doc["pendingApprovals"]:
        state = appr.get("decision") or "PENDING"
        lines.append(
            f"{'approval':>9}: {appr['toolCallId']} {appr['toolName']}"
            f"({_args(appr['arguments'])}) {state}"
        )
    for res in doc["bufferedToolResults"]:
        lines.append(f"{'buffered':>9}: {res['toolCallId']} {_clip(_text(res['content']))}")
    lines.append("")
    lines.extend(_usage_lines(doc))
    if doc.get("result") is not None:
        lines.append(f"result: {doc['result']}")
    if doc.get("error") is not None:
        lines.append(f"error: {doc['error']}")
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
                f"  waiting for a decision on {appr['toolCallId']}: "
                f"{appr['toolName']}({_args(appr['arguments'])})"
            )
    for res in doc["bufferedToolResults"]:
        text = _clip(_text(res["content"]), 120)
        print(f"  buffered result of {res['toolCallId']} ({res['toolName']}): {text}")


def print_summary(doc: Mapping[str, Any]) -> None:
    """Where a run (a run document as JSON) stands, after a command moved it."""
    run_id, status = doc["id"], doc["status"]
    print(f"run {run_id}: {status} after {doc['turns']} turns")
    if status == "waiting_approval":
        print_pending(doc)
        print(
            f"  decide with: oarlock approve {run_id} CALL_ID  |  oarlock deny {run_id} "
            "CALL_ID --reason TEXT"
        )
    if doc.get("result") is not None:
        print(f"result: {doc['result']}")
    if doc.get("error") is not None:
        print(f"error: {doc['error']}")
    for line in _usage_lines(doc):
        print(line)


def print_runs(runs: Sequence[Mapping[str, Any]]) -> None:
    """The run table; ``runs`` as ``SQLiteStore.read_runs`` gives them."""
    import sys

    if not sys.stdout.isatty():
        for r in runs:
            tags = " ".join(f"{k}={v}" for k, v in sorted(r["tags"].items()))
            print(
                "\t".join(
                    (r["id"], r["agent"], r["status"], str(r["turns"]), r["updated_at"], tags)
                )
            )
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    for col in ("run", "agent", "status", "turns", "updated", "tags"):
        table.add_column(col, no_wrap=col in ("run", "updated"))
    for r in runs:
        table.add_row(
            r["id"],
            r["agent"],
            r["status"],
            str(r["turns"]),
            r["updated_at"],
            " ".join(f"{k}={v}" for k, v in sorted(r["tags"].items())),
        )
    Console().print(table)

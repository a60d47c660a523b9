"""The OpenAPI links of the HTTP API: what a response hands to the next request (a new
run's id to get it, its events, cancel it; an approval's version as the If-Match of its
decision; a receipt's invocation id to reconcile it). They are declared with each route,
so that the served document says where a client goes next, and a tool that walks the
document (schemathesis, statefully) goes there too."""

from __future__ import annotations

from typing import Any

from fastapi.routing import APIRoute

__all__ = [
    "agent_links",
    "agents_links",
    "approval_links",
    "approvals_links",
    "decision_links",
    "exact_links",
    "links",
    "operation_id",
    "pending_links",
    "receipt_links",
    "receipts_links",
    "reconcile_links",
    "run_links",
    "runs_links",
]

Link = dict[str, Any]


def operation_id(route: APIRoute) -> str:
    """An operation's id: its function's name in camelCase (``create_run``: ``createRun``)."""
    head, *rest = route.name.split("_")
    return head + "".join(word.capitalize() for word in rest)


def links(status: int, *groups: dict[str, Link]) -> dict[int | str, dict[str, Any]]:
    """The ``responses`` entry of an operation's ``status`` that carries these links (FastAPI
    merges it into the response it makes of the route's own model)."""
    merged: dict[str, Link] = {}
    for group in groups:
        merged.update(group)
    return {status: {"links": merged}}


def _link(operation: str, description: str, parameters: dict[str, str]) -> Link:
    return {"operationId": operation, "description": description, "parameters": parameters}


def run_links(run_id: str, *, what: str = "the run", document: bool = True) -> dict[str, Link]:
    """From a run, by the expression of its id: the run's document (unless this is it),
    its events, its receipts, and cancelling or resuming it."""
    at = {"path.run_id": run_id}
    own = {"GetRun": _link("getRun", f"{what}'s document", at)} if document else {}
    return {
        **own,
        "GetRunEvents": _link("runEvents", f"{what}'s events", at),
        "CancelRun": _link("cancelRun", f"cancel {what}", at),
        "ResumeRun": _link("resumeRun", f"drive {what} on, if no one holds it", at),
        "ListRunReceipts": _link("listReceipts", f"{what}'s receipts", {"query.run": run_id}),
    }


def runs_links() -> dict[str, Link]:
    """From a page of runs: its first run."""
    return run_links("$response.body#/runs/0/id", what="the first run")


def _approval(run_id: str, call_id: str, version: str | None, what: str) -> dict[str, Link]:
    at = {"path.run_id": run_id, "path.call_id": call_id}
    out = {"GetApproval": _link("getApproval", what, at)}
    if version is not None:
        out["Decide"] = _link(
            "decide",
            f"decide {what}, at the version it was seen at",
            {**at, "header.If-Match": version},
        )
    return out


def approvals_links() -> dict[str, Link]:
    """From a page of approvals: its first approval (and a decision on it, with its
    version as If-Match), and its run."""
    first = "$response.body#/approvals/0"
    return {
        **_approval(
            f"{first}/runId", f"{first}/toolCallId", f"{first}/version", "the first approval"
        ),
        "GetApprovalRun": _link(
            "getRun", "the first approval's run", {"path.run_id": f"{first}/runId"}
        ),
    }


def approval_links() -> dict[str, Link]:
    """From one approval: a decision with its ETag as If-Match, its exact arguments, and
    its run."""
    at = {"path.run_id": "$request.path.run_id", "path.call_id": "$request.path.call_id"}
    return {
        "GetExactArguments": _link(
            "getExactArguments", "the call's exact arguments (for who may decide it)", at
        ),
        "Decide": _link(
            "decide",
            "decide the approval, at the version its ETag names",
            {
                "path.run_id": "$request.path.run_id",
                "path.call_id": "$request.path.call_id",
                "header.If-Match": "$response.header.ETag",
            },
        ),
        "GetApprovalRun": _link(
            "getRun", "the approval's run", {"path.run_id": "$request.path.run_id"}
        ),
    }


def exact_links() -> dict[str, Link]:
    """From a call's exact arguments: a decision at the version they were read at."""
    return {
        "Decide": _link(
            "decide",
            "decide the approval, at the version its ETag names",
            {
                "path.run_id": "$request.path.run_id",
                "path.call_id": "$request.path.call_id",
                "header.If-Match": "$response.header.ETag",
            },
        )
    }


def decision_links() -> dict[str, Link]:
    """From a decision: the approval as decided, and its run (which goes on)."""
    return {
        **_approval("$response.body#/runId", "$response.body#/toolCallId", None, "the approval"),
        **run_links("$response.body#/runId", what="the decided run"),
    }


def pending_links() -> dict[str, Link]:
    """From a run's document: its first pending approval."""
    first = "$response.body#/pendingApprovals/0/toolCallId"
    return _approval("$response.body#/id", first, None, "the run's first pending approval")


def _receipt(invocation_id: str, what: str) -> dict[str, Link]:
    at = {"path.invocation_id": invocation_id}
    return {
        "GetReceipt": _link("getReceipt", what, at),
        "GetResult": _link("getArtifact", f"the raw result of {what}", at),
        "Reconcile": _link("reconcile", f"resolve {what}, if Uncertain", at),
    }


def receipts_links() -> dict[str, Link]:
    """From a list of receipts: the first one, and its run."""
    return {
        **_receipt("$response.body#/0/invocationId", "the first receipt"),
        "GetReceiptRun": _link(
            "getRun", "the first receipt's run", {"path.run_id": "$response.body#/0/runId"}
        ),
    }


def receipt_links() -> dict[str, Link]:
    """From one receipt: its raw result and its reconciliation."""
    found = _receipt("$request.path.invocation_id", "the receipt")
    del found["GetReceipt"]
    return found


def reconcile_links() -> dict[str, Link]:
    """From a reconciliation: the receipt with it."""
    at = {"path.invocation_id": "$request.path.invocation_id"}
    return {"GetReceipt": _link("getReceipt", "the receipt, reconciled", at)}


def agents_links() -> dict[str, Link]:
    """From the list of agents: the first one."""
    at = {"path.name": "$response.body#/0/name"}
    return {"GetAgent": _link("getAgent", "the first agent", at)}


def agent_links() -> dict[str, Link]:
    """From one agent: a run of it (with an empty input; a client gives its own)."""
    return {
        "CreateRun": {
            "operationId": "createRun",
            "description": "start a run of the agent",
            "requestBody": {"agent": "$response.body#/name", "input": ""},
        }
    }

"""The HTTP API (``/v1``): thin routes over :class:`~oarlock.server._service.Service`."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, Header, Query, Request, Response
from fastapi.responses import JSONResponse

from oarlock._render import dumps
from oarlock.errors import UsageError
from oarlock.server._auth import require
from oarlock.server._errors import responses
from oarlock.server._links import (
    agent_links,
    agents_links,
    approval_links,
    approvals_links,
    decision_links,
    exact_links,
    links,
    operation_id,
    pending_links,
    receipt_links,
    receipts_links,
    reconcile_links,
    run_links,
    runs_links,
)
from oarlock.server._models import (
    AgentOut,
    ApprovalOut,
    ApprovalPage,
    AuditOut,
    CancelIn,
    DecisionIn,
    DecisionOut,
    EventOut,
    ExactArgumentsOut,
    ReceiptOut,
    ReconcileIn,
    RunIn,
    RunOut,
    RunPageOut,
)
from oarlock.server._service import Service, check_text
from oarlock.server._tokens import Principal

__all__ = ["MAX_PAGE", "router"]

MAX_PAGE = 200
router = APIRouter(prefix="/v1", generate_unique_id_function=operation_id)

Reader = Annotated[Principal, Depends(require("read"))]
Operator = Annotated[Principal, Depends(require("operate"))]
Admin = Annotated[Principal, Depends(require("admin"))]
Limit = Annotated[int, Query(ge=1, le=MAX_PAGE, description="page size")]
TagQuery = Annotated[list[str] | None, Query(description="KEY=VALUE; repeatable")]

_READ = (400, 401, 403, 413, 422, 429)
_ONE = (*_READ, 404)
_ETAG = {"ETag": {"description": "the approval's version, quoted", "schema": {"type": "string"}}}


class ExactJSON(JSONResponse):
    """JSON that redacts nothing (every control, bidirectional and invisible character
    still a JSON escape): a call's exact arguments, for those who may decide it."""

    def render(self, content: Any) -> bytes:
        return dumps(content, indent=None, redact=False).encode("utf-8")


def _service(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


def _tags(pairs: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"tag filter {pair!r} is not KEY=VALUE", code="invalid_tag")
        out[check_text(key, "a tag", 200)] = check_text(value, "a tag", 1000)
    return out


def run_out(doc: Any) -> dict[str, Any]:
    return {
        "id": doc.id,
        "agent": doc.agent,
        "status": doc.status,
        "tags": doc.tags or {},
        "turns": doc.turns,
        "createdAt": doc.created_at,
        "updatedAt": doc.updated_at,
    }


@router.get("/me", responses=responses(*_READ), tags=["tokens"])
async def me(principal: Reader) -> dict[str, str]:
    """The caller's token: name, tenant and role."""
    return {"name": principal.name, "tenant": principal.tenant, "role": principal.role}


# -- agents -------------------------------------------------------------------------------
@router.get(
    "/agents",
    response_model=list[AgentOut],
    responses={**responses(*_READ), **links(200, agents_links())},
    tags=["agents"],
)
async def list_agents(request: Request, principal: Reader) -> list[dict[str, Any]]:
    """The agents of the caller's tenant, of the agent files the server was given."""
    return [e.to_json() for e in _service(request).agents_of(principal)]


@router.get(
    "/agents/{name}",
    response_model=AgentOut,
    responses={**responses(*_ONE), **links(200, agent_links())},
    tags=["agents"],
)
async def get_agent(request: Request, principal: Reader, name: str) -> dict[str, Any]:
    return _service(request).agent_named(principal, name).to_json()


# -- runs ---------------------------------------------------------------------------------
@router.post(
    "/runs",
    status_code=201,
    response_model=RunOut,
    responses={**responses(*_ONE), **links(201, run_links("$response.body#/id"))},
    tags=["runs"],
)
async def create_run(request: Request, principal: Operator, body: RunIn) -> dict[str, Any]:
    """Start a run of one of the tenant's agents; a worker drives it."""
    text = check_text(body.input, "the input", 100_000)
    tags = {check_text(k, "a tag", 200): check_text(v, "a tag", 1000) for k, v in body.tags.items()}
    doc = await _service(request).create_run(principal, body.agent, text, tags)
    return run_out(doc)


@router.get(
    "/runs",
    response_model=RunPageOut,
    responses={**responses(*_READ), **links(200, runs_links())},
    tags=["runs"],
)
async def list_runs(
    request: Request,
    *,
    principal: Reader,
    limit: Limit = 50,
    cursor: Annotated[str | None, Query(max_length=2000)] = None,
    status: Annotated[str | None, Query(max_length=64)] = None,
    agent: Annotated[str | None, Query(max_length=200)] = None,
    tag: TagQuery = None,
) -> dict[str, Any]:
    """The tenant's runs, newest first, a page at a time (``nextCursor`` to go on)."""
    page = await _service(request).list_runs(
        principal, limit=limit, cursor=cursor, status=status, agent=agent, tags=_tags(tag)
    )
    return {"runs": page.runs, "nextCursor": None if page.next is None else page.next.encode()}


@router.get(
    "/runs/{run_id}",
    responses={
        **responses(*_ONE),
        **links(200, run_links("$response.body#/id", document=False), pending_links()),
    },
    tags=["runs"],
)
async def get_run(request: Request, principal: Reader, run_id: str) -> dict[str, Any]:
    """The run's oar/0.2 document."""
    from oarlock.formats._codec import dump

    stored = await _service(request).load(principal, run_id)
    doc = stored.document
    doc.format = "oar/0.2"
    document: dict[str, Any] = dump(doc)
    return document


@router.get(
    "/runs/{run_id}/events",
    response_model=list[EventOut],
    responses=responses(*_ONE),
    tags=["runs"],
)
async def run_events(
    request: Request,
    principal: Reader,
    run_id: str,
    after: Annotated[int, Query(ge=0, le=2**53)] = 0,
) -> list[dict[str, Any]]:
    """The run's events after sequence number ``after``."""
    return await _service(request).events(principal, run_id, after)


@router.post(
    "/runs/{run_id}/cancel",
    response_model=RunOut,
    responses={**responses(*_ONE, 409), **links(200, run_links("$response.body#/id"))},
    tags=["runs"],
)
async def cancel_run(
    request: Request,
    principal: Operator,
    run_id: str,
    body: Annotated[CancelIn | None, Body()] = None,
) -> dict[str, Any]:
    given = None if body is None else body.reason
    reason = None if given is None else check_text(given, "the reason", 4000)
    return run_out(await _service(request).cancel(principal, run_id, reason))


@router.post(
    "/runs/{run_id}/resume",
    status_code=202,
    response_model=RunOut,
    responses={**responses(*_ONE, 409), **links(202, run_links("$response.body#/id"))},
    tags=["runs"],
)
async def resume_run(request: Request, principal: Operator, run_id: str) -> dict[str, Any]:
    """Drive a running run that no one holds now, in the server's process."""
    return run_out(await _service(request).resume(principal, run_id))


# -- approvals ----------------------------------------------------------------------------
@router.get(
    "/approvals",
    response_model=ApprovalPage,
    responses={**responses(*_READ), **links(200, approvals_links())},
    tags=["approvals"],
)
async def list_approvals(
    request: Request,
    *,
    principal: Reader,
    agent: Annotated[str | None, Query(max_length=200)] = None,
    tool: Annotated[str | None, Query(max_length=200)] = None,
    side_effect: Annotated[str | None, Query(alias="sideEffect", max_length=64)] = None,
    tag: TagQuery = None,
    order: Literal["newest", "deadline"] = "newest",
    limit: Limit = 100,
) -> dict[str, Any]:
    """Undecided approvals across the tenant's waiting runs."""
    found = await _service(request).pending(
        principal,
        agent=agent,
        tool=tool,
        side_effect=side_effect,
        tags=_tags(tag),
        order=order,
        limit=limit,
    )
    return {"approvals": found}


@router.get(
    "/approvals/{run_id}/{call_id}",
    response_model=ApprovalOut,
    responses={**responses(*_ONE), 200: {"headers": _ETAG, **links(200, approval_links())[200]}},
    tags=["approvals"],
)
async def get_approval(
    request: Request, response: Response, principal: Reader, run_id: str, call_id: str
) -> dict[str, Any]:
    """One approval (pending or decided); its ``version`` is also the ETag to send back
    in If-Match with a decision."""
    _, _, item = await _service(request).approval(principal, run_id, call_id)
    response.headers["ETag"] = f'"{item["version"]}"'
    return item


@router.get(
    "/approvals/{run_id}/{call_id}/arguments",
    response_model=ExactArgumentsOut,
    responses={**responses(*_ONE), 200: {"headers": _ETAG, **links(200, exact_links())[200]}},
    tags=["approvals"],
)
async def get_exact_arguments(
    request: Request, principal: Reader, run_id: str, call_id: str
) -> Response:
    """The call's exact arguments, nothing redacted, for a principal who may decide it
    (403 for the others): what an approval approves when it edits nothing. The approval's
    ``arguments`` are shown with secrets redacted (``argumentsRedacted`` says where)."""
    _, pending, item = await _service(request).decidable(principal, run_id, call_id, None)
    body = {
        "runId": item["runId"],
        "toolCallId": item["toolCallId"],
        "arguments": pending.arguments,
        "argumentsHash": item["argumentsHash"],
        "version": item["version"],
    }
    return ExactJSON(body, headers={"ETag": f'"{item["version"]}"'})


@router.post(
    "/approvals/{run_id}/{call_id}/decision",
    response_model=DecisionOut,
    responses={**responses(*_ONE, 409, 410, 428), **links(200, decision_links())},
    tags=["approvals"],
)
async def decide(
    request: Request,
    *,
    principal: Reader,
    run_id: str,
    call_id: str,
    body: DecisionIn,
    if_match: Annotated[str, Header(alias="If-Match", max_length=200)],
) -> dict[str, Any]:
    """Approve (optionally with edited arguments, checked against the tool's schema and
    judged by the policy), deny (with a reason) or respond in the tool's place. Needs
    If-Match: the approval's version (refused with 428 without it). Edited arguments that
    are the call's own (by value) are no edit; a redacted value given back as shown
    keeps its real value. Deciding takes the role approver or admin (403 for the others)."""
    from oarlock.server._errors import IF_MATCH_REQUIRED, ApiError

    if not if_match.strip():
        raise ApiError(428, *IF_MATCH_REQUIRED)
    await _service(request).decidable(principal, run_id, call_id, body.decision)
    request.app.state.rate_limit.take(principal.token_id)
    for text, what in ((body.reason, "the reason"), (body.response, "the response")):
        if text is not None:
            check_text(text, what, 100_000)
    doc = await _service(request).decide(
        principal,
        run_id,
        call_id,
        body.decision,
        if_match=if_match,
        reason=body.reason,
        edited=body.editedArguments,
        response=body.response,
    )
    return {
        "runId": run_id,
        "toolCallId": call_id,
        "decision": body.decision,
        "decidedBy": principal.name,
        "runStatus": doc.status,
    }


# -- receipts, artifacts, audit -------------------------------------------------------------
@router.get(
    "/receipts",
    response_model=list[ReceiptOut],
    responses={**responses(*_ONE), **links(200, receipts_links())},
    tags=["receipts"],
)
async def list_receipts(
    request: Request,
    principal: Reader,
    run: Annotated[str | None, Query(max_length=200)] = None,
    status: Annotated[str | None, Query(max_length=64)] = None,
    limit: Limit = 50,
) -> list[dict[str, Any]]:
    """The tenant's receipts, newest first (of one run with ``run``)."""
    items = await _service(request).receipts(principal, run_id=run, status=status, limit=limit)
    return [i.row() for i in items]


@router.get(
    "/receipts/{invocation_id}",
    responses={**responses(*_ONE), **links(200, receipt_links())},
    tags=["receipts"],
)
async def get_receipt(request: Request, principal: Reader, invocation_id: str) -> dict[str, Any]:
    """The invocation, its receipt (null while it has none) and its reconciliations, with
    secrets redacted: a record that had any lists their JSON Pointers in a ``redacted``
    member (its hash, taken over the record as stored, cannot match the redacted copy;
    ``oarlock validate`` says so)."""
    from oarlock.formats._exported import exported

    invocation, receipt, notes = await _service(request).receipt(principal, invocation_id)
    return {  # secrets redacted, each record saying where (``redacted``: its hash cannot match)
        "invocation": exported(invocation),
        "receipt": None if receipt is None else exported(receipt),
        "reconciliations": [n.to_json() for n in notes],
    }


@router.post(
    "/receipts/{invocation_id}/reconcile",
    responses={**responses(*_ONE, 409), **links(200, reconcile_links())},
    tags=["receipts"],
)
async def reconcile(
    request: Request, principal: Admin, invocation_id: str, body: ReconcileIn
) -> dict[str, Any]:
    """Resolve an Uncertain receipt (a record is appended; nothing is edited)."""
    evidence = check_text(body.evidence, "the evidence", 4000)
    return await _service(request).reconcile(
        principal, invocation_id, body.outcome, evidence, body.supersede
    )


@router.get(
    "/receipts/{invocation_id}/result",
    responses={
        200: {
            "description": "the tool's raw result",
            "content": {"application/json": {}, "text/plain": {}, "application/octet-stream": {}},
        },
        **responses(*_ONE),
    },
    response_class=Response,
    tags=["artifacts"],
)
async def get_artifact(request: Request, principal: Reader, invocation_id: str) -> Response:
    """The raw result of a call, by its receipt's reference, with its content type."""
    import json

    data = await _service(request).artifact(principal, invocation_id)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        kind = "application/octet-stream"
    else:
        try:
            json.loads(text)
            kind = "application/json"
        except ValueError:
            kind = "text/plain; charset=utf-8"
    headers = {
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": "sandbox; default-src 'none'",
    }
    return Response(content=data, media_type=kind, headers=headers)


@router.get("/audit/verify", response_model=AuditOut, responses=responses(*_READ), tags=["audit"])
async def audit_verify(request: Request, principal: Admin) -> dict[str, Any]:
    """Verify the ledger chain of the tenant's records, with its latest checkpoint."""
    return await _service(request).verify(principal)

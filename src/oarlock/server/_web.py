"""The inbox: server-rendered pages (Jinja2) over the same service as the API.

A person signs in by pasting an API token once into the login form; the server keeps the
token in memory only, under a random session id sent back as an HttpOnly, SameSite=Strict
cookie (Secure over HTTPS), and checks the token again on every request (a revoked token
ends its sessions). Every form carries the session's CSRF token, compared in constant
time, and is taken only from the inbox's own pages (:func:`_same_origin`: a browser's
``Sec-Fetch-Site`` and ``Origin`` must say so). Every decision is a plain ``<form
method="post">``: the pages work without JavaScript; ``inbox.js`` adds live updates and
the diff of an edit as it is typed. A page offers only the decisions its principal may
make (:func:`~oarlock.server._auth.decision_refusal`, which the service asks again when a
decision comes), and the arguments form holds each argument so that an untouched form
approves exactly the call as asked (:mod:`oarlock.server._exact`).

Every value from a run, a model, a tool or a token reaches the page through the
renderer (:func:`oarlock._render.line`, or :func:`~oarlock._render.block` for text of
several lines), then Jinja2's HTML escaping."""

from __future__ import annotations

import hmac
import json
import secrets
import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape

from oarlock._render import block, line
from oarlock.errors import OarlockError
from oarlock.server import _exact
from oarlock.server._auth import DECISIONS, DecisionScope, decision_refusal
from oarlock.server._errors import ApiError, status_of
from oarlock.server._tokens import Principal, TokenStore

__all__ = ["Sessions", "router"]

COOKIE = "oarlock_session"
_INBOX_ROWS = 200  # the newest (or most urgent) shown; filters narrow the rest
_SESSION_SECONDS = 12 * 3600
HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; "
    "img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; "
    "base-uri 'none'",
    "X-Frame-Options": "DENY",
    # not no-referrer: under it a browser sends "Origin: null" with the pages' own posts,
    # which _same_origin must then refuse; same-origin tells no other site anything either
    "Referrer-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}


class Rendered(str):
    """Text already through the renderer: printed as it is (then HTML-escaped)."""


class Lines(Rendered):
    """Text of several lines, already through the renderer (``block``)."""


# the lines rendered during one page's rendering (its values repeat: tools, classes,
# agents, reasons), so that each distinct value goes through the renderer once a page
_seen: ContextVar[dict[str, str] | None] = ContextVar("oarlock_page_lines", default=None)


def _finalize(value: Any) -> Any:
    """Every value a template prints goes through the renderer: one line, unless it is
    :class:`Lines`."""
    if value is None:
        return ""
    if isinstance(value, Rendered | int | float):
        return value
    # as plain text: a str subclass (Markup, as tojson gives) would pass the escaping by
    text = str.__str__(value) if isinstance(value, str) else str(value)
    seen = _seen.get()
    if seen is None:
        return str.__str__(line(text))
    done = seen.get(text)
    if done is None:
        done = seen[text] = str.__str__(line(text))
    return done


def _lines(value: Any) -> Lines:
    return Lines(block("" if value is None else value, indent=""))


def _json_text(value: Any) -> Lines:
    return _lines(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True))


_env = Environment(
    loader=FileSystemLoader(Path(__file__).with_name("templates")),
    autoescape=select_autoescape(["html"], default=True),
    finalize=_finalize,
)
_env.filters["lines"] = _lines
_env.filters["json_text"] = _json_text
_env.filters["url"] = lambda v: quote(str(v), safe="")


def _same_origin(request: Request) -> None:
    """Every form post (sign in, sign out, a decision) comes from the inbox's own pages: a
    browser says where a post comes from, in ``Sec-Fetch-Site`` and ``Origin``, and either
    must name this origin (403 ``cross_origin``). A client that sends neither (not a
    browser) still needs the form's CSRF token, as every post does."""
    if request.method in ("GET", "HEAD", "OPTIONS"):
        return
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        raise ApiError(
            403,
            "cross_origin",
            f"the inbox takes forms from its own pages only, not from a {site} page",
        )
    origin = request.headers.get("origin")
    own = f"{request.url.scheme}://{request.url.netloc}"
    if origin is not None and origin.lower() != own.lower():
        raise ApiError(
            403,
            "cross_origin",
            f"the inbox takes forms from its own pages only ({own}), not from {origin}",
        )


router = APIRouter(include_in_schema=False, dependencies=[Depends(_same_origin)])


@dataclass
class _Session:
    token: str
    csrf: str
    until: float


@dataclass
class Sessions:
    """Sessions in this process's memory: session id -> (token, CSRF token, expiry)."""

    tokens: TokenStore
    _by_id: dict[str, _Session] = field(default_factory=dict)

    def open(self, token: str) -> str:
        self._expire()
        sid = secrets.token_urlsafe(32)
        until = time.time() + _SESSION_SECONDS
        self._by_id[sid] = _Session(token, secrets.token_urlsafe(32), until)
        return sid

    def close(self, request: Request) -> None:
        self._by_id.pop(request.cookies.get(COOKIE, ""), None)

    def _expire(self) -> None:
        now = time.time()
        for sid in [k for k, s in self._by_id.items() if s.until < now]:
            del self._by_id[sid]

    def _session(self, request: Request) -> _Session | None:
        found = self._by_id.get(request.cookies.get(COOKIE, ""))
        if found is None or found.until < time.time():
            return None
        return found

    async def principal(self, request: Request) -> Principal | None:
        found = self._session(request)
        return None if found is None else await self.tokens.authenticate(found.token)

    def csrf(self, request: Request) -> str:
        found = self._session(request)
        return "" if found is None else found.csrf

    def check_csrf(self, request: Request, given: object) -> None:
        expected = self.csrf(request)
        if not (expected and isinstance(given, str) and hmac.compare_digest(expected, given)):
            raise ApiError(403, "csrf", "the form's CSRF token is missing or wrong; reload it")


def _page(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
    sessions: Sessions = request.app.state.sessions
    token = _seen.set({})
    try:
        html = _env.get_template(name).render(csrf=sessions.csrf(request), **context)
    finally:
        _seen.reset(token)
    return HTMLResponse(html, status_code=status, headers=HEADERS)


async def _who(request: Request) -> Principal | None:
    sessions: Sessions = request.app.state.sessions
    return await sessions.principal(request)


def _to_login() -> RedirectResponse:
    return RedirectResponse("/login", status_code=303, headers=HEADERS)


def _error_page(request: Request, principal: Principal, exc: Exception) -> HTMLResponse:
    if isinstance(exc, ApiError):
        status, code, message = exc.status, exc.code, exc.message
    elif isinstance(exc, OarlockError):
        status, code, message = status_of(exc), exc.code, exc.message
    else:
        raise exc
    return _page(request, "error.html", status, me=principal, code=code, message=message)


# -- sign in and out ----------------------------------------------------------------------
_LOGIN = "oarlock_login"  # the login form's CSRF token, before there is a session


def _login_page(request: Request, status: int, failed: bool) -> HTMLResponse:
    check = secrets.token_urlsafe(32)
    page = _page(request, "login.html", status, me=None, failed=failed, login_csrf=check)
    page.set_cookie(_LOGIN, check, max_age=3600, httponly=True, samesite="strict", path="/login",
                    secure=request.url.scheme == "https")  # fmt: skip
    return page


@router.get("/login")
async def login_form(request: Request) -> HTMLResponse:
    return _login_page(request, 200, failed=False)


@router.post("/login")
async def login(request: Request) -> Response:
    form = await request.form()
    token = str(form.get("token") or "").strip()
    sessions: Sessions = request.app.state.sessions
    expected, given = request.cookies.get(_LOGIN, ""), form.get("csrf")
    if not (expected and isinstance(given, str) and hmac.compare_digest(expected, given)):
        return _login_page(request, 403, failed=True)
    if await sessions.tokens.authenticate(token) is None:
        return _login_page(request, 401, failed=True)
    response = RedirectResponse("/", status_code=303, headers=HEADERS)
    response.set_cookie(
        COOKIE,
        sessions.open(token),
        max_age=_SESSION_SECONDS,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    sessions: Sessions = request.app.state.sessions
    form = await request.form()
    sessions.check_csrf(request, form.get("csrf"))
    sessions.close(request)
    response = _to_login()
    response.delete_cookie(COOKIE, path="/")
    return response


# -- pages --------------------------------------------------------------------------------
@router.get("/")
async def inbox(request: Request) -> Response:
    """The pending approvals of the tenant, newest (or most urgent) first, filtered."""
    me = await _who(request)
    if me is None:
        return _to_login()
    q = request.query_params
    filters = {k: q.get(k) or None for k in ("agent", "tool", "sideEffect", "tag")}
    order = "deadline" if q.get("order") == "deadline" else "newest"
    tags = {}
    if filters["tag"] and "=" in filters["tag"]:
        key, _, value = filters["tag"].partition("=")
        tags[key] = value
    service = request.app.state.service
    found = await service.pending(
        me,
        agent=filters["agent"],
        tool=filters["tool"],
        side_effect=filters["sideEffect"],
        tags=tags,
        order=order,
        limit=_INBOX_ROWS + 1,
    )
    more = len(found) > _INBOX_ROWS
    return _page(
        request,
        "inbox.html",
        me=me,
        approvals=found[:_INBOX_ROWS],
        more=more,
        filters=filters,
        order=order,
    )


@router.get("/approvals/{run_id}/{call_id}")
async def approval_page(request: Request, run_id: str, call_id: str) -> Response:
    me = await _who(request)
    if me is None:
        return _to_login()
    service = request.app.state.service
    try:
        stored, _, item = await service.approval(me, run_id, call_id)
    except OarlockError as exc:
        return _error_page(request, me, exc)
    from oarlock.formats._codec import dump

    doc = dump(stored.document)
    scope = DecisionScope.of(me.tenant, item)  # the approval was read in me's tenant
    refusals = {d: decision_refusal(me, scope, d) for d in DECISIONS}
    why_not = next((r.message for r in refusals.values() if r is not None), None)
    return _page(
        request,
        "approval.html",
        me=me,
        a=item,
        doc=doc,
        may={d: r is None for d, r in refusals.items()},
        why_not=why_not,
        fields=_form_fields(item),
        original=Rendered(_exact.form_original(item["arguments"])),
        timeline=_timeline(doc, upto=call_id),
    )


def _form_fields(item: dict[str, Any]) -> list[dict[str, Any]]:
    """The arguments form's fields, their text already through the renderer."""
    fields = _exact.form_fields(item.get("argumentsSchema"), item["arguments"])
    return [
        {
            "name": f.name,
            "kind": f.kind,
            "text": Rendered(f.text),
            "present": f.present,
            "required": f.required,
            "description": f.description,
            "redacted": f.redacted,
            "multiline": f.multiline,
        }
        for f in fields
    ]


@router.post("/approvals/{run_id}/{call_id}")
async def decide(request: Request, run_id: str, call_id: str) -> Response:
    """A decision from the approval page's form: approve (with the arguments the form
    holds, read back by value: an untouched form approves the call as asked), deny with
    a reason, or respond. Who may is the service's to say, as for the API."""
    me = await _who(request)
    if me is None:
        return _to_login()
    sessions: Sessions = request.app.state.sessions
    form = await request.form()
    service = request.app.state.service
    try:
        sessions.check_csrf(request, form.get("csrf"))
        choice = str(form.get("decision") or "")
        if choice not in DECISIONS:
            raise ApiError(422, "invalid_request", "decision: approved, denied or responded")
        _, _, item = await service.decidable(me, run_id, call_id, choice)
        edited = None
        if choice == "approved":
            fields = _exact.form_fields(item.get("argumentsSchema"), item["arguments"])
            edited = _exact.read_form(fields, form, item["arguments"])
        request.app.state.rate_limit.take(me.token_id)
        await service.decide(
            me,
            run_id,
            call_id,
            choice,
            if_match=str(form.get("version") or ""),
            reason=str(form.get("reason") or "") or None,
            edited=edited,
            response=str(form.get("response") or "") if choice == "responded" else None,
        )
    except (OarlockError, ApiError) as exc:
        return _error_page(request, me, exc)
    target = f"/runs/{quote(run_id, safe='')}?decided={quote(call_id, safe='')}"
    return RedirectResponse(target, status_code=303, headers=HEADERS)


@router.get("/runs/{run_id}")
async def run_page(request: Request, run_id: str) -> Response:
    me = await _who(request)
    if me is None:
        return _to_login()
    service = request.app.state.service
    try:
        stored = await service.load(me, run_id)
        receipts = await service.receipts(me, run_id=run_id, status=None, limit=200)
    except OarlockError as exc:
        return _error_page(request, me, exc)
    from oarlock.formats._codec import dump

    doc = dump(stored.document)
    return _page(
        request,
        "run.html",
        me=me,
        doc=doc,
        timeline=_timeline(doc),
        receipts=[_receipt(r) for r in receipts],
        decided=request.query_params.get("decided"),
        may_decide=decision_refusal(me, DecisionScope(run_id, me.tenant, None, None), None)
        is None,
    )


@router.get("/receipts")
async def receipts_page(request: Request) -> Response:
    me = await _who(request)
    if me is None:
        return _to_login()
    service = request.app.state.service
    found = await service.receipts(me, run_id=None, status=None, limit=200)
    return _page(request, "receipts.html", me=me, receipts=[_receipt(r) for r in found])


def _receipt(item: Any) -> dict[str, Any]:
    inv, rec = item.invocation, item.receipt
    effect = rec.get("effect") or {}
    return {
        "invocationId": rec["invocationId"],
        "tool": inv.get("toolId"),
        "sideEffect": inv.get("sideEffectClass"),
        "status": rec.get("status"),
        "effect": " ".join(
            str(x) for x in (effect.get("kind"), effect.get("externalReference")) if x
        ),
        "finishedAt": rec.get("finishedAt"),
        "hasResult": "resultRef" in rec,
        "reconciled": [r.outcome for r in item.reconciliations],
    }


# -- the timeline ------------------------------------------------------------------------
def _timeline(doc: dict[str, Any], upto: str | None = None) -> list[dict[str, Any]]:
    """What the user asked, what the agent said, which tools it called and what came
    back, up to the call ``upto`` (when given)."""
    items: list[dict[str, Any]] = []
    for message in doc.get("messages", []):
        role = message.get("role")
        for part in message.get("content", []):
            kind = part.get("type")
            if kind == "text":
                items.append({"who": role, "kind": "text", "text": part.get("text", "")})
            elif kind == "tool_call":
                text = _json_text(part.get("arguments"))
                items.append(
                    {"who": "agent", "kind": "call", "tool": part.get("name"), "text": text}
                )
                if part.get("id") == upto:
                    return items
            elif kind == "tool_result":
                items.append(
                    {
                        "who": "tool",
                        "kind": "result",
                        "tool": part.get("toolName"),
                        "text": part.get("content", ""),
                        "error": part.get("isError", False),
                    }
                )
    return items

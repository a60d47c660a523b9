"""The ASGI app: :func:`create_app` over a run database and a folder of agent files, with
the embedded worker (the same :class:`~oarlock.worker.Worker` that ``oarlock worker``
runs) unless told to leave runs to separate workers.

Every response is JSON through the renderer (:func:`oarlock._render.dumps`); every
refusal is an error body naming its rule (:mod:`oarlock.server._errors`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from oarlock import __version__
from oarlock._render import dumps, line
from oarlock.errors import OarlockError
from oarlock.server._auth import RateLimit
from oarlock.server._errors import IF_MATCH_REQUIRED, ApiError, error_body, status_of

if TYPE_CHECKING:
    from oarlock.governance._approvers import ApproverKey
    from oarlock.server._webhooks import Webhook
    from oarlock.store._base import RunStore
    from oarlock.worker import Worker, WorkerSettings

__all__ = ["ServerSettings", "create_app"]

log = logging.getLogger("oarlock.server")
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """Limits and options: the largest request body, decisions a principal may make a
    minute (and at once), whether the app runs a worker, and the worker's settings."""

    max_body_bytes: int = 1_048_576
    decisions_per_minute: float = 60.0
    decision_burst: int = 20
    worker: bool = True
    worker_settings: WorkerSettings | None = None
    approver: ApproverKey | None = None
    webhooks: tuple[Webhook, ...] = ()
    watch_interval: float = 1.0
    stream_interval: float = 0.25
    webhook_transport: Any = None  # an httpx transport (tests)


class SafeJSON(JSONResponse):
    """JSON with every control, bidirectional and invisible character escaped."""

    def render(self, content: Any) -> bytes:
        return dumps(content, indent=None).encode("utf-8")


def _error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> SafeJSON:
    return SafeJSON(error_body(status, code, message), status_code=status, headers=headers)


class BodyLimit:
    """The gate of request bodies: refuse one past ``limit`` bytes (413), by its
    Content-Length or as it streams in; then read a JSON body strictly, once, before any
    route does (:func:`~oarlock.formats._validate.loads_strict`: UTF-8, no duplicate key,
    no NaN, bounded digits and nesting), refusing what is not (400 ``invalid_json``, naming
    the rule); a lone surrogate is left to the route, which names the field."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]], limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    too_big = int(value) > self.limit
                except ValueError:
                    too_big = False
                if too_big:
                    await self._refuse(scope, receive, send)
                    return
        body = bytearray()
        more = True
        while more:  # the whole body, up to the limit, before the app reads any of it
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, _replay([message], receive), send)
                return
            body += message.get("body", b"")
            more = bool(message.get("more_body", False))
            if len(body) > self.limit:
                await self._refuse(scope, receive, send)
                return
        if body and _is_json(scope):
            from oarlock.formats._validate import loads_strict

            try:
                loads_strict(bytes(body))
            except OarlockError as exc:
                if exc.code == "json_invalid_text":  # a lone surrogate: the route names its field
                    await self.app(scope, _replay([_whole(body)], receive), send)
                    return
                response = _error(400, "invalid_json", f"the body is {exc.message}")
                await response(scope, receive, send)
                return
        await self.app(scope, _replay([_whole(body)], receive), send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = _error(
            413, "body_too_large", f"the request body is larger than {self.limit} bytes"
        )
        await response(scope, receive, send)


def _whole(body: bytearray) -> Message:
    return {"type": "http.request", "body": bytes(body), "more_body": False}


def _is_json(scope: Scope) -> bool:
    """Whether the request says its body is JSON (``application/json``, ``...+json``)."""
    for name, value in scope.get("headers", []):
        if name == b"content-type":
            kind: str = value.decode("latin-1").partition(";")[0].strip().lower()
            return kind == "application/json" or (
                kind.startswith("application/") and kind.endswith("+json")
            )
    return False


class Headers:
    """Headers every response gets unless it sets its own: never stored by a cache
    (``Cache-Control: no-store``; the inbox's static files aside), never sniffed, and a
    Content-Security-Policy that allows nothing (the inbox's pages and a call's raw result
    set theirs)."""

    DEFAULTS = (
        (b"cache-control", b"no-store"),
        (b"x-content-type-options", b"nosniff"),
        (b"content-security-policy", b"default-src 'none'; frame-ancestors 'none'"),
    )

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = str(scope.get("path", "")).startswith("/static/")

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                for name, value in self.DEFAULTS:
                    if name not in present and not (static and name == b"cache-control"):
                        headers.append((name, value))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, sending)


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """``messages`` first, then whatever ``receive`` gives (a disconnect)."""

    async def replayed() -> Message:
        return messages.pop(0) if messages else await receive()

    return replayed


def _handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> SafeJSON:
        return _error(exc.status, exc.code, exc.message, exc.headers)

    @app.exception_handler(OarlockError)
    async def oarlock_error(request: Request, exc: OarlockError) -> SafeJSON:
        return _error(status_of(exc), exc.code, exc.message)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> SafeJSON:
        if any(
            e.get("type") == "missing" and tuple(e.get("loc", ())) == ("header", "If-Match")
            for e in exc.errors()
        ):
            return _error(428, *IF_MATCH_REQUIRED)
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()))
        message = f"{where}: {first.get('msg', 'invalid')}" if where else "invalid request"
        if any(e.get("type") == "json_invalid" for e in exc.errors()):
            return _error(400, "invalid_json", f"the body is not JSON: {message}")
        return _error(422, "invalid_request", message)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> SafeJSON:
        if isinstance(exc.__cause__, UnicodeDecodeError):  # FastAPI's "error parsing the body"
            return _error(400, "invalid_json", "the body is not JSON: it is not UTF-8")
        if exc.status_code == 400 and isinstance(exc.__cause__, ValueError | RecursionError):
            # the gate reads every JSON body first; this is what a body it let by still hit
            return _error(400, "invalid_json", "the body is not JSON oarlock accepts")
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return _error(exc.status_code, code, str(exc.detail), getattr(exc, "headers", None))


def _open_store(db: str | Path) -> RunStore:
    from oarlock.store._dburl import is_postgres_url

    if isinstance(db, str) and is_postgres_url(db):
        from oarlock.store._postgres import PostgresStore

        return PostgresStore(db, create=True)
    from oarlock.store._sqlite import SQLiteStore

    return SQLiteStore(Path(db), create=True)


def create_app(
    db: str | Path | RunStore,
    agents: str | Path | None = None,
    settings: ServerSettings | None = None,
) -> FastAPI:
    """The server over the run database ``db`` (an SQLite path, a PostgreSQL URL or an
    open store) and the agent files of the folder ``agents``."""
    from oarlock.server._api import router
    from oarlock.server._service import Service, load_agents
    from oarlock.server._stream import router as streams
    from oarlock.server._tokens import token_store

    s = settings or ServerSettings()
    store = db if not isinstance(db, str | Path) else _open_store(db)
    entries, problems = load_agents(agents)
    for problem in problems:
        log.warning("agent file not loaded: %s", line(problem))
    service = Service(store, entries, approver=s.approver)
    worker_box: list[tuple[Worker, asyncio.Task[None]]] = []

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        from oarlock.server._hub import Hub
        from oarlock.server._webhooks import Webhooks

        await app.state.tokens.prepare()
        hooks = Webhooks(list(s.webhooks), transport=s.webhook_transport)
        tenants = {e.agent.tenant for e in entries} | {h.tenant for h in s.webhooks}
        hub = Hub(service, tenants, interval=s.watch_interval, on_event=hooks.tell)
        app.state.hub, app.state.webhooks = hub, hooks
        hooks.start()
        hub.start()
        if s.worker:
            worker_box.append(_start_worker(store, s))
        try:
            yield
        finally:
            await hub.stop()
            for worker, task in worker_box:
                worker.stop()
                await asyncio.gather(task, return_exceptions=True)
            worker_box.clear()
            await hooks.stop()
            await service.close()

    app = FastAPI(
        title="oarlock",
        version=__version__,
        description="Durable, governed LLM agent runs: the HTTP API of `oarlock serve`.",
        default_response_class=SafeJSON,
        lifespan=lifespan,
        # no /docs nor /redoc: they load scripts from a CDN and run inline script on the
        # inbox's origin; the document itself is /openapi.json
        docs_url=None,
        redoc_url=None,
        swagger_ui_oauth2_redirect_url=None,
    )
    app.state.service = service
    app.state.store = store
    app.state.tokens = token_store(store)
    app.state.rate_limit = RateLimit(s.decisions_per_minute, s.decision_burst)
    app.state.settings = s
    app.state.problems = problems
    _handlers(app)
    app.include_router(streams)  # before the API's routes: /approvals/stream is no approval
    app.include_router(router)
    _pages(app)
    app.add_middleware(BodyLimit, limit=s.max_body_bytes)
    app.add_middleware(Headers)
    _openapi_errors_as_json(app)
    return app


def _pages(app: FastAPI) -> None:
    """The inbox's pages, sessions and static files (the style sheet, inbox.js)."""
    from fastapi.staticfiles import StaticFiles

    from oarlock.server._web import Sessions
    from oarlock.server._web import router as pages

    app.state.sessions = Sessions(app.state.tokens)
    app.include_router(pages)
    static = Path(__file__).with_name("static")
    app.mount("/static", StaticFiles(directory=static), name="static")


def _openapi_errors_as_json(app: FastAPI) -> None:
    """Refusals are JSON whatever the operation's own media type (an event stream's)."""
    made = app.openapi

    def openapi() -> dict[str, Any]:
        spec = made()
        for item in spec.get("paths", {}).values():
            for op in item.values():
                for status, response in op.get("responses", {}).items():
                    content = response.get("content")
                    if not status.startswith("2") and isinstance(content, dict):
                        response["content"] = {"application/json": content["application/json"]}
        return spec

    app.openapi = openapi  # type: ignore[method-assign]


def _start_worker(store: RunStore, s: ServerSettings) -> tuple[Worker, asyncio.Task[None]]:
    from oarlock.worker import Worker

    def said(event: Any) -> None:
        log.info("worker: %s %s %s", event.kind, line(event.run_id or ""), line(event.detail))

    worker = Worker(store, s.worker_settings, on_event=said)
    return worker, asyncio.ensure_future(worker.run())

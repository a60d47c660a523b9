"""MCP servers as tools: each tool an MCP server lists becomes a governed oarlock tool.

In an agent file (every key but one of ``command``/``url`` is optional)::

    mcp_servers:
      github:                                  # the name is the namespace: github.create_pr
        command: [npx, -y, "@modelcontextprotocol/server-github"]   # stdio ("python" is
                                                # oarlock's own interpreter); or
        # url: https://mcp.example.com/mcp     # streamable HTTP, with headers: {...}
        env: {GITHUB_TOKEN: "..."}             # stdio: only HOME, PATH, USER... are inherited
        cwd: servers/github                    # stdio: relative to the agent file
        side_effects: {create_pr: external}    # per-tool class overrides
        default_side_effect: shared-write      # tools without an override or a telling hint
        needs_approval: {search_code: true}    # per-tool, as for Python tools
        timeout_seconds: 30                    # per call: read -> TimedOut, else Uncertain
        trust_hints: true                      # false: ignore the server's tool annotations
        start_timeout_seconds: 60              # to start, initialize and list the tools
        max_restarts: 3                        # restarts after crashes ...
        restart_window_seconds: 60             # ... within this window

In Python::

    async with await connect_mcp([MCPServerConfig.from_dict("github", {...})]) as mcp:
        agent = Agent("triage", model, tools=mcp.tools)

Every MCP tool is a :class:`~oarlock.tools.Tool` named ``server.tool`` with
``mcp_server_id=server``; its parameters are the server's input schema, which validates
the arguments before any call. The tools are listed once, when the server connects.

The side-effect class is, in order: the config's override; ``read`` for
``readOnlyHint: true``; ``external`` for ``openWorldHint: true`` without
``destructiveHint: true`` (it reaches systems outside ours and says no more; ``external``
needs an approval like ``spend``, so nothing runs unapproved either way);
``default_side_effect``; else the cautious class ``spend`` (so ``destructiveHint`` alone,
and no annotations at all, give ``spend``). The hints are the server's word:
``trust_hints: false`` ignores them.

Secrets: the values of ``headers`` and ``env`` whose names say they are secret
(``Authorization``, ``X-Api-Key``, ``GITHUB_TOKEN``...) and a password in ``url`` are
registered when the server is connected, and every error text a server gives (its
refusals, a tool's error result, the end of its stderr) is redacted
(:func:`oarlock._secrets.redact`) before it is raised, so it is never stored or shown.

A server that stops during a call fails that call with ``mcp_server_crashed`` (an
:class:`MCPServerCrashed`, an :class:`~oarlock.errors.OutcomeUnknown`: a side-effecting
call is recorded Uncertain) and is restarted on the next call,
at most ``max_restarts`` times within ``restart_window_seconds``; beyond that calls fail
with ``mcp_server_unavailable``. A server that cannot start gives ``mcp_start_failed``
with the command or URL, the cause and the end of its stderr. A call the executor's
timeout cancels sends the server a cancellation and leaves the connection usable: one
task per server run owns the SDK's transport and session, and calls only send requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import re
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self, cast

from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import SchemaError
from jsonschema.protocols import Validator
from referencing.exceptions import Unresolvable

try:
    import anyio
    import httpx2
    import mcp.types as mt
    from mcp import ClientSession, StdioServerParameters, stdio_client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.exceptions import MCPError
except ImportError as exc:  # pragma: no cover
    raise ImportError(f"MCP tools need the mcp package (mcp>=2.3): {exc}") from exc

from oarlock._config import Problems, describe, joined
from oarlock._secrets import redact, register_named, register_url
from oarlock.errors import ConfigError, OutcomeUnknown, ToolError
from oarlock.formats._jcs import digest
from oarlock.formats._models import SideEffectClass
from oarlock.formats._rules import SIDE_EFFECT_CLASSES
from oarlock.tools._tool import CAUTIOUS_CLASS, Tool, ToolArgumentsError

__all__ = [
    "MCPConnection",
    "MCPServerConfig",
    "MCPServerCrashed",
    "MCPTool",
    "MCPTools",
    "connect_mcp",
    "side_effect_for",
]

log = logging.getLogger("oarlock.mcp")
_NAME = re.compile(r"[A-Za-z0-9_-]+")
_TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_KEYS = (
    "command", "env", "cwd", "url", "headers", "side_effects", "default_side_effect",
    "timeout_seconds", "needs_approval", "trust_hints", "start_timeout_seconds",
    "max_restarts", "restart_window_seconds",
)  # fmt: skip
_CLIENT = mt.Implementation(name="oarlock", version="0.1.0")
_CLOSE_WAIT = 15.0  # the SDK's stdio shutdown takes at most about 6.5 s


class _StartFailed(Exception):
    pass


class MCPServerCrashed(OutcomeUnknown):
    """The server stopped while a call was running: the call may or may not have taken
    effect, so the executor records a side-effecting one Uncertain."""

    code = "mcp_server_crashed"


@dataclass(frozen=True)
class MCPServerConfig:
    """One MCP server: ``command`` (stdio) or ``url`` (streamable HTTP), and how its tools
    are governed. ``name`` is the namespace of its tools."""

    name: str
    command: list[str] | None = None
    url: str | None = None
    env: dict[str, str] | None = None
    cwd: str | None = None
    headers: dict[str, str] | None = None
    side_effects: dict[str, str] = field(default_factory=dict)
    default_side_effect: str | None = None
    timeout_seconds: float | None = None
    needs_approval: dict[str, bool] = field(default_factory=dict)
    trust_hints: bool = True
    start_timeout_seconds: float = 60.0
    max_restarts: int = 3
    restart_window_seconds: float = 60.0

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise ConfigError(joined(f"mcp_servers.{self.name}", problems), problems=problems)

    def problems(self) -> list[str]:
        """Every problem of this config, each naming its key (empty if there is none)."""
        found = Problems()
        where = f"mcp_servers.{self.name}"
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            found.add(f"mcp_servers: server name {describe(self.name)}: use letters, digits, _ -")
        if (self.command is None) == (self.url is None):
            found.add(f"{where}: give exactly one of command (stdio) or url (HTTP)")
        if self.command is not None and (
            not isinstance(self.command, list)
            or not self.command
            or not all(isinstance(a, str) and a and "\0" not in a for a in self.command)
        ):
            found.add(f"{where}.command: expected a list of strings like [npx, server]")
        if self.url is not None and not (
            isinstance(self.url, str) and re.match(r"https?://[^\s]+$", self.url)
        ):
            found.add(f"{where}.url: expected an http:// or https:// URL")
        if self.url is not None and (self.env is not None or self.cwd is not None):
            found.add(f"{where}: env and cwd are for a command, not a url")
        if self.command is not None and self.headers is not None:
            found.add(f"{where}.headers: headers are for a url, not a command")
        for key in ("env", "headers", "side_effects"):
            found.extend(_map_problems(getattr(self, key), f"{where}.{key}", str))
        found.extend(_map_problems(self.needs_approval, f"{where}.needs_approval", bool))
        if isinstance(self.side_effects, Mapping):
            for tool, cls in self.side_effects.items():
                if isinstance(cls, str):
                    with found.catch():
                        _check_class(cls, f"{where}.side_effects.{tool}")
        if self.default_side_effect is not None:
            with found.catch():
                _check_class(self.default_side_effect, f"{where}.default_side_effect")
        if self.cwd is not None and not (isinstance(self.cwd, str) and "\0" not in self.cwd):
            found.add(f"{where}.cwd: expected a string, got {describe(self.cwd)}")
        if not isinstance(self.trust_hints, bool):
            got = describe(self.trust_hints)
            found.add(f"{where}.trust_hints: expected true or false, got {got}")
        for key in ("timeout_seconds", "start_timeout_seconds", "restart_window_seconds"):
            value = getattr(self, key)
            if value is not None and not _positive(value):
                found.add(f"{where}.{key}: expected a positive number, got {describe(value)}")
        restarts = self.max_restarts
        if isinstance(restarts, bool) or not isinstance(restarts, int) or restarts < 0:
            found.add(f"{where}.max_restarts: expected a whole number of at least 0")
        return found.items

    @classmethod
    def from_dict(
        cls, name: str, data: Mapping[str, Any], *, base_dir: Path | None = None
    ) -> MCPServerConfig:
        """A config from an agent file's ``mcp_servers.<name>`` mapping; a relative ``cwd``
        is taken from ``base_dir`` (the agent file's folder). Every problem of the entry
        is reported at once (one ConfigError listing them)."""
        where = f"mcp_servers.{name}"
        if not isinstance(data, Mapping):
            raise ConfigError(f"{where}: expected a mapping, got {describe(data)}")
        use = ", ".join(_KEYS)
        problems = [f"{where}.{key}: unknown key; use {use}" for key in data if key not in _KEYS]
        d = {k: v for k, v in data.items() if k in _KEYS}
        if isinstance(d.get("cwd"), str) and base_dir is not None:
            d["cwd"] = str(base_dir / d["cwd"])
        for key in ("side_effects", "needs_approval"):  # optional: absent or null is none
            if d.get(key) is None:
                d.pop(key, None)
        try:
            config = cls(name=name, **d)
        except ConfigError as exc:
            problems.extend(exc.problems)
        if problems:
            raise ConfigError(joined(where, problems), problems=problems)
        return config

    @property
    def target(self) -> str:
        """The command line or URL, for messages."""
        return " ".join(self.command) if self.command is not None else str(self.url)


def _positive(value: Any) -> bool:
    number = not isinstance(value, bool) and isinstance(value, int | float)
    return number and math.isfinite(value) and value > 0


def _check_class(value: Any, where: str) -> None:
    if value not in SIDE_EFFECT_CLASSES:
        known = ", ".join(SIDE_EFFECT_CLASSES)
        raise ConfigError(f"{where}: unknown side-effect class {value!r}; use one of {known}")


def _map_problems(value: Any, where: str, kind: type) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, Mapping):
        return [f"{where}: expected a mapping, got {describe(value)}"]
    what = "true or false" if kind is bool else "a string"
    return [
        f"{where}.{k}: expected {what}, got {describe(v)}"
        for k, v in value.items()
        if not isinstance(k, str) or not isinstance(v, kind) or (isinstance(v, str) and "\0" in v)
    ]


def side_effect_for(config: MCPServerConfig, tool: mt.Tool) -> SideEffectClass:
    """The class of one MCP tool: override, then hints, then the default (see the module)."""
    cls = config.side_effects.get(tool.name)
    hints = tool.annotations if config.trust_hints else None
    if cls is None and hints is not None:
        if hints.read_only_hint is True:
            cls = "read"
        elif hints.open_world_hint is True and hints.destructive_hint is not True:
            cls = "external"
    return cast(SideEffectClass, cls or config.default_side_effect or CAUTIOUS_CLASS)


@dataclass(eq=False)
class MCPTool(Tool):
    """A tool served by an MCP server; its arguments are checked against the server's
    input schema (JSON Schema 2020-12 unless the schema names another draft)."""

    remote_name: str = ""
    validator: Validator | None = field(default=None, repr=False)

    def validate_arguments(self, arguments: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(arguments, dict):
            raise ToolArgumentsError(f"invalid arguments for tool {self.name!r}: not an object")
        if self.validator is None:
            return dict(arguments)
        try:
            errors = sorted(
                self.validator.iter_errors(arguments),
                key=lambda e: [str(p) for p in e.absolute_path],
            )
        except Unresolvable as exc:
            raise ToolArgumentsError(
                f"tool {self.name!r}: its schema has a reference that cannot be resolved: {exc}"
            ) from None
        if errors:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e.absolute_path) or 'arguments'}: {e.message}"
                for e in errors[:5]
            )
            more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
            raise ToolArgumentsError(f"invalid arguments for tool {self.name!r}: {problems}{more}")
        return dict(arguments)


def result_text(result: mt.CallToolResult) -> str:
    """What the model is shown: the text blocks, the structured content as JSON when there
    is no text, and a placeholder for each image, audio clip or resource."""
    texts = [b.text for b in result.content if isinstance(b, mt.TextContent)]
    parts: list[str] = []
    if not texts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, default=str))
    for block in result.content:
        if isinstance(block, mt.TextContent):
            parts.append(block.text)
        elif isinstance(block, mt.ImageContent | mt.AudioContent):
            parts.append(f"[{block.type}: {block.mime_type}]")
        elif isinstance(block, mt.ResourceLink):
            parts.append(f"[resource link: {block.uri}]")
        elif isinstance(block.resource, mt.TextResourceContents):
            parts.append(f"[resource: {block.resource.uri}]\n{block.resource.text}")
        else:
            mime = block.resource.mime_type or "binary"
            parts.append(f"[resource: {block.resource.uri} ({mime})]")
    return "\n".join(parts)


class _Tail(asyncio.Protocol):
    """The last lines a stdio server wrote to stderr (each also logged at DEBUG)."""

    def __init__(self, server: str) -> None:
        self.server, self.partial = server, b""
        self.lines: deque[str] = deque(maxlen=8)
        self.done = asyncio.Event()

    def data_received(self, data: bytes) -> None:
        *lines, rest = (self.partial + data).split(b"\n")
        self.partial = rest[-4000:]
        for line in lines:
            self._add(line)

    def _add(self, raw: bytes) -> None:
        line = raw.decode("utf-8", "replace").rstrip()
        self.lines.append(line)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("mcp server %s: %s", self.server, redact(line))

    def eof_received(self) -> bool:
        if self.partial:
            self._add(self.partial)
            self.partial = b""
        self.done.set()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.done.set()

    async def text(self, wait: float = 0.5) -> str:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.done.wait(), wait)
        return redact("\n".join(self.lines))[-800:].strip()


class _Watched:
    """The session's read stream, marking its generation dead when the stream ends."""

    def __init__(self, inner: Any, gen: _Generation) -> None:
        self._inner, self._gen = inner, gen

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __aiter__(self) -> _Watched:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self._inner.__anext__()
        except (StopAsyncIteration, anyio.ClosedResourceError):
            self._gen.dead = True
            raise

    async def aclose(self) -> None:
        self._gen.dead = True
        await self._inner.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


@dataclass(eq=False)
class _Generation:
    """One run of a server: its owner task, session and state."""

    ready: asyncio.Future[list[mt.Tool]]
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    session: ClientSession | None = None
    tail: _Tail | None = None
    dead: bool = False


class MCPConnection:
    """One server's session. A task per generation owns the transport and the session
    (an :class:`~contextlib.AsyncExitStack`); calls only send requests through it."""

    def __init__(self, config: MCPServerConfig) -> None:
        self.config = config
        for values in (config.headers, config.env):
            for key, value in (values or {}).items():
                register_named(key, value)
        register_url(config.url)
        self.listed: list[mt.Tool] = []
        self._gen: _Generation | None = None
        self._tasks: dict[asyncio.Task[None], _Generation] = {}
        self._restarts: deque[float] = deque()
        self._closed = False

    async def start(self) -> list[mt.Tool]:
        """Start the server, initialize the session and list its tools (every page)."""
        gen = self._gen
        if gen is None or gen.dead:
            gen = self._spawn(restart=gen is not None)
        self.listed = await self._ready(gen)
        return self.listed

    async def call(self, tool: str, arguments: dict[str, Any]) -> str:
        """Call one tool; its text for the model, or a ToolError."""
        gen = await self._live()
        assert gen.session is not None
        name = self.config.name
        try:
            result = await gen.session.call_tool(tool, arguments)
        except MCPError as exc:
            if exc.code != mt.CONNECTION_CLOSED and not gen.dead:
                raise ToolError(
                    redact(
                        f"MCP server {name!r} refused tool {tool!r}: {exc.message} ({exc.code})"
                    ),
                    code="mcp_error",
                ) from None
            self._retire(gen)
            if self._closed:
                raise ToolError(f"MCP server {name!r} was closed", code="mcp_closed") from None
            stderr = await gen.tail.text() if gen.tail is not None else ""
            raise MCPServerCrashed(
                redact(
                    f"MCP server {name!r} ({self.config.target}) stopped during the call of "
                    f"tool {tool!r} ({exc.message}); it is restarted on the next call"
                    + (f". Its stderr ended with: {stderr}" if stderr else "")
                )
            ) from None
        except (RuntimeError, ValueError) as exc:  # an answer the SDK would not accept
            raise ToolError(
                redact(f"MCP server {name!r} gave tool {tool!r} an unusable result: {exc}"),
                code="mcp_bad_result",
            ) from None
        if not isinstance(result, mt.CallToolResult):
            raise ToolError(f"MCP server {name!r}: unexpected result", code="mcp_bad_result")
        if result.is_error:
            text = result_text(result) or "the tool reported an error"
            raise ToolError(redact(text), code="mcp_tool_error")
        return result_text(result)

    async def aclose(self) -> None:
        """Stop the server (the SDK closes its stdin, then terminates its process group)."""
        self._closed = True
        for gen in self._tasks.values():
            gen.stop.set()
        tasks = list(self._tasks)
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=_CLOSE_WAIT)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=5.0)

    # -- generations --------------------------------------------------------------------
    async def _live(self) -> _Generation:
        if self._closed:
            raise ToolError(f"MCP server {self.config.name!r} was closed", code="mcp_closed")
        gen = self._gen
        if gen is None or gen.dead:
            self._retire(gen)
            gen = self._spawn(restart=gen is not None)
        await self._ready(gen)
        return gen

    def _spawn(self, *, restart: bool) -> _Generation:
        cfg, now = self.config, time.monotonic()
        if restart:
            while self._restarts and now - self._restarts[0] > cfg.restart_window_seconds:
                self._restarts.popleft()
            if len(self._restarts) >= cfg.max_restarts:
                raise ToolError(
                    f"MCP server {cfg.name!r} ({cfg.target}) stopped again after "
                    f"{len(self._restarts)} restart(s) within {cfg.restart_window_seconds:g} s "
                    f"(max_restarts {cfg.max_restarts}); it is not restarted until that passes",
                    code="mcp_server_unavailable",
                )
            self._restarts.append(now)
        ready: asyncio.Future[list[mt.Tool]] = asyncio.get_running_loop().create_future()
        ready.add_done_callback(lambda f: f.cancelled() or f.exception())  # always retrieved
        gen = _Generation(ready)
        task = asyncio.create_task(self._own(gen), name=f"oarlock-mcp-{cfg.name}")
        self._tasks[task] = gen
        task.add_done_callback(self._tasks.pop)
        self._gen = gen
        return gen

    async def _ready(self, gen: _Generation) -> list[mt.Tool]:
        try:
            return await asyncio.shield(gen.ready)  # a cancelled caller leaves the start be
        except _StartFailed as exc:
            cfg = self.config
            raise ToolError(
                redact(f"MCP server {cfg.name!r} ({cfg.target}) did not start: {exc}"),
                code="mcp_start_failed",
            ) from None

    def _retire(self, gen: _Generation | None) -> None:
        if gen is not None:
            gen.dead = True
            gen.stop.set()

    async def _own(self, gen: _Generation) -> None:
        """The generation's whole life, in one task: anyio wants its scopes left where
        they were entered."""
        try:
            async with AsyncExitStack() as stack:
                read, write = await self._transport(stack, gen)
                session = ClientSession(_Watched(read, gen), write, client_info=_CLIENT)
                await stack.enter_async_context(session)
                with anyio.fail_after(self.config.start_timeout_seconds):
                    await session.initialize()
                    listed = await _list_tools(session)
                gen.session = session
                gen.ready.set_result(listed)
                await gen.stop.wait()
        except BaseException as exc:
            gen.dead = True
            if not gen.ready.done():
                if isinstance(_innermost(exc), TimeoutError):
                    exc = TimeoutError(
                        f"no answer to initialize within {self.config.start_timeout_seconds:g} s"
                    )
                stderr = await gen.tail.text(0.2) if gen.tail is not None else ""
                why = _describe(exc) + (f"; its stderr ended with: {stderr}" if stderr else "")
                gen.ready.set_exception(_StartFailed(why))
            elif not isinstance(exc, asyncio.CancelledError):
                log.info("mcp server %s: connection ended: %s", self.config.name, _describe(exc))
            if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt | SystemExit):
                raise
        finally:
            gen.dead = True

    async def _transport(self, stack: AsyncExitStack, gen: _Generation) -> tuple[Any, Any]:
        cfg = self.config
        if cfg.url is not None:
            timeout = httpx2.Timeout(30.0, read=300.0)
            client = httpx2.AsyncClient(headers=cfg.headers or {}, timeout=timeout)
            await stack.enter_async_context(client)
            return await stack.enter_async_context(
                streamable_http_client(cfg.url, http_client=client)
            )
        if cfg.command is None:
            raise ConfigError(f"mcp_servers.{cfg.name}: needs command or url")
        read_fd, write_fd = os.pipe()
        errlog = os.fdopen(write_fd, "w")
        tail = gen.tail = _Tail(cfg.name)
        try:
            pipe, _ = await asyncio.get_running_loop().connect_read_pipe(
                lambda: tail, os.fdopen(read_fd, "rb", buffering=0)
            )
        except BaseException:
            errlog.close()
            raise
        stack.push_async_callback(_close_pipe, pipe, tail)
        stack.callback(errlog.close)  # unwound first: the pipe then sees its end
        params = StdioServerParameters(
            command=_program(cfg.command[0]), args=cfg.command[1:], env=cfg.env, cwd=cfg.cwd
        )
        streams = await stack.enter_async_context(stdio_client(params, errlog=errlog))
        errlog.close()  # the server has its own copy
        return streams


def _program(name: str) -> str:
    """``python`` (or ``python3``) is the interpreter oarlock runs in, so that a server
    written in Python finds the same installed packages."""
    return sys.executable if name in ("python", "python3") else name


async def _close_pipe(pipe: asyncio.ReadTransport, tail: _Tail) -> None:
    await tail.text(0.5)  # let the last lines in
    pipe.close()


async def _list_tools(session: ClientSession) -> list[mt.Tool]:
    tools: list[mt.Tool] = []
    cursor: str | None = None
    seen: set[str] = set()
    while True:
        params = None if cursor is None else mt.PaginatedRequestParams(cursor=cursor)
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            return tools
        if cursor in seen:
            raise RuntimeError(f"tools/list repeated the cursor {cursor!r}")
        seen.add(cursor)


def _innermost(exc: BaseException) -> BaseException:
    """The first cause inside exception groups (anyio wraps transport failures in them)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _describe(exc: BaseException) -> str:
    """The cause, for a message."""
    exc = _innermost(exc)
    if isinstance(exc, MCPError):
        return exc.message
    return f"{type(exc).__name__}: {exc}"


def _build_tools(conn: MCPConnection) -> list[Tool]:
    cfg = conn.config
    listed = {t.name: t for t in conn.listed}
    for key in ("side_effects", "needs_approval"):
        for name in getattr(cfg, key):
            if name not in listed:
                have = ", ".join(listed) or "none"
                raise ConfigError(
                    f"mcp_servers.{cfg.name}.{key}.{name}: the server has no such tool "
                    f"(it has: {have})"
                )
    tools: list[Tool] = []
    for remote in conn.listed:
        name = f"{cfg.name}.{remote.name}"
        if not _TOOL_NAME.fullmatch(name):
            raise ConfigError(
                f"mcp_servers.{cfg.name}: tool {remote.name!r} makes the name {name!r}; "
                "a tool name is 1-64 letters, digits, _ . -"
            )
        schema = remote.input_schema
        try:
            kind = validators.validator_for(schema, default=Draft202012Validator)
            kind.check_schema(schema)
        except SchemaError as exc:
            raise ConfigError(
                f"mcp_servers.{cfg.name}: tool {remote.name!r} has an invalid input schema: "
                f"{exc.message}",
                code="mcp_bad_schema",
            ) from None

        tools.append(
            MCPTool(
                fn=_caller(conn, remote.name),
                name=name,
                description=remote.description or remote.title or "",
                side_effect=side_effect_for(cfg, remote),
                needs_approval=cfg.needs_approval.get(remote.name),
                timeout_seconds=cfg.timeout_seconds,
                schema_version=f"mcp:{digest(schema)[7:23]}",
                mcp_server_id=cfg.name,
                parameters=schema,
                remote_name=remote.name,
                validator=kind(schema),
            )
        )
    return tools


def _caller(conn: MCPConnection, remote: str) -> Callable[..., Awaitable[str]]:
    async def call(**arguments: Any) -> str:
        return await conn.call(remote, arguments)

    return call


class MCPTools:
    """Connected MCP servers and their tools; closing it stops every server."""

    def __init__(self, connections: Sequence[MCPConnection]) -> None:
        self.connections = {c.config.name: c for c in connections}
        self.tools: list[Tool] = []
        for conn in connections:
            self.tools.extend(_build_tools(conn))

    async def aclose(self) -> None:
        await asyncio.gather(*(c.aclose() for c in self.connections.values()))

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


async def connect_mcp(configs: Sequence[MCPServerConfig]) -> MCPTools:
    """Start every server (concurrently) and list its tools; if one fails, every one is
    stopped and its error raised (``mcp_start_failed``, or a ConfigError)."""
    names = [c.name for c in configs]
    for name in names:
        if names.count(name) > 1:
            raise ConfigError(f"mcp_servers: two servers are named {name!r}")
    connections = [MCPConnection(c) for c in configs]
    try:
        starts = (c.start() for c in connections)
        outcomes = await asyncio.gather(*starts, return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        return MCPTools(connections)
    except BaseException:
        await asyncio.gather(*(c.aclose() for c in connections))
        raise

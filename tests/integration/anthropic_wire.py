"""A fake Anthropic Messages API for tests: an HTTP server on 127.0.0.1 (a random port,
standard library only) that answers ``POST /v1/messages`` with scripted replies in the
wire format of the real API (JSON messages, error bodies, and server-sent events), and
records every request's body and headers so that a test can assert what was sent.

Replies are queued (``server.reply(...)``, ``server.stream(...)``, ``server.error(...)``,
or ``server.answer_with(make)``, a body made from the request when it comes) and used one
per request, in order; a request with none queued gets a 500 that names the
problem. The fixture builders (:func:`message`, :func:`text`, :func:`tool_use`,
:func:`usage`) make bodies shaped like the API's, and :func:`events` turns such a body
into the stream of events the API would send for it.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "claude-haiku-4-5"
_ids = itertools.count(1)


# -- fixtures shaped like the API's -------------------------------------------------------


def usage(
    input_tokens: int = 12,
    output_tokens: int = 6,
    *,
    cache_read: int = 0,
    cache_creation: int = 0,
) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "cache_creation_input_tokens": cache_creation,
        "cache_read_input_tokens": cache_read,
        "cache_creation": {
            "ephemeral_5m_input_tokens": cache_creation,
            "ephemeral_1h_input_tokens": 0,
        },
        "output_tokens": output_tokens,
        "service_tier": "standard",
    }


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool_use(name: str, input: Any, *, id: str | None = None) -> dict[str, Any]:
    return {
        "type": "tool_use",
        "id": id or f"toolu_{next(_ids):024d}",
        "name": name,
        "input": input,
    }


def message(
    *content: dict[str, Any],
    stop_reason: str | None = None,
    usage_: dict[str, Any] | None = None,
    model: str = MODEL,
) -> dict[str, Any]:
    """A Messages API response; the stop reason follows the content unless given."""
    if stop_reason is None:
        stop_reason = "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
    return {
        "id": f"msg_{next(_ids):024d}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": list(content),
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage_ or usage(),
    }


def error_body(kind: str, text: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": text}}


def _pieces(value: str, size: int) -> list[str]:
    return [value[i : i + size] for i in range(0, len(value), size)] or [""]


def events(
    body: dict[str, Any],
    *,
    text_size: int = 4,
    json_size: int = 7,
    partial_json: dict[str, list[str]] | None = None,
    stop: bool = True,
) -> list[tuple[str, dict[str, Any]]]:
    """The stream the API sends for ``body``: message_start (usage with the input counts
    and one output token), a ping, each block as start, deltas (text in pieces of
    ``text_size`` characters, tool input as JSON text in pieces of ``json_size``, or the
    pieces ``partial_json[tool_use_id]`` as given), stop; then message_delta (stop reason
    and the output count) and message_stop (left out when ``stop`` is False)."""
    start_usage = {**body["usage"], "output_tokens": 1}
    start = {**body, "content": [], "stop_reason": None, "stop_sequence": None}
    out: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": {**start, "usage": start_usage}}),
        ("ping", {"type": "ping"}),
    ]
    for index, block in enumerate(body["content"]):
        if block["type"] == "text":
            first, deltas = (
                {"type": "text", "text": ""},
                [{"type": "text_delta", "text": p} for p in _pieces(block["text"], text_size)],
            )
        else:
            raw = (partial_json or {}).get(block["id"])
            if raw is None:
                raw = _pieces(json.dumps(block["input"]), json_size)
            first = {**block, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in raw]
        out.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": first},
            )
        )
        for delta in deltas:
            out.append(
                (
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
            )
        out.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    out.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": body["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": body["usage"]["output_tokens"]},
            },
        )
    )
    if stop:
        out.append(("message_stop", {"type": "message_stop"}))
    return out


# -- the server ---------------------------------------------------------------------------


@dataclass
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    events: list[tuple[str, Any]] | None = None
    hang_after_events: bool = False
    hang: bool = False


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


class FakeAnthropic:
    """The fake API; use it as a context manager (``with FakeAnthropic() as server``)."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self._replies: deque[Reply | Callable[[Recorded], Any]] = deque()
        self._lock = threading.Lock()
        self._release = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> FakeAnthropic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    # -- scripting replies ----------------------------------------------------------------
    def _queue(self, reply: Reply) -> FakeAnthropic:
        with self._lock:
            self._replies.append(reply)
        return self

    def reply(
        self, body: Any, *, status: int = 200, headers: dict[str, str] | None = None
    ) -> FakeAnthropic:
        """A JSON reply."""
        data = json.dumps(body).encode()
        return self._queue(
            Reply(status, {"content-type": "application/json", **(headers or {})}, data)
        )

    def error(
        self, status: int, kind: str, text: str, *, headers: dict[str, str] | None = None
    ) -> FakeAnthropic:
        return self.reply(error_body(kind, text), status=status, headers=headers)

    def raw(
        self, body: bytes, *, status: int = 200, content_type: str = "application/json"
    ) -> FakeAnthropic:
        return self._queue(Reply(status, {"content-type": content_type}, body))

    def stream(
        self, stream_events: Iterable[tuple[str, Any]], *, hang_after: bool = False
    ) -> FakeAnthropic:
        """A ``text/event-stream`` reply; an event's data may be a value or raw text."""
        headers = {"content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache"}
        return self._queue(
            Reply(200, headers, events=list(stream_events), hang_after_events=hang_after)
        )

    def hang(self) -> FakeAnthropic:
        """Read the request, then never answer (until the server closes)."""
        return self._queue(Reply(hang=True))

    def answer_with(self, make: Callable[[Recorded], Any]) -> FakeAnthropic:
        """A JSON reply made from the request when it comes (``make`` gets the recorded
        request and returns the body)."""
        with self._lock:
            self._replies.append(make)
        return self

    def next_reply(self, request: Recorded) -> Reply | None:
        with self._lock:
            reply = self._replies.popleft() if self._replies else None
        if callable(reply):
            data = json.dumps(reply(request)).encode()
            return Reply(200, {"content-type": "application/json"}, data)
        return reply

    @property
    def bodies(self) -> list[Any]:
        return [r.body for r in self.requests]


def _handler(server: FakeAnthropic) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length)
            try:
                body: Any = json.loads(raw)
            except ValueError:
                body = raw.decode("utf-8", "replace")
            headers = {k.lower(): v for k, v in self.headers.items()}
            recorded = Recorded("POST", self.path, headers, body)
            with server._lock:
                server.requests.append(recorded)
            if self.path != "/v1/messages":
                self._json(404, error_body("not_found_error", f"Not found: {self.path}"))
                return
            reply = server.next_reply(recorded)
            if reply is None:
                self._json(500, error_body("api_error", "the fake server has no reply queued"))
                return
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self._send(reply)

        def _json(self, status: int, value: Any) -> None:
            self._send(
                Reply(status, {"content-type": "application/json"}, json.dumps(value).encode())
            )

        def _send(self, reply: Reply) -> None:
            if reply.hang:
                server._release.wait(30)
                self.close_connection = True
                return
            self.send_response(reply.status)
            self.send_header("request-id", f"req_{next(_ids):024d}")
            for name, value in reply.headers.items():
                self.send_header(name, value)
            if reply.events is None:
                self.send_header("content-length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)
                return
            self.send_header("connection", "close")
            self.end_headers()
            self.close_connection = True
            for name, data in reply.events:
                payload = data if isinstance(data, str) else json.dumps(data)
                self.wfile.write(f"event: {name}\ndata: {payload}\n\n".encode())
                self.wfile.flush()
            if reply.hang_after_events:
                server._release.wait(30)

    return Handler

"""A fake OpenAI server for the adapter tests: standard library only, on 127.0.0.1 (a free
port), in a background thread. It speaks the wire format of ``POST /v1/chat/completions``
and ``POST /v1/responses``: JSON bodies, and server-sent events in chunked transfer
encoding (``data: {...}`` ending with ``data: [DONE]`` for chat; ``event:`` and ``data:``
lines for the Responses API, which sends no ``[DONE]``).

Tests queue replies (:class:`Reply`, or a function of the request that makes one); the
server answers each request with the next, and records every request (path, headers,
JSON body) so that a test can check what the adapter sent.

The fixture builders below make bodies shaped like OpenAI's real ones (the same members,
the same nesting, ids in the same styles) from a few parameters.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "gpt-4.1-2025-04-14"
FINGERPRINT = "fp_b42372b3cd"
CREATED = 1741569952
PATHS = ("/v1/chat/completions", "/v1/responses")


@dataclass
class Reply:
    """One answer. ``body`` is JSON (any JSON value) or raw ``bytes``/``str`` sent as is;
    ``events`` makes it a stream instead: each a data object (or raw text), or an
    ``(event name, data)`` pair. ``delay`` holds the answer back that many seconds (the
    server lets go of held answers when it stops); ``drop`` closes the connection after
    the events, without the end of the chunked body. ``hold_after`` pauses a stream after
    that many events until ``hold`` is set (or ``hold_timeout`` passes, or the server
    stops); whether ``hold`` was set is recorded in the server's ``holds``."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    events: list[Any] | None = None
    delay: float = 0.0
    content_type: str | None = None
    drop: bool = False
    hold_after: int | None = None
    hold: threading.Event | None = None
    hold_timeout: float = 30.0


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    raw: bytes

    @property
    def body(self) -> Any:
        return json.loads(self.raw) if self.raw else None


ReplyMaker = Reply | Callable[[Recorded], Reply]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    timeout = 10  # an idle kept-alive connection's thread ends after this

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        recorded = Recorded("POST", self.path, headers, raw)
        if self.path not in PATHS:
            self._json(404, error_body(f"Invalid URL (POST {self.path})", "invalid_request_error"))
            return
        fake = self.server.fake
        with fake.lock:
            fake.requests.append(recorded)
            maker = fake.replies.popleft() if fake.replies else None
        if maker is None:
            self._json(500, error_body("the fake server has no reply queued", "server_error"))
            return
        reply = maker(recorded) if callable(maker) else maker
        try:
            if reply.delay:
                fake.wait(None, reply.delay)
            if reply.events is not None:
                self._stream(reply)
            else:
                self._send(reply)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up waiting
            self.close_connection = True

    def _json(self, status: int, body: Any) -> None:
        self._send(Reply(status=status, body=body))

    def _send(self, reply: Reply) -> None:
        if isinstance(reply.body, bytes | str):
            data = reply.body.encode() if isinstance(reply.body, str) else reply.body
            content_type = reply.content_type or "application/json"
        else:
            data = json.dumps(reply.body).encode()
            content_type = reply.content_type or "application/json"
        self.send_response(reply.status)
        self._common_headers(content_type, reply.headers)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _stream(self, reply: Reply) -> None:
        self.send_response(reply.status)
        self._common_headers(
            reply.content_type or "text/event-stream; charset=utf-8", reply.headers
        )
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        for i, event in enumerate(reply.events or []):
            if i == reply.hold_after:
                fake = self.server.fake
                fake.holds.append(fake.wait(reply.hold, reply.hold_timeout))
            self._chunk(sse(event))
        if reply.drop:
            self.close_connection = True
            return
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _common_headers(self, content_type: str, extra: dict[str, str]) -> None:
        self.send_header("Content-Type", content_type)
        self.send_header("x-request-id", f"req_{self.server.fake.counter()}")
        self.send_header("openai-processing-ms", "321")
        for name, value in extra.items():
            self.send_header(name, value)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeOpenAI


class FakeOpenAI:
    """``with FakeOpenAI() as server:`` serves at ``server.base_url`` until the block ends."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.holds: list[bool] = []
        self.replies: deque[ReplyMaker] = deque()
        self.lock = threading.Lock()
        self.released = threading.Event()
        self._count = 0
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def wait(self, event: threading.Event | None, timeout: float) -> bool:
        """Wait until ``event`` is set (True), or the time is up or the server stops."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self.released.is_set():
            if event is not None and event.wait(0.02):
                return True
            if event is None:
                self.released.wait(0.02)
        return event is not None and event.is_set()

    def counter(self) -> int:
        with self.lock:
            self._count += 1
            return self._count

    def start(self) -> FakeOpenAI:
        server = _Server(("127.0.0.1", 0), _Handler)
        server.fake = self
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self.released.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def reply(self, *replies: ReplyMaker) -> FakeOpenAI:
        with self.lock:
            self.replies.extend(replies)
        return self

    def bodies(self) -> list[Any]:
        return [r.body for r in self.requests]

    @property
    def last(self) -> Recorded:
        return self.requests[-1]


def sse(event: Any) -> bytes:
    if isinstance(event, tuple):
        name, data = event
        text = data if isinstance(data, str) else json.dumps(data)
        return f"event: {name}\ndata: {text}\n\n".encode()
    text = event if isinstance(event, str) else json.dumps(event)
    return f"data: {text}\n\n".encode()


# -- errors ---------------------------------------------------------------------------------
def error_body(
    message: str, type: str, code: str | None = None, param: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def error_reply(
    status: int,
    message: str,
    type: str,
    code: str | None = None,
    *,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> Reply:
    return Reply(status=status, body=error_body(message, type, code, param), headers=headers or {})


RATE_LIMIT_HEADERS = {
    "x-ratelimit-limit-requests": "500",
    "x-ratelimit-limit-tokens": "30000",
    "x-ratelimit-remaining-requests": "499",
    "x-ratelimit-remaining-tokens": "0",
    "x-ratelimit-reset-requests": "120ms",
    "x-ratelimit-reset-tokens": "7s",
}


def rate_limited(**headers: str) -> Reply:
    return error_reply(
        429,
        "Rate limit reached for gpt-4.1 in organization org-fake on tokens per min (TPM): "
        "Limit 30000, Used 29876, Requested 1234. Please try again in 7s. Visit "
        "https://platform.openai.com/account/rate-limits to learn more.",
        "tokens",
        "rate_limit_exceeded",
        headers={**RATE_LIMIT_HEADERS, **{k.replace("_", "-"): v for k, v in headers.items()}},
    )


# -- Chat Completions -----------------------------------------------------------------------
Call = tuple[str, str, str]
"""A tool call: id, function name, arguments text."""


def _chat_usage(prompt: int, completion: int, cached: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def chat_completion(
    content: str | None = None,
    calls: list[Call] | None = None,
    *,
    usage: tuple[int, int, int] = (19, 10, 0),
    finish_reason: str | None = None,
    refusal: str | None = None,
) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": content,
        "refusal": refusal,
        "annotations": [],
    }
    if calls:
        message["tool_calls"] = [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
            for cid, name, args in calls
        ]
    return {
        "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
        "object": "chat.completion",
        "created": CREATED,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason or ("tool_calls" if calls else "stop"),
            }
        ],
        "usage": _chat_usage(*usage),
        "service_tier": "default",
        "system_fingerprint": FINGERPRINT,
    }


def _chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": MODEL,
        "service_tier": "default",
        "system_fingerprint": FINGERPRINT,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
        "usage": None,
    }


def chat_chunks(
    pieces: list[str] | None = None,
    calls: list[tuple[str, str, list[str]]] | None = None,
    *,
    usage: tuple[int, int, int] = (19, 10, 0),
    interleave: bool = False,
    done: bool = True,
) -> list[Any]:
    """The events of a streamed chat completion: a role chunk, the text pieces, each call
    (its id and name first, then its argument pieces; ``interleave`` sends the calls'
    pieces in turns, as some servers do), the finishing chunk, the usage chunk (empty
    choices) and ``[DONE]``."""
    events: list[Any] = [_chunk({"role": "assistant", "content": "", "refusal": None})]
    events += [_chunk({"content": p}) for p in pieces or []]
    heads = [
        _chunk(
            {
                "tool_calls": [
                    {
                        "index": i,
                        "id": cid,
                        "type": "function",
                        "function": {"name": name, "arguments": ""},
                    }
                ]
            }
        )
        for i, (cid, name, _) in enumerate(calls or [])
    ]
    bodies = [
        [_chunk({"tool_calls": [{"index": i, "function": {"arguments": a}}]}) for a in arg_pieces]
        for i, (_, _, arg_pieces) in enumerate(calls or [])
    ]
    if interleave:
        events += heads
        longest = max((len(b) for b in bodies), default=0)
        for step in range(longest):
            events += [b[step] for b in bodies if step < len(b)]
    else:
        for head, body in zip(heads, bodies, strict=True):
            events += [head, *body]
    if not done:
        return events
    events.append(_chunk({}, "tool_calls" if calls else "stop"))
    final = _chunk({})
    final["choices"] = []
    final["usage"] = _chat_usage(*usage)
    events += [final, "[DONE]"]
    return events


# -- Responses ------------------------------------------------------------------------------
def _responses_usage(inp: int, out: int, cached: int) -> dict[str, Any]:
    return {
        "input_tokens": inp,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": inp + out,
    }


def _message_item(text: str, status: str = "completed") -> dict[str, Any]:
    return {
        "id": "msg_67ccd3acc8d48190a77525dc6de64b4104becd9c1db8fba3",
        "type": "message",
        "status": status,
        "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": text}]
        if status != "in_progress"
        else [],
        "role": "assistant",
    }


def _call_item(index: int, call: Call, status: str = "completed") -> dict[str, Any]:
    cid, name, args = call
    return {
        "id": f"fc_67ca09c6bedc8190a7abfec07b1a1332096610f474011cc{index}",
        "type": "function_call",
        "status": status,
        "arguments": args if status == "completed" else "",
        "call_id": cid,
        "name": name,
    }


def response_object(
    text: str | None = None,
    calls: list[Call] | None = None,
    *,
    usage: tuple[int, int, int] | None = (36, 87, 0),
    status: str = "completed",
    tools: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    output: list[dict[str, Any]] = []
    if text is not None:
        output.append(_message_item(text, "completed" if status == "completed" else status))
    output += [_call_item(i, c) for i, c in enumerate(calls or [])]
    return {
        "id": "resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b",
        "object": "response",
        "created_at": 1741476542,
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "max_output_tokens": None,
        "max_tool_calls": None,
        "model": MODEL,
        "output": output,
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "prompt_cache_key": None,
        "reasoning": {"effort": None, "summary": None},
        "safety_identifier": None,
        "service_tier": "default",
        "store": False,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": "auto",
        "tools": tools or [],
        "top_logprobs": 0,
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": _responses_usage(*usage) if usage else None,
        "user": None,
        "metadata": {},
    }


def response_events(
    pieces: list[str] | None = None,
    calls: list[tuple[str, str, list[str]]] | None = None,
    *,
    usage: tuple[int, int, int] = (36, 87, 0),
    complete: bool = True,
) -> list[Any]:
    """The events of a streamed response, each ``(event name, data)``, with sequence
    numbers: created, in_progress, the message (item added, content part added, text
    deltas, text done, part done, item done), each function call (item added, argument
    deltas, arguments done, item done), and response.completed with the whole response."""
    seq = iter(range(10_000))
    events: list[Any] = []

    def emit(kind: str, **data: Any) -> None:
        events.append((kind, {"type": kind, "sequence_number": next(seq), **data}))

    whole_calls = [(cid, name, "".join(parts)) for cid, name, parts in calls or []]
    text = "".join(pieces) if pieces else None
    start = response_object(usage=None, status="in_progress")
    emit("response.created", response=start)
    emit("response.in_progress", response=start)
    index = 0
    if pieces:
        item = _message_item("", "in_progress")
        emit("response.output_item.added", output_index=0, item=item)
        part = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
        emit(
            "response.content_part.added",
            item_id=item["id"],
            output_index=0,
            content_index=0,
            part=part,
        )
        for p in pieces:
            emit(
                "response.output_text.delta",
                item_id=item["id"],
                output_index=0,
                content_index=0,
                delta=p,
                logprobs=[],
            )
        emit(
            "response.output_text.done",
            item_id=item["id"],
            output_index=0,
            content_index=0,
            text=text,
            logprobs=[],
        )
        emit(
            "response.content_part.done",
            item_id=item["id"],
            output_index=0,
            content_index=0,
            part={**part, "text": text},
        )
        emit("response.output_item.done", output_index=0, item=_message_item(text or ""))
        index = 1
    for i, (call, (_, _, parts)) in enumerate(zip(whole_calls, calls or [], strict=True)):
        added = _call_item(i, call, "in_progress")
        emit("response.output_item.added", output_index=index, item=added)
        for p in parts:
            emit(
                "response.function_call_arguments.delta",
                item_id=added["id"],
                output_index=index,
                delta=p,
            )
        emit(
            "response.function_call_arguments.done",
            item_id=added["id"],
            output_index=index,
            arguments=call[2],
        )
        emit("response.output_item.done", output_index=index, item=_call_item(i, call))
        index += 1
    if complete:
        emit(
            "response.completed",
            response=response_object(text, whole_calls, usage=usage),
        )
    return events

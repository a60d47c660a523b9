"""OpenAI models: the Chat Completions and Responses APIs, on OpenAI or on any server that
speaks them (vLLM, Ollama, LM Studio, OpenRouter), through the official ``openai`` SDK.

The SDK is imported when a model first answers, never when this module is imported; the
client is made then too, with the SDK's own retries off (the runner retries), and made
again if a later request runs on another event loop (a client's connections belong to the
loop that opened them).

How the conversation is sent (Chat Completions; the Responses API has the same choices in
its own shapes):

* The agent's instructions go first, as a ``system`` message (left out when empty).
  ``developer`` is what OpenAI's newer models call it, but OpenAI still takes ``system``
  (and treats it as ``developer`` for those models), while many OpenAI-compatible servers
  and chat templates know only ``system``. The Responses API has its ``instructions``.
* A user message's tool results become one ``tool`` message each, in order, with their
  ``tool_call_id``; its text (if any) follows, as one ``user`` message. Tool messages must
  come straight after the assistant message that made the calls, so they go first.
* A failed tool result (``isError``) is sent as ``Error: <content>``: neither API has a
  field for failure, and a model reads the prefix reliably.
* An assistant message's text parts are joined into ``content`` (null when it has only
  tool calls, else at least ``""``, which servers require), its
  tool calls become ``tool_calls`` with the arguments as compact JSON. A call whose
  arguments could not be read (``rawArguments``) is sent with the arguments it was stored
  with, ``{}``: servers that parse the arguments of past calls (vLLM's chat templates do)
  would refuse the raw text, and the error result that answers the call tells the model
  what went wrong.
* ``max_output_tokens`` is ``max_completion_tokens`` on OpenAI and ``max_tokens`` (which
  more servers know) on OpenAI-compatible servers; ``max_output_tokens`` in the Responses
  API. Responses requests are sent with ``store: false``: the run document holds the
  conversation, and nothing refers to a stored response.

What comes back: the text (a refusal counts as text) as one text part, then the tool calls
in order with their ids (a missing id gets a fresh one). Arguments that are not a JSON
object make a call with ``arguments: {}`` and the text in ``rawArguments``; empty
arguments (``""``) are read as ``{}``, a call with no arguments. Other output (reasoning
items, built-in tool calls) is not kept.

Tool names: a tool whose name providers refuse (``server.tool``: only
``A-Za-z0-9_-``, at most 64 characters) is sent under a safe name and its calls come back
under the real one (:mod:`oarlock.models._names`).

Streaming (when the request has ``on_text``): the server-sent events are read from the
body as it arrives (:mod:`oarlock.models._sse`); each text delta goes to ``on_text`` at
once; tool calls are put together from their deltas (by index in Chat Completions, by
output item in the Responses API, where the final ``response.completed`` has the last word
when it carries the output). A chat stream is complete at its ``finish_reason`` or at
``data: [DONE]`` (some servers, Snowflake Cortex among them, send no finish reason); one
that ends before either, or a Responses stream that ends before its final response, is
retryable (``stream_interrupted``). An error sent inside a stream (``{"error": {...}}``,
with a code that may be an HTTP status, as OpenRouter sends it, or an ``error`` event) is
classified like an HTTP error. A server that answers a stream request with plain JSON is
read as such, its text given to ``on_text`` at once.

Errors: 429, 408, 5xx, timeouts and lost connections raise
:class:`~oarlock.errors.RetryableModelError` (a 429 with the provider's ``retry-after-ms``
or ``retry-after``, in seconds or as an HTTP date); 429 ``insufficient_quota`` does not
pass by waiting and is a plain ``ModelError``. 401/403 are ``auth_failed``, 404
``model_not_found``, a 400 about the context window ``context_too_long``, another 400 or
422 ``bad_request``, and a body that is not a response ``bad_response``. Every message is
redacted (:func:`oarlock._secrets.redact`): a proxy may echo the key it was sent. The key,
and the password of a base URL, are registered as secrets when the model is made; the
model string never holds that password (``http://user@host/v1``).
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import importlib.util
import json
import math
import os
import time
from collections.abc import AsyncGenerator, Callable
from typing import TYPE_CHECKING, Any, Literal, TypeVar
from urllib.parse import urlsplit, urlunsplit

from oarlock._secrets import redact, register_secret, register_url
from oarlock.errors import ConfigError, ModelError, RetryableModelError
from oarlock.models import _sse
from oarlock.models._base import ModelRequest, ModelResponse, redacted
from oarlock.models._names import ToolNames
from oarlock.models._openai_wire import (
    _CONTEXT,
    _ChatStream,
    _ResponsesStream,
    chat_messages,
    chat_tools,
    error_from_event,
    parse_chat_completion,
    parse_response,
    responses_input,
    responses_tools,
    stream_error,
)

if TYPE_CHECKING:
    from types import ModuleType

    import openai

__all__ = ["OpenAIModel"]

T = TypeVar("T")
Api = Literal["chat", "responses"]
Provider = Literal["openai", "openai-compatible"]

_INSTALL = "pip install 'oarlock[openai]'"
_NO_KEY = "not-needed"
_RETRYABLE_STATUS = frozenset({408, 500, 502, 503, 504})


class OpenAIModel:
    """An OpenAI model (``openai:MODEL``) or a model on an OpenAI-compatible server
    (``openai-compatible:MODEL@BASE_URL``), over Chat Completions (``api="chat"``) or the
    Responses API (``api="responses"``).

    The key is ``api_key``, else ``OPENAI_API_KEY``; an OpenAI-compatible server's key is
    optional: ``api_key``, else ``OPENAI_COMPATIBLE_API_KEY``, else a placeholder (local
    servers ignore it). ``timeout`` (seconds) bounds each request, and each wait between two
    pieces of a streamed answer."""

    def __init__(
        self,
        model: str,
        *,
        api: Api = "chat",
        base_url: str | None = None,
        api_key: str | None = None,
        provider: Provider = "openai",
        timeout: float = 120.0,
        max_output_tokens: int | None = None,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise ConfigError("an OpenAI model needs a model name")
        if api not in ("chat", "responses"):
            raise ConfigError(f"api must be 'chat' or 'responses', not {api!r}")
        if provider not in ("openai", "openai-compatible"):
            raise ConfigError(f"provider must be 'openai' or 'openai-compatible', not {provider!r}")
        if provider == "openai-compatible" and not base_url:
            raise ConfigError("an OpenAI-compatible model needs a base_url")
        if base_url is not None and not (
            isinstance(base_url, str) and base_url.startswith(("http://", "https://"))
        ):
            raise ConfigError(f"base_url must be an http(s) URL, not {redact(repr(base_url))}")
        if api_key is not None and (not isinstance(api_key, str) or not api_key):
            raise ConfigError("api_key must be a non-empty string")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise ConfigError(f"timeout must be a number of seconds above 0, not {timeout!r}")
        if max_output_tokens is not None and (
            isinstance(max_output_tokens, bool)
            or not isinstance(max_output_tokens, int)
            or max_output_tokens < 1
        ):
            raise ConfigError(
                f"max_output_tokens must be a whole number of at least 1, not {max_output_tokens!r}"
            )
        if importlib.util.find_spec("openai") is None:
            raise ConfigError(
                f"the OpenAI models need the openai package: {_INSTALL}", code="missing_extra"
            )
        self.model, self.api, self.provider = model, api, provider
        self.base_url, self.timeout, self.max_output_tokens = (
            base_url,
            float(timeout),
            max_output_tokens,
        )
        self._api_key = api_key
        register_secret(api_key)
        register_url(base_url)
        self._client: openai.AsyncOpenAI | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def native_output(self) -> bool:
        """OpenAI asks for a typed answer with a JSON schema response format; servers that
        are only compatible get the final-answer tool (not all of them have the format)."""
        return self.provider == "openai"

    @property
    def model_id(self) -> str:
        if self.provider == "openai-compatible":
            return f"openai-compatible:{self.model}@{without_password(str(self.base_url))}"
        return f"openai:{self.model}"

    @property
    def key_variable(self) -> str:
        """The environment variable the key is read from."""
        return (
            "OPENAI_COMPATIBLE_API_KEY"
            if self.provider == "openai-compatible"
            else "OPENAI_API_KEY"
        )

    def __repr__(self) -> str:
        return f"OpenAIModel({self.model_id!r}, api={self.api!r})"

    async def respond(self, request: ModelRequest) -> ModelResponse:
        names, request = ToolNames.for_request(request)
        try:
            client = self._ensure_client()
            if self.api == "responses":
                response = await self._respond_responses(client, request)
            else:
                response = await self._respond_chat(client, request)
        except ModelError as exc:
            error = redacted(exc)
            raise error from error.__cause__
        return names.restore(response)

    async def aclose(self) -> None:
        """Close the client's connections (a later request opens new ones)."""
        client, self._client, self._loop = self._client, None, None
        if client is not None:
            await client.close()

    # -- the client -----------------------------------------------------------------------
    def _ensure_client(self) -> openai.AsyncOpenAI:
        loop = asyncio.get_running_loop()
        if self._client is not None and self._loop is loop:
            return self._client
        old, old_loop = self._client, self._loop
        if old is not None and old_loop is not None and old_loop.is_running():
            # made on a loop that still runs (in another thread): close it there
            with contextlib.suppress(RuntimeError):
                asyncio.run_coroutine_threadsafe(old.close(), old_loop)
        self._client = self._loop = None
        sdk = _sdk()
        key = self._api_key or os.environ.get(self.key_variable)
        register_secret(key)
        if self.base_url is None:  # the SDK reads it from there
            register_url(os.environ.get("OPENAI_BASE_URL"))
        headers: dict[str, Any] | None = None
        if self.provider == "openai-compatible":
            key = key or _NO_KEY
            # The SDK adds OpenAI's organization and project (from OPENAI_ORG_ID and
            # OPENAI_PROJECT_ID) to every request: they are not another server's business.
            headers = {"OpenAI-Organization": sdk.Omit(), "OpenAI-Project": sdk.Omit()}
        if not key:
            raise ModelError(
                f"no OpenAI API key: set {self.key_variable} or pass api_key", code="auth_failed"
            )
        try:
            self._client = sdk.AsyncOpenAI(
                api_key=key,
                base_url=self.base_url,
                max_retries=0,
                timeout=self.timeout,
                default_headers=headers,
            )
        except sdk.OpenAIError as exc:
            raise ModelError(f"cannot make the OpenAI client: {exc}", code="config") from exc
        self._loop = loop
        return self._client

    def _where(self) -> str:
        if self._client is not None:
            return str(self._client.base_url)
        return self.base_url or "https://api.openai.com/v1"

    # -- Chat Completions -----------------------------------------------------------------
    async def _respond_chat(
        self, client: openai.AsyncOpenAI, request: ModelRequest
    ) -> ModelResponse:
        params: dict[str, Any] = {
            "model": self.model,
            "messages": chat_messages(request.instructions, request.messages),
        }
        if request.tools:
            params["tools"] = chat_tools(request.tools)
        if request.output_tool is not None:  # the answer as JSON of the output's schema
            final = request.output_tool
            params["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": final["name"], "schema": final["parameters"]},
            }
        if self.max_output_tokens is not None:
            name = "max_completion_tokens" if self.provider == "openai" else "max_tokens"
            params[name] = self.max_output_tokens
        return await self._complete(
            client.chat.completions.create,
            params,
            request,
            parse_chat_completion,
            _ChatStream,
            stream_options={"include_usage": True},
        )

    # -- Responses ------------------------------------------------------------------------
    async def _respond_responses(
        self, client: openai.AsyncOpenAI, request: ModelRequest
    ) -> ModelResponse:
        params: dict[str, Any] = {
            "model": self.model,
            "input": responses_input(request.messages),
            "store": False,
        }
        if request.instructions:
            params["instructions"] = request.instructions
        if request.tools:
            params["tools"] = responses_tools(request.tools)
        if request.output_tool is not None:
            final = request.output_tool
            params["text"] = {
                "format": {
                    "type": "json_schema",
                    "name": final["name"],
                    "schema": final["parameters"],
                }
            }
        if self.max_output_tokens is not None:
            params["max_output_tokens"] = self.max_output_tokens
        return await self._complete(
            client.responses.create, params, request, parse_response, _ResponsesStream
        )

    async def _complete(
        self,
        create: Callable[..., Any],
        params: dict[str, Any],
        request: ModelRequest,
        parse: Callable[[Any], ModelResponse],
        accumulator: type[_ChatStream | _ResponsesStream],
        **stream_params: Any,
    ) -> ModelResponse:
        """One request: whole, or streamed to ``request.on_text`` and assembled."""
        on_text = request.on_text
        if on_text is None:
            return self._parse(parse, await self._call(create, **params))
        stream = await self._call(create, **params, stream=True, **stream_params)
        whole = await self._unstreamed(stream, parse, request)
        if whole is not None:
            return whole
        acc = accumulator()
        try:
            async with contextlib.aclosing(self._events(stream.response)) as events:
                async for event in events:
                    if event.data.strip() == "[DONE]":
                        acc.done = True
                        await _drain(events)
                        break
                    data = self._parse(json.loads, event.data)
                    if isinstance(data, dict) and event.name and "type" not in data:
                        data["type"] = event.name
                    error = stream_error(data)
                    if error is not None:
                        raise error_from_event(self.model_id, *error)
                    text = self._parse(acc.feed, data)
                    if text:
                        on_text(text)
        finally:
            with contextlib.suppress(Exception):
                await stream.close()
        return self._parse(accumulator.result, acc)

    # -- calling the SDK ------------------------------------------------------------------
    async def _call(self, create: Callable[..., Any], **params: Any) -> Any:
        try:
            return await create(**params)
        except Exception as exc:
            raise self._translate(exc) from exc

    async def _unstreamed(
        self, stream: Any, parse: Callable[[Any], ModelResponse], request: ModelRequest
    ) -> ModelResponse | None:
        """The answer, when a server asked to stream sent it whole (as JSON) instead; its
        text goes to ``on_text`` in one piece. None when it streams."""
        response = getattr(stream, "response", None)
        content_type = str(response.headers.get("content-type", "")) if response else ""
        if response is None or "json" not in content_type:
            return None
        try:
            body = await response.aread()
        except Exception as exc:
            raise self._translate(exc) from exc
        finally:
            with contextlib.suppress(Exception):
                await stream.close()
        result = self._parse(lambda raw: parse(json.loads(raw)), body)
        if result.message.text and request.on_text is not None:
            request.on_text(result.message.text)
        return result

    async def _events(self, response: Any) -> AsyncGenerator[_sse.Event, None]:
        """The server-sent events of a streamed body, the transport's errors made ours."""
        async with (
            contextlib.aclosing(self._chunks(response)) as chunks,
            contextlib.aclosing(_sse.lines(chunks)) as lines,
            contextlib.aclosing(_sse.events(lines)) as events,
        ):
            async for event in events:
                yield event

    async def _chunks(self, response: Any) -> AsyncGenerator[bytes, None]:
        iterator = response.aiter_bytes().__aiter__()
        while True:
            try:
                chunk = await iterator.__anext__()
            except StopAsyncIteration:
                return
            except Exception as exc:
                raise self._translate(exc) from exc
            yield chunk

    def _parse(self, parse: Callable[[Any], T], value: Any) -> T:
        try:
            return parse(value)
        except ModelError:
            raise
        except (AttributeError, TypeError, ValueError, KeyError, IndexError) as exc:
            raise ModelError(
                f"{self.model_id} sent a response that could not be read: "
                f"{type(exc).__name__}: {exc}",
                code="bad_response",
            ) from exc

    def _translate(self, exc: Exception) -> ModelError:
        """An exception from the SDK (or from decoding what it received) as a ModelError."""
        sdk = _sdk()
        name = self.model_id
        if isinstance(exc, ModelError):
            return exc
        if isinstance(exc, sdk.APITimeoutError):
            return RetryableModelError(
                f"{name}: no answer within {self.timeout:g} s", code="timeout"
            )
        if isinstance(exc, sdk.APIConnectionError):
            cause = exc.__cause__ or exc.__context__
            detail = f" ({type(cause).__name__}: {cause})" if cause else ""
            return RetryableModelError(
                f"{name}: cannot reach {self._where()}{detail}", code="connection_error"
            )
        if isinstance(exc, sdk.APIResponseValidationError):
            return ModelError(f"{name}: {exc.message}", code="bad_response")
        if isinstance(exc, sdk.APIStatusError):
            return self._status_error(exc)
        if isinstance(exc, sdk.APIError):  # an error event in a stream
            return error_from_event(name, exc.code, exc.type, exc.message)
        transport = _httpx()
        if transport is not None and isinstance(exc, transport.TimeoutException):
            return RetryableModelError(
                f"{name}: no answer within {self.timeout:g} s", code="timeout"
            )
        if transport is not None and isinstance(
            exc, transport.TransportError | transport.StreamError
        ):
            return RetryableModelError(
                f"{name}: the connection to {self._where()} broke off "
                f"({type(exc).__name__}: {exc})",
                code="connection_error",
            )
        if isinstance(exc, ValueError | TypeError | KeyError | AttributeError):
            return ModelError(
                f"{name} sent a response that could not be read: {type(exc).__name__}: {exc}",
                code="bad_response",
            )
        return ModelError(f"{name}: {type(exc).__name__}: {exc}", code="provider_error")

    def _status_error(self, exc: openai.APIStatusError) -> ModelError:
        status, name = exc.status_code, self.model_id
        message = _server_message(exc)
        said = f": {message}" if message else ""
        code = str(exc.code or "")
        if status == 429:
            if code == "insufficient_quota":
                return ModelError(f"{name}: quota exhausted (429){said}", code="insufficient_quota")
            return RetryableModelError(
                f"{name}: rate limited (429){said}",
                code="rate_limited",
                retry_after=retry_after(exc.response.headers),
            )
        if status in _RETRYABLE_STATUS or status >= 500:
            return RetryableModelError(
                f"{name}: server error ({status}){said}", code="server_error"
            )
        if status in (401, 403):
            return ModelError(
                f"{name}: the server refused the API key ({status}){said}. Set "
                f"{self.key_variable} (or pass api_key) to a valid key.",
                code="auth_failed",
            )
        if status == 404:
            return ModelError(
                f"model {self.model!r} was not found at {self._where()} (404){said}. Check the "
                "model name and the base URL.",
                code="model_not_found",
            )
        if code == "context_length_exceeded" or (status in (400, 413) and _CONTEXT.search(message)):
            return ModelError(
                f"{name}: the conversation is longer than the model's context window "
                f"({status}){said}",
                code="context_too_long",
            )
        if status in (400, 422):
            return ModelError(
                f"{name}: the request was refused ({status}){said}", code="bad_request"
            )
        return ModelError(f"{name}: HTTP {status}{said}", code="http_error")


def _sdk() -> ModuleType:
    try:
        import openai
    except ImportError as exc:
        raise ConfigError(
            f"the OpenAI models need the openai package: {_INSTALL}", code="missing_extra"
        ) from exc
    return openai


async def _drain(events: AsyncGenerator[Any, None], within: float = 1.0) -> None:
    """Read what follows ``[DONE]`` (the end of the body, as a rule), so that the connection
    can serve the next request; a server that keeps the stream open is not waited for."""

    async def rest() -> None:
        async for _ in events:
            pass

    with contextlib.suppress(Exception):
        await asyncio.wait_for(rest(), within)


def _httpx() -> ModuleType | None:
    """The HTTP library under the SDK (its errors reach a stream's reader as they are)."""
    try:
        import httpx2
    except ImportError:  # pragma: no cover - the SDK depends on it
        return None
    return httpx2


def without_password(url: str) -> str:
    """``url`` without the password of its user part (a model string is stored)."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        user = parts.username or ""
        host = parts.netloc.rpartition("@")[2]
        return urlunsplit(parts._replace(netloc=f"{user}@{host}" if user else host))
    except ValueError:
        return url


def _server_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        message = body.get("message")
        if isinstance(message, str) and message:
            return message
    if isinstance(body, str) and body.strip():
        return body.strip()[:500]
    return ""


def retry_after(headers: Any) -> float | None:
    """Seconds to wait, from ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP
    date); None when neither says."""
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) / scale
        except ValueError:
            continue
        if math.isfinite(seconds):
            return max(seconds, 0.0)
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        when = email.utils.parsedate_tz(value)
        if when is None:
            return None
        return max(float(email.utils.mktime_tz(when)) - time.time(), 0.0)
    except (TypeError, ValueError, OverflowError):
        return None


# -- mapping out --------------------------------------------------------------------------

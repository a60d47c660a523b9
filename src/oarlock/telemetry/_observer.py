"""The runner's observer over OpenTelemetry: spans per the GenAI semantic conventions,
metrics, and the run's one trace across processes.

Spans: ``invoke_agent {agent}`` per drive of a run (an attempt), ``chat {model}`` per model
request, ``execute_tool {tool}`` per governed call, and ``await_approval {tool}`` from an
approval's request to its decision. The first traced drive of a run stores its context in
the run document (the ``traceContext`` member, a W3C ``traceparent``); every later drive,
and every decision, in whatever process, continues that trace as a child of it.

Off, it costs a drive one look at the global providers: with no SDK configured (and no
JSON logs asked for), :meth:`Telemetry.drive` returns None and the runner watches nothing.
With an SDK whose sampler drops the run, spans are not recording and no attribute is
built."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.metrics import _internal as metrics_internal
from opentelemetry.trace import NonRecordingSpan, Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from oarlock.formats._time import parse_rfc3339
from oarlock.telemetry._content import Content
from oarlock.telemetry._logs import RUN_ID, json_logs_on
from oarlock.telemetry._metrics import Instruments

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

    from oarlock.formats._models import RunDocument, ToolCallPart, ToolResultPart
    from oarlock.governance._executor import CallOutcome
    from oarlock.models._base import ModelRequest, ModelResponse
    from oarlock.store._base import Event
    from oarlock.tools._tool import Tool

__all__ = ["TRACE_MEMBER", "Telemetry", "trace_context"]

TRACE_MEMBER = "traceContext"
_PROPAGATOR = TraceContextTextMapPropagator()
_TERMINAL_ERRORS = frozenset({"failed", "cancelled", "halted_budget", "halted_max_turns"})
log = logging.getLogger("oarlock.run")


# Whether a global tracer or meter provider has been set is read from the API's own
# globals, two attribute reads: asking ``get_tracer_provider()`` looks the environment up
# on every call while none is set, which costs microseconds. An API that keeps them
# elsewhere is asked.
_GLOBALS_READABLE = hasattr(trace, "_TRACER_PROVIDER") and hasattr(
    metrics_internal, "_METER_PROVIDER"
)


def _tracing_on(provider: TracerProvider | None) -> bool:
    """Whether spans may be recorded: an SDK's provider, not the API's stand-ins."""
    chosen = provider if provider is not None else trace.get_tracer_provider()
    return not isinstance(chosen, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def _metrics_on(provider: MeterProvider | None) -> bool:
    """Whether measurements may be recorded: an SDK's provider, not the API's stand-ins
    (the global one is a proxy until a provider is set)."""
    if provider is None and _GLOBALS_READABLE and metrics_internal._METER_PROVIDER is None:
        return False
    chosen = provider if provider is not None else metrics.get_meter_provider()
    if isinstance(chosen, metrics.NoOpMeterProvider):
        return False
    return type(chosen).__name__ != "_ProxyMeterProvider"


def trace_context(doc: RunDocument) -> otel_context.Context | None:
    """The run's stored trace context, or None (none stored, or not a valid one)."""
    stored = (doc.model_extra or {}).get(TRACE_MEMBER)
    if not isinstance(stored, dict):
        return None
    carrier = {k: v for k, v in stored.items() if k in ("traceparent", "tracestate")}
    if not all(isinstance(v, str) and len(v) <= 512 for v in carrier.values()):
        return None
    ctx = _PROPAGATOR.extract(carrier)
    found = trace.get_current_span(ctx).get_span_context()
    return ctx if found.is_valid else None


def _seconds_ns(at: object) -> int | None:
    """An RFC 3339 time as nanoseconds since the epoch (None if it is not one)."""
    if not isinstance(at, str):
        return None
    parsed = parse_rfc3339(at)
    if parsed is None:
        return None
    second, fraction = parsed
    return int(second.timestamp()) * 1_000_000_000 + int(fraction * 1_000_000_000)


def _span_id(span: Span) -> str | None:
    ctx = span.get_span_context()
    return format(ctx.span_id, "016x") if ctx.is_valid else None


def _provider_and_model(model_id: str) -> tuple[str, str]:
    provider, sep, model = model_id.partition(":")
    return (provider, model) if sep and model else ("unknown", model_id)


class Telemetry:
    """A :class:`~oarlock.engine._observe.RunObserver` over OpenTelemetry.

    ``tracer_provider`` and ``meter_provider`` default to the global ones (those the SDK,
    ``oarlock --otel`` or :func:`oarlock.telemetry.configure` set). ``capture_content``
    records prompts, answers, tool arguments and results on the spans, sanitized, with
    secrets redacted and each capped at ``max_content_chars``; off by default."""

    def __init__(
        self,
        *,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        capture_content: bool = False,
        max_content_chars: int = 4000,
    ) -> None:
        from oarlock import __version__

        self._tracer_provider, self._meter_provider = tracer_provider, meter_provider
        self.tracer = trace.get_tracer("oarlock", __version__, tracer_provider=tracer_provider)
        self.content = Content(capture_content, max_content_chars)
        self._instruments: Instruments | None = None
        self._driving: dict[str, _Drive] = {}  # the drives under way, by run
        self._explicit = tracer_provider is not None or meter_provider is not None
        if os.environ.get("OTEL_PYTHON_TRACER_PROVIDER"):  # the API loads them on first ask
            trace.get_tracer_provider()
        if os.environ.get("OTEL_PYTHON_METER_PROVIDER"):
            metrics.get_meter_provider()
        self._on = self._explicit and self._look()

    # -- is anything recorded? ---------------------------------------------------------
    def _look(self) -> bool:
        return _tracing_on(self._tracer_provider) or self._metered()

    def _enabled(self) -> bool:
        """Whether anything may be recorded. Global providers are set once: once one is
        seen, the answer stays yes; until then, the question costs a few attribute reads."""
        if self._on:
            return True
        if self._explicit or (
            _GLOBALS_READABLE
            and trace._TRACER_PROVIDER is None
            and metrics_internal._METER_PROVIDER is None
        ):
            return False
        self._on = self._look()
        return self._on

    def _metered(self) -> bool:
        return _metrics_on(self._meter_provider)

    @property
    def instruments(self) -> Instruments | None:
        if self._instruments is None and self._metered():
            self._instruments = Instruments(self._meter_provider)
        return self._instruments

    # -- the observer ------------------------------------------------------------------
    def drive(self, doc: RunDocument) -> _Drive | None:
        if not self._enabled():
            return _Drive.logging_only(doc) if json_logs_on() else None
        parent = trace_context(doc)
        span = self.tracer.start_span(
            f"invoke_agent {doc.agent}", context=parent, kind=SpanKind.INTERNAL
        )
        if span.is_recording():
            span.set_attributes(
                {
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.name": doc.agent,
                    "gen_ai.conversation.id": doc.id,
                    "oarlock.run.id": doc.id,
                    "oarlock.run.turns": doc.turns,
                }
            )
            if parent is None:
                carrier: dict[str, str] = {}
                _PROPAGATOR.inject(carrier, trace.set_span_in_context(span))
                setattr(doc, TRACE_MEMBER, carrier)
            if doc.status == "running":  # the drive commits a step: the marks go with it
                self._waits(doc, parent or trace.set_span_in_context(span))
        drive = _Drive(self, doc, span)
        self._driving[doc.id] = drive
        return drive

    def committed(self, doc: RunDocument, events: Sequence[Event]) -> None:
        if not (self._on or self._enabled()):
            return
        inst = self.instruments
        for ev in events:
            kind = ev.kind
            if kind == "approval_decided":
                self._decided(doc, ev, inst)
            elif inst is None:
                continue
            elif kind == "run_created":
                inst.runs_started.add(1, {"gen_ai.agent.name": doc.agent})
            elif kind == "model_responded":
                self._turn(doc, ev.data, inst)
            elif kind == "approval_requested":
                inst.approvals_pending.add(1, {"gen_ai.agent.name": doc.agent})
            elif kind == "status_changed" and ev.data.get("to") in _FINAL:
                status = str(ev.data.get("to"))
                attrs = {"gen_ai.agent.name": doc.agent, "oarlock.run.status": status}
                inst.runs_finished.add(1, attrs)
                if ev.data.get("from") == "waiting_approval":  # cancelled while waiting
                    undecided = sum(1 for a in doc.pending_approvals if a.decision is None)
                    if undecided:
                        inst.approvals_pending.add(-undecided, {"gen_ai.agent.name": doc.agent})

    def reconciled(self, tool: str) -> None:
        """An operator reconciled an Uncertain receipt of ``tool``: one fewer outstanding."""
        inst = self.instruments if self._enabled() else None
        if inst is not None:
            inst.uncertain.add(-1, {"gen_ai.tool.name": tool})

    def _turn(self, doc: RunDocument, data: Mapping[str, Any], inst: Instruments) -> None:
        provider, model = _provider_and_model(doc.model)
        attrs = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": model,
            "gen_ai.agent.name": doc.agent,
        }
        inst.turns.add(1, attrs)
        for token_type, member in (("input", "inputTokens"), ("output", "outputTokens")):
            count = data.get(member)
            if isinstance(count, int) and count >= 0:
                inst.token_usage.record(count, {**attrs, "gen_ai.token.type": token_type})
        cost = data.get("costUsd")
        if isinstance(cost, int | float) and cost >= 0:
            inst.cost.add(float(cost), attrs)

    def _decided(self, doc: RunDocument, ev: Event, inst: Instruments | None) -> None:
        """A decision in the metrics; its wait as a span when a drive of the run is under
        way here (an approval denied at its deadline as the drive begins), else by the
        drive that next moves the run on (see :meth:`_waits`)."""
        data = ev.data
        call_id = data.get("toolCallId")
        approval = next(
            (a for a in [*doc.pending_approvals, *reversed(doc.decisions)]
             if a.tool_call_id == call_id),
            None,
        )  # fmt: skip
        requested = None if approval is None else _seconds_ns(approval.requested_at)
        decided = _seconds_ns(ev.at)
        expired = data.get("decidedBy") == "policy" and str(data.get("reason", "")).startswith(
            "expired"
        )
        if inst is not None:
            inst.approvals_pending.add(-1, {"gen_ai.agent.name": doc.agent})
            if expired:
                inst.approvals_expired.add(1, {"gen_ai.agent.name": doc.agent})
            if requested is not None and decided is not None and decided >= requested:
                decision = str(data.get("decision"))
                waited = {"gen_ai.agent.name": doc.agent, "oarlock.approval.decision": decision}
                inst.approval_wait.record((decided - requested) / 1e9, waited)
        drive = self._driving.get(doc.id)
        parent = trace_context(doc)
        if drive is not None and drive.recording and parent is not None:
            self._waits(doc, parent)

    def _waits(self, doc: RunDocument, parent: otel_context.Context) -> None:
        """A span for each wait for a decision the run's trace does not have yet, from
        the approval's request to its decision; each is marked (``traced``, an extension
        member of the approval) and the mark is committed with the drive's next step, so
        that the wait is told once, whichever process decided and whichever drives on."""
        for approval in [*doc.pending_approvals, *doc.decisions]:
            if approval.decision is None or (approval.model_extra or {}).get("traced") is True:
                continue
            setattr(approval, "traced", True)  # noqa: B010 - an extension member
            requested = _seconds_ns(approval.requested_at)
            decided = _seconds_ns(approval.decided_at)
            if requested is None or decided is None:
                continue
            span = self.tracer.start_span(
                f"await_approval {approval.tool_name}", context=parent, start_time=requested
            )
            if span.is_recording():
                reason = approval.reason or ""
                attrs: dict[str, Any] = {
                    "gen_ai.tool.name": approval.tool_name,
                    "gen_ai.tool.call.id": approval.tool_call_id,
                    "oarlock.run.id": doc.id,
                    "oarlock.approval.decision": approval.decision,
                    "oarlock.approval.decided_by": str(approval.decided_by),
                }
                if approval.principal:
                    attrs["oarlock.approval.principal"] = approval.principal
                if approval.decided_by == "policy" and reason.startswith("expired"):
                    attrs["oarlock.approval.expired"] = True
                span.set_attributes(attrs)
            span.end(end_time=max(decided, requested))


_FINAL = frozenset({"completed", *_TERMINAL_ERRORS})


class _Drive:
    """The watch over one drive (see :class:`~oarlock.engine._observe.DriveWatch`)."""

    def __init__(self, telemetry: Telemetry | None, doc: RunDocument, span: Span) -> None:
        self.telemetry, self.span = telemetry, span
        self.run_id, self.agent = doc.id, doc.agent
        self.recording = span.is_recording()
        self.instruments = None if telemetry is None else telemetry.instruments
        self.provider, self.model = _provider_and_model(doc.model)

    @classmethod
    def logging_only(cls, doc: RunDocument) -> _Drive:
        """A drive watched only to name its run in log lines (no trace, no metrics)."""
        return cls(None, doc, NonRecordingSpan(trace.INVALID_SPAN_CONTEXT))

    @property
    def span_id(self) -> str | None:
        return _span_id(self.span)

    @contextlib.contextmanager
    def active(self) -> Iterator[object]:
        with _run(self.run_id), _current(self.span):
            log.info("drive started")
            yield self

    def chat(self, model_id: str, request: ModelRequest) -> _Chat:
        return _Chat(self, model_id, request)

    def call(self, tool: Tool, call: ToolCallPart, arguments: dict[str, Any]) -> _Call:
        return _Call(self, tool, call, arguments)

    def end(self, doc: RunDocument | None, error: BaseException | None) -> None:
        if self.telemetry is not None and self.telemetry._driving.get(self.run_id) is self:
            del self.telemetry._driving[self.run_id]
        span = self.span
        status = None if doc is None else doc.status
        if self.recording:
            if error is not None:
                span.set_status(Status(StatusCode.ERROR, type(error).__name__))
                span.set_attribute("error.type", type(error).__name__)
            elif status is not None:
                span.set_attribute("oarlock.run.status", status)
                if doc is not None:
                    span.set_attribute("oarlock.run.turns", doc.turns)
                if status in _TERMINAL_ERRORS:
                    span.set_status(Status(StatusCode.ERROR, status))
                    span.set_attribute("error.type", status)
                elif status == "completed":
                    span.set_status(Status(StatusCode.OK))
        if log.isEnabledFor(logging.INFO):
            with _current(span), _run(self.run_id):
                log.info("drive ended: %s", status or type(error).__name__)
        span.end()


class _Chat:
    """A model request's span (``chat {model}``) and its duration."""

    def __init__(self, drive: _Drive, model_id: str, request: ModelRequest) -> None:
        self.drive = drive
        self.provider, self.model = _provider_and_model(model_id)
        telemetry = drive.telemetry
        if telemetry is None:
            self.span: Span = NonRecordingSpan(trace.INVALID_SPAN_CONTEXT)
        else:
            self.span = telemetry.tracer.start_span(f"chat {self.model}", kind=SpanKind.CLIENT)
        self.t0 = _now_ns()
        if self.span.is_recording():
            self.span.set_attributes(
                {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.provider.name": self.provider,
                    "gen_ai.request.model": self.model,
                    "gen_ai.agent.name": drive.agent,
                    "oarlock.run.id": drive.run_id,
                }
            )
            if telemetry is not None and telemetry.content.on:
                telemetry.content.request(self.span, request)

    @property
    def span_id(self) -> str | None:
        return _span_id(self.span)

    def retried(self, attempt: int, error: Exception, delay: float) -> None:
        if self.span.is_recording():
            self.span.add_event(
                "gen_ai.request.retry",
                {
                    "oarlock.retry.attempt": attempt,
                    "oarlock.retry.delay_s": delay,
                    "error.type": str(getattr(error, "code", type(error).__name__)),
                },
            )

    def done(self, response: ModelResponse, cost: float | None) -> None:
        span = self.span
        if span.is_recording():
            reason = "tool_calls" if response.message.tool_calls else "stop"
            attrs: dict[str, Any] = {
                "gen_ai.response.model": self.model,
                "gen_ai.usage.input_tokens": response.input_tokens,
                "gen_ai.usage.output_tokens": response.output_tokens,
                "gen_ai.response.finish_reasons": [reason],
            }
            if response.cached_tokens:
                attrs["gen_ai.usage.cache_read.input_tokens"] = response.cached_tokens
            if cost is not None:
                attrs["oarlock.usage.cost_usd"] = cost
            span.set_attributes(attrs)
            telemetry = self.drive.telemetry
            if telemetry is not None and telemetry.content.on:
                telemetry.content.response(span, response.message)
        self._duration(None)
        span.end()

    def failed(self, error: BaseException) -> None:
        code = str(getattr(error, "code", type(error).__name__))
        if self.span.is_recording():
            self.span.set_status(Status(StatusCode.ERROR, code))
            self.span.set_attribute("error.type", code)
        self._duration(code)
        self.span.end()

    def _duration(self, error: str | None) -> None:
        inst = self.drive.instruments
        if inst is None:
            return
        attrs = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": self.provider,
            "gen_ai.request.model": self.model,
            "gen_ai.agent.name": self.drive.agent,
        }
        if error is not None:
            attrs["error.type"] = error
        inst.operation_duration.record((_now_ns() - self.t0) / 1e9, attrs)


class _Call:
    """A governed call's span (``execute_tool {tool}``) and its metrics."""

    def __init__(
        self, drive: _Drive, tool: Tool, call: ToolCallPart, arguments: dict[str, Any]
    ) -> None:
        self.drive, self.tool = drive, tool.name
        self.status: str | None = None
        telemetry = drive.telemetry
        if telemetry is None:
            self.span: Span = NonRecordingSpan(trace.INVALID_SPAN_CONTEXT)
        else:
            self.span = telemetry.tracer.start_span(
                f"execute_tool {tool.name}", kind=SpanKind.INTERNAL
            )
        self.t0 = _now_ns()
        if self.span.is_recording():
            self.span.set_attributes(
                {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": tool.name,
                    "gen_ai.tool.call.id": call.id,
                    "gen_ai.tool.type": "function",
                    "oarlock.run.id": drive.run_id,
                    "oarlock.tool.side_effect_class": tool.side_effect,
                }
            )
            if telemetry is not None and telemetry.content.on:
                telemetry.content.arguments(self.span, arguments)

    @property
    def span_id(self) -> str | None:
        return _span_id(self.span)

    def active(self) -> AbstractContextManager[object]:
        return _current(self.span)

    def outcome(self, outcome: CallOutcome) -> None:
        self.status = outcome.status
        inst = self.drive.instruments
        if inst is not None:
            if outcome.replayed:
                inst.replays.add(1, {"gen_ai.tool.name": self.tool})
            elif outcome.status == "Uncertain":
                inst.uncertain.add(1, {"gen_ai.tool.name": self.tool})
        span = self.span
        if not span.is_recording():
            return
        inv, receipt = outcome.invocation, outcome.receipt
        decision = inv.get("policyDecision") or {}
        attrs: dict[str, Any] = {
            "oarlock.invocation.id": str(receipt.get("invocationId", inv.get("invocationId"))),
            "oarlock.idempotency.outcome": "replayed" if outcome.replayed else "executed",
            "oarlock.receipt.status": outcome.status,
            "oarlock.receipt.hash": str(receipt.get("receiptHash", "")),
        }
        for name, value in (
            ("oarlock.policy.effect", decision.get("effect")),
            ("oarlock.policy.rule_id", decision.get("ruleId")),
            ("oarlock.policy.id", decision.get("policyId")),
            ("oarlock.approval.id", inv.get("approvalId")),
        ):
            if isinstance(value, str):
                attrs[name] = value
        span.set_attributes(attrs)
        error = receipt.get("error")
        if outcome.status != "Succeeded":
            code = str(error.get("code")) if isinstance(error, dict) else outcome.status
            span.set_status(Status(StatusCode.ERROR, code))
            span.set_attribute("error.type", code)

    def done(self, result: ToolResultPart) -> None:
        span = self.span
        if span.is_recording():
            telemetry = self.drive.telemetry
            if telemetry is not None and telemetry.content.on:
                telemetry.content.result(span, result.content)
            if result.is_error and self.status is None:  # refused before any receipt
                span.set_status(Status(StatusCode.ERROR, "not_run"))
                span.set_attribute("error.type", "not_run")
        self._finish()

    def failed(self, error: BaseException) -> None:
        if self.span.is_recording():
            self.span.set_status(Status(StatusCode.ERROR, type(error).__name__))
            self.span.set_attribute("error.type", type(error).__name__)
        self._finish()

    def _finish(self) -> None:
        inst = self.drive.instruments
        if inst is not None:
            inst.tool_duration.record(
                (_now_ns() - self.t0) / 1e9,
                {"gen_ai.tool.name": self.tool, "oarlock.receipt.status": self.status or "none"},
            )
        if log.isEnabledFor(logging.INFO):
            with _current(self.span), _run(self.drive.run_id):
                log.info("execute_tool %s: %s", self.tool, self.status or "not run")
        self.span.end()


def _current(span: Span) -> AbstractContextManager[object]:
    """``span`` as the current span; an exception passing through is left to the watch
    (whose status names its code: the exception's text may hold what must not leave)."""
    return trace.use_span(
        span, end_on_exit=False, record_exception=False, set_status_on_exception=False
    )


@contextlib.contextmanager
def _run(run_id: str) -> Iterator[None]:
    """Log records written inside name the run."""
    token = RUN_ID.set(run_id)
    try:
        yield
    finally:
        RUN_ID.reset(token)


def _now_ns() -> int:
    return time.perf_counter_ns()

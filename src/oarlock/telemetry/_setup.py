"""Setting up the OpenTelemetry SDK (the ``otel`` extra) for a process: the command line's
``--otel``, the standard ``OTEL_*`` environment variables, or :func:`configure` in code."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from oarlock.errors import ConfigError

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

    from oarlock.telemetry._observer import Telemetry

__all__ = ["Configured", "configure", "configure_from_env", "default_observer"]

CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_EXPORTER_ENV = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "OTEL_TRACES_EXPORTER",
    "OTEL_METRICS_EXPORTER",
)
_INSTALL = "pip install 'oarlock[otel]'"


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


_DEFAULT: list[Telemetry] = []


def default_observer() -> Telemetry:
    """The observer a :class:`~oarlock.engine.Runner` uses unless given one: over the
    global providers, capturing content only when ``capture_content`` was configured or
    ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is true."""
    if not _DEFAULT:
        from oarlock.telemetry._observer import Telemetry

        _DEFAULT.append(Telemetry(capture_content=_truthy(os.environ.get(CAPTURE_ENV))))
    return _DEFAULT[0]


class Configured:
    """The providers :func:`configure` set up; :meth:`shutdown` exports what is left.
    (A plain class: the command line imports this module on every command.)"""

    __slots__ = ("meter_provider", "observer", "readers", "tracer_provider")

    def __init__(
        self,
        tracer_provider: TracerProvider | None,
        meter_provider: MeterProvider | None,
        observer: Telemetry,
        readers: list[Any],
    ) -> None:
        self.tracer_provider, self.meter_provider = tracer_provider, meter_provider
        self.observer, self.readers = observer, readers

    def shutdown(self) -> None:
        for provider in (self.tracer_provider, self.meter_provider):
            if provider is not None:
                provider.shutdown()


def _choice(name: str, env: Mapping[str, str]) -> str:
    value = env.get(name, "otlp").strip().lower() or "otlp"
    if value not in ("otlp", "console", "none"):
        raise ConfigError(f"{name}={value!r}: oarlock knows otlp, console and none")
    return value


def _span_exporter(kind: str) -> SpanExporter | None:
    if kind == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if kind == "none":
        return None
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        raise ConfigError(f"the OTLP exporter is not installed: {_INSTALL}") from None
    return OTLPSpanExporter()


def _metric_reader(kind: str) -> MetricReader | None:
    from opentelemetry.sdk.metrics.export import (
        ConsoleMetricExporter,
        PeriodicExportingMetricReader,
    )

    if kind == "none":
        return None
    if kind == "console":
        return PeriodicExportingMetricReader(ConsoleMetricExporter())
    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    except ImportError:
        raise ConfigError(f"the OTLP exporter is not installed: {_INSTALL}") from None
    return PeriodicExportingMetricReader(OTLPMetricExporter())


def configure(
    *,
    span_exporter: SpanExporter | None = None,
    metric_readers: Sequence[MetricReader] | None = None,
    capture_content: bool | None = None,
    env: Mapping[str, str] | None = None,
) -> Configured:
    """Install the SDK's tracer and meter providers as this process's global ones.

    Without ``span_exporter`` and ``metric_readers``, spans and metrics go where the
    standard variables say: ``OTEL_TRACES_EXPORTER`` and ``OTEL_METRICS_EXPORTER``
    (``otlp``, the default, ``console`` or ``none``), the OTLP exporter's
    ``OTEL_EXPORTER_OTLP_*`` (endpoint, headers, timeout), the resource's
    ``OTEL_SERVICE_NAME`` (default ``oarlock``) and ``OTEL_RESOURCE_ATTRIBUTES``, and the
    sampler's ``OTEL_TRACES_SAMPLER``. Content is captured when ``capture_content`` is
    true, or, when it is None, when ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``
    is."""
    env = os.environ if env is None else env
    try:
        from opentelemetry import metrics, trace
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        raise ConfigError(f"the OpenTelemetry SDK is not installed: {_INSTALL}") from None
    attributes = {} if env.get("OTEL_SERVICE_NAME") else {"service.name": "oarlock"}
    resource = Resource.create(attributes)
    exporter = span_exporter
    if exporter is None:
        exporter = _span_exporter(_choice("OTEL_TRACES_EXPORTER", env))
    tracer_provider = TracerProvider(resource=resource)
    if exporter is not None:
        tracer_provider.add_span_processor(BatchSpanProcessor(exporter))
    readers = list(metric_readers) if metric_readers is not None else []
    if metric_readers is None:
        reader = _metric_reader(_choice("OTEL_METRICS_EXPORTER", env))
        readers = [] if reader is None else [reader]
    meter_provider = MeterProvider(resource=resource, metric_readers=readers)
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(meter_provider)
    from oarlock.telemetry._observer import Telemetry

    capture = _truthy(env.get(CAPTURE_ENV)) if capture_content is None else capture_content
    observer = Telemetry(capture_content=capture)
    _DEFAULT[:] = [observer]
    return Configured(tracer_provider, meter_provider, observer, readers)


def configure_from_env(asked: bool, env: Mapping[str, str] | None = None) -> Configured | None:
    """The command line's set-up: configured when ``--otel`` was given (``asked``) or an
    exporter variable is set, unless ``OTEL_SDK_DISABLED`` is true."""
    env = os.environ if env is None else env
    if _truthy(env.get("OTEL_SDK_DISABLED")):
        return None
    if not asked and not any(env.get(name) for name in _EXPORTER_ENV):
        return None
    return configure(env=env)

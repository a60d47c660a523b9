"""OpenTelemetry traces and metrics of runs, turns and governed calls (GenAI semantic
conventions), the span tree of a run from its event log, and JSON log lines.

Only ``opentelemetry-api`` is needed to import this package; the SDK and the OTLP exporter
are the ``otel`` extra (``pip install 'oarlock[otel]'``), used by :func:`configure`. Names
load on first use: ``oarlock runs show --trace`` loads the span tree alone."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oarlock._lazy import lazy_exports

if TYPE_CHECKING:
    from oarlock.telemetry._logs import JsonLogFormatter, log_json
    from oarlock.telemetry._observer import TRACE_MEMBER, Telemetry
    from oarlock.telemetry._setup import (
        Configured,
        configure,
        configure_from_env,
        default_observer,
    )
    from oarlock.telemetry._tree import SpanNode, render_tree, span_tree

__all__ = [
    "TRACE_MEMBER",
    "Configured",
    "JsonLogFormatter",
    "SpanNode",
    "Telemetry",
    "configure",
    "configure_from_env",
    "default_observer",
    "log_json",
    "render_tree",
    "span_tree",
]

_WHERE = {
    "JsonLogFormatter": "_logs",
    "log_json": "_logs",
    "TRACE_MEMBER": "_observer",
    "Telemetry": "_observer",
    "Configured": "_setup",
    "configure": "_setup",
    "configure_from_env": "_setup",
    "default_observer": "_setup",
    "SpanNode": "_tree",
    "render_tree": "_tree",
    "span_tree": "_tree",
}

__getattr__, __dir__ = lazy_exports(__name__, _WHERE, globals())

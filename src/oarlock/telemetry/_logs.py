"""JSON log lines (``--log-format json``): one object a line with the time, level, logger,
message, and the run, trace and span they were written under."""

from __future__ import annotations

import json
import logging
import sys
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, TextIO

from opentelemetry import trace

from oarlock._secrets import redact

__all__ = ["RUN_ID", "JsonLogFormatter", "json_logs_on", "log_json"]

RUN_ID: ContextVar[str | None] = ContextVar("oarlock_run_id", default=None)
_ON = [False]  # whether JSON logs were asked for in this process


def json_logs_on() -> bool:
    return _ON[0]


class JsonLogFormatter(logging.Formatter):
    """A record as one JSON line; its run id from the drive it was written in (or the
    record's own ``run_id``), its trace and span ids from the current span. The message
    is redacted and written with JSON escapes, so that no control character reaches the
    log as it is."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        run_id = getattr(record, "run_id", None) or RUN_ID.get()
        if isinstance(run_id, str):
            line["runId"] = run_id
        worker = getattr(record, "worker", None)
        if isinstance(worker, str):
            line["worker"] = worker
        ctx = trace.get_current_span().get_span_context()
        if ctx.is_valid:
            line["traceId"] = format(ctx.trace_id, "032x")
            line["spanId"] = format(ctx.span_id, "016x")
        if record.exc_info:
            line["error"] = redact(self.formatException(record.exc_info))
        return json.dumps(line, ensure_ascii=True)


def log_json(stream: TextIO | None = None, level: int = logging.INFO) -> logging.Handler:
    """Send oarlock's log records to ``stream`` (default: standard error) as JSON lines."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonLogFormatter())
    logger = logging.getLogger("oarlock")
    logger.addHandler(handler)
    logger.setLevel(level)
    _ON[0] = True
    return handler

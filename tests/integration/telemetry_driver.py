"""Another process's part of the telemetry tests: with its own in-memory span exporter and
metric reader, approve a waiting run's call and drive the run on, then print the spans and
the metrics it recorded as one JSON object.

    python telemetry_driver.py DB AGENT_FILE RUN_ID CALL_ID
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


def providers() -> tuple[TracerProvider, InMemorySpanExporter, MeterProvider, InMemoryMetricReader]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    return tracer_provider, exporter, MeterProvider(metric_readers=[reader]), reader


def span_json(span: ReadableSpan) -> dict[str, Any]:
    ctx = span.get_span_context()
    assert ctx is not None
    return {
        "name": span.name,
        "traceId": format(ctx.trace_id, "032x"),
        "spanId": format(ctx.span_id, "016x"),
        "parentId": None if span.parent is None else format(span.parent.span_id, "016x"),
        "attributes": {k: (list(v) if isinstance(v, tuple) else v)
                       for k, v in (span.attributes or {}).items()},
        "status": span.status.status_code.name,
        "description": span.status.description,
        "start": span.start_time,
        "end": span.end_time,
        "events": [e.name for e in span.events],
    }  # fmt: skip


def metrics_json(reader: InMemoryMetricReader) -> list[dict[str, Any]]:
    """Every data point: its metric's name, its attributes, and its value (a sum) or its
    count and sum (a histogram)."""
    out: list[dict[str, Any]] = []
    data = reader.get_metrics_data()
    if data is None:
        return out
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    row: dict[str, Any] = {
                        "name": metric.name,
                        "unit": metric.unit,
                        "attributes": dict(point.attributes or {}),
                    }
                    if hasattr(point, "count"):
                        row["count"], row["sum"] = point.count, point.sum
                    else:
                        row["value"] = point.value
                    out.append(row)
    return out


async def main(db: str, agent_file: str, run_id: str, call_id: str) -> None:
    from oarlock.engine import Runner
    from oarlock.engine._agentfile import load_agent
    from oarlock.store import SQLiteStore
    from oarlock.telemetry import Telemetry

    tracer_provider, exporter, meter_provider, reader = providers()
    observer = Telemetry(tracer_provider=tracer_provider, meter_provider=meter_provider)
    store = SQLiteStore(db, create=False)
    try:
        runner = Runner(load_agent(agent_file), store, observer=observer)
        doc = await runner.decide(run_id, call_id, "approved", principal="ops:ana", resume=True)
    finally:
        await store.close()
    print(json.dumps({
        "status": doc.status,
        "spans": [span_json(s) for s in exporter.get_finished_spans()],
        "metrics": metrics_json(reader),
    }))  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))

"""Per-turn cost of telemetry: the run engine with no observer at all, with telemetry off
(the default: OpenTelemetry's API with no SDK behind it) and with telemetry on (the SDK's
tracer and meter providers: spans batched to an exporter that drops them, metrics kept by
an in-memory reader), in memory and durable on SQLite.

Workload: bench_engine's: one trivial async tool, called on each of ``--turns`` turns by a
scripted model, then the answer. Only framework overhead is measured. The three cases take
turns within every round, so that a drift of the machine falls on all of them alike.

Run: ``python bench/bench_telemetry.py [--rounds N] [--runs N] [--turns N] [--json OUT]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from oarlock.engine import Agent, Limits, Runner
from oarlock.engine._observe import DriveWatch, RunObserver
from oarlock.formats._models import RunDocument
from oarlock.models import ScriptedModel
from oarlock.store import MemoryStore, SQLiteStore
from oarlock.store._base import Event
from oarlock.telemetry import Telemetry, default_observer
from oarlock.tools import tool


@tool(side_effect="read")
async def echo(text: str) -> str:
    """Return the text."""
    return text


class Nothing:
    """An observer that watches nothing: the runner as it was before telemetry."""

    def drive(self, doc: RunDocument) -> DriveWatch | None:
        return None

    def committed(self, doc: RunDocument, events: Sequence[Event]) -> None:
        return None


class Dropped(SpanExporter):
    """Takes every batch of spans and keeps none (no network)."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


def script(turns: int) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = [
        {
            "tool_calls": [{"name": "echo", "arguments": {"text": f"turn {i}"}}],
            "usage": {"input_tokens": 100, "output_tokens": 10},
        }
        for i in range(turns)
    ]
    return [*calls, {"text": "done", "usage": {"input_tokens": 100, "output_tokens": 5}}]


async def per_turn_us(store: Any, observer: RunObserver, turns: int, runs: int) -> float:
    """Microseconds per turn over ``runs`` runs of ``turns`` + 1 turns."""
    total, counted = 0.0, 0
    for _ in range(runs):
        agent = Agent(
            "bench", ScriptedModel(script(turns)), tools=[echo], limits=Limits(max_turns=1000)
        )
        runner = Runner(agent, store, observer=observer)
        t0 = time.perf_counter()
        doc = await runner.start("go")
        total += time.perf_counter() - t0
        if doc.status != "completed" or doc.turns != turns + 1:
            raise RuntimeError(f"unexpected end: {doc.status} after {doc.turns}")
        counted += doc.turns
    return total / counted * 1e6


def observers() -> tuple[dict[str, RunObserver], Callable[[], dict[str, int]]]:
    exporter = Dropped()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    on = Telemetry(tracer_provider=tracer_provider, meter_provider=meter_provider)

    def recorded() -> dict[str, int]:
        tracer_provider.force_flush()
        data = reader.get_metrics_data()
        metrics = (
            0
            if data is None
            else sum(len(s.metrics) for r in data.resource_metrics for s in r.scope_metrics)
        )
        return {"spans_exported": exporter.spans, "metrics": metrics}

    cases: dict[str, RunObserver] = {
        "no observer": Nothing(),
        "telemetry off (API, no SDK)": default_observer(),
        "telemetry on (SDK)": on,
    }
    return cases, recorded


def drive_question_ns(samples: int = 20000) -> float:
    """What telemetry off costs a drive: the observer's one question, in nanoseconds."""
    from oarlock.engine._core import new_run

    doc, _ = new_run(
        run_id="r", agent="a", model="scripted:x", input="go", now="2026-01-01T00:00:00Z"
    )
    observer = default_observer()
    t0 = time.perf_counter_ns()
    for _ in range(samples):
        observer.drive(doc)
    return (time.perf_counter_ns() - t0) / samples


async def main(args: argparse.Namespace) -> dict[str, Any]:
    cases, recorded = observers()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        stores = {"memory": MemoryStore(), "sqlite": SQLiteStore(Path(tmp) / "bench.db")}
        for store_name, store in stores.items():
            await per_turn_us(store, cases["no observer"], args.turns, 1)  # warm up
            samples: dict[str, list[float]] = {name: [] for name in cases}
            for _ in range(args.rounds):
                for name, observer in cases.items():
                    samples[name].append(await per_turn_us(store, observer, args.turns, args.runs))
            base = statistics.median(samples["no observer"])
            for name, values in samples.items():
                median = statistics.median(values)
                results[f"{name}, {store_name}"] = {
                    "per_turn_us_median": round(median, 1),
                    "per_turn_us_min": round(min(values), 1),
                    "vs_no_observer_pct": round((median - base) / base * 100, 1),
                    "rounds": len(values),
                }
        sqlite = stores["sqlite"]
        assert isinstance(sqlite, SQLiteStore)
        await sqlite.close()
    results["telemetry off: one drive's question, ns"] = round(drive_question_ns(), 1)
    results["telemetry on: recorded"] = recorded()
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--runs", type=int, default=10, help="runs per case and round")
    parser.add_argument("--turns", type=int, default=10, help="tool turns per run")
    parser.add_argument("--json", metavar="OUT", help="write the results here too")
    args = parser.parse_args()
    out = asyncio.run(main(args))
    text = json.dumps(out, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n", encoding="utf-8")

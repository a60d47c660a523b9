"""Formats on the hot path: typed-model parse and dump of a 50-message run document, and
canonical hashing (oarlock's JCS against the ``rfc8785`` package).

Run: ``python bench/bench_formats.py [--rounds N] [--json OUT]``. Prints medians and the
spread (min..max of the per-round medians) in microseconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import rfc8785

from oarlock.formats import canonicalize, dump_run, parse_run


def run_document(messages: int = 50) -> dict[str, Any]:
    """A realistic oar/0.2 document: alternating tool calls and tool results."""
    msgs: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "Refund order A-1001, it broke."}]}
    ]
    n = 0
    while len(msgs) < messages - 1:
        n += 1
        msgs.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": f"Step {n}: checking the order before acting."},
                    {
                        "type": "tool_call",
                        "id": f"call_{n}",
                        "name": "lookup_order",
                        "arguments": {"order_id": f"A-{1000 + n}", "fields": ["total", "status"]},
                    },
                ],
            }
        )
        msgs.append(
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "toolCallId": f"call_{n}",
                        "toolName": "lookup_order",
                        "content": json.dumps(
                            {
                                "order_id": f"A-{1000 + n}",
                                "total": 42.5,
                                "status": "delivered",
                                "items": ["mug", "plate"],
                            }
                        ),
                    }
                ],
            }
        )
    msgs.append({"role": "assistant", "content": [{"type": "text", "text": "Done."}]})
    return {
        "format": "oar/0.2",
        "id": "0b7f2c7e-3f7a-4d39-9a53-2f5f5a3f9c11",
        "agent": "bench",
        "model": "scripted:bench",
        "input": "Refund order A-1001, it broke.",
        "status": "completed",
        "messages": msgs,
        "pendingApprovals": [],
        "bufferedToolResults": [],
        "usage": {"inputTokens": 51234, "outputTokens": 2048, "costUsd": 0.1731},
        "turns": sum(1 for m in msgs if m["role"] == "assistant"),
        "result": "Done.",
        "createdAt": "2026-11-02T09:15:00Z",
        "updatedAt": "2026-11-02T09:16:41Z",
    }


def measure(fn: Callable[[], object], rounds: int, per_round: int) -> dict[str, float]:
    medians = []
    for _ in range(rounds):
        times = []
        for _ in range(per_round):
            t0 = time.perf_counter_ns()
            fn()
            times.append(time.perf_counter_ns() - t0)
        medians.append(statistics.median(times) / 1000)
    return {
        "median_us": round(statistics.median(medians), 2),
        "min_us": round(min(medians), 2),
        "max_us": round(max(medians), 2),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--per-round", type=int, default=300)
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args(argv)
    doc = run_document(50)
    text = json.dumps(doc).encode()
    model = parse_run(doc)
    if dump_run(model) != doc:
        print("round trip is not exact", file=sys.stderr)
        return 1
    if canonicalize(doc) != rfc8785.dumps(doc):
        print("canonical bytes differ from rfc8785", file=sys.stderr)
        return 1
    cases: dict[str, Callable[[], object]] = {
        "parse 50-message run (dict -> model)": lambda: parse_run(doc),
        "parse 50-message run (JSON bytes -> model)": lambda: parse_run(text),
        "dump 50-message run (model -> dict)": lambda: dump_run(model),
        "parse + dump 50-message run": lambda: dump_run(parse_run(doc)),
        "canonicalize 50-message run (oarlock)": lambda: canonicalize(doc),
        "canonicalize 50-message run (rfc8785)": lambda: rfc8785.dumps(doc),
    }
    results = {name: measure(fn, args.rounds, args.per_round) for name, fn in cases.items()}
    print(f"document: {len(text)} bytes of JSON, {len(doc['messages'])} messages")
    print(f"{'case':48} {'median µs':>10} {'spread µs':>16}")
    for name, r in results.items():
        print(f"{name:48} {r['median_us']:>10.1f} {r['min_us']:>7.1f}..{r['max_us']:<7.1f}")
    ours = results["canonicalize 50-message run (oarlock)"]["median_us"]
    ref = results["canonicalize 50-message run (rfc8785)"]["median_us"]
    print(f"JCS speed-up over rfc8785: {ref / ours:.1f}x")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"document_bytes": len(text), "results": results}, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

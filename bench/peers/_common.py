"""Helpers shared by the benchmark scripts in this folder (stdlib only: imported by both
oarlock's venv and the peers' venv)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sqlite3
import sys
import tempfile
import warnings
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

TOOL_TURNS = 10  # tool calls per workload run
MODEL_TURNS = TOOL_TURNS + 1  # per-turn figures divide a whole run by this (11 model turns)
SHARED_RUNS = 5  # runs already in the database when the shared-store bytes are measured
# pause-and-resume samples a round takes, each of a run of its own, after one warm-up: a
# collection of Python's garbage collector (a full one costs 9 ms of CPU with oarlock and
# pydantic imported) falls at the same point of every fresh process, and with one sample a
# round it landed in all of them or in none
RESUMES = 5


def quiet() -> Any:
    """Silence warnings and logging, and send anything the libraries print to stderr.

    Returns the real stdout, where the one JSON object goes at the end."""
    warnings.filterwarnings("ignore")
    logging.disable(logging.CRITICAL)
    os.environ.setdefault("OTEL_SDK_DISABLED", "true")
    real = sys.stdout
    sys.stdout = sys.stderr
    return real


def arguments() -> argparse.ArgumentParser:
    """The options every script takes: rounds, and runs per round."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--runs", type=int, default=10)
    return ap


def run_script(real_stdout: Any, main_async: Callable[[argparse.Namespace], Any]) -> int:
    """Parse the options, run the script's measurements, print their one JSON object."""
    emit(real_stdout, asyncio.run(main_async(arguments().parse_args())))
    return 0


async def memory_and_resume(
    out: dict[str, Any],
    args: argparse.Namespace,
    per_turn: Callable[[int, int], Awaitable[list[float]]],
    resume_once: Callable[[Path], Awaitable[float]],
    note: str,
) -> dict[str, Any]:
    """The rows of a framework without a run store: per turn in memory, and pause and
    resume through a JSON file (one warm-up, then ``RESUMES`` a round). A resume that fails
    is recorded with its error, not hidden."""
    out["memory_per_turn_s"] = await per_turn(args.rounds, args.runs)
    with tempfile.TemporaryDirectory() as tmpname:
        tmp = Path(tmpname)
        try:
            await resume_once(tmp / "warm.json")
            out["resume_s"] = [
                await resume_once(tmp / f"state-{i}.json") for i in range(args.rounds * RESUMES)
            ]
            out["resume_note"] = note
        except Exception as exc:
            out["resume_s"] = None
            out["resume_error"] = f"{type(exc).__name__}: {exc}"
    return out


def emit(real_stdout: Any, payload: dict[str, Any]) -> None:
    real_stdout.write(json.dumps(payload) + "\n")
    real_stdout.flush()


def checkpointed_size(path: Path) -> int:
    """File size after folding the WAL into the main file (nothing else is open on it)."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return path.stat().st_size


def row_bytes(path: Path) -> dict[str, int]:
    """Bytes of stored values, per table: the sum of every column's length as a blob."""
    conn = sqlite3.connect(path)
    try:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        out: dict[str, int] = {}
        for table in tables:
            cols = [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]
            if not cols:
                continue
            expr = " + ".join(f'COALESCE(LENGTH(CAST("{c}" AS BLOB)), 0)' for c in cols)
            total = conn.execute(f'SELECT COALESCE(SUM({expr}), 0) FROM "{table}"').fetchone()[0]
            out[table] = int(total)
        return out
    finally:
        conn.close()

"""A worker's telemetry: ``oarlock worker --otel --log-format json`` logs what it does and
every drive as JSON lines naming the run, the worker, the trace and the span."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

from worker_fleet import TIMEOUT, WorkerProcess, agent_file, environment, fleet_folder, oarlock


def test_a_worker_logs_json_lines_with_the_run_trace_and_span(tmp_path: Path) -> None:
    folder, db = fleet_folder(tmp_path), tmp_path / "runs.db"
    env = environment(tmp_path, OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="none")
    path = agent_file(folder, "J-1", pays=False)
    submitted = oarlock(db, env, "run", str(path), "look J-1 up", "--detach")
    assert submitted.returncode == 0, submitted.stderr
    worker = WorkerProcess(db, env, "--otel", "--log-format", "json", "--poll", "0.2")
    try:
        deadline = time.monotonic() + TIMEOUT
        while not worker.said('"message": "finished: '):
            assert time.monotonic() < deadline and worker.proc.poll() is None, worker.lines
            time.sleep(0.05)
    finally:
        worker.signal(signal.SIGTERM)
        assert worker.proc.wait(TIMEOUT) == 0
        worker._reader.join(TIMEOUT)
    logs = [json.loads(text) for text in worker.lines]  # every line is one JSON object
    [claimed] = [e for e in logs if e["message"].startswith("claimed: ")]
    run_id, owner = claimed["runId"], claimed["worker"]
    assert owner.startswith("worker:") and claimed["logger"] == "oarlock.worker"
    [started] = [e for e in logs if e["message"] == "drive started"]
    [tool] = [e for e in logs if e["message"] == "execute_tool look: Succeeded"]
    [ended] = [e for e in logs if e["message"] == "drive ended: completed"]
    assert started["runId"] == tool["runId"] == ended["runId"] == run_id
    assert started["traceId"] == tool["traceId"] == ended["traceId"]
    assert started["spanId"] == ended["spanId"] != tool["spanId"]
    assert logs[-1]["message"].startswith("stopped")
    shown = oarlock(db, env, "runs", "show", run_id, "--trace")
    assert shown.stdout.splitlines()[0] == f"run {run_id}  trace {started['traceId']}"

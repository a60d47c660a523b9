"""The command line's telemetry: ``--otel`` and the OTEL_* variables, JSON log lines that
name the run, trace and span, and ``runs show --trace``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path


def oarlock(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return subprocess.run(
        [sys.executable, "-m", "oarlock.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**clean, **(env or {})},
    )


def test_json_logs_name_the_run_trace_and_span_that_runs_show_trace_draws(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "runs.db")
    console = {"OTEL_TRACES_EXPORTER": "console", "OTEL_METRICS_EXPORTER": "none"}
    done = oarlock("--db", db, "--log-format", "json", "demo", "--yes", env=console)
    assert done.returncode == 0, done.stderr
    logs = [json.loads(line) for line in done.stderr.splitlines()]
    assert logs and all({"time", "level", "logger", "message"} <= set(entry) for entry in logs)
    # the user's approver key, made by the demo's first decision, is no run's
    made = [entry for entry in logs if entry["logger"] == "oarlock.approvers"]
    assert all(entry["message"].startswith("made the approver key") for entry in made)
    assert len(made) <= 1  # once, when the configuration holds none yet
    logs = [entry for entry in logs if entry not in made]
    [run_id] = {entry["runId"] for entry in logs}
    [trace_id] = {entry["traceId"] for entry in logs}
    assert re.fullmatch(r"[0-9a-f]{32}", trace_id)
    messages = [entry["message"] for entry in logs]
    assert messages[0] == "drive started" and messages[-1] == "drive ended: completed"
    assert "execute_tool issue_refund: Succeeded" in messages
    assert "drive ended: waiting_approval" in messages
    # the console exporter got the spans of that trace
    assert f'"trace_id": "0x{trace_id}"' in done.stdout
    assert '"name": "await_approval issue_refund"' in done.stdout
    assert "gen_ai.input.messages" not in done.stdout  # content only when asked for
    assert "gen_ai.tool.call.result" not in done.stdout

    shown = oarlock("--db", db, "runs", "show", run_id[:8], "--trace")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == f"run {run_id}  trace {trace_id}"
    names = [re.sub(r"(\S)  .*", r"\1", line) for line in lines[1:]]
    assert names == [
        "invoke_agent refund-desk",
        "├─ chat refund-desk",
        "├─ execute_tool lookup_order",
        "├─ chat refund-desk",
        "├─ execute_tool refund_policy",
        "├─ await_approval issue_refund",
        "└─ invoke_agent refund-desk",
        "   ├─ execute_tool issue_refund",
        "   └─ chat refund-desk",
    ]


def test_telemetry_set_up_wrongly_is_refused_naming_the_rule(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.db")
    assert oarlock("--db", db, "demo", "--yes").returncode == 0
    bad = oarlock("--db", db, "runs", "list", env={"OTEL_TRACES_EXPORTER": "zipkin\x1b[2J"})
    assert bad.returncode == 1
    assert "OTEL_TRACES_EXPORTER" in bad.stderr and "otlp, console and none" in bad.stderr
    assert "\x1b" not in bad.stderr and "Traceback" not in bad.stderr
    both = oarlock("--db", db, "runs", "show", "x", "--trace", "--follow")
    assert both.returncode == 2 and "not allowed with argument" in both.stderr
    disabled = oarlock(
        "--db", db, "--otel", "runs", "list",
        env={"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "zipkin"},
    )  # fmt: skip
    assert disabled.returncode == 0, disabled.stderr
    after = oarlock(
        "--db",
        db,
        "runs",
        "list",
        "--otel",
        env={"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"},
    )
    assert after.returncode == 0, after.stderr


def test_content_is_captured_when_the_standard_variable_asks(tmp_path: Path) -> None:
    env = {"OTEL_TRACES_EXPORTER": "console", "OTEL_METRICS_EXPORTER": "none",
           "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"}  # fmt: skip
    done = oarlock("--db", str(tmp_path / "runs.db"), "demo", "--yes", env=env)
    assert done.returncode == 0, done.stderr
    assert '"gen_ai.input.messages": "[{\\"role\\":\\"user\\"' in done.stdout
    assert '"gen_ai.tool.call.result": ' in done.stdout and "ceramic teapot" in done.stdout


def test_otel_without_the_exporter_installed_says_what_to_install(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.db")
    assert oarlock("--db", db, "demo", "--yes").returncode == 0
    code = (
        "import sys\n"
        "sys.modules['opentelemetry.exporter.otlp.proto.http.trace_exporter'] = None\n"
        "from oarlock.cli import main\n"
        f"sys.exit(main(['--db', {db!r}, '--otel', 'runs', 'list']))\n"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False, env=clean)  # fmt: skip
    assert done.returncode == 1
    said = "oarlock: the OTLP exporter is not installed: pip install 'oarlock[otel]'\n"
    assert done.stderr == said


def test_runs_show_trace_on_postgresql(tmp_path: Path) -> None:
    import pgtest

    url = pgtest.new_database()
    done = oarlock(
        "--db",
        url,
        "demo",
        "--yes",
        env={"OTEL_TRACES_EXPORTER": "console", "OTEL_METRICS_EXPORTER": "none"},
    )
    assert done.returncode == 0, done.stderr
    [listed] = json.loads(oarlock("--db", url, "runs", "list", "--json").stdout)
    shown = oarlock("--db", url, "runs", "show", listed["id"], "--trace")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    trace_id = re.fullmatch(rf"run {listed['id']}  trace ([0-9a-f]{{32}})", lines[0])
    assert trace_id is not None and f'"trace_id": "0x{trace_id.group(1)}"' in done.stdout
    assert any("await_approval issue_refund" in line for line in lines)
    assert lines[-1].startswith("   └─ chat refund-desk  ")

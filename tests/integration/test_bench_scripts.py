"""The oarlock benchmark scripts still run against today's store and engine (tiny sizes,
nothing timed): a schema or API change that breaks them fails here, not in a benchmark run.
The peers' scripts need their own virtual environment and are left to ``bench/compare.py``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).parents[2] / "bench"


def run(script: Path, *args: str, cwd: Path) -> dict[str, Any]:
    out = cwd / "out.json"
    proc = subprocess.run(
        [sys.executable, str(script), *args, "--json", str(out)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result: dict[str, Any] = json.loads(out.read_text("utf-8"))
    return result


def test_the_scale_benchmark_seeds_lists_and_runs_concurrently(tmp_path: Path) -> None:
    result = run(
        BENCH / "bench_scale.py",
        *("--stored", "300", "--concurrent", "5", "--latency", "0.01"),
        cwd=tmp_path,
    )
    assert result["stored_runs"] == 300
    assert result["listing"]["waiting_found"] == 3  # one run in a hundred waits
    for kind in ("concurrent_memory", "concurrent_sqlite"):
        assert result[kind]["runs"] == 5 and result[kind]["wall_s"] > 0
        assert result[kind]["cpu_s"] > 0
    for kind in ("waiting_memory", "waiting_sqlite"):
        assert result[kind]["runs"] == 5
        assert result[kind]["rss_waiting_bytes"] >= result[kind]["rss_before_bytes"] > 0


def test_the_governance_benchmark_measures_every_case(tmp_path: Path) -> None:
    result = run(BENCH / "bench_governance.py", "--calls", "8", "--rounds", "1", cwd=tmp_path)
    assert "governed read call, SQLite (2 commits)" in result
    assert all(case["median_ms"] >= 0 for case in result.values())


def test_the_resume_benchmark_times_an_opened_store_beside_a_kept_one(tmp_path: Path) -> None:
    result = run(
        BENCH / "bench_resume.py", "--runs", "2", "--folder", str(tmp_path), cwd=tmp_path
    )
    assert result["settings"]["runs"] == 2
    for case in ("opened", "kept"):
        parts = result[case]
        assert parts["decide_ms"] > 0 and parts["resume_ms"] > 0
        assert parts["total_ms"] >= parts["decide_ms"] + parts["resume_ms"]
    assert result["opened"]["open_ms"] > result["kept"]["open_ms"]  # kept: nothing opened
    assert list(tmp_path.iterdir()) == [tmp_path / "out.json"]  # its folder removed


def test_the_postgres_benchmark_times_a_statement_through_each_layer_of_the_driver() -> None:
    import asyncio
    import importlib

    import pgtest

    saved = list(sys.path)
    sys.path.insert(0, str(BENCH))
    try:
        bench_postgres = importlib.import_module("bench_postgres")
    finally:
        sys.path[:] = saved  # the script puts its folder on the path too
    result = asyncio.run(bench_postgres.driver_floor(pgtest.SERVER, 20))
    assert set(result) == {"libpq", "psycopg", "psycopg_async"}
    for layer in result.values():
        assert layer["wall_us"] > 0 and layer["cpu_us"] > 0


def test_the_sandbox_benchmark_measures_every_case(tmp_path: Path) -> None:
    result = run(BENCH / "bench_sandbox.py", "--calls", "1", "--rounds", "1", cwd=tmp_path)
    assert set(result) == {
        "subprocess.run (no isolation)",
        "sandboxed command, bubblewrap",
        "sandboxed command, unshare",
        "sandboxed Python tool, bubblewrap",
    }
    assert all(case["median_ms"] > 0 for case in result.values())


def test_the_telemetry_benchmark_measures_off_and_on(tmp_path: Path) -> None:
    result = run(
        BENCH / "bench_telemetry.py", "--rounds", "1", "--runs", "1", "--turns", "2", cwd=tmp_path
    )
    for store in ("memory", "sqlite"):
        for case in ("no observer", "telemetry off (API, no SDK)", "telemetry on (SDK)"):
            assert result[f"{case}, {store}"]["per_turn_us_median"] > 0
    # on records 6 spans a run (1 drive, 3 model requests, 2 tool calls), one run a store
    assert result["telemetry on: recorded"]["spans_exported"] == 6 * 2 * 1
    assert result["telemetry on: recorded"]["metrics"] >= 5


def test_the_oarlock_side_of_the_peer_suite_measures_every_row_and_counts_its_commits(
    tmp_path: Path,
) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH / "peers" / "oarlock_bench.py"), "--rounds", "1", "--runs", "1"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    for where in ("memory", "durable"):
        for kind in ("", "_sync_tool", "_history", "_history_sync_tool"):
            assert len(result[f"{where}{kind}_per_turn_s"]) == 1, (where, kind)
    # the runner's flush rule, as the floor in bench/results.md counts it
    assert result["commits_per_run"]["FULL"] == 11
    assert result["commits_per_run"]["NORMAL"] > 11
    sys.path.insert(0, str(BENCH))
    try:
        import report
    finally:
        sys.path.remove(str(BENCH))
    floor = report._floor({"raw": {"oarlock": result}})
    assert floor is not None and floor["flushes"] == 11 and floor["per_turn"] > 0


def test_the_temporal_benchmark_measures_both_engines(tmp_path: Path) -> None:
    result = run(
        BENCH / "bench_temporal.py",
        *("--turns", "1", "--rounds", "1", "--runs", "1", "--batch", "2", "--concurrency", "2"),
        cwd=tmp_path,
    )
    assert result["turns"] == 2
    for case in ("native_ms", "temporal_ms", "native_rps", "temporal_rps"):
        assert len(result["results"][case]) == 1
        assert result["results"][case][0] > 0


def test_the_temporal_profile_splits_a_turn(tmp_path: Path) -> None:
    result = run(BENCH / "profile_temporal.py", "--turns", "1", "--runs", "1", cwd=tmp_path)
    split = result["per_turn"]
    assert result["turns"] == 2 and result["wall_ms"] > 0
    assert split["activities"] == 3 / 2  # the model twice, the call once: none looks only
    assert split["workflow task: in the worker"] > 0
    assert split["in activity: store.save"] > 0

def test_the_workers_benchmark_measures_throughput_decisions_and_a_drain(
    tmp_path: Path,
) -> None:
    result = run(
        BENCH / "bench_workers.py",
        *("--runs", "6", "--workers", "1,2", "--concurrency", "2", "--decisions", "2",
          "--drain", "30", "--model-ms", "20"),
        cwd=tmp_path,
    )
    rows = [(r["backend"], r["workers"]) for r in result["throughput"]]
    assert rows == [("postgresql", 1), ("postgresql", 2), ("sqlite", 1), ("sqlite", 2)]
    for row in result["throughput"]:
        assert row["runs"] == 6 and row["runs_per_s"] > 0
        assert row["claims_taking_runs"] >= 1 and row["claim_p99_ms"] >= row["claim_p50_ms"]
    assert [r["decisions"] for r in result["decision_to_tool"]] == [2, 2]
    assert all(r["p50_ms"] > 0 for r in result["decision_to_tool"])
    drain = result["drain"]
    assert drain["runs"] == 30 and drain["drain_s"] > 0
    # the plan is shown (with 30 runs a scan of the table is cheaper than the index: the
    # index's use with a long queue is tested in test_postgres_queue.py)
    assert drain["claim_plan"].startswith("Update on runs"), drain["claim_plan"]
    assert "LockRows" in drain["claim_plan"]


def test_the_profile_benchmark_times_every_part_of_a_turn(tmp_path: Path) -> None:
    result = run(BENCH / "bench_profile.py", "--runs", "2", cwd=tmp_path)
    everywhere = {
        "model adapter": 1.0,  # per model turn
        "governed executor": 10 / 11,  # one call on each of 10 of the 11 turns
        "the tool": 10 / 11,
        "tool planning": 10 / 11,
    }
    for kind in ("memory", "SQLite", "PostgreSQL"):
        calls = result[kind]["calls_per_turn"]
        for part, per_turn in everywhere.items():
            assert abs(calls[part] - per_turn) < 1e-9, (kind, part, calls[part])
        assert calls["engine core"] > 2 and calls["run store"] > 2
        # a read's claim, invocation and receipt: one write, inside its step's save (on
        # PostgreSQL, in the save's statement, which the run store's time holds)
        assert calls["governance store"] == (0 if kind == "PostgreSQL" else 10 / 11), kind
        assert result[kind]["per_turn_us"] > 0
    sqlite = result["SQLite"]["calls_per_turn"]
    assert sqlite["SQLite commit, flushed"] == 1.0  # the pinned counts of test_commit_counts
    assert sqlite["SQLite commit, not flushed"] == 12 / 11
    assert result["memory"]["calls_per_turn"]["SQLite commit, flushed"] == 0
    postgres = result["PostgreSQL"]
    assert postgres["calls_per_turn"]["PostgreSQL statements"] == 23 / 11  # as pinned in
    # test_postgres_statements.py: each statement's round trip is timed, and the client's
    # CPU in it is a part of it
    assert 0 < postgres["statements_cpu_us"] < postgres["parts_us"]["PostgreSQL statements"]
    assert result["SQLite"]["statements_cpu_us"] == 0


def test_the_report_judges_the_scale_targets_from_the_figures() -> None:
    """The Targets table gives the scale rows their verdicts from the measured figures."""
    sys.path.insert(0, str(BENCH))
    try:
        import report
    finally:
        sys.path.remove(str(BENCH))
    res = json.loads((BENCH / "results.json").read_text("utf-8"))
    run_of = {"runs": 10_000, "ideal_s": 0.2}
    res["scale"] = {
        "concurrent_memory": {**run_of, "wall_s": 0.25, "cpu_s": 0.1, "efficiency": 0.8},
        "concurrent_sqlite": {**run_of, "wall_s": 4.0, "cpu_s": 4.0, "efficiency": 0.05},
        "waiting_memory": {"runs": 10_000, "bytes_per_waiting_run": 60 * 1024},
    }
    table = report.targets_section(res)
    lines = [line for line in table if "concurrent" in line or "waiting" in line]
    assert lines == [
        "| 10,000 concurrent runs, 100 ms model, one process, in memory: share of the ideal "
        "wall time | ≥ 70% | 80.0% | yes | 100.0% (one core's CPU) |",
        "| 10,000 concurrent runs, 100 ms model, one process, SQLite: share of the ideal wall "
        "time | ≥ 50% | 5.0% | no | 5.0% (one core's CPU) |",
        "| resident memory per waiting run, 10,000 at once, in memory | ≤ 50 KB | 60.0 KB | no "
        "| — |",
    ]


def test_the_report_bounds_the_durable_targets_by_their_floors() -> None:
    """The Targets table gives each floor-bound target the ratio its floor allows: with no
    CPU time at all, then with the in-memory turn's CPU added; for pause and resume, its
    four flushes, then six syncs."""
    sys.path.insert(0, str(BENCH))
    try:
        import report
    finally:
        sys.path.remove(str(BENCH))
    res = json.loads((BENCH / "results.json").read_text("utf-8"))
    oarlock = res["raw"]["oarlock"]
    oarlock["commit_s"], oarlock["unflushed_commit_s"] = [0.001], [0.0001]
    oarlock["commits_per_run"] = {"FULL": 11, "NORMAL": 22}  # floor: 1.2 ms a turn
    for row in res["rows"]:
        ms = {
            (report.S1, None): 0.3,
            (report.S2, None): 3.0,
            (report.S3, None): 10.0,
        }.get((row["section"], row["base"]))
        if ms is None and row["section"] in (report.S2, report.S3) and row["base"]:
            ms = 12.0  # every peer
        if ms is not None:
            row["ms"] = {"median": ms, "min": ms, "max": ms, "n": 1}
    table = report.targets_section(res)
    rows = {
        line.split(" | ")[0][2:]: line.replace("\N{MULTIPLICATION SIGN}", "x").split(" | ")[1:]
        for line in table
        if "|" in line
    }
    assert rows["durable SQLite, per turn vs LangGraph's fastest durable row"] == [
        "8x", "4.00x", "no (short by 2.0x)", "10.0x / 8.0x |"
    ]  # fmt: skip
    assert rows["durable SQLite, per turn / its flush floor"] == [
        "\N{LESS-THAN OR EQUAL TO} 2x", "2.50x", "no", "1.0x / 1.25x |"
    ]  # fmt: skip
    assert rows["pause and resume vs Pydantic AI's JSON file"] == [
        "2x", "1.20x", "no (short by 1.7x)", "3.0x / 2.0x |"
    ]  # fmt: skip


def test_the_comparison_takes_turns_and_joins_each_frameworks_rounds(tmp_path: Path) -> None:
    """compare.py runs each framework's script once a round, round i starting with the
    i-th framework; a framework's rounds join their samples, keep the first round's other
    values, and a round that lacks a sample (it failed) leaves that row without figures."""
    sys.path.insert(0, str(BENCH))
    try:
        import compare
    finally:
        sys.path.remove(str(BENCH))
    log = tmp_path / "order.txt"

    def script(name: str, fails_round: int | None = None) -> list[str]:
        code = (
            "import json, sys\n"
            f"log = open({str(log)!r}, 'a'); log.write({name!r} + '\\n'); log.close()\n"
            f"n = sum(1 for line in open({str(log)!r}) if line.strip() == {name!r})\n"
            f"fails = n == {fails_round!r}\n"
            "print(json.dumps({'version': n, 'per_turn_s': [n / 10, n / 100],"
            " 'resume_s': None if fails else [n], 'bytes': {'10': n}}))\n"
        )
        return [sys.executable, "-c", code]

    raw = compare.interleaved({"a": script("a"), "b": script("b", 2), "c": script("c")}, 4)
    assert log.read_text().split() == [*"abc", *"bca", *"cab", *"abc"]
    assert raw["a"] == {
        "version": 1,
        "per_turn_s": [0.1, 0.01, 0.2, 0.02, 0.3, 0.03, 0.4, 0.04],
        "resume_s": [1, 2, 3, 4],
        "bytes": {"10": 1},
    }
    assert raw["b"]["resume_s"] is None and len(raw["b"]["per_turn_s"]) == 8
    broken = compare.merged([{"per_turn_s": [1.0]}, {"error": "exit 1: boom"}])
    assert broken == {"per_turn_s": None, "error": "exit 1: boom"}

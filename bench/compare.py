"""oarlock next to its peers (OpenAI Agents SDK, Pydantic AI, LangGraph) on one workload,
in one invocation; writes a Markdown table and a JSON file.

The peers are never dependencies of oarlock: they live in their own virtual environment,
bench/peers/.venv-peers (built here on first use), and each is measured in a subprocess
running a script of bench/peers/ with that environment's python. oarlock is measured in a
subprocess with oarlock's own venv (the python running this file, or --oarlock-python).

Workload (all): one agent, one trivial tool ``echo(text) -> text``; the framework's own
fake/function model calls it on each of 10 turns, then answers (11 model turns). Only
framework overhead is measured: model and tool return at once.

Run: ``python bench/compare.py [--rounds N] [--quick] [--out bench/results]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PEERS = HERE / "peers"
PEERS_VENV = PEERS / ".venv-peers"
PEER_PACKAGES = [  # pinned: a figure is only comparable to one of the same versions
    "openai-agents==0.24.0",
    "pydantic-ai-slim==2.68.0",
    "langgraph==1.2.24",
    "langgraph-checkpoint-sqlite==3.1.2",
    "langchain-core==1.8.3",
]
PEER_IMPORTS = (
    "import agents, pydantic_ai, langgraph.prebuilt, langgraph.checkpoint.sqlite, langchain_core"
)
SCRIPTS = {
    "openai-agents": "agents_sdk.py",
    "pydantic-ai": "pydantic_ai_bench.py",
    "langgraph": "langgraph_bench.py",
}
COLD_IMPORTS = {
    "openai-agents": "import agents",
    "pydantic-ai": "import pydantic_ai",
    "langgraph": "import langgraph.prebuilt",
}


KEPT = "<!-- below: sections written by the other bench scripts; compare.py keeps them -->"
S1 = "1. per model turn, in memory, async tool (ms)"
S1B = "1b. per model turn, in memory, plain def tool (ms)"
S2 = "2. per model turn, durable SQLite file (ms)"
S3 = "3. resume a run paused on approval after 9 tool turns: load, approve, finish (ms)"
HISTORY = "model decides from the conversation"
SCRIPTED = "ScriptedModel (turn list), for reference"
# (section, label, framework, key in its JSON, base): base None is the section's baseline,
# "oarlock" a row compared with it, "ref" a row shown without a ratio
ROWS: list[tuple[str, str, str, str, str | None]] = [
    (
        S1,
        f"oarlock, MemoryStore, governed, {HISTORY}",
        "oarlock",
        "memory_history_per_turn_s",
        None,
    ),
    (S1, f"oarlock, MemoryStore, governed, {SCRIPTED}", "oarlock", "memory_per_turn_s", "ref"),
    (S1, "OpenAI Agents SDK, no persistence", "openai-agents", "memory_per_turn_s", "oarlock"),
    (S1, "Pydantic AI, no persistence", "pydantic-ai", "memory_per_turn_s", "oarlock"),
    (S1, "LangGraph create_react_agent, ainvoke", "langgraph", "memory_per_turn_s", "oarlock"),
    (
        S1B,
        f"oarlock, MemoryStore, governed, {HISTORY}",
        "oarlock",
        "memory_history_sync_tool_per_turn_s",
        None,
    ),
    (S1B, f"oarlock, MemoryStore, {SCRIPTED}", "oarlock", "memory_sync_tool_per_turn_s", "ref"),
    (S1B, "OpenAI Agents SDK", "openai-agents", "memory_sync_tool_per_turn_s", "oarlock"),
    (S1B, "Pydantic AI", "pydantic-ai", "memory_sync_tool_per_turn_s", "oarlock"),
    (S1B, "LangGraph, ainvoke", "langgraph", "memory_sync_tool_per_turn_s", "oarlock"),
    (S1B, "LangGraph, invoke (sync)", "langgraph", "memory_sync_per_turn_s", "oarlock"),
    (
        S2,
        f"oarlock, SQLiteStore (WAL, synchronous=FULL), async tool, {HISTORY}",
        "oarlock",
        "durable_history_per_turn_s",
        None,
    ),
    (S2, f"oarlock, the same, {SCRIPTED}", "oarlock", "durable_per_turn_s", "ref"),
    (
        S2,
        f"oarlock, the same, plain def tool, {HISTORY}",
        "oarlock",
        "durable_history_sync_tool_per_turn_s",
        "ref",
    ),
    (
        S2,
        "LangGraph, AsyncSqliteSaver, ainvoke, durability=sync",
        "langgraph",
        "durable_per_turn_s",
        "oarlock",
    ),
    (
        S2,
        "LangGraph, SqliteSaver, invoke and def tool, durability=sync",
        "langgraph",
        "durable_sync_per_turn_s",
        "oarlock",
    ),
    (S3, "oarlock, fresh SQLiteStore + Runner: decide + resume", "oarlock", "resume_s", None),
    (
        S3,
        "OpenAI Agents SDK, RunState JSON file: from_string + approve + Runner.run",
        "openai-agents",
        "resume_s",
        "oarlock",
    ),
    (
        S3,
        "Pydantic AI, message-history JSON file: DeferredToolResults + agent.run",
        "pydantic-ai",
        "resume_s",
        "oarlock",
    ),
    (
        S3,
        "LangGraph, fresh AsyncSqliteSaver: Command(resume) via ainvoke",
        "langgraph",
        "resume_s",
        "oarlock",
    ),
    (
        S3,
        "LangGraph, fresh SqliteSaver: Command(resume) via invoke (sync)",
        "langgraph",
        "resume_sync_s",
        "oarlock",
    ),
]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def venv_python(root: Path) -> Path:
    return root / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def ensure_peers_venv() -> Path:
    py = venv_python(PEERS_VENV)
    if (
        py.exists()
        and subprocess.run(
            [str(py), "-c", PEER_IMPORTS], check=False, capture_output=True
        ).returncode
        == 0
    ):
        return py
    if not py.exists():
        log(f"creating {PEERS_VENV}")
        venv.EnvBuilder(with_pip=True).create(PEERS_VENV)
    log(f"installing {' '.join(PEER_PACKAGES)} into {PEERS_VENV}")
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", *PEER_PACKAGES], check=True, stdout=sys.stderr
    )
    return py


def run_json(cmd: list[str], timeout: float = 1800) -> dict[str, Any]:
    log("running " + " ".join(Path(c).name if i < 2 else c for i, c in enumerate(cmd)))
    proc = subprocess.run(
        cmd,
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    if proc.returncode != 0 or not lines:
        return {"error": f"exit {proc.returncode}: {proc.stderr.strip()[-2000:]}"}
    try:
        return json.loads(lines[-1])
    except json.JSONDecodeError as exc:
        return {"error": f"bad JSON ({exc}): {lines[-1][:500]}"}


def wall(cmd: list[str], n: int) -> list[float]:
    subprocess.run(
        cmd, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )  # warm page cache
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        out.append(time.perf_counter() - t0)
        if proc.returncode != 0:
            raise RuntimeError(f"{cmd}: {proc.stderr.decode()[-500:]}")
    return out


def summary(samples: list[float] | None, scale: float = 1000.0) -> dict[str, float] | None:
    if not samples:
        return None
    return {
        "median": statistics.median(samples) * scale,
        "min": min(samples) * scale,
        "max": max(samples) * scale,
        "n": len(samples),
    }


def compile_oarlock(oarlock_py: Path) -> None:
    """Write oarlock's bytecode, as installing a package does (pip compiled the peers'
    packages when it installed them). An editable install in a shell that sets
    PYTHONDONTWRITEBYTECODE would otherwise recompile oarlock's sources on every start."""
    where = subprocess.run(
        [str(oarlock_py), "-c", "import oarlock, os; print(os.path.dirname(oarlock.__file__))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    subprocess.run([str(oarlock_py), "-m", "compileall", "-q", where], check=True)


def cold_start(oarlock_py: Path, peers_py: Path, n: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    oarlock_cli = oarlock_py.parent / "oarlock"
    compile_oarlock(oarlock_py)
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "cold.db")
        made = run_json([str(oarlock_py), str(PEERS / "oarlock_bench.py"), "--make-run", db])
        if "run_id" not in made:
            out["oarlock"] = {"error": made.get("error")}
        else:
            out["oarlock"] = summary(
                wall([str(oarlock_cli), "--db", db, "runs", "show", made["run_id"]], n)
            )
            out["oarlock"]["command"] = "oarlock --db DB runs show RUN_ID"
    for name, stmt in COLD_IMPORTS.items():
        try:
            out[name] = summary(wall([str(peers_py), "-c", stmt], n))
            out[name]["command"] = f'python -c "{stmt}"'
        except RuntimeError as exc:
            out[name] = {"error": str(exc)}
    for label, py in (("python (oarlock venv)", oarlock_py), ("python (peers venv)", peers_py)):
        out[label] = summary(wall([str(py), "-c", "pass"], n))
        out[label]["command"] = 'python -c "pass"'
    return out


def fmt_ms(s: dict[str, float] | None) -> tuple[str, str]:
    if not s:
        return "—", "—"
    return f"{s['median']:.3f}", f"{s['min']:.3f}..{s['max']:.3f}"


def ratio(peer: dict[str, float] | None, base: dict[str, float] | None) -> str:
    if not peer or not base or not base["median"]:
        return "—"
    return f"{peer['median'] / base['median']:.2f}×"


def run_bench(py: Path, script: str, extra: list[str]) -> dict[str, Any]:
    """One of oarlock's own benchmarks (bench/*.py), its results read from --json."""
    out = Path(tempfile.mkdtemp(prefix="oarlock-compare-")) / "out.json"
    done = subprocess.run(
        [str(py), str(HERE / script), *extra, "--json", str(out)],
        check=False,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if done.returncode != 0 or not out.exists():
        return {"error": (done.stderr or done.stdout)[-500:]}
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def build(args: argparse.Namespace) -> dict[str, Any]:
    oarlock_py = Path(args.oarlock_python)
    peers_py = ensure_peers_venv()
    common = ["--rounds", str(args.rounds), "--runs", str(args.runs)]
    raw: dict[str, Any] = {
        "oarlock": run_json([str(oarlock_py), str(PEERS / "oarlock_bench.py"), *common])
    }
    for name, script in SCRIPTS.items():
        raw[name] = run_json([str(peers_py), str(PEERS / script), *common])
    log("cold starts")
    cold = cold_start(oarlock_py, peers_py, args.cold)
    log("governed call overhead")
    governance = run_bench(
        oarlock_py, "bench_governance.py", ["--rounds", str(args.rounds), "--calls", "200"]
    )
    log("scale")
    scale = run_bench(
        oarlock_py,
        "bench_scale.py",
        ["--stored", str(args.stored), "--concurrent", str(args.concurrent)],
    )

    def pyver(py: Path) -> str:
        return subprocess.run(
            [str(py), "-c", "import platform; print(platform.python_version())"],
            check=False,
            capture_output=True,
            text=True,
        ).stdout.strip()

    versions = {
        "oarlock": raw["oarlock"].get("version"),
        "openai-agents": raw["openai-agents"].get("version"),
        "pydantic-ai-slim": raw["pydantic-ai"].get("version"),
        "langgraph": raw["langgraph"].get("version"),
        "langgraph-checkpoint-sqlite": raw["langgraph"].get("checkpoint_sqlite_version"),
        "langchain-core": raw["langgraph"].get("langchain_core_version"),
    }
    machine = {
        "nproc": os.cpu_count(),
        "platform": platform.platform(),
        "processor": platform.machine(),
        "python_oarlock_venv": pyver(oarlock_py),
        "python_peers_venv": pyver(peers_py),
    }

    # rows: (section, label, framework, samples-in-seconds, baseline key)
    rows: list[dict[str, Any]] = []

    def add(
        section: str, label: str, fw: str, samples: Any, base: str | None, note: str = ""
    ) -> None:
        rows.append(
            {
                "section": section,
                "label": label,
                "framework": fw,
                "ms": summary(samples) if isinstance(samples, list) else None,
                "base": base,
                "note": note,
            }
        )

    for section, label, fw, key, base in ROWS:
        r = raw[fw]
        note = r.get("error", "")
        if key == "resume_s":
            note = r.get("resume_error", note)
        add(section, label, fw, r.get(key), base, note)

    cold_rows = []
    for key, label in (
        ("oarlock", "oarlock --db DB runs show RUN_ID"),
        ("openai-agents", 'python -c "import agents"'),
        ("pydantic-ai", 'python -c "import pydantic_ai"'),
        ("langgraph", 'python -c "import langgraph.prebuilt"'),
        ("python (oarlock venv)", 'python -c "pass" (oarlock venv, reference)'),
        ("python (peers venv)", 'python -c "pass" (peers venv, reference)'),
    ):
        c = cold.get(key) or {}
        cold_rows.append(
            {
                "label": label,
                "key": key,
                "ms": c if "median" in c else None,
                "error": c.get("error"),
            }
        )

    def bytes_of(r: dict[str, Any]) -> dict[str, Any] | None:
        b = r.get("bytes")
        if not b:
            return None
        ten, hundred = b["10"], b["100"]
        return {
            "10": ten,
            "100": hundred,
            "file_ratio_100_10": hundred["file_bytes"] / ten["file_bytes"]
            if ten["file_bytes"]
            else None,
            "row_ratio_100_10": hundred["row_bytes"] / ten["row_bytes"]
            if ten["row_bytes"]
            else None,
            "shared_ratio_100_10": hundred["shared_file_bytes"] / ten["shared_file_bytes"]
            if ten.get("shared_file_bytes")
            else None,
        }

    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python", "bench/compare.py", *sys.argv[1:]]),
        "settings": {
            "rounds": args.rounds,
            "runs_per_round": args.runs,
            "cold_start_samples": args.cold,
        },
        "machine": machine,
        "versions": versions,
        "rows": rows,
        "cold_start": cold_rows,
        "bytes": {"oarlock": bytes_of(raw["oarlock"]), "langgraph": bytes_of(raw["langgraph"])},
        "governance": governance,
        "scale": scale,
        "notes": {k: v.get("resume_note") for k, v in raw.items() if v.get("resume_note")},
        "errors": {k: v["error"] for k, v in raw.items() if "error" in v},
        "raw": raw,
    }


def markdown(res: dict[str, Any]) -> str:
    m, v, st = res["machine"], res["versions"], res["settings"]
    out = [
        "# oarlock and its peers: framework overhead",
        "",
        f"- Date: {res['date']}",
        f"- Machine: {m['nproc']} CPUs ({m['processor']}), {m['platform']}; "
        f"Python {m['python_oarlock_venv']} (oarlock venv), {m['python_peers_venv']} (peers venv)",
        "- Versions: " + ", ".join(f"{k} {val}" for k, val in v.items()),
        f"- Command: `{res['command']}` ({st['rounds']} rounds × {st['runs_per_round']} runs; "
        f"cold start: median of {st['cold_start_samples']} after 1 warm-up)",
        "",
        "Workload, identical for all: one agent, one trivial tool `echo(text) -> text`; the "
        "framework's own fake/function model calls it on each of 10 turns, then answers "
        "(11 model turns). Model and tool return at once: only framework overhead is measured. "
        "**Per-turn = wall time of a whole run / 11 model turns**, for every framework. Each "
        "round's figure is the median of its runs; the table gives the median over rounds and "
        "the min..max of the round figures. Ratio = peer / oarlock, from this same invocation "
        "(> 1: the peer is slower or larger). oarlock's governed executor is on in every row "
        "(policy, idempotency claim, receipt, ledger on each call); the peers do no such work.",
        "",
        "| case | median ms | min..max ms | peer / oarlock |",
        "| --- | ---: | ---: | ---: |",
    ]
    section = None
    base: dict[str, Any] = {}
    for r in res["rows"]:
        if r["section"] != section:
            section = r["section"]
            out.append(f"| **{section}** | | | |")
        if r["base"] is None:
            base = r["ms"]
        med, spread = fmt_ms(r["ms"])
        note = f" (missing: {r['note']})" if r["ms"] is None and r["note"] else ""
        rat = {None: "(baseline)", "ref": "—"}.get(r["base"]) or ratio(r["ms"], base)
        out.append(f"| {r['label']}{note} | {med} | {spread} | {rat} |")
    out.append("| **4. cold start: fresh process wall time (ms)** | | | |")
    cold_base = res["cold_start"][0]["ms"]
    for r in res["cold_start"]:
        med, spread = fmt_ms(r["ms"])
        err = f" (missing: {r['error']})" if r["error"] else ""
        rat = (
            "(baseline)"
            if r["key"] == "oarlock"
            else ("—" if r["key"].startswith("python") else ratio(r["ms"], cold_base))
        )
        out.append(f"| {r['label']}{err} | {med} | {spread} | {rat} |")
    out += [
        "",
        "## 5. Bytes stored for one run (SQLite)",
        "",
        "File bytes: size of the database file after `PRAGMA wal_checkpoint(TRUNCATE)`, "
        "minus the size of an empty, initialized store. Row bytes: the sum of every stored "
        "value's length (`LENGTH(CAST(col AS BLOB))`, integers counted as their decimal "
        "text) over all tables — for oarlock the run document, events and governance rows "
        "(ledger, invocations, claims, receipts, artifacts); for LangGraph its "
        "`checkpoints` and `writes` tables (SqliteSaver, a checkpoint after every step).",
        "",
        "| store | 10-turn file bytes | 100-turn file bytes | 100/10 | 10-turn row bytes "
        "| 100-turn row bytes | 100/10 | LangGraph / oarlock (file, 10 / 100) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    ob, lb = res["bytes"]["oarlock"], res["bytes"]["langgraph"]
    for name, b in (("oarlock SQLiteStore", ob), ("LangGraph SqliteSaver", lb)):
        if not b:
            out.append(f"| {name} (missing) | — | — | — | — | — | — | — |")
            continue
        cmp = "(baseline)"
        if b is lb and ob:
            cmp = (
                f"{lb['10']['file_bytes'] / ob['10']['file_bytes']:.2f}× / "
                f"{lb['100']['file_bytes'] / ob['100']['file_bytes']:.2f}×"
            )
        out.append(
            f"| {name} | {b['10']['file_bytes']:,} | {b['100']['file_bytes']:,} | "
            f"{b['file_ratio_100_10']:.1f} | {b['10']['row_bytes']:,} | "
            f"{b['100']['row_bytes']:,} | {b['row_ratio_100_10']:.1f} | {cmp} |"
        )
    out += shared_bytes_section(ob, lb)
    out += governance_section(res.get("governance") or {})
    out += scale_section(res.get("scale") or {})
    out += targets_section(res)
    out += floors_section(res)
    out += [
        "",
        "## Notes",
        "",
        "- No persistence for the Agents SDK and Pydantic AI in row 1 and no durable row for "
        "them in 2: neither ships a run store. Their pause/resume rows (3) serialize the "
        "paused state to a JSON file (not a transactional store) and time reading it back, "
        "recording the approval and finishing.",
        "- Agents SDK tracing is disabled (`set_tracing_disabled(True)`); otherwise it would "
        "try to export spans.",
        '- LangGraph durable rows use `durability="sync"` (each step\'s checkpoint is written '
        "before the next starts) with `PRAGMA synchronous=FULL` on a WAL database, to match "
        "oarlock's commit-per-step; LangGraph's default (`\"async\"`) overlaps the write with "
        "the next step.",
        "- oarlock pause/resume: the timed part constructs a fresh `SQLiteStore` and `Runner` "
        "on the file, then `decide(..., 'approved')` and `resume(...)`; LangGraph's opens a "
        "fresh connection + saver and compiles the agent, then `Command(resume=...)`.",
        "- Cold start is process wall time including interpreter start; `python -c pass` "
        "rows are the floor. oarlock's row also opens the DB and prints a run's timeline; "
        "the peers' rows only import the package. Every package's bytecode is compiled "
        "beforehand (pip did it for the peers; the suite runs `compileall` on oarlock).",
    ]
    for k, note in res["notes"].items():
        out.append(f"- {k} resume: {note}")
    for k, err in res["errors"].items():
        out.append(f"- **{k} failed**: {err[:500]}")
    return "\n".join(out) + "\n"


def shared_bytes_section(ob: dict[str, Any] | None, lb: dict[str, Any] | None) -> list[str]:
    if not ob or not lb or ob["shared_ratio_100_10"] is None:
        return []
    out = [
        "",
        "The same runs stored in a database that holds five 10-turn runs already, as a store "
        "in use does: the growth of its file (after a checkpoint) when the run is added. In "
        "an empty store, the first rows of each table fit in root pages the empty file has "
        "already, so the figures above undercount a short run.",
        "",
        "| store | 10-turn file bytes added | 100-turn file bytes added | 100/10 "
        "| LangGraph / oarlock (10 / 100) |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, b in (("oarlock SQLiteStore", ob), ("LangGraph SqliteSaver", lb)):
        ten, hundred = b["10"]["shared_file_bytes"], b["100"]["shared_file_bytes"]
        cmp = "(baseline)"
        if b is lb:
            o10, o100 = ob["10"]["shared_file_bytes"], ob["100"]["shared_file_bytes"]
            cmp = f"{ten / o10:.2f}× / {hundred / o100:.2f}×"
        out.append(f"| {name} | {ten:,} | {hundred:,} | {b['shared_ratio_100_10']:.1f} | {cmp} |")
    return out


def governance_section(gov: dict[str, Any]) -> list[str]:
    out = [
        "",
        "## 6. Governed call overhead (oarlock)",
        "",
        "One tool call through policy, approval check, idempotency claim, receipt and "
        "ledger (`bench/bench_governance.py`); each call has a fresh key.",
        "",
        "| case | median ms | min..max ms |",
        "| --- | ---: | ---: |",
    ]
    if "error" in gov:
        return [*out, f"| (missing: {gov['error'][:200]}) | — | — |"]
    for name, r in gov.items():
        out.append(f"| {name} | {r['median_ms']:.3f} | {r['min_ms']:.3f}..{r['max_ms']:.3f} |")
    return out


def scale_section(sc: dict[str, Any]) -> list[str]:
    out = ["", "## 7. Scale (oarlock)", ""]
    if "error" in sc or not sc:
        return [*out, f"missing: {sc.get('error', 'not run')[:300]}"]
    lst, mem, sql = sc["listing"], sc["concurrent_memory"], sc["concurrent_sqlite"]
    out += [
        "| case | result |",
        "| --- | ---: |",
        f"| list the runs waiting for approval among {sc['stored_runs']:,} stored "
        f"({lst['waiting_found']:,} found, SQLite) | {lst['waiting_ms']:.1f} ms |",
        f"| list the 50 newest of {sc['stored_runs']:,} | {lst['newest_50_ms']:.2f} ms |",
    ]
    for r, where in ((mem, "in memory"), (sql, "SQLite")):
        out.append(
            f"| {r['runs']:,} concurrent runs, 100 ms model latency, {where} | "
            f"{r['wall_s']:.2f} s (ideal {r['ideal_s']:.2f} s: {r['efficiency']:.0%}); CPU "
            f"{r['cpu_s']:.2f} s, {r['cpu_per_run_ms']:.3f} ms a run |"
        )
    for key, where in (("waiting_memory", "in memory"), ("waiting_sqlite", "SQLite")):
        if key in sc:
            w = sc[key]
            out.append(
                f"| resident memory per run waiting on its model, {w['runs']:,} at once, "
                f"{where} | {w['bytes_per_waiting_run'] / 1024:.1f} KB |"
            )
    cpu_floor = mem["cpu_per_run_ms"] * mem["runs"] / 1000
    return [
        *out,
        "",
        "Each concurrent run makes two model requests and one governed tool call; one "
        "process on one event loop does all the CPU work, so the wall time is bound by "
        f"that work, not by waiting: in memory, {mem['runs']:,} runs × "
        f"{mem['cpu_per_run_ms']:.3f} ms of CPU is {cpu_floor:.2f} s on one core, against "
        f"an ideal of {mem['ideal_s']:.2f} s; more of the ideal takes more processes "
        "(workers, [More than one machine](../README.md#more-than-one-machine)) or less CPU "
        "per run. Memory per waiting run: the growth of the resident set of a fresh process "
        "while every run waits on its model at once.",
    ]


def _fastest(rows: list[dict[str, Any]], section: str) -> tuple[float | None, float | None]:
    base = peer = None
    for r in rows:
        if r["section"] == section and r["ms"] and r["base"] != "ref":
            if r["base"] is None:
                base = r["ms"]["median"]
            else:
                peer = r["ms"]["median"] if peer is None else min(peer, r["ms"]["median"])
    return base, peer


def _floor(res: dict[str, Any]) -> dict[str, float] | None:
    """The durable run's floor from this invocation: its measured commits (flushed and
    riding on a later flush) times what one of each costs, per model turn."""
    o = res["raw"].get("oarlock") or {}
    flushed, unflushed = o.get("commit_s"), o.get("unflushed_commit_s")
    counts = o.get("commits_per_run")
    if not flushed or not unflushed or not counts:
        return None
    full, normal = statistics.median(flushed) * 1000, statistics.median(unflushed) * 1000
    per_turn = (counts["FULL"] * full + counts["NORMAL"] * normal) / 11
    return {
        "flush": full,
        "commit": normal,
        "flushes": counts["FULL"],
        "commits": counts["NORMAL"],
        "per_turn": per_turn,
    }


def floors_section(res: dict[str, Any]) -> list[str]:
    """What the guarantees cost at least, from figures of this same invocation."""
    f = _floor(res)
    base, lg = _fastest(res["rows"], S2)
    if f is None or base is None:
        return []
    _, fastest_resume = _fastest(res["rows"], S3)
    return [
        "",
        "## Floors",
        "",
        f"One flushed SQLite commit (WAL, synchronous=FULL, a 2 KB row) took {f['flush']:.3f} "
        f"ms and one that waits for no disk (synchronous=NORMAL) {f['commit']:.3f} ms (medians "
        "of 200) in this invocation. A 10-turn run of the workload made "
        f"{f['flushes']} flushed and {f['commits']} unflushed commits (counted in this "
        "invocation by tracing the store's statements; pinned in "
        "`tests/integration/test_commit_counts.py`): each model response is flushed before "
        "its tools run; the run's creation, a step of `read` results, each call's claim and "
        "receipt ride on the next flush (see the README's durability rule). The floor is "
        f"{f['per_turn']:.3f} ms per model turn; oarlock's durable turn took {base:.3f} ms, "
        f"{base / f['per_turn']:.1f}× the floor"
        + (
            f"; against LangGraph's {lg:.3f} ms, no CPU time at all would give "
            f"{lg / f['per_turn']:.1f}×."
            if lg
            else "."
        ),
        "",
        "Pause and resume makes at least four flushed commits, each before it is "
        "acknowledged or acted on (the decision; the spend call's idempotency claim, "
        "before the tool runs; the tool results; the answer), and opens the database: "
        f"{4 * f['flush']:.3f} ms of flushes"
        + (
            f", against {fastest_resume:.3f} ms for the fastest peer, which stores nothing "
            "durably while it resumes."
            if fastest_resume
            else "."
        ),
    ]


def targets_section(res: dict[str, Any]) -> list[str]:
    rows = res["rows"]
    out = [
        "",
        "## Targets",
        "",
        "| target | wanted | measured | met |",
        "| --- | ---: | ---: | :---: |",
    ]

    def line(name: str, wanted: float, got: float | None, more_is_better: bool = True) -> None:
        if got is None:
            out.append(f"| {name} | {wanted:g}× | — | missing |")
            return
        ok = got >= wanted if more_is_better else got <= wanted
        miss = "" if ok else f" (short by {wanted / got:.1f}×)" if more_is_better else ""
        out.append(f"| {name} | {wanted:g}× | {got:.2f}× | {'yes' if ok else 'no' + miss} |")

    for sec, wanted, name in (
        (S1, 10, "in memory, async tool, per turn vs the fastest peer"),
        (S1B, 8, "in memory, plain def tool, per turn vs the fastest peer"),
        (S2, 8, "durable SQLite, per turn vs LangGraph's fastest durable row"),
    ):
        base, peer = _fastest(rows, sec)
        line(name, wanted, peer / base if base and peer else None)
    f = _floor(res)
    base, _ = _fastest(rows, S2)
    if f and base:
        got = base / f["per_turn"]
        out.append(
            f"| durable SQLite, per turn / its flush floor | ≤ 2× | {got:.2f}× | "
            f"{'yes' if got <= 2 else 'no'} |"
        )
    resume = {r["label"]: r["ms"] for r in rows if r["section"] == S3 and r["ms"]}
    mine = next(
        (r["ms"]["median"] for r in rows if r["section"] == S3 and r["base"] is None and r["ms"]),
        None,
    )
    for who, wanted, name in (
        ("LangGraph", 5, "pause and resume vs LangGraph durable"),
        ("Pydantic AI", 2, "pause and resume vs Pydantic AI's JSON file"),
    ):
        peers = [ms["median"] for label, ms in resume.items() if label.startswith(who)]
        line(name, wanted, min(peers) / mine if peers and mine else None)
    cold = {r["key"]: r["ms"] for r in res["cold_start"]}
    peers = [
        cold[k]["median"] for k in ("openai-agents", "pydantic-ai", "langgraph") if cold.get(k)
    ]
    got = min(peers) / cold["oarlock"]["median"] if peers and cold.get("oarlock") else None
    line("cold `runs show` vs the fastest peer's import", 10, got)
    ob, lb = res["bytes"]["oarlock"], res["bytes"]["langgraph"]
    if ob and lb:
        line(
            "bytes stored, 10-turn run, LangGraph / oarlock",
            5,
            lb["10"]["file_bytes"] / ob["10"]["file_bytes"],
        )
        if ob["shared_ratio_100_10"] is not None:
            line(
                "bytes added to a store in use, 10-turn run, LangGraph / oarlock",
                5,
                lb["10"]["shared_file_bytes"] / ob["10"]["shared_file_bytes"],
            )
        ratios = [
            (
                f"empty store, file bytes; rows {ob['row_ratio_100_10']:.1f}",
                ob["file_ratio_100_10"],
            ),
            ("bytes added to a store in use", ob["shared_ratio_100_10"]),
        ]
        for what, r in ratios:
            if r is not None:
                out.append(
                    f"| 100-turn run / 10-turn run ({what}) | ≤ 12 | {r:.1f} | "
                    f"{'yes' if r <= 12 else 'no'} |"
                )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--runs", type=int, default=10, help="runs per round (default 10)")
    ap.add_argument("--cold", type=int, default=5, help="cold-start samples (default 5)")
    ap.add_argument("--quick", action="store_true", help="3 rounds × 3 runs, 3 cold starts")
    ap.add_argument("--stored", type=int, default=100_000, help="runs stored for the scale test")
    ap.add_argument("--concurrent", type=int, default=10_000, help="concurrent runs (scale test)")
    ap.add_argument(
        "--out",
        default=str(HERE / "results"),
        help="output stem: writes STEM.md and STEM.json (default bench/results)",
    )
    ap.add_argument(
        "--oarlock-python",
        default=sys.executable,
        help="python of oarlock's venv (default: the one running this)",
    )
    args = ap.parse_args(argv)
    if args.quick:
        args.rounds, args.runs, args.cold = 3, 3, 3
        args.stored, args.concurrent = 10_000, 200
    res = build(args)
    md = markdown(res)
    stem = Path(args.out)
    stem.parent.mkdir(parents=True, exist_ok=True)
    md_path = stem.with_suffix(".md")
    if md_path.exists():  # the other benchmarks' sections, below the marker, are kept
        old = md_path.read_text()
        if KEPT in old:
            md += "\n" + old[old.index(KEPT) :]
    md_path.write_text(md)
    stem.with_suffix(".json").write_text(json.dumps(res, indent=2) + "\n")
    print(md)
    log(f"wrote {stem.with_suffix('.md')} and {stem.with_suffix('.json')}")
    return 1 if res["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())

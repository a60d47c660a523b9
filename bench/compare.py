"""oarlock next to its peers (OpenAI Agents SDK, Pydantic AI, LangGraph) on one workload,
in one invocation; writes a Markdown table and a JSON file.

The peers are never dependencies of oarlock: they live in their own virtual environment,
bench/peers/.venv-peers (built here on first use), and each is measured in a subprocess
running a script of bench/peers/ with that environment's python. oarlock is measured in a
subprocess with oarlock's own venv (the python running this file, or --oarlock-python).
Each round runs every framework's script once, the frameworks taking turns (see
:func:`interleaved`).

Workload (all): one agent, one trivial tool ``echo(text) -> text``; the framework's own
fake/function model calls it on each of 10 turns, then answers (11 model turns). Only
framework overhead is measured: model and tool return at once.

Run: ``python bench/compare.py [--rounds N] [--quick] [--out bench/results]``.
"""

from __future__ import annotations

import argparse
import contextlib
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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from report import KEPT, ROWS, markdown

HERE = Path(__file__).resolve().parent
PEERS = HERE / "peers"
PEERS_VENV = PEERS / ".venv-peers"
PEER_PACKAGES = [  # pinned: a figure is only comparable to one of the same versions
    "openai-agents==0.24.0",
    "pydantic-ai-slim==2.68.0",
    "langgraph==1.2.24",
    "langgraph-checkpoint-sqlite==3.1.2",
    "langgraph-checkpoint-postgres==3.2.0",
    "psycopg[binary]==3.3.9",
    "langchain-core==1.8.3",
]
PEER_IMPORTS = (
    "import agents, pydantic_ai, langgraph.prebuilt, langgraph.checkpoint.sqlite, "
    "langgraph.checkpoint.postgres, langchain_core"
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


@contextlib.contextmanager
def postgres_databases(server: str | None, names: list[str]) -> Iterator[dict[str, list[str]]]:
    """A fresh database on ``server`` for each of ``names`` (dropped afterwards), as the
    ``--pg URL`` option each script takes; none without a server."""
    if not server:
        yield {name: [] for name in names}
        return
    from urllib.parse import urlsplit, urlunsplit

    import psycopg

    made = {name: f"oarlock_compare_{name}_{os.getpid()}" for name in names}
    with psycopg.connect(server, autocommit=True) as conn:
        for db in made.values():
            conn.execute(f'DROP DATABASE IF EXISTS "{db}"')
            conn.execute(f'CREATE DATABASE "{db}"')
    try:
        yield {
            name: ["--pg", urlunsplit(urlsplit(server)._replace(path="/" + db))]
            for name, db in made.items()
        }
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            for db in made.values():
                conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


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


def interleaved(commands: dict[str, list[str]], rounds: int) -> dict[str, dict[str, Any]]:
    """Each framework's script run once a round (each run measures one round), the
    frameworks taking turns: round ``i`` starts with the ``i``-th and goes on in order. The
    machine's speed drifts by the minute; run one framework's rounds after another's and
    the drift lands in their ratio, while rounds taken in turn share it. Each framework's
    rounds are then one result (:func:`merged`)."""
    names = list(commands)
    passes: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for i in range(rounds):
        turn = i % len(names)
        for name in names[turn:] + names[:turn]:
            log(f"round {i + 1} of {rounds}: {name}")
            passes[name].append(run_json(commands[name]))
    return {name: merged(outs) for name, outs in passes.items()}


def _samples(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(x, int | float) and not isinstance(x, bool) for x in value
    )


def merged(outs: list[dict[str, Any]]) -> dict[str, Any]:
    """One framework's rounds as one result: a list of timings (samples) is the rounds'
    lists joined in order; a key whose samples some round lacks (that round failed it) has
    none, so that no failure is hidden behind the rounds that passed; any other value (a
    version, the bytes stored, a count) is the first round's. The first error of a round is
    kept."""
    out: dict[str, Any] = {}
    for key in dict.fromkeys(k for o in outs for k in o):
        values = [o.get(key) for o in outs]
        if all(_samples(v) for v in values):
            out[key] = [x for v in values for x in v]
        elif any(_samples(v) for v in values):
            out[key] = None
        else:
            out[key] = values[0]
    for key in ("error", "resume_error"):
        failed = next((o[key] for o in outs if o.get(key)), None)
        if failed is not None:
            out[key] = failed
    return out


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
    one_round = ["--rounds", "1", "--runs", str(args.runs)]
    floors = ["--commits", str(-(-200 // args.rounds))]  # 200 commits a floor in all
    with postgres_databases(args.pg, ["oarlock", "langgraph"]) as pg:
        commands = {
            "oarlock": [
                str(oarlock_py), str(PEERS / "oarlock_bench.py"), *floors, *pg["oarlock"]
            ],
            **{
                name: [str(peers_py), str(PEERS / script), *pg.get(name, [])]
                for name, script in SCRIPTS.items()
            },
        }
        raw = interleaved({k: [*c, *one_round] for k, c in commands.items()}, args.rounds)
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
        "langgraph-checkpoint-postgres": raw["langgraph"].get("checkpoint_postgres_version"),
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
            "interleaved": True,
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
        "--pg",
        default=os.environ.get("OARLOCK_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test"),
        help="PostgreSQL server for the 2b rows (a database of each framework's is made and "
        "dropped); '' to leave them out",
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

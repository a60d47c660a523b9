"""The report of bench/compare.py: its rows, and the markdown of bench/results.md made from
one invocation's figures (the tables, the floors, the targets)."""

from __future__ import annotations

import statistics
from typing import Any

KEPT = "<!-- below: sections written by the other bench scripts; compare.py keeps them -->"
S1 = "1. per model turn, in memory, async tool (ms)"
S1B = "1b. per model turn, in memory, plain def tool (ms)"
S2 = "2. per model turn, durable SQLite file (ms)"
S2B = "2b. per model turn, durable PostgreSQL, same server and database settings (ms)"
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
    (
        S2B,
        f"oarlock, PostgresStore, async tool, {HISTORY}",
        "oarlock",
        "durable_pg_history_per_turn_s",
        None,
    ),
    (
        S2B,
        "LangGraph, AsyncPostgresSaver, ainvoke, durability=sync",
        "langgraph",
        "durable_pg_per_turn_s",
        "oarlock",
    ),
    (
        S2B,
        "LangGraph, PostgresSaver, invoke and def tool, durability=sync",
        "langgraph",
        "durable_pg_sync_per_turn_s",
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


def fmt_ms(s: dict[str, float] | None) -> tuple[str, str]:
    if not s:
        return "—", "—"
    return f"{s['median']:.3f}", f"{s['min']:.3f}..{s['max']:.3f}"


def ratio(peer: dict[str, float] | None, base: dict[str, float] | None) -> str:
    if not peer or not base or not base["median"]:
        return "—"
    return f"{peer['median'] / base['median']:.2f}×"


def _resumes(res: dict[str, Any]) -> str:
    """The resumes a round of oarlock's script took (RESUMES of bench/peers/_common.py)."""
    samples = (res["raw"].get("oarlock") or {}).get("resume_s") or []
    rounds = res["settings"]["rounds"]
    return str(len(samples) // rounds) if rounds and samples else "the"


def markdown(res: dict[str, Any]) -> str:
    m, v, st = res["machine"], res["versions"], res["settings"]
    out = [
        "# oarlock and its peers: framework overhead",
        "",
        f"- Date: {res['date']}",
        f"- Machine: {m['nproc']} CPUs ({m['processor']}), {m['platform']}; "
        f"Python {m['python_oarlock_venv']} (oarlock venv), {m['python_peers_venv']} (peers venv)",
        "- Versions: " + ", ".join(f"{k} {val}" for k, val in v.items()),
        f"- Command: `{res['command']}` ({st['rounds']} rounds × {st['runs_per_round']} runs"
        + (", the frameworks taking turns" if st.get("interleaved") else "")
        + f"; cold start: median of {st['cold_start_samples']} after 1 warm-up)",
        "",
        "Workload, identical for all: one agent, one trivial tool `echo(text) -> text`; the "
        "framework's own fake/function model calls it on each of 10 turns, then answers "
        "(11 model turns). Model and tool return at once: only framework overhead is measured. "
        "**Per-turn = wall time of a whole run / 11 model turns**, for every framework. Each "
        "round's figure is the median of its runs; the table gives the median over rounds and "
        "the min..max of the round figures. Ratio = peer / oarlock, from this same invocation "
        "(> 1: the peer is slower or larger). oarlock's governed executor is on in every row "
        "(policy, idempotency claim, receipt, ledger on each call); the peers do no such work."
        + (
            " Each round is a fresh process of each framework's script measuring one round, "
            "the frameworks taking turns (round i starts with the i-th of them): the machine's "
            "speed drifts by the minute, and rounds taken in turn share that drift rather than "
            "putting it into the ratios."
            if st.get("interleaved")
            else ""
        ),
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
        f"- Pause and resume: each framework's process takes {_resumes(res)} resumes a round "
        "(each "
        "of a run of its own, after one warm-up), and the row gives the median and the "
        "min..max of all of them. A full collection of Python's garbage collector falls at "
        "the same point of each fresh process; with one resume a round it landed in every "
        "round's sample or in none (a full collection takes 9 ms of CPU with oarlock and "
        "pydantic imported, 20 to 27 ms in the benchmark's process).",
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


def _floor(res: dict[str, Any], prefix: str = "") -> dict[str, float] | None:
    """The durable run's floor from this invocation: its measured commits (flushed and
    riding on a later flush) times what one of each costs, per model turn. ``prefix``
    ``pg_``: on PostgreSQL, where the store makes the same transactions (one per store
    call, synchronous exactly where SQLite's are flushed) but for the drive's lease: taken
    in a synchronous commit of its own, where SQLite takes it without a flush (both give
    it back with the last save: 12 + 11 for the workload, pinned in
    tests/integration/test_postgres_statements.py)."""
    o = res["raw"].get("oarlock") or {}
    flushed, unflushed = o.get(f"{prefix}commit_s"), o.get(f"{prefix}unflushed_commit_s")
    counts = o.get("commits_per_run")
    if not flushed or not unflushed or not counts:
        return None
    if prefix == "pg_":
        counts = {"FULL": counts["FULL"] + 1, "NORMAL": counts["NORMAL"] - 1}
    full, normal = statistics.median(flushed) * 1000, statistics.median(unflushed) * 1000
    per_turn = (counts["FULL"] * full + counts["NORMAL"] * normal) / 11
    return {
        "flush": full,
        "commit": normal,
        "flushes": counts["FULL"],
        "commits": counts["NORMAL"],
        "per_turn": per_turn,
        "samples": len(flushed),
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
        f"of {f['samples']}, taken across the rounds) in this invocation. A 10-turn run of the "
        "workload made "
        f"{f['flushes']} flushed and {f['commits']} unflushed commits (counted in this "
        "invocation by tracing the store's statements; pinned in "
        "`tests/integration/test_commit_counts.py`): each model response is flushed before "
        "its tools run; the run's creation, the drive's lease and a step of `read` results "
        "(with each read call's one write, its claim, invocation and receipt, in the step's "
        "own transaction) ride on the next flush (see the README's durability rule). The "
        "floor is "
        f"{f['per_turn']:.3f} ms per model turn; oarlock's durable turn took {base:.3f} ms, "
        f"{base / f['per_turn']:.1f}× the floor"
        + (
            f"; against LangGraph's {lg:.3f} ms, no CPU time at all would give "
            f"{lg / f['per_turn']:.1f}×."
            if lg
            else "."
        ),
        "",
        *_pg_floor_lines(res),
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


def _pg_floor_lines(res: dict[str, Any]) -> list[str]:
    f = _floor(res, "pg_")
    base, lg = _fastest(res["rows"], S2B)
    if f is None or base is None:
        return []
    line = (
        "On PostgreSQL (the same server for both), one synchronous commit of a 2 KB row "
        f"(one statement in autocommit: a single round trip) took {f['flush']:.3f} ms and one "
        f"with `synchronous_commit = off` {f['commit']:.3f} ms: the run's {f['flushes']} + "
        f"{f['commits']} commits (SQLite's, but for the drive's lease, taken in a "
        f"synchronous commit of its own) are a floor of {f['per_turn']:.3f} "
        f"ms per model turn; oarlock's took {base:.3f} ms, {base / f['per_turn']:.1f}× the "
        "floor"
    )
    if lg:
        line += f"; LangGraph's fastest PostgreSQL row {lg:.3f} ms."
    return [line + ("" if lg else "."), ""]


def targets_section(res: dict[str, Any]) -> list[str]:
    """Each target against this invocation's figures, and, where a floor bounds it, the
    best the floor allows: the ratio no CPU time at all would give (the commits alone),
    then with the CPU of the in-memory turn added, which a durable turn does too."""
    rows = res["rows"]
    out = [
        "",
        "## Targets",
        "",
        "The last column is what the floors (below) allow in this invocation: the ratio with "
        "no CPU time at all, then with the in-memory turn's CPU added (a durable turn does "
        "that work too); for pause and resume, its four flushed commits alone, then with the "
        "two syncs of the write-ahead log a fresh connection creates (its header and its "
        "folder: six `fdatasync` calls in all, counted with strace).",
        "",
        "| target | wanted | measured | met | bound by the floor |",
        "| --- | ---: | ---: | :---: | ---: |",
    ]

    def line(
        name: str, wanted: float, got: float | None, bound: str = "—", at_most: bool = False
    ) -> None:
        if got is None:
            out.append(f"| {name} | {wanted:g}× | — | missing | {bound} |")
            return
        ok = got <= wanted if at_most else got >= wanted
        miss = "" if ok or at_most else f" (short by {wanted / got:.1f}×)"
        want = f"≤ {wanted:g}×" if at_most else f"{wanted:g}×"
        out.append(f"| {name} | {want} | {got:.2f}× | {'yes' if ok else 'no' + miss} | {bound} |")

    def bounds(peer: float | None, floor: float, mem: float | None) -> str:
        if not peer:
            return "—"
        with_mem = f" / {peer / (floor + mem):.1f}×" if mem else ""
        return f"{peer / floor:.1f}×{with_mem}"

    mem, _ = _fastest(rows, S1)
    for sec, wanted, name in (
        (S1, 10, "in memory, async tool, per turn vs the fastest peer"),
        (S1B, 8, "in memory, plain def tool, per turn vs the fastest peer"),
    ):
        base, peer = _fastest(rows, sec)
        line(name, wanted, peer / base if base and peer else None)
    for sec, prefix, wanted, name, where in (
        (S2, "", 8, "durable SQLite, per turn vs LangGraph's fastest durable row", "flush"),
        (S2B, "pg_", 5, "durable PostgreSQL, per turn vs LangGraph's fastest PostgreSQL row",
         "commit"),
    ):  # fmt: skip
        base, peer = _fastest(rows, sec)
        f = _floor(res, prefix)
        line(
            name,
            wanted,
            peer / base if base and peer else None,
            bounds(peer, f["per_turn"], mem) if f else "—",
        )
        if f and base:
            least = f"1.0× / {(f['per_turn'] + mem) / f['per_turn']:.2f}×" if mem else "1.0×"
            store = "SQLite" if prefix == "" else "PostgreSQL"
            line(
                f"durable {store}, per turn / its {where} floor",
                2,
                base / f["per_turn"],
                least,
                at_most=True,
            )
    resume = {r["label"]: r["ms"] for r in rows if r["section"] == S3 and r["ms"]}
    mine = next(
        (r["ms"]["median"] for r in rows if r["section"] == S3 and r["base"] is None and r["ms"]),
        None,
    )
    f = _floor(res)
    for who, wanted, name in (
        ("LangGraph", 5, "pause and resume vs LangGraph durable"),
        ("Pydantic AI", 2, "pause and resume vs Pydantic AI's JSON file"),
    ):
        peers = [ms["median"] for label, ms in resume.items() if label.startswith(who)]
        bound = (
            f"{min(peers) / (4 * f['flush']):.1f}× / {min(peers) / (6 * f['flush']):.1f}×"
            if f and peers
            else "—"
        )
        line(name, wanted, min(peers) / mine if peers and mine else None, bound)
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
                    f"{'yes' if r <= 12 else 'no'} | — |"
                )
    return out + _scale_targets(res.get("scale") or {})


def _scale_targets(sc: dict[str, Any]) -> list[str]:
    """The scale targets: the share of the ideal wall time (two model latencies) that many
    concurrent runs reach in one process, with the bound one core's CPU puts on it, and
    the memory a waiting run holds."""
    out = []
    for key, where, wanted in (
        ("concurrent_memory", "in memory", 0.70),
        ("concurrent_sqlite", "SQLite", 0.50),
    ):
        r = sc.get(key)
        if not r:
            continue
        bound = r["ideal_s"] / max(r["ideal_s"], r["cpu_s"])
        out.append(
            f"| {r['runs']:,} concurrent runs, 100 ms model, one process, {where}: share of "
            f"the ideal wall time | ≥ {wanted:.0%} | {r['efficiency']:.1%} | "
            f"{'yes' if r['efficiency'] >= wanted else 'no'} | {bound:.1%} (one core's CPU) |"
        )
    for key, where in (("waiting_memory", "in memory"), ("waiting_sqlite", "SQLite")):
        w = sc.get(key)
        if w:
            kb = w["bytes_per_waiting_run"] / 1024
            out.append(
                f"| resident memory per waiting run, {w['runs']:,} at once, {where} | "
                f"≤ 50 KB | {kb:.1f} KB | {'yes' if kb <= 50 else 'no'} | — |"
            )
    return out

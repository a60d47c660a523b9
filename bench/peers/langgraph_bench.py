"""LangGraph side of bench/compare.py: run with the peers' venv. Prints one JSON object.

Same workload: ``create_react_agent`` (langgraph.prebuilt) with one trivial tool ``echo``
and a tiny ``BaseChatModel`` subclass that returns an AIMessage calling ``echo`` on each of
10 turns, then answers. Measured with the async API (``ainvoke``, like the others) and the
sync API (``invoke``).
Durable: ``SqliteSaver`` (sync) and ``AsyncSqliteSaver`` on a file, WAL (set by the saver),
``PRAGMA synchronous=FULL``, ``durability="sync"`` (each step's checkpoint is written
before the next step starts; the default "async" overlaps the write with the next step).
Pause/resume: ``pay`` calls ``interrupt()``; the timed part opens a fresh saver on the same
file, compiles the agent and invokes ``Command(resume="approved")``.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from importlib.metadata import version
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    MODEL_TURNS,
    RESUMES,
    SHARED_RUNS,
    TOOL_TURNS,
    arguments,
    checkpointed_size,
    emit,
    quiet,
    row_bytes,
)

REAL_STDOUT = quiet()

import aiosqlite  # noqa: E402
from langchain_core.language_models.chat_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessage, ToolMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.checkpoint.postgres import PostgresSaver  # noqa: E402
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver  # noqa: E402
from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: E402
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver  # noqa: E402
from langgraph.prebuilt import create_react_agent  # noqa: E402
from langgraph.types import Command, interrupt  # noqa: E402


@tool
async def echo(text: str) -> str:
    """Return the text."""
    return text


@tool
def echo_sync(text: str) -> str:
    """Return the text."""
    return text


@tool
def pay(amount: float) -> str:
    """Pay an amount (needs approval)."""
    decision = interrupt({"tool": "pay", "amount": amount})
    if decision != "approved":
        return "denied"
    return f"paid {amount}"


class CannedChat(BaseChatModel):
    """Calls ``echo`` until ``tool_turns`` ToolMessages are in the input (then
    ``final_call`` once if set), then answers."""

    tool_turns: int = TOOL_TURNS
    final_call: str | None = None
    tool_name: str = "echo"

    @property
    def _llm_type(self) -> str:
        return "canned"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _reply(self, messages: list[Any]) -> AIMessage:
        done = sum(1 for m in messages if isinstance(m, ToolMessage))
        if done < self.tool_turns:
            return AIMessage(
                content="",
                tool_calls=[
                    {
                        "name": self.tool_name,
                        "args": {"text": f"turn {done}"},
                        "id": f"call_{done}",
                        "type": "tool_call",
                    }
                ],
            )
        if self.final_call and done == self.tool_turns:
            return AIMessage(
                content="",
                tool_calls=[
                    {
                        "name": self.final_call,
                        "args": {"amount": 5},
                        "id": f"call_{done}",
                        "type": "tool_call",
                    }
                ],
            )
        return AIMessage(content="done")

    def _generate(
        self, messages: list[Any], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._reply(messages))])

    async def _agenerate(
        self, messages: list[Any], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._reply(messages))])


def graph_for(
    checkpointer: Any = None,
    *,
    sync: bool = False,
    sync_tool: bool = False,
    tool_turns: int = TOOL_TURNS,
    final_call: str | None = None,
) -> Any:
    sync_tool = sync_tool or sync
    name = "echo_sync" if sync_tool else "echo"
    model = CannedChat(tool_turns=tool_turns, final_call=final_call, tool_name=name)
    tools = [echo_sync if sync_tool else echo, pay]
    return create_react_agent(model, tools, checkpointer=checkpointer)


def cfg() -> dict[str, Any]:
    return {"configurable": {"thread_id": uuid.uuid4().hex}, "recursion_limit": 1000}


def check(out: dict[str, Any], turns: int = TOOL_TURNS) -> None:
    msgs = out["messages"]
    tools = sum(1 for m in msgs if isinstance(m, ToolMessage))
    if msgs[-1].content != "done" or tools != turns:
        raise RuntimeError(f"unexpected end: {msgs[-1].content!r} after {tools} tool calls")


async def run_async(graph: Any, durable: bool, turns: int = TOOL_TURNS) -> float:
    kw = {"durability": "sync"} if durable else {}
    t0 = time.perf_counter()
    out = await graph.ainvoke({"messages": [("user", "go")]}, cfg(), **kw)
    elapsed = time.perf_counter() - t0
    check(out, turns)
    return elapsed


def run_sync(graph: Any, durable: bool, turns: int = TOOL_TURNS) -> float:
    kw = {"durability": "sync"} if durable else {}
    t0 = time.perf_counter()
    out = graph.invoke({"messages": [("user", "go")]}, cfg(), **kw)
    elapsed = time.perf_counter() - t0
    check(out, turns)
    return elapsed


async def per_turn_async(graph: Any, durable: bool, rounds: int, runs: int) -> list[float]:
    for _ in range(3):
        await run_async(graph, durable)
    return [
        statistics.median([await run_async(graph, durable) for _ in range(runs)]) / MODEL_TURNS
        for _ in range(rounds)
    ]


def per_turn_sync(graph: Any, durable: bool, rounds: int, runs: int) -> list[float]:
    for _ in range(3):
        run_sync(graph, durable)
    return [
        statistics.median([run_sync(graph, durable) for _ in range(runs)]) / MODEL_TURNS
        for _ in range(rounds)
    ]


def sqlite_conn(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    return conn


async def aio_conn(path: Path) -> aiosqlite.Connection:
    conn = await aiosqlite.connect(path)
    await conn.execute("PRAGMA journal_mode=WAL")
    await conn.execute("PRAGMA synchronous=FULL")
    return conn


def resume_once_sync(path: Path) -> float:
    conn = sqlite_conn(path)
    graph = graph_for(SqliteSaver(conn), sync=True, tool_turns=TOOL_TURNS - 1, final_call="pay")
    config = cfg()
    out = graph.invoke({"messages": [("user", "go")]}, config, durability="sync")
    if "__interrupt__" not in out:
        raise RuntimeError("not paused as planned")
    conn.close()
    t0 = time.perf_counter()
    conn = sqlite_conn(path)
    graph = graph_for(SqliteSaver(conn), sync=True, tool_turns=TOOL_TURNS - 1, final_call="pay")
    done = graph.invoke(Command(resume="approved"), config, durability="sync")
    elapsed = time.perf_counter() - t0
    conn.close()
    if done["messages"][-1].content != "done" or done["messages"][-2].content != "paid 5.0":
        raise RuntimeError(f"unexpected end: {done['messages'][-2:]!r}")
    return elapsed


async def resume_once_async(path: Path) -> float:
    conn = await aio_conn(path)
    graph = graph_for(AsyncSqliteSaver(conn), tool_turns=TOOL_TURNS - 1, final_call="pay")
    config = cfg()
    out = await graph.ainvoke({"messages": [("user", "go")]}, config, durability="sync")
    if "__interrupt__" not in out:
        raise RuntimeError("not paused as planned")
    await conn.close()
    t0 = time.perf_counter()
    conn = await aio_conn(path)
    graph = graph_for(AsyncSqliteSaver(conn), tool_turns=TOOL_TURNS - 1, final_call="pay")
    done = await graph.ainvoke(Command(resume="approved"), config, durability="sync")
    elapsed = time.perf_counter() - t0
    await conn.close()
    if done["messages"][-1].content != "done" or done["messages"][-2].content != "paid 5.0":
        raise RuntimeError(f"unexpected end: {done['messages'][-2:]!r}")
    return elapsed


def stored_bytes(tmp: Path, turns: int) -> dict[str, Any]:
    empty = tmp / f"empty-{turns}.db"
    conn = sqlite_conn(empty)
    SqliteSaver(conn).setup()
    conn.close()
    full = tmp / f"full-{turns}.db"
    conn = sqlite_conn(full)
    graph = graph_for(SqliteSaver(conn), sync=True, tool_turns=turns)
    run_sync(graph, True, turns)
    conn.close()
    base = checkpointed_size(empty)
    size = checkpointed_size(full)
    rows = row_bytes(full)
    return {
        "file_bytes": size - base,
        "empty_file_bytes": base,
        "shared_file_bytes": shared_bytes(tmp, turns),
        "row_bytes": sum(rows.values()),
        "row_bytes_by_table": rows,
    }


def shared_bytes(tmp: Path, turns: int) -> int:
    """What one run adds to a database that holds runs already (SHARED_RUNS of 10 turns)."""
    path = tmp / f"shared-{turns}.db"
    conn = sqlite_conn(path)
    graph = graph_for(SqliteSaver(conn), sync=True, tool_turns=TOOL_TURNS)
    for _ in range(SHARED_RUNS):
        run_sync(graph, True, TOOL_TURNS)
    conn.close()
    before = checkpointed_size(path)
    conn = sqlite_conn(path)
    run_sync(graph_for(SqliteSaver(conn), sync=True, tool_turns=turns), True, turns)
    conn.close()
    return checkpointed_size(path) - before


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {
        "framework": "langgraph",
        "version": version("langgraph"),
        "checkpoint_sqlite_version": version("langgraph-checkpoint-sqlite"),
        "checkpoint_postgres_version": version("langgraph-checkpoint-postgres"),
        "langchain_core_version": version("langchain-core"),
    }
    out["memory_per_turn_s"] = await per_turn_async(graph_for(), False, args.rounds, args.runs)
    out["memory_sync_tool_per_turn_s"] = await per_turn_async(
        graph_for(sync_tool=True), False, args.rounds, args.runs
    )
    out["memory_sync_per_turn_s"] = per_turn_sync(
        graph_for(sync=True), False, args.rounds, args.runs
    )
    with tempfile.TemporaryDirectory() as tmpname:
        tmp = Path(tmpname)
        conn = await aio_conn(tmp / "durable-async.db")
        out["durable_per_turn_s"] = await per_turn_async(
            graph_for(AsyncSqliteSaver(conn)), True, args.rounds, args.runs
        )
        await conn.close()
        sconn = sqlite_conn(tmp / "durable-sync.db")
        out["durable_sync_per_turn_s"] = per_turn_sync(
            graph_for(SqliteSaver(sconn), sync=True), True, args.rounds, args.runs
        )
        sconn.close()
        await resume_once_async(tmp / "warm-a.db")
        out["resume_s"] = [
            await resume_once_async(tmp / f"resume-a-{i}.db")
            for i in range(args.rounds * RESUMES)
        ]
        resume_once_sync(tmp / "warm-s.db")
        out["resume_sync_s"] = [
            resume_once_sync(tmp / f"resume-s-{i}.db") for i in range(args.rounds * RESUMES)
        ]
        out["resume_note"] = (
            "fresh AsyncSqliteSaver/SqliteSaver connection + compile + "
            "invoke(Command(resume='approved')); tool calls interrupt()"
        )
        out["bytes"] = {str(n): stored_bytes(tmp, n) for n in (TOOL_TURNS, 100)}
    if args.pg:
        await postgres_rows(out, args)
    return out


async def postgres_rows(out: dict[str, Any], args: argparse.Namespace) -> None:
    """Per turn with LangGraph's own PostgreSQL checkpointers, durability="sync" (each
    step's checkpoint committed, synchronous_commit on, before the next step)."""
    async with AsyncPostgresSaver.from_conn_string(args.pg) as saver:
        await saver.setup()
        out["durable_pg_per_turn_s"] = await per_turn_async(
            graph_for(saver), True, args.rounds, args.runs
        )
    with PostgresSaver.from_conn_string(args.pg) as sync_saver:
        sync_saver.setup()
        out["durable_pg_sync_per_turn_s"] = per_turn_sync(
            graph_for(sync_saver, sync=True), True, args.rounds, args.runs
        )


def main() -> int:
    ap = arguments()
    ap.add_argument("--pg", metavar="URL", help="also measure the PostgreSQL checkpointers")
    emit(REAL_STDOUT, asyncio.run(main_async(ap.parse_args())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Pydantic AI side of bench/compare.py: run with the peers' venv. Prints one JSON object.

Same workload: one trivial tool ``echo``; a ``FunctionModel`` calls it on each of 10 turns,
then answers. No persistence (Pydantic AI has no store of its own).
Pause/resume: ``pay`` is registered with ``requires_approval=True`` and the agent's output
type includes ``DeferredToolRequests``; the paused run's message history is written to a
JSON file; the timed part reads it (``ModelMessagesTypeAdapter``) and runs again with
``DeferredToolResults(approvals={id: True})``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import MODEL_TURNS, TOOL_TURNS, memory_and_resume, quiet, run_script

REAL_STDOUT = quiet()

from pydantic_ai import (  # noqa: E402
    Agent,
    DeferredToolRequests,
    DeferredToolResults,
    ModelMessagesTypeAdapter,
)
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart  # noqa: E402
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402


def model_for(tool_turns: int, final_call: str | None = None) -> FunctionModel:
    def respond(messages: list[Any], info: AgentInfo) -> ModelResponse:
        done = sum(
            1 for m in messages for p in getattr(m, "parts", ()) if isinstance(p, ToolReturnPart)
        )
        if done < tool_turns:
            return ModelResponse(
                parts=[ToolCallPart("echo", {"text": f"turn {done}"}, tool_call_id=f"call_{done}")]
            )
        if final_call and done == tool_turns:
            return ModelResponse(
                parts=[ToolCallPart(final_call, {"amount": 5}, tool_call_id=f"call_{done}")]
            )
        return ModelResponse(parts=[TextPart("done")])

    return FunctionModel(respond)


def agent_for(
    tool_turns: int, final_call: str | None = None, sync: bool = False
) -> Agent[None, Any]:
    agent: Agent[None, Any] = Agent(
        model_for(tool_turns, final_call), output_type=[str, DeferredToolRequests]
    )

    if sync:

        @agent.tool_plain
        def echo(text: str) -> str:
            """Return the text."""
            return text

    else:

        @agent.tool_plain
        async def echo(text: str) -> str:  # type: ignore[misc]
            """Return the text."""
            return text

    @agent.tool_plain(requires_approval=True)
    async def pay(amount: float) -> str:
        """Pay an amount (needs approval)."""
        return f"paid {amount}"

    return agent


async def one_run(agent: Agent[None, Any]) -> float:
    t0 = time.perf_counter()
    result = await agent.run("go")
    elapsed = time.perf_counter() - t0
    if result.output != "done":
        raise RuntimeError(f"unexpected end: {result.output!r}")
    return elapsed


async def per_turn(rounds: int, runs: int, sync: bool = False) -> list[float]:
    agent = agent_for(TOOL_TURNS, sync=sync)
    for _ in range(3):
        await one_run(agent)
    return [
        statistics.median([await one_run(agent) for _ in range(runs)]) / MODEL_TURNS
        for _ in range(rounds)
    ]


async def resume_once(path: Path) -> float:
    agent = agent_for(TOOL_TURNS - 1, final_call="pay")
    result = await agent.run("go")
    if not isinstance(result.output, DeferredToolRequests) or not result.output.approvals:
        raise RuntimeError(f"not paused as planned: {result.output!r}")
    call_ids = [c.tool_call_id for c in result.output.approvals]
    path.write_bytes(ModelMessagesTypeAdapter.dump_json(result.all_messages()))
    t0 = time.perf_counter()
    history = ModelMessagesTypeAdapter.validate_json(path.read_bytes())
    done = await agent.run(
        message_history=history,
        deferred_tool_results=DeferredToolResults(approvals=dict.fromkeys(call_ids, True)),
    )
    elapsed = time.perf_counter() - t0
    paid = [
        p.content
        for m in done.all_messages()
        for p in getattr(m, "parts", ())
        if isinstance(p, ToolReturnPart) and p.tool_name == "pay"
    ]
    if done.output != "done" or paid != ["paid 5.0"]:
        raise RuntimeError(f"unexpected end: {done.output!r}, {paid!r}")
    return elapsed


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"framework": "pydantic-ai-slim", "version": version("pydantic-ai-slim")}
    note = (
        "message history JSON file; read + validate_json + "
        "agent.run(deferred_tool_results=approved)"
    )
    out["memory_sync_tool_per_turn_s"] = await per_turn(args.rounds, args.runs, sync=True)
    return await memory_and_resume(out, args, per_turn, resume_once, note)


def main() -> int:
    return run_script(REAL_STDOUT, main_async)


if __name__ == "__main__":
    raise SystemExit(main())

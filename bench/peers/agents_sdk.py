"""OpenAI Agents SDK side of bench/compare.py: run with the peers' venv. Prints one JSON object.

Same workload: one trivial tool ``echo``; a custom ``Model`` subclass returns canned
responses (a call to ``echo`` on each of 10 turns, then an answer). Tracing is disabled
(it would otherwise export spans). No persistence: the SDK has no store of its own.
Pause/resume: ``pay`` is a function_tool with ``needs_approval=True``; the paused run's
``RunState`` is written to a JSON file; the timed part reads it, ``RunState.from_string``,
``state.approve(...)``, ``Runner.run(agent, state)``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import MODEL_TURNS, TOOL_TURNS, memory_and_resume, quiet, run_script

REAL_STDOUT = quiet()

from agents import Agent, ModelResponse, Runner, Usage, function_tool, set_tracing_disabled  # noqa: E402
from agents.models.interface import Model  # noqa: E402
from agents.run_state import RunState  # noqa: E402
from openai.types.responses import (  # noqa: E402
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

set_tracing_disabled(True)


@function_tool
async def echo(text: str) -> str:
    """Return the text."""
    return text


@function_tool(name_override="echo")
def echo_sync(text: str) -> str:
    """Return the text."""
    return text


@function_tool(needs_approval=True)
async def pay(amount: float) -> str:
    """Pay an amount (needs approval)."""
    return f"paid {amount}"


class CannedModel(Model):
    """Calls ``echo`` until ``tool_turns`` tool outputs are in the input (then ``final_call``
    once if set), then answers. Stateless: the turn is read from the input, so a resumed run
    gets the right response."""

    def __init__(self, tool_turns: int, final_call: str | None = None) -> None:
        self.tool_turns = tool_turns
        self.final_call = final_call

    async def get_response(
        self,
        system_instructions: Any,
        input: Any,
        model_settings: Any,
        tools: Any,
        output_schema: Any,
        handoffs: Any,
        tracing: Any,
        **kwargs: Any,
    ) -> ModelResponse:
        done = (
            0
            if isinstance(input, str)
            else sum(
                1
                for item in input
                if (item.get("type") if isinstance(item, dict) else getattr(item, "type", None))
                == "function_call_output"
            )
        )
        if done < self.tool_turns:
            out: Any = ResponseFunctionToolCall(
                type="function_call",
                call_id=f"call_{done}",
                name="echo",
                arguments=json.dumps({"text": f"turn {done}"}),
                id=f"fc_{done}",
                status="completed",
            )
        elif self.final_call and done == self.tool_turns:
            out = ResponseFunctionToolCall(
                type="function_call",
                call_id=f"call_{done}",
                name=self.final_call,
                arguments=json.dumps({"amount": 5}),
                id=f"fc_{done}",
                status="completed",
            )
        else:
            out = ResponseOutputMessage(
                id="msg_done",
                type="message",
                role="assistant",
                status="completed",
                content=[ResponseOutputText(type="output_text", text="done", annotations=[])],
            )
        return ModelResponse(output=[out], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def agent_for(tool_turns: int, final_call: str | None = None, sync: bool = False) -> Agent:
    return Agent(
        name="bench",
        instructions="",
        model=CannedModel(tool_turns, final_call),
        tools=[echo_sync if sync else echo, pay],
    )


async def one_run(agent: Agent) -> float:
    t0 = time.perf_counter()
    result = await Runner.run(agent, "go", max_turns=100)
    elapsed = time.perf_counter() - t0
    if result.final_output != "done":
        raise RuntimeError(f"unexpected end: {result.final_output!r}")
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
    result = await Runner.run(agent, "go", max_turns=100)
    if not result.interruptions:
        raise RuntimeError("not paused as planned")
    path.write_text(result.to_state().to_string())
    t0 = time.perf_counter()
    state = await RunState.from_string(agent, path.read_text())
    for item in state.get_interruptions():
        state.approve(item)
    done = await Runner.run(agent, state, max_turns=100)
    elapsed = time.perf_counter() - t0
    paid = [getattr(i, "output", None) for i in done.new_items if i.type == "tool_call_output_item"]
    if done.final_output != "done" or "paid 5.0" not in paid:
        raise RuntimeError(f"unexpected end: {done.final_output!r}, {paid!r}")
    return elapsed


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"framework": "openai-agents", "version": version("openai-agents")}
    note = "RunState.to_string() in a JSON file; read + from_string + approve + Runner.run"
    out["memory_sync_tool_per_turn_s"] = await per_turn(args.rounds, args.runs, sync=True)
    return await memory_and_resume(out, args, per_turn, resume_once, note)


def main() -> int:
    return run_script(REAL_STDOUT, main_async)


if __name__ == "__main__":
    raise SystemExit(main())

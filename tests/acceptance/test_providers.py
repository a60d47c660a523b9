"""The demo's agent file against an OpenAI-compatible server and Anthropic (their local
stand-ins, speaking each wire format), through the CLI: the run pauses for the refund, a
new process approves and finishes it, and every call has its receipt. The demo has a cost
limit, so a model it runs needs a price: Anthropic's is known, and the OpenAI-compatible
server's model is priced in a copy of the agent file."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.acceptance.test_cli_runs import Cli
from tests.integration import anthropic_wire as aw
from tests.integration import openai_wire as ow

from helpers import priced_demo
from oarlock.demo import AGENT_FILE

ASK = "Order A-1001 arrived broken. Please refund it."
FINAL = "Done. I refunded the full amount for order A-1001."
REFUND = {"order_id": "A-1001", "amount": 42.5, "reason": "arrived broken"}


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path)


@pytest.fixture
def openai_server() -> Iterator[ow.FakeOpenAI]:
    with ow.FakeOpenAI() as server:
        server.reply(
            ow.Reply(
                body=ow.chat_completion(
                    "Let me look up the order first.",
                    [("call_look", "lookup_order", json.dumps({"order_id": "A-1001"}))],
                )
            ),
            ow.Reply(
                body=ow.chat_completion(
                    "Refunding now.",
                    [
                        ("call_refund", "issue_refund", json.dumps(REFUND)),
                        ("call_policy", "refund_policy", json.dumps({"order_id": "A-1001"})),
                    ],
                )
            ),
            ow.Reply(body=ow.chat_completion(FINAL)),
        )
        yield server


@pytest.fixture
def anthropic_server() -> Iterator[aw.FakeAnthropic]:
    with aw.FakeAnthropic() as server:
        server.reply(
            aw.message(
                aw.text("Let me look up the order first."),
                aw.tool_use("lookup_order", {"order_id": "A-1001"}, id="toolu_look"),
            )
        )
        server.reply(
            aw.message(
                aw.text("Refunding now."),
                aw.tool_use("issue_refund", REFUND, id="toolu_refund"),
                aw.tool_use("refund_policy", {"order_id": "A-1001"}, id="toolu_policy"),
            )
        )
        server.reply(aw.message(aw.text(FINAL)))
        yield server


def run_to_the_end(
    cli: Cli, model: str, refund_call: str, agent_file: Path = AGENT_FILE
) -> dict[str, Any]:
    out = cli("run", str(agent_file), ASK, "--model", model)
    assert out.returncode == 0, out.stderr
    assert "waiting for a decision on " + refund_call in out.stdout
    (run,) = cli.runs()
    doc = cli.export(run["id"])
    assert doc["model"] == model and doc["status"] == "waiting_approval"
    out = cli("approve", run["id"], refund_call)  # a new process: the model comes back too
    assert out.returncode == 0, out.stderr
    doc = cli.export(run["id"])
    assert doc["status"] == "completed" and doc["result"] == FINAL
    assert cli("validate", "-", stdin=json.dumps(doc)).returncode == 0
    receipts = json.loads(cli.ok("receipts", "list", "--json"))
    assert sorted((r["tool"], r["status"]) for r in receipts) == [
        ("issue_refund", "Succeeded"),
        ("lookup_order", "Succeeded"),
        ("refund_policy", "Succeeded"),
    ]
    return doc


def test_the_demo_agent_runs_on_an_openai_compatible_server(
    cli: Cli, openai_server: ow.FakeOpenAI, tmp_path: Path
) -> None:
    model = f"openai-compatible:qwen2.5@{openai_server.base_url}"
    agent_file = priced_demo(tmp_path, "openai-compatible:qwen2.5@http://127.0.0.1:*")
    doc = run_to_the_end(cli, model, "call_refund", agent_file)
    assert doc["usage"]["costUsd"] > 0
    assert doc["usage"]["inputTokens"] > 0
    bodies = openai_server.bodies()
    assert len(bodies) == 3 and all(b["model"] == "qwen2.5" for b in bodies)
    assert bodies[0]["messages"][0]["role"] == "system"  # the agent's instructions
    assert {t["function"]["name"] for t in bodies[0]["tools"]} == {
        "lookup_order",
        "refund_policy",
        "issue_refund",
    }
    sent = {m["tool_call_id"]: m["content"] for m in bodies[2]["messages"] if m["role"] == "tool"}
    assert list(sent) == ["call_look", "call_refund", "call_policy"]  # in call order
    assert all(c.startswith("<untrusted-tool-result") for c in sent.values())


def test_the_demo_agent_runs_unchanged_on_anthropic(
    cli: Cli, anthropic_server: aw.FakeAnthropic
) -> None:
    cli.env["ANTHROPIC_BASE_URL"] = anthropic_server.base_url
    cli.env["ANTHROPIC_API_KEY"] = "sk-ant-test"
    doc = run_to_the_end(cli, f"anthropic:{aw.MODEL}", "toolu_refund")
    assert doc["usage"]["outputTokens"] > 0
    bodies = anthropic_server.bodies
    assert len(bodies) == 3 and "refund" in bodies[0]["system"]
    results = [b for b in bodies[2]["messages"][-1]["content"] if b["type"] == "tool_result"]
    assert [r["tool_use_id"] for r in results] == ["toolu_refund", "toolu_policy"]


def test_an_unknown_model_string_is_a_clear_error(cli: Cli) -> None:
    out = cli("run", str(AGENT_FILE), ASK, "--model", "gemini:pro")
    assert out.returncode == 1 and "unknown model 'gemini:pro'" in out.stderr
    out = cli("run", str(AGENT_FILE), ASK, "--model", "openai-compatible:qwen")
    assert out.returncode == 1 and "openai-compatible:MODEL@BASE_URL" in out.stderr


async def test_the_runner_streams_text_as_it_arrives_and_stores_the_whole() -> None:
    from oarlock.engine import Agent, Runner
    from oarlock.models._openai import OpenAIModel
    from oarlock.testing import MemoryStore

    with ow.FakeOpenAI() as server:
        server.reply(ow.Reply(events=ow.chat_chunks(["Hel", "lo, ", "world."])))
        model = OpenAIModel("qwen2.5", base_url=server.base_url, provider="openai-compatible")
        seen: list[str] = []
        runner = Runner(Agent("streamer", model), MemoryStore(), on_text=seen.append)
        doc = await runner.start("hi")
        assert server.bodies()[0]["stream"] is True
    assert seen == ["Hel", "lo, ", "world."]
    assert doc.status == "completed" and doc.result == "Hello, world."


def test_the_cli_streams_text_to_a_terminal(tmp_path: Path) -> None:
    import os
    import pty
    import subprocess
    import sys

    agent = tmp_path / "talker.yaml"
    (tmp_path / "s.yaml").write_text("- text: unused\n")
    agent.write_text("name: talker\nmodel: scripted:s.yaml\n")
    with ow.FakeOpenAI() as server:
        server.reply(ow.Reply(events=ow.chat_chunks(["Str", "eam", "ed."])))
        master, slave = pty.openpty()
        model = f"openai-compatible:qwen2.5@{server.base_url}"
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "oarlock.cli",
                "--db",
                str(tmp_path / "r.db"),
                "run",
                str(agent),
                "hi",
                "--model",
                model,
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=slave,
            timeout=60,
            check=False,
        )
        os.close(slave)
        seen = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
        os.close(master)
        assert server.bodies()[0]["stream"] is True  # streamed only because stderr is a tty
    assert proc.returncode == 0
    assert b"Streamed." in seen

"""The example agent files load, and the MCP example runs its real server: reads go
through, a write waits for a human, and every call leaves a receipt naming the server. The
bank support example runs as a script, offline and on a model its variable names, and
leaves a run whose document is valid."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from oarlock.engine import Runner
from oarlock.engine._agentfile import load_agent
from oarlock.models import ScriptedModel
from oarlock.testing import MemoryStore

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "agents"


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("refund-desk-openai", "openai:gpt-4.1"),
        ("refund-desk-anthropic", "anthropic:claude-sonnet-4-5"),
        ("refund-desk-ollama", "openai-compatible:qwen2.5@http://127.0.0.1:11434/v1"),
        ("notes-mcp", "openai:gpt-4.1"),
    ],
)
def test_every_example_agent_file_loads(name: str, model: str) -> None:
    agent = load_agent(EXAMPLES / f"{name}.yaml")
    assert agent.model.model_id == model
    assert len(agent.tools) == (0 if name == "notes-mcp" else 3)


async def test_the_mcp_example_runs_its_server_through_the_executor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.txt").write_text("buy milk")
    source = (EXAMPLES / "notes-mcp.yaml").read_text()
    (tmp_path / "notes_server.py").write_text((EXAMPLES / "notes_server.py").read_text())
    (tmp_path / "notes-mcp.yaml").write_text(
        source.replace("NOTES_DIR: notes", f"NOTES_DIR: {notes}")
    )
    script = ScriptedModel(
        [
            {
                "tool_calls": [
                    {"id": "c1", "name": "notes.list_notes", "arguments": {}},
                    {"id": "c2", "name": "notes.read_note", "arguments": {"name": "todo.txt"}},
                ]
            },
            {
                "tool_calls": [
                    {
                        "id": "c3",
                        "name": "notes.write_note",
                        "arguments": {"name": "todo.txt", "text": "buy milk and eggs"},
                    }
                ]
            },
            {"text": "Updated your todo note."},
        ]
    )
    agent = load_agent(tmp_path / "notes-mcp.yaml").with_model(script)
    store = MemoryStore()
    async with agent.connected():
        tools = {t.name: t.side_effect for t in agent.tools}
        assert tools == {
            "notes.list_notes": "read",
            "notes.read_note": "read",
            "notes.write_note": "shared-write",
        }
        runner = Runner(agent, store)
        doc = await runner.start("Add eggs to my todo note")
        assert doc.status == "waiting_approval"
        assert (notes / "todo.txt").read_text() == "buy milk"  # nothing written yet
        await runner.decide(doc.id, "c3", "approved", principal="me")
        doc = await runner.resume(doc.id)
    assert doc.status == "completed"
    assert (notes / "todo.txt").read_text() == "buy milk and eggs"
    receipts = await store.governance().receipts()
    assert sorted((r.invocation["toolId"], r.status) for r in receipts) == [
        ("notes.list_notes", "Succeeded"),
        ("notes.read_note", "Succeeded"),
        ("notes.write_note", "Succeeded"),
    ]
    assert {r.invocation["mcpServerId"] for r in receipts} == {"notes"}
    assert len(agent.tools) == 0  # the server's tools left with it


# -- examples/bank_support.py ---------------------------------------------------------------

BANK_SUPPORT = EXAMPLES.parent / "bank_support.py"
BALANCE_ADVICE = "Hello John, your balance, pending transactions included, is $123.45."
BLOCK_ADVICE = "John, your card is blocked; a new one is on its way."


def _python(tmp: Path, *argv: str, env: dict[str, str] | None = None) -> str:
    """``python ARGV`` in ``tmp``, which must succeed; what it printed."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OARLOCK_", "BANK_"))}
    done = subprocess.run(
        [sys.executable, *argv], cwd=tmp, env={**clean, **(env or {})}, capture_output=True,
        text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, (argv, done.stdout, done.stderr)
    return done.stdout


def _bank_support(tmp: Path, env: dict[str, str] | None = None) -> tuple[list[str], str]:
    """Run the example on a database in ``tmp``: the lines it printed, and its run's id."""
    lines = _python(tmp, str(BANK_SUPPORT), str(tmp / "bank.db"), env=env).splitlines()
    assert len(lines) == 5, lines
    assert lines[1] == "block_card waits for a decision"
    assert lines[3] == "blocked cards: [123]"
    found = re.fullmatch(r"run ([0-9a-f-]{36}): completed", lines[4])
    assert found is not None, lines[4]
    return lines, found.group(1)


def _exported_and_valid(tmp: Path, run_id: str) -> dict[str, Any]:
    """The run's document as ``oarlock runs export`` gives it, after ``oarlock validate``
    has found it valid."""
    text = _python(tmp, "-m", "oarlock.cli", "--db", str(tmp / "bank.db"), "runs", "export",
                   run_id[:8])  # fmt: skip
    (tmp / "run.json").write_text(text)
    checked = _python(tmp, "-m", "oarlock.cli", "validate", str(tmp / "run.json"))
    assert checked.strip().endswith("1 valid, 0 invalid"), checked
    assert "DatabaseConn" not in text and "customer_id" not in text  # deps are not stored
    doc: dict[str, Any] = json.loads(text)
    return doc


def test_the_bank_support_example_runs_offline_and_leaves_a_valid_run(tmp_path: Path) -> None:
    lines, run_id = _bank_support(tmp_path)
    assert lines[0] == f"support_advice={BALANCE_ADVICE!r} block_card=False risk=1"
    assert lines[2] == f"support_advice={BLOCK_ADVICE!r} block_card=True risk=8"
    doc = _exported_and_valid(tmp_path, run_id)
    assert (doc["status"], doc["turns"], doc["model"]) == ("completed", 4, "scripted:bank-support")
    assert json.loads(doc["result"]) == {
        "support_advice": BLOCK_ADVICE, "block_card": True, "risk": 8,
    }  # fmt: skip
    [decision] = doc["decisions"]
    assert (decision["toolName"], decision["decision"], decision["principal"]) == (
        "block_card", "approved", "teller:ana",
    )  # fmt: skip
    users = [
        part["text"]
        for m in doc["messages"]
        if m["role"] == "user"
        for part in m["content"]
        if part["type"] == "text"
    ]
    assert users == ["What is my balance?", "I just lost my card!"]


def test_the_bank_support_example_runs_on_the_model_its_variable_names(tmp_path: Path) -> None:
    from tests.integration import openai_wire as ow

    def answer(advice: str, block: bool, risk: int) -> ow.Reply:
        arguments = {"support_advice": advice, "block_card": block, "risk": risk}
        return ow.Reply(
            body=ow.chat_completion(None, [("c_final", "final_result", json.dumps(arguments))])
        )

    with ow.FakeOpenAI() as server:
        server.reply(
            ow.Reply(
                body=ow.chat_completion(
                    None, [("c_bal", "customer_balance", '{"include_pending": false}')]
                )
            ),
            answer("John, you have $100.00.", False, 1),
            ow.Reply(body=ow.chat_completion("Blocking it.", [("c_block", "block_card", "{}")])),
            answer("John, your card is blocked.", True, 9),
        )
        model = f"openai-compatible:bank-model@{server.base_url}"
        lines, run_id = _bank_support(tmp_path, {"BANK_SUPPORT_MODEL": model})
        bodies = server.bodies()
    assert lines[0] == "support_advice='John, you have $100.00.' block_card=False risk=1"
    assert lines[2] == "support_advice='John, your card is blocked.' block_card=True risk=9"
    assert len(bodies) == 4
    tools = {t["function"]["name"]: t["function"]["parameters"] for t in bodies[0]["tools"]}
    assert set(tools) == {"customer_balance", "block_card", "final_result"}
    assert set(tools["customer_balance"]["properties"]) == {"include_pending"}  # no ctx
    results = [m for m in bodies[1]["messages"] if m["role"] == "tool"]
    assert "John: $100.00" in results[0]["content"]
    doc = _exported_and_valid(tmp_path, run_id)
    assert (doc["model"], doc["turns"]) == (model, 4)
    assert doc["usage"]["inputTokens"] == 4 * 19

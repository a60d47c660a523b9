"""The example agent files load, and the MCP example runs its real server: reads go
through, a write waits for a human, and every call leaves a receipt naming the server."""

from __future__ import annotations

from pathlib import Path

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

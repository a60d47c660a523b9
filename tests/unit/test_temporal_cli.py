"""The command line's side of runs on Temporal that needs no server: the agent file's
``engine`` key, and a frontend that cannot be reached (refused in a line, nothing stored)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from oarlock.demo import AGENT_FILE
from oarlock.engine._agentfile import check_agent_file, load_agent
from oarlock.errors import ConfigError


def _agent(tmp_path: Path, engine: str) -> Path:
    text = Path(AGENT_FILE).read_text("utf-8")
    script = Path(AGENT_FILE).parent / "refund-desk.script.yaml"
    text = text.replace("scripted:refund-desk.script.yaml", f"scripted:{script}")
    path = tmp_path / "agent.yaml"
    path.write_text(text + f"engine: {engine}\n")
    return path


def test_engine_key(tmp_path):
    assert load_agent(AGENT_FILE).engine == "native"
    assert load_agent(_agent(tmp_path, "temporal")).engine == "temporal"
    checked = check_agent_file(_agent(tmp_path, "celery"))
    assert checked.agent is None
    assert any("engine: must be one of native, temporal, got 'celery'" in p
               for p in checked.problems)  # fmt: skip
    with pytest.raises(ConfigError):
        load_agent(_agent(tmp_path, "[1, 2]"))


def test_unreachable_frontend_is_refused_and_stores_nothing(tmp_path):
    db, agent = tmp_path / "runs.db", str(_agent(tmp_path, "temporal"))
    done = subprocess.run(
        [sys.executable, "-m", "oarlock.cli", "--db", str(db), "run", agent, "hello",
         "--address", "127.0.0.1:1", "--task-queue", "\x1b[31mq"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.startswith("oarlock: cannot reach Temporal at 127.0.0.1:1")
    assert "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("SELECT COUNT(*) FROM runs").fetchone() == (0,)
    finally:
        conn.close()


def test_where_a_run_is_driven_is_read_in_one_place():
    from oarlock._driven import TemporalTarget, driven_by
    from oarlock.engine import _core as core

    doc, _ = core.new_run(run_id="r", agent="a", model="m", input="hi", now="2026-01-01T00:00:00Z")
    assert driven_by(doc) is None
    target = TemporalTarget("127.0.0.1:7233", "q", "ns")
    setattr(doc, "drivenBy", target.member())  # noqa: B010 - an extension member
    assert driven_by(doc) == target
    setattr(doc, "drivenBy", {"engine": "celery"})  # noqa: B010
    assert driven_by(doc) is None
    setattr(doc, "drivenBy", {"engine": "temporal", "address": "h:1"})  # noqa: B010
    with pytest.raises(ConfigError) as refused:
        driven_by(doc)
    assert refused.value.code == "temporal_target"


class _Refusing:
    """A Temporal client with no execution of any workflow, that starts none."""

    def __init__(self) -> None:
        self.started: list[str] = []

    def get_workflow_handle(self, run_id: str) -> _Refusing:
        return self

    async def describe(self) -> None:
        from temporalio.service import RPCError, RPCStatusCode

        raise RPCError("workflow not found", RPCStatusCode.NOT_FOUND, b"")

    async def start_workflow(self, *args: object, id: str, **kwargs: object) -> None:
        from temporalio.service import RPCError, RPCStatusCode

        self.started.append(id)
        raise RPCError("connection refused", RPCStatusCode.UNAVAILABLE, b"")


def test_a_restart_whose_workflow_cannot_start_fails_the_run_to_be_retried():
    import asyncio

    from oarlock._driven import TemporalTarget
    from oarlock.engine import _core as core
    from oarlock.errors import RunStateError
    from oarlock.store import MemoryStore
    from oarlock.temporal import restart_run

    async def main() -> None:
        store = MemoryStore()
        doc, events = core.new_run(run_id="r", agent="a", model="m", input="hi",
                                   now="2026-01-01T00:00:00Z")  # fmt: skip
        setattr(doc, "drivenBy", TemporalTarget("127.0.0.1:1", "q").member())  # noqa: B010
        await store.create(doc, [*events, *core.fail(doc, "model down", "2026-01-01T00:00:01Z")])
        client = _Refusing()
        with pytest.raises(RunStateError) as not_completed:
            await restart_run(client, store, "r", "more")  # type: ignore[arg-type]
        assert not_completed.value.code == "run_state"
        with pytest.raises(ConfigError) as refused:
            await restart_run(client, store, "r")  # type: ignore[arg-type]
        assert refused.value.code == "temporal_unreachable"
        assert client.started == ["r"]
        stored = await store.load("r")
        assert stored.document.status == "failed"  # to be retried once Temporal answers
        assert stored.document.error is not None
        assert "could not be started again" in stored.document.error
        kinds = [e.kind for e in await store.events("r")]
        assert kinds[-2:] == ["status_changed", "status_changed"]  # running, then failed

    asyncio.run(main())

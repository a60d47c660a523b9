"""The flush rule under a power cut. A power cut keeps what the last flushed commit made
durable, and loses what came after it (a kill of the process loses nothing committed: the
crash tests cover that). So the store is copied at every flushed commit of a run (the
database and its log, as the disk holds them then), and the run is checked against those
copies:

- whenever the run acts outside the database (a model request, a side-effecting tool
  starting), the last copy holds what that act depends on: every outcome of a
  side-effecting call known so far, and the claim of the call about to start;
- whatever the run told its caller (a pause for approval, a decision) is in the copy made
  when it was told;
- from every copy, the run resumes to its end, each side-effecting call running at most
  once in all, and a call is Uncertain only if the copy has its claim and not its outcome.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from helpers import echo
from oarlock.engine import Agent, Limits, Runner
from oarlock.governance import RulePolicy
from oarlock.models import ModelRequest, ModelResponse, ScriptedModel
from oarlock.store import SQLiteStore
from oarlock.tools import tool

TURNS: list[dict[str, Any]] = [
    {"tool_calls": [{"id": "r1", "name": "echo", "arguments": {"text": "a"}},
                    {"id": "r2", "name": "echo", "arguments": {"text": "b"}}]},
    {"tool_calls": [{"id": "n1", "name": "note", "arguments": {"text": "c"}},
                    {"id": "r3", "name": "echo", "arguments": {"text": "d"}}]},
    {"tool_calls": [{"id": "r4", "name": "echo", "arguments": {"text": "e"}}]},
    {"tool_calls": [{"id": "p1", "name": "pay", "arguments": {"amount": 5}}]},
    {"text": "done"},
]  # fmt: skip
EFFECTS = ("note", "pay")  # the tools with an effect outside the database (one call each)


@dataclass
class World:
    """What happened outside the database, and the copies of the disk."""

    folder: Path
    copies: list[Path] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)  # effects, in order
    model_requests: list[tuple[int, list[str]]] = field(default_factory=list)
    """At each model request: the copies made so far, and the effects run so far."""
    effect_starts: list[tuple[str, int]] = field(default_factory=list)
    """Each effect as it starts, with the copies made so far."""


_WORLDS: list[World] = []  # the test's, for the tools and the store to record in


def _world() -> World:
    return _WORLDS[-1]


@tool(side_effect="external")
async def note(text: str) -> str:
    """Write a note outside (allowed by the policy below)."""
    world = _world()
    world.effect_starts.append(("note", len(world.copies)))
    world.ran.append("note")
    return f"noted {text}"


@tool(side_effect="spend")
async def pay(amount: float) -> str:
    """Pay (needs approval)."""
    world = _world()
    world.effect_starts.append(("pay", len(world.copies)))
    world.ran.append("pay")
    return f"paid {amount}"


class WatchedModel(ScriptedModel):
    async def respond(self, request: ModelRequest) -> ModelResponse:
        world = _world()
        world.model_requests.append((len(world.copies), list(world.ran)))
        return await super().respond(request)


class CopiedStore(SQLiteStore):
    """An SQLite store that copies its files after every flushed commit."""

    def transaction(self, doing: str, *, flush: bool = True) -> AbstractContextManager[None]:
        inner = super().transaction(doing, flush=flush)

        @contextmanager
        def copied() -> Iterator[None]:
            with inner:
                yield
            if flush:
                world = _world()
                target = world.folder / f"copy-{len(world.copies):03d}"
                target.mkdir()
                for suffix in ("", "-wal"):
                    source = Path(f"{self.path}{suffix}")
                    if source.exists():
                        shutil.copyfile(source, target / f"runs.db{suffix}")
                world.copies.append(target / "runs.db")

        return copied()


def agent() -> Agent:
    policy = RulePolicy(
        {"policy": "cut", "rules": [{"id": "notes", "effect": "allow", "match": {"tool": "note"}}]}
    )
    return Agent("cut", WatchedModel(TURNS), tools=[echo, note, pay], policy=policy,
                 limits=Limits(max_turns=20))  # fmt: skip


async def _state(copy: Path, run_id: str) -> tuple[Any, dict[str, str], set[str]]:
    """A copy's run document (None if the run is not there), the receipt status of each
    tool's call, and the tools whose call holds a claim."""
    scratch = copy.parent / "read"
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(copy.parent, scratch, ignore=shutil.ignore_patterns("read"))
    async with SQLiteStore(scratch / "runs.db") as store:
        runs = await store.list_runs()
        if not any(r.id == run_id for r in runs):
            return None, {}, set()
        doc = (await store.load(run_id)).document
        gov = store.governance()
        receipts = {r.invocation["toolId"]: r.status for r in await gov.receipts(run_id=run_id)}
        claims = {c.tool_id for c in await gov.open_claims() if c.run_id == run_id}
    shutil.rmtree(scratch)
    return doc, receipts, claims | set(receipts)


def test_every_flushed_copy_holds_what_the_world_was_told(tmp_path: Path) -> None:
    world = World(tmp_path)
    _WORLDS.append(world)
    acknowledged: list[tuple[int, str, int]] = []  # (copies then, what, version)

    async def original() -> str:
        async with CopiedStore(tmp_path / "runs.db") as store:
            runner = Runner(agent(), store)
            doc = await runner.start("go")
            assert doc.status == "waiting_approval", doc.error
            version = (await store.load(doc.id)).version
            acknowledged.append((len(world.copies), "paused", version))
            doc = await runner.decide(doc.id, "p1", "approved")
            version = (await store.load(doc.id)).version
            acknowledged.append((len(world.copies), "approved", version))
            doc = await runner.resume(doc.id)
            assert doc.status == "completed" and world.ran == ["note", "pay"]
            return doc.id

    run_id = asyncio.run(original())
    assert len(world.copies) >= 8

    # what the run told its caller was durable when it told it
    for copies, what, version in acknowledged:
        doc, _, _ = asyncio.run(_state(world.copies[copies - 1], run_id))
        assert doc is not None, what
        assert asyncio.run(_version(world.copies[copies - 1], run_id)) == version, what

    # every act outside the database finds its prerequisites durable
    effects_by_request = [done for _, done in world.model_requests]
    assert effects_by_request == [[], [], ["note"], ["note"], ["note", "pay"]]
    for copies, done in world.model_requests:
        if copies == 0:
            continue  # the first request: the run's creation rides on its response
        _, receipts, _ = asyncio.run(_state(world.copies[copies - 1], run_id))
        assert all(receipts.get(call) == "Succeeded" for call in done), (copies, receipts)
    for call, copies in world.effect_starts:
        _, _, claimed = asyncio.run(_state(world.copies[copies - 1], run_id))
        assert call in claimed, (call, copies)

    # from every copy, the run resumes to its end, each effect at most once in all
    for index, copy in enumerate(world.copies):
        before = [call for call, at in world.effect_starts if at <= index]
        doc, receipts, claimed = asyncio.run(_state(copy, run_id))
        assert doc is not None, index
        world.ran.clear()
        final, after = asyncio.run(_resume_from(copy, run_id))
        assert final.status == "completed", (index, final.status, final.error)
        again = [call for call in world.ran if call in before]
        assert again == [], (index, again)  # an effect that ran never runs again
        for call in EFFECTS:
            if after.get(call) == "Uncertain":  # only a claim without its outcome
                assert call in claimed and call not in receipts, (index, call)


async def _version(copy: Path, run_id: str) -> int:
    scratch = copy.parent / "v"
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(copy.parent, scratch, ignore=shutil.ignore_patterns("v", "read"))
    async with SQLiteStore(scratch / "runs.db") as store:
        version = (await store.load(run_id)).version
    shutil.rmtree(scratch)
    return version


async def _resume_from(copy: Path, run_id: str) -> tuple[Any, dict[str, str]]:
    scratch = copy.parent / "resume"
    shutil.copytree(copy.parent, scratch, ignore=shutil.ignore_patterns("resume", "read", "v"))
    async with SQLiteStore(scratch / "runs.db") as store:
        runner = Runner(agent(), store, lease_seconds=0.2)
        await asyncio.sleep(0.25)  # the dead process's lease lapses
        doc = await runner.resume(run_id)
        while doc.status == "waiting_approval":
            undecided = [a for a in doc.pending_approvals if a.decision is None]
            doc = await runner.decide(run_id, undecided[0].tool_call_id, "approved", resume=True)
        receipts = {
            r.invocation["toolId"]: r.status
            for r in await store.governance().receipts(run_id=run_id)
        }
    return doc, receipts

"""``oarlock run``, ``runs``, ``approve``, ``deny``, ``respond``, ``resume``, ``cancel``,
``replay`` and ``demo``: each opens the store, does one thing, and says what happened.

``runs list`` and ``runs show`` only read: they run synchronously, without asyncio, the
engine or pydantic (the store checks the document it reads without it), so that they start
in a few tens of milliseconds."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from oarlock.cli import EXIT_INVALID, EXIT_OK, EXIT_USAGE
from oarlock.cli._show import print_runs, print_summary, timeline
from oarlock.errors import ConfigError, OarlockError
from oarlock.store._sqlite import SQLiteStore, default_db_path

if TYPE_CHECKING:  # the engine and the models load only for commands that run agents
    from oarlock.engine._agent import Agent
    from oarlock.engine._runner import Runner
    from oarlock.formats._models import RunDocument
    from oarlock.store._base import Event, RunStore

__all__ = ["Command", "ReadCommand", "dispatch", "read_command", "refused", "run_command"]

T = TypeVar("T")
EXIT_HALTED = 3
_DONE_OK = {"completed", "waiting_approval", "running"}


def _db(args: argparse.Namespace) -> Path:
    return Path(args.db) if args.db else default_db_path()


def _tags(pairs: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise OarlockError(f"--tag needs KEY=VALUE, not {pair!r}", code="usage")
        out[key] = value
    return out


def _progress(doc: RunDocument, events: list[Event]) -> None:
    if not sys.stderr.isatty():
        return
    for ev in events:
        if ev.kind == "model_responded":
            calls = ev.data.get("toolCalls") or []
            sys.stderr.write(
                f"\r  turn {ev.data['turn']}: model answered"
                f"{f', calls {len(calls)} tool(s)' if calls else ''}\x1b[K"
            )
        elif ev.kind == "status_changed":
            sys.stderr.write(f"\r  status {ev.data['to']}\x1b[K\n")
    sys.stderr.flush()


def _stream(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()


def _runner(agent: Agent, store: RunStore) -> Runner:
    from oarlock.engine._runner import Runner

    on_text = _stream if sys.stderr.isatty() else None
    return Runner(agent, store, on_commit=_progress, watch_interval=0.25, on_text=on_text)


async def _with_store(args: argparse.Namespace, work: Callable[[RunStore], Awaitable[T]]) -> T:
    store = SQLiteStore(_db(args))
    try:
        return await work(store)
    finally:
        await store.close()


async def _agent_of(store: RunStore, run_id: str) -> Agent:
    """The run's agent, from its agent file, with the model the run was started with
    (``run --model`` may have named another than the file's)."""
    from oarlock.engine._agentfile import load_agent
    from oarlock.models._registry import load_model

    stored = await store.load(run_id)
    if not stored.agent_ref:
        raise OarlockError(
            f"run {run_id} has no agent file on record; resume it from Python with its Agent",
            code="no_agent_ref",
        )
    agent = load_agent(stored.agent_ref)
    model = stored.document.model
    if model != agent.model.model_id:
        try:
            agent = agent.with_model(load_model(model, Path(stored.agent_ref).parent))
        except ConfigError as exc:
            raise ConfigError(f"run {run_id} uses model {model}: {exc}", code=exc.code) from None
    return agent


def _load(agent_file: str, model: str | None) -> Agent:
    """The agent of an agent file, with ``--model`` if given: its script path, if it is
    one, is taken from here and stored whole, so that later commands, run from anywhere,
    find it; a cost limit needs its price, as in the file."""
    from oarlock.engine._agentfile import load_agent
    from oarlock.models._registry import load_model, scripted_path

    agent = load_agent(agent_file)
    if model is not None and model != agent.model.model_id:
        try:
            agent = agent.with_model(load_model(scripted_path(model, Path.cwd()), Path.cwd()))
        except ConfigError as exc:
            raise ConfigError(f"--model {model}: {exc}", code=exc.code) from None
    return agent


def _finish(doc: RunDocument) -> int:
    from oarlock.formats._codec import dump

    print_summary(dump(doc))
    return EXIT_OK if doc.status in _DONE_OK else EXIT_HALTED


async def _run(args: argparse.Namespace, store: RunStore) -> int:
    agent_file = str(Path(args.agent_file).resolve())
    agent = _load(agent_file, args.model)
    if args.detach:
        import subprocess

        runner = _runner(agent, store)
        doc, _ = await runner.create(args.input, tags=_tags(args.tag), agent_ref=agent_file)
        log = _db(args).with_suffix(f".{doc.id}.log")
        with open(log, "ab") as fh:
            subprocess.Popen(
                [sys.executable, "-m", "oarlock.cli", "--db", str(_db(args)), "resume", doc.id],
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        print(f"run {doc.id} started in the background (log: {log})")
        return EXIT_OK
    async with agent.connected():
        doc = await _runner(agent, store).start(
            args.input, tags=_tags(args.tag), agent_ref=agent_file
        )
    return _finish(doc)


def _list(args: argparse.Namespace, store: SQLiteStore) -> int:
    runs = store.read_runs(status=args.status, tags=_tags(args.tag), limit=args.limit)
    if args.json:
        print(json.dumps(runs, indent=2))
    elif runs:
        print_runs(runs)
    else:
        print("no runs")
    return EXIT_OK


def _show(args: argparse.Namespace, store: SQLiteStore) -> int:
    document = store.read_document(args.run_id)
    print("\n".join(timeline(document, store.read_events(args.run_id))))
    return EXIT_OK


async def _export(args: argparse.Namespace, store: RunStore) -> int:
    from oarlock.formats._codec import dump

    stored = await store.load(args.run_id)
    doc = stored.document
    doc.format = "oar/0.2"
    print(json.dumps(dump(doc), indent=2, ensure_ascii=False))
    return EXIT_OK


async def _decide(args: argparse.Namespace, store: RunStore) -> int:
    agent = await _agent_of(store, args.run_id)
    async with agent.connected():
        return await _decide_with(args, _runner(agent, store))


async def _decide_with(args: argparse.Namespace, runner: Runner) -> int:
    edited = None
    if getattr(args, "edit", None):
        try:
            edited = json.loads(args.edit)
        except ValueError as exc:
            raise OarlockError(f"--edit is not JSON: {exc}", code="usage") from None
        if not isinstance(edited, dict):
            raise OarlockError("--edit must be a JSON object", code="usage")
    doc = await runner.decide(
        args.run_id,
        args.call_id,
        args.decision,
        reason=args.reason,
        edited_arguments=edited,
        response=getattr(args, "text", None),
        principal=args.principal,
        expires_in=getattr(args, "expires_in", None),
    )
    print(f"{args.call_id}: {args.decision}")
    if doc.status == "running" and not args.no_resume:
        doc = await runner.resume(args.run_id)
    return _finish(doc)


async def _resume(args: argparse.Namespace, store: RunStore) -> int:
    agent = await _agent_of(store, args.run_id)
    async with agent.connected():
        doc = await _runner(agent, store).resume(args.run_id)
    return _finish(doc)


async def _cancel(args: argparse.Namespace, store: RunStore) -> int:
    from oarlock.engine._runner import cancel_run

    doc = await cancel_run(store, args.run_id, args.reason)
    print(f"run {doc.id}: cancelled")
    return EXIT_OK


async def _replay(args: argparse.Namespace, store: RunStore) -> int:
    from oarlock.engine._runner import Runner
    from oarlock.models._replay import ReplayModel

    stored = await store.load(args.run_id)
    base = await _agent_of(store, args.run_id)
    model = ReplayModel(stored.document)
    runner = Runner(base.with_model(model), store, replay_of=args.run_id)
    tags = {**(stored.document.tags or {}), "replay_of": args.run_id}
    async with runner.agent.connected():
        doc = await runner.start(stored.document.input, tags=tags, agent_ref=stored.agent_ref)
        while doc.status == "waiting_approval":
            doc = await _replay_decisions(runner, doc, store, args.run_id)
    print(
        f"replay run {doc.id}: {doc.status} after {doc.turns} turns "
        f"(original: {stored.document.status} after {stored.document.turns})"
    )
    if not model.divergences:
        print("no divergence: the replay matches the original")
        return EXIT_OK
    for d in model.divergences:
        print(
            f"diverges at message {d.message_index}:\n  original: {d.expected}\n"
            f"  replay:   {d.actual}"
        )
    return EXIT_INVALID


async def _replay_decisions(
    runner: Runner, doc: RunDocument, store: RunStore, original_id: str
) -> RunDocument:
    """Apply the original run's decisions to the replay's pending approvals."""
    decided = {
        e.data["toolCallId"]: e.data
        for e in await store.events(original_id)
        if e.kind == "approval_decided"
    }
    for appr in [a for a in doc.pending_approvals if a.decision is None]:
        d = decided.get(appr.tool_call_id)
        if d is None:
            return await runner.cancel(
                doc.id, f"the original run has no decision for {appr.tool_call_id}"
            )
        doc = await runner.decide(
            doc.id,
            appr.tool_call_id,
            d["decision"],
            reason=d.get("reason"),
            response=d.get("response"),
            edited_arguments=d.get("editedArguments"),
        )
    return await runner.resume(doc.id)


Command = Callable[[argparse.Namespace, "RunStore"], Awaitable[int]]
ReadCommand = Callable[[argparse.Namespace, SQLiteStore], int]

_READS: dict[str, ReadCommand] = {
    "runs list": _list,
    "runs show": _show,
}

_COMMANDS: dict[str, Command] = {
    "run": _run,
    "runs export": _export,
    "decide": _decide,
    "resume": _resume,
    "cancel": _cancel,
    "replay": _replay,
}


def run_command(args: argparse.Namespace, command: Command) -> int:
    """Run one command against the run database; an OarlockError becomes its message
    and exit status 1 (2 for a usage error)."""
    import asyncio

    try:
        return asyncio.run(_with_store(args, lambda store: command(args, store)))
    except OarlockError as exc:
        return refused(exc)


def read_command(args: argparse.Namespace, command: ReadCommand) -> int:
    """:func:`run_command` for a command that only reads: synchronous, no event loop."""
    try:
        with SQLiteStore(_db(args)) as store:
            return command(args, store)
    except OarlockError as exc:
        return refused(exc)


def refused(exc: OarlockError) -> int:
    """Say why a command was refused; its exit status (2 for a usage error, else 1)."""
    print(f"oarlock: {exc}", file=sys.stderr)
    return EXIT_USAGE if exc.code == "usage" else EXIT_INVALID


def dispatch(args: argparse.Namespace) -> int:
    read = _READS.get(args.action)
    if read is not None:
        return read_command(args, read)
    return run_command(args, _COMMANDS[args.action])

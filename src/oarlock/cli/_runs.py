"""``oarlock run``, ``runs``, ``approve``, ``deny``, ``respond``, ``resume``, ``cancel``,
``replay`` and ``demo``: each opens the store, does one thing, and says what happened.

The database is an SQLite file, or a PostgreSQL database when ``--db`` (or
``$OARLOCK_DB``) is a ``postgresql://`` or ``postgres://`` URL. ``runs list`` and ``runs
show`` only read: on SQLite they run synchronously, without asyncio, the engine or pydantic
(the store checks the document it reads without it), so that they start in a few tens of
milliseconds; on PostgreSQL they read through the store. Every command but ``run`` (and
``demo``) works on a database that exists: a mistyped ``--db`` is reported, never created,
and a PostgreSQL database without oarlock's tables is left without them.

Everything printed goes through the renderer (:mod:`oarlock._render`): ``line`` for a
line, ``dumps`` for JSON."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from oarlock._render import dumps, line
from oarlock.cli import EXIT_INVALID, EXIT_OK, refused
from oarlock.cli._live import Live
from oarlock.cli._show import print_runs, print_summary, timeline
from oarlock.errors import (
    ConfigError,
    ConflictError,
    LeaseLost,
    NotFound,
    OarlockError,
    RunBusy,
    UsageError,
)
from oarlock.store._dburl import is_postgres_url
from oarlock.store._sqlite import SQLiteStore, default_db_path

if TYPE_CHECKING:  # the engine and the models load only for commands that run agents
    from oarlock.engine._agent import Agent
    from oarlock.engine._runner import Runner
    from oarlock.formats._models import RunDocument
    from oarlock.governance._approvers import ApproverKey
    from oarlock.store._base import Event, RunStore
    from oarlock.store._postgres import PostgresStore

__all__ = [
    "Command",
    "ReadCommand",
    "dispatch",
    "open_store",
    "read_command",
    "refused",
    "run_command",
]

T = TypeVar("T")
EXIT_HALTED = 3
_DONE_OK = {"completed", "waiting_approval", "running"}
# the commands that may create the database; every other one needs it to exist
_CREATES = frozenset({"run"})
# the terminal view of the command running in this process (progress and streamed text)
_live = Live()


def _db(args: argparse.Namespace) -> Path | str:
    """``--db`` (else ``$OARLOCK_DB``, else the default file): a PostgreSQL URL as it is,
    anything else a path. Shown only through the renderer, which hides a URL's password."""
    if args.db:
        return args.db if is_postgres_url(args.db) else Path(args.db)
    explicit = os.environ.get("OARLOCK_DB")
    if explicit and is_postgres_url(explicit):
        return explicit
    return default_db_path()


def command_line(args: argparse.Namespace) -> str:
    """``oarlock``, with ``--db`` when the database is not the one a command given in
    this shell finds by itself (the default, or ``$OARLOCK_DB``): the start of a command
    to copy."""
    import shlex

    given = getattr(args, "db", None)
    if not given or given == os.environ.get("OARLOCK_DB"):
        return "oarlock"
    return f"oarlock --db {line(shlex.quote(str(given)))}"


def open_store(args: argparse.Namespace, *, create: bool = False) -> SQLiteStore | PostgresStore:
    """The run database of ``--db``; unless ``create``, one that exists (else NotFound,
    "no database at PATH", or for a PostgreSQL URL a database without oarlock's
    tables)."""
    db = _db(args)
    if isinstance(db, str):
        import logging

        from oarlock.store._postgres import PostgresStore

        # the pool's own warnings (a failed reconnection attempt) would reach the terminal
        # unrendered; the command reports what fails through the renderer instead
        logging.getLogger("psycopg").addHandler(logging.NullHandler())
        return PostgresStore(db, create=create)
    return SQLiteStore(db, create=create)


def _tags(pairs: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise OarlockError(f"--tag needs KEY=VALUE, not {line(pair)}", code="usage")
        out[key] = value
    return out


def _runner(agent: Agent, store: RunStore, approver: ApproverKey | None = None) -> Runner:
    from oarlock.engine._runner import Runner

    # the terminal shows the runner's stream of events: progress lines and streamed text
    return Runner(
        agent,
        store,
        watch_interval=0.25,
        approver=approver,
        on_event=_live.show if _live.enabled() else None,
    )


def _approver(args: argparse.Namespace, agent: Agent) -> ApproverKey | None:
    """The key an approval is signed with (see ``oarlock.cli._keys.approval_signer``)."""
    from oarlock.cli._keys import approval_signer

    return approval_signer(args, agent)


async def _with_store(
    args: argparse.Namespace, work: Callable[[RunStore], Awaitable[T]], *, create: bool
) -> T:
    store = open_store(args, create=create)
    try:
        if isinstance(getattr(args, "run_id", None), str):
            args.run_id = one_run(args.run_id, await store.ids_starting(args.run_id, limit=6))
        if isinstance(getattr(args, "run", None), str):  # a filter: no run, no receipts
            found = await store.ids_starting(args.run, limit=6)
            args.run = one_run(args.run, found) if found else args.run
        return await work(store)
    finally:
        await store.close()
        _live.close()


def one_run(given: str, found: Sequence[str]) -> str:
    """The run ``given`` names, of the ids ``found`` starting with it: itself if it is
    one, else the only one. NotFound if there is none; UsageError if several."""
    if given in found:
        return given
    if len(found) == 1:
        return found[0]
    if not found:
        raise NotFound(f"no run {given}")
    some = ", ".join(found[:5])
    more = ", ..." if len(found) > 5 else ""
    raise UsageError(
        f"{given} starts the ids of several runs ({some}{more}): give more of it",
        code="ambiguous_run_id",
    )


async def _agent_of(store: RunStore, run_id: str) -> Agent:
    """The run's agent, from its agent file, with the model the run was started with
    (``run --model`` may have named another than the file's)."""
    from oarlock.engine._agentfile import run_agent

    stored = await store.load(run_id)
    return run_agent(stored.agent_ref, stored.document.model, run_id)


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


def _finish(doc: RunDocument, args: argparse.Namespace) -> int:
    from oarlock.formats._codec import dump

    print_summary(dump(doc), command_line(args))
    return EXIT_OK if doc.status in _DONE_OK else EXIT_HALTED


async def _run(args: argparse.Namespace, store: RunStore) -> int:
    tags = _tags(args.tag)
    agent_file = str(Path(args.agent_file).resolve())
    agent: Agent = args.loaded_agent  # loaded before the store opened (see dispatch)
    if (args.on or agent.engine) == "temporal":
        from oarlock._driven import TemporalTarget
        from oarlock.engine import _dispatch as dispatch

        address, queue = args.address or dispatch.default_address(), args.task_queue
        target = TemporalTarget(address, queue or dispatch.DEFAULT_QUEUE, args.namespace)
        doc = await dispatch.start(store, agent, args.input, target, agent_ref=agent_file,
                                   tags=tags, wait=not args.detach, told=_tell)  # fmt: skip
        return EXIT_OK if args.detach else _finish(doc, args)
    if args.detach:
        doc = await _runner(agent, store).submit(
            args.input, tags=tags, agent_ref=agent_file, queue=args.queue
        )
        print(f"run {line(doc.id)} submitted to queue {line(args.queue)}")
        await _worker_advice(store, args.queue)
        return EXIT_OK
    async with agent.connected():
        runner = _runner(agent, store)
        doc = await runner.start(args.input, tags=tags, agent_ref=agent_file, queue=args.queue)
    return _finish(await _taken(doc, runner), args)


# a worker that has not heartbeaten for a minute is taken for gone, in advice
_ALIVE_WITHIN = 60.0


async def _worker_advice(store: RunStore, queue: str) -> None:
    """Say how to start a worker when none is alive (a submitted run waits for one)."""
    from oarlock.store._queue import RunQueue

    if isinstance(store, RunQueue) and not await store.workers(within_seconds=_ALIVE_WITHIN):
        option = "" if queue == "default" else f" --queue {line(queue)}"
        print(f"no worker is running: start one with: oarlock worker{option}")


async def _taken(doc: RunDocument, runner: Runner) -> RunDocument:
    """``doc``; when another process holds it (a worker claimed the run before this
    command could drive it), say who and until when."""
    if doc.status == "running" and (holder := await _holder(runner, doc.id)) is not None:
        print(holder)
    return doc


def _run_json(run: dict[str, Any]) -> dict[str, Any]:
    """A run of ``read_runs`` as ``runs list --json`` prints it (camelCase members; the
    holder and deadline of a live lease, else null)."""
    from oarlock.cli._show import lease_text

    return {
        "id": run["id"],
        "agent": run["agent"],
        "status": run["status"],
        "tags": run["tags"],
        "turns": run["turns"],
        "createdAt": run["created_at"],
        "updatedAt": run["updated_at"],
        "tenant": run["tenant"],
        "holder": run["holder"],
        "leaseUntil": lease_text(run["lease_until"]) or None,
    }


def _list(args: argparse.Namespace, store: SQLiteStore) -> int:
    runs = store.read_runs(status=args.status, tags=_tags(args.tag), limit=args.limit)
    if args.json:
        print(dumps([_run_json(r) for r in runs]))
    elif runs:
        print_runs(runs)
    else:
        print("no runs")
    return EXIT_OK


def _show(args: argparse.Namespace, store: SQLiteStore) -> int:
    document = store.read_document(args.run_id)
    print("\n".join(_shown(args, document, store.read_events(args.run_id))))
    return EXIT_OK


def _shown(
    args: argparse.Namespace, document: dict[str, Any], events: Sequence[dict[str, Any]]
) -> list[str]:
    """The run's timeline, or with ``--trace`` its span tree (from its event log)."""
    if not getattr(args, "trace", False):
        return timeline(document, events)
    from oarlock.telemetry._tree import render_tree, span_tree

    trace_id, roots = span_tree(document, events)
    return render_tree(args.run_id, trace_id, roots)


async def _list_async(args: argparse.Namespace, store: RunStore) -> int:
    """``runs list`` through the store (PostgreSQL)."""
    import dataclasses

    found = await store.list_runs(status=args.status, tags=_tags(args.tag), limit=args.limit)
    runs = [dataclasses.asdict(r) for r in found]
    if args.json:
        print(dumps([_run_json(r) for r in runs]))
    elif runs:
        print_runs(runs)
    else:
        print("no runs")
    return EXIT_OK


async def _show_async(args: argparse.Namespace, store: RunStore) -> int:
    """``runs show`` through the store (PostgreSQL)."""
    from oarlock.formats._codec import dump

    stored = await store.load(args.run_id)
    events = [
        {"seq": e.seq, "kind": e.kind, "at": e.at, "data": e.data}
        for e in await store.events(args.run_id)
    ]
    print("\n".join(_shown(args, dump(stored.document), events)))
    return EXIT_OK


async def _follow(args: argparse.Namespace, store: RunStore) -> int:
    """``runs show --follow``: the run's heading, then its messages and its status changes
    and decisions as they are committed, until it ends (Ctrl-C stops following; the run
    goes on)."""
    import asyncio

    from oarlock.cli._show import closing, event_line, message_lines
    from oarlock.engine._core import TERMINAL
    from oarlock.formats._codec import dump

    stored = await store.load(args.run_id)
    past = await store.events(args.run_id)
    first = dump(stored.document)
    decisions = [
        {"seq": e.seq, "kind": e.kind, "at": e.at, "data": e.data}
        for e in past
        if e.kind == "approval_decided"
    ]
    so_far = timeline(first, decisions)[: -len(closing(first)) - 1]  # all but the closing
    print("\n".join(so_far), flush=True)
    shown, seq = len(message_lines(first, {})), max((e.seq for e in past), default=0)
    while True:
        doc = stored.document
        messages = message_lines(dump(doc), {})
        decided: list[str] = []  # decisions lead to results; what calls lead to follows
        after: list[str] = []
        for event in await store.events(args.run_id):
            if event.seq > seq:
                seq = event.seq
                text = event_line({"kind": event.kind, "at": event.at, "data": event.data})
                if text is not None:
                    (decided if event.kind == "approval_decided" else after).append(text)
        news = [*decided, *messages[shown:], *after]
        shown = len(messages)
        if news:
            print("\n".join(news), flush=True)
        if doc.status in TERMINAL:
            print("\n".join(["", *closing(dump(doc))]))
            return EXIT_OK if doc.status == "completed" else EXIT_HALTED
        await asyncio.sleep(args.interval)
        stored = await store.load(args.run_id)


async def _export(args: argparse.Namespace, store: RunStore) -> int:
    from oarlock.formats._codec import dump

    stored = await store.load(args.run_id)
    doc = stored.document
    doc.format = "oar/0.2"
    print(dumps(dump(doc)))
    return EXIT_OK


def _tell(text: str) -> None:
    """What the dispatch tells a person (a decision stored, how to start a worker)."""
    print(line(text), flush=True)


async def _decide(args: argparse.Namespace, store: RunStore) -> int:
    """A decision, where the run is driven (:mod:`oarlock.engine._dispatch`): here, by
    this process's runner, or by the run's Temporal workflow."""
    from oarlock.cli._keys import principal_default
    from oarlock.engine import _dispatch as dispatch

    edited = _edited(getattr(args, "edit", None))
    decided_here: list[int] = []  # the exit status of a decision made here

    async def here() -> RunDocument:
        agent = await _agent_of(store, args.run_id)
        approver = _approver(args, agent) if args.decision == "approved" else None
        async with agent.connected():
            doc, code = await _decide_with(args, _runner(agent, store, approver), edited)
        decided_here.append(code)
        return doc

    doc = await dispatch.decide(
        store, args.run_id, args.call_id, args.decision, native=here, reason=args.reason,
        edited_arguments=edited, response=getattr(args, "text", None),
        principal=args.principal or principal_default(),
        expires_in=getattr(args, "expires_in", None), wait=not args.no_resume,
        own_key=bool(getattr(args, "key", None)), told=_tell,
    )  # fmt: skip
    return decided_here[0] if decided_here else _finish(doc, args)


def _edited(text: str | None) -> dict[str, Any] | None:
    """The arguments of ``--edit``: a JSON object of finite numbers."""
    if not text:
        return None
    import json

    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not a JSON number")

    def finite(number: str) -> float:
        value = float(number)
        if value in (float("inf"), float("-inf")):
            raise ValueError(f"{number} is too large for a JSON number")
        return value

    try:
        edited = json.loads(text, parse_constant=refuse, parse_float=finite)
    except RecursionError:
        raise OarlockError("--edit is nested too deeply", code="usage") from None
    except ValueError as exc:
        raise OarlockError(f"--edit is not JSON: {exc}", code="usage") from None
    if not isinstance(edited, dict):
        raise OarlockError("--edit must be a JSON object", code="usage")
    return edited


async def _decide_with(
    args: argparse.Namespace, runner: Runner, edited: dict[str, Any] | None
) -> tuple[RunDocument, int]:
    """The decision made by ``runner``: the run as it then stands, and the exit status."""
    from oarlock.cli._keys import principal_default

    said: list[bool] = []
    shown = runner.on_commit

    def say(doc: RunDocument, events: list[Event]) -> None:
        """The decision's line once it is stored, before the drive that follows it."""
        if not said and any(
            e.kind == "approval_decided" and e.data.get("toolCallId") == args.call_id
            for e in events
        ):
            said.append(True)
            print(f"{line(args.call_id)}: {args.decision}", flush=True)
        if shown is not None:
            shown(doc, events)

    runner.on_commit = say
    try:
        doc = await runner.decide(
            args.run_id,
            args.call_id,
            args.decision,
            reason=args.reason,
            edited_arguments=edited,
            response=getattr(args, "text", None),
            # else the approver key's principal, else the user's
            principal=args.principal or (None if runner.approver else principal_default()),
            expires_in=getattr(args, "expires_in", None),
            resume=not args.no_resume,  # under the run's lease from the decision on
        )
    except ConflictError as exc:
        if isinstance(exc, RunBusy | LeaseLost) or exc.code not in ("conflict", "busy"):
            raise
        raise _busy(args.run_id) from None
    if not said:
        print(f"{line(args.call_id)}: {args.decision}")
    if doc.status == "running" and not args.no_resume:
        holder = await _holder(runner, doc.id)
        if holder is not None:  # another process held the run: the decision is its to act on
            print(holder)
            return doc, EXIT_OK
    return doc, _finish(doc, args)


async def _resumed(runner: Runner, run_id: str) -> RunDocument:
    """``runner.resume``; a run another process holds is refused (RunBusy, naming the
    holder and its lease's deadline), and so is one another process saved a step of
    while this one worked on the same step (code ``run_busy``)."""
    try:
        return await runner.resume(run_id)
    except ConflictError as exc:
        if isinstance(exc, RunBusy | LeaseLost) or exc.code not in ("conflict", "busy"):
            raise
        raise _busy(run_id) from None


def _busy(run_id: str) -> OarlockError:
    return OarlockError(
        f"run {run_id} is being run by another process (it saved a step while this one "
        f"was taking the same step); see where it stands with: oarlock runs show {run_id}",
        code="run_busy",
    )


async def _holder(runner: Runner, run_id: str) -> str | None:
    """ "run X is being driven by OWNER until T" when another process holds the run."""
    from oarlock.store._queue import RunQueue

    store = runner.store
    if not isinstance(store, RunQueue):
        return None
    for lease in await store.leases():
        if lease.run_id == run_id and lease.owner != runner.owner:
            from oarlock.cli._show import lease_text

            return (
                f"run {line(run_id)} is being driven by {line(lease.owner)} until "
                f"{lease_text(lease.until)}"
            )
    return None


async def _resume(args: argparse.Namespace, store: RunStore) -> int:
    from oarlock.engine._dispatch import driver

    # a run Temporal drives is refused before its agent is looked for
    driver((await store.load(args.run_id)).document, "resume")
    agent = await _agent_of(store, args.run_id)
    async with agent.connected():
        doc = await _resumed(_runner(agent, store), args.run_id)
    return _finish(doc, args)


async def _again(args: argparse.Namespace, store: RunStore, text: str | None) -> int:
    """``continue`` (``text``) or ``retry``, where the run is driven: here, by this
    process's runner, or in a new execution of the run's Temporal workflow (the
    transition committed here first), waited on as ``run --on temporal`` does."""
    from oarlock.engine import _dispatch as dispatch
    from oarlock.telemetry._setup import default_observer

    async def here() -> RunDocument:
        agent = await _agent_of(store, args.run_id)
        async with agent.connected():
            runner = _runner(agent, store)
            if text is None:
                return await runner.retry(args.run_id)
            return await runner.continue_run(args.run_id, text)

    doc = await dispatch.again(store, args.run_id, text, native=here,
                               on_commit=default_observer().committed, told=_tell)  # fmt: skip
    return _finish(doc, args)


async def _continue(args: argparse.Namespace, store: RunStore) -> int:
    return await _again(args, store, args.text)


async def _retry(args: argparse.Namespace, store: RunStore) -> int:
    return await _again(args, store, None)


async def _cancel(args: argparse.Namespace, store: RunStore) -> int:
    """A cancellation, where the run is driven: in the store, or by the run's Temporal
    workflow (its cancel signal, not waited on)."""
    from oarlock.engine import _dispatch as dispatch
    from oarlock.engine._runner import cancel_run
    from oarlock.telemetry._setup import default_observer

    async def here() -> RunDocument:
        doc = await cancel_run(store, args.run_id, args.reason,
                               on_commit=default_observer().committed)  # fmt: skip
        print(f"run {line(doc.id)}: cancelled")
        if any(a.decision is None for a in doc.pending_approvals):
            await _record_cancelled(store, doc)
        return doc

    await dispatch.cancel(store, args.run_id, args.reason, native=here, told=_tell)
    return EXIT_OK


async def _record_cancelled(store: RunStore, doc: RunDocument) -> None:
    """The calls a cancelled run left waiting for a decision, on the ledger as cancelled
    (through its agent's executor); said when its agent cannot be loaded."""
    from oarlock.engine._runner import Runner
    from oarlock.engine._settled import record_settled_calls

    try:
        runner = Runner(await _agent_of(store, doc.id), store)
    except OarlockError as exc:
        print(f"oarlock: the calls it left waiting are not on the ledger: {line(exc.message)}",
              file=sys.stderr)  # fmt: skip
        return
    await record_settled_calls(runner.agent, runner.executor, doc, runner._ctx(doc))


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
        f"replay run {line(doc.id)}: {line(doc.status)} after {doc.turns} turns "
        f"(original: {line(stored.document.status)} after {stored.document.turns})"
    )
    if not model.divergences:
        print("no divergence: the replay matches the original")
        return EXIT_OK
    for d in model.divergences:
        print(
            f"diverges at message {d.message_index}:\n  original: {line(d.expected)}\n"
            f"  replay:   {line(d.actual)}"
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
        reason = d.get("reason")
        if d["decision"] == "denied" and not reason:  # a denial stored before the rule
            reason = "denied in the original run"
        doc = await runner.decide(
            doc.id,
            appr.tool_call_id,
            d["decision"],
            reason=reason,
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
_ASYNC_READS: dict[str, Command] = {
    "runs list": _list_async,
    "runs show": _show_async,
}

_COMMANDS: dict[str, Command] = {
    "run": _run,
    "runs export": _export,
    "decide": _decide,
    "resume": _resume,
    "continue": _continue,
    "retry": _retry,
    "cancel": _cancel,
    "replay": _replay,
}


def run_command(args: argparse.Namespace, command: Command) -> int:
    """Run one command against the run database; an OarlockError becomes its message
    and exit status 1 (2 for a usage error). Only ``run`` may create the database."""
    import asyncio

    create = getattr(args, "action", None) in _CREATES
    try:
        return asyncio.run(_with_store(args, lambda store: command(args, store), create=create))
    except OarlockError as exc:
        return refused(exc)


def read_command(args: argparse.Namespace, command: ReadCommand) -> int:
    """:func:`run_command` for a command that only reads: synchronous, no event loop, and
    never creating the database."""
    try:
        store = open_store(args)
        if not isinstance(store, SQLiteStore):
            raise OarlockError("a read command needs an SQLite database", code="usage")
        with store:
            if isinstance(getattr(args, "run_id", None), str):
                args.run_id = one_run(args.run_id, store.read_ids_starting(args.run_id, limit=6))
            return command(args, store)
    except OarlockError as exc:
        return refused(exc)


def dispatch(args: argparse.Namespace) -> int:
    if getattr(args, "follow", False):
        try:
            return run_command(args, _follow)
        except KeyboardInterrupt:
            print()
            return 130
    read = _READS.get(args.action)
    if read is not None and isinstance(_db(args), str):
        return run_command(args, _ASYNC_READS[args.action])
    if read is not None:
        return read_command(args, read)
    if args.action == "run":  # a bad agent file must not leave a new, empty database
        try:
            args.loaded_agent = _load(str(Path(args.agent_file).resolve()), args.model)
        except OarlockError as exc:
            return refused(exc)
    return run_command(args, _COMMANDS[args.action])

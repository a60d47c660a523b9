"""``oarlock worker`` (drive the runs of a database until stopped) and ``oarlock workers``
(the live workers, their heartbeat age and the runs they hold).

The worker prints one line for each thing it does, through the renderer, and stops
gracefully on SIGTERM or SIGINT (a second one stops every run in hand at once)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Any

from oarlock._render import dumps, line
from oarlock.cli import EXIT_OK, refused
from oarlock.errors import OarlockError

if TYPE_CHECKING:
    from oarlock.store._queue import WorkerInfo
    from oarlock.worker import WorkerEvent

__all__ = ["dispatch"]

_SAYS = {
    "claimed": "claimed",
    "finished": "",
    "handed_back": "handed back",
    "lease_lost": "lease lost",
    "failed": "failed",
    "expired": "",
    "recovered": "released",
    "error": "error",
}


def _say(worker: str, event: WorkerEvent) -> None:
    """One line for what the worker did."""
    detail = line(event.detail)
    if event.kind in ("started", "stopping"):
        text = f"worker {line(worker)} {event.kind}: {detail}"
    elif event.kind == "stopped":
        text = f"worker {line(worker)} stopped"
    elif event.run_id is None:
        text = f"worker {line(worker)}: {line(_SAYS.get(event.kind, event.kind))}: {detail}"
    else:
        what = _SAYS.get(event.kind, event.kind)
        said = f"{what} ({detail})" if what else detail
        text = f"run {line(event.run_id)}: {said}"
    print(text, flush=True)


def _log(worker: str, event: WorkerEvent) -> None:
    """What the worker did, as a log record (``--log-format json``: a JSON line)."""
    import logging

    level = logging.WARNING if event.kind in ("error", "failed", "lease_lost") else logging.INFO
    logging.getLogger("oarlock.worker").log(
        level, "%s: %s", event.kind, event.detail, extra={"run_id": event.run_id, "worker": worker}
    )


def _settings(args: argparse.Namespace) -> Any:
    from oarlock.worker import WorkerSettings

    return WorkerSettings(
        concurrency=args.concurrency,
        tenants=tuple(args.tenant) if args.tenant else None,
        queues=(args.queue,),
        poll=args.poll,
        heartbeat=args.heartbeat,
        lease=args.lease,
        max_run_time=args.max_run_time,
        drain=args.drain,
    )


async def _work(args: argparse.Namespace) -> int:
    import asyncio
    import signal

    from oarlock.cli._runs import open_store
    from oarlock.worker import Worker

    settings = _settings(args)  # a bad setting is refused before the database is opened
    store = open_store(args)
    try:
        tell = _log if getattr(args, "log_format", "text") == "json" else _say
        worker = Worker(store, settings, on_event=lambda e: tell(worker.owner, e))
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, worker.stop)
        from oarlock._gc import settle

        settle()  # what start-up made stays out of the full collections
        try:
            await worker.run()
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
    finally:
        await store.close()
    return EXIT_OK


def _age(heartbeat_at: str, now: float) -> float:
    from oarlock.formats._time import parse_rfc3339

    parsed = parse_rfc3339(heartbeat_at)
    if parsed is None:
        return float("nan")
    return max(0.0, now - (parsed[0].timestamp() + float(parsed[1])))


def _worker_json(worker: WorkerInfo, now: float) -> dict[str, Any]:
    return {
        "worker": worker.owner,
        "host": worker.host,
        "pid": worker.pid,
        "startedAt": worker.started_at,
        "heartbeatAt": worker.heartbeat_at,
        "heartbeatAgeSeconds": round(_age(worker.heartbeat_at, now), 3),
        "concurrency": worker.concurrency,
        "runs": list(worker.held),
    }


def _print_workers(workers: list[WorkerInfo], now: float) -> None:
    rows = [
        (
            w.owner,
            w.host,
            w.pid,
            f"{_age(w.heartbeat_at, now):.1f} s ago",
            f"{len(w.held)}/{w.concurrency}",
            " ".join(line(r) for r in w.held),
        )
        for w in workers
    ]
    if not sys.stdout.isatty():
        for row in rows:
            print("\t".join(line(value) for value in row))
        return
    from rich.console import Console
    from rich.table import Table

    from oarlock._render import cell

    table = Table(box=None, pad_edge=False)
    for col in ("worker", "host", "pid", "heartbeat", "runs", "holding"):
        table.add_column(col, no_wrap=col in ("worker", "heartbeat"))
    for row in rows:
        table.add_row(*(cell(value) for value in row))
    Console().print(table)


async def _list(args: argparse.Namespace) -> int:
    from oarlock.cli._runs import open_store

    store = open_store(args)
    try:
        workers = await store.workers(within_seconds=args.within)
    finally:
        await store.close()
    now = time.time()
    if args.json:
        print(dumps([_worker_json(w, now) for w in workers]))
    elif workers:
        _print_workers(workers, now)
    else:
        print(f"no worker has sent a heartbeat in the last {args.within:g} s")
    return EXIT_OK


def dispatch(args: argparse.Namespace) -> int:
    import asyncio

    work = _work if args.action == "worker" else _list
    try:
        return asyncio.run(work(args))
    except OarlockError as exc:
        return refused(exc)

"""``oarlock demo``: the refund desk, end to end and offline."""

from __future__ import annotations

import argparse
import asyncio
import sys

from oarlock._render import line
from oarlock.cli import EXIT_INVALID, EXIT_OK, refused
from oarlock.cli._live import Live
from oarlock.cli._runs import _db, open_store
from oarlock.cli._show import print_pending, print_summary
from oarlock.demo import AGENT_FILE
from oarlock.engine._agentfile import load_agent
from oarlock.engine._runner import Runner
from oarlock.errors import OarlockError
from oarlock.formats._codec import dump
from oarlock.formats._models import RunDocument

__all__ = ["run_demo"]

REQUEST = "Order A-1001 arrived broken. Please refund it."


def _ask(doc: RunDocument) -> bool:
    for appr in doc.pending_approvals:
        if appr.decision is None:
            print(f"\n{line(appr.tool_name)} wants to run with {line(appr.arguments)}")
    try:
        answer = input("Approve? [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


async def _demo(args: argparse.Namespace) -> int:
    import shlex

    db = line(shlex.quote(str(_db(args))))
    store = open_store(args, create=True)
    live = Live()
    try:
        runner = Runner(load_agent(AGENT_FILE), store, on_event=live.show)
        print(f"> {REQUEST}")
        doc = await runner.start(REQUEST, tags={"demo": "refund-desk"}, agent_ref=str(AGENT_FILE))
        while doc.status == "waiting_approval":
            live.close()
            print(f"\nrun {line(doc.id)} paused: a refund needs a human")
            print_pending(dump(doc))
            approve = args.yes or (sys.stdin.isatty() and _ask(doc))
            if not approve and not sys.stdin.isatty():
                print(
                    f"\nleft waiting. Approve with: oarlock --db {db} approve {line(doc.id)} "
                    f"{line(doc.pending_approvals[0].tool_call_id)}"
                )
                return EXIT_OK
            for appr in [a for a in doc.pending_approvals if a.decision is None]:
                doc = await runner.decide(
                    doc.id,
                    appr.tool_call_id,
                    "approved" if approve else "denied",
                    reason=None if approve else "declined at the prompt",
                )
                print(f"{line(appr.tool_call_id)}: {'approved' if approve else 'denied'}")
            doc = await runner.resume(doc.id)
        live.close()
        print()
        print_summary(dump(doc))
        print(f"stored in {db}; see it with: oarlock --db {db} runs show {line(doc.id)}")
        return EXIT_OK if doc.status == "completed" else EXIT_INVALID
    finally:
        live.close()
        await store.close()


def run_demo(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_demo(args))
    except OarlockError as exc:
        return refused(exc)

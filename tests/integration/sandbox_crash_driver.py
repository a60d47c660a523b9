"""Runs an agent file whose one tool is a ``sandbox``-class Python tool, against an SQLite
file, in its own process, and SIGKILLs itself at a chosen point of the sandboxed call, so
that a test can recover the run from another process (resume, retry, a worker).

    python sandbox_crash_driver.py AGENT_FILE DB RUN_ID MODE

MODE is where the process dies:

* ``none``: no kill; the run goes to its end;
* ``before-claim``: on entry to the governance store's ``begin`` (nothing of the call is
  stored);
* ``in-child``: while the sandboxed program runs (its claim and invocation committed; the
  sandbox dies with its parent: bubblewrap's ``--die-with-parent``);
* ``after-child``: on entry to the store's ``finish``: the program ended, no receipt;
* ``after-receipt``: right after ``finish`` committed the receipt, before the step's save.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

from oarlock.engine._agentfile import load_agent
from oarlock.engine._runner import Runner
from oarlock.sandbox._runner import SandboxRunner
from oarlock.store._sqlite import SQLiteStore

INPUT = "Probe the sandbox."


def die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def _arm(mode: str, gov: Any) -> None:
    if mode == "before-claim":
        real_begin = gov.begin

        async def begin(*args: Any, **kwargs: Any) -> Any:
            die()
            return await real_begin(*args, **kwargs)

        gov.begin = begin
    elif mode in ("after-child", "after-receipt"):
        real_finish = gov.finish

        async def finish(*args: Any, **kwargs: Any) -> Any:
            if mode == "after-child":
                die()
            done = await real_finish(*args, **kwargs)
            die()
            return done

        gov.finish = finish
    elif mode == "in-child":
        real_execute = SandboxRunner._execute

        async def execute(self: SandboxRunner, *args: Any, **kwargs: Any) -> Any:
            asyncio.get_running_loop().call_later(1.5, die)  # the program sleeps 4 s
            return await real_execute(self, *args, **kwargs)

        SandboxRunner._execute = execute  # type: ignore[method-assign]
    elif mode != "none":
        raise SystemExit(f"unknown mode {mode!r}")


async def main(agent_file: str, db: str, run_id: str, mode: str) -> int:
    agent_ref = str(Path(agent_file).resolve())
    agent = load_agent(agent_ref)
    store = SQLiteStore(db)
    runner = Runner(agent, store)
    _arm(mode, runner.executor.store)
    doc = await runner.start(INPUT, run_id=run_id, agent_ref=agent_ref)
    await store.close()
    print(f"{doc.id} {doc.status}")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main(*sys.argv[1:5])))

"""The runner's operations for Python code: a run with its result, conversations that go on
in one document, retries, and the same from code that is not async.

A mixin of :class:`~oarlock.engine.Runner`, kept apart so that the runner's own module stays
the drive: what a run is, not how callers ask for one."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any, cast

from oarlock.engine import _core as core
from oarlock.engine._result import RunResult, synchronously
from oarlock.engine._stream import StreamEvent

if TYPE_CHECKING:
    from oarlock.engine._runner import Runner
    from oarlock.formats._models import Message, RunDocument

__all__ = ["Conversations"]


def _runner(mixin: object) -> Runner:
    return cast("Runner", mixin)


class Conversations:
    """``run``, ``run_sync``, ``continue_run``, ``retry`` (see each)."""

    async def run(
        self,
        input: str,
        *,
        deps: Any = None,
        message_history: Sequence[Message] = (),
        tags: dict[str, str] | None = None,
        agent_ref: str | None = None,
        run_id: str | None = None,
    ) -> RunResult[Any]:
        """Start a run and drive it until it finishes or waits for a human: its
        :class:`RunResult` (``output``, ``pending_approvals``, ``approve(...)``...).
        ``deps`` reach the tools that take the RunContext, and are never stored;
        ``message_history`` are earlier messages the conversation starts from."""
        doc = await _runner(self).start(
            input,
            tags=tags,
            agent_ref=agent_ref,
            run_id=run_id,
            deps=deps,
            message_history=message_history,
        )
        return RunResult(_runner(self), doc)

    def run_sync(
        self,
        input: str,
        *,
        deps: Any = None,
        message_history: Sequence[Message] = (),
        tags: dict[str, str] | None = None,
        agent_ref: str | None = None,
        run_id: str | None = None,
    ) -> RunResult[Any]:
        """:meth:`run` from code that is not async: a script, or a notebook whose event loop
        is running (the run then goes on a loop of its own, in a worker thread)."""
        return synchronously(
            self.run(
                input,
                deps=deps,
                message_history=message_history,
                tags=tags,
                agent_ref=agent_ref,
                run_id=run_id,
            )
        )

    async def continue_run(
        self, run_id: str, text: str, *, deps: Any = None
    ) -> RunDocument:
        """Continue a completed run with a new user message and drive it on: a chat is one
        document that keeps growing and stays valid (in this process or any other)."""
        runner = _runner(self)
        return await runner._again(
            run_id, lambda d: core.continue_run(d, text, runner.clock()), deps
        )

    async def retry(self, run_id: str, *, deps: Any = None) -> RunDocument:
        """Run again a run that failed (a model that stayed unavailable past the retries,
        say) or halted at a limit since raised, from its last committed step."""
        runner = _runner(self)
        return await runner._again(run_id, lambda d: core.retry_run(d, runner.clock()), deps)

    # -- streams ---------------------------------------------------------------------------
    def stream(
        self,
        input: str,
        *,
        deps: Any = None,
        message_history: Sequence[Message] = (),
        tags: dict[str, str] | None = None,
        agent_ref: str | None = None,
        run_id: str | None = None,
    ) -> AsyncIterator[StreamEvent]:
        """:meth:`run` as a stream of events (see :mod:`oarlock.engine._stream`), the last
        ``Finished`` with the RunResult."""
        runner = _runner(self)
        run_id = run_id or str(uuid.uuid4())
        return runner._streams.follow(
            run_id,
            lambda: runner.run(
                input,
                deps=deps,
                message_history=message_history,
                tags=tags,
                agent_ref=agent_ref,
                run_id=run_id,
            ),
        )

    def stream_resume(self, run_id: str, *, deps: Any = None) -> AsyncIterator[StreamEvent]:
        """``resume`` as a stream of events."""
        runner = _runner(self)

        async def work() -> RunResult[Any]:
            return RunResult(runner, await runner.resume(run_id, deps=deps))

        return runner._streams.follow(run_id, work)

    def stream_continue(
        self, run_id: str, text: str, *, deps: Any = None
    ) -> AsyncIterator[StreamEvent]:
        """``continue_run`` as a stream of events."""
        runner = _runner(self)

        async def work() -> RunResult[Any]:
            return RunResult(runner, await runner.continue_run(run_id, text, deps=deps))

        return runner._streams.follow(run_id, work)

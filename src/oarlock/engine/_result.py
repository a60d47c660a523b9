"""What a run gives back to Python code: :class:`RunResult`, and running coroutines from
code that is not async (a script, a notebook whose event loop is already running)."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from oarlock.errors import RunStateError

if TYPE_CHECKING:
    from oarlock.engine._runner import Runner
    from oarlock.formats._models import PendingApproval, RunDocument, Usage

__all__ = ["RunResult", "synchronously"]

T = TypeVar("T")
OutputT = TypeVar("OutputT")


def synchronously(work: Coroutine[Any, Any, T]) -> T:
    """Run ``work`` to its end from code that is not async. Without a running event loop,
    on a new one (``asyncio.run``); inside one (a notebook, an async framework calling sync
    code), on a new loop in a worker thread, so that the caller's loop is not re-entered."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(work)
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="oarlock-sync") as pool:
        return pool.submit(asyncio.run, work).result()


class RunResult(Generic[OutputT]):
    """A run as it stands after a call of the runner: its status, its output (typed by the
    agent's ``output_type``), what waits for a human, usage and cost, the document; and
    the decisions, which go through the same path as ``oarlock approve`` (a signed
    approval, bound to the call's exact arguments) and drive the run on."""

    def __init__(self, runner: Runner, document: RunDocument) -> None:
        self.runner, self.document = runner, document

    def __repr__(self) -> str:
        return f"RunResult(run_id={self.run_id!r}, status={self.status!r})"

    @property
    def run_id(self) -> str:
        return self.document.id

    @property
    def status(self) -> str:
        return self.document.status

    @property
    def output(self) -> OutputT:
        """The answer of a completed run: the agent's ``output_type`` validated from the
        stored JSON, or the text. RunStateError while the run has not completed."""
        doc = self.document
        if doc.status != "completed" or doc.result is None:
            why = f": {doc.error}" if doc.error else ""
            raise RunStateError(
                f"run {doc.id} is {doc.status}{why}; it has no output", code="no_output"
            )
        return self.runner.agent.output.parse(doc.result)  # type: ignore[no-any-return]

    @property
    def error(self) -> str | None:
        return self.document.error

    @property
    def pending_approvals(self) -> list[PendingApproval]:
        """The calls waiting for a decision."""
        return [a for a in self.document.pending_approvals if a.decision is None]

    @property
    def usage(self) -> Usage:
        return self.document.usage

    @property
    def cost_usd(self) -> float | None:
        """The run's cost, or None when a model of the run has no price."""
        usage = self.document.usage
        known = (usage.model_extra or {}).get("costKnown", True)
        return None if known is False else usage.cost_usd

    # -- decisions and what follows -------------------------------------------------------
    async def approve(
        self,
        call_id: str,
        *,
        edit: dict[str, Any] | None = None,
        principal: str | None = None,
        expires_in: float | None = None,
        deps: Any = None,
    ) -> RunResult[OutputT]:
        """Approve a waiting call (with ``edit``, these arguments instead) and go on."""
        doc = await self.runner.decide(
            self.run_id,
            call_id,
            "approved",
            edited_arguments=edit,
            principal=principal,
            expires_in=expires_in,
            resume=True,
            deps=deps,
        )
        return RunResult(self.runner, doc)

    async def deny(
        self, call_id: str, reason: str, *, principal: str | None = None, deps: Any = None
    ) -> RunResult[OutputT]:
        doc = await self.runner.decide(
            self.run_id, call_id, "denied", reason=reason, principal=principal, resume=True,
            deps=deps,
        )  # fmt: skip
        return RunResult(self.runner, doc)

    async def respond(
        self, call_id: str, text: str, *, principal: str | None = None, deps: Any = None
    ) -> RunResult[OutputT]:
        """Answer in a tool's place (a tool that allows it) and go on."""
        doc = await self.runner.decide(
            self.run_id, call_id, "responded", response=text, principal=principal,
            resume=True, deps=deps,
        )  # fmt: skip
        return RunResult(self.runner, doc)

    async def continue_with(self, text: str, *, deps: Any = None) -> RunResult[OutputT]:
        """Continue the completed run's conversation with a new user message."""
        doc = await self.runner.continue_run(self.run_id, text, deps=deps)
        return RunResult(self.runner, doc)

    # -- the same, for code that is not async --------------------------------------------
    def approve_sync(self, call_id: str, **kw: Any) -> RunResult[OutputT]:
        return synchronously(self.approve(call_id, **kw))

    def deny_sync(self, call_id: str, reason: str, **kw: Any) -> RunResult[OutputT]:
        return synchronously(self.deny(call_id, reason, **kw))

    def respond_sync(self, call_id: str, text: str, **kw: Any) -> RunResult[OutputT]:
        return synchronously(self.respond(call_id, text, **kw))

    def continue_with_sync(self, text: str, **kw: Any) -> RunResult[OutputT]:
        return synchronously(self.continue_with(text, **kw))

"""How a plain ``def`` tool is called from the event loop.

A sync function may block (a network call, a lock, a sleep), so by default it runs in a
worker thread: the loop keeps driving every other run meanwhile. The hop costs tens of
microseconds a call, more than the rest of a governed call in memory. So a ``read`` tool
that has shown itself quick is called on the loop itself:

- its first :data:`PROBES` calls run in the thread, each timed inside it; if every one of
  them finished within :data:`BUDGET`, later calls run on the loop;
- a call on the loop that takes longer than :data:`BUDGET` sends the tool back to the
  thread for good (the loop was held that once);
- a call on the loop that raises ``RuntimeError`` sends the tool back to the thread too,
  and runs again there: the function may need a thread of its own (``asyncio.run`` refuses
  a running loop so). Only a ``read`` call may run twice so; no other class is ever called
  on the loop unless its tool says ``blocking=False``. Any other error is the tool's
  answer, as it would have been in the thread.

``blocking=True`` keeps a tool in the thread always; ``blocking=False`` calls it on the loop
always (the author vouches that it never blocks). A tool with a timeout stays in the
thread, where the timeout can leave it behind."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

__all__ = ["BUDGET", "PROBES", "SyncCaller"]

BUDGET = 0.001  # seconds a call on the loop may take
PROBES = 8  # quick calls in the thread before the loop is tried


class SyncCaller:
    """Calls one sync function, learning where (see the module documentation)."""

    __slots__ = ("_fn", "_learns", "_quick", "on_loop")

    def __init__(self, fn: Callable[..., Any], *, blocking: bool | None, learns: bool) -> None:
        self._fn = fn
        self.on_loop = blocking is False
        self._learns = blocking is None and learns
        self._quick = 0  # quick calls in the thread so far

    async def __call__(self, arguments: dict[str, Any]) -> Any:
        if self.on_loop:
            if not self._learns:
                return self._fn(**arguments)
            start = time.perf_counter()
            try:
                return self._fn(**arguments)
            except RuntimeError:
                # ``asyncio.run`` or ``run_until_complete`` refuse a running loop: the
                # function needs a thread of its own; other errors are the tool's answer
                self._back_to_thread()
            finally:
                if time.perf_counter() - start > BUDGET:
                    self._back_to_thread()
        return await self._in_thread(arguments)

    async def _in_thread(self, arguments: dict[str, Any]) -> Any:
        took = [float("inf")]

        def timed() -> Any:
            start = time.perf_counter()
            try:
                return self._fn(**arguments)
            finally:
                took[0] = time.perf_counter() - start

        try:
            return await asyncio.to_thread(timed)
        finally:
            if self._learns:
                self._learn(took[0])

    def _learn(self, took: float) -> None:
        if took > BUDGET:
            self._learns = False  # a slow call: the thread for good
            return
        self._quick += 1
        if self._quick >= PROBES:
            self.on_loop = True

    def _back_to_thread(self) -> None:
        self.on_loop, self._learns = False, False

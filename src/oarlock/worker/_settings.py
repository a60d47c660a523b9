"""A worker's settings, checked when they are made."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from oarlock.errors import UsageError

__all__ = ["MAX_CONCURRENCY", "WorkerSettings"]

MAX_CONCURRENCY = 10_000


def _seconds(name: str, value: object, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise UsageError(f"{name} must be a number of seconds above 0, not {value!r}")


def _names(name: str, value: object) -> None:
    if value is None:
        return
    if (
        isinstance(value, str)
        or not isinstance(value, Sequence)
        or not value
        or not all(isinstance(v, str) and v for v in value)
    ):
        raise UsageError(f"{name} must be a list of non-empty names, not {value!r}")


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """How a worker works.

    * ``concurrency``: how many runs it drives at once.
    * ``tenants``, ``queues``: the runs it claims (``tenants=None``: every tenant's;
      ``queues=None``: every queue's).
    * ``poll``: the longest it waits between looks for work when it has a free slot (a
      run made runnable in this process, or on SQLite by another process's commit, wakes
      it sooner).
    * ``heartbeat``: how often it records that it is alive and renews the lease of every
      run it holds (one timer).
    * ``lease``: how long a lease lasts past its last renewal, the missed-heartbeat
      threshold: a worker silent this long loses its runs to others. At least twice the
      heartbeat, so that one late heartbeat loses nothing.
    * ``max_run_time``: the longest one drive of a run may take (None: no limit); past
      it, the drive is stopped and the run fails. Separate from liveness: a drive that
      heartbeats is alive, however long it runs.
    * ``drain``: on shutdown, how long the runs in hand may take to finish their current
      step before they are stopped.
    """

    concurrency: int = 4
    tenants: tuple[str, ...] | None = None
    queues: tuple[str, ...] | None = ("default",)
    poll: float = 1.0
    heartbeat: float = 5.0
    lease: float = 30.0
    max_run_time: float | None = 3600.0
    drain: float = 30.0

    def __post_init__(self) -> None:
        concurrency = self.concurrency
        if (
            isinstance(concurrency, bool)
            or not isinstance(concurrency, int)
            or not 1 <= concurrency <= MAX_CONCURRENCY
        ):
            raise UsageError(
                f"concurrency must be a whole number from 1 to {MAX_CONCURRENCY}, "
                f"not {concurrency!r}"
            )
        _names("tenants", self.tenants)
        _names("queues", self.queues)
        for name in ("poll", "heartbeat", "lease", "drain"):
            _seconds(name, getattr(self, name))
        _seconds("max_run_time", self.max_run_time, optional=True)
        if self.lease < 2 * self.heartbeat:
            raise UsageError(
                f"the lease ({self.lease:g} s) must last at least two heartbeats "
                f"({self.heartbeat:g} s each), so that one late heartbeat loses no run"
            )

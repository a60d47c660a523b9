"""What a long-running oarlock process made at start-up, kept out of the garbage
collector's full collections.

A full collection traverses every object the collector tracks. With oarlock, its
dependencies and their pydantic validators imported, that is some 50,000 objects and 9 to
28 ms of CPU on a 2-core machine, during which the process's event loop stands still: every
run the process drives waits. The modules, the settings and the agents a worker or the
server loads at start-up live as long as the process, so the processes oarlock runs itself
collect once after their start-up and freeze what survives (:func:`gc.freeze`): later full
collections skip it (0.0 ms for those 50,000 objects), and what the runs make is collected
as before. A library user's own process is left to its owner.
"""

from __future__ import annotations

import gc

__all__ = ["settle"]


def settle() -> int:
    """Collect, then freeze every object that survived; how many are frozen in all."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()

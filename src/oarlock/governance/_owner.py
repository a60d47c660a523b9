"""Which process holds an idempotency claim, and whether it still runs.

An owner is ``host:pid:start`` where ``start`` is the process's start time (field 22 of
``/proc/<pid>/stat``), so a reused pid is not mistaken for the holder. On another host the
answer is unknown, and the claim's lease decides instead."""

from __future__ import annotations

import os

__all__ = ["holder_dead", "host_name", "owner_alive", "process_owner"]


def host_name() -> str:
    """This host's name, as ``socket.gethostname()`` gives it (from ``uname`` where there
    is one, which spares a command that reads the import of ``socket``)."""
    uname = getattr(os, "uname", None)
    if uname is not None:
        return str(uname().nodename)
    import socket

    return socket.gethostname()


def _start_time(pid: int | str) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if not fields or fields[0] in ("Z", "X"):  # a zombie has stopped running
        return None
    return fields[19] if len(fields) > 19 else None


_cache: tuple[int, str] | None = None


def process_owner() -> str:
    """This process as a claim's owner (recomputed after a fork)."""
    global _cache  # noqa: PLW0603
    pid = os.getpid()
    if _cache is None or _cache[0] != pid:
        _cache = (pid, f"{host_name()}:{pid}:{_start_time(pid) or '0'}")
    return _cache[1]


def owner_alive(owner: str) -> bool | None:
    """True or False for an owner on this host; None when it is on another host."""
    parts = owner.rsplit(":", 2)
    if len(parts) != 3 or parts[0] != host_name() or not parts[1].isdigit():
        return None
    started = _start_time(parts[1])
    return started is not None and started == parts[2]


def holder_dead(holder: str) -> bool:
    """Whether a lease holder (``proc:HOST:PID`` or ``worker:HOST:PID:...``) is a process
    of this host that no longer runs. False when that cannot be told (another host, a pid
    that runs, whatever process it is now): its lease then runs to its deadline."""
    parts = holder.split(":")
    if len(parts) < 3 or parts[1] != host_name() or not parts[2].isdigit():
        return False
    return int(parts[2]) != os.getpid() and _start_time(parts[2]) is None

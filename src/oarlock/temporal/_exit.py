"""The end of a process that used Temporal's SDK, made safe.

The SDK's Rust core completes each call on a thread of its own, which takes the GIL to
hand the result to the event loop and gives it back after. A process whose main thread
ends in between (a command refused at once, its connection refused, say) starts to
finalize the interpreter while that thread still waits for the GIL; made to exit there,
the thread aborts the process (``Fatal Python error: PyGILState_Release``, SIGABRT, or a
segmentation fault: temporalio/sdk-python#300).

:func:`register` (at the import of :mod:`oarlock.temporal`) has :func:`settle` run at exit,
while the interpreter is still whole: it frees what holds clients, then gives the GIL up
until no thread but Python's own holds a thread state (the SDK's threads have taken the
GIL and given it back), for at most a second."""

from __future__ import annotations

import atexit

__all__ = ["register", "settle"]

_BOUND = 1.0  # seconds: far more than a thread that was waiting for the GIL takes
_registered: list[bool] = []


def register() -> None:
    """Have :func:`settle` run at exit (once, however often this is called)."""
    if not _registered:
        _registered.append(True)
        atexit.register(settle)


def settle(bound: float = _BOUND) -> bool:
    """Free unreachable objects (clients in a refusal's traceback), then wait, the GIL
    given up, until every thread state of the interpreter is a Python thread's, or
    ``bound`` seconds pass; whether it was so in time."""
    import gc
    import time

    gc.collect()
    deadline = time.monotonic() + bound
    while True:
        states = thread_states()
        if states is None:  # an interpreter that does not say: a moment for them all
            time.sleep(0.05)
            return False
        if states <= _python_threads():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.002)


def thread_states() -> int | None:
    """How many thread states the interpreter holds: one for each Python thread, and one
    for each other thread while it takes, holds or gives back the GIL (None when the
    interpreter's API cannot be reached). Read with the GIL held, which a thread state of
    the GIL's is removed under."""
    import ctypes

    try:
        api = ctypes.pythonapi
        current, head, following = (
            api.PyInterpreterState_Get,
            api.PyInterpreterState_ThreadHead,
            api.PyThreadState_Next,
        )
    except (AttributeError, OSError):
        return None
    current.argtypes, current.restype = [], ctypes.c_void_p
    head.argtypes, head.restype = [ctypes.c_void_p], ctypes.c_void_p
    following.argtypes, following.restype = [ctypes.c_void_p], ctypes.c_void_p
    count, state = 0, head(current())
    while state:
        count += 1
        state = following(state)
    return count


def _python_threads() -> int:
    """The Python threads alive (threads of other code that called into Python once, kept
    by ``threading`` as dummies, hold no thread state once they are done)."""
    import threading

    dummy = getattr(threading, "_DummyThread", ())
    return sum(1 for t in threading.enumerate() if not isinstance(t, dummy))

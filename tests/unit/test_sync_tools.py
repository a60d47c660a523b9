"""Where a plain ``def`` tool is called: in a worker thread, or on the event loop once a
``read`` tool has shown itself quick (oarlock.tools._sync)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from oarlock.errors import ConfigError
from oarlock.tools import _sync, tool
from oarlock.tools._sync import PROBES

BUDGET = 0.05  # the budget in these tests: a quick call here is far below it, however loaded
SLOW = BUDGET * 3  # the machine, and a slow one far above


@pytest.fixture(autouse=True)
def _budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_sync, "BUDGET", BUDGET)


def _recorder(pause: float = 0.0) -> tuple[list[bool], Any]:
    """A def function that records, each call, whether it ran on the loop's thread."""
    on_loop: list[bool] = []
    main = threading.get_ident()

    def look(sku: str) -> str:
        on_loop.append(threading.get_ident() == main)
        if pause:
            time.sleep(pause)
        return sku

    return on_loop, look


async def _call(t: Any, times: int) -> None:
    for _ in range(times):
        assert await t.call({"sku": "A"}) == "A"


async def test_a_quick_read_tool_moves_to_the_loop_after_its_probes() -> None:
    on_loop, fn = _recorder()
    t = tool(side_effect="read")(fn)
    await _call(t, PROBES + 3)
    assert on_loop == [False] * PROBES + [True] * 3


async def test_a_slow_probe_keeps_the_tool_in_the_thread_for_good() -> None:
    on_loop, fn = _recorder()
    slow = {"now": True}

    def look(sku: str) -> str:
        if slow["now"]:
            time.sleep(SLOW)
        return str(fn(sku))

    t = tool(side_effect="read", name="look")(look)
    await _call(t, 1)
    slow["now"] = False
    await _call(t, PROBES * 2)
    assert not any(on_loop)


async def test_a_slow_call_on_the_loop_sends_the_tool_back_to_the_thread() -> None:
    on_loop, fn = _recorder()
    slow = {"now": False}

    def look(sku: str) -> str:
        result = str(fn(sku))
        if slow["now"]:
            time.sleep(SLOW)
        return result

    t = tool(side_effect="read", name="look")(look)
    await _call(t, PROBES + 1)
    assert on_loop[-1] is True
    slow["now"] = True
    await _call(t, 1)  # on the loop, too slow
    slow["now"] = False
    await _call(t, PROBES * 2)
    assert on_loop[PROBES + 1] is True
    assert not any(on_loop[PROBES + 2 :])


async def test_a_function_that_needs_its_own_loop_is_run_again_in_the_thread() -> None:
    calls: list[str] = []
    nested = {"now": False}

    async def inner() -> str:
        return "inner"

    def look(sku: str) -> str:
        calls.append(sku)
        if not nested["now"]:
            return "plain"
        coro = inner()
        try:
            return asyncio.run(coro)  # refused on a running loop: RuntimeError
        except RuntimeError:
            coro.close()
            raise

    t = tool(side_effect="read")(look)
    for _ in range(PROBES):
        assert await t.call({"sku": "A"}) == "plain"
    assert t._sync.on_loop
    nested["now"] = True
    for _ in range(3):
        assert await t.call({"sku": "A"}) == "inner"
    # the probes; then one call refused on the loop and run again in the thread; then the
    # thread for good
    assert len(calls) == PROBES + 4
    assert not t._sync.on_loop


async def test_an_error_on_the_loop_is_the_tools_answer_and_runs_once() -> None:
    calls: list[str] = []

    def look(sku: str) -> str:
        calls.append(sku)
        if sku == "missing":
            raise KeyError(sku)
        return sku

    t = tool(side_effect="read")(look)
    for _ in range(PROBES):
        await t.call({"sku": "A"})
    with pytest.raises(KeyError):
        await t.call({"sku": "missing"})
    assert calls.count("missing") == 1
    main = threading.get_ident()
    seen: list[int] = []
    t.fn = lambda sku: seen.append(threading.get_ident()) or sku
    t._sync._fn = t.fn
    await t.call({"sku": "A"})
    assert seen == [main]  # still on the loop


EFFECTS = ["shared-write", "external", "production", "publication", "spend"]


@pytest.mark.parametrize("side_effect", EFFECTS)
async def test_a_tool_with_effects_stays_in_the_thread(side_effect: str) -> None:
    on_loop, fn = _recorder()
    t = tool(side_effect=side_effect)(fn)
    await _call(t, PROBES * 2)
    assert not any(on_loop)


async def test_blocking_true_keeps_a_read_tool_in_the_thread() -> None:
    on_loop, fn = _recorder()
    t = tool(side_effect="read", blocking=True)(fn)
    await _call(t, PROBES * 2)
    assert not any(on_loop)


async def test_blocking_false_calls_on_the_loop_from_the_first_call_whatever_it_takes() -> None:
    on_loop, fn = _recorder(pause=SLOW)
    t = tool(side_effect="shared-write", blocking=False)(fn)
    await _call(t, 3)
    assert on_loop == [True, True, True]


async def test_a_read_tool_with_a_timeout_stays_in_the_thread() -> None:
    on_loop, fn = _recorder()
    t = tool(side_effect="read", timeout_seconds=5)(fn)
    await _call(t, PROBES * 2)
    assert not any(on_loop)


def test_blocking_false_with_a_timeout_is_refused() -> None:
    _, fn = _recorder()
    with pytest.raises(ConfigError, match="timeout_seconds"):
        tool(side_effect="read", blocking=False, timeout_seconds=5)(fn)


def test_blocking_must_be_a_boolean() -> None:
    _, fn = _recorder()
    with pytest.raises(ConfigError, match="blocking must be"):
        tool(side_effect="read", blocking="yes")(fn)  # type: ignore[arg-type]

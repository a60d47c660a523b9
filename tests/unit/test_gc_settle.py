"""The processes oarlock runs itself freeze what their start-up made (oarlock._gc)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from oarlock._gc import settle


class _Node:
    me: _Node | None = None


@pytest.fixture
def unfrozen() -> Iterator[None]:
    yield
    gc.unfreeze()


def test_settle_collects_the_garbage_then_freezes_what_survives(unfrozen: None) -> None:
    kept: list[object] = [object()]
    cycle = _Node()
    cycle.me = cycle  # garbage only a collection frees
    gone = weakref.ref(cycle)
    del cycle
    frozen = settle()
    assert gone() is None  # collected first, not frozen with the rest
    assert frozen == gc.get_freeze_count() > 0
    assert not any(o is kept for o in gc.get_objects())  # no full collection traverses it
    later: list[object] = [object()]
    assert any(o is later for o in gc.get_objects())  # what comes after is collected as ever

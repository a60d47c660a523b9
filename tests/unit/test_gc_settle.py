"""The processes oarlock runs itself freeze what their start-up made (oarlock._gc)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from oarlock._gc import settle
from oarlock.store import SQLiteStore


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


def test_a_worker_and_the_server_settle_before_they_serve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``oarlock worker`` and ``oarlock serve`` call settle once their start-up is done,
    before their loop (their loops are stubbed here)."""
    import uvicorn

    import oarlock._gc
    import oarlock.cli
    import oarlock.worker

    order: list[str] = []
    monkeypatch.setattr(oarlock._gc, "settle", lambda: order.append("settle") or 0)

    async def work(self: object) -> None:
        order.append("worker runs")

    monkeypatch.setattr(oarlock.worker.Worker, "run", work)
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, *a, **k: order.append("serves"))
    db = str(tmp_path / "runs.db")
    SQLiteStore(db).db().close()  # a worker needs a database made already
    assert oarlock.cli.main(["--db", db, "worker"]) == 0
    agents = tmp_path / "agents"
    agents.mkdir()
    assert oarlock.cli.main(["--db", db, "serve", "--port", "0", "--agents", str(agents)]) == 0
    assert order == ["settle", "worker runs", "settle", "serves"]

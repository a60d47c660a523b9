"""One contract for every RunStore backend: each test runs against each of BACKENDS.

To add a backend, add a factory to BACKENDS. The PostgreSQL one gets a database of its
own for each test (``pgtest``); an unreachable server fails the test, never skips it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

import pgtest
from oarlock.errors import ConflictError, NotFound
from oarlock.formats import RunDocument, dump_json, dump_run, parse_run
from oarlock.store import Event, MemoryStore, RunStore, SQLiteStore
from oarlock.store._postgres import PostgresStore

T = TypeVar("T")
EXAMPLES = sorted((Path(__file__).parents[2] / "examples" / "runs").glob("*.json"))

BACKENDS: dict[str, Callable[[Path], RunStore]] = {
    "memory": lambda _tmp: MemoryStore(),
    "sqlite": lambda tmp: SQLiteStore(tmp / "runs" / "oarlock.db"),
    "postgres": lambda _tmp: PostgresStore(pgtest.new_database()),
}


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@pytest.fixture(params=list(BACKENDS))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RunStore]:
    backend = BACKENDS[request.param](tmp_path)
    yield backend
    run(backend.close())


def example(name: str = "refund-waiting-approval.json") -> RunDocument:
    return parse_run((EXAMPLES[0].parent / name).read_bytes())


def make_doc(run_id: str, *, status: str = "running", tags: dict[str, str] | None = None,
             created_at: str = "2026-11-02T09:00:00Z", turns: int = 1) -> RunDocument:
    data = dump_run(example())
    data.update(id=run_id, status=status, createdAt=created_at, updatedAt=created_at,
                turns=turns)
    if status != "waiting_approval":
        data["pendingApprovals"] = []
    data.pop("tags", None)
    if tags is not None:
        data["tags"] = tags
    return parse_run(data)


def ev(kind: str, n: int) -> Event:
    return Event(kind, f"2026-11-02T09:00:{n:02d}Z", {"n": n, "nested": {"list": [n, "x"]}})


def changed(doc: RunDocument, **members: Any) -> RunDocument:
    return parse_run({**dump_run(doc), **members})


def state(store: RunStore, run_id: str) -> tuple[bytes, int, str | None, list[Event]]:
    stored = run(store.load(run_id))
    return dump_json(stored.document), stored.version, stored.agent_ref, run(store.events(run_id))


def test_is_a_run_store(store: RunStore) -> None:
    assert isinstance(store, RunStore)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_create_load_round_trip(store: RunStore, path: Path) -> None:
    doc = parse_run(path.read_bytes())
    assert run(store.create(doc, [ev("run_created", 1)], agent_ref="agents/refund.yaml")) == 1
    stored = run(store.load(doc.id))
    assert dump_json(stored.document) == dump_json(doc)
    assert stored.version == 1
    assert stored.agent_ref == "agents/refund.yaml"


def test_agent_ref_defaults_to_none(store: RunStore) -> None:
    run(store.create(make_doc("r1"), []))
    assert run(store.load("r1")).agent_ref is None
    assert run(store.events("r1")) == []


def test_duplicate_create_conflicts_and_keeps_the_first(store: RunStore) -> None:
    run(store.create(make_doc("r1", turns=1), [ev("run_created", 1)], agent_ref="a:first"))
    before = state(store, "r1")
    with pytest.raises(ConflictError, match="r1"):
        run(store.create(make_doc("r1", turns=7), [ev("run_created", 2)], agent_ref="a:b"))
    assert state(store, "r1") == before


def test_save_increments_version_and_appends_events(store: RunStore) -> None:
    doc = make_doc("r1")
    run(store.create(doc, [ev("run_created", 1)], agent_ref="m:agent"))
    doc2 = changed(doc, turns=2, result="half way")
    assert run(store.save(doc2, 1, [ev("model_responded", 2), ev("tool_called", 3)])) == 2
    doc3 = changed(doc2, turns=3, status="completed", pendingApprovals=[])
    assert run(store.save(doc3, 2, [ev("status_changed", 4)])) == 3
    assert run(store.save(doc3, 3, [])) == 4
    stored = run(store.load("r1"))
    assert (dump_json(stored.document), stored.version) == (dump_json(doc3), 4)
    assert stored.agent_ref == "m:agent"
    events = run(store.events("r1"))
    assert [e.seq for e in events] == [1, 2, 3, 4]
    assert [e.kind for e in events] == [
        "run_created", "model_responded", "tool_called", "status_changed"]
    assert [e.data["n"] for e in events] == [1, 2, 3, 4]


@pytest.mark.parametrize("expected", [1, 3, 0])
def test_stale_save_conflicts_and_changes_nothing(store: RunStore, expected: int) -> None:
    doc = make_doc("r1", tags={"team": "a"})
    run(store.create(doc, [ev("run_created", 1)], agent_ref="m:agent"))
    run(store.save(changed(doc, turns=2), 1, [ev("model_responded", 2)]))
    before = state(store, "r1")
    listed = run(store.list_runs(tags={"team": "a"}))
    other = changed(doc, turns=9, status="failed", tags={"team": "b"})
    with pytest.raises(ConflictError) as info:
        run(store.save(other, expected, [ev("status_changed", 3)]))
    assert "stored version 2" in str(info.value)
    assert f"expected {expected}" in str(info.value)
    assert state(store, "r1") == before
    assert run(store.list_runs(tags={"team": "a"})) == listed
    assert run(store.list_runs(status="failed")) == []


def test_unknown_id_is_not_found(store: RunStore) -> None:
    run(store.create(make_doc("known"), []))
    with pytest.raises(NotFound, match="ghost"):
        run(store.load("ghost"))
    with pytest.raises(NotFound, match="ghost"):
        run(store.save(make_doc("ghost"), 1, [ev("run_created", 1)]))
    with pytest.raises(NotFound, match="ghost"):
        run(store.events("ghost"))
    assert [r.id for r in run(store.list_runs())] == ["known"]


def test_events_in_order_with_their_data(store: RunStore) -> None:
    doc = make_doc("r1")
    first = [ev("run_created", 1), Event("approval_requested", "t", {"unicode": "héllo ✓"})]
    run(store.create(doc, first))
    first[0].data["n"] = 99  # the store keeps its own copy of what it was given
    run(store.save(doc, 1, [Event("approval_decided", "t2", {"ok": True, "x": None, "f": 1.5})]))
    events = run(store.events("r1"))
    assert events == [
        Event("run_created", ev("run_created", 1).at, ev("run_created", 1).data, 1),
        Event("approval_requested", "t", {"unicode": "héllo ✓"}, 2),
        Event("approval_decided", "t2", {"ok": True, "x": None, "f": 1.5}, 3),
    ]
    events[1].data["unicode"] = "changed by a reader"  # what a reader gets is its own copy
    assert run(store.events("r1"))[1].data == {"unicode": "héllo ✓"}


def _seed_listing(store: RunStore) -> None:
    specs = [
        ("a", "running", {"team": "x", "env": "prod"}, "2026-11-01T00:00:00Z"),
        ("b", "completed", {"team": "x", "env": "dev"}, "2026-11-02T00:00:00Z"),
        ("c", "running", {"team": "y", "env": "prod"}, "2026-11-03T00:00:00Z"),
        ("d", "running", {"team": "x", "env": "prod", "k": "v"}, "2026-11-04T00:00:00Z"),
        ("e", "failed", None, "2026-11-04T00:00:00Z"),  # same time as d: id breaks the tie
    ]
    for run_id, status, tags, created in specs:
        run(store.create(make_doc(run_id, status=status, tags=tags, created_at=created), []))


def ids(store: RunStore, **kwargs: Any) -> list[str]:
    return [r.id for r in run(store.list_runs(**kwargs))]


def test_list_runs_newest_first_with_limit(store: RunStore) -> None:
    _seed_listing(store)
    assert ids(store) == ["e", "d", "c", "b", "a"]
    assert ids(store, limit=2) == ["e", "d"]
    assert ids(store, limit=0) == []
    assert ids(store, tags={}) == ["e", "d", "c", "b", "a"]


def test_ids_starting_finds_runs_by_the_start_of_their_id(store: RunStore) -> None:
    for run_id in ("ab-1", "ab_2", "abc", "b", "A", "ab"):
        run(store.create(make_doc(run_id), [ev("run_created", 0)]))
    assert run(store.ids_starting("ab")) == ["ab", "ab-1", "ab_2", "abc"]
    assert run(store.ids_starting("ab", limit=2)) == ["ab", "ab-1"]
    assert run(store.ids_starting("ab_")) == ["ab_2"]  # _ is no wildcard
    assert run(store.ids_starting("ab%")) == []  # nor is %
    assert run(store.ids_starting("a")) == ["ab", "ab-1", "ab_2", "abc"]  # case counts
    assert run(store.ids_starting("abc")) == ["abc"]
    assert run(store.ids_starting("abcd")) == []
    assert run(store.ids_starting("")) == ["A", "ab", "ab-1", "ab_2", "abc", "b"]
    assert run(store.ids_starting("zz\U0010ffff")) == []


def test_list_runs_filters_by_status_and_tags(store: RunStore) -> None:
    _seed_listing(store)
    assert ids(store, status="running") == ["d", "c", "a"]
    assert ids(store, status="running", limit=1) == ["d"]
    assert ids(store, status="cancelled") == []
    assert ids(store, tags={"team": "x"}) == ["d", "b", "a"]
    assert ids(store, tags={"team": "x", "env": "prod"}) == ["d", "a"]
    assert ids(store, tags={"team": "x", "env": "prod", "k": "v"}) == ["d"]
    assert ids(store, tags={"team": "x", "missing": "prod"}) == []
    assert ids(store, tags={"team": "x", "env": "prod"}, limit=1) == ["d"]
    assert ids(store, status="completed", tags={"team": "x"}) == ["b"]
    assert ids(store, status="failed", tags={"team": "x"}) == []


def test_list_runs_summary_fields(store: RunStore) -> None:
    _seed_listing(store)
    by_id = {r.id: r for r in run(store.list_runs())}
    d = by_id["d"]
    assert (d.agent, d.status, d.turns) == (example().agent, "running", 1)
    assert d.tags == {"team": "x", "env": "prod", "k": "v"}
    assert (d.created_at, d.updated_at) == ("2026-11-04T00:00:00Z", "2026-11-04T00:00:00Z")
    assert by_id["e"].tags == {}


def test_list_runs_follows_saved_status_and_tags(store: RunStore) -> None:
    _seed_listing(store)
    doc = run(store.load("a")).document
    moved = changed(doc, status="completed", tags={"team": "y"}, turns=4,
                    updatedAt="2026-11-05T00:00:00Z")
    run(store.save(moved, 1, []))
    assert ids(store, status="running") == ["d", "c"]
    assert ids(store, status="completed") == ["b", "a"]
    assert ids(store, tags={"team": "x"}) == ["d", "b"]
    assert ids(store, tags={"team": "y"}) == ["c", "a"]
    assert ids(store, tags={"env": "prod"}) == ["d", "c"]
    summary = next(r for r in run(store.list_runs()) if r.id == "a")
    assert (summary.turns, summary.updated_at) == (4, "2026-11-05T00:00:00Z")
    assert json.loads(dump_json(run(store.load("a")).document))["tags"] == {"team": "y"}


def test_list_runs_keeps_unchanged_tags_and_drops_removed_ones(store: RunStore) -> None:
    _seed_listing(store)
    doc = run(store.load("d")).document
    run(store.save(changed(doc, turns=2), 1, []))  # the same tags
    assert ids(store, tags={"k": "v"}) == ["d"]
    run(store.save(changed(doc, turns=3, tags={}), 2, []))
    assert ids(store, tags={"k": "v"}) == []
    assert ids(store, tags={"team": "x"}) == ["b", "a"]
    assert ids(store) == ["e", "d", "c", "b", "a"]

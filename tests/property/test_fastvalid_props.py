"""The compiled schema check never accepts what jsonschema refuses (it may refuse more,
and then the full validator decides). Nor does the shipped one of the run schema, on which
the read-only commands' quick check of a stored run (``conforming_run``) rests."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.conftest import ALL_EXAMPLES, load_example

from oarlock.formats._fastvalid import conforms
from oarlock.formats._runcheck import conforming_run
from oarlock.formats._schemas import schema_problems

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.sampled_from(
        [
            "2026-01-02T03:04:05Z",
            "2026-13-02T03:04:05Z",
            "6f0a7c3e-4d52-5a8e-9b1f-0a4c6e8d2b17",
            "6f0a7c3e-4d52-5a8e-9b1f-0a4c6e8d2b1",
            "Succeeded",
            "spend",
            "allow",
        ]
    ),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += paths(v, (*prefix, i))
    return out


def mutate(doc: dict[str, Any], path: tuple[Any, ...], action: str, value: Any, key: str) -> Any:
    if not path:
        return value if action == "replace" else doc
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    last = path[-1]
    if action == "replace":
        parent[last] = value
    elif action == "delete":
        del parent[last]
    elif isinstance(parent[last], dict):
        parent[last][key] = value
    return doc


def draw_mutation(data: st.DataObject, doc: dict[str, Any]) -> tuple[Any, list[Any], str, Any]:
    """A copy of ``doc`` with one member replaced, deleted or added, and what was done."""
    path = data.draw(st.sampled_from(paths(doc)))
    action = data.draw(st.sampled_from(["replace", "delete", "add"]))
    value = data.draw(json_values)
    key = data.draw(st.text(max_size=8))
    return mutate(copy.deepcopy(doc), path, action, value, key), path, action, value


@pytest.mark.parametrize("name", [n for n in ALL_EXAMPLES if not n.startswith("runs/")])
def test_the_examples_conform(name: str) -> None:
    kind = "invocation" if name.startswith("invocations/") else "receipt"
    assert conforms(load_example(name), kind)


@pytest.mark.parametrize("name", ALL_EXAMPLES)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fast_acceptance_implies_jsonschema_acceptance(name: str, data: st.DataObject) -> None:
    kind = (
        "run"
        if name.startswith("runs/")
        else ("invocation" if name.startswith("invocations/") else "receipt")
    )
    mutated, path, action, value = draw_mutation(data, load_example(name))
    if conforms(mutated, kind):
        assert schema_problems(mutated, kind) == [], (path, action, value)


@pytest.mark.parametrize("name", [n for n in ALL_EXAMPLES if n.startswith("runs/")])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_quick_run_check_accepts_only_what_jsonschema_accepts(
    name: str, data: st.DataObject
) -> None:
    mutated, path, action, value = draw_mutation(data, load_example(name))
    text = json.dumps(mutated, ensure_ascii=data.draw(st.booleans()))
    if conforming_run(text) is not None:
        assert schema_problems(mutated, "run") == [], (path, action, value)
        # the shipped code is the runtime compiler's: where it accepts, so does that
        assert conforms(mutated, "run"), (path, action, value)

"""The stores' compact JSON text (``oarlock.store._json.compact``) is ``json.dumps`` with
compact separators and text as it is, byte for byte, whatever the value: its one encoder,
made once, must not carry anything over from a value it refused to the next."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oarlock.store._json import compact

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text()
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=30,
)


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@given(VALUES)
def test_compact_is_json_dumps(value: Any) -> None:
    assert compact(value) == dumps(value)


@given(VALUES)
def test_a_refused_value_leaves_nothing_behind(value: Any) -> None:
    outer: dict[str, Any] = {"x": [object()]}
    with pytest.raises(TypeError):
        compact(outer)  # refused inside two containers
    outer["x"][0] = value  # the same containers, now JSON: no cycle to find in them
    assert compact(outer) == dumps(outer)


def test_a_cycle_is_refused_as_json_dumps_refuses_it() -> None:
    looped: list[Any] = [1]
    looped.append(looped)
    with pytest.raises(ValueError, match="Circular reference"):
        compact(looped)
    assert compact([looped[0], {"a": math.pi}]) == dumps([1, {"a": math.pi}])


def test_non_string_keys_and_special_floats_as_json_dumps_writes_them() -> None:
    value = {1: "a", 2.5: None, False: [float("inf"), float("nan")], None: "é\u2028"}
    assert compact(value) == dumps(value)

"""``event_rows`` writes each event's data as ``json.dumps(data, separators=(",", ":"),
ensure_ascii=False)`` does, and refuses what it refuses, through one C encoder made once."""

from __future__ import annotations

import json
import json.encoder
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oarlock.errors import StoreError
from oarlock.store._base import Event, event_rows

_SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text()
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(
            st.text() | st.integers() | st.floats() | st.booleans(), inner, max_size=4
        )
    ),
    max_leaves=20,
)


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@given(st.dictionaries(st.text(), _VALUES, max_size=6))
def test_event_data_is_written_as_json_dumps_writes_it(data: dict[str, Any]) -> None:
    [(kind, at, text)] = event_rows("r", [Event("tool_called", "2026-01-01T00:00:00Z", data)])
    assert (kind, at, text) == ("tool_called", "2026-01-01T00:00:00Z", _dumps(data))


def _refusal(data: dict[str, Any]) -> str:
    with pytest.raises(StoreError) as caught:
        event_rows("r", [Event("tool_called", "2026-01-01T00:00:00Z", data)])
    return str(caught.value)


def test_data_that_is_not_json_is_refused_as_before() -> None:
    cycle: dict[str, Any] = {}
    cycle["self"] = [cycle]
    assert _refusal({"a": cycle}) == (
        "event data of run r is not JSON: Circular reference detected"
    )
    assert _refusal({"a": [object()]}) == (
        "event data of run r is not JSON: Object of type object is not JSON serializable"
    )
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(RecursionError):
        event_rows("r", [Event("tool_called", "2026-01-01T00:00:00Z", {"deep": deep})])


def test_no_encoder_is_set_up_per_event(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(*args: object) -> None:
        raise AssertionError("a JSON encoder was set up")

    monkeypatch.setattr(json.encoder, "c_make_encoder", refused)
    rows = event_rows("r", [Event("status_changed", "t", {"from": "a", "to": "b"})] * 3)
    assert [text for _, _, text in rows] == ['{"from":"a","to":"b"}'] * 3

"""Tools: schemas from hints and docstrings, and the toolset the model is shown."""

from __future__ import annotations

import pytest

from oarlock.errors import ConfigError
from oarlock.tools import CAUTIOUS_CLASS, Toolset, tool


def lookup(order_id: str, limit: int = 5) -> str:
    """Look up an order.

    Args:
        order_id: The order id,
            like A-1001.
        limit: How many lines.
    """
    return order_id


def refund(amount: float) -> str:
    """Refund."""
    return str(amount)


def test_schema_comes_from_hints_and_docstring() -> None:
    t = tool(lookup)
    assert t.description == "Look up an order."
    assert t.side_effect == CAUTIOUS_CLASS == "spend"
    props = t.parameters["properties"]
    assert props["order_id"] == {"type": "string", "description": "The order id, like A-1001."}
    assert props["limit"]["type"] == "integer"
    assert props["limit"]["default"] == 5
    assert t.parameters["required"] == ["order_id"]
    assert t.parameters["additionalProperties"] is False


def test_specs_follow_the_tools_added() -> None:
    tools = Toolset([lookup])
    first = tools.specs()
    assert [s["name"] for s in first] == ["lookup"]
    assert tools.specs() is first  # built once, not on every model turn
    tools.add(tool(refund))
    assert [s["name"] for s in tools.specs()] == ["lookup", "refund"]


def test_two_tools_with_one_name_are_refused() -> None:
    with pytest.raises(ConfigError, match="two tools are named 'lookup'"):
        Toolset([lookup, lookup])


def test_a_parameter_without_a_hint_is_refused() -> None:
    def bare(x):  # type: ignore[no-untyped-def]
        return x

    with pytest.raises(ConfigError, match="needs a type hint"):
        tool(bare)

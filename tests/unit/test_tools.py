"""Tools: schemas from hints and docstrings, and the toolset the model is shown."""

from __future__ import annotations

from typing import Any

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


@pytest.mark.parametrize(
    "side_effect", ["shared-write", "external", "production", "publication", "spend"]
)
def test_needs_approval_false_on_a_cautious_tool_is_refused_naming_the_policy(
    side_effect: Any,
) -> None:
    with pytest.raises(ConfigError, match="needs_approval=False") as caught:
        tool(side_effect=side_effect, needs_approval=False)(refund)
    message = str(caught.value)
    assert "'refund'" in message
    assert repr(side_effect) in message
    assert "policy rule" in message  # the alternative: a standing approval from policy


def test_needs_approval_false_on_an_undeclared_tool_is_refused() -> None:
    # no class declared: the most cautious one, spend, whose approval cannot be waived
    with pytest.raises(ConfigError, match="policy rule"):
        tool(needs_approval=False)(refund)


@pytest.mark.parametrize("side_effect", ["read", "sandbox"])
def test_needs_approval_false_on_a_safe_tool_is_accepted(side_effect: Any) -> None:
    t = tool(side_effect=side_effect, needs_approval=False)(refund)
    assert not t.requires_approval({"amount": 1.0})


def test_a_predicate_cannot_waive_the_approval_of_a_cautious_tool() -> None:
    t = tool(side_effect="spend", needs_approval=lambda a: a["amount"] > 50)(refund)
    assert t.requires_approval({"amount": 1.0})
    assert t.requires_approval({"amount": 100.0})
    safe = tool(side_effect="read", needs_approval=lambda a: a["amount"] > 50)(refund)
    assert not safe.requires_approval({"amount": 1.0})
    assert safe.requires_approval({"amount": 100.0})


def test_validated_arguments_are_the_fields_in_order_with_defaults_and_no_extras() -> None:
    from pydantic import BaseModel, ConfigDict

    from oarlock.tools import ToolArgumentsError

    @tool(side_effect="read")
    def find(query: str, limit: int = 5, exact: bool = False) -> str:
        """Find."""
        return query

    assert list(find.validate_arguments({"exact": True, "query": "q"}).items()) == [
        ("query", "q"), ("limit", 5), ("exact", True)
    ]  # fmt: skip
    with pytest.raises(ToolArgumentsError, match="limit"):
        find.validate_arguments({"query": "q", "limit": "many"})
    with pytest.raises(ToolArgumentsError, match="other"):
        find.validate_arguments({"query": "q", "other": 1})

    class Open(BaseModel):
        model_config = ConfigDict(extra="allow")
        name: str

    find.arguments_model = Open  # a model of one's own may keep unknown members apart
    assert find.validate_arguments({"name": "n", "more": 1}) == {"name": "n"}

"""Property: no model output crashes a run. Whatever text, tool names and arguments a model
sends, the run ends completed, waiting for a human or failed with a reason; the stored
document is valid; every governance record verifies; nothing is run with arguments that
cannot be hashed exactly."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from oarlock.engine import Agent, Runner
from oarlock.formats import validate
from oarlock.formats._codec import dump
from oarlock.formats._jcs import portable_problem
from oarlock.governance import verify_chain
from oarlock.models import ScriptedModel
from oarlock.testing import MemoryStore, ValidatingStore
from oarlock.tools import tool

SEEN: list[dict[str, Any]] = []


@tool(side_effect="read")
def look(order_id: str = "", amount: float = 0, extra: dict[str, Any] | None = None) -> str:
    """Look."""
    SEEN.append({"order_id": order_id, "amount": amount, "extra": extra})
    return f"{order_id} {amount}"


text = st.text(alphabet=st.characters(codec=None), max_size=20)  # surrogates included
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | text
)
values = st.recursive(
    scalars, lambda c: st.lists(c, max_size=3) | st.dictionaries(text, c, max_size=3), max_leaves=6
)
arguments = st.dictionaries(
    st.sampled_from(["order_id", "amount", "extra"]) | text, values, max_size=4
)
calls = st.lists(
    st.fixed_dictionaries(
        {"name": st.sampled_from(["look", "nope"]) | text, "arguments": arguments}
    ),
    max_size=3,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first_text=text, turn_calls=calls, answer=text)
def test_no_model_output_crashes_a_run(
    first_text: str, turn_calls: list[dict[str, Any]], answer: str
) -> None:
    SEEN.clear()
    turns = [{"text": first_text, "tool_calls": turn_calls}, {"text": answer}]
    if not turn_calls:
        turns = [{"text": answer}]
    store = ValidatingStore(MemoryStore())
    agent = Agent("p", ScriptedModel(turns), tools=[look], tenant="t")

    async def go() -> Any:
        doc = await Runner(agent, store).start("hi")
        return doc, (await store.load(doc.id)).document, await store.governance().ledger()

    doc, stored, ledger = asyncio.run(go())
    assert doc.status in ("completed", "failed")
    assert stored.status == doc.status
    assert validate(dump(stored)).valid
    assert verify_chain(ledger).ok
    for seen in SEEN:  # a tool only ever gets portable arguments
        assert portable_problem(seen) is None


odd = values | st.lists(values, max_size=2) | st.builds(object) | st.just(("a",))
call_specs = st.fixed_dictionaries(
    {"name": st.sampled_from(["look", ""]) | odd},
    optional={
        "arguments": st.dictionaries(text, odd, max_size=2) | arguments | odd,
        "id": st.sampled_from(["c1", ""]) | odd,
    },
) | st.dictionaries(st.sampled_from(["name", "other"]) | st.integers(0, 2), odd, max_size=2)
turn_specs = (
    st.fixed_dictionaries(
        {}, optional={"text": text | odd, "tool_calls": st.lists(call_specs, max_size=2) | odd}
    )
    | st.dictionaries(
        st.sampled_from(["text", "tool_calls", "usage", "fail", "other"]),
        text | st.lists(call_specs, max_size=3) | odd,
        max_size=3,
    )
    | odd
)


@settings(max_examples=400, deadline=None)
@given(turn=turn_specs)
@example(turn={"tool_calls": [{"name": "look", "arguments": {"a": object()}}]})
@example(turn={"tool_calls": [{"name": "look", "arguments": {"a": {1: float("nan")}}}]})
@example(turn={"tool_calls": [{"name": "look", "id": ""}]})
@example(turn={"tool_calls": [{"name": None}]})
@example(turn={"text": 3})
@example(turn={"text": "t", "usage": {"input_tokens": -1}})
def test_the_quick_look_at_a_turn_finds_what_the_whole_check_finds(turn: Any) -> None:
    """A turn the quick look passes is one the whole check passes; any other gets the
    whole check's problems, word for word."""
    from oarlock._config import Problems
    from oarlock.models._scripted import _check_whole_turn, check_turn

    quick, whole = Problems(), Problems()
    check_turn(turn, "turn", quick)
    _check_whole_turn(turn, "turn", whole)
    assert quick.items == whole.items

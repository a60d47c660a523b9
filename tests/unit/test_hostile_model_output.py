"""Whatever a model sends ends as a result the model sees or a clear run failure: never a
crashed runner, a run left 'running', or a record that cannot be hashed exactly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from oarlock.engine import Agent, Runner
from oarlock.errors import DecisionRefused
from oarlock.formats import validate
from oarlock.formats._codec import dump
from oarlock.governance import PolicyVerdict, verify_chain
from oarlock.models import ScriptedModel
from oarlock.store import SQLiteStore
from oarlock.testing import MemoryStore, ValidatingStore
from oarlock.tools import tool

RAN: list[Any] = []


@tool(side_effect="spend")
def charge(order_id: str, amount: float) -> str:
    """Charge an order."""
    RAN.append(("charge", amount))
    return f"charged {amount}"


@tool(side_effect="read")
def lookup(order_id: str, count: int = 1) -> str:
    """Look an order up."""
    RAN.append(("lookup", order_id))
    return f"order {order_id}"


@pytest.fixture(autouse=True)
def _reset() -> None:
    RAN.clear()


def _agent(turns: list[dict[str, Any]], **kw: Any) -> Agent:
    return Agent("desk", ScriptedModel(turns), tools=[charge, lookup], tenant="acme", **kw)


def _stores(tmp_path: Path) -> list[Any]:
    return [ValidatingStore(MemoryStore()), SQLiteStore(tmp_path / "runs.db")]


HOSTILE_ARGUMENTS = [
    pytest.param({"order_id": "o1", "amount": 99999999999999999999}, id="int-beyond-2**53"),
    pytest.param({"order_id": "o1", "amount": 1e20}, id="float-beyond-2**53"),
    pytest.param({"order_id": "o1", "amount": float("nan")}, id="nan"),
    pytest.param({"order_id": "o1", "amount": float("inf")}, id="inf"),
    pytest.param({"\udfff": 1}, id="lone-surrogate-key"),
    pytest.param({"order_id": "o\udfff1", "amount": 5}, id="lone-surrogate-value"),
    pytest.param({"order_id": "o1", "amount": 5, "x": [1, {"\ud800": 2**60}]}, id="nested"),
]


@pytest.mark.parametrize("arguments", HOSTILE_ARGUMENTS)
async def test_arguments_without_canonical_form_are_refused_before_anything(
    tmp_path: Path, arguments: dict[str, Any]
) -> None:
    for store in _stores(tmp_path):
        turns = [{"tool_calls": [{"id": "c1", "name": "charge", "arguments": arguments}]}]
        runner = Runner(_agent([*turns, {"text": "sorry"}]), store)
        doc = await runner.start("pay")
        assert doc.status == "completed"
        assert RAN == []
        result = doc.messages[2].content[0]
        assert result.is_error
        assert "could not be read" in result.content or "not canonical" in result.content
        # nothing was claimed, run or written to the ledger
        assert await store.governance().ledger() == []
        stored = await store.load(doc.id)
        assert validate(dump(stored.document)).valid
        await store.close()


async def test_a_lone_surrogate_in_text_and_names_is_stored_as_a_replacement(
    tmp_path: Path,
) -> None:
    turns = [
        {
            "text": "thinking \udcff",
            "tool_calls": [{"id": "c\ud800", "name": "look\udfffup", "arguments": {}}],
        },
        {"text": "done \udfff"},
    ]
    for store in _stores(tmp_path):
        doc = await Runner(_agent(turns), store).start("go")
        assert doc.status == "completed"
        assert doc.result == "done \ufffd"
        reread = (await store.load(doc.id)).document
        assert reread.messages[1].content[0].text == "thinking \ufffd"
        assert reread.messages[2].content[0].is_error  # an unknown tool, told to the model
        await store.close()


async def test_an_edit_without_canonical_form_is_refused_with_its_own_code() -> None:
    turns = [
        {
            "tool_calls": [
                {"id": "c1", "name": "charge", "arguments": {"order_id": "o1", "amount": 10}}
            ]
        },
        {"text": "done"},
    ]
    store = MemoryStore()
    runner = Runner(_agent(turns), store)
    doc = await runner.start("pay")
    assert doc.status == "waiting_approval"
    for edit in (
        {"order_id": "o1", "amount": 99999999999999999999},
        {"order_id": "o1", "amount": 1e300},
    ):
        with pytest.raises(DecisionRefused) as refused:
            await runner.decide(doc.id, "c1", "approved", edited_arguments=edit)
        assert refused.value.code == "edit_not_canonical"
    assert await store.governance().ledger() == []  # no approval was kept
    assert (await store.load(doc.id)).document.pending_approvals[0].decision is None


class _OddPolicy:
    policy_id = "odd"
    version = "sha256:" + "0" * 64

    def __init__(self, verdict: Any) -> None:
        self.verdict = verdict

    def evaluate(self, request: Any) -> Any:
        return self.verdict


@pytest.mark.parametrize(
    "verdict",
    [
        PolicyVerdict("maybe", None, ()),  # type: ignore[arg-type]
        PolicyVerdict("ALLOW", None, ()),  # type: ignore[arg-type]
        PolicyVerdict("allow", 7, ()),  # type: ignore[arg-type]
        PolicyVerdict("allow", "r1", ("ok", 3)),  # type: ignore[arg-type]
        PolicyVerdict("allow", "r\udfff", ()),
        PolicyVerdict("require_approval", None, (), float("nan")),
        PolicyVerdict("require_approval", None, (), -1),
        {"effect": "allow"},
        None,
    ],
)
async def test_a_policy_verdict_that_is_not_one_denies(verdict: Any) -> None:
    turns = [
        {"tool_calls": [{"id": "c1", "name": "lookup", "arguments": {"order_id": "o1"}}]},
        {"text": "done"},
    ]
    store = ValidatingStore(MemoryStore())  # refuses any record that fails its schema
    doc = await Runner(_agent(turns, policy=_OddPolicy(verdict)), store).start("look")
    assert doc.status == "completed"
    assert RAN == []  # a read call, yet not run: the executor fails closed
    result = doc.messages[2].content[0]
    assert result.is_error and "policy_error" in result.content
    [item] = await store.governance().receipts()
    assert item.status == "Denied" and item.receipt["error"]["code"] == "policy_error"
    assert item.invocation["policyDecision"]["effect"] == "deny"
    assert verify_chain(await store.governance().ledger()).ok


async def test_an_unexpected_error_fails_the_run_instead_of_leaving_it_running(
    tmp_path: Path,
) -> None:
    class Broken:
        def review(self, *a: Any) -> Any:
            raise RuntimeError("executor bug \x1b[2J")

        async def execute(self, *a: Any) -> Any:
            raise AssertionError("unreachable")

        async def record_approval(self, *a: Any, **k: Any) -> Any:
            raise AssertionError("unreachable")

    turns = [{"tool_calls": [{"id": "c1", "name": "lookup", "arguments": {"order_id": "o"}}]}]
    store = SQLiteStore(tmp_path / "runs.db")
    doc = await Runner(_agent(turns), store, executor=Broken()).start("look")
    assert doc.status == "failed"
    assert doc.error is not None and doc.error.startswith("internal error: RuntimeError")
    assert "\x1b" not in doc.error
    assert (await store.load(doc.id)).document.status == "failed"
    await store.close()


@pytest.mark.parametrize("expires_in", [float("nan"), float("inf"), 1e308, -5, 0, True])
async def test_an_approval_lifetime_that_is_not_one_is_refused(expires_in: Any) -> None:
    turns = [
        {
            "tool_calls": [
                {"id": "c1", "name": "charge", "arguments": {"order_id": "o", "amount": 1}}
            ]
        }
    ]
    store = MemoryStore()
    runner = Runner(_agent(turns), store)
    doc = await runner.start("pay")
    with pytest.raises(DecisionRefused) as refused:
        await runner.decide(doc.id, "c1", "approved", expires_in=expires_in)
    assert refused.value.code == "invalid_expiry"
    assert await store.governance().ledger() == []


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), 0, -1, "abc", True, 1e9])
def test_a_tool_timeout_that_is_not_one_is_refused(timeout: Any) -> None:
    from oarlock.errors import ConfigError

    def echo(text: str) -> str:
        return text

    with pytest.raises(ConfigError, match="timeout_seconds"):
        tool(side_effect="read", timeout_seconds=timeout)(echo)

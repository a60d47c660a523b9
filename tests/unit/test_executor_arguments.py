"""The arguments an invocation records, their hash and size: JSON arguments as they are,
others converted (dates, tuples, models), each canonicalized once."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from oarlock.errors import CanonicalizationError
from oarlock.formats._jcs import canonicalize, digest
from oarlock.formats._models import ToolCallPart
from oarlock.governance import CallContext, GovernedExecutor, MemoryGovernanceStore
from oarlock.governance import _executor as executor_module
from oarlock.governance._executor import canonical_arguments, json_arguments
from oarlock.tools import tool

CTX = CallContext("run-1", "agent", {"tenantId": "acme"}, 1, fresh=True)


@tool(side_effect="read")
def lookup(key: str) -> str:
    """Look a key up."""
    return key


@pytest.mark.parametrize(
    ("arguments", "record"),
    [
        ({"key": "k", "n": 5.0, "xs": [1, 2]}, {"key": "k", "n": 5.0, "xs": [1, 2]}),
        ({"when": datetime.date(2026, 1, 2), "pair": (1, "a")},
         {"when": "2026-01-02", "pair": [1, "a"]}),
    ],
)  # fmt: skip
def test_canonical_arguments_are_json_arguments_and_their_bytes(
    arguments: dict[str, Any], record: dict[str, Any]
) -> None:
    got, canonical = canonical_arguments(arguments)
    assert got == json_arguments(arguments) == record
    assert canonical == canonicalize(record)
    if record == arguments:
        assert got is arguments  # JSON already: the very dict


def test_arguments_without_a_canonical_form_are_refused_as_before() -> None:
    with pytest.raises(CanonicalizationError):
        canonical_arguments({"n": 2**60})
    with pytest.raises(CanonicalizationError):
        json_arguments({"n": float("nan")})


async def test_an_invocation_canonicalizes_its_arguments_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    arguments = {"key": "k"}
    seen: list[Any] = []

    def counted(value: Any) -> bytes:
        seen.append(value)
        return canonicalize(value)

    monkeypatch.setattr(executor_module, "canonicalize", counted)
    store = MemoryGovernanceStore()
    ex = GovernedExecutor(store)
    part = ToolCallPart(type="tool_call", id="c1", name="lookup", arguments=arguments)
    result = await ex.execute(lookup, part, arguments, CTX)
    assert not result.is_error
    assert sum(1 for v in seen if v is arguments) == 1
    [stored] = await store.receipts()
    assert stored.invocation["arguments"] == arguments
    assert stored.invocation["argumentsHash"] == digest(arguments)
    assert stored.receipt["usage"]["bytesIn"] == len(b'{"key":"k"}')

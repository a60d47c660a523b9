"""``seal`` gives a receipt the hash ``digest`` gave it (over the receipt without it) and
the JCS bytes of the sealed receipt, for any members; ``canonicalize`` gives remembered
bytes only for the very object remembered, until it is forgotten."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oarlock.errors import CanonicalizationError
from oarlock.formats import _jcs
from oarlock.formats._jcs import canonicalize, digest, forget, remember
from oarlock.formats._models import ToolCallPart
from oarlock.governance import CallContext, GovernedExecutor, MemoryGovernanceStore
from oarlock.governance._records import seal
from oarlock.tools import tool

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**60), 2**60) | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=12,
)
_NAMES = ["effect", "error", "finishedAt", "invocationId", "resultRef", "sanitized",
          "startedAt", "status", "usage", "a", "z", "receiptHas", "receiptHashes"]  # fmt: skip


@given(st.dictionaries(st.sampled_from(_NAMES), _JSON, max_size=9))
def test_a_sealed_receipt_has_the_hash_and_bytes_of_the_whole(members: dict[str, Any]) -> None:
    receipt, expected = dict(members), dict(members)
    try:
        expected["receiptHash"] = digest(expected)
        whole = canonicalize(expected)
    except CanonicalizationError as exc:
        with pytest.raises(CanonicalizationError, match=_escaped(str(exc))):
            seal(receipt)
        return
    assert seal(receipt) == whole
    assert receipt == expected and list(receipt) == list(expected)


def _escaped(text: str) -> str:
    import re

    return "^" + re.escape(text) + "$"


def test_remembered_bytes_serve_only_that_object_until_forgotten() -> None:
    value = {"a": 1}
    remember(value, b"KNOWN")
    try:
        assert canonicalize(value) == b"KNOWN"
        assert canonicalize({"a": 1}) == b'{"a":1}'  # an equal object is written
    finally:
        forget(value)
    assert canonicalize(value) == b'{"a":1}'
    assert not _jcs._KNOWN


@tool(side_effect="read")
def lookup(key: str) -> str:
    """Look a key up."""
    return key


async def test_a_call_writes_its_receipt_once_and_remembers_nothing_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    written: list[Any] = []
    encode = _jcs._encode

    def counted(value: Any) -> str:
        written.append(value)
        return encode(value)

    monkeypatch.setattr(_jcs, "_encode", counted)
    store = MemoryGovernanceStore()
    ctx = CallContext("run-1", "agent", {"tenantId": "acme"}, 1, fresh=True)
    part = ToolCallPart(type="tool_call", id="c1", name="lookup", arguments={"key": "k"})
    await GovernedExecutor(store).execute(lookup, part, {"key": "k"}, ctx)
    [stored] = await store.receipts()
    assert not any(v is stored.receipt for v in written)  # its halves only, once each
    assert sum(1 for v in written if "status" in v and "receiptHash" not in v) == 1
    assert not _jcs._KNOWN
    [_, entry] = await store.ledger()
    assert entry.body == stored.receipt
    assert canonicalize(entry.body) == canonicalize(dict(stored.receipt))

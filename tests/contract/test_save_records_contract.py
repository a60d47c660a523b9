"""One contract for every store whose save carries the records of a step's calls that ran
before they were claimed (``save(..., records=)``, :class:`~oarlock.governance.Recorded`):
the run and the records are stored together or not at all, whatever refuses the save."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

import pgtest
from helpers import invocation_record
from oarlock.errors import ConflictError, LeaseLost
from oarlock.formats import RunDocument, dump_run, parse_run
from oarlock.formats._jcs import canonicalize, digest
from oarlock.governance import Claim
from oarlock.governance._ledger import verify_chains
from oarlock.governance._store import Recorded, artifact_ref
from oarlock.store import MemoryStore, SQLiteStore
from oarlock.store._postgres import PostgresStore

NOW = "2026-01-01T00:00:00.000000Z"
EXAMPLE = Path(__file__).parents[2] / "examples" / "runs" / "refund-waiting-approval.json"

BACKENDS = ("memory", "postgres", "sqlite")


@pytest.fixture(params=BACKENDS)
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Any]:
    """The store's maker (its database made here, outside the test's event loop)."""
    if request.param == "memory":
        return MemoryStore
    if request.param == "sqlite":
        return lambda: SQLiteStore(tmp_path / "runs.db")
    url = pgtest.new_database()
    return lambda: PostgresStore(url)


@contextlib.asynccontextmanager
async def opened(make: Callable[[], Any]) -> AsyncIterator[Any]:
    store = make()
    assert store.saves_records is True
    try:
        yield store
    finally:
        await store.close()


def document(run_id: str = "run-r") -> RunDocument:
    data = dump_run(parse_run(EXAMPLE.read_bytes()))
    data.update(id=run_id, status="running", pendingApprovals=[])
    return parse_run(data)


def recorded(key: str, *, result: bytes | None = b"out", finished: str = NOW) -> Recorded:
    invocation = invocation_record(key, at=NOW)
    claim = Claim(
        tenant_id="acme",
        tool_id=invocation["toolId"],
        idempotency_key=key,
        invocation_id=invocation["invocationId"],
        arguments_hash=invocation["argumentsHash"],
        owner="h:1:1",
        claimed_at=NOW,
        lease_until=0.0,
        run_id="run-r",
    )
    receipt: dict[str, Any] = {
        "invocationId": invocation["invocationId"],
        "status": "Succeeded",
        "startedAt": NOW,
        "finishedAt": finished,
    }
    if result is not None:
        receipt["resultRef"] = artifact_ref(result)
    receipt["receiptHash"] = digest(receipt)
    return Recorded(invocation, claim, receipt, result, NOW, canonicalize(receipt))


async def receipts_of(store: Any) -> list[str]:
    return sorted(r.invocation_id for r in await store.governance().receipts(limit=100))


async def chains_verify(store: Any) -> bool:
    gov = store.governance()
    chains = {name: await gov.ledger(name) for name in await gov.chains()}
    return all(report.ok for report in verify_chains(chains).values())


async def test_a_save_writes_its_records_with_it(make: Callable[[], Any]) -> None:
    async with opened(make) as store:
        doc = document()
        await store.create(doc, [])
        odd = 'at "quoted" \\ and é'  # an entry whose hash is made in Python, not the database
        records = [recorded("k1"), recorded("k2", result=None, finished=odd), recorded("k3")]
        assert await store.save(doc, 1, [], records=records) == 2
        assert (await store.load(doc.id)).version == 2
        gov = store.governance()
        assert await receipts_of(store) == sorted(r.invocation["invocationId"] for r in records)
        for r in records:
            invocation, receipt = await gov.load(r.invocation["invocationId"])
            assert (invocation, receipt) == (r.invocation, r.receipt)
            held = await gov.claim_of("acme", "charge", r.claim.idempotency_key)
            assert held is not None and held.claim == r.claim and held.receipt == r.receipt
        assert await gov.artifact(artifact_ref(b"out")) == b"out"
        entries = [(e.kind, e.at) for e in await gov.ledger()]
        assert entries == [
            ("invocation", NOW), ("receipt", NOW), ("invocation", NOW), ("receipt", odd),
            ("invocation", NOW), ("receipt", NOW),
        ]  # fmt: skip
        assert await chains_verify(store)


async def test_a_stale_save_writes_none_of_its_records(make: Callable[[], Any]) -> None:
    async with opened(make) as store:
        doc = document()
        await store.create(doc, [])
        await store.save(doc, 1, [])
        with pytest.raises(ConflictError):
            await store.save(doc, 1, [], records=[recorded("k1")])
        assert (await store.load(doc.id)).version == 2
        assert await receipts_of(store) == []
        assert await store.governance().claim_of("acme", "charge", "k1") is None
        assert await store.governance().ledger() == []


async def test_a_held_key_refuses_the_save_and_writes_nothing(make: Callable[[], Any]) -> None:
    async with opened(make) as store:
        doc = document()
        await store.create(doc, [])
        first = recorded("k1")
        gov = store.governance()
        assert await gov.record(first.invocation, first.claim, first.receipt, result=first.result,
                                at=NOW) is None  # fmt: skip
        again, other = recorded("k1", result=b"again"), recorded("k2")
        with pytest.raises(ConflictError) as info:
            await store.save(doc, 1, [], records=[other, again])
        assert info.value.code == "claim_held"
        assert (await store.load(doc.id)).version == 1
        assert await receipts_of(store) == [first.invocation["invocationId"]]
        assert await gov.claim_of("acme", "charge", "k2") is None
        assert [e.kind for e in await gov.ledger()] == ["invocation", "receipt"]
        assert await chains_verify(store)


async def test_a_save_under_a_lost_lease_writes_none_of_its_records(
    make: Callable[[], Any],
) -> None:
    async with opened(make) as store:
        doc = document()
        await store.create(doc, [])
        [lease] = await store.claim("w1", limit=1, lease_seconds=30)
        await store.release(lease)
        [taken] = await store.claim("w2", limit=1, lease_seconds=30)
        assert taken.epoch > lease.epoch
        with pytest.raises(LeaseLost):
            await store.save(doc, 1, [], lease=lease, records=[recorded("k1")])
        assert await receipts_of(store) == []
        assert await store.governance().ledger() == []
        assert await store.save(doc, 1, [], lease=taken, records=[recorded("k1")]) == 2
        assert len(await receipts_of(store)) == 1

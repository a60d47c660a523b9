"""One contract for every governance store: what the executor relies on."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import pgtest
from helpers import invocation_record
from oarlock.errors import ConflictError, IntegrityError, NotFound
from oarlock.formats._jcs import digest
from oarlock.governance import Approval, Claim, MemoryGovernanceStore, Reconciliation
from oarlock.governance._ledger import generate_key, sign_checkpoint, verify_chain
from oarlock.governance._store import artifact_ref
from oarlock.store._postgres import PostgresStore
from oarlock.store._sqlite import SQLiteStore

NOW = "2026-01-01T00:00:00.000000Z"


def memory(_: Path) -> Any:
    return MemoryGovernanceStore()


def sqlite(tmp: Path) -> Any:
    return SQLiteStore(tmp / "gov.db").governance()


def postgres(_: Path) -> Any:
    return PostgresStore(pgtest.new_database()).governance()


BACKENDS: dict[str, Callable[[Path], Any]] = {
    "memory": memory,
    "sqlite": sqlite,
    "postgres": postgres,
}


@pytest.fixture(params=sorted(BACKENDS))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    return BACKENDS[request.param](tmp_path)


def invocation(key: str = "k1", args: dict[str, Any] | None = None) -> dict[str, Any]:
    return invocation_record(key, arguments=args, at=NOW)


def claim_for(inv: dict[str, Any], owner: str = "h:1:1", tenant: str = "acme") -> Claim:
    return Claim(
        tenant_id=tenant,
        tool_id=inv["toolId"],
        idempotency_key=inv["idempotencyKey"],
        invocation_id=inv["invocationId"],
        arguments_hash=inv["argumentsHash"],
        owner=owner,
        claimed_at=NOW,
        lease_until=0.0,
    )


def receipt_for(inv: dict[str, Any], status: str = "Succeeded") -> dict[str, Any]:
    body: dict[str, Any] = {"invocationId": inv["invocationId"], "status": status, "startedAt": NOW}
    if status == "Uncertain":
        body["error"] = {"code": "interrupted", "message": "x"}
    body["receiptHash"] = digest(body)
    return body


def approval(run: str = "run-1", call: str = "c1") -> Approval:
    return Approval(
        approval_id=str(uuid.uuid4()),
        run_id=run,
        tool_call_id=call,
        tool_id="charge",
        arguments_hash=digest({"order_id": "o1"}),
        scope={"tenantId": "acme"},
        decided_by="human",
        principal="ana",
        decided_at=NOW,
    )


async def test_a_claim_is_taken_once_and_the_holder_is_returned(store) -> None:
    first, second = invocation(), invocation()
    assert await store.begin(first, claim_for(first), approval_id=None, grant=None, at=NOW) is None
    held = await store.begin(second, claim_for(second), approval_id=None, grant=None, at=NOW)
    assert held is not None and held.claim == claim_for(first) and held.receipt is None
    with pytest.raises(NotFound):
        await store.load(second["invocationId"])  # nothing of the loser was written
    assert [e.kind for e in await store.ledger()] == ["invocation"]


async def test_the_same_key_in_another_tenant_is_another_key(store) -> None:
    a, b = invocation(), invocation()
    assert await store.begin(a, claim_for(a), approval_id=None, grant=None, at=NOW) is None
    other = claim_for(b, tenant="globex")
    assert await store.begin(b, other, approval_id=None, grant=None, at=NOW) is None
    assert (await store.claim_of("globex", "charge", "k1")).claim == other


async def test_a_receipt_is_written_once_with_its_artifact(store) -> None:
    inv = invocation()
    await store.begin(inv, claim_for(inv), approval_id=None, grant=None, at=NOW)
    receipt = receipt_for(inv) | {"resultRef": artifact_ref(b"result")}
    await store.finish(receipt, result=b"result", at=NOW)
    with pytest.raises(ConflictError) as err:
        await store.finish(receipt_for(inv, "Failed"), result=None, at=NOW)
    assert err.value.code == "receipt_exists"
    assert await store.load(inv["invocationId"]) == (inv, receipt)
    assert await store.artifact(artifact_ref(b"result")) == b"result"
    held = await store.claim_of("acme", "charge", "k1")
    assert held.receipt == receipt
    with pytest.raises(NotFound):
        await store.artifact(artifact_ref(b"other"))


async def test_approvals_are_unique_per_call_and_used_once(store) -> None:
    a = approval()
    await store.record_approval(a)
    with pytest.raises(ConflictError) as err:
        await store.record_approval(approval())
    assert err.value.code == "already_decided"
    assert await store.approval_for("run-1", "c1") == (a, None)
    inv, inv2 = invocation(), invocation("k2")
    await store.begin(inv, claim_for(inv), approval_id=a.approval_id, grant=None, at=NOW)
    assert await store.approval_for("run-1", "c1") == (a, inv["invocationId"])
    with pytest.raises(ConflictError) as err:
        await store.begin(inv2, claim_for(inv2), approval_id=a.approval_id, grant=None, at=NOW)
    assert err.value.code == "approval_used"
    assert await store.claim_of("acme", "charge", "k2") is None  # rolled back
    with pytest.raises(NotFound):
        await store.approval_for("run-1", "c2")


async def test_a_standing_grant_is_stored_with_the_claim(store) -> None:
    inv, grant = invocation(), approval(call="c9")
    await store.begin(inv, claim_for(inv), approval_id=None, grant=grant, at=NOW)
    assert await store.approval_for("run-1", "c9") == (grant, inv["invocationId"])
    assert [e.kind for e in await store.ledger()] == ["approval", "invocation"]


async def test_take_over_replaces_only_the_stale_claim_it_names(store) -> None:
    inv = invocation()
    stale = claim_for(inv)
    await store.begin(inv, stale, approval_id=None, grant=None, at=NOW)
    retry = invocation() | {"idempotencyKey": "k1"}
    new = claim_for(retry, owner="h:2:2")
    assert await store.take_over(stale, new, retry, NOW)
    assert not await store.take_over(stale, claim_for(invocation()), invocation(), NOW)
    assert (await store.claim_of("acme", "charge", "k1")).claim == new
    assert [c.invocation_id for c in await store.open_claims()] == [retry["invocationId"]]


async def test_refuse_stores_the_invocation_and_its_denied_receipt(store) -> None:
    inv = invocation()
    denied = receipt_for(inv, "Denied")
    await store.refuse(inv, denied, NOW)
    assert await store.load(inv["invocationId"]) == (inv, denied)
    assert await store.claim_of("acme", "charge", "k1") is None


async def test_record_writes_a_call_that_ran_in_one_step_or_gives_the_holder(store) -> None:
    read, again = invocation(), invocation()
    receipt = receipt_for(read) | {"finishedAt": "2026-01-01T00:00:01.000000Z"}
    receipt["resultRef"] = artifact_ref(b"found")
    assert await store.record(read, claim_for(read), receipt, result=b"found", at=NOW) is None
    assert await store.load(read["invocationId"]) == (read, receipt)
    assert await store.artifact(artifact_ref(b"found")) == b"found"
    entries = await store.ledger()
    assert [(e.kind, e.at) for e in entries] == [
        ("invocation", NOW),
        ("receipt", "2026-01-01T00:00:01.000000Z"),
    ]
    assert verify_chain(entries).ok
    assert await store.open_claims() == []
    later = receipt_for(again) | {"finishedAt": NOW}
    held = await store.record(again, claim_for(again), later, result=b"other", at=NOW)
    assert held is not None and held.claim == claim_for(read) and held.receipt == receipt
    with pytest.raises(NotFound):
        await store.load(again["invocationId"])  # nothing of the loser was written
    with pytest.raises(NotFound):
        await store.artifact(artifact_ref(b"other"))
    assert await store.ledger() == entries
    # a key claimed by begin (a call still running) is held against record too
    running, late = invocation("k2"), invocation("k2")
    await store.begin(running, claim_for(running), approval_id=None, grant=None, at=NOW)
    held = await store.record(late, claim_for(late), receipt_for(late) | {"finishedAt": NOW},
                              result=None, at=NOW)  # fmt: skip
    assert held is not None and held.claim == claim_for(running) and held.receipt is None


async def test_reconcile_appends_only_to_uncertain_receipts(store) -> None:
    ok, unsure = invocation("a"), invocation("b")
    for inv, status in ((ok, "Succeeded"), (unsure, "Uncertain")):
        await store.begin(inv, claim_for(inv), approval_id=None, grant=None, at=NOW)
        await store.finish(receipt_for(inv, status), result=None, at=NOW)

    def note(inv: dict[str, Any]) -> Reconciliation:
        return Reconciliation(
            str(uuid.uuid4()), inv["invocationId"], "succeeded", "bank", "ana", NOW
        )

    with pytest.raises(ConflictError) as err:
        await store.reconcile(note(ok))
    assert err.value.code == "not_uncertain"
    with pytest.raises(NotFound):
        await store.reconcile(note(invocation()))
    rec = note(unsure)
    await store.reconcile(rec)
    assert await store.reconciliations(unsure["invocationId"]) == [rec]
    assert (await store.load(unsure["invocationId"]))[1] == receipt_for(unsure, "Uncertain")


async def test_a_second_reconciliation_must_supersede_the_latest(store) -> None:
    unsure = invocation("u")
    await store.begin(unsure, claim_for(unsure), approval_id=None, grant=None, at=NOW)
    await store.finish(receipt_for(unsure, "Uncertain"), result=None, at=NOW)
    key = unsure["invocationId"]

    def note(outcome: Any, supersedes: str | None = None) -> Reconciliation:
        return Reconciliation(str(uuid.uuid4()), key, outcome, "bank", "ana", NOW, supersedes)

    with pytest.raises(ConflictError) as err:
        await store.reconcile(note("succeeded", supersedes=str(uuid.uuid4())))
    assert err.value.code == "nothing_to_supersede"
    first = note("succeeded")
    await store.reconcile(first)
    entries = len(await store.ledger())
    for contradicting in (note("not-applied"), note("succeeded")):
        with pytest.raises(ConflictError) as err:
            await store.reconcile(contradicting)
        assert err.value.code == "already_reconciled"
    with pytest.raises(ConflictError) as err:
        await store.reconcile(note("not-applied", supersedes=str(uuid.uuid4())))
    assert err.value.code == "not_latest"
    assert len(await store.ledger()) == entries  # refusals write nothing
    second = note("not-applied", supersedes=first.reconciliation_id)
    await store.reconcile(second)
    assert await store.reconciliations(key) == [first, second]
    assert (await store.ledger())[-1].body["supersedes"] == first.reconciliation_id


async def test_receipts_are_listed_newest_first_and_filtered(store) -> None:
    invs = [invocation(f"k{i}") for i in range(3)]
    for inv, status in zip(invs, ("Succeeded", "Failed", "Succeeded"), strict=True):
        await store.begin(inv, claim_for(inv), approval_id=None, grant=None, at=NOW)
        await store.finish(
            receipt_for(inv, status) | {"error": {"code": "x"}}
            if status == "Failed"
            else receipt_for(inv, status),
            result=None,
            at=NOW,
        )
    listed = await store.receipts()
    assert [i.invocation_id for i in listed] == [inv["invocationId"] for inv in reversed(invs)]
    assert [i.status for i in await store.receipts(status="Failed")] == ["Failed"]
    only = await store.receipts(run_id=invs[0]["runId"])
    assert [i.invocation_id for i in only] == [invs[0]["invocationId"]]
    assert len(await store.receipts(limit=2)) == 2


async def test_the_ledger_chains_every_record_and_checkpoints_verify(store) -> None:
    for i in range(5):
        inv = invocation(f"k{i}")
        await store.begin(inv, claim_for(inv), approval_id=None, grant=None, at=NOW)
        await store.finish(receipt_for(inv), result=None, at=NOW)
    await store.record_approval(approval())
    entries = await store.ledger()
    assert [e.seq for e in entries] == list(range(1, 12))
    key = generate_key()
    checkpoint = sign_checkpoint(entries[-1], key, NOW)
    await store.add_checkpoint(checkpoint)
    assert await store.checkpoints() == [checkpoint]
    report = verify_chain(entries, [checkpoint], [key.public_key()])
    assert report.ok and report.entries == 11 and report.checkpoints_checked == 1


async def test_sqlite_refuses_an_artifact_whose_bytes_were_changed(tmp_path: Path) -> None:
    runs = SQLiteStore(tmp_path / "g.db")
    gov = runs.governance()
    inv = invocation()
    await gov.begin(inv, claim_for(inv), approval_id=None, grant=None, at=NOW)
    await gov.finish(receipt_for(inv), result=b"refund 10", at=NOW)
    runs.db().execute("UPDATE artifacts SET data = ?", (b"refund 99",))
    with pytest.raises(IntegrityError):
        await gov.artifact(artifact_ref(b"refund 10"))
    await runs.close()

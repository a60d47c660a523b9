"""An approval is a signed statement, not a row. Whoever can write the database can add an
approval record with a correct ledger hash; the spend call it names must still not run
(Denied, approval_unauthenticated), and the ledger still verifies: the forgery is on
record, not hidden."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path
from typing import Any

import pytest

from helpers import write_approver
from oarlock.engine import Agent, Runner
from oarlock.errors import ConfigError, DecisionRefused
from oarlock.formats._jcs import digest
from oarlock.formats._time import now_rfc3339
from oarlock.governance import RulePolicy, verify_chain
from oarlock.governance._approvers import (
    ApproverKey,
    TrustedApprovers,
    TrustedKey,
    process_approver,
)
from oarlock.governance._records import Approval, run_uuid
from oarlock.models import ScriptedModel
from oarlock.store import SQLiteStore
from oarlock.testing import MemoryStore
from oarlock.tools import tool

PAID: list[float] = []


@tool(side_effect="spend")
def pay(order_id: str, amount: float) -> str:
    """Pay."""
    PAID.append(amount)
    return f"paid {amount}"


@pytest.fixture(autouse=True)
def _reset() -> None:
    PAID.clear()


def _agent(**kw: Any) -> Agent:
    turns = [
        {
            "tool_calls": [
                {"id": "c1", "name": "pay", "arguments": {"order_id": "o1", "amount": 90}}
            ]
        },
        {"text": "done"},
    ]
    return Agent("desk", ScriptedModel(turns), tools=[pay], tenant="acme", **kw)


def _forged(doc_id: str, agent: Agent, **changes: Any) -> Approval:
    approval = Approval(
        approval_id=str(uuid.uuid4()),
        run_id=doc_id,
        tool_call_id="c1",
        tool_id="pay",
        arguments_hash=digest({"order_id": "o1", "amount": 90}),
        scope=dict(agent.scope),
        decided_by="human",
        principal="user:ana",
        decided_at=now_rfc3339(),
    )
    return dataclasses.replace(approval, **changes)


async def _forge_and_resume(store: Any, agent: Agent, approval_of: Any) -> Any:
    """Pause at the spend call, write ``approval_of(doc)`` as the database's writer would,
    mark the call approved in the run document, then resume in a fresh runner."""
    from oarlock.engine import _core as core

    doc = await Runner(agent, store).start("pay")
    assert doc.status == "waiting_approval"
    await store.governance().record_approval(approval_of(doc))
    stored = await store.load(doc.id)
    events = core.apply_decision(stored.document, "c1", "approved", by="human", now=now_rfc3339())
    await store.save(stored.document, stored.version, events)
    return await Runner(agent, store).resume(doc.id)


async def _receipt(store: Any, doc: Any) -> dict[str, Any]:
    [item] = await store.governance().receipts(run_id=run_uuid(doc.id))
    return dict(item.receipt)


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_an_unsigned_approval_row_runs_nothing(tmp_path: Path, backend: str) -> None:
    store = MemoryStore() if backend == "memory" else SQLiteStore(tmp_path / "runs.db")
    agent = _agent()
    doc = await _forge_and_resume(store, agent, lambda d: _forged(d.id, agent))
    assert PAID == []
    receipt = await _receipt(store, doc)
    assert receipt["status"] == "Denied"
    assert receipt["error"]["code"] == "approval_unauthenticated"
    assert verify_chain(await store.governance().ledger()).ok  # on record, not hidden
    await store.close()


async def test_a_signature_by_an_untrusted_key_runs_nothing() -> None:
    store, agent = MemoryStore(), _agent()
    mallory = ApproverKey.generate("user:ana")
    doc = await _forge_and_resume(store, agent, lambda d: mallory.sign(_forged(d.id, agent)))
    assert PAID == []
    receipt = await _receipt(store, doc)
    assert receipt["error"]["code"] == "approval_unauthenticated"
    assert "not a trusted key" in receipt["error"]["message"]


async def test_a_key_trusted_for_another_principal_runs_nothing() -> None:
    bob = ApproverKey.generate("user:bob")
    trusted = TrustedApprovers([TrustedKey(bob.public_key, ("user:bob",))])
    store, agent = MemoryStore(), _agent(approvers=trusted)
    as_ana = ApproverKey("user:ana", bob.private_key)
    doc = await _forge_and_resume(store, agent, lambda d: as_ana.sign(_forged(d.id, agent)))
    assert PAID == []
    receipt = await _receipt(store, doc)
    assert "not trusted to approve as 'user:ana'" in receipt["error"]["message"]


async def test_a_signed_approval_altered_afterwards_runs_nothing() -> None:
    store, agent = MemoryStore(), _agent()
    signer = process_approver("user:ana")  # trusted: this very process

    def altered(d: Any) -> Approval:
        genuine = signer.sign(_forged(d.id, agent, arguments_hash=digest({"x": 1})))
        return dataclasses.replace(genuine, arguments_hash=digest({"order_id": "o1", "amount": 90}))

    doc = await _forge_and_resume(store, agent, altered)
    assert PAID == []
    assert "does not verify" in (await _receipt(store, doc))["error"]["message"]


async def test_a_forged_policy_approval_runs_nothing() -> None:
    store, agent = MemoryStore(), _agent()

    def as_policy(d: Any) -> Approval:
        return _forged(
            d.id,
            agent,
            decided_by="policy",
            principal="small-refunds",
            policy_version="sha256:" + "1" * 64,
        )

    doc = await _forge_and_resume(store, agent, as_policy)
    assert PAID == []
    receipt = await _receipt(store, doc)
    assert receipt["error"]["code"] == "approval_unauthenticated"
    assert "policy in force" in receipt["error"]["message"]


async def test_a_standing_approval_binds_the_policy_digest() -> None:
    policy = RulePolicy.from_dict(
        {"policy": "p", "rules": [{"id": "ok", "effect": "allow", "match": {"tool": "pay"}}]}
    )
    store = MemoryStore()
    doc = await Runner(_agent(policy=policy), store).start("pay")
    assert doc.status == "completed" and PAID == [90]
    approvals = [e.body for e in await store.governance().ledger() if e.kind == "approval"]
    assert [(a["decidedBy"], a["principal"], a["policyVersion"]) for a in approvals] == [
        ("policy", "ok", policy.version)
    ]


async def test_a_genuine_approval_by_a_configured_key_is_honoured_by_another_runner(
    tmp_path: Path,
) -> None:
    key_path = write_approver(tmp_path, "user:ana")
    trusted = TrustedApprovers.from_file(tmp_path / "approvers.yaml")
    agent = _agent(approvers=trusted)
    store = SQLiteStore(tmp_path / "runs.db")
    doc = await Runner(agent, store).start("pay")
    # a runner without the key cannot approve for this agent ...
    with pytest.raises(DecisionRefused) as refused:
        await Runner(agent, store).decide(doc.id, "c1", "approved")
    assert refused.value.code == "approval_unauthenticated"
    # ... nor one whose key the agent does not trust
    stranger = Runner(agent, store, approver=ApproverKey.generate("user:ana"))
    with pytest.raises(DecisionRefused):
        await stranger.decide(doc.id, "c1", "approved")
    assert [e.kind for e in await store.governance().ledger()] == []
    approver = ApproverKey.load(key_path, "user:ana")
    await Runner(agent, store, approver=approver).decide(doc.id, "c1", "approved")
    done = await Runner(agent, store).resume(doc.id)
    assert done.status == "completed" and PAID == [90]
    await store.close()


def test_approvers_files_are_checked(tmp_path: Path) -> None:
    write_approver(tmp_path)
    cases = {
        "approvers: 3\n": "'approvers' must be a list",
        "approvers:\n  - {key: approver.key.pub}\n": "one of 'principal' or 'principals'",
        "approvers:\n  - {principal: a, key: missing.pub}\n": "No such file",
        "approvers:\n  - {principal: a, key: approver.key}\n": "private key",
        "approvers:\n  - {principal: a, key: approver.key.pub, extra: 1}\n": "unknown key",
        "a: &x [1]\nb: *x\n": "anchors (&x) are not allowed",
        "approvers: [\n": "not valid YAML",
    }
    for text, fragment in cases.items():
        (tmp_path / "bad.yaml").write_text(text, "utf-8")
        with pytest.raises(ConfigError) as err:
            TrustedApprovers.from_file(tmp_path / "bad.yaml")
        assert fragment in str(err.value), (text, str(err.value))
        assert err.value.code == "approvers_invalid"

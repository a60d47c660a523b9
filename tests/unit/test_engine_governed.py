"""The runner and the governed executor together: approvals bound to the exact call,
deadlines, forged decisions, and receipts for every call of a run."""

from __future__ import annotations

from typing import Any

import pytest

from oarlock.engine import Agent, Runner
from oarlock.engine import _core as core
from oarlock.errors import DecisionRefused
from oarlock.formats._jcs import digest
from oarlock.governance import RulePolicy, unfence
from oarlock.governance._policy import DEFAULT_POLICY
from oarlock.governance._records import run_uuid
from oarlock.models import ScriptedModel
from oarlock.testing import MemoryStore, ValidatingStore
from oarlock.tools import tool

CHARGES: list[tuple[str, int]] = []


@tool(side_effect="spend")
def charge(order_id: str, amount: int) -> str:
    """Charge an order."""
    CHARGES.append((order_id, amount))
    return f"charged {amount}"


@tool(side_effect="read")
def lookup(order_id: str) -> str:
    """Look an order up."""
    return f"order {order_id}"


def script(amount: int = 40) -> list[dict[str, Any]]:
    return [
        {
            "tool_calls": [
                {"id": "c_look", "name": "lookup", "arguments": {"order_id": "o1"}},
                {
                    "id": "c_pay",
                    "name": "charge",
                    "arguments": {"order_id": "o1", "amount": amount},
                },
            ]
        },
        {"text": "done"},
    ]


def runner(policy: RulePolicy | None = None, **agent: Any) -> tuple[Runner, MemoryStore]:
    store = MemoryStore()
    model = ScriptedModel(script())
    a = Agent("desk", model, tools=[charge, lookup], policy=policy, tenant="acme", **agent)
    return Runner(a, ValidatingStore(store)), store


@pytest.fixture(autouse=True)
def _reset() -> None:
    CHARGES.clear()


async def test_an_approved_call_runs_once_and_every_call_has_a_receipt() -> None:
    r, store = runner()
    doc = await r.start("refund")
    assert doc.status == "waiting_approval"
    doc = await r.decide(doc.id, "c_pay", "approved", principal="ana")
    doc = await r.resume(doc.id)
    assert doc.status == "completed" and CHARGES == [("o1", 40)]
    items = await store.governance().receipts(run_id=run_uuid(doc.id))
    assert sorted((i.invocation["toolId"], i.status) for i in items) == [
        ("charge", "Succeeded"),
        ("lookup", "Succeeded"),
    ]
    approval, used_by = await store.governance().approval_for(doc.id, "c_pay")
    assert approval.principal == "ana" and approval.decided_by == "human"
    assert approval.arguments_hash == digest({"order_id": "o1", "amount": 40})
    pay = next(i for i in items if i.invocation["toolId"] == "charge")
    assert pay.invocation["approvalId"] == approval.approval_id
    assert used_by == pay.invocation_id


async def test_a_fresh_read_is_recorded_by_its_step_save_through_the_validating_wrapper(
) -> None:
    store = MemoryStore()
    turns = [{"tool_calls": [{"id": "c1", "name": "lookup", "arguments": {"order_id": "o1"}},
                             {"id": "c2", "name": "lookup", "arguments": {"order_id": "o2"}}]},
             {"text": "done"}]  # fmt: skip
    wrapped = ValidatingStore(store)
    r = Runner(Agent("desk", ScriptedModel(turns), tools=[lookup], tenant="acme"), wrapped)
    assert r._saves_records  # the executor keeps its records in the wrapper's governance
    saved: list[int] = []
    real = store.save

    async def save(*args: Any, records: Any = (), **kwargs: Any) -> int:
        saved.append(len(records))
        return await real(*args, records=records, **kwargs)

    store.save = save  # type: ignore[method-assign]
    doc = await r.start("look")
    assert doc.status == "completed"
    assert saved == [0, 2, 0]  # the model's response, the step's results with both reads
    assert wrapped.governance().checked == 4  # each invocation and receipt validated
    items = await store.governance().receipts(run_id=run_uuid(doc.id))
    assert sorted(i.status for i in items) == ["Succeeded", "Succeeded"]


async def test_a_held_key_refuses_the_steps_save_and_the_resumed_run_replays_its_holder(
) -> None:
    """A fresh read's key found held when its step is saved (no earlier attempt can hold
    it, but the store says so): the save is refused whole (claim_held), and the run,
    resumed from what was stored, claims the call first and replays the holder's receipt."""
    from helpers import invocation_record
    from oarlock.errors import ConflictError
    from oarlock.governance import Claim
    from oarlock.governance._store import artifact_ref

    store = MemoryStore()
    key = "run:held-run:call:c1"
    inv = {**invocation_record(key, tenant="acme"), "toolId": "lookup"}
    claim = Claim("acme", "lookup", key, inv["invocationId"], inv["argumentsHash"], "h:1:1",
                  "2026-01-01T00:00:00.000000Z", 0.0)  # fmt: skip
    receipt: dict[str, Any] = {
        "invocationId": inv["invocationId"], "status": "Succeeded",
        "startedAt": "2026-01-01T00:00:00.000000Z", "finishedAt": "2026-01-01T00:00:00.000000Z",
        "resultRef": artifact_ref(b"the holder's result"), "sanitized": True,
    }  # fmt: skip
    receipt["receiptHash"] = digest(receipt)
    gov = store.governance()
    assert await gov.record(inv, claim, receipt, result=b"the holder's result",
                            at=receipt["startedAt"]) is None  # fmt: skip
    turns = [{"tool_calls": [{"id": "c1", "name": "lookup", "arguments": {"order_id": "o1"}}]},
             {"text": "done"}]  # fmt: skip
    agent = Agent("desk", ScriptedModel(turns), tools=[lookup], tenant="acme")
    with pytest.raises(ConflictError) as refused:
        await Runner(agent, store).start("look", run_id="held-run")
    assert refused.value.code == "claim_held"
    stored = (await store.load("held-run")).document
    assert stored.status == "running" and len(stored.messages) == 2  # the response, no result
    assert [r.invocation_id for r in await gov.receipts()] == [inv["invocationId"]]
    doc = await Runner(agent, store).resume("held-run")
    assert doc.status == "completed"
    [result] = [p for m in doc.messages for p in m.content if p.type == "tool_result"]
    assert unfence(result.content) == "the holder's result"
    assert [r.invocation_id for r in await gov.receipts()] == [inv["invocationId"]]


async def test_an_edit_is_what_the_approval_covers() -> None:
    r, store = runner()
    doc = await r.start("refund")
    await r.decide(doc.id, "c_pay", "approved", edited_arguments={"order_id": "o1", "amount": 5})
    doc = await r.resume(doc.id)
    assert CHARGES == [("o1", 5)]
    approval, _ = await store.governance().approval_for(doc.id, "c_pay")
    assert approval.arguments_hash == digest({"order_id": "o1", "amount": 5})


async def test_a_decision_written_into_the_document_without_an_approval_is_refused() -> None:
    r, store = runner()
    doc = await r.start("refund")
    stored = await store.load(doc.id)
    forged = stored.document
    events = core.apply_decision(forged, "c_pay", "approved", by="human", now=forged.updated_at)
    await store.save(forged, stored.version, events)
    doc = await r.resume(doc.id)
    assert doc.status == "completed" and CHARGES == []
    results = {p.tool_call_id: p for p in doc.messages[2].content}  # type: ignore[union-attr]
    assert results["c_pay"].is_error and "approval_required" in results["c_pay"].content
    denied = await store.governance().receipts(status="Denied")
    assert [i.receipt["error"]["code"] for i in denied] == ["approval_required"]


async def test_a_second_approval_racing_the_first_is_refused_before_it_is_recorded() -> None:
    r, store = runner()
    doc = await r.start("refund")
    await r.decide(doc.id, "c_pay", "approved", principal="ana")
    with pytest.raises(DecisionRefused) as err:
        await r.decide(doc.id, "c_pay", "approved", principal="bob")
    assert err.value.code == "already_decided"
    approval, _ = await store.governance().approval_for(doc.id, "c_pay")
    assert approval.principal == "ana"


async def test_a_pending_approval_past_its_deadline_is_denied_by_policy() -> None:
    policy = RulePolicy.from_dict({"policy": "p", "approval_ttl": 60})
    times = iter(["2026-01-01T00:00:00.000000Z"] * 50 + ["2026-01-01T00:05:00.000000Z"] * 50)
    store = MemoryStore()
    agent = Agent("desk", ScriptedModel(script()), tools=[charge, lookup], policy=policy)
    r = Runner(agent, store, clock=lambda: next(times))
    doc = await r.start("refund")
    pending = doc.pending_approvals[0]
    assert (pending.model_extra or {})["expiresAt"] == "2026-01-01T00:01:00.000000Z"
    while not r.clock().startswith("2026-01-01T00:05"):  # move the clock past the deadline
        pass
    with pytest.raises(DecisionRefused) as err:
        await r.decide(doc.id, "c_pay", "approved")
    assert err.value.code == "approval_expired"
    events = await store.events(doc.id)
    decided = [e.data for e in events if e.kind == "approval_decided"]
    assert [(d["toolCallId"], d["decision"], d["decidedBy"], d["reason"]) for d in decided] == [
        ("c_pay", "denied", "policy", "expired: no decision by 2026-01-01T00:01:00.000000Z")
    ]
    with pytest.raises(Exception, match="no approval"):
        await store.governance().approval_for(doc.id, "c_pay")
    doc = await r.resume(doc.id)
    assert CHARGES == []
    results = {p.tool_call_id: p for p in doc.messages[2].content}  # type: ignore[union-attr]
    assert results["c_pay"].is_error and "expired" in results["c_pay"].content


async def test_a_standing_approval_from_policy_needs_no_human() -> None:
    policy = RulePolicy.from_dict(
        {
            "policy": "p",
            "rules": [
                {
                    "id": "small",
                    "effect": "allow",
                    "reason": "small charges",
                    "match": {"tool": "charge", "arguments": {"amount": {"lte": 50}}},
                }
            ],
        }
    )
    r, store = runner(policy)
    doc = await r.start("refund")
    assert doc.status == "completed" and CHARGES == [("o1", 40)]
    approval, _ = await store.governance().approval_for(doc.id, "c_pay")
    assert approval.decided_by == "policy" and approval.principal == "small"
    results = {p.tool_call_id: p for p in doc.messages[2].content}  # type: ignore[union-attr]
    assert unfence(results["c_pay"].content) == "charged 40"


async def test_the_scope_of_the_agent_is_the_scope_of_every_invocation() -> None:
    r, store = runner(project="billing", environment="prod", principal="svc", labels={"t": "cx"})
    await r.start("refund")
    (item,) = await store.governance().receipts()
    assert item.invocation["scope"] == {
        "tenantId": "acme",
        "projectId": "billing",
        "environment": "prod",
        "principalId": "svc",
        "labels": {"t": "cx"},
    }


def test_an_agent_file_names_its_policy_and_scope(tmp_path) -> None:
    from pathlib import Path

    from oarlock.engine._agentfile import load_agent
    from oarlock.errors import ConfigError

    root = Path(__file__).resolve().parents[2]
    policy = root / "examples" / "policy" / "refund-policy.yaml"
    (tmp_path / "s.yaml").write_text("- text: done\n")
    agent_file = tmp_path / "agent.yaml"
    agent_file.write_text(
        "name: desk\nmodel: scripted:s.yaml\ntenant: acme\n"
        f"policy: {policy}\n"
        "scope: {project: billing, environment: prod, labels: {team: cx}}\n"
        "tools:\n  - path: oarlock.demo.refund_desk:issue_refund\n"
        "    idempotency_key: oarlock.demo.refund_desk:refund_key\n"
    )
    agent = load_agent(agent_file)
    assert agent.policy is not None and agent.policy.policy_id == "refund-desk"
    assert agent.scope == {
        "tenantId": "acme",
        "projectId": "billing",
        "environment": "prod",
        "labels": {"team": "cx"},
    }
    refund = agent.tools.get("issue_refund")
    assert refund is not None and refund.idempotency_key is not None
    assert refund.idempotency_key({"order_id": "A-1"}) == "refund:A-1"
    agent_file.write_text("name: desk\nmodel: scripted:s.yaml\nscope: {region: eu}\n")
    with pytest.raises(ConfigError, match=r"agent\.yaml: scope\.region: unknown key"):
        load_agent(agent_file)
    agent_file.write_text("name: desk\nmodel: scripted:s.yaml\npolicy: missing.yaml\n")
    with pytest.raises(ConfigError, match=r"missing\.yaml"):
        load_agent(agent_file)


async def test_a_replay_never_repeats_a_side_effect() -> None:
    from oarlock.models._replay import ReplayModel

    r, store = runner()
    doc = await r.start("refund")
    await r.decide(doc.id, "c_pay", "approved")
    original = await r.resume(doc.id)
    assert CHARGES == [("o1", 40)]

    model = ReplayModel(original)
    replay = Runner(r.agent.with_model(model), store, replay_of=original.id)
    again = await replay.start("refund")
    await replay.decide(again.id, "c_pay", "approved")
    again = await replay.resume(again.id)
    assert again.status == "completed" and CHARGES == [("o1", 40)]
    assert model.divergences == []
    charged = [i for i in await store.governance().receipts() if i.invocation["toolId"] == "charge"]
    assert len(charged) == 1  # the replay got the original's receipt back

    # a side-effecting call the original never made is refused, not made
    diverging = ScriptedModel(
        [
            {
                "tool_calls": [
                    {"id": "c_new", "name": "charge", "arguments": {"order_id": "o2", "amount": 1}}
                ]
            },
            {"text": "done"},
        ]
    )
    policy = RulePolicy.from_dict(
        {"policy": "p", "rules": [{"id": "all", "effect": "allow", "reason": "t"}]}
    )
    agent = Agent("desk", diverging, tools=[charge, lookup], tenant="acme", policy=policy)
    done = await Runner(agent, store, replay_of=original.id).start("refund")
    result = done.messages[2].content[0]  # type: ignore[union-attr]
    assert result.is_error and "replay_side_effect" in result.content
    assert CHARGES == [("o1", 40)]


class CountingPolicy:
    """The default rules, counting the requests they decide."""

    def __init__(self, rules: Any) -> None:
        self.rules, self.asked = rules, []
        self.policy_id, self.version = rules.policy_id, rules.version

    def evaluate(self, request: Any) -> Any:
        self.asked.append((request.tool, dict(request.arguments)))
        return self.rules.evaluate(request)


async def test_a_call_run_as_it_is_planned_asks_the_policy_once() -> None:
    """A call that runs in the step it is planned in runs under the verdict of its
    planning; a call that waited for a human is asked about again when it runs, and
    records when the policy decided."""
    policy = CountingPolicy(DEFAULT_POLICY)
    r, store = runner(policy)  # type: ignore[arg-type]
    doc = await r.start("refund")
    assert doc.status == "waiting_approval"
    look, pay = ("lookup", {"order_id": "o1"}), ("charge", {"order_id": "o1", "amount": 40})
    assert policy.asked == [look, pay]  # planning both; the lookup ran under its verdict
    doc = await r.decide(doc.id, "c_pay", "approved", principal="ana")
    asked_by_decision = len(policy.asked) - 2
    doc = await r.resume(doc.id)
    assert doc.status == "completed" and CHARGES == [("o1", 40)]
    assert policy.asked[2 + asked_by_decision :] == [pay]  # asked again as it runs
    items = await store.governance().receipts()
    for item in items:
        decision = item.invocation["policyDecision"]
        assert decision["evaluatedAt"] <= item.receipt["startedAt"]

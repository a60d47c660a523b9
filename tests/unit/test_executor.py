"""The governed executor, call by call: policy, exact approvals, outcomes, receipts."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from oarlock.errors import ConflictError, DocumentInvalid
from oarlock.formats._jcs import digest
from oarlock.formats._models import ToolCallPart
from oarlock.formats._validate import validate
from oarlock.governance import (
    CallContext,
    GovernedExecutor,
    MemoryGovernanceStore,
    RulePolicy,
    unfence,
    verify_chain,
)
from oarlock.governance._approvers import process_approver
from oarlock.governance._executor import NO_APPROVAL
from oarlock.governance._records import Approval
from oarlock.governance._store import ClaimHeld, GovernanceStore
from oarlock.testing import ValidatingGovernanceStore
from oarlock.tools import ToolEffect, ToolOutput, tool

CTX = CallContext("run-1", "agent", {"tenantId": "acme"}, 1)
FRESH = CallContext("run-1", "agent", {"tenantId": "acme"}, 1, fresh=True)  # just answered
ALLOW_CHARGE = RulePolicy.from_dict(
    {
        "policy": "t",
        "rules": [
            {
                "id": "small-charges",
                "effect": "allow",
                "reason": "small charges are pre-approved",
                "match": {"tool": "charge", "arguments": {"amount": {"lte": 50}}},
            }
        ],
    }
)


def call(name: str, args: dict[str, Any], call_id: str = "c1") -> ToolCallPart:
    return ToolCallPart(type="tool_call", id=call_id, name=name, arguments=args)


def make_tools(log: list[Any]) -> dict[str, Any]:
    @tool(side_effect="read")
    def lookup(key: str) -> str:
        """Look a key up."""
        log.append(("lookup", key))
        return f"value of {key}"

    @tool(side_effect="spend")
    def charge(order_id: str, amount: int) -> ToolOutput:
        """Charge an order."""
        log.append(("charge", order_id, amount))
        return ToolOutput({"charged": amount}, ToolEffect("charge", f"ch_{order_id}", False))

    @tool(side_effect="read", timeout_seconds=0.05)
    async def slow_read() -> str:
        """Never answers in time."""
        await asyncio.sleep(5)
        return "late"

    @tool(side_effect="spend", timeout_seconds=0.05)
    async def slow_spend() -> str:
        """Never answers in time."""
        log.append(("slow_spend",))
        await asyncio.sleep(5)
        return "late"

    @tool(side_effect="read")
    def broken() -> str:
        """Raises."""
        raise RuntimeError("disk on fire")

    return {
        "lookup": lookup,
        "charge": charge,
        "slow_read": slow_read,
        "slow_spend": slow_spend,
        "broken": broken,
    }


@pytest.fixture
def env() -> tuple[Any, list[Any], dict[str, Any]]:
    """A store that validates every invocation and receipt the executor writes."""
    log: list[Any] = []
    return ValidatingGovernanceStore(MemoryGovernanceStore()), log, make_tools(log)


async def only_receipt(store: GovernanceStore) -> tuple[dict[str, Any], dict[str, Any]]:
    items = await store.receipts()
    assert len(items) == 1
    return items[0].invocation, items[0].receipt


def assert_valid_records(invocation: dict[str, Any], receipt: dict[str, Any]) -> None:
    assert validate(invocation, "invocation").valid, validate(invocation, "invocation").errors
    assert validate(receipt, "receipt").valid, validate(receipt, "receipt").errors


async def test_a_read_call_succeeds_with_a_valid_invocation_receipt_and_ledger(env) -> None:
    store, log, tools = env
    ex = GovernedExecutor(store)
    result = await ex.execute(tools["lookup"], call("lookup", {"key": "k"}), {"key": "k"}, CTX)
    assert not result.is_error and unfence(result.content) == "value of k"
    invocation, receipt = await only_receipt(store)
    assert_valid_records(invocation, receipt)
    assert invocation["toolId"] == "lookup" and invocation["scope"] == {"tenantId": "acme"}
    assert invocation["argumentsHash"] == digest({"key": "k"})
    assert invocation["policyDecision"]["effect"] == "allow"
    assert invocation["policyDecision"]["policyVersion"] == ex.policy.version
    assert "approvalId" not in invocation
    assert receipt["status"] == "Succeeded" and receipt["sanitized"] is True
    assert await store.artifact(receipt["resultRef"]) == b"value of k"
    assert receipt["usage"]["bytesOut"] == len(b"value of k")
    assert receipt["usage"]["bytesIn"] == len(b'{"key":"k"}')
    assert "effect" not in receipt
    ledger = await store.ledger()
    assert [e.kind for e in ledger] == ["invocation", "receipt"]
    assert verify_chain(ledger).ok
    assert log == [("lookup", "k")]
    assert store.checked == 2  # both records went through the validating wrapper


async def test_the_validating_wrapper_refuses_a_broken_record_and_stores_nothing(env) -> None:
    store, _, tools = env
    await GovernedExecutor(store).execute(
        tools["lookup"], call("lookup", {"key": "k"}), {"key": "k"}, CTX
    )
    invocation, receipt = await only_receipt(store)
    forged = {**receipt, "invocationId": str(uuid.uuid4()), "status": "Succeeded"}
    with pytest.raises(DocumentInvalid, match="receiptHash does not match"):
        await store.finish(forged, result=None, at=receipt["finishedAt"])
    broken = {**invocation, "argumentsHash": "sha256:" + "0" * 64}
    with pytest.raises(DocumentInvalid, match="argumentsHash does not match"):
        await store.refuse(broken, receipt, receipt["finishedAt"])
    assert len(await store.ledger()) == 2


async def test_a_spend_call_without_approval_or_policy_is_denied_and_not_run(env) -> None:
    store, log, tools = env
    args = {"order_id": "o1", "amount": 5}
    result = await GovernedExecutor(store).execute(tools["charge"], call("charge", args), args, CTX)
    assert result.is_error and "approval_required" in result.content
    invocation, receipt = await only_receipt(store)
    assert_valid_records(invocation, receipt)
    assert receipt["status"] == "Denied" and receipt["error"]["code"] == "approval_required"
    assert invocation["approvalId"] == NO_APPROVAL
    assert invocation["policyDecision"]["effect"] == "require_approval"
    assert log == []


async def test_a_policy_allow_is_a_standing_approval_decided_by_the_rule(env) -> None:
    store, log, tools = env
    args = {"order_id": "o1", "amount": 50}
    ex = GovernedExecutor(store, policy=ALLOW_CHARGE)
    result = await ex.execute(tools["charge"], call("charge", args), args, CTX)
    assert not result.is_error
    assert unfence(result.content) == '{"charged": 50}'
    invocation, receipt = await only_receipt(store)
    assert_valid_records(invocation, receipt)
    approval, used_by = await store.approval_for("run-1", "c1")
    assert approval.decided_by == "policy" and approval.principal == "small-charges"
    assert approval.arguments_hash == invocation["argumentsHash"]
    assert (
        invocation["approvalId"] == approval.approval_id and used_by == invocation["invocationId"]
    )
    effect = receipt["effect"]
    assert effect["kind"] == "charge" and effect["externalReference"] == "ch_o1"
    assert effect["reversible"] is False
    assert effect["effectHash"] == digest({k: v for k, v in effect.items() if k != "effectHash"})
    kinds = [e.kind for e in await store.ledger()]
    assert kinds == ["approval", "invocation", "receipt"]
    assert log == [("charge", "o1", 50)]


async def test_arguments_outside_the_rule_need_a_human(env) -> None:
    store, log, tools = env
    args = {"order_id": "o1", "amount": 51}
    ex = GovernedExecutor(store, policy=ALLOW_CHARGE)
    assert ex.review(tools["charge"], args, CTX).needs_approval
    result = await ex.execute(tools["charge"], call("charge", args), args, CTX)
    assert result.is_error and "approval_required" in result.content and log == []


async def test_a_policy_that_raises_denies(env) -> None:
    store, log, tools = env

    class Broken:
        policy_id, version = "broken", "sha256:" + "0" * 64

        def evaluate(self, request: Any) -> Any:
            raise ZeroDivisionError("bad rule")

    ex = GovernedExecutor(store, policy=Broken())
    assert not ex.review(tools["lookup"], {"key": "k"}, CTX).needs_approval
    result = await ex.execute(tools["lookup"], call("lookup", {"key": "k"}), {"key": "k"}, CTX)
    assert result.is_error and "policy_error" in result.content
    invocation, receipt = await only_receipt(store)
    assert invocation["policyDecision"]["effect"] == "deny"
    assert "ZeroDivisionError" in invocation["policyDecision"]["reasons"][0]
    assert receipt["status"] == "Denied" and log == []


async def test_a_deny_rule_names_its_rule(env) -> None:
    store, log, tools = env
    policy = RulePolicy.from_dict(
        {
            "policy": "p",
            "rules": [
                {"id": "no-lookups", "effect": "deny", "reason": "closed", "match": {"tool": "l*"}}
            ],
        }
    )
    result = await GovernedExecutor(store, policy=policy).execute(
        tools["lookup"], call("lookup", {"key": "k"}), {"key": "k"}, CTX
    )
    assert result.is_error and "no-lookups" in result.content and "policy_denied" in result.content
    invocation, _ = await only_receipt(store)
    assert invocation["policyDecision"]["ruleId"] == "no-lookups"
    assert log == []


async def human_approval(
    ex: GovernedExecutor, tools: dict[str, Any], args: dict[str, Any], **changes: Any
) -> Approval:
    return await ex.record_approval(
        tools["charge"], "c1", args, CTX, signer=process_approver("ana"), **changes
    )


async def test_a_human_approval_covers_exactly_its_arguments(env) -> None:
    store, log, tools = env
    ex = GovernedExecutor(store)
    approved = {"order_id": "o1", "amount": 70}
    await human_approval(ex, tools, approved)
    other = {"order_id": "o1", "amount": 700}
    result = await ex.execute(tools["charge"], call("charge", other), other, CTX)
    assert result.is_error and "approval_mismatch" in result.content and log == []
    result = await ex.execute(tools["charge"], call("charge", approved), approved, CTX)
    # the refused attempt holds no claim, so the approved arguments still run, once
    assert not result.is_error and log == [("charge", "o1", 70)]


async def test_an_approval_is_used_at_most_once(env) -> None:
    store, log, tools = env
    ex = GovernedExecutor(store)
    args = {"order_id": "o1", "amount": 70}
    approval = await human_approval(ex, tools, args)
    first = await ex.execute(tools["charge"], call("charge", args), args, CTX)
    assert not first.is_error
    # the same call again replays (same key); a new key with the used approval is refused
    again = await ex.execute(tools["charge"], call("charge", args), args, CTX)
    assert unfence(again.content) == unfence(first.content)
    keyed = tools["charge"]
    import dataclasses

    rekeyed = dataclasses.replace(keyed, idempotency_key=lambda a: "another-key")
    third = await ex.execute(rekeyed, call("charge", args), args, CTX)
    assert third.is_error and "approval_used" in third.content
    assert (await store.approval_for("run-1", "c1"))[1] is not None
    assert log == [("charge", "o1", 70)]
    assert approval.approval_id == (await store.approval_for("run-1", "c1"))[0].approval_id


@pytest.mark.parametrize(
    ("ctx", "code"),
    [
        (CallContext("run-2", "agent", {"tenantId": "acme"}, 1), "approval_required"),
        (CallContext("run-1", "agent", {"tenantId": "other"}, 1), "approval_wrong_scope"),
    ],
)
async def test_an_approval_for_another_run_or_scope_is_refused(env, ctx, code) -> None:
    store, log, tools = env
    ex = GovernedExecutor(store)
    args = {"order_id": "o1", "amount": 70}
    await human_approval(ex, tools, args)
    result = await ex.execute(tools["charge"], call("charge", args), args, ctx)
    assert result.is_error and code in result.content and log == []


async def test_an_approval_for_another_tool_is_refused(env) -> None:
    store, log, tools = env
    ex = GovernedExecutor(store)
    args = {"order_id": "o1", "amount": 70}
    await human_approval(ex, tools, args)
    import dataclasses

    other = dataclasses.replace(tools["charge"], name="charge_twice")
    result = await ex.execute(other, call("charge_twice", args), args, CTX)
    assert result.is_error and "approval_wrong_tool" in result.content and log == []


async def test_an_expired_approval_is_refused(env) -> None:
    store, log, tools = env
    ex = GovernedExecutor(store)
    args = {"order_id": "o1", "amount": 70}
    await human_approval(ex, tools, args, expires_at="2020-01-01T00:00:00Z")
    result = await ex.execute(tools["charge"], call("charge", args), args, CTX)
    assert result.is_error and "approval_expired" in result.content and log == []


async def test_a_second_approval_of_one_call_is_refused(env) -> None:
    store, _, tools = env
    ex = GovernedExecutor(store)
    args = {"order_id": "o1", "amount": 70}
    await human_approval(ex, tools, args)
    with pytest.raises(ConflictError) as err:
        await human_approval(ex, tools, {"order_id": "o1", "amount": 1})
    assert err.value.code == "already_decided"


async def test_a_timed_out_read_is_timedout_and_a_timed_out_spend_is_uncertain(env) -> None:
    store, log, tools = env
    ex = GovernedExecutor(
        store,
        policy=RulePolicy.from_dict(
            {"policy": "p", "rules": [{"id": "all", "effect": "allow", "reason": "t"}]}
        ),
    )
    read = await ex.execute(tools["slow_read"], call("slow_read", {}, "r"), {}, CTX)
    spend = await ex.execute(tools["slow_spend"], call("slow_spend", {}, "s"), {}, CTX)
    assert read.is_error and "timed out" in read.content
    assert spend.is_error and "unknown" in spend.content and "reconcile" in spend.content
    statuses = {i.invocation["toolId"]: i.receipt["status"] for i in await store.receipts()}
    assert statuses == {"slow_read": "TimedOut", "slow_spend": "Uncertain"}
    # an Uncertain call is never run again: the same call replays the Uncertain receipt
    again = await ex.execute(tools["slow_spend"], call("slow_spend", {}, "s"), {}, CTX)
    assert again.is_error and "unknown" in again.content
    assert log.count(("slow_spend",)) == 1


async def test_a_cancelled_side_effecting_call_is_uncertain(env) -> None:
    store, _, tools = env
    ex = GovernedExecutor(
        store,
        policy=RulePolicy.from_dict(
            {"policy": "p", "rules": [{"id": "all", "effect": "allow", "reason": "t"}]}
        ),
    )
    import dataclasses

    slow = dataclasses.replace(tools["slow_spend"], timeout_seconds=None)
    task = asyncio.create_task(ex.execute(slow, call("slow_spend", {}, "s"), {}, CTX))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    _, receipt = await only_receipt(store)
    assert receipt["status"] == "Uncertain" and receipt["error"]["code"] == "cancelled"


async def test_a_raising_tool_is_failed_with_its_message(env) -> None:
    store, _, tools = env
    result = await GovernedExecutor(store).execute(tools["broken"], call("broken", {}), {}, CTX)
    assert result.is_error and "disk on fire" in result.content
    invocation, receipt = await only_receipt(store)
    assert_valid_records(invocation, receipt)
    assert receipt["status"] == "Failed" and receipt["error"]["code"] == "RuntimeError"


async def test_a_failed_receipt_write_makes_a_side_effecting_call_uncertain(env) -> None:
    _, log, tools = env

    class FailingFinish(MemoryGovernanceStore):
        fail = 1

        async def finish(
            self, receipt: dict[str, Any], *, result: bytes | None, at: str, fence: Any = None
        ) -> None:
            if self.fail:
                self.fail -= 1
                raise OSError("disk full")
            await super().finish(receipt, result=result, at=at, fence=fence)

    failing = FailingFinish()
    args = {"order_id": "o1", "amount": 5}
    ex = GovernedExecutor(failing, policy=ALLOW_CHARGE)
    result = await ex.execute(tools["charge"], call("charge", args), args, CTX)
    assert result.is_error and "unknown" in result.content
    _, receipt = await only_receipt(failing)
    assert receipt["status"] == "Uncertain" and receipt["error"]["code"] == "receipt_failed"
    assert log == [("charge", "o1", 5)]


async def test_a_broken_idempotency_key_function_denies(env) -> None:
    store, log, tools = env
    import dataclasses

    keyless = dataclasses.replace(tools["lookup"], idempotency_key=lambda a: a["missing"])
    result = await GovernedExecutor(store).execute(
        keyless, call("lookup", {"key": "k"}), {"key": "k"}, CTX
    )
    assert result.is_error and "idempotency_key_failed" in result.content and log == []


async def test_results_are_sanitized_and_fenced_and_the_raw_result_is_kept(env) -> None:
    store, _, _ = env

    @tool(side_effect="read")
    def hostile() -> str:
        """Returns smuggled text."""
        return "ok\x1b[31m red\u200b\u202e" + "".join(chr(0xE0000 + ord(c)) for c in "hi")

    result = await GovernedExecutor(store).execute(hostile, call("hostile", {}), {}, CTX)
    assert unfence(result.content) == "ok red"
    _, receipt = await only_receipt(store)
    assert (await store.artifact(receipt["resultRef"])).decode().startswith("ok\x1b[31m")


async def test_an_oversized_result_is_capped_with_a_marker(env) -> None:
    store, _, _ = env

    @tool(side_effect="read")
    def big() -> str:
        """Returns a lot."""
        return "x" * 100_000

    ex = GovernedExecutor(store, max_result_chars=1000)
    result = await ex.execute(big, call("big", {}), {}, CTX)
    text = unfence(result.content)
    assert len(text) <= 1000 and "truncated" in text
    _, receipt = await only_receipt(store)
    assert receipt["usage"]["bytesOut"] == 100_000


async def test_an_in_progress_duplicate_waits_then_is_refused(env) -> None:
    store, log, tools = env
    args = {"key": "k"}
    ex = GovernedExecutor(store, duplicate_wait=0.05)
    # a live holder (this very process) without a receipt
    invocation_ex = GovernedExecutor(store)
    first, size = invocation_ex._invocation(tools["lookup"], call("lookup", args), args, CTX)
    first["idempotencyKey"] = "run:run-1:call:c1"
    first["policyDecision"] = invocation_ex._decision(
        invocation_ex._evaluate(tools["lookup"], args, CTX), "2026-01-01T00:00:00Z"
    )
    from oarlock.governance._calls import _Call

    c = _Call(tools["lookup"], call("lookup", args), CTX, args, first, "2026-01-01T00:00:00Z", size)
    assert (
        await store.begin(first, invocation_ex._claim(c), approval_id=None, grant=None, at=c.now)
        is None
    )
    result = await ex.execute(tools["lookup"], call("lookup", args), args, CTX)
    assert result.is_error and "idempotency_in_progress" in result.content
    assert log == []
    held = await store.claim_of("acme", "lookup", "run:run-1:call:c1")
    assert isinstance(held, ClaimHeld) and held.receipt is None
    # the same call made fresh (its model response just came) runs before its claim: it
    # ran, and its result is not used while the holder runs
    result = await ex.execute(tools["lookup"], call("lookup", args), args, FRESH)
    assert result.is_error and "idempotency_in_progress" in result.content
    assert log == [("lookup", "k")]
    assert "ran, but its result is not used" in result.content
    held = await store.claim_of("acme", "lookup", "run:run-1:call:c1")
    assert isinstance(held, ClaimHeld) and held.receipt is None
    assert held.claim.invocation_id == first["invocationId"]
    kept = [e.body for e in await store.ledger() if e.kind == "receipt"]
    assert [(r["status"], r["error"]["code"]) for r in kept] == [
        ("Denied", "idempotency_in_progress"),  # not run
        ("Failed", "idempotency_in_progress"),  # run, its result not used
    ]


async def test_a_plain_read_is_claimed_and_received_in_one_write(env) -> None:
    store, log, tools = env
    args = {"key": "k"}
    writes: list[str] = []

    class Spy:
        def __getattr__(self, name: str) -> Any:
            method = getattr(store, name)
            if name in ("begin", "finish", "record", "refuse", "take_over"):
                writes.append(name)
            return method

    result = await GovernedExecutor(Spy()).execute(  # type: ignore[arg-type]
        tools["lookup"], call("lookup", args), args, FRESH
    )
    assert not result.is_error and log == [("lookup", "k")]
    assert writes == ["record"]
    invocation, receipt = await only_receipt(store)
    assert_valid_records(invocation, receipt)
    assert [e.kind for e in await store.ledger()] == ["invocation", "receipt"]
    held = await store.claim_of("acme", "lookup", invocation["idempotencyKey"])
    assert held is not None and held.receipt == receipt
    # made fresh again (a worker that lost the lease, say): it runs, finds its key recorded
    # and replays that receipt
    again = await GovernedExecutor(store).execute(
        tools["lookup"], call("lookup", args), args, FRESH
    )
    assert unfence(again.content) == unfence(result.content)
    assert log == [("lookup", "k")] * 2
    # made in a resumed step: the key is looked up first, and the receipt replayed unrun
    writes.clear()
    resumed = await GovernedExecutor(Spy()).execute(  # type: ignore[arg-type]
        tools["lookup"], call("lookup", args), args, CTX
    )
    assert unfence(resumed.content) == unfence(result.content)
    assert log == [("lookup", "k")] * 2 and writes == ["begin"]
    assert [e.kind for e in await store.ledger()] == ["invocation", "receipt"]


async def test_a_tool_that_cannot_tell_its_outcome_is_uncertain_when_it_has_effects(env) -> None:
    from oarlock.errors import OutcomeUnknown

    store, _, _ = env

    @tool(side_effect="external")
    def post(text: str) -> str:
        """Posts somewhere far away."""
        raise OutcomeUnknown("the connection dropped after the request was sent")

    @tool(side_effect="read")
    def fetch(text: str) -> str:
        """Reads somewhere far away."""
        raise OutcomeUnknown("the connection dropped")

    allow = RulePolicy.from_dict(
        {"policy": "p", "rules": [{"id": "all", "effect": "allow", "reason": "t"}]}
    )
    ex = GovernedExecutor(store, policy=allow)
    posted = await ex.execute(post, call("post", {"text": "x"}, "p1"), {"text": "x"}, CTX)
    fetched = await ex.execute(fetch, call("fetch", {"text": "x"}, "f1"), {"text": "x"}, CTX)
    assert posted.is_error and "unknown" in posted.content
    assert fetched.is_error and "connection dropped" in fetched.content
    statuses = {i.invocation["toolId"]: i.receipt["status"] for i in await store.receipts()}
    assert statuses == {"post": "Uncertain", "fetch": "Failed"}

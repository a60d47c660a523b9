"""Approval decisions: every refusal names its reason with a code and changes nothing
(document, version and event log compared before and after), racing decisions never both
win, and the event log keeps what the document forgets.

Every run goes through ``ValidatingStore(MemoryStore())``: each written document is valid.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest

import oarlock
from oarlock.engine import Agent, Runner
from oarlock.errors import ConflictError, DecisionRefused
from oarlock.formats import RunDocument, dump_run
from oarlock.governance._records import Approval
from oarlock.governance._store import GovernanceStore
from oarlock.store import Event, RunSummary, StoredRun
from oarlock.testing import MemoryStore, ScriptedModel, ValidatingStore
from oarlock.tools import tool

T = TypeVar("T")
RAN: list[tuple[str, dict[str, Any]]] = []


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@pytest.fixture(autouse=True)
def _clear() -> None:
    RAN.clear()


@tool(side_effect="read")
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


@tool(side_effect="spend")
def refund(order_id: str, amount: int) -> str:
    """Refund an order."""
    RAN.append(("refund", {"order_id": order_id, "amount": amount}))
    return f"refunded {amount} on {order_id}"


@tool(side_effect="production")
def delete_account(user: str) -> str:
    """Delete an account."""
    RAN.append(("delete_account", {"user": user}))
    return "deleted"


@tool(side_effect="external", allow_response=True)
def ask_expert(question: str) -> str:
    """Ask an expert."""
    RAN.append(("ask_expert", {"question": question}))
    return "the tool answered"


TOOLS = [lookup, refund, delete_account, ask_expert]

WAITING_TURN = {"tool_calls": [
    {"name": "refund", "arguments": {"order_id": "A1", "amount": 80}, "id": "c_refund"},
    {"name": "lookup", "arguments": {"key": "k"}, "id": "c_lookup"},
    {"name": "delete_account", "arguments": {"user": "u1"}, "id": "c_delete"},
    {"name": "ask_expert", "arguments": {"question": "which?"}, "id": "c_ask"},
]}


class YieldingGovernance:
    """The governance store of a :class:`YieldingStore`: counts the approvals refused
    because the call has one already (two approvals raced), delegates everything else."""

    def __init__(self, inner: GovernanceStore, owner: YieldingStore) -> None:
        self.inner, self.owner = inner, owner

    async def record_approval(self, approval: Approval) -> None:
        try:
            await self.inner.record_approval(approval)
        except ConflictError:
            self.owner.conflicts += 1
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class YieldingStore:
    """Gives the event loop away inside every load and save, so that two operations
    started together really interleave (read, read, write, write); counts conflicts, in
    the runs and in the governance store."""

    def __init__(self, inner: ValidatingStore) -> None:
        self.inner = inner
        self.conflicts = 0
        self._governance = YieldingGovernance(inner.governance(), self)

    async def create(self, document: RunDocument, events: list[Event], *,
                     agent_ref: str | None = None, tenant: str = "default",
                     queue: str = "default", flush: bool = True) -> int:
        return await self.inner.create(document, events, agent_ref=agent_ref, tenant=tenant,
                                       queue=queue, flush=flush)

    async def load(self, run_id: str) -> StoredRun:
        stored = await self.inner.load(run_id)
        await asyncio.sleep(0)
        return stored

    async def save(self, document: RunDocument, expected_version: int,
                   events: list[Event], *, lease: Any = None, flush: bool = True) -> int:
        await asyncio.sleep(0)
        try:
            return await self.inner.save(document, expected_version, events, lease=lease,
                                         flush=flush)
        except ConflictError:
            self.conflicts += 1
            raise

    async def events(self, run_id: str) -> list[Event]:
        return await self.inner.events(run_id)

    async def list_runs(self, *, status: str | None = None, tags: dict[str, str] | None = None,
                        limit: int = 100, tenant: str | None = None) -> list[RunSummary]:
        return await self.inner.list_runs(status=status, tags=tags, limit=limit, tenant=tenant)

    async def ids_starting(self, prefix: str, *, limit: int = 10) -> list[str]:
        return await self.inner.ids_starting(prefix, limit=limit)

    def governance(self) -> Any:
        return self._governance

    async def close(self) -> None:
        await self.inner.close()


def make(turns: list[dict[str, Any]] | None = None, *, yielding: bool = False,
         ) -> tuple[Runner, Any]:
    store: Any = ValidatingStore(MemoryStore())
    if yielding:
        store = YieldingStore(store)
    model = ScriptedModel(turns or [WAITING_TURN, {"text": "done"}])
    return Runner(Agent("agent", model, tools=TOOLS), store), store


async def snapshot(store: Any, run_id: str) -> tuple[dict[str, Any], int, int]:
    stored = await store.load(run_id)
    return dump_run(stored.document), stored.version, len(await store.events(run_id))


async def refused(runner: Runner, run_id: str, call_id: str, decision: Any,
                  expect: str | None = None, **kwargs: Any) -> DecisionRefused:
    """Asserts the decision is refused (with code ``expect``, if given) and that nothing
    stored changed: not the run (document, version, events), nor the governance ledger,
    where an approval is recorded before the run takes it. Returns the error."""
    before = await snapshot(runner.store, run_id)
    ledger = await runner.store.governance().ledger()
    with pytest.raises(DecisionRefused) as caught:
        await runner.decide(run_id, call_id, decision, **kwargs)
    assert await snapshot(runner.store, run_id) == before
    if expect is not None:
        assert caught.value.code == expect
    assert await runner.store.governance().ledger() == ledger
    return caught.value


# -- refusals ------------------------------------------------------------------------------
REFUSALS: list[Any] = [
    pytest.param("c_nope", "approved", {}, "unknown_call", id="unknown-call-id"),
    pytest.param("c_lookup", "approved", {}, "unknown_call", id="auto-run-call-id"),
    pytest.param("", "denied", {"reason": "no"}, "unknown_call", id="empty-call-id"),
    pytest.param("c_refund", "denied", {}, "reason_required", id="denial-without-reason"),
    pytest.param("c_refund", "denied", {"reason": " \n"}, "reason_required",
                 id="denial-with-a-blank-reason"),
    pytest.param("c_refund", "responded", {"response": "done already"},
                 "response_not_allowed", id="responded-without-allow_response"),
    pytest.param("c_delete", "responded", {"response": "x"}, "response_not_allowed",
                 id="responded-on-needs-approval-tool"),
    pytest.param("c_refund", "approved", {"edited_arguments": {"order_id": "A1"}},
                 "invalid_edit", id="edit-missing-argument"),
    pytest.param("c_refund", "approved",
                 {"edited_arguments": {"order_id": "A1", "amount": "lots"}},
                 "invalid_edit", id="edit-wrong-type"),
    pytest.param("c_refund", "approved",
                 {"edited_arguments": {"order_id": "A1", "amount": 1, "extra": True}},
                 "invalid_edit", id="edit-unknown-argument"),
]


@pytest.mark.parametrize(("call_id", "decision", "kwargs", "code"), REFUSALS)
def test_refused_decisions_change_nothing(
    call_id: str, decision: str, kwargs: dict[str, Any], code: str,
) -> None:
    runner, _ = make()

    async def go() -> None:
        doc = await runner.start("q")
        assert doc.status == "waiting_approval"
        error = await refused(runner, doc.id, call_id, decision, **kwargs)
        assert error.code == code
        # and the run still takes a good decision afterwards
        doc = await runner.decide(doc.id, "c_refund", "approved")
        assert doc.pending_approvals[0].decision == "approved"

    run(go())


@pytest.mark.parametrize(("call_id", "decision", "kwargs", "code"), [
    pytest.param("c_ask", "responded", {}, "response_required",
                 id="responded-without-response"),
    pytest.param("c_refund", "denied",
                 {"edited_arguments": {"order_id": "A1", "amount": 1}, "reason": "no"},
                 "edit_needs_approval", id="edit-with-denial"),
    pytest.param("c_ask", "denied", {"edited_arguments": {"question": "other?"}, "reason": "no"},
                 "edit_needs_approval", id="edit-with-denial-on-allow_response-tool"),
    pytest.param("c_ask", "approved", {"response": "an answer"},
                 "response_needs_responded", id="response-with-approval"),
    pytest.param("c_ask", "denied", {"response": "an answer", "reason": "no"},
                 "response_needs_responded", id="response-with-denial"),
])
def test_malformed_decisions_are_refused_with_their_own_codes(
    call_id: str, decision: str, kwargs: dict[str, Any], code: str,
) -> None:
    runner, _ = make()

    async def go() -> None:
        doc = await runner.start("q")
        error = await refused(runner, doc.id, call_id, decision, code, **kwargs)
        assert error.code == code
        assert error.code != DecisionRefused.code  # never just the class default

    run(go())


def test_a_refused_approval_leaves_the_call_open_for_a_good_one() -> None:
    # the approval is kept in the governance store before the run records it: a refused
    # one must not be kept, or every later approval of the call would be already decided
    runner, store = make()

    async def then_approve() -> None:
        doc = await runner.start("q")
        error = await refused(runner, doc.id, "c_ask", "approved", response="an answer")
        assert error.code == "response_needs_responded"
        doc = await runner.decide(doc.id, "c_ask", "approved")
        assert [a.decision for a in doc.pending_approvals if a.tool_call_id == "c_ask"] == [
            "approved"]
        kept, used_by = await store.governance().approval_for(doc.id, "c_ask")
        assert (kept.tool_call_id, used_by) == ("c_ask", None)
        assert len([e for e in await store.governance().ledger()
                    if e.kind == "approval"]) == 1

    run(then_approve())


def test_second_decision_on_a_decided_call_is_refused() -> None:
    runner, _ = make()

    async def go() -> None:
        doc = await runner.start("q")
        doc = await runner.decide(doc.id, "c_refund", "approved")
        assert doc.status == "waiting_approval"  # three more wait
        for decision, kwargs in (("approved", {}), ("denied", {"reason": "no"}),
                                 ("approved", {"edited_arguments": {"order_id": "B",
                                                                    "amount": 2}})):
            error = await refused(runner, doc.id, "c_refund", decision, **kwargs)
            assert error.code == "already_decided"
        doc = await runner.decide(doc.id, "c_delete", "denied", reason="no")
        error = await refused(runner, doc.id, "c_delete", "approved")
        assert error.code == "already_decided"

    run(go())


SINGLE_TURN = {"tool_calls": [
    {"name": "refund", "arguments": {"order_id": "A1", "amount": 80}, "id": "c_refund"}]}


def test_second_decision_on_the_only_approval_is_already_decided() -> None:
    runner, _ = make([SINGLE_TURN, {"text": "done"}])

    async def go() -> None:
        doc = await runner.start("q")
        doc = await runner.decide(doc.id, "c_refund", "approved")
        assert doc.status == "running"
        error = await refused(runner, doc.id, "c_refund", "denied", reason="no")
        assert error.code == "already_decided"

    run(go())


@pytest.mark.parametrize("state", ["created", "all-decided", "completed", "cancelled",
                                   "failed"])
def test_decision_on_a_run_that_is_not_waiting_is_refused(state: str) -> None:
    turns = [WAITING_TURN, {"text": "done"}]
    if state == "failed":
        turns = [{"text": "x", "fail": [{"kind": "fatal"}]}]
    runner, _ = make(turns)

    async def go() -> None:
        if state == "created":
            doc, _ = await runner.create("q")
        else:
            doc = await runner.start("q")
        if state in ("all-decided", "completed"):
            for call_id in ("c_refund", "c_delete", "c_ask"):
                doc = await runner.decide(doc.id, call_id, "approved")
        if state == "completed":
            doc = await runner.resume(doc.id)
        if state == "cancelled":
            doc = await runner.cancel(doc.id)
        expected = {"created": "running", "all-decided": "running", "completed": "completed",
                    "cancelled": "cancelled", "failed": "failed"}[state]
        assert doc.status == expected
        for call_id in ("c_refund", "c_ask", "c_nope"):
            error = await refused(runner, doc.id, call_id, "approved")
            # a call still listed with its decision is named as decided; others: not waiting
            decided = state == "all-decided" and call_id != "c_nope"
            assert error.code == ("already_decided" if decided else "run_not_waiting")

    run(go())


# -- racing decisions --------------------------------------------------------------------------
@pytest.mark.parametrize(("first", "second"), [
    ("approved", "denied"), ("denied", "approved"), ("approved", "approved"),
    ("denied", "denied"),
])
def test_two_concurrent_decisions_on_one_call_exactly_one_wins(first: str, second: str) -> None:
    runner, store = make(yielding=True)

    async def go() -> None:
        doc = await runner.start("q")
        before = await store.events(doc.id)
        outcomes = await asyncio.gather(
            runner.decide(doc.id, "c_refund", first, reason="one"),
            runner.decide(doc.id, "c_refund", second, reason="two"),
            return_exceptions=True)
        assert store.conflicts >= 1  # the two really raced (for the run or the approval)
        won = [o for o in outcomes if isinstance(o, RunDocument)]
        lost = [o for o in outcomes if isinstance(o, BaseException)]
        assert len(won) == 1
        assert len(lost) == 1
        assert isinstance(lost[0], DecisionRefused)
        assert lost[0].code == "already_decided"
        winner = 0 if isinstance(outcomes[0], RunDocument) else 1
        decision, reason = ((first, "one"), (second, "two"))[winner]
        stored = (await store.load(doc.id)).document
        approval = stored.pending_approvals[0]
        assert (approval.decision, approval.reason) == (decision, reason)
        decided = [e for e in (await store.events(doc.id))[len(before):]
                   if e.kind == "approval_decided"]
        assert [(e.data["decision"], e.data["reason"]) for e in decided] == [(decision, reason)]
        # a winning approval is on record in the governance store, once
        if decision == "approved":
            kept, used_by = await store.governance().approval_for(doc.id, "c_refund")
            assert (kept.tool_call_id, kept.decided_by, used_by) == ("c_refund", "human", None)
        approvals = [e for e in await store.governance().ledger() if e.kind == "approval"]
        assert len(approvals) <= 1

    run(go())


def test_concurrent_decisions_on_different_calls_both_count() -> None:
    runner, store = make(yielding=True)

    async def go() -> None:
        doc = await runner.start("q")
        await asyncio.gather(
            runner.decide(doc.id, "c_refund", "approved"),
            runner.decide(doc.id, "c_delete", "denied", reason="never"),
            runner.decide(doc.id, "c_ask", "approved"))
        assert store.conflicts >= 1
        stored = (await store.load(doc.id)).document
        assert stored.status == "running"
        assert [(a.tool_call_id, a.decision) for a in stored.pending_approvals] == [
            ("c_refund", "approved"), ("c_delete", "denied"), ("c_ask", "approved")]
        doc = await runner.resume(doc.id)
        assert doc.status == "completed"
        assert sorted(name for name, _ in RAN) == ["ask_expert", "refund"]

    run(go())


def test_two_concurrent_decisions_on_the_only_approval() -> None:
    runner, store = make([SINGLE_TURN, {"text": "done"}], yielding=True)

    async def go() -> None:
        doc = await runner.start("q")
        outcomes = await asyncio.gather(
            runner.decide(doc.id, "c_refund", "approved"),
            runner.decide(doc.id, "c_refund", "denied", reason="no"), return_exceptions=True)
        assert store.conflicts >= 1
        won = [o for o in outcomes if isinstance(o, RunDocument)]
        lost = [o for o in outcomes if isinstance(o, BaseException)]
        assert len(won) == 1
        assert len(lost) == 1
        assert isinstance(lost[0], DecisionRefused)
        approved_won = isinstance(outcomes[0], RunDocument)
        # an approval leaves the call listed as decided until the approved call runs; a
        # denial of the only approval settles the run at once, so the call is no longer
        # waiting at all when the approval re-reads the run
        assert lost[0].code == ("already_decided" if approved_won else "run_not_waiting")
        events = await store.events(doc.id)
        assert [e.data["decision"] for e in events if e.kind == "approval_decided"] == [
            "approved" if approved_won else "denied"]
        doc = await runner.resume(doc.id)
        assert doc.status == "completed"
        result = doc.messages[2].content[0]
        if approved_won:
            assert RAN == [("refund", {"order_id": "A1", "amount": 80})]
            assert not result.is_error
        else:  # the losing approval never makes the denied call run
            assert RAN == []
            assert result.is_error
            assert "denied" in result.content

    run(go())


# -- the event log keeps what the document clears ----------------------------------------------
def test_event_log_keeps_approvals_and_arguments_after_the_document_clears_them() -> None:
    turns = [
        {"tool_calls": [
            {"name": "refund", "arguments": {"order_id": "A1", "amount": 80}, "id": "c1"},
            {"name": "delete_account", "arguments": {"user": "u1"}, "id": "c2"}]},
        {"tool_calls": [{"name": "ask_expert", "arguments": {"question": "which?"},
                         "id": "c3"}]},
        {"text": "done"},
    ]
    runner, store = make(turns)

    async def go() -> None:
        doc = await runner.start("q")
        await runner.decide(doc.id, "c1", "approved",
                            edited_arguments={"order_id": "A1", "amount": 30})
        await runner.decide(doc.id, "c2", "denied", reason="not today", by="policy")
        doc = await runner.resume(doc.id)
        assert doc.status == "waiting_approval"
        await runner.decide(doc.id, "c3", "responded", response="the blue one")
        doc = await runner.resume(doc.id)
        assert doc.status == "completed"

        # the document forgot the approvals ...
        stored = dump_run((await store.load(doc.id)).document)
        assert stored["pendingApprovals"] == []
        assert stored["bufferedToolResults"] == []
        assert oarlock.validate(stored, "run").valid
        # ... the event log did not
        events = await store.events(doc.id)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        requested = [e.data for e in events if e.kind == "approval_requested"]
        assert requested == [
            {"toolCallId": "c1", "toolName": "refund",
             "arguments": {"order_id": "A1", "amount": 80}},
            {"toolCallId": "c2", "toolName": "delete_account", "arguments": {"user": "u1"}},
            {"toolCallId": "c3", "toolName": "ask_expert", "arguments": {"question": "which?"}},
        ]
        decided = [e.data for e in events if e.kind == "approval_decided"]
        assert decided == [
            {"toolCallId": "c1", "toolName": "refund", "decision": "approved",
             "decidedBy": "human", "arguments": {"order_id": "A1", "amount": 80},
             "editedArguments": {"order_id": "A1", "amount": 30}},
            {"toolCallId": "c2", "toolName": "delete_account", "decision": "denied",
             "decidedBy": "policy", "arguments": {"user": "u1"}, "reason": "not today"},
            {"toolCallId": "c3", "toolName": "ask_expert", "decision": "responded",
             "decidedBy": "human", "arguments": {"question": "which?"},
             "response": "the blue one"},
        ]
        assert RAN == [("refund", {"order_id": "A1", "amount": 30})]
        # a refused decision writes no event
        before = len(events)
        with pytest.raises(DecisionRefused):
            await runner.decide(doc.id, "c1", "approved")
        assert len(await store.events(doc.id)) == before

    run(go())


def test_denial_by_policy_says_so_in_the_result() -> None:
    runner, _ = make([SINGLE_TURN, {"text": "done"}])

    async def go() -> None:
        doc = await runner.start("q")
        doc = await runner.decide(doc.id, "c_refund", "denied", reason="a rule", by="policy")
        result = doc.messages[2].content[0]
        assert result.is_error
        assert "policy" in result.content
        assert RAN == []

    run(go())


def test_an_edit_the_policy_denies_is_refused_before_anything_is_kept():
    """An edited approval is judged by the policy as the call would be: an edit the policy
    denies is refused (edit_denied) and nothing changes; one it allows is kept."""
    from oarlock.governance import RulePolicy

    policy = RulePolicy.from_dict(
        {
            "policy": "desk",
            "rules": [
                {
                    "id": "big-refunds",
                    "effect": "deny",
                    "reason": "over 100 goes to finance",
                    "match": {"tool": "refund", "arguments": {"amount": {"gt": 100}}},
                }
            ],
        }
    )
    turns = [
        {"tool_calls": [{"id": "c1", "name": "refund", "arguments": {"order_id": "o1",
                                                                     "amount": 90}}]},
        {"text": "done"},
    ]  # fmt: skip
    agent = Agent("desk", ScriptedModel(turns), tools=[refund], policy=policy)
    store = ValidatingStore(MemoryStore())
    runner = Runner(agent, store)

    async def main() -> None:
        doc = await runner.start("refund o1")
        assert doc.status == "waiting_approval"
        before = await store.load(doc.id)
        with pytest.raises(DecisionRefused) as refused:
            await runner.decide(doc.id, "c1", "approved",
                                edited_arguments={"order_id": "o1", "amount": 500})  # fmt: skip
        assert refused.value.code == "edit_denied"
        assert "big-refunds" in str(refused.value) and "finance" in str(refused.value)
        after = await store.load(doc.id)
        assert after.version == before.version
        doc = await runner.decide(doc.id, "c1", "approved",
                                  edited_arguments={"order_id": "o1", "amount": 60})  # fmt: skip
        doc = await runner.resume(doc.id)
        assert doc.status == "completed"
        assert RAN == [("refund", {"order_id": "o1", "amount": 60})]

    run(main())

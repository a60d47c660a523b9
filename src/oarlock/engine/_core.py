"""The turn loop as a pure state machine over the run document.

Nothing here does I/O or reads a clock: each function takes the document (mutated in
place), the facts the runner gathered (a model response, tool results, a decision, the
time) and returns the events to append. The runner commits the document and the events
together, so every state below is one a crash can leave, and one a resume continues:

    running --model responds, no tool calls----------------------------> completed
    running --model calls tools--> (tools planned and run) --all answered--> running
                                                         \\--some need a human--> waiting_approval
    waiting_approval --every decision made, approved calls run, all answered--> running
    running --before a model request, a limit is reached--> halted_max_turns | halted_budget
    any live status --cancel--> cancelled;   model error after retries --> failed
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from oarlock.errors import DecisionRefused, RunStateError
from oarlock.formats._jcs import portable_problem
from oarlock.formats._models import (
    AssistantMessage,
    Message,
    PendingApproval,
    RunDocument,
    RunStatus,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    Usage,
    UserMessage,
)
from oarlock.formats._time import is_before, is_rfc3339
from oarlock.governance._sanitize import fix_surrogates
from oarlock.store._base import Event

__all__ = [
    "TERMINAL",
    "CallModel",
    "Halt",
    "Idle",
    "PlanTools",
    "RunApproved",
    "apply_decision",
    "cancel",
    "check_decision",
    "continue_run",
    "expire_approvals",
    "fail",
    "lapsed",
    "halt",
    "new_run",
    "next_action",
    "on_model_response",
    "on_tools_planned",
    "on_tools_ran",
    "retry_run",
]

TERMINAL: frozenset[str] = frozenset(
    {"completed", "failed", "halted_budget", "halted_max_turns", "cancelled"}
)


@dataclass(frozen=True, slots=True)
class CallModel:
    pass


@dataclass(frozen=True, slots=True)
class PlanTools:
    calls: list[ToolCallPart]


@dataclass(frozen=True, slots=True)
class RunApproved:
    """Approved calls to run now, each with the arguments the approval covers."""

    calls: list[tuple[ToolCallPart, dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class Halt:
    status: Literal["halted_max_turns", "halted_budget"]
    reason: str


@dataclass(frozen=True, slots=True)
class Idle:
    """Nothing to do: the run is finished or waits for a human."""


Action = CallModel | PlanTools | RunApproved | Halt | Idle


def _ev(kind: str, now: str, **data: Any) -> Event:
    return Event(kind, now, data)


def new_run(
    *,
    run_id: str,
    agent: str,
    model: str,
    input: str,
    now: str,
    tags: dict[str, str] | None = None,
    history: Sequence[Message] = (),
) -> tuple[RunDocument, list[Event]]:
    """A new run whose conversation is ``history`` (earlier messages, copied), then
    ``input``; its turns count the assistant messages of the history."""
    earlier = [m.model_copy(deep=True) for m in history]
    _check_history(earlier)
    doc = RunDocument(
        format="oar/0.2",
        id=run_id,
        agent=agent,
        model=model,
        input=input,
        status="running",
        messages=[*earlier, UserMessage(role="user", content=[TextPart(type="text", text=input)])],
        pending_approvals=[],
        buffered_tool_results=[],
        usage=Usage(input_tokens=0, output_tokens=0, cost_usd=0),
        turns=sum(1 for m in earlier if isinstance(m, AssistantMessage)),
        created_at=now,
        updated_at=now,
    )
    if tags:
        doc.tags = dict(tags)
    return doc, [_ev("run_created", now, agent=agent, model=model, tags=tags or {})]


def _check_history(messages: list[Message]) -> None:
    """Earlier messages a run may start from: every tool call answered before the next
    user text, so that the history is a conversation a model accepts."""
    open_calls: set[str] = set()
    for message in messages:
        if isinstance(message, AssistantMessage):
            if open_calls:
                raise RunStateError(
                    "message history: tool calls without results: " + ", ".join(sorted(open_calls)),
                    code="history_invalid",
                )
            open_calls = {c.id for c in message.tool_calls}
        else:
            for part in message.content:
                if isinstance(part, ToolResultPart):
                    open_calls.discard(part.tool_call_id)
    if open_calls:
        raise RunStateError(
            "message history ends with tool calls that have no results: "
            + ", ".join(sorted(open_calls)),
            code="history_invalid",
        )


CONTINUABLE: frozenset[str] = frozenset({"completed"})
RETRYABLE: frozenset[str] = frozenset({"failed", "halted_max_turns", "halted_budget"})


def continue_run(doc: RunDocument, text: str, now: str) -> list[Event]:
    """Continue a completed run with a new user message: the conversation grows in one
    document, which runs again."""
    if doc.status not in CONTINUABLE:
        raise RunStateError(
            f"run {doc.id} is {doc.status}: only a completed run continues with a new message",
            code="run_state",
        )
    doc.messages.append(UserMessage(role="user", content=[TextPart(type="text", text=text)]))
    _clear(doc, "result")
    doc.updated_at = now
    return [_ev("user_message", now, text=text), *_status(doc, "running", now)]


def retry_run(doc: RunDocument, now: str) -> list[Event]:
    """Run again a run that stopped short (failed, or halted at a limit since raised) from
    its last committed step: its error is cleared, its conversation kept."""
    if doc.status not in RETRYABLE:
        raise RunStateError(
            f"run {doc.id} is {doc.status}: only a failed or halted run is retried",
            code="run_state",
        )
    _clear(doc, "error")
    return _status(doc, "running", now)


def _clear(doc: RunDocument, member: str) -> None:
    """Take an optional member out of the document (not null: absent)."""
    setattr(doc, member, None)
    doc.model_fields_set.discard(member)


def _limit_reached(doc: RunDocument, limits: Any) -> Halt | None:
    u = doc.usage
    if limits.max_turns is not None and doc.turns >= limits.max_turns:
        return Halt("halted_max_turns", f"the turn limit ({limits.max_turns}) is reached")
    checks = (
        ("cost", u.cost_usd, limits.max_cost_usd, " USD"),
        ("input tokens", u.input_tokens, limits.max_input_tokens, ""),
        ("output tokens", u.output_tokens, limits.max_output_tokens, ""),
    )
    for what, spent, limit, unit in checks:
        if limit is not None and spent >= limit:
            return Halt(
                "halted_budget",
                f"the {what} limit ({limit}{unit}) is reached: {round(spent, 6)}{unit} spent",
            )
    return None


def next_action(doc: RunDocument, limits: Any) -> Action:
    """What the runner must do next to move ``doc`` on."""
    if doc.status != "running":
        return Idle()
    last = doc.messages[-1]
    if isinstance(last, UserMessage):
        return _limit_reached(doc, limits) or CallModel()
    calls = last.tool_calls
    if not doc.buffered_tool_results and not doc.pending_approvals:  # none planned yet
        return PlanTools(calls) if calls else Idle()
    answered = {r.tool_call_id for r in doc.buffered_tool_results}
    pending = {a.tool_call_id: a for a in doc.pending_approvals}
    unplanned = [c for c in calls if c.id not in answered and c.id not in pending]
    if unplanned:
        return PlanTools(unplanned)
    approved = [
        (c, _approved_arguments(pending[c.id], c))
        for c in calls
        if c.id not in answered and pending[c.id].decision == "approved"
    ]
    return RunApproved(approved) if approved else Idle()


def _approved_arguments(approval: PendingApproval, call: ToolCallPart) -> dict[str, Any]:
    edited = approval.edited_arguments
    return call.arguments if edited is None else edited


def on_model_response(
    doc: RunDocument,
    message: AssistantMessage,
    *,
    input_tokens: int,
    output_tokens: int,
    cost: float | None,
    now: str,
    judge: Judge | None = None,
) -> list[Event]:
    """Append the assistant message and count its turn and usage. With ``judge`` (an
    agent with a typed output), an answer (text, or the final-answer tool called alone) is
    checked: a valid one completes the run with its JSON; an invalid one goes back to the
    model with the problems, ``judge.retries`` times at most, then the run fails."""
    _admit(message)
    calls = message.tool_calls
    _unique_call_ids(doc, calls)
    doc.messages.append(message)
    doc.turns += 1
    u = doc.usage
    u.input_tokens += input_tokens
    u.output_tokens += output_tokens
    if cost is None:
        if (u.model_extra or {}).get("costKnown") is not False:
            setattr(u, "costKnown", False)  # noqa: B010 - an extension member of usage
    else:
        u.cost_usd = round(u.cost_usd + cost, 10)
    doc.updated_at = now
    events = [
        _ev(
            "model_responded",
            now,
            turn=doc.turns,
            inputTokens=input_tokens,
            outputTokens=output_tokens,
            costUsd=cost,
            toolCalls=[c.id for c in calls],
        )
    ]
    if judge is not None:
        verdict = judge.check(message)
        if verdict is not None:
            events.extend(_answer(doc, message, verdict, judge, now))
            return events
    if not calls:
        doc.result = message.text
        events.extend(_status(doc, "completed", now))
    return events


class Judge(Protocol):
    """Checks an answer of an agent with a typed output (see :mod:`._output`)."""

    retries: int
    final_tool: str

    def check(self, message: AssistantMessage) -> Answer | None:
        """The answer a message gives (None: it calls tools, not an answer)."""
        ...

    def feedback(self, problem: str) -> str: ...


@dataclass(frozen=True, slots=True)
class Answer:
    stored: str | None  # the valid answer's JSON text
    problem: str | None  # what is wrong with it


def _answer(
    doc: RunDocument, message: AssistantMessage, answer: Answer, judge: Judge, now: str
) -> list[Event]:
    final = [c for c in message.tool_calls if c.name == judge.final_tool]
    if answer.stored is not None:
        if final:  # the call is answered, so that the conversation can go on later
            doc.messages.append(_feedback_message(final[0], "Final answer accepted.", False))
        doc.result = answer.stored
        return _status(doc, "completed", now)
    assert answer.problem is not None
    if _feedback_used(doc) >= judge.retries:
        return fail(doc, f"output_invalid: the answer does not match the output type "
                         f"({answer.problem})", now)  # fmt: skip
    text = judge.feedback(answer.problem)
    if final:
        doc.messages.append(_feedback_message(final[0], text, True))
    else:
        doc.messages.append(
            UserMessage.model_validate(
                {"role": "user", "content": [{"type": "text", "text": text}],
                 "outputFeedback": True}
            )
        )  # fmt: skip
    doc.updated_at = now
    return []


def _feedback_message(call: ToolCallPart, text: str, error: bool) -> UserMessage:
    part = {"type": "tool_result", "toolCallId": call.id, "toolName": call.name,
            "content": text, "isError": error}  # fmt: skip
    flag = {"outputFeedback": True} if error else {}
    return UserMessage.model_validate({"role": "user", "content": [part], **flag})


def _feedback_used(doc: RunDocument) -> int:
    """How many invalid answers were sent back since the user last spoke."""
    used = 0
    for message in reversed(doc.messages):
        if isinstance(message, UserMessage):
            if (message.model_extra or {}).get("outputFeedback"):
                used += 1
            elif any(isinstance(p, TextPart) for p in message.content):
                break
    return used


def _storable(value: Any) -> Any:
    """A value the model sent, as a run document can hold it: text with a lone surrogate
    (which no UTF-8 store can encode) gets U+FFFD in its place; any other value that is
    not portable JSON becomes its JSON text, escaped."""
    if isinstance(value, str):
        return fix_surrogates(value)
    if portable_problem(value) is None:
        return value
    return json.dumps(value, ensure_ascii=True, default=repr)


def _admit(message: AssistantMessage) -> None:
    """Make whatever a model sent storable, losing nothing a reader needs. A call whose
    arguments are not portable JSON (a number beyond ±(2**53 - 1), NaN, a lone surrogate
    in a key or a value) keeps them, as escaped JSON text, in ``rawArguments`` with
    ``arguments`` empty: it is never run, and the model is told why."""
    for part in message.content:
        if isinstance(part, TextPart):
            text = fix_surrogates(part.text)
            if text is not part.text:
                part.text = text
        elif isinstance(part, ToolCallPart):
            call_id, name = fix_surrogates(part.id), fix_surrogates(part.name)
            if call_id is not part.id:  # the same text comes back when nothing was wrong
                part.id = call_id
            if name is not part.name:
                part.name = name
            if portable_problem(part.arguments) is not None:
                raw = json.dumps(part.arguments, ensure_ascii=True, default=repr)
                part.arguments = {}
                setattr(part, "rawArguments", raw)  # noqa: B010 - an extension member
        extra = part.model_extra
        if extra:
            for key, value in extra.items():
                extra[key] = _storable(value)


def _unique_call_ids(doc: RunDocument, calls: list[ToolCallPart]) -> None:
    """A model that repeats a tool call id would make the document ambiguous: give the
    repeat a fresh id (the model sees it in the result)."""
    if not calls:
        return
    private = doc.__pydantic_private__
    if private is None:  # built without its private members: count every message
        private = {"_call_ids": set(), "_call_ids_counted": 0}
    seen = private["_call_ids"]  # the ids in the first ``counted`` messages (never changed)
    counted = private["_call_ids_counted"]
    messages = doc.messages
    if counted > len(messages):  # the messages were replaced: count them again
        seen.clear()
        counted = 0
    for m in messages[counted:]:
        if isinstance(m, AssistantMessage):
            seen.update(p.id for p in m.content if isinstance(p, ToolCallPart))
    private["_call_ids_counted"] = len(messages)
    fresh: set[str] = set()
    for call in calls:
        base, n = call.id, 1
        while call.id in seen or call.id in fresh:
            n += 1
            call.id = f"{base}~{n}"
        fresh.add(call.id)


def on_tools_planned(
    doc: RunDocument,
    results: list[ToolResultPart],
    approvals: list[ToolCallPart],
    now: str,
    deadlines: Mapping[str, str] | None = None,
) -> list[Event]:
    """Buffer the results of the calls that ran (or were refused) and ask for approval of
    the rest (each with its deadline, ``expiresAt``, when ``deadlines`` names one); if
    nothing waits, hand every result to the model."""
    events = [_tool_event(r, now) for r in results]
    doc.buffered_tool_results.extend(results)
    for call in approvals:
        pending = PendingApproval(
            tool_call_id=call.id,
            tool_name=call.name,
            arguments=call.arguments,
            requested_at=now,
        )
        if deadlines and call.id in deadlines:
            setattr(pending, "expiresAt", deadlines[call.id])  # noqa: B010 (an extra member)
        doc.pending_approvals.append(pending)
        events.append(
            _ev(
                "approval_requested",
                now,
                toolCallId=call.id,
                toolName=call.name,
                arguments=call.arguments,
            )
        )
    return events + _settle(doc, now)


def lapsed(pending: PendingApproval, now: str) -> str | None:
    """The deadline of an undecided approval that has passed by ``now``, else None."""
    deadline = (pending.model_extra or {}).get("expiresAt")
    if pending.decision is not None or not isinstance(deadline, str) or not is_rfc3339(deadline):
        return None
    return None if is_before(now, deadline) else deadline


def expire_approvals(doc: RunDocument, now: str) -> list[Event]:
    """Deny, as decided by policy, every undecided approval whose deadline has passed."""
    if doc.status != "waiting_approval":
        return []
    expired = [(a.tool_call_id, d) for a in doc.pending_approvals if (d := lapsed(a, now))]
    events: list[Event] = []
    for call_id, deadline in expired:
        reason = f"expired: no decision by {deadline}"
        events += apply_decision(doc, call_id, "denied", by="policy", now=now, reason=reason)
    return events


def on_tools_ran(doc: RunDocument, results: list[ToolResultPart], now: str) -> list[Event]:
    """Buffer the results of approved calls; hand everything over once all are in."""
    doc.buffered_tool_results.extend(results)
    return [_tool_event(r, now) for r in results] + _settle(doc, now)


def _tool_event(result: ToolResultPart, now: str) -> Event:
    return _ev(
        "tool_called",
        now,
        toolCallId=result.tool_call_id,
        toolName=result.tool_name,
        isError=result.is_error,
        contentChars=len(result.content),
    )


def check_decision(
    doc: RunDocument,
    call_id: str,
    decision: Literal["approved", "denied", "responded"],
    *,
    edited_arguments: dict[str, Any] | None = None,
    response: str | None = None,
) -> PendingApproval:
    """The pending approval a decision would apply to, or the DecisionRefused that
    :func:`apply_decision` would raise; changes nothing."""
    approval = _pending(doc, call_id)
    if decision == "responded" and response is None:
        raise DecisionRefused(
            "a 'responded' decision needs the response text", code="response_required"
        )
    if response is not None and decision != "responded":
        raise DecisionRefused(
            "a response goes only with a 'responded' decision", code="response_needs_responded"
        )
    if edited_arguments is not None and decision != "approved":
        raise DecisionRefused(
            "edited arguments go only with an approval", code="edit_needs_approval"
        )
    return approval


def apply_decision(
    doc: RunDocument,
    call_id: str,
    decision: Literal["approved", "denied", "responded"],
    *,
    by: Literal["human", "policy"],
    now: str,
    reason: str | None = None,
    edited_arguments: dict[str, Any] | None = None,
    response: str | None = None,
    principal: str | None = None,
) -> list[Event]:
    """Record a decision on a pending approval (who decided, when, and on what). Refuses
    (and changes nothing) a decision on a run that is not waiting, for an unknown call, or
    on a call already decided."""
    approval = check_decision(
        doc, call_id, decision, edited_arguments=edited_arguments, response=response
    )
    approval.decision, approval.decided_by, approval.decided_at = decision, by, now
    if principal is not None:
        approval.principal = principal
    if reason is not None:
        approval.reason = reason
    if edited_arguments is not None:
        approval.edited_arguments = edited_arguments
    if response is not None:
        approval.response = response
    if decision == "denied":
        text = f"The call was denied by {'a human' if by == 'human' else 'policy'}"
        doc.buffered_tool_results.append(
            ToolResultPart(
                type="tool_result",
                tool_call_id=call_id,
                tool_name=approval.tool_name,
                content=f"{text}: {reason}" if reason else f"{text}.",
                is_error=True,
            )
        )
    elif decision == "responded":
        doc.buffered_tool_results.append(
            ToolResultPart(
                type="tool_result",
                tool_call_id=call_id,
                tool_name=approval.tool_name,
                content=response or "",
            )
        )
    record = {
        k: v
        for k, v in (
            ("reason", reason),
            ("editedArguments", edited_arguments),
            ("response", response),
            ("principal", principal),
        )
        if v is not None
    }
    return [
        _ev(
            "approval_decided",
            now,
            toolCallId=call_id,
            toolName=approval.tool_name,
            decision=decision,
            decidedBy=by,
            arguments=approval.arguments,
            **record,
        ),
        *_settle(doc, now),
    ]


def _pending(doc: RunDocument, call_id: str) -> PendingApproval:
    approval = next((a for a in doc.pending_approvals if a.tool_call_id == call_id), None)
    if approval is not None and approval.decision is not None:
        raise DecisionRefused(
            f"call {call_id} was already {approval.decision}", code="already_decided"
        )
    if doc.status != "waiting_approval":
        raise DecisionRefused(
            f"run {doc.id} is {doc.status}, not waiting for approval", code="run_not_waiting"
        )
    if approval is None:
        waiting = [a.tool_call_id for a in doc.pending_approvals if a.decision is None]
        raise DecisionRefused(
            f"run {doc.id} has no pending approval for call {call_id!r}; "
            f"waiting: {', '.join(waiting)}",
            code="unknown_call",
        )
    return approval


def _settle(doc: RunDocument, now: str) -> list[Event]:
    doc.updated_at = now
    if any(a.decision is None for a in doc.pending_approvals):
        return _status(doc, "waiting_approval", now)
    last = doc.messages[-1]
    by_id = {r.tool_call_id: r for r in doc.buffered_tool_results}
    calls = last.tool_calls if isinstance(last, AssistantMessage) else []
    if all(c.id in by_id for c in calls):
        doc.messages.append(UserMessage(role="user", content=[by_id[c.id] for c in calls]))
        if doc.pending_approvals:
            doc.decisions = [*doc.decisions, *doc.pending_approvals]
        doc.pending_approvals.clear()
        doc.buffered_tool_results.clear()
    return _status(doc, "running", now)


def _status(doc: RunDocument, status: RunStatus, now: str) -> list[Event]:
    if doc.status == status:
        return []
    old, doc.status = doc.status, status
    doc.updated_at = now
    return [_ev("status_changed", now, **{"from": old, "to": status})]


def halt(doc: RunDocument, action: Halt, now: str) -> list[Event]:
    doc.error = action.reason
    return _status(doc, action.status, now)


def fail(doc: RunDocument, error: str, now: str) -> list[Event]:
    doc.error = error
    return _status(doc, "failed", now)


def cancel(doc: RunDocument, now: str, reason: str | None = None) -> list[Event]:
    """Cancel a live run; undecided approvals stay in the document."""
    if doc.status in TERMINAL:
        raise RunStateError(f"run {doc.id} is already {doc.status}", code="run_finished")
    if reason:
        doc.error = reason
    return _status(doc, "cancelled", now)

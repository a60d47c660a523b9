"""What the server does, over the same store, runner and governance code as the command
line: every operation here is a call the CLI makes too (``Runner.submit``,
``Runner.decide``, ``cancel_run``, ``Runner.resume``, the governance store's reads and
``reconcile``, ``verify_chains``), scoped to the caller's tenant.

A run, approval, receipt or artifact of another tenant is NotFound, as one that does not
exist: the tenant comes from the principal only."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from oarlock._secrets import redact_json
from oarlock.errors import NotFound, OarlockError, RunStateError, UsageError
from oarlock.formats._time import now_rfc3339
from oarlock.server import _exact, _scope
from oarlock.server._errors import ApiError

if TYPE_CHECKING:
    from oarlock.engine._agent import Agent
    from oarlock.engine._runner import Runner
    from oarlock.formats._models import PendingApproval, RunDocument
    from oarlock.governance._approvers import ApproverKey
    from oarlock.governance._records import StoredReceipt
    from oarlock.server._tokens import Principal
    from oarlock.store._base import RunStore, StoredRun

__all__ = ["AgentEntry", "Service", "approval_version", "check_text", "load_agents"]

log = logging.getLogger("oarlock.server")
_RECEIPT_SCAN = 5000  # receipts looked through for a tenant's list without a run filter
Decision = Literal["approved", "denied", "responded"]


@dataclass(frozen=True, slots=True)
class AgentEntry:
    """An agent file the server was given."""

    name: str
    path: str
    agent: Agent

    def to_json(self) -> dict[str, Any]:
        a = self.agent
        return {
            "name": self.name,
            "file": Path(self.path).name,
            "model": a.model.model_id,
            "instructions": a.instructions,
            "tools": [
                {
                    "name": t.name,
                    "sideEffect": t.side_effect,
                    "description": t.description,
                    "allowResponse": t.allow_response,
                }
                for t in (a.tools.get(n) for n in a.tools.names())
                if t is not None
            ],
            "policy": None if a.policy is None else a.policy.policy_id,
        }


def load_agents(folder: str | Path | None) -> tuple[list[AgentEntry], list[str]]:
    """The agents of every ``*.yaml``/``*.yml`` agent file of ``folder`` (not its
    subfolders), and the problems of the files that do not load."""
    from oarlock.engine._agentfile import load_agent

    if folder is None:
        return [], []
    entries, problems = [], []
    for path in sorted(Path(folder).iterdir()):
        if path.suffix not in (".yaml", ".yml") or not path.is_file():
            continue
        if path.name.endswith((".script.yaml", ".policy.yaml")):
            continue  # a scripted model's turns or a policy, named by an agent file
        try:
            agent = load_agent(path.resolve())
        except OarlockError as exc:
            problems.append(f"{path.name}: {exc}")
            continue
        entries.append(AgentEntry(agent.name, str(path.resolve()), agent))
    return entries, problems


def _side_effect(agent: Agent | None, tool: str) -> str | None:
    found = None if agent is None else agent.tools.get(tool)
    return None if found is None else found.side_effect


def approval_version(run_id: str, pending: PendingApproval) -> str:
    """The approval's version, for If-Match: a digest of the call it is on (run, call,
    tool, arguments), its deadline and its decision so far. It changes when anything a
    decision is bound to changes."""
    extra = pending.model_extra or {}
    body = {
        "run": run_id,
        "call": pending.tool_call_id,
        "tool": pending.tool_name,
        "arguments": pending.arguments,
        "expiresAt": extra.get("expiresAt"),
        "decision": pending.decision,
    }
    raw = json.dumps(body, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    return hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:32]


@dataclass
class Service:
    """The operations of the API over ``store``."""

    store: RunStore
    agents: list[AgentEntry]
    approver: ApproverKey | None = None
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    _reviewers: dict[int, Runner] = field(default_factory=dict)
    _pending_cache: dict[str, tuple[int, list[Any]]] = field(default_factory=dict)
    _items: dict[tuple[str, int, str], dict[str, Any]] = field(default_factory=dict)

    # -- agents -----------------------------------------------------------------------
    def agents_of(self, principal: Principal) -> list[AgentEntry]:
        return [e for e in self.agents if e.agent.tenant == principal.tenant]

    def agent_named(self, principal: Principal, name: str) -> AgentEntry:
        for entry in self.agents_of(principal):
            if entry.name == name:
                return entry
        raise NotFound(f"no agent {name}", code="no_agent")

    # -- runs -------------------------------------------------------------------------
    async def load(self, principal: Principal, run_id: str) -> StoredRun:
        """The run, if it is of the principal's tenant (else NotFound, as none)."""
        if await _scope.tenant_of(self.store, run_id) != principal.tenant:
            raise NotFound(f"no run {run_id}")
        return await self.store.load(run_id)

    def _runner(self, agent: Agent) -> Runner:
        from oarlock.engine._runner import Runner

        return Runner(agent, self.store, approver=self.approver)

    def _reviewer(self, agent: Agent) -> Runner:
        """A runner of ``agent`` whose executor judges calls (kept for the agents of the
        last few runs looked at)."""
        found = self._reviewers.get(id(agent))
        if found is None or found.agent is not agent:
            if len(self._reviewers) > 64:
                self._reviewers.clear()
            found = self._reviewers[id(agent)] = self._runner(agent)
        return found

    def _run_agent(self, stored: StoredRun) -> Agent:
        from oarlock.engine._agentfile import run_agent

        doc = stored.document
        return run_agent(stored.agent_ref, doc.model, doc.id)

    async def create_run(
        self, principal: Principal, agent_name: str, text: str, tags: dict[str, str]
    ) -> RunDocument:
        """Store a run of one of the tenant's agents; a worker drives it."""
        from oarlock.engine._agentfile import run_agent

        entry = self.agent_named(principal, agent_name)
        agent = run_agent(entry.path, entry.agent.model.model_id, "new")
        tags = {**tags, "startedBy": principal.name}  # the principal's, whatever was sent
        return await self._runner(agent).submit(
            text, tags=tags, agent_ref=entry.path, run_id=str(uuid.uuid4())
        )

    async def list_runs(
        self,
        principal: Principal,
        *,
        limit: int,
        cursor: str | None,
        status: str | None,
        agent: str | None,
        tags: dict[str, str],
    ) -> _scope.RunPage:
        after = None if cursor is None else _scope.Cursor.decode(cursor)
        return await _scope.list_runs(
            self.store,
            tenant=principal.tenant,
            limit=limit,
            status=status,
            agent=agent,
            tags=tags,
            after=after,
        )

    async def events(self, principal: Principal, run_id: str, after: int) -> list[dict[str, Any]]:
        await self.load(principal, run_id)
        return [
            {"seq": e.seq, "kind": e.kind, "at": e.at, "data": e.data}
            for e in await self.store.events(run_id)
            if e.seq > after
        ]

    async def cancel(self, principal: Principal, run_id: str, reason: str | None) -> RunDocument:
        from oarlock.engine import _dispatch as dispatch
        from oarlock.engine._runner import cancel_run

        await self.load(principal, run_id)
        why = reason or f"cancelled by {principal.name}"
        # where the run is driven: in the store, or by its Temporal workflow's cancel signal
        async def native() -> RunDocument:
            doc = await cancel_run(self.store, run_id, why)
            agent = None
            if any(a.decision is None for a in doc.pending_approvals):
                agent = self._agent_or_none(await self.store.load(run_id))
            if agent is not None:  # the calls it left waiting: on the ledger as cancelled
                from oarlock.engine._settled import record_settled_calls

                runner = self._runner(agent)
                await record_settled_calls(agent, runner.executor, doc, runner._ctx(doc))
            return doc

        return await dispatch.cancel(self.store, run_id, why, native=native)

    async def resume(self, principal: Principal, run_id: str) -> RunDocument:
        """Drive a running run now, in this process, under its lease (as ``oarlock
        resume``); refused for a run that is not running or that another process holds."""
        from oarlock.errors import RunBusy
        from oarlock.store._queue import RunQueue

        stored = await self.load(principal, run_id)
        doc = stored.document
        if doc.status != "running":
            raise RunStateError(
                f"run {run_id} is {doc.status}: only a running run is resumed", code="run_state"
            )
        from oarlock.engine._dispatch import driver

        driver(doc, "resume")  # a run Temporal drives is its workflow's: refused
        if isinstance(self.store, RunQueue):
            for lease in await self.store.leases():
                if lease.run_id == run_id:
                    raise RunBusy(f"run {run_id} is being driven by {lease.owner}")
        agent = self._run_agent(stored)
        self._spawn(self._runner(agent).resume(run_id), f"resuming run {run_id}")
        return doc

    def _spawn(self, work: Any, what: str) -> None:
        async def guarded() -> None:
            try:
                await work
            except OarlockError as exc:
                log.warning("%s: %s", what, exc)

        task = asyncio.ensure_future(guarded())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- approvals --------------------------------------------------------------------
    def _review(self, agent: Agent | None, doc: RunDocument, pending: PendingApproval) -> Any:
        """The policy's verdict on the call as it stands (the rule and reasons that asked
        for the approval), as the runner's executor gives it."""
        if agent is None:
            return None
        tool = agent.tools.get(pending.tool_name)
        if tool is None:
            return None
        try:
            runner = self._reviewer(agent)
            arguments = tool.validate_arguments(pending.arguments)
            return runner.executor.review(tool, arguments, runner._ctx(doc))
        except Exception:  # the call is invalid now; the run says so when it resumes
            return None

    def approval_json(
        self, stored: StoredRun, pending: PendingApproval, agent: Agent | None
    ) -> dict[str, Any]:
        doc = stored.document
        tool = None if agent is None else agent.tools.get(pending.tool_name)
        review = self._review(agent, doc, pending)
        extra = pending.model_extra or {}
        return {
            "runId": doc.id,
            "toolCallId": pending.tool_call_id,
            "tool": pending.tool_name,
            "sideEffect": None if tool is None else tool.side_effect,
            "allowResponse": False if tool is None else tool.allow_response,
            "argumentsSchema": None if tool is None else tool.parameters,
            "arguments": pending.arguments,
            "argumentsHash": _exact.arguments_hash(tool, pending.arguments),
            "argumentsRedacted": redact_json(pending.arguments)[1],
            "requestedAt": pending.requested_at,
            "expiresAt": extra.get("expiresAt"),
            "agent": doc.agent,
            "tags": doc.tags or {},
            "runStatus": doc.status,
            "policy": None
            if review is None
            else {
                "ruleId": review.rule_id,
                "reasons": list(review.reasons),
                "fourEyes": review.four_eyes,
            },
            "decision": pending.decision,
            "decidedBy": pending.principal,
            "version": approval_version(doc.id, pending),
        }

    def _agent_or_none(self, stored: StoredRun) -> Agent | None:
        for entry in self.agents:
            if entry.path == stored.agent_ref and entry.agent.model.model_id == (
                stored.document.model
            ):
                return entry.agent
        try:
            return self._run_agent(stored)
        except OarlockError:
            return None

    async def pending(
        self,
        principal: Principal,
        *,
        agent: str | None = None,
        tool: str | None = None,
        side_effect: str | None = None,
        tags: dict[str, str] | None = None,
        order: str = "newest",
        limit: int = 100,
    ) -> list[dict[str, Any]]:
        """The undecided approvals of every waiting run of the tenant, newest (or with
        the nearest deadline) first: at most ``limit``, each with the policy's verdict."""
        found: list[tuple[StoredRun, Agent | None, PendingApproval]] = []
        cursor: _scope.Cursor | None = None
        while True:
            page = await _scope.list_runs(
                self.store,
                tenant=principal.tenant,
                limit=500,
                status="waiting_approval",
                agent=agent,
                tags=tags,
                after=cursor,
            )
            for run in page.runs:
                found += await self._pending_of(run["id"], page.versions[run["id"]])
            if page.next is None:
                break
            cursor = page.next

        def deadline(item: tuple[StoredRun, Agent | None, PendingApproval]) -> tuple[Any, ...]:
            due = (item[2].model_extra or {}).get("expiresAt")
            return (due is None, due or "", item[0].document.id)

        found = [
            (stored, a, p)
            for stored, a, p in found
            if (tool is None or p.tool_name == tool)
            and (side_effect is None or _side_effect(a, p.tool_name) == side_effect)
        ]
        if order == "deadline":
            found.sort(key=deadline)
        else:
            found.sort(key=lambda i: (i[2].requested_at, i[0].document.id), reverse=True)
        return [self._item(s, p, a) for s, a, p in found[:limit]]

    def _item(self, stored: StoredRun, pending: PendingApproval, agent: Agent | None) -> Any:
        """:meth:`approval_json`, kept while the run stays at its version."""
        key = (stored.document.id, stored.version, pending.tool_call_id)
        item = self._items.get(key)
        if item is None:
            if len(self._items) > 20_000:
                self._items.clear()
            item = self._items[key] = self.approval_json(stored, pending, agent)
        return dict(item)

    async def _pending_of(
        self, run_id: str, version: int
    ) -> list[tuple[StoredRun, Agent | None, PendingApproval]]:
        """The run's undecided approvals, read again only when the run's version moved
        (a page of the inbox reads the documents of the runs that changed, not all)."""
        cached = self._pending_cache.get(run_id)
        if cached is not None and cached[0] == version:
            return cached[1]
        try:
            stored = await self.store.load(run_id)
        except NotFound:
            return []
        agent = self._agent_or_none(stored)
        out = [
            (stored, agent, p) for p in stored.document.pending_approvals if p.decision is None
        ]
        if len(self._pending_cache) > 20_000:
            self._pending_cache.clear()
        self._pending_cache[run_id] = (stored.version, out)
        return out

    async def approval(
        self, principal: Principal, run_id: str, call_id: str
    ) -> tuple[StoredRun, PendingApproval, dict[str, Any]]:
        stored = await self.load(principal, run_id)
        doc = stored.document
        for pending in [*doc.pending_approvals, *reversed(doc.decisions)]:
            if pending.tool_call_id == call_id:
                return (
                    stored,
                    pending,
                    self.approval_json(stored, pending, self._agent_or_none(stored)),
                )
        raise NotFound(f"run {run_id} has no approval for call {call_id}", code="unknown_call")

    async def decidable(
        self, principal: Principal, run_id: str, call_id: str, decision: str | None
    ) -> tuple[StoredRun, PendingApproval, dict[str, Any]]:
        """:meth:`approval`, if ``principal`` may make ``decision`` on it (any, when None):
        :func:`~oarlock.server._auth.decision_refusal` says, for every entry point."""
        from oarlock.server._auth import DecisionScope, authorize_decision

        stored, pending, item = await self.approval(principal, run_id, call_id)
        tenant = await _scope.tenant_of(self.store, run_id)
        authorize_decision(principal, DecisionScope.of(tenant, item), decision)
        return stored, pending, item

    async def decide(
        self,
        principal: Principal,
        run_id: str,
        call_id: str,
        decision: Decision,
        *,
        if_match: str,
        reason: str | None = None,
        edited: dict[str, Any] | None = None,
        response: str | None = None,
    ) -> RunDocument:
        """Record a decision with ``Runner.decide``, bound to the approval's version;
        the principal is the token's name. A worker drives the run on."""
        from oarlock.engine import _dispatch as dispatch
        from oarlock.formats._models import PendingApproval

        stored, pending, _ = await self.decidable(principal, run_id, call_id, decision)
        if pending.decision is not None:
            if pending.decided_by == "policy" and (pending.reason or "").startswith("expired"):
                raise ApiError(
                    410, "approval_expired", f"call {call_id} was not decided by its deadline"
                )
            raise ApiError(409, "already_decided", f"call {call_id} was already decided")
        if if_match.strip().strip('"') != approval_version(run_id, pending):
            raise ApiError(
                409,
                "approval_changed",
                f"the approval of call {call_id} is not at the version given in If-Match",
            )
        assert isinstance(pending, PendingApproval)
        dispatch.check_decision(decision, reason)  # a denial says why (reason_required)
        if decision != "approved" and edited is not None:
            raise UsageError(
                "edited arguments go only with an approval", code="edit_needs_approval"
            )
        edited = _exact.judge_edit(pending.arguments, edited)  # by value; None: as asked
        # where the run is driven: here by Runner.decide, or by its Temporal workflow
        return await dispatch.decide(
            self.store, run_id, call_id, decision, reason=reason, edited_arguments=edited,
            response=response, principal=principal.name,
            native=lambda: self._runner(self._run_agent(stored)).decide(
                run_id, call_id, decision, reason=reason, edited_arguments=edited,
                response=response, principal=principal.name,
            ),
        )  # fmt: skip

    # -- receipts and artifacts -------------------------------------------------------
    @staticmethod
    def _tenant_of_receipt(item: StoredReceipt) -> str | None:
        scope = item.invocation.get("scope") or {}
        tenant = scope.get("tenantId") if isinstance(scope, dict) else None
        return tenant if isinstance(tenant, str) else None

    async def receipts(
        self, principal: Principal, *, run_id: str | None, status: str | None, limit: int
    ) -> list[StoredReceipt]:
        from oarlock.governance._records import run_uuid

        gov = self.store.governance()
        if run_id is not None:
            await self.load(principal, run_id)
            items = await gov.receipts(run_id=run_uuid(run_id), status=status, limit=limit)
        else:
            items = await gov.receipts(status=status, limit=_RECEIPT_SCAN)
        return [i for i in items if self._tenant_of_receipt(i) == principal.tenant][:limit]

    async def receipt(
        self, principal: Principal, invocation_id: str
    ) -> tuple[dict[str, Any], dict[str, Any] | None, list[Any]]:
        gov = self.store.governance()
        invocation, receipt = await gov.load(invocation_id)
        scope = invocation.get("scope") or {}
        if not isinstance(scope, dict) or scope.get("tenantId") != principal.tenant:
            raise NotFound(f"no invocation {invocation_id}")
        return invocation, receipt, list(await gov.reconciliations(invocation_id))

    async def artifact(self, principal: Principal, invocation_id: str) -> bytes:
        _, receipt, _ = await self.receipt(principal, invocation_id)
        if receipt is None or "resultRef" not in receipt:
            raise NotFound(f"invocation {invocation_id} has no stored result", code="no_result")
        return await self.store.governance().artifact(receipt["resultRef"])

    async def reconcile(
        self,
        principal: Principal,
        invocation_id: str,
        outcome: Literal["succeeded", "not-applied"],
        evidence: str,
        supersede: bool,
    ) -> dict[str, Any]:
        from oarlock.governance._records import Reconciliation

        _, _, earlier = await self.receipt(principal, invocation_id)
        if supersede and not earlier:
            raise UsageError(
                f"invocation {invocation_id} has no reconciliation to supersede",
                code="nothing_to_supersede",
            )
        record = Reconciliation(
            reconciliation_id=str(uuid.uuid4()),
            invocation_id=invocation_id,
            outcome=outcome,
            evidence=evidence,
            by=principal.name,
            at=now_rfc3339(),
            supersedes=earlier[-1].reconciliation_id if supersede else None,
        )
        await self.store.governance().reconcile(record)
        return record.to_json()

    # -- audit ------------------------------------------------------------------------
    async def verify(self, principal: Principal) -> dict[str, Any]:
        """Verify the ledger chain that holds the tenant's records (its own on
        PostgreSQL; the one shared chain on SQLite, told as the tenant's only)."""
        return await _scope.verify(self.store, principal.tenant)


def check_text(value: str, what: str, limit: int) -> str:
    """Text that is stored: valid Unicode (no lone surrogate) and at most ``limit``
    characters."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(f"{what} is not valid Unicode", code="invalid_text") from None
    if len(value) > limit:
        raise UsageError(f"{what} is longer than {limit} characters", code="too_long")
    return value

"""The governed executor under a worker's lease: every write of a call is fenced by it, and
an idempotency claim taken under a lease epoch the run has left is stale whatever its
process is doing (here: this very process, alive), recovered as after a crash."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from oarlock.errors import LeaseLost
from oarlock.formats import dump_run, parse_run
from oarlock.formats._models import ToolCallPart
from oarlock.governance import CallContext, GovernedExecutor, RulePolicy, unfence
from oarlock.governance._owner import process_owner
from oarlock.store import MemoryStore
from oarlock.store._queue import Lease
from oarlock.testing import ValidatingGovernanceStore
from oarlock.tools import tool

EXAMPLE = "examples/runs/refund-waiting-approval.json"
RUN = "run-1"
ALLOW = RulePolicy.from_dict({"policy": "t", "rules": [
    {"id": "charges", "effect": "allow", "match": {"tool": "*charge"}}]})


class Env:
    def __init__(self) -> None:
        from pathlib import Path

        self.store = MemoryStore()
        self.gov = ValidatingGovernanceStore(self.store.governance())
        self.log: list[Any] = []
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        data = dump_run(parse_run((Path(__file__).parents[2] / EXAMPLE).read_bytes()))
        data.update(id=RUN, status="running", pendingApprovals=[])
        asyncio.run(self.store.create(parse_run(data), []))
        log = self.log

        @tool(side_effect="spend")
        def charge(order_id: str) -> str:
            """Charge an order."""
            log.append(("charge", order_id))
            return f"charged {order_id}"

        @tool(side_effect="read")
        def lookup(key: str) -> str:
            """Look a key up."""
            log.append(("lookup", key))
            return f"value of {key}"

        @tool(side_effect="spend")
        async def slow_charge(order_id: str) -> str:
            """Charge, taking a while."""
            log.append(("slow_charge", order_id))
            self.started.set()
            await self.release.wait()
            return "charged"

        self.tools = {"charge": charge, "lookup": lookup, "slow_charge": slow_charge}

    def executor(self, **kwargs: Any) -> GovernedExecutor:
        return GovernedExecutor(self.gov, policy=ALLOW, **kwargs)

    async def lease(self, owner: str, seconds: float = 30.0) -> Lease:
        return await self.store.claim_run(RUN, owner, lease_seconds=seconds)

    @staticmethod
    def ctx(fence: Lease | None) -> CallContext:
        return CallContext(RUN, "agent", {"tenantId": "acme"}, 1, fence=fence)

    async def call(self, name: str, args: dict[str, Any], fence: Lease | None,
                   **kwargs: Any) -> Any:
        part = ToolCallPart(type="tool_call", id="c1", name=name, arguments=args)
        return await self.executor(**kwargs).execute(self.tools[name], part, args,
                                                     self.ctx(fence))


@pytest.fixture
def env() -> Env:
    return Env()


async def test_a_claim_records_the_run_and_the_lease_epoch_it_was_taken_under(env: Env) -> None:
    lease = await env.lease("w1")
    result = await env.call("charge", {"order_id": "o1"}, lease)
    assert not result.is_error
    held = await env.gov.claim_of("acme", "charge", f"run:{RUN}:call:c1")
    assert held is not None
    assert (held.claim.run_id, held.claim.epoch, held.run_epoch) == (RUN, lease.epoch, 1)


async def test_a_spend_claim_of_an_epoch_the_run_left_is_uncertain_and_never_rerun(
    env: Env,
) -> None:
    old = await env.lease("w1", seconds=0.05)
    part = ToolCallPart(type="tool_call", id="c1", name="slow_charge", arguments={"order_id": "o1"})
    running = asyncio.ensure_future(env.executor().execute(
        env.tools["slow_charge"], part, {"order_id": "o1"}, env.ctx(old)))
    await env.started.wait()  # claimed under epoch 1; the worker stalls in the tool
    await asyncio.sleep(0.1)
    new = await env.lease("w2")  # the run passes on: epoch 2
    t0 = time.monotonic()
    result = await env.call("slow_charge", {"order_id": "o1"}, new, duplicate_wait=30)
    assert time.monotonic() - t0 < 5  # stale by epoch: no wait for a live owner
    assert result.is_error and "unknown" in result.content
    assert env.log == [("slow_charge", "o1")]  # run once, by the old holder
    [item] = await env.gov.receipts()
    assert item.receipt["status"] == "Uncertain"
    assert item.receipt["error"]["code"] == "interrupted"
    env.release.set()  # the old holder's tool ends: its receipt is refused
    with pytest.raises(LeaseLost):
        await running
    assert [r.receipt["status"] for r in await env.gov.receipts()] == ["Uncertain"]


async def test_a_read_claim_of_an_epoch_the_run_left_is_run_again_under_the_new_one(
    env: Env,
) -> None:
    old = await env.lease("w1", seconds=0.05)
    await begun(env, "lookup", {"key": "k"}, old)
    await asyncio.sleep(0.1)
    new = await env.lease("w2")
    result = await env.call("lookup", {"key": "k"}, new, duplicate_wait=30)
    assert unfence(result.content) == "value of k"
    held = await env.gov.claim_of("acme", "lookup", f"run:{RUN}:call:c1")
    assert held is not None and held.receipt is not None
    assert (held.claim.epoch, held.run_epoch) == (new.epoch, new.epoch)


async def test_a_claim_of_the_runs_current_epoch_with_a_live_owner_is_waited_for(
    env: Env,
) -> None:
    lease = await env.lease("w1")
    await begun(env, "charge", {"order_id": "o1"}, lease)
    result = await env.call("charge", {"order_id": "o1"}, lease, duplicate_wait=0.2)
    assert result.is_error and "idempotency_in_progress" in result.content
    assert env.log == []


async def test_a_call_under_a_lost_lease_writes_nothing_and_runs_nothing(env: Env) -> None:
    old = await env.lease("w1", seconds=0.05)
    await asyncio.sleep(0.1)
    await env.lease("w2")
    ledger = await env.gov.ledger()
    with pytest.raises(LeaseLost):
        await env.call("charge", {"order_id": "o1"}, old)
    part = ToolCallPart(type="tool_call", id="c2", name="charge", arguments={"order_id": "x"})
    refusing = GovernedExecutor(env.gov)  # the default policy: a refusal, not written either
    with pytest.raises(LeaseLost):
        await refusing.execute(env.tools["charge"], part, {"order_id": "x"}, env.ctx(old))
    assert env.log == []
    assert await env.gov.ledger() == ledger


async def test_a_lease_lost_while_the_tool_ran_refuses_its_receipt(env: Env) -> None:
    old = await env.lease("w1", seconds=0.05)
    part = ToolCallPart(type="tool_call", id="c1", name="slow_charge", arguments={"order_id": "o1"})
    running = asyncio.ensure_future(env.executor().execute(
        env.tools["slow_charge"], part, {"order_id": "o1"}, env.ctx(old)))
    await env.started.wait()
    await asyncio.sleep(0.1)
    await env.lease("w2")
    entries = len(await env.gov.ledger())
    env.release.set()
    with pytest.raises(LeaseLost):
        await running
    assert len(await env.gov.ledger()) == entries  # no receipt of the old holder
    assert await env.gov.receipts() == []


async def begun(env: Env, tool_name: str, args: dict[str, Any], fence: Lease) -> None:
    """A claim taken (and its invocation stored) under ``fence`` by this very process,
    which never writes its receipt."""
    from oarlock.formats._jcs import digest
    from oarlock.governance import Claim

    part = ToolCallPart(type="tool_call", id="c1", name=tool_name, arguments=args)
    invocation, _ = env.executor()._invocation(env.tools[tool_name], part, args, env.ctx(fence))
    invocation["idempotencyKey"] = f"run:{RUN}:call:c1"
    invocation["policyDecision"] = {"decisionId": "d0000000-0000-4000-8000-000000000000",
                                    "effect": "allow", "policyId": "t",
                                    "evaluatedAt": "2026-01-01T00:00:00Z"}
    if env.tools[tool_name].side_effect != "read":
        invocation["approvalId"] = "a0000000-0000-4000-8000-000000000000"
    claim = Claim("acme", tool_name, invocation["idempotencyKey"], invocation["invocationId"],
                  digest(args), process_owner(), "2026-01-01T00:00:00Z", time.time() + 300,
                  run_id=RUN, epoch=fence.epoch)
    held = await env.gov.begin(invocation, claim, approval_id=None, grant=None,
                               at="2026-01-01T00:00:00Z", fence=fence)
    assert held is None

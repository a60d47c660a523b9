"""A support agent for a bank, as in Pydantic AI's "bank support" example: dependencies
(a database connection) for the tools, a typed answer, and a card block that waits for a
human. The runs are kept in a SQLite file.

    python examples/bank_support.py [DB]                           # offline, scripted
    BANK_SUPPORT_MODEL=openai:gpt-4.1 python examples/bank_support.py  # a real model

Pydantic AI adds the customer's name to the instructions with a function of the
dependencies; here the balance tool gives the name with the balance.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

from pydantic import BaseModel, Field

from oarlock import Agent, RunContext, Runner, tool
from oarlock.models import ScriptedModel
from oarlock.store import SQLiteStore


@dataclass
class DatabaseConn:
    """A fake database for the example; in reality, a connection to PostgreSQL, say."""

    blocked_cards: set[int] = field(default_factory=set)

    async def customer_name(self, *, id: int) -> str | None:
        return "John" if id == 123 else None

    async def customer_balance(self, *, id: int, include_pending: bool) -> float:
        if id != 123:
            raise ValueError("Customer not found")
        return 123.45 if include_pending else 100.00

    async def block_card(self, *, id: int) -> None:
        self.blocked_cards.add(id)


@dataclass
class SupportDependencies:
    customer_id: int
    db: DatabaseConn


class SupportOutput(BaseModel):
    support_advice: str = Field(description="Advice returned to the customer")
    block_card: bool = Field(description="Whether to block their card or not")
    risk: int = Field(description="Risk level of query", ge=0, le=10)


@tool(side_effect="read")
async def customer_balance(ctx: RunContext[SupportDependencies], include_pending: bool) -> str:
    """Returns the customer's name and current account balance."""
    name = await ctx.deps.db.customer_name(id=ctx.deps.customer_id)
    balance = await ctx.deps.db.customer_balance(
        id=ctx.deps.customer_id, include_pending=include_pending
    )
    return f"{name}: ${balance:.2f}"


@tool(side_effect="production")  # production and above: a human approves each call
async def block_card(ctx: RunContext[SupportDependencies]) -> str:
    """Blocks the customer's card at once."""
    await ctx.deps.db.block_card(id=ctx.deps.customer_id)
    return "card blocked"


def _answer(advice: str, block: bool, risk: int) -> dict[str, object]:
    arguments = {"support_advice": advice, "block_card": block, "risk": risk}
    return {"tool_calls": [{"name": "final_result", "arguments": arguments}]}


SCRIPT = ScriptedModel(
    [  # what a model answers, turn by turn, for the two questions below
        {"tool_calls": [{"name": "customer_balance", "arguments": {"include_pending": True}}]},
        _answer("Hello John, your balance, pending transactions included, is $123.45.", False, 1),
        {"tool_calls": [{"id": "block-1", "name": "block_card", "arguments": {}}]},
        _answer("John, your card is blocked; a new one is on its way.", True, 8),
    ],
    name="bank-support",
)

support_agent = Agent(
    "bank-support",
    os.environ.get("BANK_SUPPORT_MODEL") or SCRIPT,
    output_type=SupportOutput,
    instructions=(
        "You are a support agent of our bank: help the customer, and judge the risk of "
        "their query. Address the customer by name. Block a card that may be lost or stolen."
    ),
    tools=[customer_balance, block_card],
)


if __name__ == "__main__":
    deps = SupportDependencies(customer_id=123, db=DatabaseConn())
    runner = Runner(support_agent, SQLiteStore(sys.argv[1] if len(sys.argv) > 1 else "bank.db"))
    result = runner.run_sync("What is my balance?", deps=deps)
    print(result.output)

    result = result.continue_with_sync("I just lost my card!", deps=deps)
    for call in result.pending_approvals:  # a human decides: here, a teller approves
        print(f"{call.tool_name} waits for a decision")
        result = result.approve_sync(call.tool_call_id, principal="teller:ana", deps=deps)
    print(result.output)
    print(f"blocked cards: {sorted(deps.db.blocked_cards)}")
    print(f"run {result.run_id}: {result.status}")

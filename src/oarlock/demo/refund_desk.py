"""Tools of the refund desk demo: an order lookup, the refund policy, and a refund."""

from __future__ import annotations

import hashlib

from oarlock.tools import ToolEffect, ToolOutput, tool

ORDERS = {
    "A-1001": {
        "order_id": "A-1001",
        "customer": "Ada",
        "total": 42.5,
        "currency": "EUR",
        "status": "delivered",
        "items": ["ceramic teapot"],
    },
    "A-1002": {
        "order_id": "A-1002",
        "customer": "Grace",
        "total": 310.0,
        "currency": "EUR",
        "status": "shipped",
        "items": ["espresso machine"],
    },
}


@tool(side_effect="read")
def lookup_order(order_id: str) -> dict[str, object]:
    """Look up an order by its id.

    Args:
        order_id: The order id, like A-1001.
    """
    order = ORDERS.get(order_id)
    if order is None:
        raise LookupError(f"no order {order_id}")
    return order


@tool(side_effect="read")
def refund_policy(order_id: str) -> str:
    """The refund policy that applies to an order.

    Args:
        order_id: The order id.
    """
    return "Damaged items are refunded in full within 30 days of delivery."


def refund_key(arguments: dict[str, object]) -> str:
    """One refund per order, whichever run asks for it."""
    return f"refund:{arguments['order_id']}"


@tool(side_effect="spend", idempotency_key=refund_key)
def issue_refund(order_id: str, amount: float, reason: str) -> ToolOutput:
    """Refund money to the customer. Needs a human's approval.

    Args:
        order_id: The order to refund.
        amount: The amount, in the order's currency; at most the order total.
        reason: Why, in a few words, for the customer's record.
    """
    order = ORDERS.get(order_id)
    if order is None:
        raise LookupError(f"no order {order_id}")
    total = float(str(order["total"]))
    if amount <= 0 or amount > total:
        raise ValueError(f"amount must be above 0 and at most {total}")
    refund_id = "rf_" + hashlib.sha256(f"{order_id}:{amount}".encode()).hexdigest()[:8]
    receipt = {
        "refund_id": refund_id,
        "order_id": order_id,
        "amount": amount,
        "currency": order["currency"],
    }
    return ToolOutput(receipt, ToolEffect("refund", external_reference=refund_id, reversible=False))

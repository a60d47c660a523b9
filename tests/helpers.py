"""Small helpers shared by the engine tests.

A successful tool result reaches the model sanitized and fenced as untrusted data
(``<untrusted-tool-result id="NONCE">``, a notice line, the text, the closing line), with
a fresh nonce for every call; an error result is sanitized only. These helpers give the
text back, so that tests can compare what a tool said rather than the random fence.
"""

from __future__ import annotations

import copy
from typing import Any

from oarlock.engine import Agent, Limits
from oarlock.governance._sanitize import unfence
from oarlock.models import ScriptedModel
from oarlock.tools import tool


def result_text(part: Any) -> str:
    """The text of a tool's result: unfenced when it succeeded, as is when it is an error.

    Raises ``ValueError`` when a successful result is not exactly one fenced block, so a
    result that escaped the fence fails the test instead of passing unnoticed."""
    if part.is_error:
        return str(part.content)
    return unfence(part.content)


def result_texts(parts: Any) -> list[str]:
    """:func:`result_text` of every tool result among ``parts``, in order."""
    return [result_text(p) for p in parts if p.type == "tool_result"]


_OPENING = '<untrusted-tool-result id="'


def _unfence_json(part: dict[str, Any]) -> None:
    content = part.get("content")
    fenced = isinstance(content, str) and content.startswith(_OPENING)
    if part.get("type") == "tool_result" and fenced:
        assert not part.get("isError"), "an error result is never fenced"
        part["content"] = {"unfenced": unfence(content)}  # raises if malformed


def unfenced_document(dumped: dict[str, Any]) -> dict[str, Any]:
    """A copy of a dumped run document (``dump_run``) in which every fenced tool result,
    in the messages and in the buffered results, is replaced by ``{"unfenced": text}``,
    so that two runs that made the same calls compare equal although every call got its
    own nonce, while a fenced result still differs from an unfenced one (a human's
    response is not fenced: it did not come from a tool)."""
    doc = copy.deepcopy(dumped)
    for message in doc.get("messages", []):
        content = message.get("content")
        if isinstance(content, list):
            for part in content:
                if isinstance(part, dict):
                    _unfence_json(part)
    for part in doc.get("bufferedToolResults", []):
        _unfence_json(part)
    return doc


@tool(side_effect="read")
async def echo(text: str) -> str:
    """Return the text."""
    return text


@tool(side_effect="spend")
async def pay(amount: float) -> str:
    """Pay an amount (needs approval)."""
    return f"paid {amount}"


def echo_agent(name: str, calls: int, *, pay_last: bool = False) -> Agent:
    """An agent whose model calls ``echo`` ``calls`` times (then ``pay``, with
    ``pay_last``, which waits for an approval), then answers "done"."""
    turns: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "echo", "arguments": {"text": f"turn {i}"}}]} for i in range(calls)
    ]
    if pay_last:
        turns.append({"tool_calls": [{"name": "pay", "arguments": {"amount": 5}}]})
    turns.append({"text": "done"})
    return Agent(name, ScriptedModel(turns), tools=[echo, pay], limits=Limits(max_turns=calls + 10))


def write_approver(folder: Any, principal: str = "user:test") -> Any:
    """An approver's key in ``folder`` (``approver.key``, mode 0600, and ``.pub``) and an
    ``approvers.yaml`` beside it that trusts it for ``principal``; the key's path."""
    from pathlib import Path

    from oarlock.governance._ledger import generate_key, public_key_pem, save_private_key

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    key = generate_key()
    path = folder / "approver.key"
    save_private_key(key, path)
    (folder / "approver.key.pub").write_text(public_key_pem(key), "utf-8")
    (folder / "approvers.yaml").write_text(
        f"approvers:\n  - principal: {principal}\n    key: approver.key.pub\n", "utf-8"
    )
    return path


def priced_demo(tmp_path: Any, pattern: str) -> Any:
    """The demo agent file, next to its script, with a price for ``pattern`` (its cost
    limit refuses a model without one)."""
    from oarlock.demo import AGENT_FILE

    for source in AGENT_FILE.parent.glob("refund-desk*.yaml"):
        (tmp_path / source.name).write_text(source.read_text())
    priced = tmp_path / AGENT_FILE.name
    priced.write_text(
        priced.read_text()
        + f'pricing:\n  "{pattern}": {{input_per_million: 0.2, output_per_million: 0.6}}\n'
    )
    return priced


def invocation_record(
    key: str,
    *,
    arguments: dict[str, Any] | None = None,
    tenant: str = "acme",
    side_effect: str = "read",
    at: str = "2026-01-01T00:00:00.000000Z",
) -> dict[str, Any]:
    """A tool-invocation-v1 record of a ``charge`` call for the stores' tests, keyed ``key``,
    with fresh ids."""
    import uuid

    from oarlock.formats._jcs import digest

    arguments = {"order_id": "o1"} if arguments is None else arguments
    return {
        "invocationId": str(uuid.uuid4()),
        "toolId": "charge",
        "schemaVersion": "1",
        "scope": {"tenantId": tenant},
        "runId": str(uuid.uuid4()),
        "stepId": str(uuid.uuid4()),
        "attemptId": str(uuid.uuid4()),
        "sideEffectClass": side_effect,
        "idempotencyKey": key,
        "arguments": arguments,
        "argumentsHash": digest(arguments),
        "policyDecision": {
            "decisionId": str(uuid.uuid4()),
            "effect": "allow",
            "policyId": "p",
            "evaluatedAt": at,
        },
    }

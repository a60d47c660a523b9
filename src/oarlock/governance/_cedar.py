"""Cedar policies for governed tool calls (install with ``pip install 'oarlock[cedar]'``).

:class:`CedarPolicy` asks Cedar about a call in up to two requests::

    principal  Principal::"<scope principalId>"   (Principal::"anonymous" without one)
    action     Action::"invoke"                    may the call run now?
               Action::"request_approval"          may it run once a human approves?
    resource   Tool::"<tool name>"                 (MCP tools: Tool::"server.tool")
    context    tool, sideEffectClass, toolRequiresApproval (bool), arguments (record),
               tenantId, and when the scope has them projectId, environment, principalId,
               labels (record of strings)

If Cedar allows ``invoke`` the verdict is ``allow``; else if it allows
``request_approval`` the verdict is ``require_approval``; else ``deny``. A call of an
unregistered tool is denied without asking Cedar. An ``allow`` of a ``shared-write`` or
higher call (or of a tool that asks for a human) is a standing approval::

    @id("reads")
    permit(principal, action == Action::"invoke", resource)
    when { context.sideEffectClass == "read" && !context.toolRequiresApproval };

    @id("small-refunds") @approval_ttl("600")
    permit(principal, action == Action::"invoke", resource == Tool::"issue_refund")
    when { context.tenantId == "acme" &&
           context.arguments has amount && context.arguments.amount <= 50 };

    @id("ask-a-human")
    permit(principal, action == Action::"request_approval", resource);

    @id("no-prod-deploys")
    forbid(principal, action, resource)
    when { context has environment && context.environment == "prod" &&
           context.sideEffectClass == "production" };

The verdict's ``rule_id`` names the policies that decided, in the order of the text
(their ``@id``, else Cedar's ``policy0``, ``policy1``..., joined by commas).
``@approval_ttl("<seconds>")`` on a permit gives the lifetime of its standing approval
(``invoke``) or the deadline of the approval it asks for (``request_approval``; default:
the ``approval_ttl`` argument). When several such permits decide, the shortest wins.

Errors fail closed: Cedar skips a policy whose evaluation fails, which could silently
drop a ``forbid``; so when Cedar reports any error while answering a request, the call
is denied; the reasons start with ``policy evaluation failed`` and quote the errors.
Guard attributes that a call may lack with ``has`` (``context.arguments has amount``).

Arguments become Cedar values like this: strings, booleans and integers as they are
(integers beyond 64 bits become strings); objects become records; lists become sets
(order and duplicates are lost); ``null`` members are dropped, as are the keys
``__entity``, ``__extn`` and ``__expr`` (Cedar would read them as escapes). Cedar has
no floating point numbers: a float with an integral value (``50.0``) becomes a Long
(``50``); another float with at most four decimals becomes a ``decimal`` (compare it with
``.lessThanOrEqual(decimal("50.0"))``); any other float becomes its string (``"1e-05"``).
Comparing a decimal or a string with ``<=`` is an error, so such a call is denied.

``version`` is the digest of the policy text (with the entities and ``approval_ttl``,
when given, of ``{"policies": ..., "entities": ..., "approvalTtl": ...}``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from oarlock._input import decode_text, read_input
from oarlock.errors import CanonicalizationError, ConfigError
from oarlock.formats._jcs import digest
from oarlock.governance._policy import PolicyRequest, PolicyVerdict, _precheck, needs_approval

__all__ = ["CedarPolicy"]

_LONG = 2**63
_DECIMAL_MAX = 922_337_203_685_477
_RESERVED = frozenset({"__entity", "__extn", "__expr"})
_DROP: Any = object()
_INVOKE = {"type": "Action", "id": "invoke"}
_APPROVE = {"type": "Action", "id": "request_approval"}


def _number(f: float) -> Any:
    if not math.isfinite(f):
        return repr(f)
    if f.is_integer() and -_LONG <= f < _LONG:
        return int(f)
    text = repr(f)
    if "e" not in text and len(text.partition(".")[2]) <= 4 and abs(f) < _DECIMAL_MAX:
        return {"__extn": {"fn": "decimal", "arg": text}}
    return text


def _value(v: Any) -> Any:
    """``v`` as a Cedar JSON value, or ``_DROP``; raises for values that are not JSON."""
    if isinstance(v, str | bool):
        return v
    if isinstance(v, int):
        return v if -_LONG <= v < _LONG else str(v)
    if isinstance(v, float):
        return _number(v)
    if v is None:
        return _DROP
    if isinstance(v, Mapping):
        return _record(v)
    if isinstance(v, list | tuple):
        return [x for x in map(_value, v) if x is not _DROP]
    raise TypeError(f"{type(v).__name__} is not a JSON value")


def _record(m: Mapping[Any, Any]) -> dict[str, Any]:
    out = {}
    for k, v in m.items():
        if isinstance(k, str) and k not in _RESERVED:
            x = _value(v)
            if x is not _DROP:
                out[k] = x
    return out


def _context(request: PolicyRequest) -> dict[str, Any]:
    scope = request.scope if isinstance(request.scope, Mapping) else {}
    args = request.arguments
    context: dict[str, Any] = {
        "tool": request.tool,
        "sideEffectClass": request.side_effect_class,
        "toolRequiresApproval": bool(request.tool_requires_approval),
        "arguments": _record(args) if isinstance(args, Mapping) else {},
    }
    for key in ("tenantId", "projectId", "environment", "principalId"):
        if isinstance(scope.get(key), str):
            context[key] = scope[key]
    labels = scope.get("labels")
    if isinstance(labels, Mapping):
        context["labels"] = {k: v for k, v in _record(labels).items() if isinstance(v, str)}
    return context


def _ttl_annotations(policies: str, where: str) -> tuple[dict[str, str], dict[str, float]]:
    """The ``@id`` and ``@approval_ttl`` annotations of each static policy, by Cedar id."""
    import cedarpy

    try:
        parsed = cedarpy.policies_to_pst(policies).static_policies
    except ValueError:  # syntax newer than cedarpy's node types: no annotations
        return {}, {}
    names, ttls = {}, {}
    for pid, policy in parsed.items():
        if policy.annotations.get("id"):
            names[pid] = policy.annotations["id"]
        text = policy.annotations.get("approval_ttl")
        if text is None:
            continue
        try:
            ttls[pid] = float(text)
        except ValueError:
            ttls[pid] = math.nan
        if not (math.isfinite(ttls[pid]) and ttls[pid] > 0):
            name = names.get(pid, pid)
            msg = f"{where}: policy {name!r}: @approval_ttl({text!r}) is not a positive number"
            raise ConfigError(msg, code="policy_invalid")
    return names, ttls


class CedarPolicy:
    """A :class:`~oarlock.governance._policy.PolicyEngine` backed by Cedar policies."""

    __slots__ = (
        "_authorize",
        "_entities",
        "_names",
        "_policies",
        "_ttls",
        "approval_ttl",
        "policy_id",
        "version",
    )

    def __init__(
        self,
        policies: str,
        *,
        policy_id: str = "cedar",
        entities: list[dict[str, Any]] | None = None,
        approval_ttl: float | None = None,
    ) -> None:
        try:
            import cedarpy
        except ImportError:
            msg = "Cedar policies need the cedarpy package: pip install 'oarlock[cedar]'"
            raise ConfigError(msg, code="cedar_unavailable") from None
        if not isinstance(policies, str):
            raise ConfigError(f"{policy_id}: policies must be Cedar text", code="policy_invalid")
        if approval_ttl is not None and not (
            isinstance(approval_ttl, int | float)
            and not isinstance(approval_ttl, bool)
            and math.isfinite(approval_ttl)
            and approval_ttl > 0
        ):
            msg = f"{policy_id}: approval_ttl must be a finite number of seconds above 0"
            raise ConfigError(msg, code="policy_invalid")
        try:
            self._policies = cedarpy.PolicySet.from_str(policies)
        except ValueError as exc:
            msg = f"{policy_id}: not valid Cedar: {exc}"
            raise ConfigError(msg, code="policy_invalid") from None
        self._names, self._ttls = _ttl_annotations(policies, policy_id)
        content: dict[str, Any] = {"policies": policies}
        try:
            if entities is not None:
                content["entities"] = entities
            self._entities = cedarpy.Entities.from_json_str(json.dumps(entities or []))
            if approval_ttl is not None:
                content["approvalTtl"] = approval_ttl
            self.version: str = digest(policies if len(content) == 1 else content)
        except (TypeError, ValueError, CanonicalizationError) as exc:
            msg = f"{policy_id}: bad entities: {exc}"
            raise ConfigError(msg, code="policy_invalid") from None
        self.policy_id: str = policy_id
        self.approval_ttl: float | None = None if approval_ttl is None else float(approval_ttl)
        self._authorize = cedarpy.is_authorized_batch

    @classmethod
    def from_file(
        cls, path: str | os.PathLike[str], *, policy_id: str | None = None
    ) -> CedarPolicy:
        """The policies of a ``.cedar`` file, read within the input limit (see
        :mod:`oarlock._input`); ``policy_id`` defaults to the file's stem. Errors name
        the file."""
        name, what = os.fspath(path), "Cedar policy file"
        data = read_input(path, what=what, code="policy_invalid")
        text = decode_text(data, name, what=what, code="policy_invalid")
        try:
            return cls(text, policy_id=policy_id or Path(path).stem)
        except ConfigError as exc:
            if exc.code == "cedar_unavailable":
                raise
            raise ConfigError(f"{name}: {exc.message}", code=exc.code) from None

    def __repr__(self) -> str:
        return f"CedarPolicy({self.policy_id!r}, {self.version[:15]}…)"

    def evaluate(self, request: PolicyRequest) -> PolicyVerdict:
        """Ask Cedar (see the module documentation). Never raises; fails closed."""
        try:
            verdict = _precheck(request)
            return verdict if verdict is not None else self._evaluate(request)
        except Exception as exc:
            why = f"policy evaluation failed: Cedar policy {self.policy_id!r}: {exc}"
            return PolicyVerdict("deny", None, (why,))

    def _evaluate(self, request: PolicyRequest) -> PolicyVerdict:
        principal = request.scope.get("principalId") if isinstance(request.scope, Mapping) else None
        base = {
            "principal": {
                "type": "Principal",
                "id": principal if isinstance(principal, str) else "anonymous",
            },
            "resource": {"type": "Tool", "id": request.tool},
            "context": json.dumps(_context(request)),
        }
        (invoke,) = self._authorize([{**base, "action": _INVOKE}], self._policies, self._entities)
        if invoke.diagnostics.errors:
            return self._errors(invoke.diagnostics.errors)
        invoked = self._names_of(invoke)
        if invoke.allowed:
            ttl = self._ttl(invoke) if needs_approval(request) else None
            return PolicyVerdict("allow", invoked, (f"Cedar permits invoke ({invoked})",), ttl)
        first = f"Cedar forbids invoke ({invoked})" if invoked else "no Cedar policy permits invoke"
        (approve,) = self._authorize([{**base, "action": _APPROVE}], self._policies, self._entities)
        if approve.diagnostics.errors:
            return self._errors(approve.diagnostics.errors)
        approver = self._names_of(approve)
        if approve.allowed:
            second = f"Cedar permits request_approval ({approver})"
            ttl = self._ttl(approve)
            ttl = self.approval_ttl if ttl is None else ttl
            return PolicyVerdict("require_approval", approver, (first, second), ttl)
        second = (
            f"Cedar forbids request_approval ({approver})"
            if approver
            else "no Cedar policy permits request_approval"
        )
        return PolicyVerdict("deny", approver or invoked, (first, second))

    def _names_of(self, result: Any) -> str | None:
        """The determining policies of a Cedar answer, by ``@id`` where they have one."""
        ids = sorted(result.diagnostics.reasons, key=lambda p: (len(p), p))  # source order
        named: dict[str, str] = result.diagnostics.id_annotations_by_reason
        return ",".join(named.get(p) or self._names.get(p) or p for p in ids) or None

    def _ttl(self, result: Any) -> float | None:
        ttls = [self._ttls[p] for p in result.diagnostics.reasons if p in self._ttls]
        return min(ttls) if ttls else None

    def _errors(self, errors: list[str]) -> PolicyVerdict:
        reasons = []
        for error in errors:
            text = error
            for pid, name in self._names.items():
                text = text.replace(f"`{pid}`", f"`{pid}` ({name})")
            reasons.append(f"policy evaluation failed: Cedar reported: {text}")
        return PolicyVerdict("deny", None, tuple(reasons))

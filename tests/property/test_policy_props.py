"""Properties of policy evaluation, checked with hypothesis:

1. ``RulePolicy.evaluate`` never raises and always returns one of the three effects, for
   arbitrary JSON arguments (NaN, infinities and huge integers included), arbitrary tool
   names, classes and scopes; unknown tools and classes are always denied; a verdict
   names a rule of the policy or none;
2. ``equals`` is JSON equality (checked against an independent normal form) and the
   number comparisons match only non-boolean numbers;
3. a policy whose rules cannot match agrees with ``default_verdict`` everywhere;
4. ``CedarPolicy.evaluate`` never raises either and returns one of the three effects.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oarlock.formats._rules import SIDE_EFFECT_CLASSES
from oarlock.governance._policy import (
    DEFAULT_POLICY,
    PolicyRequest,
    RulePolicy,
    default_verdict,
)

PROPS = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
EFFECTS = ("allow", "deny", "require_approval")

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
# argument objects that often carry the names the policy looks at
names = st.sampled_from(["amount", "currency", "customer", "tier", "items", "0", "1", "note"])
arguments = st.dictionaries(names | st.text(max_size=8), json_values, max_size=6)
tools = st.sampled_from(["issue_refund", "deploy_api", "github.create_pr", "lookup"]) | st.text(
    max_size=20
)
classes = st.sampled_from(SIDE_EFFECT_CLASSES) | st.text(max_size=12)
scope_values = st.sampled_from(["acme", "prod", "alice", "a"]) | json_values
scopes = st.dictionaries(
    st.sampled_from(["tenantId", "projectId", "environment", "principalId", "labels"]),
    scope_values | st.dictionaries(st.sampled_from(["team", "x"]), scope_values, max_size=2),
    max_size=5,
)
requests = st.builds(
    PolicyRequest,
    tool=tools,
    side_effect_class=classes,
    scope=scopes,
    arguments=arguments | json_values,
    known_tool=st.booleans(),
    tool_requires_approval=st.booleans(),
)

RICH = RulePolicy.from_yaml(
    """
policy: rich
approval_ttl: 60
rules:
  - id: prod-deploys
    effect: deny
    match: {tool: "deploy*", class: [production, publication], scope: {environment: prod}}
  - id: refunds
    effect: allow
    approval_ttl: 600
    match:
      tool: [issue_refund, "billing.*"]
      scope: {tenantId: acme, labels.team: [a, b]}
      arguments:
        amount: {gt: 0, lte: 50}
        currency: {in: [EUR, USD, 1, true, null, [1], {a: 1}]}
        customer.tier: {equals: {level: [1, 2.5, "x", null, false]}}
        items.0: {matches: "^[A-Z]+-\\\\d+$"}
  - id: notes
    effect: require_approval
    match: {arguments: {note: {matches: "(?i)urgent"}, amount: {gte: 1000}}}
  - id: github
    effect: allow
    match: {tool: "github.*", class: shared-write, scope: {principalId: [alice, bob]}}
"""
)


@PROPS
@given(requests)
def test_rule_policy_never_raises(request: PolicyRequest) -> None:
    for policy in (RICH, DEFAULT_POLICY):
        verdict = policy.evaluate(request)
        assert verdict.effect in EFFECTS
        assert verdict.reasons
        assert all(isinstance(r, str) for r in verdict.reasons)
        assert verdict.rule_id is None or verdict.rule_id in policy.rule_ids
        if not request.known_tool or request.side_effect_class not in SIDE_EFFECT_CLASSES:
            assert (verdict.effect, verdict.rule_id) == ("deny", None)
        if verdict.effect == "deny":
            assert verdict.approval_ttl_seconds is None


def normal(v: Any) -> Any:
    """An independent normal form: equal exactly when the JSON values are equal."""
    if isinstance(v, bool):
        return ("bool", v)
    if isinstance(v, int | float):
        return ("num", v)
    if isinstance(v, list):
        return ("list", tuple(normal(x) for x in v))
    if isinstance(v, dict):
        return ("dict", frozenset((k, normal(x)) for k, x in v.items()))
    return (type(v).__name__, v)


finite_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53) + 1, 2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=10,
)


def hits(policy: RulePolicy, value: Any) -> bool:
    request = PolicyRequest("t", "spend", {"tenantId": "a"}, {"v": value})
    return policy.evaluate(request).rule_id == "r"


def one(conditions: dict[str, Any]) -> RulePolicy:
    rule = {"id": "r", "effect": "deny", "match": {"arguments": {"v": conditions}}}
    return RulePolicy.from_dict({"policy": "p", "rules": [rule]})


@PROPS
@given(finite_json, finite_json)
def test_equals_is_json_equality(expected: Any, value: Any) -> None:
    policy = one({"equals": expected})
    assert hits(policy, value) is (normal(expected) == normal(value))
    assert hits(policy, expected)


LTE_50 = one({"lte": 50})
GT_0 = one({"gt": 0})


@PROPS
@given(json_values)
def test_comparisons_match_only_numbers(value: Any) -> None:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    assert hits(LTE_50, value) is (number and not math.isnan(value) and value <= 50)
    assert hits(GT_0, value) is (number and not math.isnan(value) and value > 0)


NEVER = RulePolicy.from_dict(
    {
        "policy": "never",
        "approval_ttl": 5,
        "rules": [
            {"id": "a", "effect": "deny", "match": {"tool": "\x00never"}},
            {"id": "b", "effect": "allow", "match": {"arguments": {"\x00": {"equals": 1}}}},
        ],
    }
)


@PROPS
@given(requests)
def test_unmatched_rules_leave_the_defaults(request: PolicyRequest) -> None:
    expected = default_verdict(request)
    got = NEVER.evaluate(request)
    assert (got.effect, got.rule_id, got.reasons) == (
        expected.effect,
        expected.rule_id,
        expected.reasons,
    )
    if got.effect == "require_approval":
        assert got.approval_ttl_seconds == 5


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests)
def test_cedar_policy_never_raises(request: PolicyRequest) -> None:
    pytest.importorskip("cedarpy")
    from oarlock.governance._cedar import CedarPolicy

    policy = _cedar(CedarPolicy)
    verdict = policy.evaluate(request)
    assert verdict.effect in EFFECTS
    assert verdict.reasons
    assert all(isinstance(r, str) for r in verdict.reasons)
    if not request.known_tool:
        assert verdict.effect == "deny"


_CACHE: dict[str, Any] = {}


def _cedar(cls: Any) -> Any:
    if "p" not in _CACHE:
        _CACHE["p"] = cls(
            """
            @id("reads") permit(principal, action == Action::"invoke", resource)
            when { context.sideEffectClass == "read" };
            @id("refunds") permit(principal, action == Action::"invoke", resource)
            when { context.arguments has amount && context.arguments.amount <= 50 };
            @id("ask") permit(principal, action == Action::"request_approval", resource)
            when { context has tenantId && context.tenantId == "acme" };
            @id("no") forbid(principal, action, resource)
            when { context has labels && context.labels has team && context.labels.team == "x" };
            """,
            approval_ttl=60,
        )
    return _CACHE["p"]

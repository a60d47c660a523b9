"""Rule policies: defaults, first-match order, every condition kind with its boundaries,
globs, classes, scope keys, dotted argument paths, approval deadlines, load errors that
name the rule and the key, versions, files, and robustness against odd calls."""

from __future__ import annotations

import time
from typing import Any

import pytest

from oarlock.errors import ConfigError
from oarlock.formats._jcs import digest
from oarlock.formats._rules import APPROVAL_REQUIRED_CLASSES, SIDE_EFFECT_CLASSES
from oarlock.governance import _policy
from oarlock.governance._policy import (
    DEFAULT_POLICY,
    PolicyEngine,
    PolicyRequest,
    PolicyVerdict,
    RulePolicy,
    default_verdict,
)

SCOPE = {"tenantId": "acme"}


def req(
    tool: str = "issue_refund",
    cls: str = "spend",
    arguments: Any = None,
    scope: Any = None,
    **kw: Any,
) -> PolicyRequest:
    return PolicyRequest(tool, cls, SCOPE if scope is None else scope, arguments or {}, **kw)


def one_rule(match: dict[str, Any], effect: str = "allow") -> RulePolicy:
    return RulePolicy.from_dict(
        {"policy": "t", "rules": [{"id": "r", "effect": effect, "match": match}]}
    )


def hits(policy: RulePolicy, request: PolicyRequest) -> bool:
    return policy.evaluate(request).rule_id is not None


# -- defaults ---------------------------------------------------------------------------


@pytest.mark.parametrize("cls", ["read", "sandbox"])
def test_default_allows_read_and_sandbox(cls: str) -> None:
    v = default_verdict(req("lookup", cls))
    assert v == PolicyVerdict("allow", None, (f"no rule matched; {cls!r} calls are allowed",))


@pytest.mark.parametrize("cls", ["read", "sandbox"])
def test_default_asks_when_the_tool_wants_a_human(cls: str) -> None:
    v = default_verdict(req("lookup", cls, tool_requires_approval=True))
    assert v.effect == "require_approval"
    assert v.rule_id is None
    assert "the tool asks for a human approval" in v.reasons[0]


@pytest.mark.parametrize("cls", sorted(APPROVAL_REQUIRED_CLASSES))
def test_default_asks_for_shared_write_and_above(cls: str) -> None:
    for wants in (False, True):
        v = default_verdict(req("x", cls, tool_requires_approval=wants))
        assert v.effect == "require_approval"
        assert v.rule_id is None
        assert v.reasons == (f"no rule matched; {cls!r} calls need an approval",)
        assert v.approval_ttl_seconds is None


@pytest.mark.parametrize("cls", SIDE_EFFECT_CLASSES)
def test_default_denies_unknown_tools(cls: str) -> None:
    v = default_verdict(req("ghost", cls, known_tool=False))
    assert v == PolicyVerdict("deny", None, ("tool 'ghost' is not registered",))


@pytest.mark.parametrize("cls", ["write", "", "READ"])
def test_default_denies_unknown_classes(cls: str) -> None:
    v = default_verdict(req("x", cls))
    assert v.effect == "deny"
    assert "unknown side-effect class" in v.reasons[0]


def test_default_policy_is_the_defaults() -> None:
    assert DEFAULT_POLICY.policy_id == "oarlock-default"
    assert DEFAULT_POLICY.version == digest({"policy": "oarlock-default"})
    assert DEFAULT_POLICY.rule_ids == ()
    for cls in SIDE_EFFECT_CLASSES:
        for wants in (False, True):
            for known in (False, True):
                r = req("t", cls, tool_requires_approval=wants, known_tool=known)
                assert DEFAULT_POLICY.evaluate(r) == default_verdict(r)


def test_engines_satisfy_the_protocol() -> None:
    assert isinstance(DEFAULT_POLICY, PolicyEngine)


# -- rules: order, effects, reasons, deadlines -------------------------------------------

ORDERED = """
policy: ordered
rules:
  - id: first
    effect: deny
    reason: first says no
    match: {tool: issue_refund}
  - id: second
    effect: allow
    match: {tool: "issue_*"}
"""


def test_first_matching_rule_wins() -> None:
    p = RulePolicy.from_yaml(ORDERED)
    assert p.evaluate(req()) == PolicyVerdict("deny", "first", ("first says no",))
    v = p.evaluate(req("issue_credit"))
    assert (v.effect, v.rule_id, v.reasons) == ("allow", "second", ("rule 'second' matched",))
    swapped = RulePolicy.from_dict({"policy": "ordered", "rules": list(reversed(p_rules(ORDERED)))})
    assert swapped.evaluate(req()).rule_id == "second"


def p_rules(text: str) -> list[dict[str, Any]]:
    import yaml

    rules: list[dict[str, Any]] = yaml.safe_load(text)["rules"]
    return rules


def test_rule_without_match_matches_every_known_call() -> None:
    p = RulePolicy.from_dict({"policy": "p", "rules": [{"id": "all", "effect": "deny"}]})
    for cls in SIDE_EFFECT_CLASSES:
        assert p.evaluate(req("anything", cls, {"x": [1]}, scope={})).rule_id == "all"
    assert p.evaluate(req(known_tool=False)).rule_id is None


def test_unknown_tools_are_denied_before_any_rule() -> None:
    p = RulePolicy.from_dict({"policy": "p", "rules": [{"id": "yes", "effect": "allow"}]})
    v = p.evaluate(req("ghost", "read", known_tool=False))
    assert (v.effect, v.rule_id) == ("deny", None)


TTLS = """
policy: ttl
approval_ttl: 3600
rules:
  - {id: ask-short, effect: require_approval, approval_ttl: 60, match: {tool: short}}
  - {id: ask, effect: require_approval, match: {tool: ask}}
  - {id: standing, effect: allow, approval_ttl: 600, match: {tool: "standing*"}}
  - {id: plain-allow, effect: allow, match: {tool: plain}}
"""


def test_approval_deadlines() -> None:
    p = RulePolicy.from_yaml(TTLS)
    assert p.approval_ttl == 3600.0
    assert p.evaluate(req("short")).approval_ttl_seconds == 60.0
    assert p.evaluate(req("ask", "read")).approval_ttl_seconds == 3600.0
    # an allow of a call that needs an approval is a standing approval with a lifetime
    assert p.evaluate(req("standing", "spend")) == PolicyVerdict(
        "allow", "standing", ("rule 'standing' matched",), 600.0
    )
    assert (
        p.evaluate(req("standing", "read", tool_requires_approval=True)).approval_ttl_seconds == 600
    )
    # ... but not for a call that needs none
    assert p.evaluate(req("standing", "read")).approval_ttl_seconds is None
    # the policy-wide deadline applies to pending approvals only
    assert p.evaluate(req("plain", "spend")).approval_ttl_seconds is None
    default = p.evaluate(req("other", "production"))
    assert (default.effect, default.rule_id, default.approval_ttl_seconds) == (
        "require_approval",
        None,
        3600.0,
    )


def test_deny_rule_beats_defaults_for_reads() -> None:
    p = one_rule({"class": "read"}, effect="deny")
    assert p.evaluate(req("lookup", "read")).effect == "deny"
    assert p.evaluate(req("lookup", "sandbox")).effect == "allow"


# -- tool globs and classes ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("glob", "tool", "expected"),
    [
        ("deploy*", "deploy", True),
        ("deploy*", "deploy_service", True),
        ("deploy*", "redeploy", False),
        ("deploy*", "Deploy", False),  # case-sensitive everywhere
        ("github.*", "github.create_pr", True),
        ("github.*", "gitlab.create_pr", False),
        ("*.create_pr", "github.create_pr", True),
        ("issue_refund", "issue_refund", True),
        ("issue_refund", "issue_refund2", False),
        ("issue_refun?", "issue_refund", True),
        ("[ab]*", "alpha", True),
        ("[ab]*", "charlie", False),
        ("*", "", True),
    ],
)
def test_tool_globs(glob: str, tool: str, expected: bool) -> None:
    assert hits(one_rule({"tool": glob}), req(tool)) is expected


def test_tool_glob_list_matches_any() -> None:
    p = one_rule({"tool": ["github.*", "jira.create_*"]})
    assert hits(p, req("github.merge"))
    assert hits(p, req("jira.create_issue"))
    assert not hits(p, req("jira.delete_issue"))


def test_class_and_class_lists() -> None:
    single = one_rule({"class": "production"})
    many = one_rule({"class": ["spend", "publication"]})
    for cls in SIDE_EFFECT_CLASSES:
        assert hits(single, req("t", cls)) is (cls == "production")
        assert hits(many, req("t", cls)) is (cls in ("spend", "publication"))


def test_tool_and_class_must_both_match() -> None:
    p = one_rule({"tool": "deploy*", "class": "production"})
    assert hits(p, req("deploy", "production"))
    assert not hits(p, req("deploy", "sandbox"))
    assert not hits(p, req("rollback", "production"))


# -- scope ---------------------------------------------------------------------------------


def test_scope_keys() -> None:
    p = one_rule(
        {
            "scope": {
                "tenantId": "acme",
                "projectId": ["p1", "p2"],
                "environment": "prod",
                "principalId": "alice",
                "labels.team": ["payments", "billing"],
            }
        }
    )
    full = {
        "tenantId": "acme",
        "projectId": "p2",
        "environment": "prod",
        "principalId": "alice",
        "labels": {"team": "billing", "other": "x"},
    }
    assert hits(p, req(scope=full))
    for key, bad in [
        ("tenantId", "zeta"),
        ("projectId", "p3"),
        ("environment", "dev"),
        ("principalId", "bob"),
        ("labels", {"team": "sales"}),
        ("labels", {}),
        ("labels", "team=payments"),
        ("environment", None),
        ("environment", ["prod"]),
    ]:
        assert not hits(p, req(scope={**full, key: bad})), (key, bad)
        missing = {k: v for k, v in full.items() if k != key}
        assert not hits(p, req(scope=missing)), key


def test_scope_values_are_exact_strings() -> None:
    p = one_rule({"scope": {"environment": "prod"}})
    assert not hits(p, req(scope={"tenantId": "a", "environment": "Prod"}))
    assert not hits(p, req(scope={"tenantId": "a", "environment": "production"}))


# -- argument conditions ---------------------------------------------------------------------

MISSING = object()


def check(conditions: dict[str, Any], value: Any) -> bool:
    p = one_rule({"arguments": {"v": conditions}})
    return hits(p, req(arguments={} if value is MISSING else {"v": value}))


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (50, True),
        (50.0, True),
        (49.99, True),
        (-1e9, True),
        (50.01, False),
        (51, False),
        ("50", False),
        (True, False),
        (False, False),
        (None, False),
        ([50], False),
        ({"v": 50}, False),
        (float("nan"), False),
        (MISSING, False),
    ],
)
def test_lte_boundaries(value: Any, expected: bool) -> None:
    assert check({"lte": 50}, value) is expected


@pytest.mark.parametrize(
    ("op", "bound", "value", "expected"),
    [
        ("lt", 50, 49.999, True),
        ("lt", 50, 50, False),
        ("lt", 50, 50.0, False),
        ("lte", 50.5, 50.5, True),
        ("gt", 0, 0, False),
        ("gt", 0, 1e-9, True),
        ("gt", 0, True, False),
        ("gte", 10, 10, True),
        ("gte", 10, 9.999, False),
        ("gte", 10, "10", False),
        ("gte", -5, -5.0, True),
    ],
)
def test_number_comparisons(op: str, bound: float, value: Any, expected: bool) -> None:
    assert check({op: bound}, value) is expected


@pytest.mark.parametrize(
    ("expected_value", "value", "expected"),
    [
        (1, 1, True),
        (1, 1.0, True),
        (1.0, 1, True),
        (1, True, False),
        (True, 1, False),
        (True, True, True),
        (False, 0, False),
        (0, False, False),
        ("a", "a", True),
        ("a", "A", False),
        ("1", 1, False),
        (None, None, True),
        (None, MISSING, False),
        (None, 0, False),
        ([1, "a"], [1.0, "a"], True),
        ([1, "a"], ["a", 1], False),
        ([1], [True], False),
        ([1], (1,), True),
        ({"a": [1, {"b": None}]}, {"a": [1, {"b": None}]}, True),
        ({"a": 1}, {"a": 1, "b": 2}, False),
        ({"a": 1}, {"a": True}, False),
        ({"a": 1}, {"b": 1}, False),
        ({}, {}, True),
        ({}, [], False),
    ],
)
def test_equals_is_json_equality(expected_value: Any, value: Any, expected: bool) -> None:
    assert check({"equals": expected_value}, value) is expected


@pytest.mark.parametrize(
    ("values", "value", "expected"),
    [
        (["EUR", "USD"], "EUR", True),
        (["EUR", "USD"], "GBP", False),
        (["EUR", "USD"], "eur", False),
        (["EUR", "USD"], MISSING, False),
        (["EUR", "USD"], ["EUR"], False),
        ([1, 2], 2.0, True),
        ([1, 2], True, False),
        ([True], 1, False),
        ([True], True, True),
        ([None, "x"], None, True),
        ([[1, 2], {"a": 1}], [1, 2], True),
        ([[1, 2], {"a": 1}], {"a": 1.0}, True),
        ([[1, 2], {"a": 1}], {"a": True}, False),
    ],
)
def test_in(values: list[Any], value: Any, expected: bool) -> None:
    assert check({"in": values}, value) is expected


@pytest.mark.parametrize(
    ("pattern", "value", "expected"),
    [
        ("^SKU-[0-9]+$", "SKU-123", True),
        ("^SKU-[0-9]+$", "SKU-12a", False),
        ("refund", "please refund me", True),  # a search, not a full match
        ("^refund", "please refund me", False),
        ("(?i)urgent", "URGENT!", True),
        ("1", 1, False),
        (".*", None, False),
        (".*", ["a"], False),
        (".*", MISSING, False),
    ],
)
def test_matches(pattern: str, value: Any, expected: bool) -> None:
    assert check({"matches": pattern}, value) is expected


@pytest.mark.parametrize(
    ("value", "expected"), [(0, False), (1, True), (25, True), (50, True), (50.5, False)]
)
def test_conditions_in_one_mapping_all_hold(value: Any, expected: bool) -> None:
    assert check({"gte": 1, "lte": 50}, value) is expected


def test_every_argument_condition_must_hold() -> None:
    p = one_rule({"arguments": {"amount": {"lte": 50}, "currency": {"in": ["EUR", "USD"]}}})
    assert hits(p, req(arguments={"amount": 10, "currency": "EUR", "extra": 1}))
    assert not hits(p, req(arguments={"amount": 10, "currency": "GBP"}))
    assert not hits(p, req(arguments={"amount": 100, "currency": "EUR"}))
    assert not hits(p, req(arguments={"currency": "EUR"}))


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"customer": {"tier": "gold"}}, True),
        ({"customer": {"tier": "silver"}}, False),
        ({"customer": {}}, False),
        ({"customer": "gold"}, False),
        ({"customer": ["gold"]}, False),
        ({"customer.tier": "gold"}, False),  # a path, not a literal key
        ({}, False),
    ],
)
def test_dotted_argument_paths(arguments: dict[str, Any], expected: bool) -> None:
    p = one_rule({"arguments": {"customer.tier": {"equals": "gold"}}})
    assert hits(p, req(arguments=arguments)) is expected


def test_dotted_paths_step_into_lists_by_index() -> None:
    p = one_rule({"arguments": {"items.1.sku": {"matches": "^SKU-"}, "a.b.c": {"equals": 1}}})
    good = {"items": [{"sku": "x"}, {"sku": "SKU-1"}], "a": {"b": {"c": 1}}}
    assert hits(p, req(arguments=good))
    assert not hits(p, req(arguments={**good, "items": [{"sku": "SKU-1"}]}))
    assert not hits(p, req(arguments={**good, "items": {"1": {"sku": "x"}}}))
    assert hits(p, req(arguments={**good, "items": {"1": {"sku": "SKU-2"}}}))
    assert not hits(p, req(arguments={**good, "a": {"b": {"c": True}}}))


def test_the_example_policy() -> None:
    p = RulePolicy.from_yaml(EXAMPLE)
    deploy = req("deploy_api", "production", scope={"tenantId": "acme", "environment": "prod"})
    assert p.evaluate(deploy).reasons == ("Production deploys go through the release train",)
    ok = {"amount": 50, "currency": "USD"}
    v = p.evaluate(req(arguments=ok))
    assert (v.effect, v.rule_id, v.approval_ttl_seconds) == ("allow", "small-refunds-acme", 600)
    for bad in ({"amount": 50.01, "currency": "USD"}, {"amount": "50", "currency": "USD"}):
        v = p.evaluate(req(arguments=bad))
        assert (v.effect, v.rule_id, v.approval_ttl_seconds) == ("require_approval", None, 3600)
    other = req(arguments=ok, scope={"tenantId": "zeta"})
    assert p.evaluate(other).effect == "require_approval"


EXAMPLE = """
policy: refunds-desk            # policy id
approval_ttl: 3600
rules:
  - id: block-prod-deploys
    effect: deny
    reason: Production deploys go through the release train
    match:
      tool: "deploy*"
      class: production
      scope:
        environment: prod
  - id: small-refunds-acme
    effect: allow
    reason: Refunds up to 50 for tenant acme are pre-approved
    approval_ttl: 600
    match:
      tool: issue_refund
      scope: {tenantId: acme}
      arguments:
        amount: {lte: 50}
        currency: {in: [EUR, USD]}
"""


# -- load errors ------------------------------------------------------------------------------


def rules_yaml(rule: str) -> str:
    return "policy: p\nrules:\n  - {id: ok, effect: allow}\n  - {id: fine, effect: deny}\n" + rule


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            rules_yaml(
                "  - {id: small-refunds, effect: allow, match: {arguments: {amount: {le: 5}}}}"
            ),
            "rule 'small-refunds' (rules[2]): match.arguments.amount: unknown condition 'le'; "
            "use equals, in, lt, lte, gt, gte, matches",
        ),
        (
            rules_yaml("  - {id: ok, effect: deny}"),
            "rule 'ok' (rules[2]): rules[0] has this id too",
        ),
        (rules_yaml("  - {id: x, effect: permit}"), "rule 'x' (rules[2]): effect: expected one of"),
        (rules_yaml("  - {effect: allow}"), "rules[2].id: required"),
        (rules_yaml("  - {id: '', effect: allow}"), "rules[2].id: required"),
        (rules_yaml("  - just-a-string"), "rules[2]: expected a mapping"),
        (
            rules_yaml("  - {id: x, effect: allow, colour: red}"),
            "rule 'x' (rules[2]): colour: unknown key",
        ),
        (
            rules_yaml("  - {id: x, effect: allow, reason: 5}"),
            "rule 'x' (rules[2]): reason: expected a string",
        ),
        (
            rules_yaml("  - {id: x, effect: allow, match: {tools: a}}"),
            "rule 'x' (rules[2]): match.tools: unknown key; use tool, class, scope, arguments",
        ),
        (
            rules_yaml("  - {id: x, effect: allow, match: {tool: 5}}"),
            "rule 'x' (rules[2]): match.tool: expected a glob",
        ),
        (
            rules_yaml("  - {id: x, effect: allow, match: {tool: []}}"),
            "match.tool: an empty list never matches",
        ),
        (
            rules_yaml("  - {id: x, effect: allow, match: {class: [read, write]}}"),
            "rule 'x' (rules[2]): match.class: unknown side-effect class 'write'",
        ),
        (
            rules_yaml("  - {id: x, effect: allow, match: {scope: {tenant: a}}}"),
            "rule 'x' (rules[2]): match.scope.tenant: unknown scope key",
        ),
        (
            rules_yaml("  - {id: x, effect: allow, match: {scope: {labels.: a}}}"),
            "match.scope.labels.: unknown scope key",
        ),
        (
            rules_yaml("  - {id: x, effect: allow, match: {scope: {environment: no}}}"),
            "match.scope.environment: expected a string or a list of them, got false "
            "(quote YAML words like yes/no/on/off)",
        ),
        (
            rules_yaml("  - {id: x, effect: allow, match: {scope: {environment: [prod, 3]}}}"),
            "match.scope.environment: expected a string or a list of them, got 3",
        ),
        (
            rules_yaml("  - {id: x, effect: allow, match: {arguments: {amount: 5}}}"),
            "rule 'x' (rules[2]): match.arguments.amount: expected conditions like {equals: 5}",
        ),
        (
            rules_yaml("  - {id: x, effect: allow, match: {arguments: {amount: {}}}}"),
            "match.arguments.amount: expected conditions",
        ),
        (
            rules_yaml("  - {id: x, effect: allow, match: {arguments: {a..b: {equals: 1}}}}"),
            "match.arguments.a..b: an argument path is names joined by dots",
        ),
        (
            rules_yaml("  - {id: x, effect: allow, match: {arguments: {amount: {lte: '50'}}}}"),
            "rule 'x' (rules[2]): match.arguments.amount.lte: expected a number, got '50'",
        ),
        (
            rules_yaml("  - {id: x, effect: allow, match: {arguments: {amount: {gt: true}}}}"),
            "match.arguments.amount.gt: expected a number, got true",
        ),
        (
            rules_yaml("  - {id: x, effect: allow, match: {arguments: {c: {in: EUR}}}}"),
            "match.arguments.c.in: expected a non-empty list of values, got 'EUR'",
        ),
        (
            rules_yaml("  - {id: x, effect: allow, match: {arguments: {c: {in: []}}}}"),
            "match.arguments.c.in: expected a non-empty list",
        ),
        (
            rules_yaml(
                "  - {id: x, effect: allow, match: {arguments: {s: {matches: '(unclosed'}}}}"
            ),
            "rule 'x' (rules[2]): match.arguments.s.matches: bad regular expression '(unclosed'",
        ),
        (
            rules_yaml("  - {id: x, effect: allow, match: {arguments: {s: {matches: 5}}}}"),
            "match.arguments.s.matches: expected a regular expression",
        ),
        (
            rules_yaml("  - {id: x, effect: deny, approval_ttl: 60}"),
            "rule 'x' (rules[2]): approval_ttl: a deny rule gives or asks for no approval",
        ),
        (
            rules_yaml("  - {id: x, effect: allow, approval_ttl: 0}"),
            "rule 'x' (rules[2]): approval_ttl: expected a positive number of seconds, got 0",
        ),
        (
            rules_yaml("  - {id: x, effect: allow, match: null}"),
            "rule 'x' (rules[2]): match: expected a mapping",
        ),
        ("rules: []", "policy: required, a non-empty string; got null"),
        ("policy: 5", "policy: required, a non-empty string; got 5"),
        ("policy: p\nrules: {id: x}", "rules: expected a list of rules"),
        ("policy: p\napproval_ttl: soon", "approval_ttl: expected a positive number"),
        ("policy: p\nversion: 2", "version: unknown key; use policy, approval_ttl, rules"),
        ("- policy: p", "policy file: expected a mapping, got a list"),
        ("", "policy file: expected a mapping, got null"),
        ("policy: p\npolicy: q", "desk.yaml: line 2, column 1: duplicate key 'policy'"),
        ("policy: [unclosed", "not valid YAML"),
        (
            rules_yaml("  - {id: x, effect: allow, match: {arguments: {d: {equals: 2024-01-01}}}}"),
            "desk.yaml: line 5, column 60: YAML reads this as a date or time, which is not a "
            "JSON value: quote it",
        ),
        (
            rules_yaml("  - {id: x, effect: allow, match: {arguments: {d: {lt: .inf}}}}"),
            "rules[2].match.arguments.d.lt: inf is not a JSON number",
        ),
    ],
)
def test_load_errors_name_rule_and_key(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        RulePolicy.from_yaml(text, source="desk.yaml")
    assert info.value.code == "policy_invalid"
    assert str(info.value).startswith("desk.yaml: ")
    assert message in str(info.value)


def test_from_dict_refuses_non_json_values() -> None:
    with pytest.raises(ConfigError, match=r"rules\[0\]\.match\.tool: set is not a JSON value"):
        RulePolicy.from_dict(
            {"policy": "p", "rules": [{"id": "a", "effect": "allow", "match": {"tool": {"a"}}}]}
        )
    with pytest.raises(ConfigError, match=r"integer .* is beyond"):
        RulePolicy.from_dict({"policy": "p", "approval_ttl": 2**60})
    with pytest.raises(ConfigError, match="policy file: expected a mapping"):
        RulePolicy.from_dict(["policy"])  # type: ignore[arg-type]


# -- versions and files ---------------------------------------------------------------------


def test_version_is_the_digest_of_the_parsed_policy() -> None:
    import yaml

    p = RulePolicy.from_yaml(EXAMPLE)
    assert p.version == digest(yaml.safe_load(EXAMPLE))
    assert p.version.startswith("sha256:")
    assert RulePolicy.from_yaml(EXAMPLE).version == p.version
    assert RulePolicy.from_dict(yaml.safe_load(EXAMPLE)).version == p.version
    reformatted = EXAMPLE.replace("# policy id", "# another comment").replace(
        "scope: {tenantId: acme}", "scope:\n        tenantId: acme"
    )
    assert RulePolicy.from_yaml(reformatted).version == p.version


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("amount: {lte: 50}", "amount: {lte: 51}"),
        ("amount: {lte: 50}", "amount: {lte: 50.0001}"),
        ("approval_ttl: 600", "approval_ttl: 601"),
        ("effect: deny", "effect: require_approval"),
        ("policy: refunds-desk", "policy: refunds-desk-2"),
        ("Production deploys", "Prod deploys"),
    ],
)
def test_any_change_gives_another_version(old: str, new: str) -> None:
    assert old in EXAMPLE
    changed = RulePolicy.from_yaml(EXAMPLE.replace(old, new))
    assert changed.version != RulePolicy.from_yaml(EXAMPLE).version


def test_rule_order_is_part_of_the_version() -> None:
    rules = p_rules(ORDERED)
    a = RulePolicy.from_dict({"policy": "o", "rules": rules})
    b = RulePolicy.from_dict({"policy": "o", "rules": rules[::-1]})
    assert a.version != b.version


def test_from_file(tmp_path: Any) -> None:
    path = tmp_path / "desk.yaml"
    path.write_text(EXAMPLE, "utf-8")
    p = RulePolicy.from_file(path)
    assert (p.policy_id, p.rule_ids) == (
        "refunds-desk",
        ("block-prod-deploys", "small-refunds-acme"),
    )
    assert RulePolicy.from_file(str(path)).version == RulePolicy.from_yaml(EXAMPLE).version
    path.write_text(EXAMPLE.replace("lte", "le"), "utf-8")
    with pytest.raises(ConfigError, match=r"desk\.yaml: rule 'small-refunds-acme' \(rules\[1\]\)"):
        RulePolicy.from_file(path)
    with pytest.raises(ConfigError, match=r"missing\.yaml: no such policy file") as info:
        RulePolicy.from_file(tmp_path / "missing.yaml")
    assert info.value.code == "policy_invalid"


def test_loading_does_not_keep_the_callers_data() -> None:
    data: dict[str, Any] = {"policy": "p", "rules": [{"id": "a", "effect": "deny"}]}
    p = RulePolicy.from_dict(data)
    version = p.version
    data["rules"][0]["effect"] = "allow"
    assert p.evaluate(req()).effect == "deny"
    assert p.version == version


# -- robustness and speed -------------------------------------------------------------------


class Weird:
    def __eq__(self, other: object) -> bool:
        raise RuntimeError("no comparisons")

    __hash__ = None  # type: ignore[assignment]


@pytest.mark.parametrize(
    "arguments",
    [
        None,
        [],
        "amount",
        {"amount": Weird()},
        {"amount": {"tier": Weird()}},
        {"amount": [Weird()]},
        {"amount": float("inf")},
        {"amount": 10**400},
        {1: 2},
    ],
)
def test_odd_arguments_never_raise(arguments: Any) -> None:
    p = RulePolicy.from_yaml(EXAMPLE)
    policy = one_rule({"arguments": {"amount": {"equals": {"tier": 1}}, "x.y": {"in": [[1]]}}})
    r = PolicyRequest("issue_refund", "spend", {"tenantId": "acme"}, arguments)
    for engine in (p, policy):
        assert engine.evaluate(r).effect in ("allow", "deny", "require_approval")


@pytest.mark.parametrize(
    ("request_", "effect"),
    [
        (PolicyRequest(["tool"], "spend", {}, {}), "deny"),  # type: ignore[arg-type]
        (PolicyRequest("t", ["spend"], {}, {}), "deny"),  # type: ignore[arg-type]
        (PolicyRequest("t", None, {}, {}), "deny"),  # type: ignore[arg-type]
        (PolicyRequest("t", "spend", None, {}), "require_approval"),  # type: ignore[arg-type]
        (PolicyRequest("t", "read", {"tenantId": Weird(), "labels": Weird()}, {}), "allow"),
        (PolicyRequest("t", "read", {"tenantId": "acme", "labels": {"team": 5}}, {}), "allow"),
        (PolicyRequest("t", "read", {"tenantId": "acme", "labels": {"team": "a"}}, {}), "deny"),
    ],
)
def test_odd_requests_never_raise(request_: PolicyRequest, effect: str) -> None:
    p = one_rule({"scope": {"tenantId": "acme", "labels.team": "a"}}, effect="deny")
    v = p.evaluate(request_)
    assert v.effect == effect
    assert all(isinstance(r, str) for r in v.reasons)


def test_internal_failure_fails_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    p = RulePolicy.from_yaml(EXAMPLE)

    def boom(*_: Any) -> Any:
        raise RuntimeError("broken")

    monkeypatch.setattr(RulePolicy, "_candidates", boom)
    v = p.evaluate(req("new_tool", "read"))
    assert v == PolicyVerdict(
        "deny", None, ("policy evaluation failed: policy 'refunds-desk': RuntimeError",)
    )


def test_candidate_cache_is_bounded_and_stays_correct(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_policy, "_CACHE_MAX", 8)
    p = one_rule({"tool": "t1*", "class": "spend"}, effect="deny")
    for i in range(50):
        tool = f"t{i}"
        v = p.evaluate(req(tool, "spend"))
        assert (v.rule_id == "r") is tool.startswith("t1"), tool
        assert p.evaluate(req(tool, "read")).effect == "allow"
    assert len(p._cache) <= 8


def twenty_rules() -> RulePolicy:
    rules: list[dict[str, Any]] = [
        {
            "id": f"block-{i}",
            "effect": "deny",
            "match": {
                "tool": [f"tool{i}*", f"server{i}.*"],
                "class": ["spend", "production"],
                "scope": {"environment": "prod", "labels.team": ["a", "b"]},
                "arguments": {"amount": {"gt": 1000}},
            },
        }
        for i in range(18)
    ]
    rules.append(
        {
            "id": "refunds",
            "effect": "allow",
            "match": {
                "tool": "issue_refund",
                "scope": {"tenantId": "acme"},
                "arguments": {
                    "amount": {"gte": 1, "lte": 50},
                    "currency": {"in": ["EUR", "USD"]},
                    "customer.tier": {"equals": "gold"},
                    "note": {"matches": "^ok"},
                },
            },
        }
    )
    rules.append(
        {"id": "catch-all", "effect": "require_approval", "match": {"scope": {"tenantId": "acme"}}}
    )
    return RulePolicy.from_dict({"policy": "bench", "rules": rules})


def test_twenty_rules_evaluate_in_microseconds() -> None:
    p = twenty_rules()
    call = req(
        arguments={"amount": 20, "currency": "EUR", "customer": {"tier": "gold"}, "note": "ok"},
        scope={"tenantId": "acme", "environment": "prod"},
    )
    assert p.evaluate(call).rule_id == "refunds"
    n = 5000
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(n):
            p.evaluate(call)
        best = min(best, (time.perf_counter() - start) / n)
    assert best < 50e-6, f"{best * 1e6:.1f} µs per call"  # measured: about 3 µs

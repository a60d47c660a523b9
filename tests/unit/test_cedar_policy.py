"""Cedar policies: the two questions (invoke, request_approval), rule ids from ``@id``,
deadlines from ``@approval_ttl``, how arguments reach Cedar (floats especially), errors
failing closed, bad policy text, entities, versions and files."""

from __future__ import annotations

import math
from typing import Any

import pytest

pytest.importorskip("cedarpy")

from oarlock.errors import ConfigError
from oarlock.formats._jcs import digest
from oarlock.governance._cedar import CedarPolicy
from oarlock.governance._policy import PolicyEngine, PolicyRequest, PolicyVerdict

DESK = """
@id("reads")
permit(principal, action == Action::"invoke", resource)
when { context.sideEffectClass == "read" && !context.toolRequiresApproval };

@id("small-refunds") @approval_ttl("600")
permit(principal, action == Action::"invoke", resource == Tool::"issue_refund")
when { context.tenantId == "acme" &&
       context.arguments has amount && context.arguments.amount <= 50 };

@id("ask-a-human")
permit(principal, action == Action::"request_approval", resource)
unless { resource == Tool::"drop_database" };

@id("no-prod-deploys")
forbid(principal, action, resource)
when { context has environment && context.environment == "prod" &&
       context.sideEffectClass == "production" };
"""


def req(
    tool: str = "issue_refund",
    cls: str = "spend",
    arguments: Any = None,
    scope: Any = None,
    **kw: Any,
) -> PolicyRequest:
    scope = {"tenantId": "acme"} if scope is None else scope
    return PolicyRequest(tool, cls, scope, {} if arguments is None else arguments, **kw)


@pytest.fixture(scope="module")
def desk() -> CedarPolicy:
    return CedarPolicy(DESK, policy_id="desk", approval_ttl=3600)


def test_is_a_policy_engine(desk: CedarPolicy) -> None:
    assert isinstance(desk, PolicyEngine)
    assert desk.policy_id == "desk"


def test_invoke_permitted_is_allow(desk: CedarPolicy) -> None:
    assert desk.evaluate(req("lookup", "read")) == PolicyVerdict(
        "allow", "reads", ("Cedar permits invoke (reads)",)
    )


def test_standing_approval_carries_the_annotated_lifetime(desk: CedarPolicy) -> None:
    v = desk.evaluate(req(arguments={"amount": 50}))
    assert v == PolicyVerdict(
        "allow", "small-refunds", ("Cedar permits invoke (small-refunds)",), 600.0
    )


def test_request_approval_permitted_is_require_approval(desk: CedarPolicy) -> None:
    v = desk.evaluate(req(arguments={"amount": 51}))
    assert v == PolicyVerdict(
        "require_approval",
        "ask-a-human",
        ("no Cedar policy permits invoke", "Cedar permits request_approval (ask-a-human)"),
        3600.0,
    )
    # a read whose tool asks for a human is not permitted by "reads"
    v = desk.evaluate(req("lookup", "read", tool_requires_approval=True))
    assert (v.effect, v.rule_id) == ("require_approval", "ask-a-human")


def test_nothing_permitted_is_deny(desk: CedarPolicy) -> None:
    v = desk.evaluate(req("drop_database", "production"))
    assert v == PolicyVerdict(
        "deny",
        None,
        ("no Cedar policy permits invoke", "no Cedar policy permits request_approval"),
    )


def test_forbid_is_deny_naming_the_forbid(desk: CedarPolicy) -> None:
    v = desk.evaluate(req("deploy", "production", scope={"tenantId": "a", "environment": "prod"}))
    assert v == PolicyVerdict(
        "deny",
        "no-prod-deploys",
        (
            "Cedar forbids invoke (no-prod-deploys)",
            "Cedar forbids request_approval (no-prod-deploys)",
        ),
    )
    staging = desk.evaluate(
        req("deploy", "production", scope={"tenantId": "a", "environment": "qa"})
    )
    assert staging.effect == "require_approval"


def test_unknown_tool_is_denied_without_asking_cedar(monkeypatch: pytest.MonkeyPatch) -> None:
    policy = CedarPolicy("permit(principal, action, resource);")
    calls: list[Any] = []
    monkeypatch.setattr(policy, "_authorize", lambda *a: calls.append(a))
    v = policy.evaluate(req("ghost", "read", known_tool=False))
    assert v == PolicyVerdict("deny", None, ("tool 'ghost' is not registered",))
    assert calls == []


def test_rule_ids_without_annotations_and_several_determining_policies() -> None:
    policy = CedarPolicy(
        'permit(principal, action == Action::"invoke", resource);\n'
        '@id("also") permit(principal, action, resource == Tool::"t");\n'
        '@id("") permit(principal, action, resource == Tool::"t");'
    )
    assert policy.evaluate(req("t")).rule_id == "policy0,also,policy2"
    assert policy.evaluate(req("u")).rule_id == "policy0"


def test_approval_ttl_annotations() -> None:
    policy = CedarPolicy(
        '@approval_ttl("120") permit(principal, action == Action::"request_approval", resource)'
        ' when { context.sideEffectClass == "spend" };\n'
        'permit(principal, action == Action::"request_approval", resource);\n'
        '@approval_ttl("30") permit(principal, action == Action::"invoke", resource)'
        ' when { context.sideEffectClass == "read" };',
        approval_ttl=900,
    )
    assert policy.evaluate(req(cls="spend")).approval_ttl_seconds == 120.0  # min(120, none)
    assert policy.evaluate(req(cls="external")).approval_ttl_seconds == 900.0
    assert policy.evaluate(req(cls="read")).approval_ttl_seconds is None  # needs no approval
    standing = policy.evaluate(req(cls="read", tool_requires_approval=True))
    assert (standing.effect, standing.approval_ttl_seconds) == ("allow", 30.0)
    assert CedarPolicy("permit(principal, action, resource);").approval_ttl is None


# -- what Cedar sees ------------------------------------------------------------------------


def allowed(condition: str, arguments: Any = None, **kw: Any) -> bool:
    policy = CedarPolicy(
        f'permit(principal, action == Action::"invoke", resource) when {{ {condition} }};'
    )
    v = policy.evaluate(req("github.create_pr", "read", arguments, **kw))
    assert v.effect in ("allow", "deny"), v
    return v.effect == "allow"


def test_context_carries_the_call_and_its_scope() -> None:
    scope = {
        "tenantId": "acme",
        "projectId": "p1",
        "environment": "prod",
        "principalId": "alice",
        "labels": {"team": "payments", "n": 5},
    }
    assert allowed(
        'resource == Tool::"github.create_pr" && principal == Principal::"alice" && '
        'context.tool == "github.create_pr" && context.sideEffectClass == "read" && '
        'context.tenantId == "acme" && context.projectId == "p1" && '
        'context.environment == "prod" && context.principalId == "alice" && '
        'context.labels.team == "payments" && !(context.labels has n) && '
        "context.toolRequiresApproval == false",
        scope=scope,
    )
    assert allowed(
        'principal == Principal::"anonymous" && !(context has projectId) && !(context has labels)',
        scope={"tenantId": "acme"},
    )


@pytest.mark.parametrize(
    ("condition", "value", "expected"),
    [
        ("context.arguments.v == 50", 50, True),
        ("context.arguments.v == 50", 50.0, True),  # an integral float is a Long
        ("context.arguments.v <= 50", 50.0, True),
        ("context.arguments.v == -3", -3.0, True),
        ('context.arguments.v == decimal("50.5")', 50.5, True),  # others become decimals
        ('context.arguments.v.lessThanOrEqual(decimal("50.0"))', 49.9999, True),
        ('context.arguments.v.greaterThan(decimal("50.0"))', 50.0001, True),
        ('context.arguments.v == "1e-05"', 1e-05, True),  # too fine for a decimal: a string
        ('context.arguments.v == "50.00001"', 50.00001, True),
        ('context.arguments.v == "1e+300"', 1e300, True),
        ('context.arguments.v == "nan"', float("nan"), True),
        ('context.arguments.v == "inf"', float("inf"), True),
        ("context.arguments.v == 9223372036854775807", 2**63 - 1, True),
        ('context.arguments.v == "9223372036854775808"', 2**63, True),
        ('context.arguments.v == "-9223372036854775809"', -(2**63) - 1, True),
        ("context.arguments.v == true", True, True),
        ('context.arguments.v == "x"', "x", True),
        ("context.arguments.v.contains(2) && context.arguments.v.contains(1)", [1, 2, 2], True),
        ('context.arguments.v == [1, "a"]', ["a", 1, None], True),  # a set; nulls dropped
        ('context.arguments.v.tier == "gold"', {"tier": "gold", "x": None}, True),
        ("!(context.arguments.v has x)", {"x": None}, True),
    ],
)
def test_argument_values(condition: str, value: Any, expected: bool) -> None:
    assert allowed(condition, {"v": value}) is expected


def test_null_arguments_and_reserved_keys_are_dropped() -> None:
    assert allowed("!(context.arguments has v) && context.arguments has w", {"v": None, "w": 1})
    escapes = {
        "__entity": {"type": "Principal", "id": "admin"},
        "__extn": {"fn": "ip", "arg": "10.0.0.1"},
        "__expr": "true",
        "nested": {"__entity": {"type": "Principal", "id": "admin"}, "ok": 1},
    }
    assert allowed(
        'context.arguments == {"nested": {"ok": 1}}',
        escapes,
    )


def test_comparing_a_decimal_as_a_long_fails_closed() -> None:
    policy = CedarPolicy(DESK)
    v = policy.evaluate(req(arguments={"amount": 12.5}))
    assert v.effect == "deny"
    assert v.rule_id is None
    assert v.reasons[0].startswith("policy evaluation failed: Cedar reported: ")
    assert "`policy1` (small-refunds)" in v.reasons[0]
    assert "expected long, got decimal" in v.reasons[0]


def test_evaluation_errors_deny_even_when_another_policy_permits() -> None:
    policy = CedarPolicy(
        '@id("all") permit(principal, action, resource);\n'
        '@id("careless") forbid(principal, action, resource)'
        " when { context.arguments.amount > 100 };"
    )
    v = policy.evaluate(req(arguments={}))  # "careless" errs: no attribute amount
    assert v.effect == "deny"
    assert "`policy1` (careless)" in v.reasons[0]
    assert "amount" in v.reasons[0]
    assert policy.evaluate(req(arguments={"amount": 5})).effect == "allow"
    assert policy.evaluate(req(arguments={"amount": 500})).rule_id == "careless"


def test_arguments_that_are_not_json_fail_closed() -> None:
    policy = CedarPolicy("permit(principal, action, resource);")
    v = policy.evaluate(req(arguments={"when": object()}))
    assert v.effect == "deny"
    assert v.reasons[0].startswith("policy evaluation failed")
    assert policy.evaluate(req(arguments={"s": "\ud800"})).effect == "deny"
    assert policy.evaluate(req(arguments=["not", "a", "mapping"])).effect == "allow"


def test_entities_are_used() -> None:
    entities: list[dict[str, Any]] = [
        {"uid": {"type": "Group", "id": "admins"}, "attrs": {}, "parents": []},
        {
            "uid": {"type": "Principal", "id": "alice"},
            "attrs": {"level": 3},
            "parents": [{"type": "Group", "id": "admins"}],
        },
    ]
    policy = CedarPolicy(
        'permit(principal in Group::"admins", action == Action::"invoke", resource)'
        " when { principal.level >= 3 };",
        entities=entities,
    )
    assert policy.evaluate(req(scope={"tenantId": "a", "principalId": "alice"})).effect == "allow"
    assert policy.evaluate(req(scope={"tenantId": "a", "principalId": "bob"})).effect == "deny"


# -- construction, versions, files ----------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"policies": "permit(principal, action, resource) when {"}, "desk: not valid Cedar"),
        ({"policies": "allow(principal, action, resource);"}, "desk: not valid Cedar"),
        ({"policies": "permit(principal, action);"}, "desk: not valid Cedar"),
        (
            {"policies": '@approval_ttl("soon") @id("x") permit(principal, action, resource);'},
            "desk: policy 'x': @approval_ttl('soon') is not a positive number",
        ),
        (
            {"policies": '@approval_ttl("-5") permit(principal, action, resource);'},
            "policy 'policy0': @approval_ttl('-5')",
        ),
        (
            {"policies": "permit(principal, action, resource);", "entities": [{"uid": 5}]},
            "desk: bad entities",
        ),
        (
            {"policies": "permit(principal, action, resource);", "approval_ttl": 0},
            "approval_ttl must be a finite number of seconds above 0",
        ),
        (
            {"policies": "permit(principal, action, resource);", "approval_ttl": math.inf},
            "approval_ttl must be a finite number of seconds above 0",
        ),
        (
            {"policies": "permit(principal, action, resource);", "approval_ttl": True},
            "approval_ttl must be a finite number of seconds above 0",
        ),
        ({"policies": 5}, "policies must be Cedar text"),
    ],
)
def test_bad_policies_are_config_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        CedarPolicy(**kwargs, policy_id="desk")
    assert info.value.code == "policy_invalid"
    assert message in str(info.value)


def test_version_is_the_digest_of_the_text() -> None:
    text = "permit(principal, action, resource);"
    assert CedarPolicy(text).version == digest(text)
    assert CedarPolicy(text, policy_id="other").version == digest(text)
    assert CedarPolicy(text + "\n").version != digest(text)
    with_ttl = CedarPolicy(text, approval_ttl=60).version
    assert with_ttl == digest({"policies": text, "approvalTtl": 60})
    entities = [{"uid": {"type": "Group", "id": "g"}, "attrs": {}, "parents": []}]
    with_entities = CedarPolicy(text, entities=entities).version
    assert with_entities == digest({"policies": text, "entities": entities})
    assert len({digest(text), with_ttl, with_entities}) == 3


def test_empty_policy_denies_everything() -> None:
    v = CedarPolicy("").evaluate(req("lookup", "read"))
    assert (v.effect, v.rule_id) == ("deny", None)


def test_from_file(tmp_path: Any) -> None:
    path = tmp_path / "desk.cedar"
    path.write_text(DESK, "utf-8")
    policy = CedarPolicy.from_file(path)
    assert (policy.policy_id, policy.version) == ("desk", digest(DESK))
    assert CedarPolicy.from_file(str(path), policy_id="x").policy_id == "x"
    assert policy.evaluate(req(arguments={"amount": 1})).rule_id == "small-refunds"
    with pytest.raises(ConfigError, match=r"missing\.cedar: no such Cedar policy file"):
        CedarPolicy.from_file(tmp_path / "missing.cedar")
    path.write_text("permit(", "utf-8")
    with pytest.raises(ConfigError, match="desk: not valid Cedar"):
        CedarPolicy.from_file(path)

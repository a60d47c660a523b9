"""A policy rule's ``four_eyes``: a boolean, only on require_approval rules, carried by
the verdict (and so by the executor's review)."""

from __future__ import annotations

import pytest

from oarlock.errors import ConfigError
from oarlock.governance import RulePolicy
from oarlock.governance._policy import PolicyRequest


def _policy(**rule: object) -> RulePolicy:
    base = {"id": "r", "effect": "require_approval", "match": {"tool": "pay"}}
    return RulePolicy.from_dict({"policy": "p", "rules": [{**base, **rule}]})


def test_four_eyes_reaches_the_verdict() -> None:
    request = PolicyRequest(tool="pay", side_effect_class="spend", scope={"tenantId": "t"},
                            arguments={})  # fmt: skip
    assert _policy(four_eyes=True).evaluate(request).four_eyes is True
    assert _policy().evaluate(request).four_eyes is False
    assert _policy(four_eyes=True).version != _policy().version


@pytest.mark.parametrize(
    ("rule", "says"),
    [
        ({"four_eyes": "yes"}, "four_eyes: expected true or false"),
        ({"four_eyes": 1}, "four_eyes: expected true or false"),
        ({"four_eyes": True, "effect": "allow"}, "only a require_approval rule"),
        ({"four_eyes": True, "effect": "deny"}, "only a require_approval rule"),
    ],
)
def test_four_eyes_is_checked(rule: dict[str, object], says: str) -> None:
    with pytest.raises(ConfigError) as refused:
        _policy(**rule)
    assert says in "\n".join(refused.value.problems)

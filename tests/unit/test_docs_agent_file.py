"""``docs/agent-file.md`` names every key each file kind accepts, no more and no less: the
tables are read and compared with the keys the code checks."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from oarlock.engine import _agentfile
from oarlock.governance import _policy
from oarlock.models import _pricing, _registry, _scripted
from oarlock.sandbox._limits import SandboxLimits
from oarlock.tools import _mcp
from oarlock.tools._tool import SANDBOX_SETTINGS

DOC = Path(__file__).parents[2] / "docs" / "agent-file.md"
_TABLE = re.compile(r"<!-- keys: ([\w-]+) -->\n((?:\|.*\n)+)")


def tables() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for name, body in _TABLE.findall(DOC.read_text("utf-8")):
        rows = body.strip().splitlines()[2:]  # past the header and the rule
        found[name] = {re.match(r"\|\s*`([^`]+)`", row).group(1) for row in rows}  # type: ignore[union-attr]
    return found


CODE: dict[str, set[str]] = {
    "agent": set(_agentfile._KEYS),
    "scope": set(_agentfile._SCOPE),
    "limits": set(_agentfile._LIMITS),
    "tool": set(_agentfile._TOOL),
    "tool-sandbox": set(SANDBOX_SETTINGS),
    "sandbox": set(_agentfile._SANDBOX_KEYS),
    "sandbox-limits": set(SandboxLimits.__dataclass_fields__),
    "model-options": set().union(*_registry._OPTIONS.values()),
    "pricing": set(_pricing._PRICE_KEYS),
    "mcp": set(_mcp._KEYS),
    "policy": {"policy", "approval_ttl", "rules"},
    "rule": set(_policy._RULE_KEYS),
    "match": set(_policy._MATCH_KEYS),
    "condition": set(_policy._CONDITIONS),
    "turn": set(_scripted._TURN),
    "call": set(_scripted._CALL),
    "usage": set(_scripted._USAGE),
    "fail": set(_scripted._FAIL),
    "approver": {"principal", "principals", "key"},
}


@pytest.mark.parametrize("kind", sorted(CODE))
def test_the_documented_keys_are_the_keys_the_code_checks(kind: str) -> None:
    assert tables()[kind] == CODE[kind]


def test_every_table_is_checked() -> None:
    assert set(tables()) == set(CODE)


def test_the_tool_sandbox_keys_are_those_a_tool_takes() -> None:
    from oarlock.errors import ConfigError
    from oarlock.tools._tool import _sandbox_spec

    with pytest.raises(ConfigError, match="unknown sandbox setting"):
        _sandbox_spec({"egress": "none", "network": "x"})
    spec = _sandbox_spec({"egress": "none", "limits": {}, "env": [], "allow_hosts": []})
    assert spec is not None and spec.egress == "none"


def test_the_policy_file_keys_are_those_the_loader_takes(tmp_path: Path) -> None:
    from oarlock.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown key"):
        _policy.RulePolicy.from_dict({"policy": "p", "rules": [], "extra": 1})
    assert _policy.RulePolicy.from_dict({"policy": "p", "approval_ttl": 5, "rules": []})

"""Agent files, Limits, MCP server entries, model scripts and policies with values of any
type in any key: loading gives a valid object or a ConfigError, never another exception."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oarlock.engine import Agent, Limits
from oarlock.engine._agentfile import load_agent
from oarlock.errors import ConfigError
from oarlock.governance import RulePolicy
from oarlock.models import ScriptedModel
from oarlock.tools._mcp import MCPServerConfig

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**60, max_value=2**200)
    | st.floats()
    | st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 1e308])
    | st.text(max_size=12)
)
JUNK = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


def maybe(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A valid value most of the time, else anything."""
    return st.one_of(valid, valid, JUNK)


TOOL_PATHS = st.sampled_from(
    [
        "oarlock.demo.refund_desk:lookup_order",
        "oarlock.demo.refund_desk:issue_refund",
        "oarlock.demo.refund_desk:refund_policy",
        "oarlock.demo.refund_desk:nope",
        "no_such_module_zz:f",
        "json:dumps",
        "oarlock:__version__",
        "not a path",
        "a:b:c",
        "",
    ]
)
CLASSES = st.sampled_from(["read", "sandbox", "shared-write", "external", "spend", "write"])
TOOL_ENTRY = st.one_of(
    TOOL_PATHS,
    st.fixed_dictionaries(
        {"path": maybe(TOOL_PATHS)},
        optional={
            "name": maybe(st.from_regex(r"[a-z_]{1,10}", fullmatch=True)),
            "side_effect": maybe(CLASSES),
            "needs_approval": maybe(st.booleans() | st.just("oarlock.demo.refund_desk:refund_key")),
            "allow_response": maybe(st.booleans()),
            "timeout_seconds": maybe(st.floats(min_value=0.1, max_value=60)),
            "idempotency_key": maybe(st.just("oarlock.demo.refund_desk:refund_key")),
            "colour": JUNK,
        },
    ),
    JUNK,
)
LIMITS = st.fixed_dictionaries(
    {},
    optional={
        "max_turns": maybe(st.integers(min_value=0, max_value=50)),
        "max_cost_usd": maybe(st.floats(min_value=0, max_value=10)),
        "max_input_tokens": maybe(st.integers(min_value=0)),
        "max_output_tokens": maybe(st.integers(min_value=0)),
        "max_tokens": JUNK,
    },
)
PRICE = st.fixed_dictionaries(
    {
        "input_per_million": maybe(st.floats(min_value=0, max_value=100)),
        "output_per_million": maybe(st.floats(min_value=0, max_value=100)),
    },
    optional={"cached_input_per_million": maybe(st.floats(min_value=0, max_value=100))},
)
MCP = st.fixed_dictionaries(
    {},
    optional={
        "command": maybe(st.lists(st.sampled_from(["python", "server.py", ""]), max_size=3)),
        "url": maybe(st.sampled_from(["http://127.0.0.1:1/mcp", "ftp://x", "https://"])),
        "env": maybe(st.dictionaries(st.sampled_from(["A", "B"]), st.text(max_size=4))),
        "cwd": maybe(st.sampled_from([".", "sub"])),
        "side_effects": maybe(st.dictionaries(st.sampled_from(["t", "u"]), CLASSES)),
        "default_side_effect": maybe(CLASSES),
        "timeout_seconds": maybe(st.floats(min_value=0.5, max_value=30)),
        "needs_approval": maybe(st.dictionaries(st.sampled_from(["t"]), st.booleans())),
        "trust_hints": maybe(st.booleans()),
        "start_timeout_seconds": maybe(st.floats(min_value=1, max_value=30)),
        "max_restarts": maybe(st.integers(min_value=0, max_value=5)),
        "restart_window_seconds": maybe(st.floats(min_value=1, max_value=60)),
        "headers": maybe(st.dictionaries(st.sampled_from(["X-A"]), st.text(max_size=4))),
    },
)
AGENT = st.fixed_dictionaries(
    {
        "name": maybe(st.from_regex(r"[a-z][a-z-]{0,12}", fullmatch=True)),
        "model": maybe(
            st.sampled_from(
                ["scripted:s.yaml", "scripted:missing.yaml", "openai:gpt-4.1", "nope:x", ""]
            )
        ),
    },
    optional={
        "instructions": maybe(st.text(max_size=20)),
        "description": maybe(st.text(max_size=20)),
        "tenant": maybe(st.text(min_size=1, max_size=8)),
        "scope": maybe(
            st.fixed_dictionaries(
                {},
                optional={
                    "project": maybe(st.text(min_size=1, max_size=5)),
                    "environment": maybe(st.sampled_from(["prod", "dev"])),
                    "principal": maybe(st.text(min_size=1, max_size=5)),
                    "labels": maybe(st.dictionaries(st.text(max_size=4), st.text(max_size=4))),
                },
            )
        ),
        "model_options": maybe(
            st.fixed_dictionaries(
                {},
                optional={
                    "timeout": maybe(st.floats(min_value=1, max_value=60)),
                    "api": maybe(st.sampled_from(["chat", "responses"])),
                    "max_output_tokens": maybe(st.integers(min_value=1, max_value=100)),
                    "base_url": maybe(st.just("http://127.0.0.1:9/v1")),
                },
            )
        ),
        "policy": maybe(st.sampled_from(["policy.yaml", "missing.yaml", "."])),
        "tools": maybe(st.lists(TOOL_ENTRY, max_size=4)),
        "limits": maybe(LIMITS),
        "pricing": maybe(st.dictionaries(st.sampled_from(["scripted:*", "x:y", ""]), PRICE)),
        "mcp_servers": maybe(st.dictionaries(st.sampled_from(["s", "bad name"]), maybe(MCP))),
        "approvals": JUNK,
    },
)


class _NoAliases(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


_FOLDER = Path(tempfile.mkdtemp(prefix="oarlock-props-"))
(_FOLDER / "s.yaml").write_text("- text: hi\n")
(_FOLDER / "policy.yaml").write_text("policy: p\nrules:\n  - {id: r, effect: allow}\n")


def _dump(spec: Any) -> str:
    return yaml.dump(spec, Dumper=_NoAliases, allow_unicode=True)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(AGENT)
def test_an_agent_file_loads_or_is_a_config_error(spec: dict[str, Any]) -> None:
    path = _FOLDER / "agent.yaml"
    path.write_text(_dump(spec), "utf-8")
    try:
        agent = load_agent(path)
    except ConfigError as exc:
        problems = exc.problems
    else:
        assert isinstance(agent, Agent)
        assert isinstance(agent.name, str) and agent.name
        return
    assert problems
    assert all(p.startswith(f"{path}: ") for p in problems)


@settings(max_examples=300, deadline=None)
@given(LIMITS)
def test_limits_are_valid_or_refused(values: dict[str, Any]) -> None:
    values.pop("max_tokens", None)
    try:
        limits = Limits(**values)
    except ConfigError:
        return
    for name in ("max_turns", "max_input_tokens", "max_output_tokens"):
        value = getattr(limits, name)
        assert value is None or (type(value) is int and value >= 0)
    cost = limits.max_cost_usd
    assert cost is None or (not isinstance(cost, bool) and math.isfinite(cost) and cost >= 0)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["s", "bad name", ""]), st.one_of(MCP, JUNK))
def test_mcp_entries_are_valid_or_refused(name: str, data: Any) -> None:
    try:
        config = MCPServerConfig.from_dict(name, data, base_dir=_FOLDER)
    except ConfigError as exc:
        problems = exc.problems
    else:
        assert (config.command is None) != (config.url is None)
        assert config.problems() == []
        return
    assert all(p.startswith("mcp_servers") for p in problems)


TURN = st.fixed_dictionaries(
    {},
    optional={
        "text": maybe(st.text(max_size=10)),
        "tool_calls": maybe(
            st.lists(
                st.fixed_dictionaries(
                    {"name": maybe(st.sampled_from(["lookup", ""]))},
                    optional={"arguments": JUNK, "id": maybe(st.text(min_size=1, max_size=5))},
                ),
                max_size=2,
            )
        ),
        "usage": maybe(
            st.fixed_dictionaries(
                {}, optional={"input_tokens": maybe(st.integers(min_value=0, max_value=10**6))}
            )
        ),
        "fail": maybe(
            st.lists(
                st.fixed_dictionaries(
                    {"kind": maybe(st.sampled_from(["rate_limit", "server_error", "fatal"]))},
                    optional={"retry_after": maybe(st.floats(min_value=0, max_value=1))},
                ),
                max_size=2,
            )
        ),
    },
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.lists(maybe(TURN), max_size=3), JUNK))
def test_scripts_are_valid_or_refused(turns: Any) -> None:
    try:
        model = ScriptedModel(turns)
    except ConfigError as exc:
        problems = exc.problems
    else:
        assert isinstance(model.turns, list)
        return
    assert all(p.startswith("script: ") for p in problems)


RULE = st.fixed_dictionaries(
    {"id": maybe(st.sampled_from(["a", "b"])), "effect": maybe(st.sampled_from(["allow", "deny"]))},
    optional={
        "reason": maybe(st.text(max_size=5)),
        "approval_ttl": maybe(st.floats(min_value=1, max_value=100)),
        "match": maybe(
            st.fixed_dictionaries(
                {},
                optional={
                    "tool": maybe(st.sampled_from(["x*", "y"])),
                    "class": maybe(CLASSES),
                    "scope": maybe(st.fixed_dictionaries({}, optional={"environment": JUNK})),
                    "arguments": maybe(
                        st.dictionaries(
                            st.sampled_from(["amount", "a.b", "a..b"]),
                            st.dictionaries(
                                st.sampled_from(["equals", "in", "lte", "matches", "like"]), JUNK
                            ),
                        )
                    ),
                },
            )
        ),
    },
)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.fixed_dictionaries(
            {"policy": maybe(st.just("p"))},
            optional={
                "rules": maybe(st.lists(maybe(RULE), max_size=3)),
                "approval_ttl": maybe(st.floats(min_value=1, max_value=100)),
            },
        ),
        JUNK,
    )
)
def test_policies_are_valid_or_refused(data: Any) -> None:
    try:
        policy = RulePolicy.from_dict(data, source="fuzz.yaml")
    except ConfigError as exc:
        error = exc
    else:
        assert isinstance(policy.policy_id, str) and policy.policy_id
        return
    assert error.code == "policy_invalid"
    assert all(p.startswith("fuzz.yaml: ") for p in error.problems)

"""The one YAML reader (``oarlock._yaml.load_yaml``) of agent files, policy files and
model scripts: alias bombs fail fast and small, and every refusal names the file, the
line and the column."""

from __future__ import annotations

import math
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oarlock._yaml import load_yaml
from oarlock.engine._agentfile import check_agent_file, load_agent
from oarlock.errors import ConfigError
from oarlock.governance import RulePolicy
from oarlock.models import ScriptedModel

LAUGHS = '["lol","lol","lol","lol","lol","lol","lol","lol","lol"]'


def bomb(levels: int = 9) -> str:
    """A billion laughs: each level an alias list of nine aliases of the level below."""
    names = "abcdefghijklmnop"
    lines = [f"  - &{names[0]} {LAUGHS}"]
    for i in range(1, levels):
        below = f"*{names[i - 1]}"
        lines.append(f"  - &{names[i]} [{','.join([below] * 9)}]")
    return "\n".join(lines) + "\n"


def fails_fast_and_small(load: Callable[[], object]) -> ConfigError:
    tracemalloc.start()
    started = time.monotonic()
    try:
        with pytest.raises(ConfigError) as info:
            load()
        elapsed = time.monotonic() - started
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert elapsed < 2.0
    assert peak < 8_000_000
    return info.value


def test_an_alias_bomb_in_the_instructions_of_an_agent_file(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text("- text: hi\n")
    agent = tmp_path / "agent.yaml"
    agent.write_text("name: bomb\nmodel: scripted:s.yaml\ninstructions:\n" + bomb())
    assert agent.stat().st_size < 600
    error = fails_fast_and_small(lambda: load_agent(agent))
    assert str(error) == (
        f"{agent}: line 4, column 5: anchors (&a) are not allowed: write the value out"
    )
    assert "<unicode string>" not in str(error)


def test_an_alias_bomb_in_a_policy_rule(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    rule = "rules:\n  - id: r\n    effect: allow\n    match:\n      arguments:\n        a:\n"
    equals = "          equals:\n" + bomb().replace("  -", "            -")
    policy.write_text("policy: p\n" + rule + equals)
    error = fails_fast_and_small(lambda: RulePolicy.from_file(policy))
    assert error.code == "policy_invalid"
    assert str(error).startswith(f"{policy}: line 9, column 15: anchors (&a) are not allowed")


def test_aliases_alone_are_refused_where_they_are(tmp_path: Path) -> None:
    script = tmp_path / "s.yaml"
    script.write_text("- text: &t hi\n- text: *t\n")
    error = fails_fast_and_small(lambda: ScriptedModel.from_file(script))
    assert str(error) == (
        f"{script}: line 1, column 9: anchors (&t) are not allowed: write the value out"
    )
    with pytest.raises(ConfigError, match=r"x\.yaml: line 1, column 4: aliases \(\*t\) are not"):
        load_yaml("a: *t\n", "x.yaml")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("<<: {a: 1}\n", "line 1, column 1: merge keys (<<) are not allowed"),
        ("a: 1\nb: 2\na: 3\n", "line 3, column 1: duplicate key 'a'"),
        ("a: {x: 1, x: 2}\n", "line 1, column 11: duplicate key 'x'"),
        ("a: 2024-01-01\n", "line 1, column 4: YAML reads this as a date or time"),
        ("a: 2001-13-45\n", "line 1, column 4: YAML reads this as a date or time"),
        ("a: !!binary aGk=\n", "the !!binary tag is not supported"),
        ("a: !!set {x}\n", "the !!set tag is not supported"),
        ("a: !!python/object:os.system x\n", "could not determine a constructor"),
        ("a: 0x_\n", "line 1, column 4: '0x_' is not an integer"),
        ("a: !!int abc\n", "'abc' is not an integer"),
        ("a: !!bool maybe\n", "'maybe' is not true or false"),
        ("a: !!float x\n", "'x' is not a number"),
        ("a: " + "9" * 5000 + "\n", "an integer of 5000 digits is too large"),
        ("a: 0x" + "f" * 4000 + "\n", "is too large"),
        ("a: " + "[" * 200 + "]" * 200 + "\n", "line 1, column 131: nested deeper than 128 levels"),
        ("a: [1\n", "line 2, column 1: not valid YAML: did not find expected ',' or ']'"),
        ("--- 1\n--- 2\n", "line 2, column 1: but found another document"),
        ("? [1]\n: 2\n", "a key must be a string or a number, not a collection"),
    ],
)
def test_refusals_name_file_line_and_column(text: str, says: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_yaml(text, "conf.yaml", code="my_code")
    assert str(info.value).startswith("conf.yaml: ")
    assert says in str(info.value)
    assert info.value.code == "my_code"
    assert "<unicode string>" not in str(info.value)


def test_plain_yaml_reads_as_json_values() -> None:
    text = "a: 1\nb: [x, 2.5, true, null]\nc: {d: .nan, e: '2024-01-01'}\nf: 0x1f\n"
    data = load_yaml(text, "conf.yaml")
    assert data["b"] == ["x", 2.5, True, None]
    assert math.isnan(data["c"]["d"]) and data["c"]["e"] == "2024-01-01"
    assert data["f"] == 31
    assert load_yaml("", "empty.yaml") is None


def test_a_lone_surrogate_escape_is_not_text() -> None:
    with pytest.raises(ConfigError, match=r"conf\.yaml: line 1, column \d+: "):
        load_yaml('a: "\\udfff"\n', "conf.yaml")


def _json_like(value: Any) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str | int | float | bool) or k is None for k in value) and all(
            _json_like(v) for v in value.values()
        )
    if isinstance(value, list):
        return all(_json_like(v) for v in value)
    return value is None or isinstance(value, str | int | float | bool)


YAMLISH = st.lists(
    st.sampled_from(
        ["a", ":", " ", "\n", "-", "&x", "*x", "<<", "[", "]", "{", "}", ",", "!!", "int",
         "binary", "'", '"', "\\u", "d800", "0x", "9" * 50, "2024-01-01", "?", "#", "|",
         ">", "\t", ".nan", "yes", "~", "%YAML 1.1", "---", "...", "!x", "0b_", "1:2"]
    ),
    max_size=40,
).map("".join)


@settings(max_examples=400, deadline=None)
@given(st.one_of(YAMLISH, st.text(max_size=200)))
def test_any_text_gives_json_values_or_a_config_error(text: str) -> None:
    try:
        value = load_yaml(text, "fuzz.yaml")
    except ConfigError as exc:
        message = str(exc)
    else:
        assert _json_like(value)
        return
    assert message.startswith("fuzz.yaml: ")


def test_check_agent_file_reports_the_refusal_as_a_problem(tmp_path: Path) -> None:
    agent = tmp_path / "agent.yaml"
    agent.write_text("name: a\nname: b\n")
    checked = check_agent_file(agent)
    assert checked.agent is None
    assert list(checked.problems) == [f"{agent}: line 2, column 1: duplicate key 'name'"]

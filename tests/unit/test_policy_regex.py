"""Policy regular expressions and tool globs run in linear time (RE2): the catastrophic
patterns against long model-chosen arguments stay fast, what RE2 cannot run or reads
otherwise than Python is refused when the policy is loaded, naming the rule, and what both
engines accept they read alike (hypothesis, against Python's ``re`` and ``fnmatch``)."""

from __future__ import annotations

import ast
import fnmatch
import re
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oarlock.errors import ConfigError
from oarlock.governance._policy import PolicyRequest, RulePolicy
from oarlock.governance._regex import PatternError, glob_matcher, regex_searcher

CATASTROPHIC = [
    r"(a+)+$",
    r"(a|a)*$",
    r"(a|aa)+$",
    r"(.*a){20}",
    r"^(([a-z])+.)+[A-Z]([a-z])+$",
    r"^(\w+\s?)*$",
    r"(x+x+)+y",
]
N = 100_000  # 100 KB of model-chosen argument
HOSTILE = [
    "a" * N + "!",
    "a" * N,
    "ab" * (N // 2),
    "x" * N,
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!" * (N // 47),
    ("abcdefghij" * (N // 10)) + "1",
]


def policy(pattern: str, effect: str = "deny") -> RulePolicy:
    return RulePolicy.from_dict(
        {
            "policy": "p",
            "rules": [{"id": "the-rule", "effect": effect,
                       "match": {"arguments": {"s": {"matches": pattern}}}}],
        }
    )  # fmt: skip


def call(value: Any, tool: str = "shell") -> PolicyRequest:
    return PolicyRequest(tool, "read", {"tenantId": "t"}, {"s": value})


def decided_by_rule(p: RulePolicy, value: Any) -> bool:
    return p.evaluate(call(value)).rule_id == "the-rule"


@pytest.mark.parametrize("pattern", CATASTROPHIC)
def test_catastrophic_patterns_stay_fast_on_long_arguments(pattern: str) -> None:
    p = policy(pattern)
    for text in HOSTILE:
        start = time.perf_counter()
        verdict = p.evaluate(call(text))
        took = time.perf_counter() - start
        assert took < 1.0, f"{pattern!r} took {took:.2f} s on {len(text)} characters"
        assert verdict.reasons[0] != "policy evaluation failed", verdict
        # and it is a real search: the verdict is the one Python's re gives on short text
        short = text[:12] + text[-3:]
        expected = re.search(pattern, short) is not None
        assert decided_by_rule(p, short) is expected, (pattern, short)


def test_the_attack_of_the_issue_is_decided_at_once() -> None:
    p = policy("(a+)+$")
    start = time.perf_counter()
    assert p.evaluate(call("a" * 34 + "!")).effect == "allow"  # no match: the default
    assert p.evaluate(call("a" * 34)).effect == "deny"
    assert time.perf_counter() - start < 0.5


def test_a_long_argument_is_searched_to_its_end() -> None:
    p = policy(r"needle\d+$")
    assert decided_by_rule(p, "x" * 1_000_000 + "needle42")
    assert not decided_by_rule(p, "x" * 1_000_000 + "needle42!")


@pytest.mark.parametrize(
    ("pattern", "says"),
    [
        (r"(a)\1", "invalid escape sequence: \\1"),
        (r"(?P<x>a)(?P=x)", "invalid perl operator: (?P"),
        (r"foo(?=bar)", "invalid perl operator: (?="),
        (r"foo(?!bar)", "invalid perl operator: (?!"),
        (r"(?<=a)b", "(?<"),
        (r"(?<!a)b", "(?<"),
        (r"(?>a+)b", "invalid perl operator: (?>"),
        (r"a++b", "bad repetition operator: ++"),
        (r"(?x) a b", "invalid perl operator: (?x"),
        (r"a{1001}", "invalid repetition size: {1001}"),
        (r"((a{100}){100}){100}", "invalid repetition size"),
        (r"(unclosed", "missing )"),
        (r"a{,3}", "{,3} is a repetition in Python but text in RE2: write {0,3}"),
        (r"[a-z]{,}", "write {0,}"),
        ("x" * 5_000_000, "pattern too large"),
    ],
)
def test_patterns_re2_cannot_run_are_refused_at_load(pattern: str, says: str) -> None:
    with pytest.raises(ConfigError) as info:
        policy(pattern)
    assert info.value.code == "policy_invalid"
    message = str(info.value)
    assert "rule 'the-rule' (rules[0]): match.arguments.s.matches: bad regular expression" in (
        message
    )
    assert says in message
    assert "Traceback" not in message


def test_a_refused_pattern_in_a_policy_file_names_the_rule(tmp_path: Path) -> None:
    f = tmp_path / "policy.yaml"
    f.write_text(
        "policy: p\nrules:\n  - id: ok\n    effect: allow\n"
        "  - id: no-lookahead\n    effect: deny\n"
        "    match: {arguments: {cmd: {matches: 'rm(?= -rf)'}}}\n"
    )
    with pytest.raises(ConfigError) as info:
        RulePolicy.from_file(f)
    assert info.value.code == "policy_invalid"
    assert "rule 'no-lookahead' (rules[1]): match.arguments.cmd.matches" in str(info.value)
    assert "lookaround" in str(info.value)  # the hint says what RE2 does not do


def test_a_lone_surrogate_in_a_pattern_is_refused() -> None:
    with pytest.raises(ConfigError, match="lone surrogate"):
        policy("a\ud800")
    with pytest.raises(ConfigError, match=r"match\.tool: bad glob: .*lone surrogate"):
        RulePolicy.from_dict(
            {"policy": "p", "rules": [{"id": "r", "effect": "deny",
                                       "match": {"tool": "x\udfff*"}}]}
        )  # fmt: skip


def test_a_lone_surrogate_in_an_argument_is_searched_not_an_error() -> None:
    p = policy("rm -rf")
    verdict = p.evaluate(call("rm -rf \ud800 /"))
    assert (verdict.effect, verdict.rule_id) == ("deny", "the-rule")
    assert not decided_by_rule(p, "ls \udfff")


def test_python_end_of_text_is_read_as_re2s() -> None:
    p = policy(r"^rm\Z")
    assert decided_by_rule(p, "rm")
    assert not decided_by_rule(p, "rm\n")
    assert not decided_by_rule(p, "rm -rf")
    assert regex_searcher(r"[\\Z]")("Z")  # inside a class \Z stays a Z (here: \\ and Z)
    assert regex_searcher(r"\\Z")("\\Z")  # an escaped backslash before Z is no \Z


def test_dollar_is_the_very_end_and_perl_classes_are_ascii() -> None:
    assert not decided_by_rule(policy(r"^[a-z]+$"), "abc\n")  # Python's $ would match
    assert decided_by_rule(policy(r"(?m)^[a-z]+$"), "abc\n")
    assert not decided_by_rule(policy(r"^\d+$"), "\u0663")  # ARABIC-INDIC DIGIT THREE
    assert decided_by_rule(policy(r"^\p{Nd}+$"), "\u0663")
    assert decided_by_rule(policy(r"(?i)straße"), "STRAßE")


@pytest.mark.parametrize("value", [None, 1, 1.5, True, ["aaa"], {"a": "aaa"}])
def test_only_strings_are_searched(value: Any) -> None:
    assert not decided_by_rule(policy(".*"), value)


def test_no_policy_module_compiles_a_pattern_but_through_the_regex_module() -> None:
    """One way in: the policy module never imports Python's re or fnmatch."""
    import oarlock.governance._policy as module

    tree = ast.parse(Path(module.__file__).read_text("utf-8"))
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not imported & {"re", "fnmatch", "regex"}, imported


# -- both engines read alike what both accept -------------------------------------------

ATOMS = st.sampled_from(["a", "b", "ab", ".", "[ab]", "[^a]", "[a-c]", r"\.", "x", "é"])


def regexes() -> st.SearchStrategy[str]:
    return st.recursive(
        ATOMS,
        lambda inner: st.one_of(
            st.tuples(inner, inner).map("".join),
            st.tuples(inner, inner).map("|".join),
            inner.map(lambda r: f"(?:{r})"),
            inner.map(lambda r: f"({r})"),
            st.tuples(inner, st.sampled_from(["*", "+", "?", "{2}", "{1,3}", "{0,}", "*?"])).map(
                lambda t: f"(?:{t[0]}){t[1]}"
            ),
            inner.map(lambda r: f"^{r}"),
            inner.map(lambda r: rf"{r}\Z"),
            inner.map(lambda r: f"(?i:{r})"),
        ),
        max_leaves=6,
    )


@settings(max_examples=400, deadline=None)
@given(regexes(), st.text(alphabet="abcxAB.é\u00c9", max_size=12))
def test_re2_finds_what_python_finds(pattern: str, text: str) -> None:
    assert regex_searcher(pattern)(text) is (re.search(pattern, text) is not None)


BRACKET_BODY = st.text(alphabet="ab-]!^\\[cz", max_size=5)
GLOB_PARTS = st.one_of(
    st.sampled_from([*"ab*?[]!-^\\.xé/", "[!", "[]", "[a-c]", "[!]", "[z-a]"]),
    st.builds("[{}{}]".format, st.sampled_from(["", "!"]), BRACKET_BODY),  # a bracket
)
NAME_CHARS = st.sampled_from(list("ab-!^\\[].xé/cz\n"))


def near(part: str) -> st.SearchStrategy[str]:
    """Text that the glob part ``part`` is likely to match, or nearly."""
    body = part[1:-1].lstrip("!") if part.startswith("[") and len(part) > 2 else ""
    return st.one_of(
        st.just(part),
        st.text(alphabet=NAME_CHARS, max_size=2),
        st.sampled_from(body) if body else st.text(alphabet=NAME_CHARS, max_size=1),
    )


@settings(max_examples=800, deadline=None)
@given(st.data())
def test_tool_globs_match_as_fnmatch_does(data: st.DataObject) -> None:
    parts = data.draw(st.lists(GLOB_PARTS, max_size=6))
    glob = "".join(parts)
    name = "".join(data.draw(near(part)) for part in parts)
    assert glob_matcher([glob])(name) is fnmatch.fnmatchcase(name, glob), (glob, name)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=6), min_size=1, max_size=3), st.text(max_size=8))
def test_glob_lists_match_as_fnmatch_does_on_any_text(globs: list[str], name: str) -> None:
    expected = any(fnmatch.fnmatchcase(name, g) for g in globs)
    assert glob_matcher(globs)(name) is expected, (globs, name)


def test_glob_matching_stays_fast_on_long_names() -> None:
    matches = glob_matcher(["*a*a*a*a*a*a*a*a*a*b", "[!x]*?*?*?*c"])
    start = time.perf_counter()
    assert not matches("a" * N)
    assert matches("a" * N + "b")
    assert time.perf_counter() - start < 1.0


def test_a_regex_error_carries_no_traceback_and_no_bytes() -> None:
    with pytest.raises(PatternError) as info:
        regex_searcher("(?=x)")
    assert str(info.value).startswith("invalid perl operator: (?=")
    assert "b'" not in str(info.value)

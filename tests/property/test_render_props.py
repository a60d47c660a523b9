"""The renderer: whatever the text, what reaches a terminal holds no raw control, bidi,
invisible or surrogate character, forges no line, and its JSON parses back to the value."""

from __future__ import annotations

import json
import unicodedata

from hypothesis import given
from hypothesis import strategies as st

from oarlock._render import block, cell, dumps, line
from oarlock._secrets import REDACTED, redact, register_secret

_BIDI = set("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")
_INVISIBLE = set("\u200b\u200c\u200d\u2060\ufeff\u00ad") | {chr(0xE0041)}

text = st.text(
    alphabet=st.one_of(
        st.characters(codec=None),
        st.sampled_from(sorted(_BIDI | _INVISIBLE | {"\x1b", "\x07", "\x9b", "\r", "\n"})),
    )
)


def _unsafe(ch: str) -> bool:
    cp = ord(ch)
    return (
        unicodedata.category(ch) in ("Cc", "Cs")
        or ch in _BIDI
        or ch in _INVISIBLE
        or 0xE0000 <= cp <= 0xE007F
        or ch in "\u2028\u2029"
    )


@given(text)
def test_a_line_holds_nothing_unsafe_and_is_one_line(value: str) -> None:
    out = line(value)
    assert not any(_unsafe(ch) for ch in out)
    out.encode("utf-8")  # no surrogate left


@given(text)
def test_a_block_keeps_newlines_but_indents_every_later_line(value: str) -> None:
    out = block(value, indent="    ")
    assert not any(_unsafe(ch) for ch in out if ch not in "\n\t")
    for later in out.split("\n")[1:]:
        assert later.startswith("    ")


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | text,
        lambda c: st.lists(c) | st.dictionaries(text, c),
        max_leaves=8,
    )
)
def test_json_output_parses_back_and_holds_nothing_unsafe(value: object) -> None:
    out = dumps(value)
    assert not any(_unsafe(ch) for ch in out if ch != "\n")
    if "[redacted]" not in out:
        assert json.loads(out) == value


def test_terminal_sequences_are_shown_not_obeyed() -> None:
    hostile = "ok\x1b]0;pwned\x07\x1b[2J\x1b]8;;https://evil\x1b\\click\x1b]8;;\x1b\\\u202eexe.txt"
    out = line(hostile)
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert out.startswith("ok\\x1b]0;pwned\\x07")


def test_argv_bytes_that_are_not_utf8_show_as_hex() -> None:
    assert line("run-\udcff\udcfe") == "run-\\xff\\xfe"


def test_a_table_cell_is_never_markup() -> None:
    assert cell("[link=http://evil]click[/link]").plain == "[link=http://evil]click[/link]"
    assert cell("[bold]x").spans == []


def test_configured_secrets_and_credentials_are_redacted(monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "k3y-value-0123456789")
    register_secret("header-secret-abcdef")
    text = (
        "401 echo: Authorization: Bearer k3y-value-0123456789 x-api-key: header-secret-abcdef "
        "at postgresql://app:pa55word@db/x"
    )
    out = redact(text)
    assert "k3y-value" not in out and "header-secret" not in out and "pa55word" not in out
    assert "postgresql://app:" + REDACTED + "@db/x" in out
    assert "k3y-value" not in line(text) and "k3y-value" not in dumps({"e": text})


def test_short_values_are_not_registered() -> None:
    register_secret("abc")
    assert redact("abc abc") == "abc abc"

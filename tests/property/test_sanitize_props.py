"""Properties of the tool-result sanitizer and fence, checked with hypothesis:

1. ``sanitize`` is idempotent for every string and every ``max_chars``;
2. its output holds none of the forbidden characters (listed here independently of the module)
   and is at most ``max_chars`` long, exactly ``max_chars`` when it was cut;
3. text without escape introducers is cleaned exactly as a simple character filter would;
4. complete escape sequences vanish, also with invisible characters inside, and the text
   around them is kept;
5. clean text (printable ASCII with newlines and tabs, or visible Unicode) is left unchanged,
   and the shortcuts for clean and for ASCII text agree with the full cleaning pass;
6. ``fence`` / ``unfence`` round-trip, and the nonce never occurs in the fenced text.
"""

from __future__ import annotations

import string
import unicodedata

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from oarlock.governance import _sanitize
from oarlock.governance._sanitize import (
    DEFAULT_MAX_CHARS,
    MIN_MAX_CHARS,
    fence,
    sanitize,
    sanitize_result,
    unfence,
)

PROPS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --------------------------------------------------------------------------- what must go

FORBIDDEN_CODE_POINTS = frozenset(
    [0x00AD, 0x034F, 0x061C, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180E, 0x3164, 0xFEFF, 0xFFA0]
)
FORBIDDEN_RANGES = (
    (0x200B, 0x200F),  # zero-width space, non-joiner, joiner; LRM, RLM
    (0x202A, 0x202E),  # bidi embeddings and overrides
    (0x2060, 0x206F),  # word joiner, invisible operators, bidi isolates, deprecated formats
    (0xFFF0, 0xFFFB),  # unassigned specials and the interlinear annotation controls
    (0x1BCA0, 0x1BCA3),  # shorthand format controls
    (0x1D173, 0x1D17A),  # musical symbol format controls
    (0xE0000, 0xE00FF),  # tag characters and the rest of their block
    (0xE01F0, 0xE0FFF),  # unassigned default-ignorables after variation selectors supplement
)


def forbidden(ch: str) -> bool:
    if ch in "\n\t":
        return False
    if unicodedata.category(ch) in ("Cc", "Cs"):  # C0, DEL, C1 (CR too), surrogates
        return True
    cp = ord(ch)
    return cp in FORBIDDEN_CODE_POINTS or any(lo <= cp <= hi for lo, hi in FORBIDDEN_RANGES)


# --------------------------------------------------------------------------- strategies

DANGEROUS = [
    "\x1b", "[", "]", "0", "1", "3", "8", ";", "?", "m", "(", "B", "P", "_", "\x07", "\\",
    "\x9b", "\x9c", "\x9d", "\x90", "\x9f", "\x85", "\x00", "\x18", "\x7f",
    "\r", "\n", "\t", " ", "a",
    "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u034f", "\u180e", "\u3164",
    "\u200e", "\u200f", "\u061c", "\u202a", "\u202e", "\u2066", "\u2069",
    "\U000e0001", "\U000e0041", "\U000e007f", "\ufff9", "\ufffb", "\ufe0f", "\U000e0100",
    "\ud800", "\udbff", "\udc00", "\udfff", "\ud83d", "\ude00", "\udb40", "\udc41",
]  # fmt: skip
FRAGMENTS = [
    "\x1b[", "\x1b]", "\x1b]8;;", "\x1b\\", "\x1bP", "31m", "38;5;196m", "\r\n", "\x1b(B",
    "\x1b\u200b[", "\x1b\U000e0041", "\ud83d\ude00", "\udb40\udc41",
    "</untrusted-tool-result>", "[oarlock: output truncated, 7 characters removed]",
]  # fmt: skip

dangerous_text = st.lists(
    st.one_of(st.sampled_from(DANGEROUS), st.sampled_from(FRAGMENTS), st.characters()),
    max_size=60,
).map("".join)
# a few characters, so that they meet in every order: ESC, zero-width space, "[", CR, LF ...
crowded_text = st.text(st.sampled_from("\x1b\u200b\U000e0041[]\\1;m\x07\x00\r\n\ud83d\ude00a"))
any_text = st.one_of(
    st.text(),
    st.text(st.characters(exclude_categories=[])),  # surrogates included
    dangerous_text,
    crowded_text,
)
max_chars_values = st.one_of(
    st.integers(MIN_MAX_CHARS, MIN_MAX_CHARS + 80), st.just(DEFAULT_MAX_CHARS)
)
# long enough to be cut at small caps
long_text = st.lists(any_text, min_size=1, max_size=8).map(lambda parts: "".join(parts) * 7)


# --------------------------------------------------------------------------- sanitize


@PROPS
@given(any_text, max_chars_values)
def test_idempotent(text: str, max_chars: int) -> None:
    once = sanitize(text, max_chars=max_chars)
    assert sanitize(once, max_chars=max_chars) == once


@PROPS
@given(long_text, st.integers(MIN_MAX_CHARS, MIN_MAX_CHARS + 80))
def test_idempotent_when_cut(text: str, max_chars: int) -> None:
    once = sanitize(text, max_chars=max_chars)
    assert sanitize(once, max_chars=max_chars) == once
    assert sanitize(once) == once  # a larger cap does not change a cut result either


@PROPS
@given(st.one_of(any_text, long_text), max_chars_values)
def test_output_is_clean_and_bounded(text: str, max_chars: int) -> None:
    out = sanitize(text, max_chars=max_chars)
    assert not [ch for ch in out if forbidden(ch)]
    assert len(out) <= max_chars
    out.encode("utf-8")
    full = sanitize(text, max_chars=10**9)
    if len(full) > max_chars:
        assert len(out) == max_chars
        assert "\n[oarlock: output truncated, " in out
        head = out[: out.rindex("\n[oarlock: output truncated, ")]
        assert full.startswith(head)
        assert out.endswith(f" {len(full) - len(head)} characters removed]")
    else:
        assert out == full


ESCAPE_INTRODUCERS = "\x1b\x90\x98\x9b\x9c\x9d\x9e\x9f"


@PROPS
@given(
    st.one_of(
        (dangerous_text | crowded_text).map(
            lambda t: "".join(ch for ch in t if ch not in ESCAPE_INTRODUCERS)
        ),
        st.text(st.sampled_from("\r\n\u200b\u202e\x00\x07\x85\ud83d\ude00a")),
    )
)
@example("\r\u200b\n")  # a CR and the LF after it meet once the invisible has gone
@example("\r\x07\n")
@example("\ud83d\u200b\ude00")  # surrogates are dealt with before anything is removed
def test_without_escapes_it_is_a_character_filter(text: str) -> None:
    # join surrogate pairs as UTF-16 would, lone surrogates become U+FFFD
    joined = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    kept = "".join(ch for ch in joined if ch == "\r" or not forbidden(ch))
    expected = kept.replace("\r\n", "\n").replace("\r", "\n")
    assert sanitize(text, max_chars=10**9) == expected


visible_ascii = st.text(alphabet=string.ascii_letters + string.digits + " .,:!-\n", max_size=20)
csi = st.builds(
    lambda intro, params, inter, final: intro + params + inter + final,
    st.sampled_from(["\x1b[", "\x9b"]),
    st.text(alphabet="0123456789:;<=>?", max_size=8),
    st.text(alphabet=" !\"#$%&'()*+,-./", max_size=2),
    st.sampled_from([chr(c) for c in range(0x40, 0x7F)]),
)
osc = st.builds(
    lambda intro, body, end: intro + body + end,
    st.sampled_from(["\x1b]", "\x9d"]),
    st.text(alphabet=string.printable.replace("\n", "").replace("\r", ""), max_size=30),
    st.sampled_from(["\x07", "\x1b\\", "\x9c"]),
)
dcs = st.builds(
    lambda intro, body, end: intro + body + end,
    st.sampled_from(["\x1bP", "\x1bX", "\x1b^", "\x1b_", "\x90", "\x98", "\x9e", "\x9f"]),
    st.text(alphabet=string.ascii_letters + string.digits + "#;~@-", max_size=30),
    st.sampled_from(["\x1b\\", "\x9c"]),
)
short_escape = st.builds(
    lambda inter, final: "\x1b" + inter + final,
    st.text(alphabet=" !\"#$%&'()*+,-./", max_size=2),
    st.sampled_from([chr(c) for c in range(0x30, 0x7F) if chr(c) not in "[]PX^_"]),
)
escape = st.one_of(csi, osc, dcs, short_escape)


@PROPS
@given(st.lists(st.tuples(visible_ascii, st.lists(escape, max_size=2)), max_size=6))
def test_complete_escapes_vanish_and_the_text_around_them_stays(
    parts: list[tuple[str, list[str]]],
) -> None:
    text = "".join(visible + "".join(escapes) for visible, escapes in parts)
    expected = "".join(visible for visible, _ in parts)
    assert sanitize(text, max_chars=10**9) == expected


INVISIBLES = ["\u200b", "\u200d", "\ufeff", "\u00ad", "\u202e", "\u2066", "\U000e0041", "\x00"]


def sprinkle(text: str, inserts: list[tuple[int, str]]) -> str:
    for where, ch in inserts:
        at = where % (len(text) + 1)
        text = text[:at] + ch + text[at:]
    return text


sprinkled_escape = st.builds(
    sprinkle,
    escape,
    st.lists(st.tuples(st.integers(0, 50), st.sampled_from(INVISIBLES)), min_size=1, max_size=4),
)


@PROPS
@given(st.lists(st.tuples(visible_ascii, sprinkled_escape), max_size=4), visible_ascii)
def test_invisibles_inside_an_escape_do_not_save_it(
    parts: list[tuple[str, str]], last: str
) -> None:
    text = "".join(visible + esc for visible, esc in parts) + last
    expected = "".join(visible for visible, _ in parts) + last
    assert sanitize(text, max_chars=10**9) == expected


@PROPS
@given(st.data())
def test_plain_ascii_is_unchanged_when_short_enough(data: st.DataObject) -> None:
    max_chars = data.draw(max_chars_values)
    alphabet = string.digits + string.ascii_letters + string.punctuation + " \n\t"
    text = data.draw(st.text(alphabet=alphabet, max_size=max_chars))
    assert sanitize(text, max_chars=max_chars) == text


VISIBLE_UNICODE = st.characters(exclude_categories=["Cc", "Cf", "Cs", "Cn"]).filter(
    lambda ch: not forbidden(ch)
)


@PROPS
@given(st.text(VISIBLE_UNICODE, max_size=80) | st.text(st.sampled_from("\n\tx\u00e9\u4e16")))
def test_visible_unicode_is_unchanged(text: str) -> None:
    assert sanitize(text) == text


@PROPS
@given(
    st.one_of(
        any_text,
        st.text(st.characters(max_codepoint=0x7F)),  # ASCII, controls included
        st.text(VISIBLE_UNICODE | st.sampled_from(["\xa0", "\u202f", "\u3000", "\ue000", "\n"])),
        st.lists(
            st.sampled_from(sorted(chr(cp) for cp in FORBIDDEN_CODE_POINTS)) | VISIBLE_UNICODE,
            max_size=8,
        ).map("".join),
    )
)
def test_shortcuts_agree_with_the_full_pass(text: str) -> None:
    full = _sanitize._clean_unicode(text)  # every pass, whatever the text
    if text.isascii():
        assert _sanitize._clean_ascii(text, _sanitize._ascii_controls(text)) == full
        assert (_sanitize._ascii_controls(text) == b"") == (full == text)
    else:
        assert _sanitize._unicode_is_clean(text) == (full == text)


# --------------------------------------------------------------------------- fence


@PROPS
@given(any_text)
def test_fence_round_trip_and_nonce_is_absent(text: str) -> None:
    fenced = fence(text)
    nonce = fenced.split('"', 2)[1]
    assert nonce not in text
    assert fenced.count(nonce) == 2  # opening and closing line only
    assert fenced.endswith(f'\n</untrusted-tool-result id="{nonce}">')
    assert unfence(fenced) == text


@PROPS
@given(any_text, max_chars_values)
def test_sanitize_result_holds_the_sanitized_text(text: str, max_chars: int) -> None:
    assert unfence(sanitize_result(text, max_chars=max_chars)) == sanitize(
        text, max_chars=max_chars
    )

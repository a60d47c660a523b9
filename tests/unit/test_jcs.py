"""RFC 8785 (JCS) canonical bytes and the oarlock digest, against golden vectors that do
not come from oarlock itself."""

from __future__ import annotations

import hashlib
import json
import re
import struct
from collections import OrderedDict

import pytest

import oarlock
from oarlock.errors import CanonicalizationError, FormatError, OarlockError
from oarlock.formats import canonicalize, digest, digest_bytes

# --------------------------------------------------------------------------- numbers


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1.0, b"1"),
        (-0.0, b"0"),
        (0.0, b"0"),
        (0, b"0"),
        (-1, b"-1"),
        (1e21, b"1e+21"),
        (1e20, b"100000000000000000000"),
        (1e-7, b"1e-7"),
        (0.000001, b"0.000001"),
        (123456789012345680000.0, b"123456789012345680000"),
        (4.5, b"4.5"),
        (0.1, b"0.1"),
        (0.1 + 0.2, b"0.30000000000000004"),
        (2e-3, b"0.002"),
        (1e30, b"1e+30"),
        (1e-27, b"1e-27"),
        (-1e-7, b"-1e-7"),
        (1e16, b"10000000000000000"),
        (1e15 + 0.5, b"1000000000000000.5"),
        (5e-324, b"5e-324"),
        (2.0**53, b"9007199254740992"),  # a float, not an integer: no I-JSON limit
        (2**53 - 1, b"9007199254740991"),
        (-(2**53 - 1), b"-9007199254740991"),
    ],
)
def test_numbers(value, expected):
    assert canonicalize(value) == expected


# RFC 8785 appendix B: IEEE 754 bit patterns and their ECMAScript serialisation
RFC8785_NUMBERS = {
    0x0000000000000000: "0",
    0x8000000000000000: "0",
    0x0000000000000001: "5e-324",
    0x8000000000000001: "-5e-324",
    0x7FEFFFFFFFFFFFFF: "1.7976931348623157e+308",
    0xFFEFFFFFFFFFFFFF: "-1.7976931348623157e+308",
    0x4340000000000000: "9007199254740992",
    0xC340000000000000: "-9007199254740992",
    0x4430000000000000: "295147905179352830000",
    0x44B52D02C7E14AF5: "9.999999999999997e+22",
    0x44B52D02C7E14AF6: "1e+23",
    0x44B52D02C7E14AF7: "1.0000000000000001e+23",
    0x444B1AE4D6E2EF4E: "999999999999999700000",
    0x444B1AE4D6E2EF4F: "999999999999999900000",
    0x444B1AE4D6E2EF50: "1e+21",
    0x3EB0C6F7A0B5ED8C: "9.999999999999997e-7",
    0x3EB0C6F7A0B5ED8D: "0.000001",
    0x41B3DE4355555553: "333333333.3333332",
    0x41B3DE4355555554: "333333333.33333325",
    0x41B3DE4355555555: "333333333.3333333",
    0x41B3DE4355555556: "333333333.3333334",
    0x41B3DE4355555557: "333333333.33333343",
    0xBECBF647612F3696: "-0.0000033333333333333333",
    0x43143FF3C1CB0959: "1424953923781206.2",
}


@pytest.mark.parametrize(
    ("bits", "expected"), list(RFC8785_NUMBERS.items()), ids=[hex(b) for b in RFC8785_NUMBERS]
)
def test_rfc8785_appendix_b_numbers(bits, expected):
    value = struct.unpack(">d", bits.to_bytes(8, "big"))[0]
    assert canonicalize(value) == expected.encode("ascii")
    assert canonicalize([value]) == b"[" + expected.encode("ascii") + b"]"
    assert canonicalize({"n": value}) == b'{"n":' + expected.encode("ascii") + b"}"


@pytest.mark.parametrize("value", [2**53, -(2**53), 2**53 + 1, 2**64, -(2**100), 10**30])
def test_integers_beyond_2_53_are_refused(value):
    for wrapped in (value, [value], {"a": value}, {"a": [1, {"b": value}]}):
        with pytest.raises(CanonicalizationError, match=re.escape("2**53")):
            canonicalize(wrapped)
        with pytest.raises(CanonicalizationError):
            digest(wrapped)


def test_big_integer_refused_also_next_to_values_needing_the_general_encoder():
    # a float with an exponent or a non-BMP key sends the value down the general path
    for value in ({"a": 1e-7, "b": 2**53}, {"\U0001f600": 1, "b": [-(2**53)]}):
        with pytest.raises(CanonicalizationError, match=re.escape("2**53")) as info:
            canonicalize(value)
        assert info.value.code == "jcs_unrepresentable"


def test_canonicalization_error_is_a_format_error():
    with pytest.raises(FormatError):
        canonicalize(2**53)
    with pytest.raises(OarlockError):
        canonicalize(2**53)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_nan_and_infinities_are_refused(bad):
    for wrapped in (bad, [1, bad], {"a": bad}, {"a": 1e-7, "b": bad}):
        with pytest.raises(CanonicalizationError):
            canonicalize(wrapped)


def test_bool_is_not_a_number():
    assert canonicalize([True, False, None]) == b"[true,false,null]"
    assert canonicalize({"t": True}) == b'{"t":true}'


# --------------------------------------------------------------------------- strings


def test_non_ascii_is_kept_as_raw_utf8():
    assert canonicalize("é€\U0001f600") == '"é€\U0001f600"'.encode()
    assert canonicalize("é") == b'"\xc3\xa9"'
    assert b"\\u" not in canonicalize({"clé": "valeur \u2028 \u00a0"})


@pytest.mark.parametrize(
    ("char", "escaped"),
    [
        ("\b", b"\\b"),
        ("\t", b"\\t"),
        ("\n", b"\\n"),
        ("\f", b"\\f"),
        ("\r", b"\\r"),
        ('"', b'\\"'),
        ("\\", b"\\\\"),
        ("\x00", b"\\u0000"),
        ("\x01", b"\\u0001"),
        ("\x0b", b"\\u000b"),
        ("\x0f", b"\\u000f"),
        ("\x1a", b"\\u001a"),
        ("\x1f", b"\\u001f"),
        ("/", b"/"),  # not escaped
        ("\x7f", b"\x7f"),  # DEL is not a control character for JSON
        ("\u2028", "\u2028".encode()),
    ],
)
def test_string_escapes(char, escaped):
    assert canonicalize(char) == b'"' + escaped + b'"'
    assert canonicalize({char: char}) == b'{"' + escaped + b'":"' + escaped + b'"}'


def test_every_control_character_is_escaped_in_lower_case():
    short = {"\b": "b", "\t": "t", "\n": "n", "\f": "f", "\r": "r"}
    for code in range(0x20):
        ch = chr(code)
        want = "\\" + short[ch] if ch in short else f"\\u{code:04x}"
        assert canonicalize(ch) == f'"{want}"'.encode("ascii"), hex(code)


@pytest.mark.parametrize(
    "bad",
    [chr(0xD800), chr(0xDFFF), "a" + chr(0xD83D), chr(0xDE00) + "b", chr(0xD83D) + chr(0xDE00)],
    ids=["high", "low", "trailing-high", "leading-low", "two-lone-halves"],
)
def test_lone_surrogates_are_refused(bad):
    for wrapped in (bad, [bad], {"k": bad}, {bad: 1}, {"a": 1e-7, "k": bad}):
        with pytest.raises(CanonicalizationError):
            canonicalize(wrapped)


# --------------------------------------------------------------------------- objects


def test_keys_sorted_by_utf16_code_units_not_code_points():
    # U+1F600 is D83D DE00 in UTF-16, so it sorts BEFORE U+FB33; by code point it
    # would come after.
    value = {"\ufb33": "dalet", "\U0001f600": "emoji"}
    expected = '{"\U0001f600":"emoji","\ufb33":"dalet"}'.encode()
    assert canonicalize(value) == expected
    assert canonicalize(dict(reversed(list(value.items())))) == expected


def test_keys_sorted_around_the_surrogate_range():
    value = {"\uffff": 1, "\U00010000": 2, "\ue000": 3, "\ud7ff": 4, "z": 5}
    # UTF-16 order: z (007A), D7FF, U+10000 (D800 DC00), E000, FFFF
    assert canonicalize(value) == '{"z":5,"\ud7ff":4,"\U00010000":2,"\ue000":3,"\uffff":1}'.encode()


def test_keys_sorted_in_nested_objects_and_by_prefix():
    value = {"b": {"y": 1, "x": [{"d": 1, "c": 2}]}, "a": 0, "ab": 1, "": 2, "B": 3}
    assert canonicalize(value) == b'{"":2,"B":3,"a":0,"ab":1,"b":{"x":[{"c":2,"d":1}],"y":1}}'


def test_rfc8785_sorting_example():
    # RFC 8785 section 3.2.3
    value = {
        "\u20ac": "Euro Sign",
        "\r": "Carriage Return",
        "\ufb33": "Hebrew Letter Dalet With Dagesh",
        "1": "One",
        "\U0001f600": "Emoji: Grinning Face",
        "\u0080": "Control",
        "\u00f6": "Latin Small Letter O With Diaeresis",
    }
    assert canonicalize(value) == (
        b'{"\\r":"Carriage Return","1":"One","\xc2\x80":"Control",'
        b'"\xc3\xb6":"Latin Small Letter O With Diaeresis","\xe2\x82\xac":"Euro Sign",'
        b'"\xf0\x9f\x98\x80":"Emoji: Grinning Face",'
        b'"\xef\xac\xb3":"Hebrew Letter Dalet With Dagesh"}'
    )


def test_rfc8785_sample_canonicalization():
    # RFC 8785 section 3.2.4, input as JSON text
    text = r"""{
      "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
      "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
      "literals": [null, true, false]
    }"""
    expected = (
        b'{"literals":[null,true,false],'
        b'"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        b'"string":"\xe2\x82\xac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    )
    assert canonicalize(json.loads(text)) == expected


def test_whitespace_and_empty_containers():
    assert canonicalize({}) == b"{}"
    assert canonicalize([]) == b"[]"
    assert canonicalize({"a": [], "b": {}}) == b'{"a":[],"b":{}}'
    assert canonicalize("") == b'""'


@pytest.mark.parametrize("key", [1, None, True, 1.5, ("a",)])
def test_non_string_keys_are_refused(key):
    with pytest.raises(CanonicalizationError):
        canonicalize({key: 1})
    with pytest.raises(CanonicalizationError):
        canonicalize({"ok": {key: 1}})


@pytest.mark.parametrize("value", [{1, 2}, b"bytes", object(), 1j])
def test_values_that_are_not_json_are_refused(value):
    with pytest.raises(CanonicalizationError):
        canonicalize(value)
    with pytest.raises(CanonicalizationError):
        canonicalize({"a": [value]})


def test_dict_subclasses_and_insertion_order_do_not_matter():
    plain = {"b": 1, "a": 2}
    ordered = OrderedDict([("a", 2), ("b", 1)])
    assert canonicalize(ordered) == canonicalize(plain) == b'{"a":2,"b":1}'


def test_returns_bytes():
    assert type(canonicalize({"a": 1})) is bytes


# --------------------------------------------------------------------------- digests

DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def test_digest_format():
    for value in ({"a": 1}, [], "x", 0, None, {"\U0001f600": 1e-7}):
        assert DIGEST.fullmatch(digest(value)), value


def test_known_digest_of_a_small_object():
    expected = "sha256:" + hashlib.sha256(b'{"a":1}').hexdigest()
    assert digest({"a": 1}) == expected
    assert digest({"a": 1.0}) == expected
    assert (
        expected == "sha256:015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862"
    )


def test_digest_is_sha256_of_the_canonical_bytes():
    value = {"z": [1, 2.5, "é"], "a": {"\ufb33": None, "\U0001f600": True}}
    assert digest(value) == "sha256:" + hashlib.sha256(canonicalize(value)).hexdigest()
    assert digest_bytes(b"") == (
        "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    )


def test_example_hashes_are_reproduced(example):
    # the hashes in examples/ were written by another implementation
    inv = example("invocations/refund-spend.json")
    assert digest(inv["arguments"]) == inv["argumentsHash"]
    rec = example("receipts/refund-succeeded.json")
    body = {k: v for k, v in rec.items() if k != "receiptHash"}
    assert digest(body) == rec["receiptHash"]


def test_top_level_exports_are_the_same_functions():
    assert oarlock.canonicalize is canonicalize
    assert oarlock.digest is digest



def test_integral_floats_below_2_53_take_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """An amount such as 5.0 is written as its integer by ``json``, not by ``rfc8785``
    (four times slower); larger integral floats, where JCS's digits are not the integer's,
    still go to ``rfc8785``."""
    from oarlock.formats import _jcs

    real = _jcs._general
    general: list[object] = []
    monkeypatch.setattr(_jcs, "_general", lambda v: general.append(v) or real(v))
    value = {"amount": 5.0, "n": [-0.0, 2.5, 9007199254740991.0, {"m": -12.0}], "k": 3}
    assert canonicalize(value) == (
        b'{"amount":5,"k":3,"n":[0,2.5,9007199254740991,{"m":-12}]}'
    )
    assert general == []
    assert canonicalize({"big": 2.0**60}) == b'{"big":1152921504606847000}'
    assert len(general) == 1


def test_the_fast_path_reuses_one_c_encoder(monkeypatch: pytest.MonkeyPatch) -> None:
    """The common value is written by one C encoder made at import, not by a
    ``json.JSONEncoder`` set up anew at each call; where the C encoder is missing, the
    class writes the same bytes."""
    from oarlock.formats import _jcs

    value = {"b": [1, 2.5, None, True], "a": {"é": "x\u2028"}, "c": 5.0}
    expected = b'{"a":{"\xc3\xa9":"x\xe2\x80\xa8"},"b":[1,2.5,null,true],"c":5}'

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a JSONEncoder was set up")

    with monkeypatch.context() as m:
        m.setattr(json.JSONEncoder, "iterencode", refuse)
        assert _jcs.canonicalize(value) == expected
    monkeypatch.setattr(json.encoder, "c_make_encoder", None)
    encode = _jcs._encoder()
    assert encode(_jcs._as_ints(value)).encode() == expected

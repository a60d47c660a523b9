"""``validate``: schema, then semantic rules, for any run, invocation or receipt document."""

from __future__ import annotations

import json
import re
import sys
from typing import Any, Literal

from oarlock._input import MAX_DEPTH, MAX_INT_DIGITS
from oarlock.errors import DocumentInvalid, FormatError, UsageError
from oarlock.formats._exported import without_note
from oarlock.formats._report import Kind, Problem, Report, pointer
from oarlock.formats._rules import rule_problems
from oarlock.formats._runcheck import passes_run_schema
from oarlock.formats._schemas import capped_schema_problems

__all__ = ["KINDS", "detect_kind", "ensure_valid", "loads_strict", "validate"]

KINDS: tuple[Kind, ...] = ("run", "invocation", "receipt")
_REFUSED = "not JSON oarlock accepts: "


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) == len(pairs):
        return out
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            shown = key if len(key) <= 60 else key[:60] + "…"
            raise FormatError(f"duplicate key {shown!r} in one object", code="json_duplicate_key")
        seen.add(key)
    return out  # pragma: no cover - a shorter dict has a repeated key


def _no_constant(name: str) -> Any:
    raise FormatError(f"{name} is not JSON", code="json_invalid")


def _too_long(digits: int) -> FormatError:
    return FormatError(
        f"{_REFUSED}an integer of {digits} digits is too large (more than {MAX_INT_DIGITS}): "
        "it has no canonical form",
        code="json_number_too_large",
    )


def _integer(text: str) -> int:
    """``int`` for an interpreter whose own limit on integer digits is off or higher."""
    digits = len(text) - text.startswith("-")
    if digits > MAX_INT_DIGITS:
        raise _too_long(digits)
    return int(text)


_INT_LIMIT = re.compile(r"value has (\d+) digits")

# A \uD800-\uDFFF escape (a surrogate pair is fine; a lone surrogate is not text)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _bad_text(value: str, where: tuple[str | int, ...], *, key: bool = False) -> FormatError:
    """A lone surrogate in ``value``, the string (or, with ``key``, a key of the object)
    at ``where``. The message shows the surrogate as an escape, never raw."""
    found = _SURROGATE.search(value)
    cp = ord(found.group(0)) if found else 0xFFFD
    what = f"a key of the object at {pointer(where) or '/'}" if key else pointer(where) or "/"
    return FormatError(
        f"{_REFUSED}invalid text in {what}: a lone surrogate (\\u{cp:04x}) is not a character",
        code="json_invalid_text",
    )


def _not_finite(where: tuple[str | int, ...]) -> FormatError:
    return FormatError(
        f"{_REFUSED}the number at {pointer(where) or '/'} is too large: it has no finite "
        "value and no canonical form",
        code="json_number_too_large",
    )


def _check_tree(value: Any, surrogates: bool) -> None:
    """Refuse nesting deeper than MAX_DEPTH, numbers beyond the range of a double (``1e400``
    parses as infinity) and, when ``surrogates``, lone surrogates in keys and strings.
    Iterative: a deep document cannot exhaust the stack here."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(value, ())]
    while stack:
        item, where = stack.pop()
        if len(where) >= MAX_DEPTH:
            shown = pointer(where[:8])
            raise FormatError(
                f"{_REFUSED}nested deeper than {MAX_DEPTH} levels (at {shown}/…)",
                code="json_too_deep",
            )
        kind = type(item)
        if kind is str:
            if surrogates and _SURROGATE.search(item):
                raise _bad_text(item, where)
        elif kind is float:
            if item - item != 0.0:  # infinity (NaN is refused by the parser)
                raise _not_finite(where)
        elif kind is dict:
            for k, v in item.items():
                if surrogates and _SURROGATE.search(k):
                    raise _bad_text(k, where, key=True)
                t = type(v)
                if t is dict or t is list or t is float or (surrogates and t is str):
                    stack.append((v, (*where, k)))
        elif kind is list:
            for i, v in enumerate(item):
                t = type(v)
                if t is dict or t is list or t is float or (surrogates and t is str):
                    stack.append((v, (*where, i)))


def loads_strict(text: str | bytes) -> Any:
    """Parse JSON as RFC 8259 says, refusing what ``json.loads`` lets through: bytes that
    are not UTF-8, duplicate keys in one object (their meaning, and so any digest, is
    ambiguous), NaN/Infinity, lone surrogates (``"\\udfff"``: not text), numbers with no
    finite value (``1e400``), integers of more than 4300 digits, and nesting deeper than
    :data:`~oarlock._input.MAX_DEPTH` levels. Every refusal is a :class:`FormatError`."""
    if isinstance(text, bytes | bytearray):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FormatError(
                f"not JSON: the bytes are not UTF-8 (byte 0x{text[exc.start]:02x} at offset "
                f"{exc.start})",
                code="json_invalid",
            ) from None
        text = text.removeprefix("\ufeff")
    # Python refuses integers of more than 4300 digits by itself, unless its limit is off
    limit = sys.get_int_max_str_digits()
    hooks: dict[str, Any] = {} if 0 < limit <= MAX_INT_DIGITS else {"parse_int": _integer}
    try:
        value = json.loads(
            text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant, **hooks
        )
    except json.JSONDecodeError as exc:
        raise FormatError(
            f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", code="json_invalid"
        ) from None
    except ValueError as exc:  # the interpreter's limit on the digits of an integer
        found = _INT_LIMIT.search(str(exc))
        raise _too_long(int(found.group(1)) if found else MAX_INT_DIGITS + 1) from None
    except RecursionError:
        raise FormatError(
            f"{_REFUSED}nested deeper than {MAX_DEPTH} levels", code="json_too_deep"
        ) from None
    surrogates = bool(_SURROGATE_ESCAPE.search(text) or _SURROGATE.search(text))
    _check_tree(value, surrogates)
    return value


def detect_kind(document: Any) -> Kind | None:
    """A run has a ``format`` starting with ``oar/``; a receipt has ``receiptHash``; an
    invocation has ``idempotencyKey``."""
    if not isinstance(document, dict):
        return None
    fmt = document.get("format")
    if isinstance(fmt, str) and fmt.startswith("oar/"):
        return "run"
    if "receiptHash" in document:
        return "receipt"
    if "idempotencyKey" in document:
        return "invocation"
    return None


MAX_LISTED_ERRORS = 100
"""A report lists at most this many errors, and says how many more there are."""
ERROR_COUNT_CEILING = 10_000
"""Schema errors are counted up to this many; beyond, a report says "at least"."""


def validate(
    document: Any,
    kind: Kind | Literal["auto"] = "auto",
    *,
    schema_only: bool = False,
) -> Report:
    """Check ``document`` (a parsed JSON value, or JSON text) against its schema and then
    its semantic rules, and return a :class:`Report` of the errors found.

    The semantic rules run only on a document that passed its schema; ``schema_only``
    skips them. A report lists at most :data:`MAX_LISTED_ERRORS` errors, in document
    order, and counts the others (``more_errors``), up to :data:`ERROR_COUNT_CEILING`.
    JSON text is parsed with :func:`loads_strict`.
    """
    if kind != "auto" and kind not in KINDS:
        raise UsageError(f"unknown kind {kind!r}: use one of auto, {', '.join(KINDS)}")
    parsed = isinstance(document, str | bytes | bytearray)
    if parsed:
        try:
            document = loads_strict(document)
        except FormatError as exc:
            return Report(None if kind == "auto" else kind, [Problem("", "json", str(exc))])
    if not isinstance(document, dict):
        found = type(document).__name__ if document is not None else "null"
        return Report(
            None if kind == "auto" else kind,
            [Problem("", "json", f"a document must be a JSON object, not {found}")],
        )
    chosen = detect_kind(document) if kind == "auto" else kind
    if chosen is None:
        return Report(
            None,
            [
                Problem(
                    "",
                    "kind",
                    "cannot tell the kind of document: a run has "
                    "'format' starting with 'oar/', a receipt has "
                    "'receiptHash', an invocation has 'idempotencyKey'",
                )
            ],
        )
    fmt = document.get("format") if chosen == "run" else None
    report = Report(chosen, [], fmt if isinstance(fmt, str) else None, schema_only)
    # a run parsed here holds JSON values only: the compiled run schema accepts exactly
    # what jsonschema accepts, in a fraction of the time (a refusal takes the full check)
    if not (parsed and chosen == "run" and passes_run_schema(document)):
        # an export's note of what it redacted is no member of the record (its rules read it)
        record = document if chosen == "run" else without_note(document)
        errors, complete = capped_schema_problems(record, chosen, ERROR_COUNT_CEILING)
        report.errors = errors
        report.more_errors_exact = complete
    if report.valid and not schema_only:
        report.errors = rule_problems(document, chosen)
    report.more_errors = max(len(report.errors) - MAX_LISTED_ERRORS, 0)
    del report.errors[MAX_LISTED_ERRORS:]
    if not report.more_errors_exact:
        report.more_errors = max(report.more_errors, 1)
    return report


def ensure_valid(document: Any, kind: Kind | Literal["auto"] = "auto") -> None:
    """Raise :class:`DocumentInvalid` unless ``document`` is valid."""
    report = validate(document, kind)
    if not report.valid:
        raise DocumentInvalid(report)

"""``validate``: schema, then semantic rules, for any run, invocation or receipt document."""

from __future__ import annotations

import json
from typing import Any, Literal

from oarlock.errors import DocumentInvalid, FormatError, UsageError
from oarlock.formats._report import Kind, Problem, Report
from oarlock.formats._rules import rule_problems
from oarlock.formats._schemas import schema_problems

__all__ = ["KINDS", "detect_kind", "ensure_valid", "loads_strict", "validate"]

KINDS: tuple[Kind, ...] = ("run", "invocation", "receipt")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise FormatError(f"duplicate key {key!r} in one object", code="json_duplicate_key")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise FormatError(f"{name} is not JSON", code="json_invalid")


def loads_strict(text: str | bytes) -> Any:
    """Parse JSON as RFC 8259 says, refusing what ``json.loads`` lets through: duplicate
    keys in one object (their meaning, and so any digest, is ambiguous) and NaN/Infinity."""
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise FormatError(
            f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", code="json_invalid"
        ) from exc
    except UnicodeDecodeError as exc:
        raise FormatError(
            f"not JSON: the bytes are not UTF-8 ({exc.reason})", code="json_invalid"
        ) from exc
    except RecursionError as exc:
        raise FormatError(
            "not JSON oarlock accepts: nested too deeply", code="json_invalid"
        ) from exc


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


def validate(
    document: Any,
    kind: Kind | Literal["auto"] = "auto",
    *,
    schema_only: bool = False,
) -> Report:
    """Check ``document`` (a parsed JSON value, or JSON text) against its schema and then
    its semantic rules, and return a :class:`Report` of every error found.

    The semantic rules run only on a document that passed its schema; ``schema_only``
    skips them.
    """
    if kind != "auto" and kind not in KINDS:
        raise UsageError(f"unknown kind {kind!r}: use one of auto, {', '.join(KINDS)}")
    if isinstance(document, str | bytes):
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
    report = Report(
        chosen,
        schema_problems(document, chosen),
        fmt if isinstance(fmt, str) else None,
        schema_only,
    )
    if report.valid and not schema_only:
        report.errors.extend(rule_problems(document, chosen))
    return report


def ensure_valid(document: Any, kind: Kind | Literal["auto"] = "auto") -> None:
    """Raise :class:`DocumentInvalid` unless ``document`` is valid."""
    report = validate(document, kind)
    if not report.valid:
        raise DocumentInvalid(report)

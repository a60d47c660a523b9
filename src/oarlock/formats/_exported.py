"""Records as machine output shows them: secrets redacted, and said so.

An invocation or a receipt printed as JSON (``oarlock receipts show --json``, the HTTP API)
has every secret redacted (:func:`oarlock._secrets.redact_json`). Its hashes were taken
over the record as stored, so a redacted copy no longer matches them; the copy then lists
the JSON Pointers of the values redaction changed in a member of its own,
:data:`REDACTED_MEMBER` (``"redacted": ["/arguments/url"]``). ``oarlock validate`` reads
that member: a hash that cannot be checked because of a listed redaction is told as such,
never as a record that was tampered with; a listed pointer that holds no redaction marker,
or a mismatch the redactions do not explain, is still told as a mismatch."""

from __future__ import annotations

from typing import Any

from oarlock._secrets import REDACTED, redact_json

__all__ = ["REDACTED_MEMBER", "exported", "redaction_note", "value_at", "without_note"]

REDACTED_MEMBER = "redacted"


def exported(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with its secrets redacted and, when any was, the pointers of the values
    redacted under :data:`REDACTED_MEMBER`."""
    copy, pointers = redact_json(record)
    if not pointers:
        return record
    return {**copy, REDACTED_MEMBER: pointers}


def without_note(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` without :data:`REDACTED_MEMBER` (what its schema and hashes cover)."""
    if REDACTED_MEMBER not in doc:
        return doc
    return {k: v for k, v in doc.items() if k != REDACTED_MEMBER}


def value_at(doc: Any, ptr: str) -> tuple[bool, Any]:
    """(whether ``doc`` has a value at the JSON Pointer ``ptr``, that value)."""
    here = doc
    for raw in ptr.split("/")[1:]:
        step = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(here, dict) and step in here:
            here = here[step]
        elif isinstance(here, list) and step.isascii() and step.isdigit() and int(step) < len(
            here
        ):
            here = here[int(step)]
        else:
            return False, None
    return True, here


def _marked(value: Any) -> bool:
    """Whether ``value`` holds the redaction marker somewhere."""
    if isinstance(value, str):
        return REDACTED in value
    if isinstance(value, dict):
        return any(_marked(v) for v in value.values())
    if isinstance(value, list):
        return any(_marked(v) for v in value)
    return False


def redaction_note(doc: dict[str, Any], covered: str) -> tuple[str | None, list[str]]:
    """What ``doc``'s :data:`REDACTED_MEMBER` says about the part at ``covered`` (``""``
    for the whole record, ``"/arguments"`` for the arguments): (a problem with the member
    itself, or None; the listed pointers inside ``covered``). Without the member: (None,
    [])."""
    if REDACTED_MEMBER not in doc:
        return None, []
    listed = doc[REDACTED_MEMBER]
    if not (
        isinstance(listed, list)
        and listed
        and all(isinstance(p, str) and (p == "" or p.startswith("/")) for p in listed)
    ):
        return (
            f"{REDACTED_MEMBER} must be a non-empty list of JSON Pointers (the values an "
            "export redacted)",
            [],
        )
    inside = [p for p in listed if p == covered or p.startswith(covered + "/")]
    for ptr in inside:
        found, value = value_at(doc, ptr)
        if not (found and _marked(value)):
            return f"{REDACTED_MEMBER} names {ptr}, which holds no {REDACTED}: not a redaction", []
    return None, inside

"""Validation on the hot path: the shipped schemas compiled to Python by fastjsonschema.

The governed executor validates every invocation and receipt before it stores it. The
``jsonschema`` validator takes milliseconds per record; the compiled one, tens of
microseconds. The compiled check is used only to accept: a record it refuses goes through
:func:`~oarlock.formats.ensure_valid`, whose verdict (and report) decides. Property tests
hold it to never accept what ``jsonschema`` refuses.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from oarlock.formats._report import Kind
from oarlock.formats._rules import rule_problems
from oarlock.formats._schemas import SCHEMA_FILES, is_datetime_format, is_uuid_format, load_schema
from oarlock.formats._validate import ensure_valid

__all__ = ["conforms", "ensure_valid_fast"]

_DEFS = {"invocation": "ToolInvocation", "receipt": "ToolReceipt"}


@cache
def _compiled(kind: Kind) -> Callable[[Any], Any]:
    import fastjsonschema

    by_id = {load_schema(n)["$id"]: load_schema(n) for n in SCHEMA_FILES}

    def fetch(uri: str) -> Any:
        return by_id[uri.partition("#")[0]]

    if kind == "run":
        schema = load_schema("run.schema.json")
    else:
        base = load_schema("tool-invocation.schema.json")
        schema = {"$id": base["$id"], "$defs": base["$defs"], "$ref": f"#/$defs/{_DEFS[kind]}"}
    validate: Callable[[Any], Any] = fastjsonschema.compile(
        schema,
        handlers={"https": fetch},
        formats={"uuid": is_uuid_format, "date-time": is_datetime_format},
        use_default=False,
    )
    return validate


def conforms(document: Any, kind: Kind) -> bool:
    """True only if ``document`` passes the schema of ``kind`` (compiled check)."""
    import fastjsonschema

    try:
        _compiled(kind)(document)
    except fastjsonschema.JsonSchemaException:
        return False
    return True


def ensure_valid_fast(document: dict[str, Any], kind: Kind) -> None:
    """:func:`~oarlock.formats.ensure_valid`, fast for a valid record."""
    if conforms(document, kind) and not rule_problems(document, kind):
        return
    ensure_valid(document, kind)

"""The shipped schemas compiled to Python by fastjsonschema.

The ``jsonschema`` validator takes milliseconds per document; the compiled one, tens of
microseconds. The run schema is compiled ahead of time into ``_run_schema_check.py`` (see
``_gen_run_check``) with :func:`compile_options`, so that reading a stored run checks it
without importing either. A compiled check is used only to accept: what it refuses goes
through :func:`~oarlock.formats.ensure_valid`, whose verdict (and report) decides.

fastjsonschema is a development dependency (the ``test`` extra): it is needed to generate
the shipped check and by :func:`conforms`, which compiles at run time for the property
tests that hold every compiled check to never accept what ``jsonschema`` refuses.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from functools import cache
from typing import Any

from oarlock.formats._report import Kind
from oarlock.formats._schemas import SCHEMA_FILES, is_datetime_format, is_uuid_format, load_schema

__all__ = ["compile_options", "conforms"]

_DEFS = {"invocation": "ToolInvocation", "receipt": "ToolReceipt"}


def compile_options() -> dict[str, Any]:
    """How the shipped schemas are compiled: references resolved offline to the shipped
    files, oarlock's ``uuid`` and ``date-time`` formats, no defaults filled in. Shared with
    the generated run check (``_gen_run_check``), so that both compile alike. The compiler
    rewrites the schemas it is given (relative references made absolute): it gets copies."""
    by_id = {load_schema(n)["$id"]: copy.deepcopy(load_schema(n)) for n in SCHEMA_FILES}

    def fetch(uri: str) -> Any:
        return by_id[uri.partition("#")[0]]

    return {
        "handlers": {"https": fetch},
        "formats": {"uuid": is_uuid_format, "date-time": is_datetime_format},
        "use_default": False,
    }


@cache
def _compiled(kind: Kind) -> Callable[[Any], Any]:
    import fastjsonschema

    if kind == "run":
        schema = copy.deepcopy(load_schema("run.schema.json"))
    else:
        base = load_schema("tool-invocation.schema.json")
        schema = {"$id": base["$id"], "$defs": base["$defs"], "$ref": f"#/$defs/{_DEFS[kind]}"}
    validate: Callable[[Any], Any] = fastjsonschema.compile(schema, **compile_options())
    return validate


def conforms(document: Any, kind: Kind) -> bool:
    """True only if ``document`` passes the schema of ``kind`` (compiled check)."""
    import fastjsonschema

    try:
        _compiled(kind)(document)
    except fastjsonschema.JsonSchemaException:
        return False
    return True

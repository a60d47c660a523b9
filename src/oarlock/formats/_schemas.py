"""The JSON Schemas oarlock ships, resolved offline, with asserted formats.

The published schemas (``run.schema.json``, ``tool-invocation.schema.json``) are copied
unchanged; ``execution-scope`` and ``policy-decision`` are oarlock's, published under the
``$id`` the invocation schema's relative references resolve to.
"""

from __future__ import annotations

import ast
import itertools
import json
import re
from collections.abc import Iterator
from functools import cache
from importlib import resources
from typing import Any

from oarlock.formats._report import Kind, Problem, pointer
from oarlock.formats._time import is_rfc3339

__all__ = [
    "SCHEMA_FILES",
    "capped_schema_problems",
    "is_datetime_format",
    "is_uuid_format",
    "load_schema",
    "schema_problems",
]

SCHEMA_FILES = (
    "run.schema.json",
    "tool-invocation.schema.json",
    "execution-scope.schema.json",
    "policy-decision.schema.json",
)
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_KNOWN_FORMATS = ("oar/0.1", "oar/0.2")


@cache
def load_schema(name: str) -> dict[str, Any]:
    """One shipped schema, parsed."""
    text = resources.files("oarlock.formats").joinpath("schemas", name).read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def _is_uuid(value: object) -> bool:
    return not isinstance(value, str) or _UUID.fullmatch(value) is not None


def _is_datetime(value: object) -> bool:
    return not isinstance(value, str) or is_rfc3339(value)


def is_uuid_format(value: str) -> bool:
    """The ``uuid`` format as oarlock checks it (hyphenated, any case)."""
    return _UUID.fullmatch(value) is not None


def is_datetime_format(value: str) -> bool:
    """The ``date-time`` format as oarlock checks it (RFC 3339, strictly)."""
    return is_rfc3339(value)


@cache
def _validator(kind: Kind) -> Any:
    from jsonschema import Draft202012Validator, FormatChecker
    from referencing import Registry, Resource

    resources_ = [Resource.from_contents(load_schema(n)) for n in SCHEMA_FILES]
    registry: Registry[Any] = Registry().with_resources((r.id() or "", r) for r in resources_)
    checker = FormatChecker(formats=())
    checker.checks("uuid")(_is_uuid)
    checker.checks("date-time")(_is_datetime)
    if kind == "run":
        schema: dict[str, Any] = load_schema("run.schema.json")
    else:
        base = load_schema("tool-invocation.schema.json")["$id"]
        name = "ToolInvocation" if kind == "invocation" else "ToolReceipt"
        schema = {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$ref": f"{base}#/$defs/{name}",
        }
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, registry=registry, format_checker=checker)


def schema_problems(document: dict[str, Any], kind: Kind) -> list[Problem]:
    """Every JSON Schema violation of ``document`` as ``kind``, in document order."""
    return capped_schema_problems(document, kind, None)[0]


def capped_schema_problems(
    document: dict[str, Any], kind: Kind, ceiling: int | None
) -> tuple[list[Problem], bool]:
    """The JSON Schema violations of ``document`` as ``kind``, in document order, and
    whether that is all of them: the validator stops after ``ceiling`` raw errors (a
    document with millions of bad values costs no more than that)."""
    found = _validator(kind).iter_errors(document)
    raw = list(found if ceiling is None else itertools.islice(found, ceiling))
    complete = ceiling is None or len(raw) < ceiling or next(found, None) is None
    out: list[Problem] = []
    seen: set[Problem] = set()
    for err in sorted(raw, key=_order):
        for path, message in _explain(err, document):
            problem = Problem(pointer(path), "schema", message)
            if problem not in seen:
                seen.add(problem)
                out.append(problem)
    return out, complete


def _order(err: Any) -> tuple[str, ...]:
    return tuple(str(p) for p in err.absolute_path)


def _explain(err: Any, document: dict[str, Any]) -> Iterator[tuple[list[Any], str]]:
    """What a person should read. For a ``oneOf`` over tagged shapes (messages by ``role``,
    parts by ``type``): the errors of the shape the tag names, or else that the tag is
    none of the allowed values; never a bare "matches no branch"."""
    path = list(err.absolute_path)
    if err.validator != "oneOf":
        yield path, _sentence(err, document)
        return
    if not err.context:
        yield path, "matches more than one of the allowed shapes"
        return
    by_branch: dict[int, list[Any]] = {}
    for sub in err.context:
        by_branch.setdefault(sub.relative_schema_path[0], []).append(sub)
    tag_errors = [
        [s for s in subs if s.validator == "const" and len(s.relative_path) == 1]
        for subs in by_branch.values()
    ]
    named = [subs for subs, tags in zip(by_branch.values(), tag_errors, strict=True) if not tags]
    if len(named) == 1:
        for sub in named[0]:
            yield from _explain(sub, document)
        return
    # the tag itself is absent: every shape misses it, and no ``const`` could fail
    missing = [
        {s.message for s in subs if s.validator == "required"} for subs in by_branch.values()
    ]
    if not any(tag_errors) and (common := set.intersection(*missing)):
        for message in sorted(common):
            yield path, _sentence(next(s for s in err.context if s.message == message), document)
        return
    tags = {t.relative_path[0] for ts in tag_errors for t in ts}
    if len(tags) == 1 and all(tag_errors):
        tag = tags.pop()
        allowed = ", ".join(_name(ts[0].validator_value) for ts in tag_errors)
        got = err.instance.get(tag) if isinstance(err.instance, dict) else None
        yield (
            [*path, tag],
            (
                f"missing {_name(tag)}"
                if got is None
                else f"must be one of {allowed}; got {_name(got)}"
            ),
        )
        return
    yield path, "matches none of the allowed shapes"


def _name(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


_TYPES = {
    dict: "object",
    list: "array",
    str: "string",
    bool: "boolean",
    type(None): "null",
    int: "integer",
    float: "number",
}


def _sentence(err: Any, document: dict[str, Any]) -> str:
    v, inst, arg = err.validator, err.instance, err.validator_value
    path = list(err.absolute_path)
    if v == "required":
        name = err.message.removesuffix(" is a required property")
        return f"missing required field {_name(ast.literal_eval(name))}"
    if v == "additionalProperties":
        extra = [k for k in inst if k not in err.schema.get("properties", {})]
        return f"unexpected field {', '.join(map(_name, extra))}: this object allows no others"
    if v == "type":
        return f"must be of type {arg}, not {_TYPES.get(type(inst), type(inst).__name__)}"
    if v == "enum" and path == ["format"]:
        return f"unsupported format {_name(inst)}: oarlock reads {' and '.join(_KNOWN_FORMATS)}"
    if v == "enum" and inst == "responded" and document.get("format") == "oar/0.1":
        return (
            "the 'responded' decision exists only in oar/0.2; this document declares "
            "oar/0.1 (upgrade it with `oarlock upgrade`)"
        )
    if v == "enum":
        return f"must be one of {', '.join(map(_name, arg))}; got {_name(inst)}"
    if v == "const":
        return f"must be {_name(arg)}; got {_name(inst)}"
    if v == "format":
        return f"{_name(inst)} is not a valid {arg}" + (
            " (RFC 3339, e.g. 2026-01-02T03:04:05Z)" if arg == "date-time" else ""
        )
    if v == "minLength":
        return "must not be empty" if arg == 1 else f"must be at least {arg} characters long"
    if v == "minimum":
        return f"must be at least {arg}; got {_name(inst)}"
    if v == "pattern":
        return f"{_name(inst)} does not match the pattern {arg}"
    return str(err.message)

"""Approvers approve exactly what will run.

What a person is shown of a call's arguments is rendered safely: secrets redacted, control,
bidirectional and invisible characters as visible escapes. What a decision approves is
never read back from that rendering:

* :func:`judge_edit` is the one place that decides whether a decision edits the call, by
  comparing values (JSON values: key order aside, ``1`` and ``1.0`` one number, ``true``
  not ``1``), never text. A redacted value given back as it was shown keeps its real value
  (the server holds it); a value that still holds the redaction marker but is not the one
  shown is refused (``invalid_edit``): a redacted value is kept whole or replaced whole.
* :func:`form_fields` writes each argument into the approval form in a form the browser
  cannot mangle: a plain one-line string as itself, any other string as a JSON string
  (``"Hello,\\n\\tthanks"``: newline, tab, ESC and bidi overrides as escapes), numbers as
  their JSON, anything else as JSON; :func:`read_form` reads each back by its kind, so an
  untouched form gives back the very values shown, and :func:`judge_edit` finds no edit.
* :func:`arguments_hash` is the hash an approval of the call carries: over what the tool
  receives (its arguments as the tool validates them, as JSON), the invocation's
  ``argumentsHash``."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from oarlock._render import dumps, line
from oarlock._secrets import REDACTED, redact, redact_json
from oarlock.errors import FormatError, OarlockError, UsageError
from oarlock.formats._exported import value_at

if TYPE_CHECKING:
    from oarlock.tools._tool import Tool

__all__ = [
    "Field",
    "arguments_hash",
    "form_fields",
    "form_original",
    "judge_edit",
    "read_form",
    "same",
]

_SHORT = 120  # characters of a plain string edited in a one-line input


def same(a: Any, b: Any) -> bool:
    """Whether two JSON values are the same value (as their canonical forms would be)."""
    if type(a) is bool or type(b) is bool:
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def arguments_hash(tool: Tool | None, arguments: dict[str, Any]) -> str | None:
    """The ``argumentsHash`` of the call's invocation and of its approval: the digest of
    the arguments as the tool receives them (None when they have none: invalid or not
    canonical; the run says so when it resumes)."""
    from oarlock.formats._jcs import digest
    from oarlock.governance._executor import json_arguments

    try:
        received = arguments if tool is None else tool.validate_arguments(arguments)
        return digest(json_arguments(received))
    except (OarlockError, TypeError, ValueError):
        return None


def _put(doc: Any, ptr: str, value: Any) -> Any:
    """``doc`` with the value at the JSON Pointer ``ptr`` (which exists) replaced."""
    if ptr == "":
        return value
    *path, last = [s.replace("~1", "/").replace("~0", "~") for s in ptr.split("/")[1:]]
    here = doc
    for step in path:
        here = here[int(step)] if isinstance(here, list) else here[step]
    if isinstance(here, list):
        here[int(last)] = value
    else:
        here[last] = value
    return doc


def _marker_strings(value: Any, at: str = "") -> list[str]:
    """The pointers of the strings in ``value`` that hold the redaction marker."""
    if isinstance(value, str):
        return [at] if REDACTED in value else []
    found: list[str] = []
    if isinstance(value, dict):
        for k, v in value.items():
            found += _marker_strings(v, f"{at}/{k.replace('~', '~0').replace('/', '~1')}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found += _marker_strings(v, f"{at}/{i}")
    return found


def judge_edit(original: dict[str, Any], edited: dict[str, Any] | None) -> dict[str, Any] | None:
    """What approving with ``edited`` arguments approves: None for the call as asked
    (``edited`` is no edit), else the edited arguments, each redacted value given back as
    shown holding its real value again. See the module's documentation."""
    if edited is None:
        return None
    shown, redacted = redact_json(original)
    out = copy.deepcopy(edited)
    for ptr in redacted:
        given, value = value_at(out, ptr)
        if given and same(value, value_at(shown, ptr)[1]):
            out = _put(out, ptr, copy.deepcopy(value_at(original, ptr)[1]))
    for ptr in _marker_strings(out):
        found, was = value_at(original, ptr)
        if not (found and same(was, value_at(out, ptr)[1])):
            raise UsageError(
                f"edited argument {ptr or '/'}: {REDACTED} stands for a secret that is not "
                "shown; keep the value as it was shown (the real one is kept) or replace it "
                "whole",
                code="invalid_edit",
            )
    return None if same(out, original) else out


# -- the approval form -----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Field:
    """One argument in the approval form.

    ``kind``: ``boolean`` (a choice), ``number``, ``string`` (a plain one-line string, as
    itself), ``text`` (any other string, as a JSON string), ``json`` (anything else).
    ``text``: what the field holds, already through the renderer (secrets redacted, every
    control, bidi and invisible character escaped)."""

    name: str
    kind: str
    text: str
    present: bool
    required: bool
    description: str
    redacted: bool
    multiline: bool


def _plain(value: str) -> bool:
    """A string that reads back from a one-line input as it is: nothing the renderer would
    escape or redact (no newline, control, bidi or invisible character, no secret)."""
    return "\n" not in value and "\r" not in value and line(value) == value == redact(value)


def _kind(value: Any, present: bool, declared: Any) -> str:
    if not present:  # by the schema's type
        kinds = {"boolean": "boolean", "number": "number", "integer": "number", "string": "string"}
        return kinds.get(declared, "json") if isinstance(declared, str) else "json"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string" if _plain(value) else "text"
    return "json"


def form_fields(schema: dict[str, Any] | None, arguments: dict[str, Any]) -> list[Field]:
    """One field per property of the tool's JSON Schema and per argument it does not
    name, each holding the argument as shown (see the module's documentation)."""
    props = (schema or {}).get("properties") or {}
    required = set((schema or {}).get("required") or [])
    shown, redacted = redact_json(arguments)
    names = list(props) + [k for k in arguments if k not in props]
    out = []
    for name in names:
        found = props.get(name)
        spec: dict[str, Any] = found if isinstance(found, dict) else {}
        present = name in arguments
        value = shown.get(name) if isinstance(shown, dict) else None
        kind = _kind(arguments.get(name), present, spec.get("type"))
        if not present:
            text = ""
        elif kind == "boolean":
            text = "true" if value else "false"
        elif kind == "string":
            text = str(value)
        else:  # the renderer's JSON: lossless, every unsafe character an escape
            text = dumps(value, indent=2 if kind == "json" else None, redact=False)
        pointer = "/" + name.replace("~", "~0").replace("/", "~1")
        description = spec.get("description", "")
        out.append(
            Field(
                name=name,
                kind=kind,
                text=text,
                present=present,
                required=name in required,
                description=description if isinstance(description, str) else "",
                redacted=any(p == pointer or p.startswith(pointer + "/") for p in redacted),
                multiline=kind == "json" or (kind in ("text", "string") and len(text) > _SHORT),
            )
        )
    return out


def _refused(field: Field, what: str) -> UsageError:
    return UsageError(f"edited argument {field.name}: {what}", code="invalid_edit")


def _json(field: Field, raw: str) -> Any:
    from oarlock.formats._validate import loads_strict

    try:
        return loads_strict(raw)
    except FormatError as exc:
        raise _refused(field, f"not JSON ({exc})") from None


def read_form(fields: list[Field], form: Any, arguments: dict[str, Any]) -> dict[str, Any]:
    """The arguments the form holds, each field read by its kind (a field the form does
    not send keeps the call's argument); what cannot be read is refused (``invalid_edit``)
    naming the field. Whether that is an edit is :func:`judge_edit`'s to say."""
    out: dict[str, Any] = {}
    for f in fields:
        raw = form.get(f"arg.{f.name}")
        if not isinstance(raw, str):  # not sent (or a file): as asked
            if f.present:
                out[f.name] = arguments[f.name]
            continue
        if raw == "" and (f.kind != "string" or not f.present):
            continue  # left empty: not given
        if f.kind == "boolean":
            if raw not in ("true", "false"):
                raise _refused(f, "true or false")
            out[f.name] = raw == "true"
        elif f.kind == "number":
            value = _json(f, raw.strip())
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise _refused(f, "not a number")
            out[f.name] = value
        elif f.kind == "text":
            value = _json(f, raw.strip())
            if not isinstance(value, str):
                raise _refused(f, 'not a JSON string (in double quotes; a newline is "\\n")')
            out[f.name] = value
        elif f.kind == "json":
            out[f.name] = _json(f, raw)
        else:
            out[f.name] = raw
    return out


def form_original(arguments: dict[str, Any]) -> str:
    """The call's arguments as the form shows them (redacted), as the renderer's JSON: what
    the page's script compares the fields with to show the diff of an edit."""
    return dumps(redact_json(arguments)[0], indent=None, redact=False)

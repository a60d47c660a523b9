"""Exact JSON round trips of the typed models.

A document is read by its members' JSON names alone (``by_name=False``): a member spelled
like a field's Python name (``decided_by`` for ``decidedBy``) is an unknown member, as the
schema judges it: kept where the schema is open, refused where it is closed. Pydantic
counts a kept unknown member among the fields set when its name is a field's Python name,
which would write that field (absent from the document) on the dump: :func:`_unset_absent`
takes it out again. Finding such a member costs a walk over the parsed models' few open
objects with optional fields (microseconds); only a document that holds one is looked at
again.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from operator import is_
from typing import Any, TypeVar, get_args

from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError

from oarlock.errors import FormatError
from oarlock.formats._models import RunDocument
from oarlock.formats._parts import join_run_json

__all__ = [
    "adopt_run_parts",
    "dump",
    "dump_json",
    "dump_run",
    "dump_run_json",
    "dump_run_parts",
    "join_run_json",
    "parse",
    "parse_json",
    "parse_run",
]

M = TypeVar("M", bound=BaseModel)


def _refuse(model: type[BaseModel], exc: PydanticValidationError) -> FormatError:
    first = exc.errors()[0]
    where = "/" + "/".join(str(p) for p in first["loc"]) if first["loc"] else "/"
    return FormatError(
        f"not a valid {model.__name__} at {where}: {first['msg']}"
        + (f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""),
        code="model_invalid",
    )


def parse(model: type[M], data: dict[str, Any]) -> M:
    """Build ``model`` from parsed JSON; refuses a wrong shape with a FormatError."""
    try:
        obj = model.model_validate(data, by_alias=True, by_name=False)
    except PydanticValidationError as exc:
        raise _refuse(model, exc) from None
    if _named_like_a_field(obj):
        _unset_absent(obj, data)
    return obj


def parse_json(model: type[M], text: str | bytes) -> M:
    try:
        obj = model.model_validate_json(text, by_alias=True, by_name=False)
    except PydanticValidationError as exc:
        raise _refuse(model, exc) from None
    if _named_like_a_field(obj):
        try:  # pydantic read it: so can json (which is the more lenient)
            data = json.loads(text)
        except (ValueError, RecursionError):  # a number of more digits than json allows
            return obj
        _unset_absent(obj, data)
    return obj


@dataclass(frozen=True, slots=True)
class _Plan:
    """Where, in a model of one class, an unknown member may be named like a field:
    ``renamed``, its optional fields whose Python name is not their JSON name (when the
    model keeps unknown members), and ``children``, the fields that hold such models."""

    renamed: tuple[tuple[str, str], ...]
    children: tuple[tuple[str, str], ...]


_PLANS: dict[type[BaseModel], _Plan | None] = {}


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models_in(arg)]


def _plan(cls: type[BaseModel]) -> _Plan | None:
    """The plan of ``cls``; None when none of its models can hold such a member."""
    if cls in _PLANS:
        return _PLANS[cls]
    _PLANS[cls] = None  # (a model that holds itself stops here)
    fields = cls.model_fields
    renamed: tuple[tuple[str, str], ...] = ()
    if cls.model_config.get("extra") == "allow":
        renamed = tuple(
            (name, f.alias)
            for name, f in fields.items()
            if f.alias and f.alias != name and not f.is_required()
        )
    children = tuple(
        (name, f.alias or name)
        for name, f in fields.items()
        if any(_plan(m) is not None for m in _models_in(f.annotation))
    )
    plan = _Plan(renamed, children) if renamed or children else None
    _PLANS[cls] = plan
    return plan


def _named_like_a_field(obj: BaseModel) -> bool:
    """Whether a model in ``obj`` kept an unknown member named like one of its fields."""
    return _holds(_check(type(obj)), obj)


# The test for one class: None (no model of it can hold such a member), the names to look
# for among its unknown members (it holds no model that can), or a function.
_Found = Callable[[BaseModel], bool] | frozenset[str]
_Check = _Found | None
_CHECKS: dict[type[BaseModel], _Check] = {}


def _holds(check: _Check, obj: BaseModel) -> bool:
    if check is None:
        return False
    if isinstance(check, frozenset):
        extra = obj.__pydantic_extra__
        return extra is not None and not check.isdisjoint(extra)
    return check(obj)


def _check(cls: type[BaseModel]) -> _Check:
    """The test of :func:`_named_like_a_field` for models of ``cls``, built once from its
    plan: a loop over the few fields that matter, the leaves looked at in place."""
    if cls in _CHECKS:
        return _CHECKS[cls]
    _CHECKS[cls] = None  # (a model that holds itself stops here)
    plan = _plan(cls)
    if plan is None:
        return None
    renamed = frozenset(name for name, _ in plan.renamed)
    children: list[tuple[str, dict[type[BaseModel], _Found]]] = []
    for name, _ in plan.children:
        classes = _models_in(cls.model_fields[name].annotation)
        checks = {c: found for c in classes if (found := _check(c)) is not None}
        if checks:
            children.append((name, checks))
    if not children:
        _CHECKS[cls] = renamed
        return renamed

    def check(obj: BaseModel) -> bool:
        if renamed:
            extra = obj.__pydantic_extra__
            if extra and not renamed.isdisjoint(extra):
                return True
        for name, checks in children:
            value = getattr(obj, name)
            for item in value if type(value) is list else (value,):
                inner = checks.get(type(item))
                if inner is None:
                    continue
                if isinstance(inner, frozenset):
                    extra = item.__pydantic_extra__
                    if extra and not inner.isdisjoint(extra):
                        return True
                elif inner(item):
                    return True
        return False

    _CHECKS[cls] = check
    return check


def _unset_absent(obj: BaseModel, data: Any) -> None:
    """Take out of the fields set of ``obj`` (read from ``data``) and its models each field
    whose JSON name ``data`` lacks: it was counted for a member named like it."""
    plan = _plan(type(obj))
    if plan is None or not isinstance(data, dict):
        return
    extra = obj.__pydantic_extra__
    if plan.renamed and extra:
        fields_set = obj.__pydantic_fields_set__
        for name, alias in plan.renamed:
            if name in extra and alias not in data:
                fields_set.discard(name)
    for name, alias in plan.children:
        value, given = getattr(obj, name), data.get(alias)
        if isinstance(value, list) and isinstance(given, list):
            for v, g in zip(value, given, strict=False):
                if isinstance(v, BaseModel):
                    _unset_absent(v, g)
        elif isinstance(value, BaseModel):
            _unset_absent(value, given)


def dump(obj: BaseModel) -> dict[str, Any]:
    """The JSON value of ``obj``: members that were never set are left out."""
    return obj.model_dump(mode="json", exclude_unset=True)


def dump_json(obj: BaseModel) -> bytes:
    """The compact JSON bytes of ``obj``: members that were never set are left out."""
    return obj.__pydantic_serializer__.to_json(obj, exclude_unset=True, by_alias=True)


_NOT_MESSAGES = {"messages"}


def dump_run_json(doc: RunDocument) -> bytes:
    """``dump_json(doc)`` (its members in another order: the messages last), each message
    serialized once over the document's life rather than at every commit: a message that
    is the very object dumped before, at the same place, gives its bytes again. The engine
    appends messages and never changes one once committed (``ValidatingStore`` checks that
    this dump parses to what a whole dump gives, at every write of the test suite)."""
    return join_run_json(*dump_run_parts(doc))


def dump_run_parts(doc: RunDocument) -> tuple[bytes, list[bytes]]:
    """The parts :func:`dump_run_json` joins: the document's JSON object without its
    messages, and the JSON of each message, in order. The list is the document's own cache
    (do not change it): a message dumped before is the very bytes object given before, so
    that a store which kept the list can tell the messages it has from new ones by
    identity."""
    head = doc.__pydantic_serializer__.to_json(
        doc, exclude_unset=True, by_alias=True, exclude=_NOT_MESSAGES
    )
    messages = doc.messages
    private = doc.__pydantic_private__
    if private is None:  # built without its private members: nothing kept to reuse
        dumped: list[object] = []
        parts: list[bytes] = []
    else:
        dumped, parts = private["_dumped"], private["_dumped_json"]
    kept = len(dumped)
    if kept > len(messages) or not all(map(is_, dumped, messages)):
        kept = _same_start(dumped, messages)
        del dumped[kept:], parts[kept:]
    for message in messages[kept:]:
        dumped.append(message)
        parts.append(
            message.__pydantic_serializer__.to_json(message, exclude_unset=True, by_alias=True)
        )
    return head, parts


def adopt_run_parts(doc: RunDocument, parts: list[bytes]) -> bool:
    """Give ``doc``'s cache of its messages' JSON ``parts`` (the JSON of each of its
    messages as stored, which a parse of them gave these very messages), so that
    :func:`dump_run_parts` gives those bytes objects again; False, changing nothing, when
    they do not match its messages in number or it has no cache."""
    private = doc.__pydantic_private__
    if private is None or len(doc.messages) != len(parts):
        return False
    private["_dumped"], private["_dumped_json"] = list(doc.messages), parts
    return True


def _same_start(dumped: list[object], messages: list[Any]) -> int:
    """How many messages, from the first, are the very objects dumped before."""
    kept = 0
    for before, message in zip(dumped, messages, strict=False):
        if before is not message:
            break
        kept += 1
    return kept


def parse_run(data: dict[str, Any] | str | bytes) -> RunDocument:
    if isinstance(data, dict):
        return parse(RunDocument, data)
    return parse_json(RunDocument, data)


def dump_run(doc: RunDocument) -> dict[str, Any]:
    return dump(doc)


def _prepare() -> None:
    """Build the checks of the three formats now, not at a first parse (where two threads
    could race to build them)."""
    from oarlock.formats._models import ToolInvocation, ToolReceipt

    for cls in (RunDocument, ToolInvocation, ToolReceipt):
        _check(cls)


_prepare()

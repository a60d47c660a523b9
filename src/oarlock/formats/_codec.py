"""Exact JSON round trips of the typed models."""

from __future__ import annotations

from operator import is_
from typing import Any, TypeVar

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
        return model.model_validate(data)
    except PydanticValidationError as exc:
        raise _refuse(model, exc) from None


def parse_json(model: type[M], text: str | bytes) -> M:
    try:
        return model.model_validate_json(text)
    except PydanticValidationError as exc:
        raise _refuse(model, exc) from None


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

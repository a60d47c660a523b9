"""Exact JSON round trips of the typed models."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError

from oarlock.errors import FormatError
from oarlock.formats._models import RunDocument

__all__ = ["dump", "dump_json", "parse", "parse_json", "parse_run", "dump_run"]

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


def parse_run(data: dict[str, Any] | str | bytes) -> RunDocument:
    if isinstance(data, dict):
        return parse(RunDocument, data)
    return parse_json(RunDocument, data)


def dump_run(doc: RunDocument) -> dict[str, Any]:
    return dump(doc)

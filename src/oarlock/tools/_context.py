"""What a tool may ask for besides its arguments: the run it serves and the caller's
dependencies (a database client, an HTTP session, the user's account), given per run and
never stored.

A tool asks by annotating one parameter with :class:`RunContext` (``ctx: RunContext[Deps]``);
that parameter is not part of the tool's JSON schema, and the model never sees it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, get_origin

__all__ = ["RunContext", "is_run_context"]

DepsT = TypeVar("DepsT")


@dataclass(frozen=True, slots=True)
class RunContext(Generic[DepsT]):
    """The run a call is made for: the caller's ``deps`` (given to ``run``, ``start``,
    ``resume``...), the run's id, the call's id, the tool's name, the execution scope,
    the call's idempotency key and the turn."""

    deps: DepsT
    run_id: str
    call_id: str
    tool_name: str
    scope: Mapping[str, Any]
    idempotency_key: str
    turn: int


def is_run_context(annotation: Any) -> bool:
    """Whether a parameter's annotation asks for the :class:`RunContext`."""
    return annotation is RunContext or get_origin(annotation) is RunContext

"""Validation reports: every error with its JSON Pointer, rule and plain sentence."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Kind", "Problem", "Report", "pointer"]

Kind = Literal["run", "invocation", "receipt"]


def pointer(path: tuple[str | int, ...] | list[str | int]) -> str:
    """RFC 6901 JSON Pointer of a path ('' is the whole document)."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


@dataclass(frozen=True, slots=True)
class Problem:
    """One broken rule: where (JSON Pointer), which rule, and a plain sentence.

    ``rule`` is ``"schema"`` for a JSON Schema violation, ``"json"`` for input that is
    not a JSON object, or a semantic rule id such as ``"R1"``, ``"I1"`` or ``"C3"``.
    """

    pointer: str
    rule: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"pointer": self.pointer, "rule": self.rule, "message": self.message}


@dataclass(slots=True)
class Report:
    """The result of validating one document."""

    kind: Kind | None
    errors: list[Problem] = field(default_factory=list)
    format: str | None = None
    schema_only: bool = False
    more_errors: int = 0
    """Errors found beyond those listed (a report lists at most a hundred)."""
    more_errors_exact: bool = True
    """False when counting stopped: there are at least ``more_errors`` more."""

    @property
    def more(self) -> str | None:
        """``and N more errors`` when errors were left out of the list, else None."""
        if not self.more_errors:
            return None
        if self.more_errors_exact:
            return f"and {self.more_errors:,} more error{'s' if self.more_errors > 1 else ''}"
        return f"and at least {self.more_errors:,} more errors (counting stopped there)"

    @property
    def valid(self) -> bool:
        return not self.errors

    def __bool__(self) -> bool:
        return self.valid

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "valid": self.valid}
        if self.format is not None:
            out["format"] = self.format
        out["errors"] = [e.to_json() for e in self.errors]
        if self.more_errors:
            out["moreErrors"] = self.more_errors
            out["moreErrorsExact"] = self.more_errors_exact
        return out

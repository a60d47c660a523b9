"""Checking configuration values: one vocabulary for the rules an agent file, an MCP
server entry, a model script, :class:`~oarlock.engine.Limits` or a price can break.

Each check returns the value, or raises a :class:`~oarlock.errors.ConfigError` whose
message is ``KEY: RULE, got VALUE`` (``limits.max_cost_usd: must be a finite number ≥ 0,
got nan``). :class:`Problems` collects such errors, so that a loader can go on past a bad
key and report every problem of a file at once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

from oarlock._input import MAX_DEPTH
from oarlock.errors import ConfigError

__all__ = [
    "Problems",
    "at",
    "describe",
    "joined",
    "need_bool",
    "need_json",
    "need_mapping",
    "need_number",
    "need_text",
    "need_whole",
    "unknown_keys",
]

T = TypeVar("T")


def describe(value: Any) -> str:
    """A value as a message shows it: short, and never failing (a huge integer, a long
    string, a container are summarised)."""
    if isinstance(value, bool):
        word = "true" if value else "false"
        return f"{word} (YAML reads yes/no/on/off as booleans: quote them)"
    if value is None:
        return "null"
    if isinstance(value, int):
        if value.bit_length() > 200:
            return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
        return repr(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return repr(value if len(value) <= 60 else value[:60] + "…")
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, Mapping):
        return "a mapping"
    return f"a {type(value).__name__}"


def at(key: str, sub: object) -> str:
    """The key path of ``sub`` below ``key`` (``limits`` and ``max_turns`` give
    ``limits.max_turns``; an int gives ``tools[2]``)."""
    if isinstance(sub, int):
        return f"{key}[{sub}]"
    return f"{key}.{sub}" if key else str(sub)


def _bad(key: str, rule: str, value: Any) -> ConfigError:
    return ConfigError(f"{key}: {rule}, got {describe(value)}")


def need_text(value: Any, key: str, *, empty: bool = True) -> str:
    if not isinstance(value, str) or (not empty and not value):
        raise _bad(key, "must be a string" if empty else "must be a non-empty string", value)
    return value


def need_bool(value: Any, key: str) -> bool:
    if not isinstance(value, bool):
        raise _bad(key, "must be true or false", value)
    return value


def need_whole(value: Any, key: str, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _bad(key, f"must be a whole number ≥ {minimum}", value)
    return value


def need_number(value: Any, key: str, *, positive: bool = False) -> float:
    """A finite int or float, ≥ 0 (> 0 when ``positive``); never a boolean."""
    ok = (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and (isinstance(value, int) or math.isfinite(value))
        and (value > 0 if positive else value >= 0)
    )
    if not ok:
        raise _bad(key, f"must be a finite number {'> 0' if positive else '≥ 0'}", value)
    return float(value)


_JSON_INT = 2**53 - 1


def need_json(value: Any, key: str, *, portable: bool = True) -> Any:
    """A JSON value: objects with string keys, arrays, strings, finite numbers (integers
    within ±(2**53 - 1), which have a canonical form), booleans and null, nested at most
    :data:`~oarlock._input.MAX_DEPTH` levels. With ``portable=False``, any number a JSON
    parser can give (huge integers, infinities, NaN) is taken too: what a model may send."""
    stack: list[tuple[Any, str, int]] = [(value, key, 0)]
    while stack:
        item, where, depth = stack.pop()
        if isinstance(item, Mapping | list | tuple) and depth >= MAX_DEPTH:
            raise ConfigError(f"{where}: nested deeper than {MAX_DEPTH} levels")
        if isinstance(item, Mapping):
            for k, v in item.items():
                if not isinstance(k, str):
                    raise ConfigError(f"{where}: keys must be strings, got {describe(k)}")
                stack.append((v, at(where, k), depth + 1))
        elif isinstance(item, list | tuple):
            stack.extend((v, at(where, i), depth + 1) for i, v in enumerate(item))
        elif not portable and isinstance(item, int | float):
            continue
        elif isinstance(item, float) and not math.isfinite(item):
            raise _bad(where, "must be a finite number", item)
        elif isinstance(item, int) and not isinstance(item, bool) and abs(item) > _JSON_INT:
            raise _bad(where, "must be an integer within ±(2**53 - 1)", item)
        elif not (item is None or isinstance(item, str | int | float)):
            raise ConfigError(f"{where}: {describe(item)} is not a JSON value")
    return value


def need_mapping(value: Any, key: str) -> dict[str, Any]:
    """A mapping whose keys are all strings."""
    if not isinstance(value, Mapping):
        raise _bad(key, "must be a mapping", value)
    for k in value:
        if not isinstance(k, str):
            raise ConfigError(f"{key}: keys must be strings, got {describe(k)}")
    return dict(value)


def unknown_keys(value: Mapping[str, Any], key: str, allowed: Collection[str]) -> list[str]:
    """A problem for each key of ``value`` that is not ``allowed``."""
    names = ", ".join(sorted(allowed))
    return [f"{at(key, k)}: unknown key (allowed: {names})" for k in value if k not in allowed]


def joined(head: str, problems: list[str]) -> str:
    """One message for several problems: the problem itself when there is one."""
    if len(problems) == 1:
        return problems[0]
    return f"{head}: {len(problems)} problems\n" + "\n".join(f"  {p}" for p in problems)


class Problems:
    """Problems found so far, each a line naming its file (or object), key and rule."""

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix
        self.items: list[str] = []
        self.codes: set[str] = set()

    def add(self, problem: str, code: str = ConfigError.code) -> None:
        self.items.append(self.prefix + problem)
        self.codes.add(code)

    def extend(self, problems: Collection[str], code: str = ConfigError.code) -> None:
        for problem in problems:
            self.add(problem, code)

    def record(self, exc: ConfigError, key: str = "") -> None:
        """Every problem ``exc`` lists (each under ``key``, when given), with its code."""
        self.extend([f"{key}: {p}" if key else p for p in exc.problems], exc.code)

    @contextmanager
    def catch(self, key: str = "") -> Iterator[None]:
        """Record a ConfigError raised in the block (every problem it lists) and go on."""
        try:
            yield
        except ConfigError as exc:
            self.record(exc, key)

    def check(self, check: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
        """``check(*args, **kwargs)``, or None after recording the ConfigError it raised."""
        try:
            return check(*args, **kwargs)
        except ConfigError as exc:
            self.record(exc)
            return None

    def __bool__(self) -> bool:
        return bool(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[str]:
        return iter(self.items)

    def error(self, head: str, *, code: str | None = None) -> ConfigError:
        """One ConfigError listing every problem; its code is ``code``, else the code the
        problems share, else that of a ConfigError."""
        if code is None and len(self.codes) == 1:
            code = next(iter(self.codes))
        return ConfigError(joined(head, self.items), code=code, problems=self.items)

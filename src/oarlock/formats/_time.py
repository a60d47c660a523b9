"""RFC 3339 date-times: strict parsing, exact ordering, and the timestamps oarlock writes."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta
from fractions import Fraction

__all__ = ["is_rfc3339", "is_before", "now_rfc3339", "parse_rfc3339", "shift_rfc3339"]

_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?(?:([Zz])|([+-])(\d{2}):(\d{2}))",
    re.ASCII,
)


def parse_rfc3339(text: str) -> tuple[datetime, Fraction] | None:
    """The instant ``text`` names, as (UTC second, fraction of a second), or None.

    The pair orders exactly, whatever the number of fractional digits. A leap second
    (``:60``) is accepted, as RFC 3339 allows, and counted as the last second of its minute.
    """
    found = _second(text)
    if found is None:
        return None
    moment, digits = found
    frac = Fraction(int(digits), 10 ** len(digits)) if digits else Fraction(0)
    return moment, frac


def _second(text: str) -> tuple[datetime, str] | None:
    """The UTC second ``text`` names and its fraction's digits, or None."""
    m = _RFC3339.fullmatch(text)
    if m is None:
        return None
    year, month, day, hour, minute, second = (int(m.group(i)) for i in range(1, 7))
    if second == 60:
        second = 59
    try:
        moment = datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    except ValueError:
        return None
    if m.group(8) is None:
        off_h, off_m = int(m.group(10)), int(m.group(11))
        if off_h > 23 or off_m > 59:
            return None
        offset = timedelta(hours=off_h, minutes=off_m)
        try:
            moment = moment - offset if m.group(9) == "+" else moment + offset
        except OverflowError:  # the instant falls outside years 1-9999
            return None
    return moment, (m.group(7) or ".")[1:]


def is_rfc3339(text: object) -> bool:
    return isinstance(text, str) and _second(text) is not None


_LAST_SECOND: list[tuple[int, str]] = [(-1, "")]  # the last second written, and how


def now_rfc3339() -> str:
    """The current UTC time with microseconds, e.g. ``2026-01-02T03:04:05.123456Z`` (a
    few of them a call on the hot path: the second's text is made once a second)."""
    sec, micro = divmod(time.time_ns() // 1000, 1_000_000)
    last = _LAST_SECOND[0]
    if last[0] != sec:
        last = _LAST_SECOND[0] = (sec, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec)))
    return f"{last[1]}.{micro:06d}Z"


def _instant(text: str) -> tuple[datetime, Fraction]:
    parsed = parse_rfc3339(text)
    if parsed is None:
        raise ValueError(f"not an RFC 3339 date-time: {text!r}")
    return parsed


def shift_rfc3339(text: str, seconds: float) -> str:
    """``text`` moved by ``seconds``, written as :func:`now_rfc3339` writes times."""
    moment, frac = _instant(text)
    shifted = moment + timedelta(seconds=float(frac) + seconds)
    return shifted.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def is_before(a: str, b: str) -> bool:
    """Whether instant ``a`` comes strictly before instant ``b``."""
    return _instant(a) < _instant(b)

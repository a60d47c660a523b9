"""Patterns an operator writes (a policy rule's ``matches`` and ``tool`` globs), matched
against what a model chose: in time linear in the text, whatever the pattern.

Every such pattern is compiled here, by RE2 (PyPI ``google-re2``), an engine without
backtracking: no input makes a search take longer than a constant times the pattern's
size times the text's length. ``(a+)+$`` against ``"a" * 100_000 + "!"`` takes
microseconds, where Python's ``re`` takes longer than the universe has. The patterns are
compiled without capturing groups: a yes or no is RE2's DFA alone (its NFA, linear too,
when a huge pattern fills the DFA's memory: about 2 s per 100 KB for the worst found,
``(?:a|b|.*c){1000}x``, 11,000 instructions).

RE2 syntax is Python's with these differences, refused or adjusted when the policy is
loaded, never silently different:

* no backreferences (``\\1``, ``(?P=name)``), lookaround (``(?=``, ``(?!``, ``(?<=``,
  ``(?<!``), atomic groups or possessive quantifiers, ``(?x)`` or ``(?#...)``, and
  repetition counts above 1000: refused, naming the construct;
* ``{,n}`` (Python: ``{0,n}``; RE2: the text ``{,n}``): refused, with the spelling that works;
* ``\\Z`` (Python's end of text) is RE2's ``\\z``: read as such.

Two differences remain, both documented in :mod:`oarlock.governance._policy`: ``$``
matches only at the very end of the text (Python's also before a final newline), and
``\\d``, ``\\w``, ``\\s`` and ``\\b`` are ASCII (``\\p{Nd}``, ``\\pL`` and friends are
Unicode).

Text is searched as UTF-8; a lone surrogate (which no stored or hashed argument may hold)
is searched as the bytes Python's ``surrogatepass`` gives it, never an error.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from fnmatch import translate

import re2  # type: ignore[import-untyped]  # google-re2 ships no type information

__all__ = ["PatternError", "glob_matcher", "regex_searcher"]

Matcher = Callable[[str], bool]

_UNICODE_END = 0x110000
_SURROGATES = (0xD800, 0xDFFF)
# Python reads {,n} and {,} as repetitions, RE2 as text: refused rather than read apart
_PYTHON_ONLY_REPEAT = re.compile(r"\{,[0-9]*\}")
_HINT = (
    "policy patterns are RE2 syntax, which runs in linear time: no backreferences, "
    "lookaround, atomic groups or possessive quantifiers"
)


class PatternError(ValueError):
    """A pattern that cannot be compiled, with the reason (no pattern echoed)."""


def _options() -> object:
    options = re2.Options()
    options.log_errors = False  # RE2 would print every refused pattern on standard error
    options.never_capture = True  # a yes or no needs no groups: the DFA alone answers
    return options


_OPTIONS = _options()


def _compile(pattern: str) -> Callable[[bytes], object]:
    """RE2's search of ``pattern`` over bytes (UTF-8), or :class:`PatternError`."""
    try:
        pattern.encode("utf-8")
    except UnicodeEncodeError:
        raise PatternError("a pattern cannot hold a lone surrogate") from None
    try:
        compiled = re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else "refused"
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "backslashreplace")
        hint = "RE2's memory limit" if "too large" in reason else _HINT
        raise PatternError(f"{reason} ({hint})") from None
    search: Callable[[bytes], object] = compiled.search
    return search


def _skip_braces(pattern: str, i: int) -> int:
    """The index after the ``{...}`` at ``i`` (of ``\\x{41}``, ``\\p{Greek}``), else ``i``."""
    if pattern.startswith("{", i):
        end = pattern.find("}", i)
        return len(pattern) if end < 0 else end + 1
    return i


def _as_re2(pattern: str) -> str:
    """``pattern`` with Python's ``\\Z`` spelled as RE2's ``\\z``; :class:`PatternError`
    for ``{,n}``, which the two engines read apart."""
    out: list[str] = []
    i, n = 0, len(pattern)
    in_class = False
    class_start = 0
    while i < n:
        c = pattern[i]
        if c == "\\":
            nxt = pattern[i + 1 : i + 2]
            if nxt == "Q" and not in_class:  # literal text up to \E
                end = pattern.find("\\E", i + 2)
                stop = n if end < 0 else end + 2
            elif nxt == "Z" and not in_class:
                out.append("\\z")
                i += 2
                continue
            elif nxt in ("x", "p", "P"):
                stop = _skip_braces(pattern, i + 2)
            else:
                stop = i + 2
            out.append(pattern[i:stop])
            i = stop
            continue
        if in_class:
            if c == "[" and pattern.startswith(":", i + 1):  # [:alpha:]
                end = pattern.find(":]", i + 2)
                if end >= 0:
                    out.append(pattern[i : end + 2])
                    i = end + 2
                    continue
            elif c == "]" and i > class_start:
                in_class = False
        elif c == "[":
            in_class = True
            class_start = i + 1
            if pattern.startswith("^", class_start):
                class_start += 1
            out.append(pattern[i:class_start])
            i = class_start
            continue
        elif c == "{":
            repeat = _PYTHON_ONLY_REPEAT.match(pattern, i)
            if repeat:
                written = repeat.group()
                raise PatternError(
                    f"{written} is a repetition in Python but text in RE2: "
                    f"write {{0,{written[2:]}"
                )
        out.append(c)
        i += 1
    return "".join(out)


def regex_searcher(pattern: str) -> Matcher:
    """Whether ``pattern`` (RE2 syntax, see the module) is found in a text: linear time.
    Raises :class:`PatternError` for a pattern RE2 refuses or reads otherwise than Python."""
    search = _compile(_as_re2(pattern))

    def found(text: str) -> bool:
        return search(text.encode("utf-8", "surrogatepass")) is not None

    return found


def _bracket_class(bracket: str) -> str:
    """The RE2 class of the glob bracket ``bracket`` (``[...]``) as :mod:`fnmatch` reads
    it. Python's class (from ``fnmatch.translate``) holds only characters and ranges of
    the bracket's own characters, so whether it matches changes only at a character of the
    bracket or the one after it: asking at those points alone gives its exact extent."""
    member = re.compile(translate(bracket)).match  # one class: no repetition to backtrack
    points = sorted({0, *(ord(c) for c in bracket), *(ord(c) + 1 for c in bracket)})
    points = [p for p in points if p < _UNICODE_END]
    ranges: list[tuple[int, int]] = []
    for k, lo in enumerate(points):
        hi = (points[k + 1] if k + 1 < len(points) else _UNICODE_END) - 1
        if member(chr(lo)):
            ranges.extend(_without_surrogates(lo, hi))
    if not ranges:
        return "[^\\x00-\\x{10FFFF}]"  # an empty bracket: nothing matches
    return "[" + "".join(f"\\x{{{lo:X}}}-\\x{{{hi:X}}}" for lo, hi in ranges) + "]"


def _without_surrogates(lo: int, hi: int) -> list[tuple[int, int]]:
    first, last = _SURROGATES
    if hi < first or lo > last:
        return [(lo, hi)]
    return [r for r in ((lo, first - 1), (last + 1, hi)) if r[0] <= r[1]]


def _glob_to_re2(glob: str) -> str:
    """The RE2 pattern of ``glob`` as :func:`fnmatch.fnmatchcase` reads it: ``*`` any text,
    ``?`` one character, ``[seq]`` and ``[!seq]`` (a ``[`` without its ``]`` is itself);
    every other character is itself."""
    out: list[str] = []
    i, n = 0, len(glob)
    while i < n:
        c = glob[i]
        i += 1
        if c == "*":
            if not out or out[-1] != ".*":
                out.append(".*")
        elif c == "?":
            out.append(".")
        elif c == "[":  # where fnmatch ends a bracket (see fnmatch.translate)
            j = i
            if j < n and glob[j] == "!":
                j += 1
            if j < n and glob[j] == "]":
                j += 1
            while j < n and glob[j] != "]":
                j += 1
            if j >= n:
                out.append("\\[")
            else:
                out.append(_bracket_class(glob[i - 1 : j + 1]))
                i = j + 1
        else:
            out.append(c if c.isascii() and c.isalnum() else f"\\x{{{ord(c):X}}}")
    return "".join(out)


def glob_matcher(globs: Sequence[str]) -> Matcher:
    """Whether a whole name matches one of ``globs`` (:func:`fnmatch.fnmatchcase`'s
    reading, case-sensitive), by RE2: linear time. Raises :class:`PatternError` for a glob
    that holds a lone surrogate."""
    for glob in globs:
        if any(_SURROGATES[0] <= ord(c) <= _SURROGATES[1] for c in glob):
            raise PatternError("a glob cannot hold a lone surrogate")
    body = "|".join(_glob_to_re2(g) for g in globs)
    search = _compile(f"(?s)\\A(?:{body})\\z")

    def matches(name: str) -> bool:
        return search(name.encode("utf-8", "surrogatepass")) is not None

    return matches

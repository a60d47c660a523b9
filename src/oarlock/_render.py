"""The one renderer: how text from a model, a tool, a tag, an id, a file name or an error
message reaches a person.

Anything that did not come from oarlock's own source is untrusted: it may carry terminal
escape sequences (a window-title change, a screen clear, an OSC 8 hyperlink), a newline
that forges an extra output line, bidirectional overrides that reorder what is shown,
invisible characters, lone surrogates that cannot be encoded, or a configured secret.

* :func:`line` makes a value safe for one line: every control character (newline and tab
  included), DEL, every C1 control, the bidirectional controls, the invisible characters
  (as :mod:`oarlock.governance._sanitize` lists them), the line and paragraph separators and
  every surrogate are written as visible escapes (``\\x1b``, ``\\u202e``, ``\\udcff``); a
  byte that was not UTF-8 on the command line shows as ``\\xNN``. Secrets are redacted
  first (:func:`oarlock._secrets.redact`).
* :func:`block` does the same for multi-line text, keeping newlines and tabs, and indents
  every line after the first, so that no line of data can pass for a line of oarlock's.
* :func:`cell` gives a Rich ``Text`` for tables: Rich never reads markup from it.
* :func:`dumps` is the JSON of machine output (``--json``): ``json.dumps`` with the same
  characters written as ``\\uXXXX`` escapes, so that the output holds no raw control, bidi
  or invisible character, and a lone surrogate is kept as its escape instead of failing.

Nothing here prints; callers print what it returns.
"""

from __future__ import annotations

import json
import re
from functools import cache
from typing import TYPE_CHECKING, Any

from oarlock._secrets import redact as _redact

if TYPE_CHECKING:
    from rich.text import Text

__all__ = ["block", "cell", "dumps", "line"]


@cache
def _unsafe() -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    from oarlock.governance._sanitize import _INVISIBLE_CLASS

    common = f"\x7f-\x9f{_INVISIBLE_CLASS}\u2028\u2029\ud800-\udfff"
    return (
        re.compile(f"[\x00-\x1f{common}]"),  # one line: every control, newline included
        re.compile(f"[\x00-\x08\x0b-\x1f{common}]"),  # a block: newline and tab stay
        re.compile(f"[{common}]"),  # JSON: it escapes C0 controls itself
    )


_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    char = match.group(0)
    if char in _NAMED:
        return _NAMED[char]
    cp = ord(char)
    if 0xDC80 <= cp <= 0xDCFF:  # a byte that was not UTF-8 (surrogateescape)
        return f"\\x{cp - 0xDC00:02x}"
    if cp <= 0xFF:
        return f"\\x{cp:02x}"
    if cp <= 0xFFFF:
        return f"\\u{cp:04x}"
    return f"\\U{cp:08x}"


def _plain(text: str) -> bool:
    return text.isascii() and text.isprintable()


def line(value: object) -> str:
    """``value`` as text for one line of a terminal (see the module documentation)."""
    text = value if isinstance(value, str) else str(value)
    text = _redact(text)
    if _plain(text):
        return text
    return _unsafe()[0].sub(_escape, text)


def block(value: object, indent: str = "  ") -> str:
    """Multi-line ``value`` for a terminal: newlines kept, every later line indented."""
    text = value if isinstance(value, str) else str(value)
    text = _redact(text).replace("\r\n", "\n")
    if not _plain(text.replace("\n", "").replace("\t", "")):
        text = _unsafe()[1].sub(_escape, text)
    return text.replace("\n", "\n" + indent)


def cell(value: object) -> Text:
    """A table cell: :func:`line` of ``value`` as a Rich ``Text`` (no markup is read)."""
    from rich.text import Text

    return Text(line(value))


def _escape_json(match: re.Match[str]) -> str:
    cp = ord(match.group(0))
    if cp <= 0xFFFF:
        return f"\\u{cp:04x}"
    high, low = divmod(cp - 0x10000, 0x400)
    return f"\\u{0xD800 + high:04x}\\u{0xDC00 + low:04x}"


def dumps(value: Any, *, indent: int | None = 2, redact: bool = True) -> str:
    """JSON for machine output: non-ASCII text kept as it is, except the characters
    :func:`line` escapes, which are written as JSON escapes (control characters are
    escaped by JSON itself). Secrets are redacted from every string, unless ``redact`` is
    false (a document written as data, which must parse back to the very same value)."""
    text = json.dumps(value, indent=indent, ensure_ascii=False)
    if redact:
        text = _redact(text)
    if text.isascii():
        return text
    return _unsafe()[2].sub(_escape_json, text)

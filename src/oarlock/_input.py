"""Reading what oarlock is given: files, folders' files, standard input, fifos and devices,
always with a cap on the bytes read.

Every file or stream oarlock reads (documents for ``validate`` and ``upgrade``, agent
files, policy files, Cedar files, model scripts) is read in chunks, and refused as soon as
it holds more than ``$OARLOCK_MAX_INPUT_BYTES`` bytes (default 16 MiB): an endless input
(``/dev/zero``, a fifo, a pipe that never closes its end) costs at most that much memory
before it is refused. Nothing is read whole first.

The structural limits shared by the JSON and YAML readers live here too: nesting deeper
than :data:`MAX_DEPTH` levels and integers of more than :data:`MAX_INT_DIGITS` digits are
refused with an error, never a ``RecursionError`` or Python's integer-conversion limit.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from typing import Protocol

from oarlock.errors import ConfigError, UsageError

__all__ = [
    "DEFAULT_MAX_INPUT_BYTES",
    "MAX_DEPTH",
    "MAX_INPUT_ENV",
    "MAX_INT_DIGITS",
    "MAX_INT_BITS",
    "decode_text",
    "display_name",
    "max_input_bytes",
    "read_input",
]

MAX_INPUT_ENV = "OARLOCK_MAX_INPUT_BYTES"
DEFAULT_MAX_INPUT_BYTES = 16 * 1024 * 1024
MAX_DEPTH = 128
"""Containers nested deeper than this (in JSON or YAML) are refused."""
MAX_INT_DIGITS = 4300
"""Integers with more decimal digits are refused (Python's own conversion limit)."""
MAX_INT_BITS = 14284
"""An integer below 2**14284 has at most 4300 decimal digits."""
_CHUNK = 1 << 20


class _Readable(Protocol):
    def read(self, size: int, /) -> bytes: ...


def max_input_bytes() -> int:
    """The cap on the bytes of one input: ``$OARLOCK_MAX_INPUT_BYTES``, else 16 MiB."""
    raw = os.environ.get(MAX_INPUT_ENV)
    if raw is None or raw.strip() == "":
        return DEFAULT_MAX_INPUT_BYTES
    text = raw.strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 19 or int(text) < 1:
        shown = text if len(text) <= 40 else text[:40] + "…"
        raise UsageError(f"{MAX_INPUT_ENV}: must be a whole number of bytes ≥ 1, got {shown!r}")
    return int(text)


def display_name(source: str | os.PathLike[str]) -> str:
    """How messages name an input: its path, or ``standard input`` for ``-``."""
    name = os.fspath(source)
    return "standard input" if name == "-" else name


def _too_large(name: str, limit: int) -> ConfigError:
    return ConfigError(
        f"{name}: larger than the input limit of {limit:,} bytes "
        f"(set {MAX_INPUT_ENV} to read bigger inputs)",
        code="input_too_large",
    )


def _read_capped(fh: _Readable, name: str, limit: int, code: str) -> bytes:
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = fh.read(min(_CHUNK, limit + 1 - total))
        if not chunk:
            return b"".join(chunks)
        total += len(chunk)
        if total > limit:
            raise _too_large(name, limit)
        chunks.append(chunk)


def read_input(
    source: str | os.PathLike[str],
    *,
    what: str = "file",
    code: str = "input_unreadable",
    limit: int | None = None,
) -> bytes:
    """The bytes of a file (or of standard input for ``-``), read in chunks and refused
    once they pass ``limit`` (default :func:`max_input_bytes`). Errors are ConfigErrors
    with ``code``, naming the input and what it was meant to be (``what``)."""
    cap = max_input_bytes() if limit is None else limit
    name = display_name(source)
    if os.fspath(source) == "-":
        return _read_capped(sys.stdin.buffer, name, cap, code)
    try:
        with open(source, "rb") as fh:
            info = os.fstat(fh.fileno())
            if stat.S_ISDIR(info.st_mode):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
            if stat.S_ISREG(info.st_mode) and info.st_size > cap:
                raise _too_large(name, cap)
            return _read_capped(fh, name, cap, code)
    except IsADirectoryError:
        raise ConfigError(f"{name}: is a folder, not a {what}", code=code) from None
    except FileNotFoundError:
        raise ConfigError(f"{name}: no such {what}", code=code) from None
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise ConfigError(f"{name}: cannot read the {what}: {why}", code=code) from None
    except ValueError as exc:  # a path with a NUL character
        raise ConfigError(f"{name}: cannot read the {what}: {exc}", code=code) from None


def decode_text(
    data: bytes, name: str, *, what: str = "file", code: str = "input_unreadable"
) -> str:
    """``data`` as UTF-8 text (a leading byte order mark is dropped); else a ConfigError
    naming the offset of the first bad byte."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = data[exc.start]
        raise ConfigError(
            f"{name}: the {what} is not UTF-8 text (byte 0x{bad:02x} at offset {exc.start})",
            code=code,
        ) from None
    return text[1:] if text.startswith("\ufeff") else text

"""What the command line accepts, checked while it is parsed: a value that breaks a rule is
a usage error (exit 2) that names the rule, shown through the renderer, never a traceback
later on.

* Text that is stored or looked up (ids, run input, tags, reasons, names) must be UTF-8:
  a byte that is not arrives as a lone surrogate (``surrogateescape``) that no store can
  hold and no id can match.
* A path may hold any byte but NUL, which no file name can.
* Seconds and counts must be finite, positive and within sensible bounds."""

from __future__ import annotations

import argparse
import errno
import math
import os
import sys
from typing import Any, NoReturn

from oarlock._render import line

__all__ = [
    "MAX_EXPIRES_IN",
    "MAX_LIMIT",
    "OneCommand",
    "Parser",
    "concurrency",
    "limit",
    "path",
    "seconds",
    "stored_path",
    "text",
]

MAX_EXPIRES_IN = 366 * 24 * 3600  # an approval outlives no year
MAX_LIMIT = 1_000_000


class Parser(argparse.ArgumentParser):
    """An argument parser whose messages go through the renderer: an argument echoed in a
    usage error cannot reach the terminal raw. Options must be spelled out in full (no
    abbreviations), so that a mistyped option is never taken for another."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {line(message)}\n")


class _Unbuilt:
    """The parser of a command that this invocation does not run: every call made to
    build it is taken and does nothing (see :class:`OneCommand`)."""

    def __getattr__(self, name: str) -> Any:
        return self._ignored

    def _ignored(self, *args: object, **kwargs: object) -> _Unbuilt:
        return self


class OneCommand(argparse._SubParsersAction):  # type: ignore[type-arg]
    """Subcommands of which only ``only`` is built (all of them when ``only`` is None):
    building the parsers of the forty commands an invocation does not run is most of the
    command's start-up time."""

    only: str | None = None

    def add_parser(self, name: str, **kwargs: Any) -> Any:
        if self.only is not None and name != self.only:
            return _Unbuilt()
        return super().add_parser(name, **kwargs)


def _not_utf8(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def text(value: str) -> str:
    """Text that is stored or looked up: valid UTF-8."""
    if _not_utf8(value):
        raise argparse.ArgumentTypeError(f"{line(value)} is not valid UTF-8")
    return value


def path(value: str) -> str:
    """A file's path: any bytes but NUL, not empty, and a name the system can look up (not
    too long, no loop of symbolic links); it need not exist."""
    if not value:
        raise argparse.ArgumentTypeError("a path cannot be empty")
    if "\x00" in value:
        raise argparse.ArgumentTypeError(f"{line(value)}: a path cannot hold a NUL character")
    try:
        os.stat(value)
    except OSError as exc:
        if exc.errno in (errno.ENAMETOOLONG, errno.ELOOP):
            raise argparse.ArgumentTypeError(f"{line(value)}: {exc.strerror}") from None
    return value


def stored_path(value: str) -> str:
    """A path that is also stored (an agent file, kept for resumes): valid UTF-8 too."""
    value = path(value)
    if _not_utf8(value):
        raise argparse.ArgumentTypeError(
            f"{line(value)} is not valid UTF-8 (the path is stored with the run)"
        )
    return value


def seconds(value: str) -> float:
    """A duration: a finite number of seconds above 0 and at most a year."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{line(value)} is not a number of seconds") from None
    if not math.isfinite(number) or not 0 < number <= MAX_EXPIRES_IN:
        raise argparse.ArgumentTypeError(
            f"{line(value)}: give a number of seconds above 0 and at most "
            f"{MAX_EXPIRES_IN} (366 days)"
        )
    return number


def limit(value: str) -> int:
    """How many items to list: a whole number from 1 to :data:`MAX_LIMIT`."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{line(value)} is not a whole number") from None
    if not 1 <= number <= MAX_LIMIT:
        raise argparse.ArgumentTypeError(
            f"{line(value)}: give a whole number from 1 to {MAX_LIMIT}"
        )
    return number


def concurrency(value: str) -> int:
    """How many runs a worker drives at once: a whole number from 1 to 10,000."""
    from oarlock.worker._settings import MAX_CONCURRENCY

    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{line(value)} is not a whole number") from None
    if not 1 <= number <= MAX_CONCURRENCY:
        raise argparse.ArgumentTypeError(
            f"{line(value)}: give a whole number from 1 to {MAX_CONCURRENCY}"
        )
    return number

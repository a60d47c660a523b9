"""What the command line accepts, checked while it is parsed: a value that breaks a rule is
a usage error (exit 2) that names the rule, shown through the renderer, never a traceback
later on.

* Text that is stored or looked up (ids, run input, tags, reasons, names) must be UTF-8:
  a byte that is not arrives as a lone surrogate (``surrogateescape``) that no store can
  hold and no id can match.
* A path may hold any byte but NUL, which no file name can.
* Seconds and counts must be finite, positive and within sensible bounds.
* An option given a value must be given one: ``--as ''`` or ``--edit ''`` is refused, never
  read as the option left out (the default principal, the arguments unedited).
* A host to listen on is an IP address or a host name (RFC 1123), checked before anything
  resolves it."""

from __future__ import annotations

import argparse
import errno
import ipaddress
import math
import os
import re
import sys
from typing import Any, NoReturn

from oarlock._render import line

__all__ = [
    "MAX_EXPIRES_IN",
    "MAX_LIMIT",
    "OneCommand",
    "Parser",
    "concurrency",
    "edit_json",
    "host",
    "limit",
    "path",
    "principal",
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


def principal(value: str) -> str:
    """A principal's name (``--as``): valid UTF-8, not empty or blank."""
    value = text(value)
    if not value.strip():
        raise argparse.ArgumentTypeError(
            "a principal's name cannot be empty; give one, or leave the option out for the "
            "default"
        )
    return value


def edit_json(value: str) -> str:
    """The edited arguments (``--edit``): valid UTF-8, not empty or blank (the JSON itself
    is read when the decision is made)."""
    value = text(value)
    if not value.strip():
        raise argparse.ArgumentTypeError(
            "cannot be empty; give the edited arguments as a JSON object, or leave the option "
            "out to approve the arguments as they are"
        )
    return value


_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?", re.ASCII)


def host(value: str) -> str:
    """A host to listen on: an IP address (IPv6 with or without brackets) or a host name,
    labels of ASCII letters, digits and inner hyphens (at most 63 each, 253 in all) joined
    by dots (a final dot allowed); a name that would be an IPv4 address (all digits) must be
    one."""
    if not value:
        raise argparse.ArgumentTypeError(
            "a host cannot be empty; give 127.0.0.1, 0.0.0.0 (every IPv4 address), :: or a name"
        )
    bracketed = value.startswith("[") and value.endswith("]")
    try:
        address = ipaddress.ip_address(value[1:-1] if bracketed else value)
    except ValueError:
        address = None
    if bracketed and not isinstance(address, ipaddress.IPv6Address):
        raise argparse.ArgumentTypeError(f"{line(value)} is not an IPv6 address in brackets")
    if address is not None:
        return str(address)
    name = value[:-1] if value.endswith(".") else value
    labels = name.split(".")
    if len(name) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise argparse.ArgumentTypeError(
            f"{line(value)} is not an IP address or a host name (labels of letters, digits "
            "and inner hyphens, 1 to 63 characters, joined by single dots)"
        )
    if all(label.isdigit() for label in labels):
        raise argparse.ArgumentTypeError(f"{line(value)} is not a valid IPv4 address")
    return value

"""The ``oarlock`` command in this process: ``oarlock.cli.main(argv)`` with standard output
and error replaced by strict UTF-8 streams (so that a character the command cannot encode
fails the test unless the command made the stream forgiving), each optionally a terminal."""

from __future__ import annotations

import io
import sys
from dataclasses import dataclass

from oarlock.cli import main


class Stream(io.TextIOWrapper):
    """A strict UTF-8 text stream over bytes in memory; ``tty`` says whether it claims
    to be a terminal."""

    def __init__(self, *, tty: bool = False) -> None:
        super().__init__(io.BytesIO(), encoding="utf-8", errors="strict", write_through=True)
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty

    def text(self) -> str:
        self.flush()
        raw = self.buffer
        assert isinstance(raw, io.BytesIO)
        return raw.getvalue().decode("utf-8")


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    @property
    def both(self) -> str:
        return self.out + self.err


def call(argv: list[str], *, tty_out: bool = False, tty_err: bool = False) -> Result:
    """Run ``oarlock ARGV`` in this process: its exit status (a usage error's
    ``SystemExit`` included) and what it wrote."""
    out, err = Stream(tty=tty_out), Stream(tty=tty_err)
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        try:
            code = main(argv)
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
    finally:
        sys.stdout, sys.stderr = saved
    return Result(code, out.text(), err.text())

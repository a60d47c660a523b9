"""An option given a value must be given one: ``approve --edit ''`` and ``--as ''`` are
usage errors naming the option, never read as the option left out (the arguments approved
as they are, the default principal); ``serve --host`` takes an IP address or a host name,
and refuses anything else as a usage error, before anything resolves it (no traceback)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from oarlock.cli import build_parser, main


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The usage error ``argv`` gets (exit status 2), as printed."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


DECISIONS = [
    ["approve", "run-1", "call-1"],
    ["deny", "run-1", "call-1", "--reason", "no"],
    ["respond", "run-1", "call-1", "the answer"],
]


@pytest.mark.parametrize("value", ["", " ", "\t\n"])
def test_approve_with_an_empty_edit_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    db = tmp_path / "runs.db"
    err = refused(["--db", str(db), "approve", "run-1", "call-1", "--edit", value], capsys)
    assert "oarlock approve: error: argument --edit: cannot be empty" in err
    assert "give the edited arguments as a JSON object" in err
    assert not db.exists()  # refused before any store is opened, nothing decided


@pytest.mark.parametrize("command", DECISIONS, ids=lambda c: c[0])
@pytest.mark.parametrize("value", ["", "   "])
def test_deciding_as_an_empty_principal_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str], value: str
) -> None:
    db = tmp_path / "runs.db"
    err = refused(["--db", str(db), *command, "--as", value], capsys)
    assert f"oarlock {command[0]}: error: argument --as: a principal's name cannot be empty" in err
    assert not db.exists()


def test_given_values_still_parse() -> None:
    args = build_parser().parse_args(
        ["approve", "r", "c", "--edit", '{"amount": 5}', "--as", "alice"]
    )
    assert (args.edit, args.principal) == ('{"amount": 5}', "alice")
    args = build_parser().parse_args(["deny", "r", "c", "--reason", "x", "--as", "user:bob"])
    assert args.principal == "user:bob"
    args = build_parser().parse_args(["approve", "r", "c"])
    assert (args.edit, args.principal) == (None, None)  # left out: the defaults apply


def test_an_edit_that_is_not_utf8_is_still_refused(capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(["approve", "r", "c", "--edit", "{\udcff}"], capsys)
    assert "argument --edit:" in err and "not valid UTF-8" in err


BAD_HOSTS = [
    "a..b",
    "",
    ".",
    "..",
    ".a",
    "-a",
    "a-",
    "a_b",
    "a b",
    "a\x00b",
    "bücher.example",  # a name is given in ASCII (xn--bcher-kva.example)
    "x" * 64,
    ".".join(["a" * 63] * 4) + ".b",  # 256 characters
    "1.2.3.256",
    "01.2.3.4",
    "1.2.3",
    "[a..b]",
    "[1.2.3.4]",
    "[::1",
    "::1::",
    "host:8080",
]


@pytest.mark.parametrize("value", BAD_HOSTS)
def test_serve_refuses_a_host_that_is_no_address_or_name(
    capsys: pytest.CaptureFixture[str], value: str
) -> None:
    with pytest.raises(SystemExit) as info:  # the parser alone: no server ever starts
        build_parser().parse_args(["serve", "--host", value])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "oarlock serve: error: argument --host:" in err
    assert "UnicodeError" not in err and "idna" not in err


@pytest.mark.parametrize(
    ("value", "read"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("0.0.0.0", "0.0.0.0"),
        ("::", "::"),
        ("::1", "::1"),
        ("[::1]", "::1"),
        ("0:0:0:0:0:0:0:1", "::1"),
        ("localhost", "localhost"),
        ("api.example.com.", "api.example.com."),
        ("xn--bcher-kva.example", "xn--bcher-kva.example"),
        ("a-b.c9", "a-b.c9"),
        ("x" * 63, "x" * 63),
        ("1.2.3.4a", "1.2.3.4a"),
    ],
)
def test_serve_takes_addresses_and_host_names(value: str, read: str) -> None:
    assert build_parser().parse_args(["serve", "--host", value]).host == read


def test_the_attack_of_the_issue_gets_a_usage_error_not_a_traceback(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "oarlock.cli", "--db", str(tmp_path / "x.db"), "serve",
         "--host", "a..b", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )  # fmt: skip
    assert done.returncode == 2, done
    assert "Traceback" not in done.stderr
    assert "argument --host: a..b is not an IP address or a host name" in done.stderr
    assert not (tmp_path / "x.db").exists()

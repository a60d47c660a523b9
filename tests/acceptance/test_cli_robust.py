"""Arguments that break a rule are refused with one line naming the rule, never a
traceback; an exception no rule names still prints one line (the traceback only with
``OARLOCK_DEBUG=1``); output never fails to encode; and every ``--json`` output speaks
camelCase."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.acceptance.inproc import call
from tests.acceptance.test_cli_governance import claim_a_lookup
from tests.acceptance.test_cli_runs import CALL, Cli, leave_waiting

from oarlock.demo import AGENT_FILE
from oarlock.store import SQLiteStore

TIMEOUT = 60


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Cli, str]:
    """A database with a completed demo run and one left waiting, shared by the tests
    that change nothing (each checks that they did not)."""
    cli = Cli(tmp_path_factory.mktemp("robust"))
    cli.ok("demo", "--yes")
    return cli, leave_waiting(cli)


def raw(cli: Cli, *argv: bytes) -> subprocess.CompletedProcess[bytes]:
    """The command with arguments as bytes (not all of them UTF-8), as a shell passes them."""
    return subprocess.run(
        [sys.executable, "-m", "oarlock.cli", "--db", str(cli.db), *argv],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=TIMEOUT,
        env=cli.env,
        check=False,
    )


@pytest.mark.parametrize(
    ("argv", "where"),
    [
        ([b"runs", b"show", b"r\xff\xfe"], b"argument RUN_ID: r\\xff\\xfe is not valid UTF-8"),
        ([b"runs", b"export", b"\xc3"], b"argument RUN_ID: \\xc3 is not valid UTF-8"),
        ([b"resume", b"\x80"], b"argument RUN_ID"),
        ([b"approve", b"RUN", b"c\xff"], b"argument CALL_ID: c\\xff is not valid UTF-8"),
        ([b"deny", b"RUN", b"c", b"--reason", b"\xff"], b"argument --reason"),
        ([b"receipts", b"show", b"\xff"], b"argument INVOCATION_ID"),
        ([b"receipts", b"list", b"--run", b"\xff"], b"argument --run"),
        ([b"runs", b"list", b"--tag", b"k=\xff"], b"argument --tag: k=\\xff is not valid UTF-8"),
        ([b"run", str(AGENT_FILE).encode(), b"input \xff"], b"argument INPUT"),
        ([b"run", str(AGENT_FILE).encode(), b"ok", b"--tag", b"t\xff=1"], b"argument --tag"),
        ([b"run", b"agent-\xff.yaml", b"ok"], b"(the path is stored with the run)"),
        ([b"approve", b"RUN", b"c", b"--as", b"ops:\xff"], b"argument --as"),
    ],
)
def test_arguments_that_are_not_utf8_are_usage_errors(
    shared: tuple[Cli, str], argv: list[bytes], where: bytes
) -> None:
    cli, waiting = shared
    argv = [waiting.encode() if a == b"RUN" else a for a in argv]
    before = cli.snapshot(waiting)
    out = raw(cli, *argv)
    assert out.returncode == 2, out
    assert b"Traceback" not in out.stderr + out.stdout
    last = out.stderr.decode("utf-8").splitlines()[-1]
    assert last.startswith("oarlock ") and ": error: " in last, out.stderr
    assert where in out.stderr
    assert cli.snapshot(waiting) == before


def test_a_database_path_that_is_not_utf8_is_fine(tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    folder = os.fsencode(tmp_path)
    missing = subprocess.run(
        [sys.executable, "-m", "oarlock.cli", "--db", folder + b"/runs-\xff.db", "runs", "list"],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=TIMEOUT,
        env=cli.env,
        check=False,
    )
    assert missing.returncode == 1
    assert missing.stderr == b"oarlock: no database at " + folder + b"/runs-\\xff.db\n"
    made = subprocess.run(
        [sys.executable, "-m", "oarlock.cli", "--db", folder + b"/runs-\xff.db", "demo"],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=TIMEOUT,
        env=cli.env,
        check=False,
    )
    assert made.returncode == 0, made
    assert os.path.exists(folder + b"/runs-\xff.db")
    assert b"runs-\\xff.db" in made.stdout


@pytest.mark.parametrize(
    "value", ["nan", "-nan", "inf", "-inf", "1e308", "31622401", "-5", "0", "-0", "", "soon"]
)
def test_approve_refuses_an_expiry_that_is_not_a_sensible_number_of_seconds(
    shared: tuple[Cli, str], value: str
) -> None:
    cli, waiting = shared
    before = cli.snapshot(waiting)
    out = cli("approve", waiting, CALL, f"--expires-in={value}")
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr
    assert out.stderr.splitlines()[-1].startswith("oarlock approve: error: argument --expires-in")
    if value not in ("", "soon"):
        assert "above 0 and at most 31622400 (366 days)" in out.stderr
    assert cli.snapshot(waiting) == before


def test_approve_takes_a_short_expiry(waiting_cli: tuple[Cli, str]) -> None:
    cli, waiting = waiting_cli
    cli.make_key()  # another process acts on the approval: it is signed by a kept key
    out = cli("approve", waiting, CALL, "--expires-in", "1.5", "--no-resume")
    assert out.returncode == 0, out.stderr

    async def approval() -> str | None:
        async with SQLiteStore(cli.db) as store:
            found, _ = await store.governance().approval_for(waiting, CALL)
            return found.expires_at

    assert asyncio.run(approval()) is not None


@pytest.fixture
def waiting_cli(tmp_path: Path) -> tuple[Cli, str]:
    cli = Cli(tmp_path)
    return cli, leave_waiting(cli)


@pytest.mark.parametrize("value", ["0", "-1", "1000001", "99999999999999999999999", "nan", "2.5"])
@pytest.mark.parametrize("command", [["runs", "list"], ["receipts", "list"]])
def test_a_limit_must_be_a_sensible_whole_number(
    shared: tuple[Cli, str], command: list[str], value: str
) -> None:
    cli, _ = shared
    out = cli(*command, "--limit", value)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "argument --limit" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize(
    "edit",
    [
        '{"order_id": "A-1001", "amount": NaN, "reason": "x"}',
        '{"order_id": "A-1001", "amount": Infinity, "reason": "x"}',
        '{"order_id": "A-1001", "amount": 1e999, "reason": "x"}',
        "[" * 100_000,
    ],
    ids=["nan", "infinity", "overflow", "deep"],
)
def test_an_edit_must_be_plain_json(shared: tuple[Cli, str], edit: str) -> None:
    cli, waiting = shared
    before = cli.snapshot(waiting)
    out = cli("approve", waiting, CALL, "--edit", edit)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stderr.startswith("oarlock: --edit ")
    assert cli.snapshot(waiting) == before


@pytest.mark.parametrize("where", [".", "..", "", "folder"])
def test_keys_create_refuses_a_folder_for_the_keys_file(tmp_path: Path, where: str) -> None:
    (tmp_path / "folder").mkdir()
    target = str(tmp_path / where) if where else str(tmp_path) + "/"
    out = call(["keys", "create", target, "--no-trust"])
    assert out.code == 2, out
    assert out.err.startswith("oarlock: ") and "is a folder: name the key's file" in out.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder"]  # nothing written


def test_keygen_into_a_folder_that_is_not_there(tmp_path: Path) -> None:
    out = call(["audit", "keygen", str(tmp_path / "keys" / "k.pem")])
    assert out.code == 1, out
    assert out.err == (
        f"oarlock: cannot write the key to {tmp_path / 'keys' / 'k.pem'}: No such file or "
        "directory (the key's folder must exist)\n"
    )
    (tmp_path / "plain").write_text("x")
    out = call(["audit", "keygen", str(tmp_path / "plain" / "k.pem")])
    assert out.code == 1 and out.err.startswith("oarlock: cannot write the key to "), out


def test_a_checkpoint_that_cannot_be_written_leaves_the_database_alone(
    shared: tuple[Cli, str], tmp_path: Path
) -> None:
    cli, _ = shared
    key = tmp_path / "k.pem"
    cli.ok("audit", "keygen", str(key))
    before = json.loads(cli.ok("audit", "verify", "--json"))
    out = cli("audit", "checkpoint", "--key", str(key), "--out", str(tmp_path / "no" / "c.json"))
    assert out.returncode == 1, (out.stdout, out.stderr)
    assert out.stderr.startswith("oarlock: cannot write the checkpoint to ")
    assert json.loads(cli.ok("audit", "verify", "--json")) == before


def _boom(args: Any, store: Any) -> int:
    raise RuntimeError("the disk said \x1b[2Jno\nFORGED")


def test_an_unexpected_error_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from oarlock.cli import _runs

    with SQLiteStore(tmp_path / "runs.db"):
        pass
    monkeypatch.delenv("OARLOCK_DEBUG", raising=False)
    monkeypatch.setitem(_runs._READS, "runs list", _boom)
    out = call(["--db", str(tmp_path / "runs.db"), "runs", "list"])
    assert out.code == 1
    assert out.out == ""
    assert out.err == (
        "oarlock: unexpected error: RuntimeError: the disk said \\x1b[2Jno\\nFORGED "
        "(OARLOCK_DEBUG=1 shows where)\n"
    )
    monkeypatch.setenv("OARLOCK_DEBUG", "1")
    debug = call(["--db", str(tmp_path / "runs.db"), "runs", "list"])
    assert debug.code == 1
    assert debug.err.startswith("Traceback (most recent call last):")
    assert "in _boom" in debug.err
    assert "\x1b" not in debug.err


def test_output_never_fails_to_encode(shared: tuple[Cli, str]) -> None:
    cli, _ = shared
    run = cli("run", str(AGENT_FILE), "Café ☕ A-1001 \u202e", "--tag", "who=Zoë")
    assert run.returncode == 0, run.stderr
    [found] = cli.runs("--tag", "who=Zoë")
    cli.env["PYTHONIOENCODING"] = "ascii:strict"
    try:
        shown = cli("runs", "show", found["id"])
        listed = cli("runs", "list", "--tag", "who=Zoë")
    finally:
        del cli.env["PYTHONIOENCODING"]
    assert shown.returncode == 0, shown.stderr
    assert "user: Caf\\xe9 \\u2615 A-1001 \\u202e" in shown.stdout
    assert listed.returncode == 0, listed.stderr
    assert "who=Zo\\xeb" in listed.stdout


CAMEL = re.compile(r"^[a-z][a-zA-Z0-9]*$")
DATA = {"arguments", "editedArguments", "tags", "details", "metadata"}  # caller-chosen keys


def snake_keys(value: Any, where: str = "") -> list[str]:
    """The members of ``value`` (JSON) not in camelCase, outside caller-chosen data."""
    found = []
    if isinstance(value, dict):
        for key, item in value.items():
            if not CAMEL.fullmatch(key):
                found.append(f"{where}/{key}")
            if key not in DATA:
                found += snake_keys(item, f"{where}/{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += snake_keys(item, f"{where}/{i}")
    return found


def test_every_json_output_speaks_camel_case(tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    cli.ok("demo", "--yes")
    (run,) = cli.runs()

    async def open_claim() -> None:
        async with SQLiteStore(cli.db) as store:
            owner = f"{socket.gethostname()}:999999999:0"
            await claim_a_lookup(store.governance(), "k-open", owner)

    asyncio.run(open_claim())
    exported = tmp_path / "run.json"
    exported.write_text(cli.ok("runs", "export", run["id"]))
    key = tmp_path / "k.pem"
    cli.ok("audit", "keygen", str(key))
    receipt = json.loads(cli.ok("receipts", "list", "--json"))[0]["invocationId"]
    outputs = {
        "runs list --json": cli.ok("runs", "list", "--json"),
        "runs export": cli.ok("runs", "export", run["id"]),
        "receipts list --json": cli.ok("receipts", "list", "--json"),
        "receipts list --open --json": cli.ok("receipts", "list", "--open", "--json"),
        "receipts show --json": cli.ok("receipts", "show", receipt, "--json"),
        "audit checkpoint": cli.ok("audit", "checkpoint", "--key", str(key)),
        "audit verify --json": cli.ok("audit", "verify", "--json"),
        "validate --json": cli.ok("validate", "--json", str(exported)),
    }
    for name, text in outputs.items():
        value = json.loads(text)
        assert value, name
        assert snake_keys(value) == [], name
    (claim,) = json.loads(outputs["receipts list --open --json"])
    assert {"invocationId", "idempotencyKey", "claimedAt", "leaseUntil", "ownerState"} <= set(claim)
    assert {"createdAt", "updatedAt"} <= set(json.loads(outputs["runs list --json"])[0])

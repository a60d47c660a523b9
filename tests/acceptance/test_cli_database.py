"""The run database as the command opens it: created private (0600, in folders made 0700)
whatever the umask, never created by a command that needs one, refused with a clear line
when its path cannot be used, and a run another process is driving is said to be so."""

from __future__ import annotations

import json
import os
import re
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.acceptance.inproc import call
from tests.acceptance.test_cli_runs import CALL, Cli

from oarlock.demo import AGENT_FILE
from oarlock.store import SQLiteStore

TIMEOUT = 60


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def test_a_new_database_is_private_whatever_the_umask(tmp_path: Path, umask_022: None) -> None:
    base = tmp_path / "base"
    base.mkdir(mode=0o755)
    db = base / "made" / "deeper" / "runs.db"
    result = call(["--db", str(db), "run", str(AGENT_FILE), "Refund A-1001"])
    assert result.code == 0, result
    assert mode(db) == 0o600
    assert mode(db.parent) == 0o700
    assert mode(db.parent.parent) == 0o700
    assert mode(base) == 0o755  # a folder that existed keeps its mode
    with SQLiteStore(db) as store:  # while open, WAL mode keeps its -wal and -shm files
        store.read_runs()
        sidecars = [Path(f"{db}-wal"), Path(f"{db}-shm")]
        assert all(p.exists() for p in sidecars)
        assert [mode(p) for p in sidecars] == [0o600, 0o600]


def test_the_store_made_from_python_is_private_too(tmp_path: Path, umask_022: None) -> None:
    db = tmp_path / "py" / "runs.db"
    with SQLiteStore(db) as store:
        store.read_runs()
        assert mode(db) == 0o600
        assert mode(Path(f"{db}-wal")) == 0o600
    assert mode(db.parent) == 0o700


def test_an_existing_database_and_folder_keep_their_modes(tmp_path: Path, umask_022: None) -> None:
    db = tmp_path / "shared" / "runs.db"
    db.parent.mkdir(mode=0o755)
    with SQLiteStore(db):
        pass
    os.chmod(db, 0o640)
    result = call(["--db", str(db), "run", str(AGENT_FILE), "Refund A-1001"])
    assert result.code == 0, result
    assert mode(db) == 0o640
    assert mode(db.parent) == 0o755


READ_ONLY = [
    ["runs", "list"],
    ["runs", "list", "--json"],
    ["runs", "show", "r1"],
    ["runs", "export", "r1"],
    ["receipts", "list"],
    ["receipts", "list", "--open", "--json"],
    ["receipts", "show", "i1"],
    ["audit", "verify"],
    ["audit", "verify", "--json"],
    # these change a run, so they need one: a database that is not there has none
    ["approve", "r1", "c1"],
    ["resume", "r1"],
    ["cancel", "r1"],
    ["replay", "r1"],
    ["receipts", "reconcile", "i1", "--as", "succeeded", "--evidence", "e"],
]


@pytest.mark.parametrize("argv", READ_ONLY, ids=" ".join)
def test_a_mistyped_database_is_reported_never_created(tmp_path: Path, argv: list[str]) -> None:
    db = tmp_path / "typo" / "runs.db"
    result = call(["--db", str(db), *argv])
    assert result.code == 1, result
    assert result.err == f"oarlock: no database at {db}\n"
    assert result.out == ""
    assert list(tmp_path.iterdir()) == []


def test_run_of_a_bad_agent_file_creates_no_database(tmp_path: Path) -> None:
    db = tmp_path / "data" / "runs.db"
    (tmp_path / "bad.yaml").write_text("name: [1]\n", "utf-8")
    for agent in (tmp_path / "missing.yaml", tmp_path / "bad.yaml"):
        result = call(["--db", str(db), "run", str(agent), "hi"])
        assert result.code == 1, result
        assert "Traceback" not in result.err
    assert not db.parent.exists()


def test_a_database_whose_folder_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("x")
    for db in (tmp_path / "plain" / "runs.db", tmp_path / "plain" / "deeper" / "runs.db"):
        result = call(["--db", str(db), "run", str(AGENT_FILE), "hi"])
        assert result.code == 1, result
        assert result.err.startswith("oarlock: cannot create the database in "), result
        assert f"{tmp_path / 'plain'} is a file, not a folder" in result.err
        listed = call(["--db", str(db), "runs", "list"])
        assert (listed.code, listed.err) == (1, f"oarlock: no database at {db}\n")


def test_a_database_that_is_a_folder_is_refused(tmp_path: Path) -> None:
    result = call(["--db", str(tmp_path), "runs", "list"])
    assert result.code == 1
    assert result.err == f"oarlock: {tmp_path} is a folder, not a database file\n"


def _unwritable(tmp_path: Path) -> Path:
    """A folder this process cannot create files in: one without write permission, or,
    for root (whom permissions do not stop), a read-only file system."""
    if os.geteuid() != 0:
        folder = tmp_path / "locked"
        folder.mkdir(mode=0o500)
        return folder
    probe = Path("/sys/oarlock-probe")
    try:
        probe.touch()
    except OSError:
        return Path("/sys")
    probe.unlink()
    pytest.skip("no unwritable folder to try (running as root with /sys writable)")


@pytest.mark.parametrize("depth", ["file", "folder"])
def test_a_database_in_an_unwritable_folder_is_refused(tmp_path: Path, depth: str) -> None:
    locked = _unwritable(tmp_path)
    db = locked / "runs.db" if depth == "file" else locked / "sub" / "runs.db"
    result = call(["--db", str(db), "run", str(AGENT_FILE), "hi"])
    assert result.code == 1, result
    expected = (
        f"oarlock: cannot create the database {db}: "
        if depth == "file"
        else f"oarlock: cannot create the folder {locked / 'sub'} for the database: "
    )
    assert result.err.startswith(expected), result
    assert "\n" not in result.err.rstrip("\n")
    assert not db.exists()


BUSY_TOOLS = '''
import os
import re
import socket
import time
from pathlib import Path

from oarlock.tools import tool


@tool(side_effect="read")
def slow(seconds: float) -> str:
    """Take a while."""
    with open(os.environ["BUSY_MARK"], "a") as mark:
        mark.write("called\\n")
    time.sleep(seconds)
    return f"slept {seconds}"
'''


def test_a_second_resume_of_a_run_another_process_drives_says_so(tmp_path: Path) -> None:
    """Process A runs a run whose first tool takes a minute. Process B resumes it meanwhile:
    A holds the run's lease, so B is refused at once, naming A and its lease's deadline, and
    runs nothing."""
    (tmp_path / "oarlock_busy_tools.py").write_text(BUSY_TOOLS)
    turns = [
        # long enough that A is still in it when B is refused, however slow the machine
        {"tool_calls": [{"name": "slow", "arguments": {"seconds": 60}}]},
        {"text": "done"},
    ]
    (tmp_path / "busy.json").write_text(json.dumps({"turns": turns}))
    agent = tmp_path / "busy.yaml"
    agent.write_text(
        "name: busy\ninstructions: x\nmodel: scripted:busy.json\ntools:\n"
        "  - oarlock_busy_tools:slow\n"
    )
    cli = Cli(tmp_path)
    mark = tmp_path / "mark"
    cli.env["BUSY_MARK"] = str(mark)
    first = subprocess.Popen(
        [sys.executable, "-m", "oarlock.cli", "--db", str(cli.db), "run", str(agent), "go"],
        env=cli.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + TIMEOUT
        while not mark.exists():
            assert time.monotonic() < deadline and first.poll() is None
            time.sleep(0.02)
        [run] = cli.runs()
        second = cli("resume", run["id"])
        assert second.returncode == 1, (second.stdout, second.stderr)
        holder = f"proc:{socket.gethostname()}:{first.pid}"
        assert re.fullmatch(
            rf"oarlock: run {run['id']} is being driven by {re.escape(holder)} until "
            r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\n",
            second.stderr,
        ), second.stderr
        assert second.stdout == ""
        assert cli.runs()[0]["status"] == "running"  # still A's
    finally:
        first.kill()
        first.wait(TIMEOUT)
    assert mark.read_text().splitlines() == ["called"]  # B did not run the tool again
    assert json.loads(cli.ok("receipts", "list", "--json")) == []  # nor refused a call


def test_the_demo_waits_in_a_private_database(tmp_path: Path, umask_022: None) -> None:
    cli = Cli(tmp_path)
    out = cli("demo")
    assert out.returncode == 0, out.stderr
    assert mode(cli.db) == 0o600
    assert mode(cli.db.parent) == 0o700
    [run] = cli.runs()
    assert cli("approve", run["id"], CALL).returncode == 0

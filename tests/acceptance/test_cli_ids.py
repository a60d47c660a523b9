"""Runs named as people name them: by the start of their id (refused when it starts
several), ``--db`` after the command as well as before it, hints that carry the database
they were given for, and a running run that nothing drives marked in the run table."""

from __future__ import annotations

import asyncio
import json
import shlex
from pathlib import Path

import pytest
from tests.acceptance.inproc import call
from tests.conftest import load_example

from oarlock.demo import AGENT_FILE
from oarlock.formats import parse_run
from oarlock.store import Event, SQLiteStore

IDS = ("abc1", "abc2", "b-7")


def seed(db: Path, *ids: str, status: str = "completed") -> None:
    """Runs with these ids (copies of an example run), nobody holding them."""

    async def go() -> None:
        async with SQLiteStore(db) as store:
            for run_id in ids:
                data = load_example("runs/refund-completed.json") | {"id": run_id}
                data["status"] = status
                created = Event("run_created", data["createdAt"], {})
                await store.create(parse_run(data), [created])

    asyncio.run(go())


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "runs.db"
    seed(path, *IDS)
    return path


@pytest.mark.parametrize("command", ["show", "export"])
def test_a_run_is_found_by_the_start_of_its_id(db: Path, command: str) -> None:
    whole = call(["--db", str(db), "runs", command, "abc2"])
    start = call(["--db", str(db), "runs", command, "abc2"[:4]])
    assert whole.code == start.code == 0, (whole, start)
    assert start.out == whole.out
    shown = call(["--db", str(db), "runs", command, "b"])
    assert shown.code == 0 and "b-7" in shown.out


@pytest.mark.parametrize("command", ["show", "export"])
def test_a_start_of_several_ids_is_refused_naming_them(db: Path, command: str) -> None:
    out = call(["--db", str(db), "runs", command, "ab"])
    assert out.code == 1 and out.out == ""
    assert "ab starts the ids of several runs (abc1, abc2): give more of it" in out.err
    assert "Traceback" not in out.err


def test_an_id_that_is_the_start_of_another_is_itself(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    seed(db, "run", "run-2")
    out = call(["--db", str(db), "runs", "export", "run"])
    assert out.code == 0 and json.loads(out.out)["id"] == "run"


@pytest.mark.parametrize("command", ["show", "export"])
def test_a_start_of_no_id_is_no_run(db: Path, command: str) -> None:
    out = call(["--db", str(db), "runs", command, "abc3"])
    assert (out.code, out.err.strip()) == (1, "oarlock: no run abc3")


def test_a_decision_finds_its_run_by_the_start_of_its_id(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    first = call(["--db", str(db), "run", str(AGENT_FILE), "Refund A-1001"])
    assert first.code == 0, first
    [run] = json.loads(call(["--db", str(db), "runs", "list", "--json"]).out)
    out = call(["--db", str(db), "deny", run["id"][:8], "call_2_1", "--reason", "no"])
    assert out.code == 0, out
    doc = json.loads(call(["--db", str(db), "runs", "export", run["id"]]).out)
    assert [d["decision"] for d in doc["decisions"]] == ["denied"]


def test_db_after_the_command_is_the_same_option(db: Path, tmp_path: Path) -> None:
    before = call(["--db", str(db), "runs", "list", "--json"])
    after = call(["runs", "list", "--json", "--db", str(db)])
    assert before.code == after.code == 0
    assert after.out == before.out and len(json.loads(after.out)) == len(IDS)
    # given both, the one after the command wins
    other = tmp_path / "other.db"
    seed(other, "zzz")
    both = call(["--db", str(db), "runs", "list", "--json", "--db", str(other)])
    assert [r["id"] for r in json.loads(both.out)] == ["zzz"]
    shown = call(["runs", "show", "abc1", "--db", str(db)])
    assert shown.code == 0 and "run abc1" in shown.out


def test_a_command_without_a_database_takes_no_db_after_it(tmp_path: Path) -> None:
    out = call(["validate", str(tmp_path), "--db", str(tmp_path / "x.db")])
    assert out.code == 2 and "unrecognized arguments: --db" in out.err


def test_the_hints_of_a_waiting_run_carry_the_database_they_were_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OARLOCK_DB", raising=False)
    db = tmp_path / "a folder" / "runs.db"
    out = call(["--db", str(db), "run", str(AGENT_FILE), "Refund A-1001"])
    assert out.code == 0, out
    [run] = json.loads(call(["--db", str(db), "runs", "list", "--json"]).out)
    command = f"oarlock --db {shlex.quote(str(db))}"
    assert f"decide with: {command} approve {run['id']} call_2_1" in out.out
    assert f"{command} deny {run['id']} call_2_1 --reason TEXT" in out.out
    # the hint, as printed, is a command that works
    hint = shlex.split(out.out.split("decide with: ")[1].split("  |")[0])
    assert call(hint[1:]).code == 0
    # a database the shell names already ($OARLOCK_DB) needs no --db
    monkeypatch.setenv("OARLOCK_DB", str(db))
    again = call(["--db", str(db), "run", str(AGENT_FILE), "Refund A-1001"])
    assert "decide with: oarlock approve " in again.out


def test_the_run_table_marks_a_running_run_nothing_drives(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    seed(db, "done-1")
    seed(db, "stuck-1", status="running")
    table = call(["--db", str(db), "runs", "list"], tty_out=True)
    assert table.code == 0
    [stuck] = [row for row in table.out.splitlines() if "stuck-1" in row]
    [done] = [row for row in table.out.splitlines() if "done-1" in row]
    assert "nobody" in stuck and "nobody" not in done
    assert "1 running run held by nobody: nothing drives it" in table.out
    # not on a terminal: the tab-separated rows, the last two fields empty
    plain = call(["--db", str(db), "runs", "list"])
    [row] = [r for r in plain.out.splitlines() if r.startswith("stuck-1\t")]
    assert row.split("\t")[-2:] == ["", ""] and "nobody" not in plain.out

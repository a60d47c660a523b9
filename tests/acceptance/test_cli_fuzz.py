"""The command line under hostile arguments, in this process (``oarlock.cli.main``).

Hypothesis builds argument lists for every command and subcommand the parser knows (found
by walking it, so a new command is fuzzed too): the command's own options in any place and
order, the real ids of a waiting run, its call and an invocation, and hostile strings
(bytes that are not UTF-8 as ``surrogateescape`` gives them, control and bidi characters,
huge numbers, ``nan``, ``inf``, negative and zero, empty strings, paths whose folder is
missing or is a file). Each example starts from a copy of one database and must end with
an exit status in {0, 1, 2, 3}, no traceback and no "unexpected error" (an exception that
no rule of oarlock's names), and, when the command was refused (1 or 2), the database
exactly as it was."""

from __future__ import annotations

import argparse
import io
import os
import shutil
import sqlite3
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.acceptance.inproc import Result, call

from oarlock.cli import build_parser
from oarlock.demo import AGENT_FILE

NEVER = {"-h", "--help", "--version"}
# demo runs the whole demo; worker, serve and temporal worker run until stopped: covered by
# their own tests
SKIP = {"demo", "worker", "serve", "temporal"}


@dataclass(frozen=True)
class Option:
    name: str
    takes_value: bool
    choices: tuple[str, ...]
    required: bool


@dataclass(frozen=True)
class Command:
    path: tuple[str, ...]
    options: tuple[Option, ...]
    positionals: int  # how many (a list of paths counts as one)


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[Command]:
    """Every leaf command of ``parser``, with its options and positional arguments."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if subs:
        for name, child in subs[0].choices.items():
            yield from _commands(child, (*path, name))
        return
    options = tuple(
        Option(name, a.nargs != 0, tuple(a.choices or ()), a.required)
        for a in parser._actions
        for name in a.option_strings
        if name not in NEVER
    )
    positionals = sum(1 for a in parser._actions if not a.option_strings)
    yield Command(path, options, positionals)


COMMANDS = [c for c in _commands(build_parser()) if c.path[0] not in SKIP]


@dataclass
class Seed:
    folder: Path
    template: Path
    run_id: str
    invocation_id: str


def _snapshot(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    conn = sqlite3.connect(db)
    try:
        tables = [
            r[0]
            for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY 1")
        ]
        return {t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in tables}
    finally:
        conn.close()


@pytest.fixture(scope="module")
def seed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seed]:
    folder = tmp_path_factory.mktemp("fuzz")
    template = folder / "template.db"
    with pytest.MonkeyPatch.context() as mp:
        for name in ("OARLOCK_DB", "OARLOCK_PRINCIPAL", "OARLOCK_DEBUG"):
            mp.delenv(name, raising=False)
        mp.setenv("XDG_DATA_HOME", str(folder / "xdg"))
        mp.chdir(folder)
        (folder / "afile").write_text("not a folder\n")
        done = call(["--db", str(template), "demo", "--yes"])  # a completed run, receipts
        assert done.code == 0, done
        left = call(["--db", str(template), "demo"])  # a run waiting for call_2_1
        assert left.code == 0 and "left waiting" in left.out, left
        conn = sqlite3.connect(template)
        (run_id,) = conn.execute("SELECT id FROM runs WHERE status = 'waiting_approval'").fetchone()
        (invocation_id,) = conn.execute("SELECT invocation_id FROM invocations LIMIT 1").fetchone()
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
        yield Seed(folder, template, run_id, invocation_id)


def _not_utf8(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


hostile_text = st.text(
    alphabet=st.characters(
        codec=None, exclude_characters="/", exclude_categories=("Cs",)
    )
    | st.sampled_from(["\x1b", "\x07", "\x9b", "\u202e", "\u200b", "\n", "\r", "\x00", "["]),
    max_size=12,
)
TOKENS = st.one_of(
    hostile_text,
    st.binary(max_size=8).map(_not_utf8),
    st.sampled_from(
        [
            "",
            "nan",
            "-nan",
            "inf",
            "-inf",
            "1e308",
            "1e-320",
            "-5",
            "0",
            "-0",
            "99999999999999999999999999999",
            "9" * 5000,
            "0x10",
            "{}",
            '{"order_id": "A-1001", "amount": 1e999, "reason": "x"}',
            '{"order_id": NaN}',
            "[" * 3000,
            "k=v",
            "=v",
            "k=",
            "-",
            ".",
            "..",
            "afile",
            "afile/x",
            "keys/k.pem",
            "k.pem",
            "new/db.sqlite",
            "call_2_1",
            "call_9_9",
            "succeeded",
            "not-applied",
            "Succeeded",
            "waiting_approval",
            "run",
            "auto",
            "oar/0.1",
            "--",
            "-x",
            "--nope",
        ]
    ),
)


@st.composite
def argvs(draw: st.DrawFn, seed: Seed) -> list[str]:
    """A command, then: its positional arguments (real ids or hostile tokens) and some of
    its options with values (a choice or a hostile token); or, one time in three, any
    tokens at all in any order (options without values, values without options)."""
    command = draw(st.sampled_from(COMMANDS))
    real = st.sampled_from(
        [seed.run_id, "call_2_1", seed.invocation_id, "refund-desk.yaml", "run.json", "bad.json"]
    )
    value = st.one_of(real, TOKENS)
    if draw(st.integers(0, 2)) == 0:
        names = [o.name for o in command.options] + ["--json", "--db", "--"]
        tokens = draw(st.lists(st.one_of(value, st.sampled_from(names)), max_size=7))
    else:
        tokens = draw(st.lists(value, min_size=command.positionals, max_size=command.positionals))
        chosen = [o for o in command.options if o.required and draw(st.integers(0, 9))]
        if command.options:
            chosen += draw(st.lists(st.sampled_from(command.options), max_size=3))
        for option in chosen:
            tokens.append(option.name)
            if option.takes_value:
                choice = st.sampled_from(option.choices) if option.choices else value
                tokens.append(draw(st.one_of(choice, value)))
        tokens = draw(st.permutations(tokens)) if draw(st.integers(0, 3)) == 0 else tokens
    prefix: list[str] = []
    if draw(st.integers(0, 9)) == 0:  # another database, missing or in a bad place
        prefix = ["--db", draw(st.sampled_from(["missing.db", "afile/x.db", "afile", "new/x.db"]))]
    return [*prefix, *command.path, *[t for t in tokens if t not in NEVER]]


@pytest.fixture(scope="module")
def workdir(seed: Seed) -> Iterator[Path]:
    with pytest.MonkeyPatch.context() as mp:
        for name in ("OARLOCK_DB", "OARLOCK_PRINCIPAL", "OARLOCK_DEBUG"):
            mp.delenv(name, raising=False)
        mp.setenv("XDG_DATA_HOME", str(seed.folder / "xdg"))
        mp.setenv("COLUMNS", "120")
        work = seed.folder / "work"
        work.mkdir()
        (work / "afile").write_text("not a folder\n")
        # a copy of the demo agent: a command may write where it is told, never into oarlock
        for source in AGENT_FILE.parent.glob("refund-desk*.yaml"):
            shutil.copyfile(source, work / source.name)
        exported = call(["--db", str(seed.template), "runs", "export", seed.run_id])
        assert exported.code == 0, exported
        (work / "run.json").write_text(exported.out)
        (work / "bad.json").write_text('{"format": "oar/0.2", "id": "\\u001b[2J"}')
        mp.chdir(work)
        mp.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"")))
        yield work


def _fresh(seed: Seed, work: Path) -> Path:
    db = work / "runs.db"
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(seed.template, db)
    return db


def check(result: Result, argv: list[str]) -> None:
    assert result.code in (0, 1, 2, 3), (argv, result)
    for text in (result.out, result.err):
        assert "Traceback" not in text, (argv, result)
        assert "unexpected error" not in text, (argv, result)


@settings(
    max_examples=int(os.environ.get("OARLOCK_FUZZ_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_no_argument_list_makes_a_traceback_or_changes_a_refused_database(
    seed: Seed, workdir: Path, data: st.DataObject
) -> None:
    argv = data.draw(argvs(seed), label="argv")
    db = _fresh(seed, workdir)
    before = _snapshot(db)
    result = call(["--db", str(db), *argv])
    check(result, argv)
    if result.code in (1, 2) and argv[:1] != ["replay"]:  # replay's 1 is a divergence
        assert _snapshot(db) == before, (argv, result)


def test_the_fuzzer_reaches_every_command() -> None:
    names = {" ".join(c.path) for c in COMMANDS}
    assert {"run", "runs list", "runs show", "approve", "receipts reconcile", "audit keygen",
            "validate", "upgrade", "workers"} <= names
    assert all(o.name not in NEVER for c in COMMANDS for o in c.options)

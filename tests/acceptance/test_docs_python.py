"""The code in the documentation runs: every ``python`` and ``console`` block of
``docs/python.md``, and every ``python`` block of the README, is run offline, in an empty
folder of its own per document, in the document's order; the output a document shows is
compared with what the block printed.

What a block is, is said by markers: an HTML comment on the line right above its fence.

- no marker: a ``python`` block runs as a script of its own (a fresh namespace, named
  ``__main__``), in this process;
- ``<!-- continue -->``: it runs on in the namespace of the block before it;
- ``<!-- process -->``: it runs as a script in a new Python process (``python FILE``, in the
  folder, which is then on its import path);
- ``<!-- file: NAME -->``: it is not run but written to ``NAME`` in the folder, where the
  blocks after it import it;
- ``<!-- output -->`` above a block of any language: that block is the output of the block
  before it. ``...`` stands for any text, as in a doctest with ELLIPSIS.

A ``console`` block holds commands (lines starting ``$ ``), each followed by its output;
each runs in ``bash`` in the folder, with this interpreter's ``oarlock`` first on the PATH,
and must succeed.
"""

from __future__ import annotations

import contextlib
import doctest
import io
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYTHON_DOC = ROOT / "docs" / "python.md"
README = ROOT / "README.md"
TIMEOUT = 60

_FENCE = re.compile(r"^```(\S*)\s*$")
_MARK = re.compile(r"^<!-- (continue|process|output|file: [\w.-]+) -->$")
_COMMENT = re.compile(r"^<!-- [\w:. -]+ -->$")  # what looks like a marker


@dataclass
class Block:
    """A fenced block: where its code starts (``FILE:LINE``), its language, its code, its
    markers and the output the document shows for it (None when it shows none)."""

    where: str
    lang: str
    code: str
    marks: list[str] = field(default_factory=list)
    output: str | None = None


def blocks(
    doc: Path, langs: tuple[str, ...] = ("python", "console"), *, strict: bool = True
) -> list[Block]:
    """The blocks of ``doc`` in ``langs``, with their markers and shown outputs. A marker
    that stands above no block is an error, and so is (``strict``) a comment that looks
    like a marker and is none: a typo would otherwise leave a block untested."""
    lines = doc.read_text("utf-8").splitlines()
    found: list[Block] = []
    marks: list[str] = []
    i = 0
    while i < len(lines):
        text = lines[i].strip()
        fence = _FENCE.match(lines[i])
        if (mark := _MARK.match(text)) is not None:
            marks.append(mark.group(1))
        elif fence is not None and fence.group(1):
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            body = "\n".join(lines[i + 1 : end]) + "\n"
            where = f"{doc.name}:{i + 2}"
            if "output" in marks:
                assert found and found[-1].output is None, f"{where}: an output of no block"
                found[-1].output = body
            elif fence.group(1) in langs:
                found.append(Block(where, fence.group(1), body, marks))
            marks, i = [], end
        else:
            assert not marks, f"{doc.name}:{i + 1}: markers {marks} stand above no block"
            assert not (strict and _COMMENT.match(text)), (
                f"{doc.name}:{i + 1}: unknown marker {text}"
            )
        i += 1
    return found


def _same(block: Block, got: str) -> None:
    """The printed output is the one the document shows (``...`` matching any text)."""
    if block.output is None:
        return
    checker = doctest.OutputChecker()
    if not checker.check_output(block.output, got, doctest.ELLIPSIS):
        pytest.fail(f"{block.where}: the output differs\nshown:\n{block.output}\nprinted:\n{got}")


def _env(folder: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OARLOCK_")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.pop("PYTHONPATH", None)
    env["HOME"] = str(folder)
    return env


def _process(block: Block, folder: Path, argv: list[str]) -> str:
    done = subprocess.run(
        argv, cwd=folder, env=_env(folder), capture_output=True, text=True, timeout=TIMEOUT,
        check=False,
    )  # fmt: skip
    if done.returncode != 0:
        pytest.fail(f"{block.where}: exit status {done.returncode}\n{done.stdout}\n{done.stderr}")
    return done.stdout


def _console(block: Block, folder: Path) -> None:
    """Each ``$ `` command of the block, with the output shown under it."""
    commands: list[tuple[str, list[str]]] = []
    for line in block.code.splitlines():
        if line.startswith("$ "):
            commands.append((line[2:], []))
        else:
            assert commands, f"{block.where}: output before any command"
            commands[-1][1].append(line)
    for command, shown in commands:
        got = _process(block, folder, ["bash", "-c", command])
        output = "\n".join(shown) + "\n" if shown else None  # nothing shown: not compared
        step = Block(block.where, "console", command, output=output)
        _same(step, got)


class Runner:
    """Runs one document's blocks in order, in ``folder``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.namespace: dict[str, Any] = {}

    def run(self, block: Block) -> None:
        file = next((m[len("file: ") :] for m in block.marks if m.startswith("file: ")), None)
        if file is not None:
            compile(block.code, block.where, "exec")
            (self.folder / file).write_text(block.code, "utf-8")
        elif block.lang == "console":
            _console(block, self.folder)
        elif "process" in block.marks:
            script = self.folder / f"block_{block.where.rpartition(':')[2]}.py"
            script.write_text(block.code, "utf-8")
            _same(block, _process(block, self.folder, [sys.executable, str(script)]))
        else:
            if "continue" not in block.marks:
                self.namespace = {"__name__": "__main__"}
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                exec(compile(block.code, block.where, "exec"), self.namespace)
            _same(block, printed.getvalue())


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """An empty working folder on the import path; the modules the blocks wrote and
    imported are forgotten after the test."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [k for k in os.environ if k.startswith("OARLOCK_")]:
        monkeypatch.delenv(name)
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        origin = getattr(sys.modules[name], "__file__", None) or ""
        if origin.startswith(str(tmp_path)):
            del sys.modules[name]


def test_every_block_of_the_python_guide_runs_and_prints_what_it_shows(folder: Path) -> None:
    found = blocks(PYTHON_DOC)
    assert len(found) >= 15, "the guide's blocks were not found"
    assert sum(b.output is not None for b in found) >= 12
    runner = Runner(folder)
    for block in found:
        runner.run(block)


def test_the_readme_python_blocks_run_as_written(folder: Path) -> None:
    found = blocks(README, ("python",), strict=False)  # it has the CI's markers too
    assert len(found) == 3 and "await runner.start(" in found[0].code
    for example in ("runs",):
        target = folder / "examples" / example
        target.mkdir(parents=True)
        for path in (ROOT / "examples" / example).iterdir():
            (target / path.name).write_bytes(path.read_bytes())
    runner = Runner(folder)
    for block in found:
        runner.run(block)


def test_a_block_that_prints_something_else_than_shown_fails(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("```python\nprint('a')\n```\n<!-- output -->\n```text\nb\n```\n")
    [block] = blocks(doc)
    assert block.output == "b\n"
    with pytest.raises(pytest.fail.Exception, match="the output differs"):
        Runner(tmp_path).run(block)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("<!-- contniue -->\n```python\npass\n```\n", "unknown marker"),
        ("<!-- continue -->\n\nSome text.\n", "stand above no block"),
        ("<!-- output -->\n```text\nb\n```\n", "an output of no block"),
    ],
)
def test_a_marker_that_would_leave_a_block_untested_is_refused(
    tmp_path: Path, text: str, problem: str
) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(text)
    with pytest.raises(AssertionError, match=problem):
        blocks(doc)

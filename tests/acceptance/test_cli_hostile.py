"""Data that did not come from oarlock reaches a terminal only through the renderer.

One run holds hostile text everywhere a model, a tool, a caller or a file can put it: the
model's text, tool names and call ids it chose, tool arguments, results and errors, the run
input, tag keys and values, a failed run's error, a decision's principal and reason; ids
and file names given on the command line are hostile too. The text carries a window-title
change (OSC 0 ending in BEL), a screen clear (CSI), an OSC 8 hyperlink, a C1 CSI
(U+009B), bidirectional overrides, zero-width characters, a carriage return and a newline
that would forge an output line, and Rich markup. Every command's output (standard output
and error, text and JSON, and the run table on a terminal) must hold none of those
characters raw, forge no line, and show the markup as text."""

from __future__ import annotations

import json
import re
import shutil
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.acceptance.inproc import Result, call

H = (
    "\x1b]0;pwned\x07"  # window title
    "\x1b[2J\x1b[H"  # clear the screen
    "\x1b]8;;http://evil.example\x1b\\click\x1b]8;;\x1b\\"  # a hyperlink
    "\x9b31m"  # C1 CSI
    "\u202e\u2066"  # bidi overrides
    "\u200b\ufeff"  # zero-width
    "\r\nFORGED line "  # a line of its own
    "[link=http://evil.example]markup[/link][bold]b[/bold]"  # Rich markup
)
MARKUP = "[link=http://evil.example]markup[/link]"
HID = "id-" + H  # an id given on the command line
TAG_KEY = "k" + H.replace("=", ":")  # a tag's key ends at its first "="

TOOLS = '''
from oarlock.tools import tool


@tool(side_effect="read")
def echo(text: str) -> str:
    """Return the text."""
    return text


@tool(side_effect="read")
def explode(text: str) -> str:
    """Fail with the text."""
    raise RuntimeError(text)


@tool(side_effect="spend")
def pay(note: str) -> str:
    """Pay, with a note."""
    return "paid: " + note
'''


def unsafe(text: str) -> list[str]:
    """The characters of ``text`` that must never reach a terminal raw (newline and tab
    are layout)."""
    return sorted(
        {
            f"U+{ord(ch):04X}"
            for ch in text
            if ch not in "\n\t"
            and (unicodedata.category(ch) in ("Cc", "Cs", "Cf") or ch in "\u2028\u2029")
        }
    )


def assert_safe(result: Result) -> None:
    for name, text in (("stdout", result.out), ("stderr", result.err)):
        assert unsafe(text) == [], (name, text)
        forged = [ln for ln in text.split("\n") if ln.startswith("FORGED")]
        assert forged == [], (name, text)
        assert "Traceback" not in text
        if "markup" in text:  # the markup is shown as text, not read
            assert "]markup[" in text, (name, text)
    assert result.code in (0, 1, 2, 3), result


def agent(folder: Path, name: str, turns: list[dict[str, Any]]) -> Path:
    (folder / f"{name}.json").write_text(json.dumps({"turns": turns}))
    path = folder / f"{name}.yaml"
    path.write_text(
        f"name: {name}\ninstructions: x\nmodel: scripted:{name}.json\ntools:\n"
        "  - oarlock_hostile_tools:echo\n  - oarlock_hostile_tools:explode\n"
        "  - oarlock_hostile_tools:pay\n"
    )
    return path


HOSTILE_TURNS: list[dict[str, Any]] = [
    {
        "text": "t1 " + H,
        "tool_calls": [
            {"id": "c1" + H, "name": "echo", "arguments": {"text": H}},
            {"name": "tool" + H, "arguments": {"k" + H: H}},
            {"name": "explode", "arguments": {"text": H}},
        ],
    },
    {"text": "t2 " + H, "tool_calls": [{"name": "pay", "arguments": {"note": H}}]},
    {"text": "done " + H},
]


class World:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.db = folder / "runs.db"
        (folder / "oarlock_hostile_tools.py").write_text(TOOLS)
        self.agent = agent(folder, "hostile", HOSTILE_TURNS)
        self.failing = agent(folder, "failing", [{"fail": [{"kind": "fatal", "message": H}]}])
        self.file = folder / f"doc-{H.replace('/', '_')}.json"  # a hostile file name
        self.waiting = self.failed = ""
        self.invocations: dict[str, str] = {}
        self.run_outputs: list[Result] = []

    def __call__(self, *argv: str, **tty: bool) -> Result:
        return call(["--db", str(self.db), *argv], **tty)

    def ok(self, *argv: str) -> Result:
        result = self(*argv)
        assert result.code == 0, result
        return result

    def run(self, path: Path, expect: int = 0) -> tuple[str, Result]:
        before = {r["id"] for r in json.loads(self.ok("runs", "list", "--json").out)}
        result = self("run", str(path), "input " + H, "--tag", f"{TAG_KEY}=v{H}", "--tag", "team=x")
        assert result.code == expect, result
        (new,) = [r["id"] for r in json.loads(self.ok("runs", "list", "--json").out)
                  if r["id"] not in before]
        return new, result


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    w = World(tmp_path_factory.mktemp("hostile"))
    w("run", str(w.agent), "x")  # creates the database (and checks nothing yet)
    w.waiting, waited = w.run(w.agent)
    w.failed, failed = w.run(w.failing, expect=3)
    w.run_outputs = [waited, failed]
    receipts = json.loads(w.ok("receipts", "list", "--json").out)
    w.invocations = {r["tool"]: r["invocationId"] for r in receipts}
    exported = w.ok("runs", "export", w.waiting).out
    w.file.write_text(exported)
    (w.folder / "bad.json").write_text(json.dumps({"format": "oar/0.2", "id": H}))
    return w


def test_the_hostile_run_is_stored_as_given(world: World) -> None:
    """The renderer changes what is shown, never what is stored."""
    doc = json.loads(world.ok("runs", "export", world.waiting).out)
    assert doc["input"] == "input " + H
    assert doc["tags"] == {TAG_KEY: f"v{H}", "team": "x"}
    assert doc["messages"][1]["content"][0]["text"] == "t1 " + H
    assert doc["pendingApprovals"][0]["arguments"] == {"note": H}
    failed = json.loads(world.ok("runs", "export", world.failed).out)
    assert H in failed["error"]
    assert {"echo", "explode"} <= set(world.invocations)


def test_run_says_where_the_run_stands_with_hostile_data_escaped(world: World) -> None:
    waited, failed = world.run_outputs
    assert_safe(waited)
    assert "waiting for a decision on call_2_1: pay(" in waited.out
    assert_safe(failed)
    assert "error: model error (scripted_fatal): \\x1b]0;pwned\\x07" in failed.out


COMMANDS: dict[str, Callable[[World], list[str]]] = {
    "runs list": lambda w: ["runs", "list"],
    "runs list --json": lambda w: ["runs", "list", "--json"],
    "runs list --tag": lambda w: ["runs", "list", "--tag", f"{TAG_KEY}=v{H}"],
    "runs show waiting": lambda w: ["runs", "show", w.waiting],
    "runs show failed": lambda w: ["runs", "show", w.failed],
    "runs export": lambda w: ["runs", "export", w.waiting],
    "receipts list": lambda w: ["receipts", "list"],
    "receipts list --json": lambda w: ["receipts", "list", "--json"],
    "receipts list --open": lambda w: ["receipts", "list", "--open"],
    "receipts list --open --json": lambda w: ["receipts", "list", "--open", "--json"],
    "receipts list --run": lambda w: ["receipts", "list", "--run", w.waiting],
    "receipts show echo": lambda w: ["receipts", "show", w.invocations["echo"]],
    "receipts show explode": lambda w: ["receipts", "show", w.invocations["explode"]],
    "receipts show --json": lambda w: ["receipts", "show", w.invocations["echo"], "--json"],
    "audit verify": lambda w: ["audit", "verify"],
    "audit verify --json": lambda w: ["audit", "verify", "--json"],
    "validate a hostile file": lambda w: ["validate", str(w.file)],
    "validate --json": lambda w: ["validate", "--json", str(w.file)],
    "validate an invalid file": lambda w: ["validate", str(w.folder / "bad.json")],
    "upgrade": lambda w: ["upgrade", str(w.file)],
    # refusals that echo what they were given
    "runs show unknown": lambda w: ["runs", "show", HID],
    "runs export unknown": lambda w: ["runs", "export", HID],
    "resume unknown": lambda w: ["resume", HID],
    "cancel unknown": lambda w: ["cancel", HID, "--reason", H],
    "cancel failed": lambda w: ["cancel", w.failed],
    "replay unknown": lambda w: ["replay", HID],
    "approve unknown call": lambda w: ["approve", w.waiting, HID],
    "deny unknown run": lambda w: ["deny", HID, HID, "--reason", H],
    "respond unknown call": lambda w: ["respond", w.waiting, HID, H],
    "approve bad edit": lambda w: ["approve", w.waiting, "call_2_1", "--edit", H],
    "approve bad expiry": lambda w: ["approve", w.waiting, "call_2_1", "--expires-in", H],
    "receipts show unknown": lambda w: ["receipts", "show", HID],
    "receipts show unknown --json": lambda w: ["receipts", "show", HID, "--json"],
    "reconcile unknown": lambda w: [
        "receipts", "reconcile", HID, "--as", "succeeded", "--evidence", H
    ],
    "tag without =": lambda w: ["runs", "list", "--tag", HID],
    "unknown argument": lambda w: ["runs", "list", H],
    "unknown status": lambda w: ["runs", "list", "--status", H],
    "unknown command": lambda w: [H],
    "no database": lambda w: ["--db", str(w.folder / HID), "runs", "list"],
    "keygen in no folder": lambda w: ["audit", "keygen", str(w.folder / HID / "k.pem")],
    "checkpoint with no key": lambda w: ["audit", "checkpoint", "--key", str(w.folder / HID)],
    "verify a missing checkpoint": lambda w: [
        "audit", "verify", "--checkpoint", str(w.folder / HID)
    ],
    "validate a missing file": lambda w: ["validate", str(w.folder / HID)],
    "upgrade a missing file": lambda w: ["upgrade", str(w.folder / HID)],
    "run a missing agent file": lambda w: ["run", str(w.folder / HID), H],
}


@pytest.mark.parametrize("name", list(COMMANDS))
def test_no_command_prints_hostile_data_raw(world: World, name: str) -> None:
    result = world(*COMMANDS[name](world))
    assert_safe(result)
    assert result.both.strip(), "the command said nothing"


def holds(value: Any, text: str) -> bool:
    """Whether some string in the JSON ``value`` (a key or a value) holds ``text``."""
    if isinstance(value, str):
        return text in value
    if isinstance(value, list):
        return any(holds(v, text) for v in value)
    if isinstance(value, dict):
        return any(holds(k, text) or holds(v, text) for k, v in value.items())
    return False


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("runs list --json", H),
        ("runs export", H),
        ("receipts list --json", "\nFORGED line"),  # errors are stored sanitized
        ("receipts list --open --json", None),
        ("receipts show --json", H),
        ("audit verify --json", None),
        ("validate --json", "\r\nFORGED line"),  # in the file's name
        ("upgrade", H),
    ],
)
def test_json_output_parses_back_to_the_very_text_stored(
    world: World, name: str, text: str | None
) -> None:
    result = world(*COMMANDS[name](world))
    assert result.code == 0, result
    value = json.loads(result.out)
    assert holds(value, text or "FORGED") == (text is not None)


def test_the_run_table_on_a_terminal_reads_no_markup(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "1000")
    monkeypatch.delenv("NO_COLOR", raising=False)
    result = world("runs", "list", tty_out=True)
    assert result.code == 0, result
    # Rich may style the header (SGR); nothing else may be an escape sequence
    text = re.sub(r"\x1b\[[0-9;]*m", "", result.out)
    assert_safe(Result(result.code, text, result.err))
    assert "\x1b]8" not in result.out  # no live hyperlink
    assert "k\\x1b]0;pwned\\x07" in text
    assert MARKUP in text
    assert world.waiting in text


def test_decisions_and_their_outputs_with_hostile_principal_and_reason(world: World) -> None:
    run_id, started = world.run(world.agent)
    assert_safe(started)
    approved = world("approve", run_id, "call_2_1", "--as", "ops:" + H, "--reason", H)
    assert_safe(approved)
    assert approved.code == 0, approved
    assert "completed" in approved.out
    shown = world("runs", "show", run_id)
    assert_safe(shown)
    # who decided and why, escaped: the principal in brackets, the reason after the time
    assert "approved by human (ops:\\x1b]0;pwned\\x07" in shown.out
    assert re.search(r"\) at \S+: \\x1b\]0;pwned\\x07", shown.out), shown.out
    exported = json.loads(world.ok("runs", "export", run_id).out)
    assert exported["messages"][-1]["content"][0]["text"] == "done " + H
    replayed = world("replay", run_id)
    assert_safe(replayed)
    for name in ("runs list", "receipts list", "audit verify"):
        assert_safe(world(*COMMANDS[name](world)))


def test_a_key_file_with_a_hostile_name(world: World, tmp_path: Path) -> None:
    folder = tmp_path / ("keys" + H.replace("/", "_"))
    folder.mkdir()
    key = folder / "k.pem"
    made = world("audit", "keygen", str(key))
    assert made.code == 0, made
    assert made.out.startswith("-----BEGIN PUBLIC KEY-----")
    again = world("audit", "keygen", str(key))
    assert again.code == 1
    assert_safe(again)
    assert "already exists" in again.err
    checkpoint = world("audit", "checkpoint", "--key", str(key), "--out", str(folder / "no" / "c"))
    assert checkpoint.code == 1, checkpoint
    assert_safe(checkpoint)
    assert "cannot write the checkpoint" in checkpoint.err
    shutil.rmtree(folder)

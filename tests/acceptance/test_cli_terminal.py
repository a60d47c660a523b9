"""On a terminal, a run shows one progress line, rewritten in place (``\\r``, text, erase to
the end of the line), and the model's text as it streams in. Neither may erase or run into
the other, and streamed text goes through the renderer: escapes and secrets split across
two chunks of the stream are escaped and redacted whole.

The screen is replayed from what was written (carriage return, newline, erase to the end
of the line), as a terminal would show it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.acceptance.inproc import Stream, call
from tests.integration import openai_wire as ow

from helpers import priced_demo
from oarlock.cli._live import HOLD, Live
from oarlock.engine._stream import ModelResponded, StatusChanged, TextDelta

SECRET = "s3cr3t-v4lue-0f-the-t0ken"
REFUND = {"order_id": "A-1001", "amount": 42.5, "reason": "arrived broken"}


def screen(raw: str) -> list[str]:
    """The lines a terminal shows after ``raw``: ``\\r`` moves to the start of the line,
    ``ESC [ K`` erases to its end; any other escape sequence fails the test."""
    lines, col, i = [""], 0, 0
    while i < len(raw):
        if raw.startswith("\x1b[K", i):
            lines[-1] = lines[-1][:col]
            i += 3
            continue
        ch = raw[i]
        assert ch != "\x1b", f"an escape sequence other than erase-line: {raw[i : i + 12]!r}"
        if ch == "\r":
            col = 0
        elif ch == "\n":
            lines.append("")
            col = 0
        else:
            current = lines[-1].ljust(col)
            lines[-1] = current[:col] + ch + current[col + 1 :]
            col += 1
        i += 1
    return lines


def responded(turn: int, calls: int = 0) -> ModelResponded:
    return ModelResponded("r", turn, tuple(f"c{i}" for i in range(calls)), 0, 0, None)


def test_streamed_text_and_progress_lines_keep_each_other() -> None:
    out = Stream(tty=True)
    live = Live(out)
    live.show(responded(1, calls=2))
    for chunk in ("Hello, ", "world.\nSecond", " line, then more"):
        live.show(TextDelta("r", chunk))
    live.show(responded(2))
    live.show(TextDelta("r", "Third text"))
    live.show(StatusChanged("r", "running", "completed"))
    live.close()
    assert screen(out.text()) == [
        "  turn 1: model answered, calls 2 tool(s)",
        "    Hello, world.",
        "    Second line, then more",
        "  turn 2: model answered",
        "    Third text",
        "  status completed",
        "",
    ]


def test_escapes_and_secrets_split_across_chunks_are_shown_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OARLOCK_TEST_TOKEN", SECRET)
    out = Stream(tty=True)
    live = Live(out)
    chunks = ["clear \x1b", "[2J now; title \x1b]0;", "x\x07 key ", SECRET[:9], SECRET[9:], " ok"]
    chunks += ["Authorization: Bea", "rer abcdefgh12345678 done\n"]
    for chunk in chunks:
        live.text(chunk)
    live.close()
    shown = "\n".join(screen(out.text()))
    assert SECRET not in shown and SECRET[:9] not in shown and "abcdefgh12345678" not in shown
    assert shown.count("[redacted]") == 2
    assert "clear \\x1b[2J now; title \\x1b]0;x\\x07 key [redacted] ok" in shown


def test_a_long_line_streams_before_it_ends_but_keeps_its_tail() -> None:
    out = Stream(tty=True)
    live = Live(out)
    words = " ".join(f"w{i:03d}" for i in range(60))  # 299 characters, no newline
    live.text(words)
    written = out.text()
    assert written.startswith("    w000 w001")  # most of the line is out already
    assert len(written) >= len(words) - HOLD - 5
    assert not written.rstrip().endswith("w059")  # the tail waits for more
    live.close()
    assert screen(out.text()) == ["    " + words, ""]


def test_nothing_is_shown_when_standard_error_is_not_a_terminal() -> None:
    out = Stream(tty=False)
    live = Live(out)
    live.show(responded(1))
    live.text("hello")
    live.close()
    assert out.text() == ""


@pytest.fixture
def streaming_server() -> Iterator[ow.FakeOpenAI]:
    with ow.FakeOpenAI() as server:
        server.reply(
            ow.Reply(
                events=ow.chat_chunks(
                    ["Let me look ", "up the order\nfirst, \x1b]0;t", "itle\x07 then ", "more."],
                    [("call_look", "lookup_order", [json.dumps({"order_id": "A-1001"})])],
                )
            ),
            ow.Reply(
                events=ow.chat_chunks(
                    ["Refunding ", "now."],
                    [
                        ("call_refund", "issue_refund", [json.dumps(REFUND)]),
                        ("call_policy", "refund_policy", [json.dumps({"order_id": "A-1001"})]),
                    ],
                )
            ),
        )
        yield server


def test_a_run_on_a_terminal_streams_text_between_its_progress_lines(
    tmp_path: Path, streaming_server: ow.FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OARLOCK_DB", raising=False)
    model = f"openai-compatible:m@{streaming_server.base_url}"
    agent = priced_demo(tmp_path, "openai-compatible:m@http://127.0.0.1:*")  # a cost limit
    argv = ["--db", str(tmp_path / "runs.db"), "run", str(agent), "refund", "--model", model]
    result = call(argv, tty_err=True)
    assert result.code == 0, result
    assert "waiting_approval" in result.out
    shown: list[Any] = screen(result.err)
    assert shown == [
        "    Let me look up the order",
        "    first, \\x1b]0;title\\x07 then more.",
        "  turn 1: model answered, calls 1 tool(s)",
        "    Refunding now.",
        "  status waiting_approval",  # written over the progress line of turn 2
        "",
    ]

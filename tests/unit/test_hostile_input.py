"""Hostile documents and endless inputs: every input is read in chunks within
``$OARLOCK_MAX_INPUT_BYTES`` (standard input, files, fifos, devices); documents with a
5,000-digit integer, a lone surrogate, numbers beyond a double or deep nesting are a
clear error with exit status 1, never a traceback; reports of documents with thousands
of errors list a hundred and count the rest."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import threading
import time
import tracemalloc
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from oarlock._input import DEFAULT_MAX_INPUT_BYTES, MAX_INPUT_ENV, max_input_bytes, read_input
from oarlock.cli import main
from oarlock.errors import ConfigError, DocumentInvalid, FormatError, UsageError
from oarlock.formats import loads_strict, upgrade, validate
from oarlock.governance import RulePolicy

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
LIMIT = 64 * 1024


def example(name: str) -> dict[str, Any]:
    value = json.loads((EXAMPLES / name).read_text("utf-8"))
    assert isinstance(value, dict)
    return value


class Endless:
    """A binary stream that never ends; reading it whole is an error."""

    def __init__(self) -> None:
        self.served = 0

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            raise AssertionError("the whole stream was asked for")
        self.served += size
        return b"\0" * size


class StrictOut(io.TextIOWrapper):
    """stdout as a terminal's: UTF-8, and a lone surrogate cannot be written."""

    def __init__(self) -> None:
        super().__init__(io.BytesIO(), encoding="utf-8", errors="strict")

    def text(self) -> str:
        self.flush()
        buffer = self.buffer
        assert isinstance(buffer, io.BytesIO)
        return buffer.getvalue().decode("utf-8")


def cli(monkeypatch: pytest.MonkeyPatch, *argv: str) -> tuple[int, str, str]:
    out, err = StrictOut(), StrictOut()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    code = main(list(argv))
    return code, out.text(), err.text()


@pytest.fixture
def small_limit(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setenv(MAX_INPUT_ENV, str(LIMIT))
    return LIMIT


# -- the input limit --------------------------------------------------------------------


def test_the_limit_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MAX_INPUT_ENV, raising=False)
    assert max_input_bytes() == DEFAULT_MAX_INPUT_BYTES == 16 * 1024 * 1024
    monkeypatch.setenv(MAX_INPUT_ENV, "1000")
    assert max_input_bytes() == 1000
    for bad in ("abc", "0", "-5", "1e6", "12 MB", "9" * 30):
        monkeypatch.setenv(MAX_INPUT_ENV, bad)
        with pytest.raises(UsageError, match=f"{MAX_INPUT_ENV}: must be a whole number"):
            max_input_bytes()


def test_a_bad_limit_is_a_usage_error_of_the_commands(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(MAX_INPUT_ENV, "lots")
    doc = tmp_path / "d.json"
    doc.write_text("{}")
    for argv in (["validate", str(doc)], ["upgrade", str(doc)], ["check", str(doc)]):
        code, _, err = cli(monkeypatch, *argv)
        assert code == 2
        assert MAX_INPUT_ENV in err


def test_a_file_at_the_limit_is_read_and_one_byte_more_is_refused(
    small_limit: int, tmp_path: Path
) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * small_limit)
    assert read_input(path) == b"x" * small_limit
    path.write_bytes(b"x" * (small_limit + 1))
    with pytest.raises(ConfigError) as info:
        read_input(path, what="document")
    assert info.value.code == "input_too_large"
    assert str(info.value) == (
        f"{path}: larger than the input limit of {small_limit:,} bytes "
        f"(set {MAX_INPUT_ENV} to read bigger inputs)"
    )


def test_unreadable_inputs_name_the_path_and_what_was_expected(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.yaml: no such policy file"):
        read_input(tmp_path / "nope.yaml", what="policy file")
    with pytest.raises(ConfigError, match="is a folder, not a policy file"):
        read_input(tmp_path, what="policy file")


def test_endless_standard_input_is_refused_after_the_limit(
    small_limit: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = Endless()
    monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=stream))
    tracemalloc.start()
    try:
        code, out, _ = cli(monkeypatch, "validate", "-")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert code == 1
    assert "larger than the input limit of 65,536 bytes" in out
    assert stream.served <= small_limit + 1
    assert peak < 8 * small_limit


def test_endless_standard_input_to_upgrade(
    small_limit: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=Endless()))
    code, out, err = cli(monkeypatch, "upgrade", "-")
    assert (code, out) == (1, "")
    assert "standard input: larger than the input limit" in err


def test_a_200_mb_document_is_refused_before_it_is_read(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(MAX_INPUT_ENV, raising=False)
    path = tmp_path / "huge.json"
    with path.open("wb") as fh:  # sparse: 200 MB that take no room on disk
        fh.truncate(200 * 1024 * 1024)
    tracemalloc.start()
    started = time.monotonic()
    try:
        code, out, _ = cli(monkeypatch, "validate", str(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.monotonic() - started < 5
    assert peak < 5_000_000
    assert code == 1
    assert "larger than the input limit of 16,777,216 bytes" in out


def test_dev_zero_is_a_document_beyond_the_limit(
    small_limit: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, _ = cli(monkeypatch, "validate", "/dev/zero")
    assert code == 1
    assert "/dev/zero: invalid" in out
    assert "[limit]  larger than the input limit" in out


def _feed_fifo(path: Path, stop: threading.Event) -> None:
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError:
        return
    try:
        while not stop.is_set():
            os.write(fd, b"[" * 4096)
    except OSError:  # the reader closed its end
        pass
    finally:
        os.close(fd)


@pytest.fixture
def endless_fifo(tmp_path: Path) -> Any:
    path = tmp_path / "endless.fifo"
    os.mkfifo(path)
    stop = threading.Event()
    writer = threading.Thread(target=_feed_fifo, args=(path, stop), daemon=True)
    writer.start()
    yield path
    stop.set()
    with contextlib.suppress(OSError):  # unblock a writer still waiting for a reader
        os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
    writer.join(5)


def test_an_endless_fifo_is_a_document_beyond_the_limit(
    small_limit: int, monkeypatch: pytest.MonkeyPatch, endless_fifo: Path
) -> None:
    code, out, _ = cli(monkeypatch, "validate", str(endless_fifo))
    assert code == 1
    assert "larger than the input limit" in out


def test_an_endless_fifo_as_policy_file(small_limit: int, endless_fifo: Path) -> None:
    with pytest.raises(ConfigError) as info:
        RulePolicy.from_file(endless_fifo)
    assert info.value.code == "input_too_large"
    assert str(endless_fifo) in str(info.value)


def test_dev_zero_as_the_policy_of_an_agent_file(small_limit: int, tmp_path: Path) -> None:
    from oarlock.engine._agentfile import load_agent

    (tmp_path / "s.yaml").write_text("- text: hi\n")
    agent = tmp_path / "agent.yaml"
    agent.write_text("name: a\nmodel: scripted:s.yaml\npolicy: /dev/zero\n")
    started = time.monotonic()
    with pytest.raises(ConfigError) as info:
        load_agent(agent)
    assert time.monotonic() - started < 5
    assert str(info.value) == (
        f"{agent}: policy: /dev/zero: larger than the input limit of 65,536 bytes "
        f"(set {MAX_INPUT_ENV} to read bigger inputs)"
    )


def test_an_agent_file_beyond_the_limit(small_limit: int, tmp_path: Path) -> None:
    from oarlock.engine._agentfile import load_agent

    agent = tmp_path / "agent.yaml"
    agent.write_text("name: a\nmodel: scripted:s.yaml\ninstructions: " + "x" * small_limit)
    with pytest.raises(ConfigError, match=r"agent\.yaml: larger than the input limit"):
        load_agent(agent)


# -- documents that once gave a traceback -----------------------------------------------


def test_a_5000_digit_integer_is_refused_by_validate_and_upgrade(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    doc = tmp_path / "big.json"
    doc.write_text('{"format": "oar/0.2", "turns": ' + "9" * 5000 + "}")
    code, out, _ = cli(monkeypatch, "validate", str(doc))
    assert code == 1
    assert "an integer of 5000 digits is too large (more than 4300): it has no canonical" in out
    code, out, err = cli(monkeypatch, "upgrade", str(doc))
    assert (code, out) == (1, "")
    assert "an integer of 5000 digits is too large" in err


def test_a_lone_surrogate_is_invalid_text_for_validate_and_upgrade(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    doc = example("runs/refund-waiting-approval.json")
    doc["status"] = "\udfff"
    path = tmp_path / "sur.json"
    path.write_text(json.dumps(doc))  # ensure_ascii: the file holds the escape \udfff
    assert "\\udfff" in path.read_text()
    says = "invalid text in /status: a lone surrogate (\\udfff) is not a character"
    code, out, _ = cli(monkeypatch, "validate", str(path))
    assert code == 1
    assert says in out
    code, out, _ = cli(monkeypatch, "validate", "--json", str(path))
    assert code == 1
    (problem,) = json.loads(out)["files"][0]["errors"]
    assert problem["rule"] == "json"
    assert problem["message"].endswith(says)
    code, out, err = cli(monkeypatch, "upgrade", str(path))
    assert (code, out) == (1, "")
    assert "invalid text in /status" in err


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('{"a": "\\ud800"}', "invalid text in /a: a lone surrogate (\\ud800)"),
        ('{"\\udc00x": 1}', "invalid text in a key of the object at /: a lone surrogate"),
        ('{"a": ["ok", {"b": "x\\udfffy"}]}', "invalid text in /a/1/b"),
        ('{"a": 1e400}', "the number at /a is too large: it has no finite value"),
        ('{"a": [-1e999]}', "the number at /a/0 is too large"),
        ('{"a": ' + "9" * 400 + ".5}", "the number at /a is too large"),
        ("[" * 200 + "]" * 200, "nested deeper than 128 levels"),
        ('{"a": 1, "a": 2}', "duplicate key 'a' in one object"),
        ('{"a": NaN}', "NaN is not JSON"),
        (b'{"a": "\xed\xb3\xbf"}', "not JSON: the bytes are not UTF-8 (byte 0xed at offset 7)"),
    ],
)
def test_strict_json_refusals(text: str | bytes, says: str) -> None:
    with pytest.raises(FormatError) as info:
        loads_strict(text)
    assert says in str(info.value)
    report = validate(text)
    assert [p.rule for p in report.errors] == ["json"]


def test_a_surrogate_pair_is_text() -> None:
    assert loads_strict('{"a": "\\ud83d\\ude00"}') == {"a": "\U0001f600"}
    assert loads_strict(b'\xef\xbb\xbf{"a": 1}') == {"a": 1}  # a UTF-8 byte order mark
    assert loads_strict('{"a": 1e-400, "b": ' + "9" * 4300 + "}")["a"] == 0.0


def test_deep_nesting_is_refused_whatever_the_stack(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    doc = example("runs/refund-completed.json")
    doc["messages"][1]["content"][-1]["arguments"] = {"a": "NESTED"}
    text = json.dumps(doc).replace('"NESTED"', "[" * 985 + "]" * 985)
    assert "nested deeper than 128 levels" in validate(text).errors[0].message
    with pytest.raises(FormatError, match="nested deeper than 128 levels"):
        loads_strict(text)
    path = tmp_path / "deep.json"
    path.write_text(text)
    for command in ("validate", "upgrade"):
        code, _, _ = cli(monkeypatch, command, str(path))
        assert code == 1


# -- reports of documents with many errors ----------------------------------------------


def test_a_report_lists_a_hundred_errors_and_counts_the_rest(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    doc = example("runs/refund-completed.json")
    doc["tags"] = {f"k{i:04d}": i for i in range(1000)}
    report = validate(json.dumps(doc))
    assert len(report.errors) == 100
    assert report.more_errors == 900 and report.more_errors_exact
    assert report.more == "and 900 more errors"
    assert [p.pointer for p in report.errors][:2] == ["/tags/k0000", "/tags/k0001"]
    assert report.to_json()["moreErrors"] == 900
    path = tmp_path / "many.json"
    path.write_text(json.dumps(doc))
    code, out, _ = cli(monkeypatch, "validate", str(path))
    assert code == 1
    assert out.count("[schema]") == 100
    assert "  … and 900 more errors" in out
    with pytest.raises(DocumentInvalid, match=r"\(and 999 more\)"):
        upgrade(doc)


def test_millions_of_errors_cost_no_more_than_counting_ten_thousand() -> None:
    doc = example("runs/refund-completed.json")
    doc["tags"] = {f"k{i}": i for i in range(200_000)}
    started = time.monotonic()
    report = validate(json.dumps(doc))
    elapsed = time.monotonic() - started
    assert len(report.errors) == 100
    assert not report.more_errors_exact
    assert report.more_errors >= 9_900
    counted = f"{report.more_errors:,}"
    assert report.more == f"and at least {counted} more errors (counting stopped there)"
    assert elapsed < 30


def test_a_large_valid_run_is_checked_in_linear_time() -> None:
    doc = example("runs/refund-completed.json")
    doc["tags"] = {f"k{i}": "v" for i in range(300_000)}
    started = time.monotonic()
    report = validate(json.dumps(doc).encode())
    assert report.valid, report.errors[:3]
    assert time.monotonic() - started < 30

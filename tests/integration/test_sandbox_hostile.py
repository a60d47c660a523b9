"""Hostile arguments to the sandbox's tools are results the model reads, never crashes: a
NUL in a command line, a script or a path, a command line past what one argument of a
program can hold, a program the sandbox cannot start, a workspace 1,500 folders deep, and
requests to the egress proxy that are not what it takes. The run goes on and no traceback
is printed anywhere."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.acceptance.inproc import call as cli

from oarlock.engine import Agent, Runner
from oarlock.governance import GovernedExecutor
from oarlock.governance._records import run_uuid
from oarlock.models import ScriptedModel
from oarlock.sandbox import (
    Program,
    SandboxRunner,
    SandboxSpec,
    Workspaces,
    _egress,
    call_sandboxed,
    python,
    read_file,
    shell,
    write_file,
)
from oarlock.sandbox._host import HostSupport, host_support
from oarlock.testing import MemoryStore, ValidatingStore
from oarlock.tools import tool

SUPPORT = host_support()
DEPTH = 1500


def _support(isolation: str) -> HostSupport:
    assert SUPPORT.supports(isolation), f"this host lacks {isolation}: {SUPPORT.notes}"
    return dataclasses.replace(SUPPORT, bubblewrap=isolation == "bubblewrap", unshare=True)


@pytest.fixture
def root() -> Iterator[Path]:
    """A folder any user can pass through (under ``unshare`` the call's own user reaches
    its workspace by the host's path), holding the workspaces and the uid registry."""
    folder = Path(tempfile.mkdtemp(prefix="oarlock-hostile-test-", dir="/tmp"))
    folder.chmod(0o711)
    yield folder
    subprocess.run(["rm", "-rf", "--", str(folder)], check=False)  # any depth


@pytest.fixture
def workspaces(root: Path, monkeypatch: pytest.MonkeyPatch) -> Workspaces:
    monkeypatch.setenv("OARLOCK_SANDBOX_UIDS", str(root / "uids"))  # the command line's too
    return Workspaces(root / "ws")


@pytest.fixture(params=["bubblewrap", "unshare"])
def runner(request: pytest.FixtureRequest, workspaces: Workspaces) -> SandboxRunner:
    return SandboxRunner(workspaces, isolation=request.param, support=_support(request.param))


def run_tool(runner: SandboxRunner, t: Any, **arguments: Any) -> Any:
    return asyncio.run(call_sandboxed(runner, t, arguments, workspace_id="w1", egress="none"))


# -- arguments no program can be given ------------------------------------------------------


def test_a_nul_in_a_command_line_is_refused_and_nothing_runs(runner: SandboxRunner) -> None:
    done = run_tool(runner, shell, command="touch ran\0; echo a")
    assert done.status == "Failed"
    assert done.error[0] == "argument_refused" and "NUL" in done.error[1]
    assert not (runner.workspaces.root / "w1" / "ran").exists()
    assert run_tool(runner, shell, command="echo still here").text.endswith("still here\n")


def test_a_nul_in_a_script_is_refused(runner: SandboxRunner) -> None:
    done = run_tool(runner, python, code="open('ran', 'w')\0\nprint(1)")
    assert (done.status, done.error[0]) == ("Failed", "argument_refused")
    assert "script holds a NUL" in done.error[1]
    assert not (runner.workspaces.root / "w1" / "ran").exists()


def test_a_nul_or_a_lone_surrogate_in_a_path_or_a_content_is_refused(
    runner: SandboxRunner,
) -> None:
    for t, arguments in (
        (write_file, {"path": "a\0b", "content": "x"}),
        (read_file, {"path": "a\0b"}),
        (write_file, {"path": "\ud800", "content": "x"}),
    ):
        done = run_tool(runner, t, **arguments)
        assert (done.status, done.error[0]) == ("Failed", "path_refused"), arguments
    done = run_tool(runner, write_file, path="ok.txt", content="a\ud800b")
    assert (done.status, done.error[0]) == ("Failed", "argument_refused")
    assert "lone surrogate" in done.error[1]
    assert not (runner.workspaces.root / "w1" / "ok.txt").exists()


def test_a_command_line_of_200_kb_runs_as_a_short_one_does(runner: SandboxRunner) -> None:
    filler = "x" * 200_000
    command = f"# {filler}\nwords={filler}\necho ${{#words}}; cat; echo read-nothing; exit 3"
    done = run_tool(runner, shell, command=command)
    assert done.status == "Succeeded", done.error
    assert done.text == "exit status 3\n--- stdout ---\n200000\nread-nothing\n"
    script = run_tool(runner, python, code=f"x = '{filler}'\nprint(len(x))")
    assert script.text.endswith("200000\n")


def test_a_command_line_past_a_mebibyte_is_refused_with_what_to_do(
    runner: SandboxRunner,
) -> None:
    done = run_tool(runner, shell, command="#" + "x" * (1 << 20))
    assert (done.status, done.error[0]) == ("Failed", "argument_refused")
    assert "sandbox.write_file" in done.error[1]


def _argv_program(arguments: dict[str, Any]) -> Program:
    return Program(("/bin/echo", arguments["word"]))


@tool(side_effect="sandbox", sandbox=SandboxSpec(program=_argv_program))
def echo_word(word: str) -> str:
    """Echo a word with a program of its own (no check of its argument)."""
    return word


@pytest.mark.parametrize(
    ("word", "why"),
    [("a\0b", "embedded null byte"), ("y" * 200_000, "Argument list too long")],
)
def test_a_process_that_cannot_be_started_is_a_failed_result(
    runner: SandboxRunner, word: str, why: str
) -> None:
    done = run_tool(runner, echo_word, word=word)
    assert (done.status, done.error[0]) == ("Failed", "spawn_failed")
    assert why in done.error[1] and "could not be started" in done.error[1]
    assert run_tool(runner, echo_word, word="fine").text.endswith("fine\n")


def test_a_run_goes_on_past_hostile_arguments(
    workspaces: Workspaces, capfd: pytest.CaptureFixture[str]
) -> None:
    calls = [
        {"name": "sandbox.shell", "arguments": {"command": "echo a\0b"}},
        {"name": "sandbox.python", "arguments": {"code": "print(1)\0"}},
        {"name": "echo_word", "arguments": {"word": "z" * 200_000}},
        {"name": "sandbox.shell", "arguments": {"command": f": {'x' * 200_000}; echo long"}},
    ]
    turns = [{"tool_calls": calls}, {"text": "done"}]
    agent = Agent("coder", ScriptedModel(turns), tools=[shell, python, echo_word], tenant="t")
    store = ValidatingStore(MemoryStore())
    executor = GovernedExecutor(store.governance(), sandbox=SandboxRunner(workspaces))
    doc = asyncio.run(Runner(agent, store, executor=executor).start("go"))
    assert doc.status == "completed" and doc.messages[-1].content[0].text == "done"
    results = doc.messages[2].content
    assert [r.is_error for r in results] == [True, True, True, False]
    assert "NUL" in results[0].content and "NUL" in results[1].content
    assert "could not be started" in results[2].content
    assert "long" in results[3].content
    items = asyncio.run(store.governance().receipts(run_id=run_uuid(doc.id)))
    codes = sorted(
        (i.invocation["toolId"], i.status, (i.receipt.get("error") or {}).get("code"))
        for i in items
    )
    assert codes == [
        ("echo_word", "Failed", "spawn_failed"),
        ("sandbox.python", "Failed", "argument_refused"),
        ("sandbox.shell", "Failed", "argument_refused"),
        ("sandbox.shell", "Succeeded", None),
    ]  # every call's claim closed by its receipt
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err


# -- a file with several links --------------------------------------------------------------


def test_a_file_with_other_hard_links_is_neither_read_nor_written(
    runner: SandboxRunner, root: Path
) -> None:
    made = run_tool(runner, shell, command="echo mine > a && ln a b && echo ok")
    assert made.text.endswith("ok\n"), made
    for path in ("a", "b"):
        read = run_tool(runner, read_file, path=path)
        assert (read.status, read.error[0]) == ("Failed", "path_refused"), path
        assert "hard links" in read.error[1]
    outside = root / "outside.txt"
    outside.write_text("host secret")
    os.link(outside, runner.workspaces.root / "w1" / "linked.txt")
    read = run_tool(runner, read_file, path="linked.txt")
    assert read.status == "Failed" and read.text is None
    wrote = run_tool(runner, write_file, path="linked.txt", content="overwritten")
    assert wrote.status == "Failed"
    assert outside.read_text() == "host secret"


# -- a deep workspace -----------------------------------------------------------------------


def _deep_tree(folder: Path, depth: int, name: str = "d") -> None:
    """``depth`` nested folders in ``folder``, a file at the bottom, made one descriptor
    at a time (the whole path is far past PATH_MAX)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir(name, dir_fd=fd)
            down = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = down
        leaf = os.open("leaf.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(leaf, b"bottom")
        os.close(leaf)
    finally:
        os.close(fd)


def test_a_1500_deep_workspace_is_listed_shown_and_pruned(workspaces: Workspaces) -> None:
    deep = workspaces.ensure("deep")
    (deep.path / "top.txt").write_text("top")
    _deep_tree(deep.path, DEPTH, name="n" * 200)
    shallow = workspaces.ensure("shallow")
    (shallow.path / "a.txt").write_text("a")
    where = ["--workspaces", str(workspaces.root)]
    listed = cli(["sandbox", "list", "--json", *where])
    assert listed.code == 0, listed.both
    assert "Traceback" not in listed.both
    rows = {r["workspaceId"]: r for r in json.loads(listed.out)}
    assert (rows["deep"]["files"], rows["deep"]["bytes"]) == (2, 9)
    assert rows["shallow"]["files"] == 1
    shown = cli(["sandbox", "show", "deep", *where])
    assert shown.code == 0 and "Traceback" not in shown.both
    lines = shown.out.splitlines()
    assert lines[0] == "top.txt"
    assert lines[1] == "/".join(["n" * 200] * DEPTH + ["leaf.txt"])
    refused = cli(["sandbox", "show", "deep", "/".join(["n" * 200] * 70 + ["leaf.txt"]), *where])
    assert refused.code != 0 and "Traceback" not in refused.both
    assert "path" in refused.err
    pruned = cli(["sandbox", "prune", "--older-than", "0", *where])
    assert pruned.code == 0 and "Traceback" not in pruned.both
    assert "removed 2 workspace(s)" in pruned.out
    assert list(workspaces.root.iterdir()) == []
    if os.geteuid() == 0:  # their uids were freed with them
        assert workspaces.uids.given() == {}


def test_the_command_line_lists_a_deep_workspace_in_a_process_of_its_own(
    workspaces: Workspaces,
) -> None:
    import sys

    _deep_tree(workspaces.ensure("deep").path, DEPTH)
    oarlock = Path(sys.executable).with_name("oarlock")
    for action in (["list"], ["show", "deep"], ["prune", "--older-than", "0"]):
        done = subprocess.run(
            [str(oarlock), "sandbox", *action, "--workspaces", str(workspaces.root)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stdout + done.stderr
        assert "RecursionError" not in done.stdout + done.stderr
    assert not (workspaces.root / "deep").exists()


# -- the egress proxy -----------------------------------------------------------------------


@pytest.fixture
def echo_server() -> Iterator[int]:
    """A TCP server on the host's loopback answering each line with ``echo: LINE``."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(5)
                with contextlib.suppress(OSError):
                    data = conn.recv(1024)
                    conn.sendall(b"echo: " + data)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    server.close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _exchange(
    path: str, data: bytes, *, then: bytes = b"", eof: bool = False, wait: float = 5.0
) -> bytes:
    """Send ``data`` to the proxy (and end the stream if ``eof``), then ``then`` (after its
    first answer), and return all it answers until it closes (or ``wait`` seconds pass:
    then b"<open>" is appended)."""
    reader, writer = await asyncio.open_unix_connection(path)
    writer.write(data)
    if eof:
        writer.write_eof()
    await writer.drain()
    answer = b""
    try:
        async with asyncio.timeout(wait):
            if then:
                answer += await reader.readuntil(b"\r\n\r\n")
                writer.write(then)
                await writer.drain()
            while chunk := await reader.read(65536):
                answer += chunk
    except TimeoutError:
        answer += b"<open>"
    except (ConnectionError, asyncio.IncompleteReadError) as exc:
        answer += getattr(exc, "partial", b"")
    writer.close()
    return answer


def test_odd_requests_to_the_egress_proxy_are_answered_and_never_crash_it(
    workspaces: Workspaces,
    echo_server: int,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(_egress, "_HEAD_TIMEOUT", 1.0)
    caplog.set_level(logging.DEBUG)
    closed = _closed_port()
    patterns = ("127.0.0.1:*", "localhost:*", "[::1]:*")
    requests: list[tuple[bytes, bytes, str]] = [
        (b"CONNECT 127.0.0.1:99999 HTTP/1.1\r\n\r\n", b"", "400"),
        (b"CONNECT :::: HTTP/1.1\r\n\r\n", b"", "400"),
        (b"CONNECT 127.0.0.1:0 HTTP/1.1\r\n\r\n", b"", "400"),
        (b"CONNECT 127.0.0.1:\xb2\xb3 HTTP/1.1\r\n\r\n", b"", "400"),  # superscript digits
        (b"CONNECT a..b:443 HTTP/1.1\r\n\r\n", b"", "400"),
        (b"CONNECT [zz::1]:443 HTTP/1.1\r\n\r\n", b"", "400"),
        (b"CONNECT " + b"a" * 300 + b":443 HTTP/1.1\r\n\r\n", b"", "400"),
        (b"GET http://127.0.0.1:99999/ HTTP/1.1\r\nHost: x\r\n\r\n", b"", "400"),
        (b"GET http://127.0.0.1/a\nb HTTP/1.1\r\n\r\n", b"", "400"),
        (b"GET /relative HTTP/1.1\r\n\r\n", b"", "400"),
        (b"\x16\x03\x01\x02\x00\x01\xfc\x03\x03" + os.urandom(64) + b"\r\n\r\n", b"", "400"),
        (b"A" * 20_000 + b"\r\n\r\n", b"", "431"),
        (b"CONNECT 127.0.0.1:443 HTTP/1.1\r\n", b"", "408"),  # no end of head, then silent
        (b"GET", b"", "408"),  # a few bytes, then silent
        (b"CONNECT example.com:443 HTTP/1.1\r\n\r\n", b"", "403"),
        (f"CONNECT 127.0.0.1:{closed} HTTP/1.1\r\n\r\n".encode(), b"", "502"),
        # no header lines at all: answered at once, then the tunnel works
        (f"CONNECT 127.0.0.1:{echo_server} HTTP/1.1\r\n\r\n".encode(), b"ping", "200"),
        (f"CONNECT [::1]:{closed} HTTP/1.1\r\n\r\n".encode(), b"", "502"),
    ]
    handled: list[dict[str, Any]] = []

    async def main() -> list[tuple[bytes, float]]:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: handled.append(ctx))
        ws = workspaces.ensure("proxy")
        async with _egress.serve_proxy(ws, patterns) as env:
            path = env["OARLOCK_PROXY_SOCKET"]
            answers = []
            for data, then, _status in requests:
                t0 = time.monotonic()
                answer = await _exchange(path, data, then=then)
                answers.append((answer, time.monotonic() - t0))
            # a non-HTTP stream that ends without a head: closed, no answer
            answers.append((await _exchange(path, os.urandom(512), eof=True), 0.0))
            return answers

    answers = asyncio.run(main())
    for (data, _then, status), (answer, took) in zip(requests, answers, strict=False):
        assert answer.startswith(f"HTTP/1.1 {status} ".encode()), (data[:60], answer[:200])
        assert b"<open>" not in answer, data[:60]  # answered and closed, never left hanging
        if status == "408":
            assert 0.9 < took < 4, took  # the head timeout, not the client's
    assert answers[len(requests) - 2][0].endswith(b"echo: ping")
    assert answers[-1][0] == b""
    assert handled == []
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err + caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]

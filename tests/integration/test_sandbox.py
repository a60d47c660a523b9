"""The sandbox runner against hostile programs: each limit stops what it should, with the
error code it should give; nothing outlives a call; nothing of the host is reachable; the
workspace is the only place a call writes. Run under bubblewrap and under the ``unshare``
fallback alike."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from oarlock.sandbox import (
    SandboxLimits,
    SandboxRunner,
    SandboxUnavailable,
    Workspaces,
    call_sandboxed,
    python,
    read_file,
    shell,
    write_file,
)
from oarlock.sandbox._host import HostSupport, host_support

SUPPORT = host_support()
ISOLATIONS = [
    pytest.param("bubblewrap", id="bubblewrap"),
    pytest.param("unshare", id="unshare"),
]


def _support(isolation: str) -> HostSupport:
    """The host's support, limited to ``isolation`` (the fallback path runs even where
    bubblewrap is there)."""
    assert SUPPORT.supports(isolation), f"this host lacks {isolation}: {SUPPORT.notes}"
    return HostSupport(
        bubblewrap=isolation == "bubblewrap",
        unshare=True,
        drop_user=SUPPORT.drop_user,
        landlock=SUPPORT.landlock,
    )


@pytest.fixture
def open_root() -> Any:
    """A workspaces folder whose parents any user can pass through: under ``unshare`` the
    call's own user reaches its workspace by the host's path (pytest's ``tmp_path`` is
    closed to other users)."""
    import shutil
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="oarlock-sandbox-test-", dir="/tmp"))
    root.chmod(0o711)
    yield root / "workspaces"
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(params=ISOLATIONS)
def runner(request: pytest.FixtureRequest, open_root: Path) -> SandboxRunner:
    return SandboxRunner(
        Workspaces(open_root),
        isolation=request.param,
        support=_support(request.param),
    )


def run(runner: SandboxRunner, argv: list[str], **kw: Any) -> Any:
    return asyncio.run(runner.run(argv, workspace_id="w1", **kw))


def sh(runner: SandboxRunner, script: str, **kw: Any) -> Any:
    return run(runner, ["/bin/sh", "-c", script], **kw)


def test_the_strongest_isolation_is_bubblewrap_here() -> None:
    assert SUPPORT.strongest == "bubblewrap", SUPPORT.notes  # .ci/run installs bubblewrap


def test_a_well_behaved_program_succeeds(runner: SandboxRunner) -> None:
    result = sh(runner, "echo hello > out.txt && cat out.txt && echo oops >&2")
    assert result.ok and result.exit_code == 0
    assert (result.stdout, result.stderr) == (b"hello\n", b"oops\n")
    assert result.isolation == runner.isolation
    assert (runner.workspaces.root / "w1" / "out.txt").read_text() == "hello\n"


def test_a_cpu_loop_stops_at_its_cpu_limit(runner: SandboxRunner) -> None:
    t0 = time.monotonic()
    result = sh(runner, "while :; do :; done", limits=SandboxLimits(cpu_seconds=1))
    assert (result.error_code, result.signal) == ("cpu_limit", "SIGXCPU")
    assert time.monotonic() - t0 < 10


def test_a_memory_bomb_stops_at_its_memory_limit(runner: SandboxRunner) -> None:
    result = run(
        runner,
        ["python3", "-c", "x = bytearray(2 * 1024**3)"],
        limits=SandboxLimits(memory_bytes=256 << 20),
    )
    assert result.error_code == "memory_limit"
    assert b"MemoryError" in result.stderr


def test_a_fork_bomb_is_contained(runner: SandboxRunner) -> None:
    before = len(os.listdir("/proc"))
    result = sh(
        runner,
        "b() { b | b & }; b; sleep 1; exit 7",
        limits=SandboxLimits(processes=16, timeout_seconds=10),
    )
    assert result.exit_code == 7 or result.error_code in ("process_limit", "timeout")
    assert b"fork" in result.stderr.lower()
    time.sleep(0.2)
    assert len(os.listdir("/proc")) < before + 10  # nothing of it is left running


def test_a_one_gigabyte_write_stops_at_its_file_limit(runner: SandboxRunner) -> None:
    result = sh(
        runner, "head -c 1000000000 /dev/zero > big", limits=SandboxLimits(file_bytes=1 << 20)
    )
    assert (result.error_code, result.signal) == ("file_limit", "SIGXFSZ")
    assert (runner.workspaces.root / "w1" / "big").stat().st_size <= 1 << 20


def test_grandchildren_do_not_outlive_the_timeout(runner: SandboxRunner) -> None:
    mark = f"{300 + os.getpid() % 1000}.{time.monotonic_ns() % 10**6}"  # this test's own
    script = f"sh -c 'setsid sh -c \"sleep {mark} & echo $! > grandchild; wait\" &' ; sleep {mark}"
    t0 = time.monotonic()
    result = sh(runner, script, limits=SandboxLimits(timeout_seconds=1))
    assert result.error_code == "timeout" and time.monotonic() - t0 < 5
    time.sleep(0.3)
    leftovers = [p for p in _processes() if f"sleep {mark}" in p]
    assert leftovers == []


def _open_to_all(folder: str) -> bool:
    path = Path(folder).resolve()
    return all(p.stat().st_mode & 0o001 for p in [path, *path.parents])


def _processes() -> list[str]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            with contextlib.suppress(OSError):
                found.append(
                    Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                )
    return found


def test_output_is_capped_and_a_flood_stopped(runner: SandboxRunner) -> None:
    result = sh(runner, "yes", limits=SandboxLimits(output_bytes=1000, timeout_seconds=20))
    assert result.error_code == "output_limit"
    assert len(result.stdout) == 1000 and result.dropped > 0


@pytest.fixture
def listener() -> Any:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    yield server.getsockname()[1]
    server.close()


def test_no_egress_reaches_neither_the_host_loopback_nor_the_world(
    runner: SandboxRunner, listener: int
) -> None:
    code = (
        "import socket, sys\n"
        f"for host, port in (('127.0.0.1', {listener}), ('93.184.216.34', 80)):\n"
        "    try:\n"
        "        socket.create_connection((host, port), timeout=2)\n"
        "        print('CONNECTED', host)\n"
        "    except OSError as exc:\n"
        "        print('refused', host, exc.errno)\n"
    )
    result = run(runner, ["python3", "-c", code])
    assert result.ok, result.stderr
    assert b"CONNECTED" not in result.stdout
    assert result.stdout.count(b"refused") == 2
    # it never left: the network is unreachable, or Landlock refused the connection first
    assert any(f"93.184.216.34 {e}".encode() in result.stdout for e in (101, 13))


def test_the_home_folder_the_database_and_keys_are_out_of_reach(
    runner: SandboxRunner, tmp_path: Path
) -> None:
    db = tmp_path / "runs.db"
    db.write_text("secret rows")
    db.chmod(0o600)
    ssh = Path.home() / ".ssh"
    result = sh(runner, f"cat {db}; ls {ssh}; cat /root/.bash_history; echo done")
    assert b"secret rows" not in result.stdout
    assert result.stdout.endswith(b"done\n")
    assert result.stderr.count(b"No such file") + result.stderr.count(b"Permission denied") >= 2


def test_writes_outside_the_workspace_fail(runner: SandboxRunner, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    result = sh(runner, f"echo x > {outside}; echo x > /etc/oarlock-test; echo x > /usr/x")
    assert not outside.exists()
    assert not Path("/etc/oarlock-test").exists() and not Path("/usr/x").exists()
    assert result.stderr.count(b"\n") >= 3


def test_environment_secrets_are_not_visible(
    runner: SandboxRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret-0123456789abcdef")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret")
    result = sh(runner, "env")
    assert b"sk-test-secret" not in result.stdout and b"aws-secret" not in result.stdout
    passed = asyncio.run(
        runner.run(["/bin/sh", "-c", "echo $GREETING"], workspace_id="w1", env={"GREETING": "hi"})
    )
    assert passed.stdout == b"hi\n"


def test_a_host_without_isolation_refuses_instead_of_running_bare(tmp_path: Path) -> None:
    none = HostSupport(bubblewrap=False, unshare=False, drop_user=False,
                       notes=("bubblewrap: not installed",))  # fmt: skip
    runner = SandboxRunner(Workspaces(tmp_path / "w"), support=none)
    marker = tmp_path / "ran"
    with pytest.raises(SandboxUnavailable) as refused:
        asyncio.run(runner.run(["/bin/sh", "-c", f"touch {marker}"], workspace_id="w1"))
    assert refused.value.code == "sandbox_unavailable" and "not installed" in str(refused.value)
    assert not marker.exists()
    strict = SandboxRunner(
        Workspaces(tmp_path / "w"),
        isolation="bubblewrap",
        support=HostSupport(bubblewrap=False, unshare=True, drop_user=False),
    )
    with pytest.raises(SandboxUnavailable):
        strict.choose("none")


# -- the built-in tools ---------------------------------------------------------------------


def call(runner: SandboxRunner, tool: Any, **arguments: Any) -> Any:
    return asyncio.run(call_sandboxed(runner, tool, arguments, workspace_id="w1", egress="none"))


def test_the_built_in_tools_work_in_the_workspace(runner: SandboxRunner) -> None:
    assert (
        call(runner, write_file, path="src/main.py", content="print(6 * 7)").status == "Succeeded"
    )
    ran = call(runner, shell, command="python3 src/main.py; exit 3")
    assert ran.status == "Succeeded" and ran.text.startswith("exit status 3\n--- stdout ---\n42")
    script = call(runner, python, code="import os; print(sorted(os.listdir('src')))")
    assert script.text == "exit status 0\n--- stdout ---\n['main.py']\n"
    assert call(runner, read_file, path="src/main.py").text == "print(6 * 7)"
    assert ran.usage()["isolation"] == runner.isolation


def test_a_symlink_planted_in_the_workspace_cannot_lead_a_write_outside(
    runner: SandboxRunner, tmp_path: Path
) -> None:
    target = tmp_path / "victim.txt"
    target.write_text("untouched")
    call(runner, shell, command=f"ln -s {target} link.txt; mkdir d; ln -s {tmp_path} d/up")
    for path in ("link.txt", "d/up/victim.txt"):
        wrote = call(runner, write_file, path=path, content="owned")
        assert (wrote.status, wrote.error[0]) == ("Failed", "path_refused"), path
        read = call(runner, read_file, path=path)
        assert read.status == "Failed"
    assert target.read_text() == "untouched"
    for path in ("../x", "/etc/passwd", "a/../../x", "", "a//b", "./a"):
        assert call(runner, write_file, path=path, content="x").error[0] == "path_refused"


def test_a_python_tool_runs_in_the_sandbox(
    runner: SandboxRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sandbox_tools

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret-0123456789abcdef")
    reachable = _open_to_all(sys.prefix) and _open_to_all(sys.base_prefix)
    if runner.isolation == "unshare" and SUPPORT.drop_user and not reachable:
        # unshare shows the host's files as they are: an interpreter the sandbox's user
        # cannot reach makes the call impossible, and it is refused, never run bare
        with pytest.raises(SandboxUnavailable, match="not reachable by the sandbox's user"):
            call(runner, sandbox_tools.where_am_i, greeting="hi")
        return
    done = call(runner, sandbox_tools.where_am_i, greeting="hi")
    assert done.status == "Succeeded", done.error
    assert done.text.startswith(
        "hi from /workspace" if runner.isolation == "bubblewrap" else "hi from /"
    )
    assert "key=None" in done.text
    failed = call(runner, sandbox_tools.fails)
    assert failed.status == "Failed" and failed.error == ("ValueError", "ValueError: no")


@pytest.fixture
def web() -> Any:
    """An HTTP server on the host's loopback."""
    import http.server
    import threading

    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"hello from the host")

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


def _fetch(port: int, host: str = "127.0.0.1") -> list[str]:
    code = (
        "import urllib.request, sys\n"
        "try:\n"
        f"    print(urllib.request.urlopen('http://{host}:{port}/', timeout=5).read().decode())\n"
        "except Exception as exc:\n"
        "    print('FAILED', exc)\n"
    )
    return ["python3", "-c", code]


@pytest.mark.parametrize(
    ("egress", "allow", "reached"),
    [
        ("none", (), False),
        ("loopback", (), True),
        ("allowlist", ("127.0.0.1:{port}",), True),
        ("allowlist", ("127.0.0.1:1",), False),
        ("allowlist", ("*.example.com:443",), False),
        ("host", (), True),
    ],
)
def test_egress_profiles_open_exactly_what_they_name(
    runner: SandboxRunner, web: int, egress: str, allow: tuple[str, ...], reached: bool
) -> None:
    hosts = [a.format(port=web) for a in allow]
    result = asyncio.run(
        runner.run(_fetch(web), workspace_id="w1", egress=egress, allow_hosts=hosts)
    )
    assert result.ok, result.stderr
    assert (b"hello from the host" in result.stdout) is reached, result.stdout
    if egress == "allowlist" and not reached:
        assert b"403" in result.stdout  # refused by the proxy, never connected


def test_an_allowlisted_name_cannot_be_reached_by_another_name(
    runner: SandboxRunner, web: int
) -> None:
    result = asyncio.run(
        runner.run(
            _fetch(web, host="localhost"),
            workspace_id="w1",
            egress="allowlist",
            allow_hosts=[f"127.0.0.1:{web}"],
        )
    )
    assert b"hello" not in result.stdout and b"403" in result.stdout

"""The sandbox's least-privilege fences against a hostile program (the model controls every
argument of ``sandbox.shell``, ``sandbox.python`` and ``sandbox``-class Python tools): real
processes, real kernel, nothing mocked. Under bubblewrap and under the ``unshare``
fallback (opted into by name), as root and as an unprivileged user:

* no capability, no root, no_new_privs, the seccomp filter on, a fresh session keyring;
* the kernel's escape hatches (mount, new namespaces, keyrings, ptrace, bpf, perf, ...)
  refused;
* writes only to the workspace and a private /tmp; nothing of the host's temporary folders,
  home or run database;
* how the program ended cannot be forged; a tool sees its own module, not its folder;
* ``auto`` never picks ``unshare``; ``oarlock sandbox check`` tells the truth.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyseccomp
import pytest

from oarlock.sandbox import SandboxLimits, SandboxRunner, SandboxUnavailable, Workspaces
from oarlock.sandbox import _runner as runner_module
from oarlock.sandbox._call import call_sandboxed
from oarlock.sandbox._host import HostSupport, host_support

SUPPORT = host_support()
ROOT = os.geteuid() == 0
ARCH = pyseccomp.system_arch()
ISOLATIONS = [pytest.param("bubblewrap", id="bubblewrap"), pytest.param("unshare", id="unshare")]
CAPS = ("CapEff", "CapPrm", "CapBnd", "CapInh", "CapAmb")


def nr(name: str) -> int:
    return int(pyseccomp.resolve_syscall(ARCH, name))


def support_for(isolation: str, support: HostSupport = SUPPORT) -> HostSupport:
    assert support.supports(isolation), f"this host lacks {isolation}: {support.notes}"
    return HostSupport(
        bubblewrap=isolation == "bubblewrap",
        unshare=support.unshare,
        drop_user=support.drop_user,
        landlock=support.landlock,
    )


@pytest.fixture
def open_root() -> Iterator[Path]:
    """A folder any user can pass through (pytest's ``tmp_path`` is closed to others, and
    under ``unshare`` the call's own user reaches its workspace by the host's path)."""
    root = Path(tempfile.mkdtemp(prefix="oarlock-fences-", dir="/tmp"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(params=ISOLATIONS)
def runner(request: pytest.FixtureRequest, open_root: Path) -> SandboxRunner:
    isolation = request.param
    return SandboxRunner(
        Workspaces(open_root / "ws"), isolation=isolation, support=support_for(isolation)
    )


def run(runner: SandboxRunner, argv: list[str], **kw: Any) -> Any:
    return asyncio.run(runner.run(argv, workspace_id="w1", **kw))


def sh(runner: SandboxRunner, script: str, **kw: Any) -> Any:
    return run(runner, ["/bin/sh", "-c", script], **kw)


def py(runner: SandboxRunner, code: str, *args: str, **kw: Any) -> Any:
    return run(runner, ["python3", "-I", "-c", code, *args], **kw)


def status_of(text: bytes) -> dict[str, str]:
    found = {}
    for line in text.decode().splitlines():
        name, _, value = line.partition(":")
        found[name] = value.strip()
    return found


# -- privileges ----------------------------------------------------------------------------
def test_a_call_holds_no_capability_no_root_and_cannot_regain_them(runner: SandboxRunner) -> None:
    for argv in (
        ["/bin/sh", "-c", "cat /proc/self/status"],
        ["python3", "-I", "-c", "print(open('/proc/self/status').read())"],
    ):
        result = run(runner, argv)
        assert result.ok, result.stderr
        status = status_of(result.stdout)
        assert {cap: int(status[cap], 16) for cap in CAPS} == dict.fromkeys(CAPS, 0), status
        assert (status["NoNewPrivs"], status["Seccomp"]) == ("1", "2")
        if ROOT:
            uids, gids = set(status["Uid"].split()), set(status["Gid"].split())
            assert len(uids) == 1 and uids == gids and "0" not in uids, status
            assert status["Groups"] == ""
    attempt = sh(runner, "mount -o remount,rw /usr && echo REMOUNTED; "
                         "touch /usr/oarlock-fence-test && echo TOUCHED; exit 0")  # fmt: skip
    assert b"REMOUNTED" not in attempt.stdout and b"TOUCHED" not in attempt.stdout
    assert not Path("/usr/oarlock-fence-test").exists()


def test_a_fence_that_cannot_be_put_up_refuses_the_call(
    runner: SandboxRunner, open_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not ROOT:
        pytest.skip("the drop to a uid of its own is root's")
    from dataclasses import replace

    real = runner_module.sandbox_command
    monkeypatch.setattr(  # a runner that forgot the uid: the entry program must not run
        runner_module, "sandbox_command", lambda call, bpf: real(replace(call, uid=None), bpf)
    )
    marker = open_root / "ran"
    with pytest.raises(SandboxUnavailable, match="running as root") as refused:
        sh(runner, f"touch {marker}")
    assert refused.value.code == "sandbox_unavailable" and not marker.exists()


@pytest.fixture
def root_key() -> Iterator[tuple[int, bytes, bytes]]:
    """A ``user`` key (owned by this process's user, root in CI) in this process's
    session keyring: (serial, description, payload)."""
    libc = ctypes.CDLL(None, use_errno=True)
    description = f"oarlock-fence-{secrets.token_hex(6)}".encode()
    payload = f"payload-{secrets.token_hex(8)}".encode()
    serial = libc.syscall(nr("add_key"), b"user", description, payload, len(payload), -3)
    if serial < 0:
        pytest.skip(f"add_key: {os.strerror(ctypes.get_errno())} (no keyrings here)")
    yield serial, description, payload
    libc.syscall(nr("keyctl"), 21, serial)  # KEYCTL_INVALIDATE


KEY_PROBE = r"""
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
serial, keyctl = int(sys.argv[1]), int(sys.argv[2])
buf = ctypes.create_string_buffer(256)
n = libc.syscall(keyctl, 11, serial, buf, 256)  # KEYCTL_READ
print("read", n, ctypes.get_errno(), buf.raw[: max(n, 0)])
print("session", libc.syscall(keyctl, 0, -3, 0), ctypes.get_errno())
try:
    print("proc-keys", open("/proc/keys").read())
except OSError as exc:
    print("proc-keys-error", exc.errno)
"""


def test_the_starting_processs_keyring_is_out_of_reach(
    runner: SandboxRunner, root_key: tuple[int, bytes, bytes]
) -> None:
    serial, description, payload = root_key
    args = [str(serial), str(nr("keyctl"))]
    bare = subprocess.run(
        [sys.executable, "-I", "-c", KEY_PROBE, *args], capture_output=True, check=True
    )
    assert payload in bare.stdout and description in bare.stdout  # the probe sees a leak
    result = py(runner, KEY_PROBE, *args)
    assert result.ok, result.stderr
    assert payload not in result.stdout and description not in result.stdout
    assert b"read -1 1 " in result.stdout and b"session -1 1" in result.stdout  # EPERM
    assert b"proc-keys-error" in result.stdout or b"proc-keys \n" in result.stdout


ESCAPES = r"""
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
nr = json.loads(sys.argv[1])
def errno_of(call):
    ctypes.set_errno(0)
    r = call()
    if r == 0 and os.getpid() != me:  # a clone that should not have worked: the child leaves
        os._exit(0)
    return 0 if r >= 0 else ctypes.get_errno()
me = os.getpid()
s = lambda name, *a: lambda: libc.syscall(nr[name], *a)
found = {
    "mount": errno_of(lambda: libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)),
    "umount2": errno_of(s("umount2", b"/proc", 2)),
    "unshare(user)": errno_of(lambda: libc.unshare(0x10000000)),
    "unshare(net)": errno_of(lambda: libc.unshare(0x40000000)),
    "clone(newuser)": errno_of(s("clone", 0x10000000 | 17, 0, 0, 0, 0)),
    "clone3": errno_of(s("clone3", None, 0)),
    "setns": errno_of(s("setns", 0, 0)),
    "keyctl": errno_of(s("keyctl", 0, -3, 0)),
    "add_key": errno_of(s("add_key", b"user", b"x", b"y", 1, -3)),
    "request_key": errno_of(s("request_key", b"user", b"x", None, 0)),
    "ptrace": errno_of(lambda: libc.ptrace(16, 1, None, None)),
    "bpf": errno_of(s("bpf", 0, None, 0)),
    "perf_event_open": errno_of(s("perf_event_open", None, 0, -1, -1, 0)),
    "userfaultfd": errno_of(s("userfaultfd", 0)),
    "io_uring_setup": errno_of(s("io_uring_setup", 1, None)),
    "init_module": errno_of(s("init_module", None, 0, b"")),
    "kexec_load": errno_of(s("kexec_load", 0, 0, None, 0)),
    "reboot": errno_of(s("reboot", 0, 0, 0, None)),
    "swapon": errno_of(s("swapon", b"/tmp/x", 0)),
    "acct": errno_of(s("acct", None)),
    "syslog": errno_of(s("syslog", 10, None, 0)),
    "open_by_handle_at": errno_of(s("open_by_handle_at", -1, None, 0)),
    "personality(READ_IMPLIES_EXEC)": errno_of(s("personality", 0x0400000)),
}
found["personality(query)"] = errno_of(s("personality", 0xFFFFFFFF))
found["personality(linux)"] = errno_of(s("personality", 0))
print(json.dumps(found))
"""


def test_the_kernels_escape_hatches_are_refused(runner: SandboxRunner) -> None:
    names = ["umount2", "clone", "clone3", "setns", "keyctl", "add_key", "request_key", "bpf",
             "perf_event_open", "userfaultfd", "io_uring_setup", "init_module", "kexec_load",
             "reboot", "swapon", "acct", "syslog", "open_by_handle_at", "personality"]  # fmt: skip
    result = py(runner, ESCAPES, json.dumps({n: nr(n) for n in names}))
    assert result.ok, result.stderr
    found = json.loads(result.stdout)
    allowed = {"personality(query)": 0, "personality(linux)": 0, "clone3": 38}  # ENOSYS
    for call, code in found.items():
        assert code == allowed.get(call, 1), (call, code)  # EPERM
    tools = sh(runner, "unshare -U true && echo NAMESPACE; unshare -r true && echo ROOT; exit 0")
    assert b"NAMESPACE" not in tools.stdout and b"ROOT" not in tools.stdout


def test_the_personality_rules_allow_exactly_the_default_domains() -> None:
    from oarlock.sandbox._seccomp import _personality_rules, seccomp_filter

    rules = _personality_rules()

    def denied(value: int) -> bool:  # the kernel reads the argument as 32 bits
        return any(value & mask == match for mask, match in rules)

    allowed = {0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF}
    assert not any(denied(v) for v in allowed)
    others = [1 << b for b in range(32)] + [0xFFFFFFFE, 0x7FFFFFFF, 0x0400008, 0xFFFDFFF7]
    others += [secrets.randbits(32) for _ in range(2000)]
    assert all(denied(v) for v in others if v not in allowed)
    assert seccomp_filter() is seccomp_filter()  # compiled once per process


# -- files ---------------------------------------------------------------------------------
def test_writes_land_only_in_the_workspace_and_a_private_tmp(
    runner: SandboxRunner, open_root: Path
) -> None:
    mark = f"oarlock-fence-{secrets.token_hex(4)}"
    outside = open_root / f"{mark}-outside"
    targets = ["/usr", "/etc", "/", "/run", "/var/tmp", "/dev/shm", str(open_root)]
    script = "; ".join(f"echo x > {t.rstrip('/')}/{mark} 2>/dev/null && echo WROTE {t}"
                       for t in targets)  # fmt: skip
    rest = f"echo x > {outside} && echo WROTE outside; echo x > /tmp/{mark} && echo TMP"
    result = sh(runner, f"{script}; {rest}; echo x > {mark} && echo HERE")
    wrote = [line for line in result.stdout.decode().splitlines() if line.startswith("WROTE")]
    if runner.isolation == "unshare":  # private tmpfs there, gone with the call
        assert sorted(wrote) == ["WROTE /dev/shm", "WROTE /var/tmp"]
    else:
        assert wrote == []
    assert b"TMP\n" in result.stdout and b"HERE\n" in result.stdout
    for host in ["/usr", "/etc", "/", "/run", "/var/tmp", "/dev/shm", "/tmp", str(open_root)]:
        assert not Path(host, mark).exists(), host
    assert not outside.exists()
    assert (runner.workspaces.root / "w1" / mark).exists()


def test_tmp_is_writable_private_and_bounded(runner: SandboxRunner) -> None:
    mark = f"oarlock-fence-{secrets.token_hex(4)}"
    first = sh(runner, f"stat -c %a /tmp; echo secret > /tmp/{mark} && cat /tmp/{mark}")
    assert first.stdout == b"1777\nsecret\n", first.stderr
    second = sh(runner, f"cat /tmp/{mark} || echo GONE")
    assert second.stdout == b"GONE\n" and not Path("/tmp", mark).exists()
    full = sh(runner, "head -c 3000000 /dev/zero > /tmp/big || echo FULL",
              limits=SandboxLimits(tmp_bytes=1 << 20))  # fmt: skip
    assert b"FULL" in full.stdout and b"No space left" in full.stderr


def test_localhost_resolves_and_ca_certificates_are_readable(runner: SandboxRunner) -> None:
    code = (
        "import os, socket, ssl\n"
        "print(socket.gethostbyname('localhost'))\n"
        "print(oct(os.stat('/etc').st_mode & 0o777))\n"
        "print(len(os.listdir('/etc/ssl/certs')) > 0)\n"
        "paths = ssl.get_default_verify_paths()\n"
        "print('BEGIN CERTIFICATE' in open(paths.openssl_cafile).read())\n"
    )
    result = py(runner, code)
    assert result.ok, result.stderr
    assert result.stdout.decode().split() == ["127.0.0.1", "0o755", "True", "True"]


def test_the_hosts_unix_sockets_and_home_are_not_reachable(
    runner: SandboxRunner, open_root: Path
) -> None:
    import socket

    mark = f"oarlock-fence-{secrets.token_hex(4)}"
    places = [Path("/tmp", f"{mark}.sock"), Path("/run", f"{mark}.sock")]
    servers = []
    try:
        for path in places:
            server = socket.socket(socket.AF_UNIX)
            server.bind(str(path))
            path.chmod(0o777)  # any user may connect: only the sandbox keeps the call out
            server.listen()
            servers.append(server)
        code = (
            "import socket, sys\n"
            "for path in sys.argv[1:]:\n"
            "    try:\n"
            "        socket.socket(socket.AF_UNIX).connect(path)\n"
            "        print('CONNECTED', path)\n"
            "    except OSError as exc:\n"
            "        print('refused', exc.errno)\n"
        )
        result = py(runner, code, *map(str, places))
        home = sh(runner, "ls /root; ls -A /home; echo END")
    finally:
        for server in servers:
            server.close()
        for path in places:
            path.unlink(missing_ok=True)
    assert result.ok, result.stderr
    assert b"CONNECTED" not in result.stdout and result.stdout.count(b"refused") == 2
    assert home.stdout == b"END\n", home.stdout  # nothing of /root or /home listed


# -- status ----------------------------------------------------------------------------------
def test_a_forged_status_is_not_believed(runner: SandboxRunner) -> None:
    forge = ("for fd in /proc/self/fd/* /proc/1/fd/*; do for text in 'exit 0' 0 'ok'; do "
             "printf '%s\\n' \"$text\" > $fd; done; done 2>/dev/null; exit 7")  # fmt: skip
    result = sh(runner, forge)
    assert (result.exit_code, result.signal) == (7, None)
    killed = sh(runner, "printf 'exit 0\\n' > /proc/1/fd/3 2>/dev/null; kill -KILL $$")
    assert (killed.exit_code, killed.signal) == (None, "SIGKILL")


# -- a Python tool's own folder ----------------------------------------------------------------
TOOL = '''
import os
from pathlib import Path

from oarlock.tools import tool


@tool(side_effect="sandbox")
def peek() -> str:
    """List this module's folder and try the files beside it."""
    here = Path(__file__).parent
    try:
        seen = sorted(os.listdir(here))
    except OSError as exc:
        seen = [type(exc).__name__]
    found = []
    for name in (".env", "runs.db", "runs.db-wal", "runs.db-shm", "agent.yaml"):
        try:
            found.append((here / name).read_text()[:40])
        except OSError as exc:
            found.append(type(exc).__name__)
    return f"own={len(Path(__file__).read_text())} seen={seen} found={found}"
'''


def test_a_tool_sees_its_module_never_the_agent_folder(
    runner: SandboxRunner, open_root: Path
) -> None:
    from oarlock.engine._agentfile import load_agent

    folder = open_root / "agent"
    folder.mkdir(mode=0o755)
    (folder / "tools.py").write_text(TOOL)
    script = Path(__file__).parents[2] / "examples" / "agents" / "coder.script.yaml"
    (folder / "agent.yaml").write_text(
        f"name: peeker\nmodel: scripted:{script}\ntools:\n  - tools:peek\n"
    )
    for name in (".env", "runs.db", "runs.db-wal", "runs.db-shm"):
        (folder / name).write_text(f"SECRET {name}")
        (folder / name).chmod(0o644)  # any user may read them: only the sandbox keeps them
    tool = load_agent(folder / "agent.yaml").tools.get("peek")
    assert tool is not None and tool.fn.__module__.startswith("_oarlock_agent_")
    call = call_sandboxed(runner, tool, {}, workspace_id="w1", egress="none")
    interpreter = Path(sys.base_prefix).resolve()
    if runner.isolation == "unshare" and ROOT and not _open_to_all(interpreter):
        with pytest.raises(SandboxUnavailable, match="not reachable by the sandbox's user"):
            asyncio.run(call)  # the host's files as they are: refused, never run bare
        return
    done = asyncio.run(call)
    assert done.status == "Succeeded", done.error
    assert "SECRET" not in done.text and done.text.startswith(f"own={len(TOOL)} ")
    if runner.isolation == "bubblewrap":
        assert "seen=['tools.py']" in done.text
    else:  # the host's folder, its listing refused by Landlock
        assert "seen=['PermissionError']" in done.text


def _open_to_all(path: Path) -> bool:
    return all(p.stat().st_mode & 0o001 for p in [path, *path.parents])


# -- choosing the isolation --------------------------------------------------------------------
def test_auto_never_picks_unshare_and_unshare_needs_opting_in(
    open_root: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    weak = support_for("unshare")
    marker = open_root / "ran"
    auto = SandboxRunner(Workspaces(open_root / "ws"), support=weak)
    with pytest.raises(SandboxUnavailable, match="isolation: unshare") as refused:
        asyncio.run(auto.run(["/bin/sh", "-c", f"touch {marker}"], workspace_id="w1"))
    assert refused.value.code == "sandbox_unavailable" and not marker.exists()
    strict = SandboxRunner(Workspaces(open_root / "ws"), isolation="bubblewrap", support=weak)
    with pytest.raises(SandboxUnavailable, match="requires bubblewrap"):
        strict.choose("none", require="unshare")  # a policy cannot loosen the agent's
    monkeypatch.setattr(runner_module, "_warned", [])
    with caplog.at_level("WARNING", logger="oarlock.sandbox"):
        assert auto.choose("none", require="unshare") == "unshare"  # the policy opts in
        named = SandboxRunner(Workspaces(open_root / "ws"), isolation="unshare", support=weak)
        result = asyncio.run(named.run(["/bin/sh", "-c", "echo ran"], workspace_id="w1"))
    assert (result.isolation, result.stdout) == ("unshare", b"ran\n")
    warnings = [r for r in caplog.records if "unshare fallback" in r.getMessage()]
    assert len(warnings) == 1  # once per process
    full = SandboxRunner(Workspaces(open_root / "ws"), isolation="unshare", support=SUPPORT)
    assert full.choose("none") == "bubblewrap"  # the least accepted: bubblewrap is better


def test_a_policy_that_names_unshare_runs_the_call_and_the_receipt_says_so(
    open_root: Path,
) -> None:
    from oarlock.engine import Agent, Runner
    from oarlock.governance import GovernedExecutor, RulePolicy
    from oarlock.governance._records import run_uuid
    from oarlock.models import ScriptedModel
    from oarlock.sandbox import shell
    from oarlock.testing import MemoryStore, ValidatingStore

    def drive(policy: RulePolicy | None) -> dict[str, Any]:
        calls = [{"name": "sandbox.shell", "arguments": {"command": "echo hi"}}]
        agent = Agent("a", ScriptedModel([{"tool_calls": calls}, {"text": "done"}]),
                      tools=[shell], tenant="t", policy=policy)  # fmt: skip
        store = ValidatingStore(MemoryStore())
        sandbox = SandboxRunner(Workspaces(open_root / "ws"), support=support_for("unshare"))
        executor = GovernedExecutor(store.governance(), policy=policy, sandbox=sandbox)
        doc = asyncio.run(Runner(agent, store, executor=executor).start("go"))
        [item] = asyncio.run(store.governance().receipts(run_id=run_uuid(doc.id)))
        return {"status": item.status, "receipt": item.receipt}

    refused = drive(None)
    assert refused["status"] == "Denied"
    assert refused["receipt"]["error"]["code"] == "sandbox_unavailable"
    rule = {"id": "weak-ok", "effect": "allow", "sandbox": {"isolation": "unshare"},
            "match": {"class": "sandbox"}}  # fmt: skip
    ran = drive(RulePolicy.from_dict({"policy": "p", "rules": [rule]}))
    assert ran["status"] == "Succeeded", ran["receipt"]
    assert ran["receipt"]["usage"]["sandbox"]["isolation"] == "unshare"


def test_without_setpriv_or_prlimit_the_call_is_still_dropped(
    open_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tools = open_root / "bin"
    tools.mkdir()
    for name in ("bwrap", "unshare"):
        found = shutil.which(name)
        assert found is not None
        (tools / name).symlink_to(found)
    monkeypatch.setenv("PATH", str(tools))
    assert shutil.which("setpriv") is None and shutil.which("prlimit") is None
    host_support.cache_clear()
    try:
        support = host_support()
        assert support.bubblewrap and support.unshare, support.notes
        for isolation in ("bubblewrap", "unshare"):
            runner = SandboxRunner(Workspaces(open_root / "ws"), isolation=isolation,
                                   support=support_for(isolation, support))  # fmt: skip
            result = run(runner, ["/bin/cat", "/proc/self/status"])
            status = status_of(result.stdout)
            assert int(status["CapEff"], 16) == int(status["CapBnd"], 16) == 0
            assert "0" not in status["Uid"].split() or not ROOT
    finally:
        host_support.cache_clear()


# -- oarlock sandbox check -------------------------------------------------------------------
def test_sandbox_check_probes_every_guarantee(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from oarlock.cli import main
    from oarlock.sandbox import _host

    assert main(["sandbox", "check", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["isolation"] == "bubblewrap"
    guarantees = report["guarantees"]
    assert {"user", "capabilities", "no_new_privs", "keyring", "seccomp", "landlock",
            "limits", "egress none", "/tmp"} <= set(guarantees)  # fmt: skip
    assert all(g["ok"] for g in guarantees.values()), guarantees
    assert main(["sandbox", "check", "--isolation", "unshare"]) == 0
    text = capsys.readouterr().out
    assert "seccomp      yes" in text and "own user" not in text
    missing = HostSupport(bubblewrap=False, unshare=True, drop_user=ROOT,
                          notes=("bubblewrap: bwrap is not installed",))  # fmt: skip
    monkeypatch.setattr(_host, "host_support", lambda: missing)
    assert main(["sandbox", "check"]) == 1
    assert "bwrap is not installed" in capsys.readouterr().out


# -- as a user other than root ----------------------------------------------------------------
DRIVER = r"""
import asyncio, json, sys
from pathlib import Path
from oarlock.sandbox._host import HostSupport, host_support
from oarlock.sandbox._runner import SandboxRunner, SandboxUnavailable
from oarlock.sandbox._workspace import Workspaces

root, probe = Path(sys.argv[1]), sys.argv[2]
support = host_support()
out = {"notes": list(support.notes)}
for isolation in ("bubblewrap", "unshare"):
    s = HostSupport(bubblewrap=isolation == "bubblewrap" and support.bubblewrap,
                    unshare=support.unshare, drop_user=False, landlock=support.landlock)
    runner = SandboxRunner(Workspaces(root / isolation), isolation=isolation, support=s)
    try:
        r = asyncio.run(runner.run(["python3", "-I", "-c", probe, *sys.argv[3:]],
                                   workspace_id="w1"))
        out[isolation] = {"exit": r.exit_code, "stdout": r.stdout.decode(),
                          "stderr": r.stderr.decode()[-2000:]}
    except SandboxUnavailable as exc:
        out[isolation] = {"refused": str(exc)}
print(json.dumps(out))
"""

UNPRIVILEGED_PROBE = r"""
import ctypes, json, os, sys
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(256)
n = libc.syscall(int(sys.argv[2]), 11, int(sys.argv[1]), buf, 256)
found = {"caps": [int(status[c], 16) for c in %r], "nnp": status["NoNewPrivs"].strip(),
         "seccomp": status["Seccomp"].strip(), "key": [n, ctypes.get_errno()],
         "payload": buf.raw[: max(n, 0)].decode("latin-1")}
for path in sys.argv[3:]:
    try:
        found[path] = open(path).read()
    except OSError as exc:
        found[path] = exc.errno
try:
    found["proc_keys"] = open("/proc/keys").read()
except OSError as exc:
    found["proc_keys"] = exc.errno
open("/tmp/" + os.path.basename(sys.argv[3]) + ".tmp", "w").write("x")
print(json.dumps(found))
""".replace("%r", repr(CAPS))


def test_as_an_unprivileged_user_the_same_fences_hold_or_the_call_is_refused(
    root_key: tuple[int, bytes, bytes],
) -> None:
    if not ROOT:
        pytest.skip("runs a driver as another user: needs root (CI runs as root)")
    setpriv, python = shutil.which("setpriv"), "/usr/bin/python3"
    if setpriv is None or not os.access(python, os.X_OK):
        pytest.skip("needs util-linux's setpriv and a /usr/bin/python3 any user can run")
    serial, description, payload = root_key
    base = Path(tempfile.mkdtemp(prefix="oarlock-unprivileged-", dir="/tmp"))
    homes = "/home" if os.path.isdir("/home") else "/var/lib"
    home: Path | None = None
    try:
        base.chmod(0o755)
        lib = base / "lib"
        src = Path(__file__).parents[2] / "src" / "oarlock"
        shutil.copytree(src, lib / "oarlock", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(pyseccomp.__file__, lib / "pyseccomp.py")
        # a home outside /tmp (which the unshare fallback covers with its own)
        home = Path(tempfile.mkdtemp(prefix="oarlock-unprivileged-home-", dir=homes))
        ws = base / "ws"
        ws.mkdir()
        for folder in (home, ws):
            folder.chmod(0o755)
            os.chown(folder, 65534, 65534)
        secret, db = home / "secret.txt", home / "runs.db"
        mark = f"oarlock-unprivileged-{secrets.token_hex(4)}"
        for path, text in ((secret, "SECRET home"), (db, "SECRET rows")):
            path.write_text(text)
            os.chown(path, 65534, 65534)
            path.chmod(0o600)  # its user's own: only the sandbox keeps it from the call
        for path in [lib, *lib.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        driver = base / "driver.py"
        driver.write_text(DRIVER)
        done = subprocess.run(
            [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", python, str(driver),
             str(ws), UNPRIVILEGED_PROBE, str(serial), str(nr("keyctl")), str(secret), str(db),
             f"/tmp/{mark}"],
            capture_output=True, timeout=120, cwd=base, check=False,
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(lib), "HOME": str(home),
                 "LANG": "C.UTF-8"},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr.decode()[-3000:]
        out = json.loads(done.stdout)
        assert not Path("/tmp", f"{mark}.tmp").exists()  # its /tmp was its own
    finally:
        shutil.rmtree(base, ignore_errors=True)
        if home is not None:
            shutil.rmtree(home, ignore_errors=True)
    for isolation in ("bubblewrap", "unshare"):
        got = out[isolation]
        if "refused" in got:  # this host cannot fence an unprivileged call: never run bare
            assert "sandbox" in got["refused"] or "isolat" in got["refused"], got
            continue
        assert got["exit"] == 0, got
        found = json.loads(got["stdout"])
        assert found["caps"] == [0] * len(CAPS) and (found["nnp"], found["seccomp"]) == ("1", "2")
        assert found["key"] == [-1, 1] and found["payload"] == ""  # keyctl: EPERM
        assert description.decode() not in str(found["proc_keys"])
        assert payload.decode() not in got["stdout"] and "SECRET" not in got["stdout"]
        # not in bubblewrap's view (ENOENT); Landlock keeps the unshare call out (EACCES)
        hidden = 2 if isolation == "bubblewrap" else 13
        assert (found[str(secret)], found[str(db)]) == (hidden, hidden), found

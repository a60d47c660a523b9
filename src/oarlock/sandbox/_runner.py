"""The sandbox runner: every ``sandbox``-class call runs here, in a child process that
cannot reach the host.

The child runs in a session and process group of its own, inside the run's workspace, under
the strongest isolation the host supports (:mod:`oarlock.sandbox._host`), as an
unprivileged user of its own when oarlock runs as root, with the kernel limits of
:class:`~oarlock.sandbox.SandboxLimits` and a cleared environment (only ``PATH``, ``HOME``,
``TMPDIR``, ``LANG`` and the variables the tool declares pass). Its output is read as it
comes: the first ``output_bytes`` of each stream are kept, the rest counted; a call that
writes more than eight times that is stopped (``output_limit``). At its wall-clock limit,
or when the call is cancelled, the whole sandbox goes: the PID namespace's first process
is killed, which takes every process of the namespace with it, grandchildren that left the
process group included.

Egress profiles:

* ``none`` (the default): a network namespace of its own, with only its own loopback; a
  connection to anything else fails before it leaves the machine;
* ``loopback`` and ``allowlist``: the same namespace, plus a proxy that the runner serves
  on a socket file inside the workspace and that the call reaches as
  ``http://127.0.0.1:3128`` (``HTTP_PROXY``/``HTTPS_PROXY``); it opens connections only to
  the hosts and ports allowed (``loopback``: the host's loopback);
* ``host``: the host's network, shared. Only a policy may grant it.

A call the host cannot isolate as asked is refused (:class:`SandboxUnavailable`,
``sandbox_unavailable``): it never runs bare.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oarlock.errors import ToolError
from oarlock.sandbox._egress import FORWARDER, SOCKET_IN_SANDBOX
from oarlock.sandbox._host import (
    HostSupport,
    drop_user_argv,
    host_support,
    system_binds,
    unshare_argv,
)
from oarlock.sandbox._limits import DEFAULT_LIMITS, SandboxLimits
from oarlock.sandbox._workspace import Workspace, Workspaces

__all__ = [
    "EGRESS_PROFILES",
    "SandboxResult",
    "SandboxRunner",
    "SandboxUnavailable",
]

EGRESS_PROFILES = ("none", "loopback", "allowlist", "host")
_OVERFLOW = 8  # a stream past this many times its kept bytes stops the call
_CHUNK = 65536
_IP = ("/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip")


class SandboxUnavailable(ToolError):
    """The host cannot isolate the call as required; it was not run."""

    code = "sandbox_unavailable"


@dataclass(frozen=True, slots=True)
class SandboxResult:
    """What a sandboxed call did, as its receipt records it."""

    isolation: str
    egress: str
    limits: SandboxLimits
    exit_code: int | None
    signal: str | None
    stdout: bytes
    stderr: bytes
    dropped: int  # bytes of output not kept
    duration_ms: int
    error_code: str | None = None  # timeout, cpu_limit, memory_limit, file_limit, ...
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error_code is None and self.exit_code == 0

    def to_json(self) -> dict[str, Any]:
        """The ``usage.sandbox`` member of the receipt."""
        data: dict[str, Any] = {
            "isolation": self.isolation,
            "egressProfile": self.egress,
            "limits": self.limits.to_json(),
            "stdoutBytes": len(self.stdout),
            "stderrBytes": len(self.stderr),
            "droppedBytes": self.dropped,
        }
        if self.exit_code is not None:
            data["exitCode"] = self.exit_code
        if self.signal is not None:
            data["signal"] = self.signal
        return data


@dataclass(slots=True)
class _Stream:
    keep: int
    data: bytearray = field(default_factory=bytearray)
    dropped: int = 0

    def take(self, chunk: bytes) -> None:
        room = self.keep - len(self.data)
        if room > 0:
            self.data += chunk[:room]
        self.dropped += max(0, len(chunk) - max(room, 0))

    @property
    def overflowing(self) -> bool:
        return self.dropped > self.keep * (_OVERFLOW - 1)


class SandboxRunner:
    """Runs programs in workspaces below ``workspaces`` (see the module documentation).

    ``isolation`` is ``auto`` (the strongest the host supports), or the least a policy
    accepts: ``bubblewrap`` or ``unshare``. ``hide`` lists files (the run database, key
    files) that must not be visible even where a folder holding them is."""

    def __init__(
        self,
        workspaces: Workspaces | None = None,
        *,
        isolation: str = "auto",
        limits: SandboxLimits = DEFAULT_LIMITS,
        allow_hosts: Sequence[str] = (),
        support: HostSupport | None = None,
    ) -> None:
        if isolation not in ("auto", "bubblewrap", "unshare"):
            raise ToolError(f"unknown isolation {isolation!r}", code="sandbox_invalid")
        self.workspaces = workspaces or Workspaces()
        self.isolation, self.limits = isolation, limits
        self.allow_hosts = tuple(allow_hosts)
        self._support = support

    @property
    def support(self) -> HostSupport:
        if self._support is None:
            self._support = host_support()
        return self._support

    def choose(self, egress: str, require: str | None = None) -> str:
        """The isolation a call gets, or SandboxUnavailable; ``require`` is the least a
        policy accepts (``bubblewrap`` or ``unshare``)."""
        if egress not in EGRESS_PROFILES:
            raise SandboxUnavailable(
                f"unknown egress profile {egress!r} ({', '.join(EGRESS_PROFILES)})"
            )
        support = self.support
        if self.isolation == "auto":
            chosen = support.strongest
        elif support.supports(self.isolation):
            chosen = self.isolation
        elif self.isolation == "unshare" and support.bubblewrap:
            chosen = "bubblewrap"
        else:
            chosen = "none"
        if chosen == "none":
            why = "; ".join(support.notes) or "no isolation is available"
            raise SandboxUnavailable(f"this host cannot isolate the call ({why})")
        if require == "bubblewrap" and chosen != "bubblewrap":
            raise SandboxUnavailable(
                f"the policy requires bubblewrap isolation; this call would get {chosen}"
            )
        return chosen

    async def run(
        self,
        argv: Sequence[str],
        *,
        workspace_id: str,
        limits: SandboxLimits | None = None,
        egress: str = "none",
        env: Mapping[str, str] | None = None,
        stdin: bytes | None = None,
        readable: Sequence[Path] = (),
        allow_hosts: Sequence[str] | None = None,
        require: str | None = None,
    ) -> SandboxResult:
        """Run ``argv`` in the workspace and report what happened. ``readable`` are extra
        host folders shown read-only (an interpreter's installation, a tool's module);
        ``allow_hosts`` the patterns an ``allowlist`` opens (default: the runner's)."""
        limits = limits or self.limits
        isolation = self.choose(egress, require)
        workspace = self.workspaces.ensure(workspace_id)
        if isolation == "unshare" and self.support.drop_user:
            _reachable_by_others([*readable, workspace.path.parent])
        hosts = self.allow_hosts if allow_hosts is None else tuple(allow_hosts)
        async with _egress(egress, workspace, hosts) as proxy_env:
            status = os.pipe() if isolation == "unshare" else None
            try:
                command, cwd, child_env = self._command(
                    isolation,
                    workspace,
                    argv=list(argv),
                    limits=limits,
                    egress=egress,
                    env={**(env or {}), **proxy_env},
                    readable=readable,
                    status_fd=None if status is None else status[1],
                )
                return await self._execute(
                    command,
                    cwd=cwd,
                    env=child_env,
                    stdin=stdin,
                    limits=limits,
                    isolation=isolation,
                    egress=egress,
                    status=status,
                )
            finally:
                for fd in status or ():
                    with contextlib.suppress(OSError):
                        os.close(fd)

    # -- the command ------------------------------------------------------------------------
    def _command(
        self,
        isolation: str,
        ws: Workspace,
        *,
        argv: list[str],
        limits: SandboxLimits,
        egress: str,
        env: Mapping[str, str],
        readable: Sequence[Path],
        status_fd: int | None = None,
    ) -> tuple[list[str], str | None, dict[str, str]]:
        root = os.geteuid() == 0
        user = drop_user_argv(ws.uid) if ws.uid is not None and self.support.drop_user else []
        env = dict(env)
        socket = env.pop("OARLOCK_PROXY_SOCKET", None)
        if socket is not None:  # the program behind the forwarder to the egress proxy
            inside = SOCKET_IN_SANDBOX if isolation == "bubblewrap" else socket
            argv = [_system_python(), "-I", "-c", FORWARDER, inside, "--", *argv]
        inner = [*user, "prlimit", *self._prlimit(limits, bool(user)), "--", *argv]
        base_env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "TMPDIR": "/tmp"}
        if isolation == "bubblewrap":
            args = ["bwrap", *system_binds(), "--dev", "/dev", "--proc", "/proc"]
            args += ["--tmpfs", "/tmp", *_folder_binds(readable)]  # after /tmp: may be in it
            args += [
                "--bind", str(ws.path), "/workspace", "--chdir", "/workspace",
                "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
                "--die-with-parent", "--new-session", "--clearenv",
            ]  # fmt: skip
            if not root:
                args.append("--unshare-user")
            if socket is not None:
                args += ["--dir", "/run", "--bind", socket, SOCKET_IN_SANDBOX]
            if egress != "host":
                args.append("--unshare-net")
            for key, value in {**base_env, "HOME": "/workspace", **env}.items():
                args += ["--setenv", key, value]
            return [*args, "--", *inner], None, {}
        # unshare: the host's view of the files (the call's own user can read only what
        # any user can); the workspace is the working folder
        prefix = unshare_argv()
        if egress == "host":
            prefix.remove("--net")
        if status_fd is not None:  # unshare does not pass on how its child ended: a shell
            # in the namespaces writes the status ($? is 128 + N for signal N) to a pipe;
            # it also brings the new namespace's loopback up, as bubblewrap does
            ip = next((p for p in _IP if os.path.exists(p)), None)
            up = "" if egress == "host" or ip is None else f"{ip} link set lo up 2>/dev/null; "
            report = f'{up}"$@"; echo $? > /proc/self/fd/{status_fd}'
            inner = ["/bin/sh", "-c", report, "sh", *inner]
        return [*prefix, *inner], str(ws.path), {**base_env, "HOME": str(ws.path), **env}

    @staticmethod
    def _prlimit(limits: SandboxLimits, own_user: bool) -> list[str]:
        """The kernel limits; without a user of its own, the process limit counts the
        processes the user has already, so that it bounds the call's alone."""
        args = limits.prlimit_args()
        if not own_user:
            extra = _processes_of(os.getuid())
            n = limits.processes + extra
            args = [a if not a.startswith("--nproc=") else f"--nproc={n}:{n}" for a in args]
        return args

    # -- running ----------------------------------------------------------------------------
    async def _execute(
        self,
        command: list[str],
        *,
        cwd: str | None,
        env: dict[str, str],
        stdin: bytes | None,
        limits: SandboxLimits,
        isolation: str,
        egress: str,
        status: tuple[int, int] | None = None,
    ) -> SandboxResult:
        t0 = time.perf_counter()
        proc = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=cwd,
            env=env,
            start_new_session=True,
            pass_fds=() if status is None else (status[1],),
        )
        if status is not None:
            os.close(status[1])  # the child holds the writing end now
        out, err = _Stream(limits.output_bytes), _Stream(limits.output_bytes)
        stopped: str | None = None
        try:
            async with asyncio.timeout(limits.timeout_seconds):
                stopped = await _communicate(proc, stdin, out, err)
        except TimeoutError:
            stopped = "timeout"
        except BaseException:
            _kill(proc)
            with contextlib.suppress(ProcessLookupError):
                await asyncio.shield(proc.wait())
            raise
        if stopped is not None:
            _kill(proc)
        code = await proc.wait()
        _kill(proc)  # whatever is left of its process group
        if status is not None and stopped is None:
            reported = _read_status(status[0])
            code = code if reported is None else reported
        exit_code, sig = _status(code, isolation)
        return SandboxResult(
            isolation=isolation,
            egress=egress,
            limits=limits,
            exit_code=exit_code,
            signal=sig,
            stdout=bytes(out.data),
            stderr=bytes(err.data),
            dropped=out.dropped + err.dropped,
            duration_ms=round((time.perf_counter() - t0) * 1000),
            error_code=stopped or _classify(exit_code, sig, bytes(err.data)),
        )


async def _communicate(
    proc: asyncio.subprocess.Process, stdin: bytes | None, out: _Stream, err: _Stream
) -> str | None:
    """Feed stdin and read both streams to their end; ``output_limit`` when a stream
    overflows (the caller kills the sandbox)."""
    if stdin is not None and proc.stdin is not None:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            proc.stdin.write(stdin)
            await proc.stdin.drain()
        proc.stdin.close()

    flooded = False

    async def pump(reader: asyncio.StreamReader | None, into: _Stream) -> None:
        nonlocal flooded
        if reader is None:
            return
        while chunk := await reader.read(_CHUNK):
            into.take(chunk)
            if into.overflowing and not flooded:
                flooded = True
                _kill(proc)  # the streams then end, and both pumps with them

    await asyncio.gather(pump(proc.stdout, out), pump(proc.stderr, err))
    return "output_limit" if flooded else None


_SIGNALLED = {s.value: s.name for s in signal.Signals}


def _read_status(fd: int) -> int | None:
    """The exit status the shell in the namespaces wrote, if it wrote one."""
    try:
        os.set_blocking(fd, False)
        text = os.read(fd, 64).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _status(code: int, isolation: str) -> tuple[int | None, str | None]:
    """(exit status, signal name): a PID namespace's first process (``bwrap``,
    ``unshare --fork``) reports a child killed by signal N as exit status 128 + N."""
    if code < 0:
        return None, _SIGNALLED.get(-code, str(-code))
    if code > 128 and code - 128 in _SIGNALLED and isolation in ("bubblewrap", "unshare"):
        return None, _SIGNALLED[code - 128]
    return code, None


def _classify(exit_code: int | None, sig: str | None, stderr: bytes) -> str | None:
    if exit_code == 0 and sig is None:
        return None
    if sig == "SIGXCPU" or (sig == "SIGKILL" and b"CPU time limit" in stderr):
        return "cpu_limit"
    if sig == "SIGXFSZ":
        return "file_limit"
    tail = stderr[-4096:]
    if b"MemoryError" in tail or b"Cannot allocate memory" in tail or b"out of memory" in tail:
        return "memory_limit"
    if b"Cannot fork" in tail or (b"Resource temporarily unavailable" in tail and b"fork" in tail):
        return "process_limit"
    if sig is not None:
        return "killed"
    return None


def _kill(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL the call's process group: the sandbox's first process, whose death ends
    its PID namespace and every process in it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _folder_binds(folders: Sequence[Path]) -> list[str]:
    """``bwrap`` arguments showing ``folders`` read-only at their own paths (the folders on
    the way made 0755 in the sandbox, so the call's user can reach them), without
    duplicates, folders inside others or folders the system view has already."""
    chosen: list[Path] = []
    for folder in sorted({Path(f).resolve() for f in folders}, key=lambda p: len(p.parts)):
        inside = any(folder.is_relative_to(c) for c in (*chosen, Path("/usr")))
        if folder.is_dir() and not inside:
            chosen.append(folder)
    args: list[str] = []
    made: set[Path] = set()
    for folder in chosen:
        for parent in reversed(folder.parents[:-1]):
            if parent not in made:
                made.add(parent)
                args += ["--perms", "0755", "--dir", str(parent)]
        args += ["--ro-bind", str(folder), str(folder)]
    return args


def _reachable_by_others(folders: Sequence[Path]) -> None:
    """Under ``unshare`` the call sees the host's files as its own user: every folder it
    needs must be open to any user, else the call cannot run (SandboxUnavailable)."""
    for folder in folders:
        for part in [Path(folder).resolve(), *Path(folder).resolve().parents]:
            try:
                mode = part.stat().st_mode
            except OSError:
                mode = 0
            if not mode & 0o001:
                raise SandboxUnavailable(
                    f"{folder} is not reachable by the sandbox's user ({part} is closed to "
                    "other users); unshare isolation shows the host's files as they are: "
                    "install bubblewrap, or install Python where any user can read it"
                )


def _system_python() -> str:
    """The system's Python, which the egress forwarder runs on."""
    import shutil

    for name in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.path.exists(name):
            return name
    found = shutil.which("python3")
    if found is None or not found.startswith("/usr/"):
        raise SandboxUnavailable(
            "the loopback and allowlist egress profiles need a system python3 in /usr"
        )
    return found


def _processes_of(uid: int) -> int:
    """How many processes ``uid`` has now (a count of ``/proc``)."""
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if entry.stat().st_uid == uid:
                    count += 1
    return count


def interpreter_folders() -> list[Path]:
    """What a Python child needs to see: this interpreter's installation and environment,
    and the folder oarlock is imported from."""
    import oarlock

    folders = {Path(sys.base_prefix), Path(sys.prefix), Path(sys.executable).resolve().parent}
    folders.add(Path(oarlock.__file__).resolve().parent.parent)
    return sorted(folders)


@contextlib.asynccontextmanager
async def _egress(egress: str, ws: Workspace, allow_hosts: Sequence[str]) -> Any:
    """The environment a call needs for its egress profile (a proxy for ``loopback`` and
    ``allowlist``, served while the call runs)."""
    if egress not in ("loopback", "allowlist"):
        yield {}
        return
    from oarlock.sandbox._egress import serve_proxy  # the proxy's server, on first use

    allowed = ("127.0.0.1:*", "localhost:*", "[::1]:*") if egress == "loopback" else allow_hosts
    async with serve_proxy(ws, allowed) as proxy_env:
        yield proxy_env

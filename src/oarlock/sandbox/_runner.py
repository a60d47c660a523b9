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
import functools
import os
import shutil
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oarlock.errors import ToolError
from oarlock.sandbox._cgroup import (
    CallCgroup,
    CgroupError,
    CgroupHost,
    CgroupUsage,
    cgroup_host,
)
from oarlock.sandbox._egress import FORWARDER, SOCKET_IN_SANDBOX
from oarlock.sandbox._host import (
    CallCommand,
    HostSupport,
    host_support,
    read_report,
    sandbox_command,
)
from oarlock.sandbox._limits import DEFAULT_LIMITS, SandboxLimits
from oarlock.sandbox._workspace import (
    Workspace,
    Workspaces,
    WorkspaceSize,
    measure_workspace,
)

__all__ = [
    "EGRESS_PROFILES",
    "SandboxResult",
    "SandboxRunner",
    "SandboxUnavailable",
]

EGRESS_PROFILES = ("none", "loopback", "allowlist", "host")
_OVERFLOW = 8  # a stream past this many times its kept bytes stops the call
_CHUNK = 65536


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
    cgroup: CgroupUsage | None = None  # the whole call's figures, where it had a cgroup
    cgroup_unavailable: str | None = None  # why it had none
    workspace_bytes: int | None = None  # the workspace's size after the call

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
        data["cgroup"] = None if self.cgroup is None else self.cgroup.to_json()
        if self.cgroup is None and self.cgroup_unavailable is not None:
            data["cgroupUnavailable"] = self.cgroup_unavailable
        if self.workspace_bytes is not None:
            data["workspaceBytes"] = self.workspace_bytes
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

    ``isolation`` is ``auto`` (bubblewrap, else the call is refused), or the least the
    agent accepts: ``bubblewrap``, or ``unshare``, which opts into the weaker fallback where
    bubblewrap is missing (:meth:`choose`)."""

    def __init__(
        self,
        workspaces: Workspaces | None = None,
        *,
        isolation: str = "auto",
        limits: SandboxLimits = DEFAULT_LIMITS,
        allow_hosts: Sequence[str] = (),
        support: HostSupport | None = None,
        cgroups: CgroupHost | None = None,
    ) -> None:
        if isolation not in ("auto", "bubblewrap", "unshare"):
            raise ToolError(f"unknown isolation {isolation!r}", code="sandbox_invalid")
        self.workspaces = workspaces or Workspaces()
        self.isolation, self.limits = isolation, limits
        self.allow_hosts = tuple(allow_hosts)
        self._support = support
        self._cgroups = cgroups

    @property
    def support(self) -> HostSupport:
        if self._support is None:
            self._support = host_support()
        return self._support

    @property
    def cgroups(self) -> CgroupHost:
        """Where the calls' cgroups are made (:mod:`oarlock.sandbox._cgroup`)."""
        if self._cgroups is None:
            self._cgroups = cgroup_host()
        return self._cgroups

    def choose(self, egress: str, require: str | None = None) -> str:
        """The isolation a call gets, or SandboxUnavailable; ``require`` is the least a
        policy accepts (``bubblewrap`` or ``unshare``). Bubblewrap wherever the host has
        it; the weaker ``unshare`` only where the runner (the agent file's ``sandbox:``) or
        the policy names it, and the runner does not ask for bubblewrap."""
        if egress not in EGRESS_PROFILES:
            raise SandboxUnavailable(
                f"unknown egress profile {egress!r} ({', '.join(EGRESS_PROFILES)})"
            )
        support = self.support
        if support.bubblewrap:
            return "bubblewrap"
        why = "; ".join(support.notes) or "bubblewrap is not available"
        if require == "bubblewrap" or self.isolation == "bubblewrap":
            who = "the policy" if require == "bubblewrap" else "the sandbox settings"
            raise SandboxUnavailable(f"{who} requires bubblewrap isolation, which this host "
                                     f"cannot give ({why})")  # fmt: skip
        if "unshare" not in (require, self.isolation):
            raise SandboxUnavailable(
                f"this host cannot isolate the call with bubblewrap ({why}); the weaker "
                "unshare fallback runs only where the agent file or a policy rule names it "
                "(isolation: unshare)"
            )
        if not support.unshare:
            raise SandboxUnavailable(f"this host cannot isolate the call ({why})")
        _warn_unshare()
        return "unshare"

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
        if isolation == "unshare" and os.geteuid() == 0:  # its own uid sees the host's files
            _reachable_by_others([*readable, workspace.path.parent])
        hosts = self.allow_hosts if allow_hosts is None else tuple(allow_hosts)
        async with _egress(egress, workspace, hosts) as proxy_env:
            status = os.pipe()  # the entry program's report; the program never holds it
            try:
                command, cwd, child_env = self._command(
                    isolation,
                    workspace,
                    argv=list(argv),
                    limits=limits,
                    egress=egress,
                    env={**(env or {}), **proxy_env},
                    readable=readable,
                    status_fd=status[1],
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
                    workspace=workspace,
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
        status_fd: int,
    ) -> tuple[list[str], str | None, dict[str, str]]:
        """The command starting ``argv`` in its sandbox, behind the entry program that
        takes its privileges away (:mod:`oarlock.sandbox._host`)."""
        from oarlock.sandbox._seccomp import SeccompUnavailable, seccomp_filter

        try:
            bpf = seccomp_filter()
        except SeccompUnavailable as exc:
            raise SandboxUnavailable(str(exc)) from None
        env = dict(env)
        socket = env.pop("OARLOCK_PROXY_SOCKET", None)
        inside = None
        if socket is not None:  # the program behind the forwarder to the egress proxy
            inside = SOCKET_IN_SANDBOX if isolation == "bubblewrap" else socket
            argv = [_system_python(), "-I", "-c", FORWARDER, inside, "--", *argv]
        uid = ws.uid if os.geteuid() == 0 else None  # as root: always a uid of its own
        if os.geteuid() == 0 and uid is None:
            raise SandboxUnavailable(f"workspace {ws.workspace_id!r} has no uid of its own")
        call = CallCommand(isolation, ws.path, uid, argv, limits, egress, env, readable,
                           status_fd, socket, inside)  # fmt: skip
        return sandbox_command(call, bpf)

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
        workspace: Workspace | None = None,
    ) -> SandboxResult:
        t0 = time.perf_counter()
        result = functools.partial(SandboxResult, isolation=isolation, egress=egress, limits=limits)
        if workspace is not None:
            held = await asyncio.to_thread(measure_workspace, workspace.path)  # ~5 us a file
            if held.over(limits.workspace_bytes):
                return result(
                    exit_code=None,
                    signal=None,
                    stdout=b"",
                    stderr=_note("workspace_full", held, limits),
                    dropped=0,
                    duration_ms=round((time.perf_counter() - t0) * 1000),
                    error_code="workspace_full",
                    workspace_bytes=held.bytes,
                )
        cgroup, unavailable = self._call_cgroup(limits)
        usage: CgroupUsage | None = None
        out, err = _Stream(limits.output_bytes), _Stream(limits.output_bytes)
        try:
            try:
                proc = await _spawn(
                    command, cwd=cwd, env=env, stdin=stdin, status=status, cgroup=cgroup
                )
            except CgroupError as exc:  # its gate never opened: started again, without
                assert cgroup is not None
                await asyncio.shield(cgroup.remove())
                cgroup, unavailable = None, str(exc)
                proc = await _spawn(
                    command, cwd=cwd, env=env, stdin=stdin, status=status, cgroup=None
                )
            # the writing end of ``status`` stays open here: run() closes both ends once (a
            # second close here could hit a number another call has since been given); the
            # report is read without blocking
            code, stopped = await _supervise(
                proc, stdin=stdin, limits=limits, out=out, err=err, cgroup=cgroup
            )
            if cgroup is not None:  # whatever is left of the call, wherever it went
                await cgroup.kill_all()
                usage = cgroup.usage()
        finally:
            if cgroup is not None:
                await asyncio.shield(cgroup.remove())
        if status is not None and stopped is None:
            reported = _read_status(status[0])
            code = code if reported is None else reported
        exit_code, sig = _status(code, isolation)
        stderr = bytes(err.data)
        verdict = stopped or _cgroup_verdict(usage, exit_code, sig)  # oarlock's, not the kernel's
        error = verdict or _classify(exit_code, sig, stderr)
        held_after = None
        if workspace is not None:
            held_after = await asyncio.to_thread(measure_workspace, workspace.path)
        if held_after is not None and error is None and held_after.over(limits.workspace_bytes):
            verdict = error = "workspace_quota"
        if verdict in _NOTES:
            stderr += _note(verdict, held_after, limits)
        return result(
            exit_code=exit_code,
            signal=sig,
            stdout=bytes(out.data),
            stderr=stderr,
            dropped=out.dropped + err.dropped,
            duration_ms=round((time.perf_counter() - t0) * 1000),
            error_code=error,
            cgroup=usage,
            cgroup_unavailable=unavailable,
            workspace_bytes=None if held_after is None else held_after.bytes,
        )

    def _call_cgroup(self, limits: SandboxLimits) -> tuple[CallCgroup | None, str | None]:
        """The call's cgroup, or None and why there is none (the call then runs under the
        per-process limits alone)."""
        host = self.cgroups
        if host.version is None:
            return None, host.reason or "no cgroup"
        try:
            return host.create(limits), None
        except CgroupError as exc:
            return None, str(exc)


async def _spawn(
    command: list[str],
    *,
    cwd: str | None,
    env: dict[str, str],
    stdin: bytes | None,
    status: tuple[int, int] | None,
    cgroup: CallCgroup | None,
) -> asyncio.subprocess.Process:
    """Start the sandbox's first process. With a cgroup it starts as a gate, a shell
    waiting on a pipe: a worker thread places it in the cgroup (a move can wait some 10 ms
    for the kernel, which must not hold the event loop), then it is let through to become
    the sandbox, so nothing of the call runs outside the cgroup. CgroupError when it could
    not be placed: the gate is then killed, never let through."""
    keep = () if status is None else (status[1],)
    if cgroup is None:
        return await _exec(command, cwd=cwd, env=env, stdin=stdin, keep=keep)
    program = shutil.which(command[0], path=os.pathsep.join(os.get_exec_path(env)))
    gate, through = os.pipe()
    try:
        script = f'read -r go < /proc/self/fd/{gate} && [ "$go" = go ] && exec "$@"; exit 125'
        argv = ["/bin/sh", "-c", script, "oarlock-gate", program or command[0], *command[1:]]
        proc = await _exec(argv, cwd=cwd, env=env, stdin=stdin, keep=(*keep, gate))
    except BaseException:
        os.close(through)
        raise
    finally:
        os.close(gate)  # the gate's copy reaches the sandbox's entry program, which closes it
    try:
        try:
            await asyncio.to_thread(cgroup.place, proc.pid)
        except OSError as exc:
            raise CgroupError(
                f"the call could not join its cgroup: {exc.strerror or exc}"
            ) from None
        os.write(through, b"go\n")
    except BaseException:
        _kill(proc)
        with contextlib.suppress(ProcessLookupError):
            await asyncio.shield(proc.wait())
        raise
    finally:
        os.close(through)
    return proc


async def _exec(
    argv: list[str],
    *,
    cwd: str | None,
    env: dict[str, str],
    stdin: bytes | None,
    keep: tuple[int, ...],
) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=cwd,
        env=env,
        start_new_session=True,
        pass_fds=keep,
    )


async def _supervise(
    proc: asyncio.subprocess.Process,
    *,
    stdin: bytes | None,
    limits: SandboxLimits,
    out: _Stream,
    err: _Stream,
    cgroup: CallCgroup | None,
) -> tuple[int, str | None]:
    """Run the call to its end or its stop (the deadline, an output flood, the cgroup's CPU
    watch): its status and what stopped it. Cancelled, it kills the sandbox first."""
    watch = None if cgroup is None else functools.partial(cgroup.watch_cpu, limits.cpu_seconds)
    stopped: str | None = None
    try:
        async with asyncio.timeout(limits.timeout_seconds):
            stopped = await _communicate(proc, stdin, out, err, watch)
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
    return code, stopped


def _cgroup_verdict(
    usage: CgroupUsage | None, exit_code: int | None, sig: str | None
) -> str | None:
    """What the call's cgroup says stopped it: the OOM killer (``memory_limit``), or forks
    refused at its task limit in a call that failed (``process_limit``)."""
    if usage is None:
        return None
    if usage.oom_kills:
        return "memory_limit"
    if usage.forks_refused and not (exit_code == 0 and sig is None):
        return "process_limit"
    return None


_NOTES = {
    "workspace_full": "the workspace holds {held} bytes, over its quota of {quota} "
    "(workspace_bytes); the call was not run",
    "workspace_quota": "the call left {held} bytes in the workspace, over its quota of "
    "{quota} (workspace_bytes); its files stay, and the next call is refused until "
    "some are removed",
    "cpu_limit": "the call's processes together used more than {cpu} s of CPU "
    "(cpu_seconds); it was killed",
    "memory_limit": "the call's processes together needed more than {memory} bytes of "
    "memory (memory_bytes, its /tmp included); the kernel killed in it",
    "process_limit": "the call reached its limit of {processes} processes (processes, "
    "counted for the whole call)",
}


def _note(code: str, held: WorkspaceSize | None, limits: SandboxLimits) -> bytes:
    """oarlock's own line on standard error, saying why it stopped or refused the call."""
    size = "?" if held is None else f"more than {held.bytes}" if held.capped else held.bytes
    text = _NOTES[code].format(
        held=size,
        quota=limits.workspace_bytes,
        cpu=limits.cpu_seconds,
        memory=limits.memory_bytes,
        processes=limits.processes,
    )
    if held is not None and held.capped:
        text += " (it holds too many entries to be measured)"
    return f"\noarlock: {text}\n".encode()


async def _communicate(
    proc: asyncio.subprocess.Process,
    stdin: bytes | None,
    out: _Stream,
    err: _Stream,
    watch: Callable[[], Awaitable[str | None]] | None = None,
) -> str | None:
    """Feed stdin and read both streams to their end; ``output_limit`` when a stream
    overflows, or what ``watch`` returns (``cpu_limit``) when it returns first (the
    sandbox is then killed)."""
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

    pumps = asyncio.gather(pump(proc.stdout, out), pump(proc.stderr, err))
    hit: str | None = None
    if watch is not None:
        watcher = asyncio.ensure_future(watch())
        try:
            await asyncio.wait((pumps, watcher), return_when=asyncio.FIRST_COMPLETED)
            if watcher.done() and not pumps.done():
                hit = watcher.result()
                if hit is not None:
                    _kill(proc)  # the streams then end
        except BaseException:
            pumps.cancel()
            raise
        finally:
            watcher.cancel()
    await pumps
    return "output_limit" if flooded else hit


_SIGNALLED = {s.value: s.name for s in signal.Signals}


def _read_status(fd: int) -> int | None:
    """What the entry program reported (:mod:`oarlock.sandbox._enter`): under ``unshare``
    how the program ended (an exit status, or minus the signal's number), else None.
    SandboxUnavailable when it refused to run the program (a fence could not be put up):
    the program never ran. Only the entry program holds the pipe's writing end."""
    lines = read_report(fd).splitlines()
    if lines and lines[0].startswith("refused "):
        raise SandboxUnavailable(f"the sandbox refused to run the call: {lines[0][8:][:500]}")
    if len(lines) != 2 or not lines[0].startswith("ok fork "):
        return None  # after "ok exec" the program runs in its place: nothing more counts
    kind, _, number = lines[1].partition(" ")
    if not number.isdigit():
        return None
    return int(number) if kind == "exit" else -int(number) if kind == "signal" else None


_warned: list[str] = []


def _warn_unshare() -> None:
    """The warning, once per process, that a call runs under the weaker fallback."""
    if not _warned:
        import logging

        _warned.append("unshare")
        logging.getLogger("oarlock.sandbox").warning(
            "sandboxed calls run under the unshare fallback (named by isolation: unshare): "
            "the host's files are in view as its user sees them, behind Landlock where the "
            "kernel has it; install bubblewrap for the full sandbox"
        )


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


def _reachable_by_others(folders: Sequence[Path]) -> None:
    """Under ``unshare`` the call sees the host's files as its own user: every path it
    needs must be open to any user (a folder and those above it passable, a file
    readable), else the call cannot run (SandboxUnavailable)."""
    for folder in folders:
        path = Path(folder).resolve()
        for part in [path, *path.parents]:
            try:
                mode = part.stat().st_mode
            except OSError:
                mode = 0
            need = 0o004 if part == path and not part.is_dir() else 0o001
            if not mode & need:
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


def interpreter_folders() -> list[Path]:
    """What a Python child needs to see: this interpreter's installation and environment,
    and oarlock's own package folder (not the folder around it)."""
    import oarlock

    folders = {Path(sys.base_prefix), Path(sys.prefix), Path(sys.executable).resolve().parent}
    folders.add(Path(oarlock.__file__).resolve().parent)
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

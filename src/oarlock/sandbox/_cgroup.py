"""Limits of the whole call, not of each of its processes: a cgroup per sandboxed call, and
the workspace's size.

The kernel's per-process limits (``prlimit``) do not bound a call: six processes may each
hold their address-space limit. Where the host lets oarlock make cgroups, each call gets
one, ``oarlock-<pid>-<random>``, and its first process is placed in it before it can fork
(it starts as a gate, a shell waiting on a pipe; its pid is written to the cgroup's
``cgroup.procs`` and only then is it let through to become the sandbox), so everything
the call starts is in it. A move into a cgroup waits, on v1 and v2 alike, for the kernel
to let a writer take its cgroup lock (``cgroup_threadgroup_rwsem``), an RCU grace period,
some 5 to 15 ms when no move happened in the last few milliseconds: it is done in a worker
thread, never on the event loop (a host whose cgroup hierarchies are mounted with the
``favordynmods`` option makes it cheap):

* **memory**: the whole call's memory, its private ``/tmp`` (a tmpfs is charged to the
  cgroup of whoever writes it) and the kernel's memory for it included, at most
  ``memory_bytes``, no swap; past it the kernel's OOM killer kills in the call (cgroup v2:
  the whole call, ``memory.oom.group``) and the call ends ``memory_limit``;
* **processes**: at most ``processes`` tasks (threads included) in the whole call, plus
  four of the sandbox's own (``bwrap`` and its init, or ``unshare`` and the entry program;
  the egress forwarder): a fork past it fails (``process_limit`` when the call then
  fails);
* **CPU**: the whole call's CPU time is watched (cgroup v2 ``cpu.stat``, v1
  ``cpuacct.usage``); when it passes ``cpu_seconds`` (plus 0.2 s for the sandbox's own
  start) the call is killed: ``cpu_limit``. The watch reads the counter no more often
  than the call could have used up its budget on every CPU, and at least every 50 ms
  near the end, so a call may overrun by up to 50 ms on each CPU;
* afterwards, whatever is left in the cgroup is killed (v2 ``cgroup.kill``; v1 SIGKILL to
  each process in it, through a pidfd checked against the cgroup, until none is left), its
  figures are read (peak memory, CPU, peak tasks, OOM kills, forks refused) and it is
  removed. A cgroup a crashed oarlock left behind (its owner's pid gone) is killed and
  removed at a later call.

Where the cgroups live: with cgroup v2 (memory and pids controllers), as root in
``oarlock/`` below the hierarchy's root, else (a delegated subtree, e.g. ``systemd-run
--user --scope -p Delegate=yes``) below this process's own cgroup, into whose leaf
``oarlock-runner`` this process then moves (cgroup v2 lets only a cgroup without processes
hold limited children; this needs the process alone in its cgroup). With cgroup v1 (the
``memory`` and ``pids`` hierarchies, ``cpuacct`` if mounted), ``oarlock/`` below each
hierarchy's root, as root. Where none of this is possible the call still runs, under the
per-process limits alone, and its receipt says so: ``"cgroup": null`` and
``cgroupUnavailable`` (why). Under bubblewrap the call sees no cgroup file system; under
the ``unshare`` fallback as a non-root user it sees the host's as that same user, and
where the kernel has no Landlock to keep its writes in the workspace, it could move
itself to another cgroup of the delegated subtree.

The **workspace** is bounded at the call's boundaries only (the runner measures it with
:func:`oarlock.sandbox._workspace.measure_workspace`): before a call, a workspace holding
more than ``workspace_bytes`` refuses the call (``workspace_full``); after it, a call that
left it past the quota ends ``workspace_quota`` (its files stay; the next call is
refused). During the call only the size of each file written is bounded (RLIMIT_FSIZE,
``file_bytes``): a call may write more than the quota before it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import secrets
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from oarlock.sandbox._limits import SandboxLimits

__all__ = [
    "CallCgroup",
    "CgroupHost",
    "CgroupUsage",
    "Hierarchy",
    "cgroup_host",
    "find_hierarchies",
    "probe",
]

PARENT = "oarlock"
PREFIX = "oarlock-"
RUNNER_LEAF = "oarlock-runner"  # where this process moves in a delegated v2 subtree
# the sandbox's own tasks: bwrap and its namespace's init, or unshare and the entry program
# waiting beside the program; the egress forwarder's main and serving threads
PIDS_OVERHEAD = 4
CPU_SLACK_US = 200_000  # the sandbox's own start, which the call's budget does not pay
_POLL_MIN = 0.05
_SWEEP_EVERY = 60.0
_NEED_V2 = frozenset({"memory", "pids"})
_V1 = ("memory", "pids", "cpuacct")
_LIVE: set[str] = set()  # this process's calls' cgroups not yet being removed


class CgroupError(Exception):
    """This host, or this call, gets no cgroup; the message says why."""


# -- where the hierarchies are ----------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Hierarchy:
    """A mounted cgroup hierarchy: where it is mounted, the cgroup path its mount shows (``/``
    unless a container shows only its part) and this process's cgroup as a folder (None
    when it is outside the mount)."""

    mount: Path
    root: str = "/"
    own: Path | None = None


@dataclass(frozen=True, slots=True)
class Hierarchies:
    v2: Hierarchy | None = None
    v1: Mapping[str, Hierarchy] = field(default_factory=dict)  # by controller


def _unescape(text: str) -> str:
    """A mountinfo field, its octal escapes (``\\040``) undone."""
    if "\\" not in text:
        return text
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and text[i + 1 : i + 4].isdigit():
            out.append(chr(int(text[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _own_folder(mount: Path, root: str, path: str) -> Path | None:
    rel = os.path.relpath(path, root) if root != "/" else path.lstrip("/")
    if rel.startswith(".."):
        return None
    return mount if rel in ("", ".") else mount / rel


def find_hierarchies(
    mountinfo: str = "/proc/self/mountinfo", cgroup: str = "/proc/self/cgroup"
) -> Hierarchies:
    """The cgroup hierarchies this process sees, from its mount table and its cgroups."""
    own: dict[str, str] = {}  # controller ("" for v2) -> this process's cgroup path
    with contextlib.suppress(OSError):
        for line in Path(cgroup).read_text().splitlines():
            parts = line.split(":", 2)
            if len(parts) == 3:
                for name in parts[1].split(",") if parts[1] else [""]:
                    own[name] = parts[2]
    v2: Hierarchy | None = None
    v1: dict[str, Hierarchy] = {}
    with contextlib.suppress(OSError):
        for line in Path(mountinfo).read_text().splitlines():
            fields = line.split()
            if "-" not in fields:
                continue
            dash = fields.index("-")
            if dash < 5 or len(fields) < dash + 4:
                continue
            kind, options = fields[dash + 1], fields[dash + 3].split(",")
            root, mount = _unescape(fields[3]), Path(_unescape(fields[4]))
            if kind == "cgroup2" and v2 is None:
                v2 = Hierarchy(mount, root, _own_folder(mount, root, own.get("", "/")))
            elif kind == "cgroup":
                for name in _V1:
                    if name in options and name not in v1:
                        folder = _own_folder(mount, root, own.get(name, "/"))
                        v1[name] = Hierarchy(mount, root, folder)
    return Hierarchies(v2, v1)


# -- what this host allows ------------------------------------------------------------------
def _words(path: Path) -> set[str]:
    try:
        return set(path.read_text().split())
    except OSError:
        return set()


def _write(path: Path, text: str) -> None:
    """Write a cgroup file (never created: a missing file is an error)."""
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _enable(folder: Path, controllers: frozenset[str]) -> None:
    missing = controllers - _words(folder / "cgroup.subtree_control")
    if missing:
        _write(folder / "cgroup.subtree_control", " ".join(f"+{c}" for c in sorted(missing)))


def _v2_parent(h: Hierarchy) -> Path:
    """The folder the calls' cgroups go in, made with its controllers enabled; CgroupError
    saying why there is none."""
    missing = _NEED_V2 - _words(h.mount / "cgroup.controllers")
    if missing:
        raise CgroupError(
            f"cgroup v2 at {h.mount} has no {' or '.join(sorted(missing))} controller "
            "(a cgroup v1 hierarchy holds it)"
        )
    tried = ""
    if os.geteuid() == 0 and h.root == "/":
        try:
            _enable(h.mount, _NEED_V2)
            return _make_parent(h.mount)
        except OSError as exc:
            tried = f"its root: {exc.strerror}; "
    own = h.own
    if own is None:
        raise CgroupError(f"cgroup v2: {tried}this process's cgroup is outside {h.mount}")
    if _NEED_V2 - _words(own / "cgroup.controllers"):
        raise CgroupError(f"cgroup v2: {tried}{own} has not been given memory and pids")
    if not os.access(own / "cgroup.subtree_control", os.W_OK) or not os.access(own, os.W_OK):
        raise CgroupError(f"cgroup v2: {tried}{own} is not delegated to this user")
    others = set(_pids(own)) - {os.getpid()}
    if others:
        raise CgroupError(
            f"cgroup v2: {tried}{own} holds other processes, and a cgroup with processes "
            "cannot hold limited ones: run oarlock in a cgroup of its own (systemd-run "
            "--user --scope -p Delegate=yes)"
        )
    try:
        leaf = own / RUNNER_LEAF
        with contextlib.suppress(FileExistsError):
            _mkdir(leaf)
        if os.getpid() in _pids(own):
            _write(leaf / "cgroup.procs", str(os.getpid()))
        _enable(own, _NEED_V2)
        return _make_parent(own)
    except OSError as exc:
        raise CgroupError(f"cgroup v2: {tried}{own}: {exc.strerror or exc}") from None


def _make_parent(base: Path) -> Path:
    parent = base / PARENT
    with contextlib.suppress(FileExistsError):
        _mkdir(parent)
    _enable(parent, _NEED_V2)
    return parent


def _v1_parents(v1: Mapping[str, Hierarchy]) -> dict[str, Path]:
    missing = [c for c in ("memory", "pids") if c not in v1]
    if missing:
        raise CgroupError(f"cgroup v1: no {' or '.join(missing)} hierarchy is mounted")
    parents: dict[str, Path] = {}
    for name, h in v1.items():
        parent = h.mount / PARENT
        try:
            with contextlib.suppress(FileExistsError):
                _mkdir(parent)
            if not os.access(parent / "cgroup.procs", os.W_OK):
                raise PermissionError(errno.EACCES, "not writable")
        except OSError as exc:
            if name == "cpuacct":
                continue  # no CPU accounting; the rest still applies
            raise CgroupError(f"cgroup v1: {parent}: {exc.strerror or exc}") from None
        parents[name] = parent
    return parents


def probe(hierarchies: Hierarchies) -> CgroupHost:
    """What the host allows: cgroup v2 (memory and pids) if oarlock can make cgroups there,
    else cgroup v1 (memory and pids hierarchies), else none, with the reasons."""
    reasons: list[str] = []
    if hierarchies.v2 is not None:
        try:
            return CgroupHost(2, {"": _v2_parent(hierarchies.v2)}, _NEED_V2)
        except CgroupError as exc:
            reasons.append(str(exc))
    else:
        reasons.append("cgroup v2: not mounted")
    if hierarchies.v1:
        try:
            parents = _v1_parents(hierarchies.v1)
            return CgroupHost(1, parents, frozenset(parents), "; ".join(reasons) or None)
        except CgroupError as exc:
            reasons.append(str(exc))
    else:
        reasons.append("cgroup v1: no hierarchy is mounted")
    return CgroupHost(None, {}, frozenset(), "; ".join(reasons))


@cache
def cgroup_host() -> CgroupHost:
    """This host's cgroups, probed once per process."""
    return probe(find_hierarchies())


# -- the host and its calls' cgroups ------------------------------------------------------
class CgroupHost:
    """Where this process makes its calls' cgroups: ``version`` 2 (one parent, key ``""``),
    1 (a parent per hierarchy, keyed by controller) or None (``reason`` says why)."""

    def __init__(
        self,
        version: int | None,
        parents: Mapping[str, Path],
        controllers: frozenset[str],
        reason: str | None = None,
    ) -> None:
        self.version, self.parents = version, dict(parents)
        self.controllers, self.reason = controllers, reason
        self._swept = -_SWEEP_EVERY

    def __repr__(self) -> str:
        return f"CgroupHost(version={self.version}, parents={self.parents}, reason={self.reason!r})"

    def folders(self, name: str) -> dict[str, Path]:
        return {key: parent / name for key, parent in self.parents.items()}

    def create(self, limits: SandboxLimits) -> CallCgroup:
        """A new cgroup for one call, its limits set; CgroupError when it cannot be made."""
        if self.version is None:
            raise CgroupError(self.reason or "no cgroup")
        now = time.monotonic()
        if now - self._swept >= _SWEEP_EVERY:
            self._swept = now
            self.sweep()
        name = f"{PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        cg = CallCgroup(self.version, name, self.folders(name), self.controllers)
        try:
            cg.make(limits)
        except OSError as exc:
            cg.discard()
            raise CgroupError(f"cgroup v{self.version}: {exc.strerror or exc}") from None
        return cg

    def sweep(self) -> list[str]:
        """Kill and remove the cgroups whose owner (the pid in their name) is gone, and
        this process's own whose removal was cut short; their names. A removal that fails
        (a process still dying) is tried at the next sweep."""
        names: set[str] = set()
        for parent in {*self.parents.values()}:
            with contextlib.suppress(OSError), os.scandir(parent) as entries:
                names.update(e.name for e in entries if e.name.startswith(PREFIX))
        gone = []
        for name in sorted(names):
            owner = name[len(PREFIX) :].split("-", 1)[0]
            if not owner.isdigit() or name in _LIVE:
                continue
            if int(owner) != os.getpid() and _alive(int(owner)):
                continue
            if _remove_stale(list(dict.fromkeys(self.folders(name).values()))):
                gone.append(name)
        return gone


@dataclass(frozen=True, slots=True)
class CgroupUsage:
    """What the call's cgroup recorded (None: this kernel does not count it)."""

    version: int
    memory_peak: int | None
    cpu_micros: int | None
    pids_peak: int | None
    oom_kills: int = 0
    forks_refused: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "memoryPeakBytes": self.memory_peak,
            "cpuMicros": self.cpu_micros,
            "pidsPeak": self.pids_peak,
            "oomKills": self.oom_kills,
            "forksRefused": self.forks_refused,
        }


class CallCgroup:
    """One call's cgroup (a folder per hierarchy with v1)."""

    def __init__(
        self, version: int, name: str, folders: Mapping[str, Path], controllers: frozenset[str]
    ) -> None:
        self.version, self.name = version, name
        self.folders, self.controllers = dict(folders), controllers
        self._unique = list(dict.fromkeys(self.folders.values()))
        self._pids_seen: int | None = None
        self.removed = False

    def _file(self, controller: str, name: str) -> Path:
        return self.folders["" if self.version == 2 else controller] / name

    def make(self, limits: SandboxLimits) -> None:
        _LIVE.add(self.name)
        for folder in self._unique:
            _mkdir(folder)
        memory, tasks = str(limits.memory_bytes), str(limits.processes + PIDS_OVERHEAD)
        if self.version == 2:
            if "memory" in self.controllers:
                _write(self._file("memory", "memory.max"), memory)
                for name, value in (("memory.swap.max", "0"), ("memory.oom.group", "1")):
                    if self._file("memory", name).exists():
                        _write(self._file("memory", name), value)
            if "pids" in self.controllers:
                _write(self._file("pids", "pids.max"), tasks)
        else:
            _write(self._file("memory", "memory.limit_in_bytes"), memory)
            memsw = self._file("memory", "memory.memsw.limit_in_bytes")
            if memsw.exists():  # swap accounted: none of it
                _write(memsw, memory)
            _write(self._file("pids", "pids.max"), tasks)

    def place(self, pid: int) -> None:
        """Move the process ``pid`` (one of this process's children, waiting at its gate:
        its pid cannot be reused) into the cgroup; blocking (see the module
        documentation), so run in a worker thread."""
        for folder in self._unique:
            _write(folder / "cgroup.procs", str(pid))

    # -- while it runs ----------------------------------------------------------------------
    def cpu_micros(self) -> int | None:
        if self.version == 2:
            for line in _lines(self._file("cpu", "cpu.stat")):
                if line.startswith("usage_usec "):
                    return int(line.split()[1])
            return None
        if "cpuacct" not in self.folders:
            return None
        text = _read(self._file("cpuacct", "cpuacct.usage"))
        return int(text) // 1000 if text.isdigit() else None

    def poll(self) -> int | None:
        """The CPU used so far (microseconds), noting the tasks seen where the kernel keeps
        no peak of them."""
        current = _read(self._file("pids", "pids.current")) if "pids" in self.controllers else ""
        if current.isdigit():
            self._pids_seen = max(self._pids_seen or 0, int(current))
        return self.cpu_micros()

    async def watch_cpu(self, cpu_seconds: int) -> str | None:
        """``cpu_limit`` once the call's CPU passes ``cpu_seconds`` (the caller then kills
        it); None when this kernel does not count it."""
        budget = cpu_seconds * 1_000_000 + CPU_SLACK_US
        cpus = os.cpu_count() or 1
        used = 0
        while True:
            await asyncio.sleep(max(_POLL_MIN, (budget - used) / 1e6 / cpus))
            now = self.poll()
            if now is None:
                return None
            used = now
            if used > budget:
                return "cpu_limit"

    # -- after it ---------------------------------------------------------------------------
    async def kill_all(self, wait: float = 2.0) -> bool:
        """Kill every process left in the cgroup and wait until there is none; whether it
        emptied within ``wait`` seconds."""
        folder = self._unique[0]
        kill = folder / "cgroup.kill"
        deadline = time.monotonic() + wait
        use_kill = self.version == 2 and kill.exists()
        while _pids(folder):
            if use_kill:
                with contextlib.suppress(OSError):
                    _write(kill, "1")
            else:
                _kill_once(folder)
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.005)
        return True

    def usage(self) -> CgroupUsage:
        oom = refused = 0
        if self.version == 2:
            peak = _number(self._file("memory", "memory.peak"))
            oom = _event(self._file("memory", "memory.events"), "oom_kill")
        else:
            peak = _number(self._file("memory", "memory.max_usage_in_bytes"))
            oom = _event(self._file("memory", "memory.oom_control"), "oom_kill")
        pids_peak: int | None = None
        if "pids" in self.controllers:
            pids_peak = _number(self._file("pids", "pids.peak"))
            refused = _event(self._file("pids", "pids.events"), "max")
        if pids_peak is None:
            pids_peak = self._pids_seen
        if "memory" not in self.controllers:
            peak = None
        return CgroupUsage(self.version, peak, self.cpu_micros(), pids_peak, oom, refused)

    async def remove(self) -> None:
        """Kill what is left and remove the cgroup (retried briefly: the last processes may
        still be leaving it); a cgroup that stays is removed by a later sweep."""
        _LIVE.discard(self.name)
        if self.removed:
            return
        await self.kill_all()
        for attempt in range(40):
            try:
                for folder in self._unique:
                    with contextlib.suppress(FileNotFoundError):
                        _rmdir(folder)
            except OSError:
                await asyncio.sleep(0.005 * (1 + attempt // 10))
                continue
            self.removed = True
            return

    def discard(self) -> None:
        """Remove a cgroup no process ever entered."""
        _LIVE.discard(self.name)
        for folder in self._unique:
            with contextlib.suppress(OSError):
                _rmdir(folder)
        self.removed = True


# -- small helpers (the kernel's file operations, replaceable in tests) --------------------
def _mkdir(path: Path) -> None:
    os.mkdir(path, 0o755)


def _rmdir(path: Path) -> None:
    os.rmdir(path)


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except (OSError, ValueError):
        return ""


def _lines(path: Path) -> list[str]:
    return _read(path).splitlines()


def _number(path: Path) -> int | None:
    text = _read(path)
    return int(text) if text.isdigit() else None


def _event(path: Path, key: str) -> int:
    for line in _lines(path):
        parts = line.split()
        if len(parts) == 2 and parts[0] == key and parts[1].isdigit():
            return int(parts[1])
    return 0


def _pids(folder: Path) -> list[int]:
    return [int(p) for p in _lines(folder / "cgroup.procs") if p.isdigit()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale(folders: list[Path]) -> bool:
    """Kill what is in a stale cgroup and remove it, waiting up to 0.2 s for the killed
    to leave; whether it is gone."""
    deadline = time.monotonic() + 0.2
    while True:
        for folder in folders:
            _kill_once(folder)
        try:
            for folder in folders:
                with contextlib.suppress(FileNotFoundError):
                    _rmdir(folder)
        except OSError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
            continue
        return True


def _kill_once(folder: Path) -> None:
    """SIGKILL each process in the cgroup once: each is held by a pidfd, then checked to be
    in the cgroup still, so that a pid reused by a process elsewhere is never signalled."""
    pids = _pids(folder)
    if not pids:
        return
    opened: dict[int, int] = {}
    pidfd_open: Callable[[int], int] | None = getattr(os, "pidfd_open", None)
    send: Callable[[int, int], None] | None = getattr(signal, "pidfd_send_signal", None)
    try:
        if pidfd_open is not None and send is not None:
            for pid in pids:
                with contextlib.suppress(OSError):
                    opened[pid] = pidfd_open(pid)
            still = set(_pids(folder))
            for pid, fd in opened.items():
                if pid in still:
                    with contextlib.suppress(OSError):
                        send(fd, signal.SIGKILL)
        else:  # no pidfds: a pid could in theory be reused between the read and the kill
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
    finally:
        for fd in opened.values():
            os.close(fd)



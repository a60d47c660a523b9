"""What isolation this host can give a sandboxed call, and the command that gives it.

* ``bubblewrap``: the ``bwrap`` program (Debian package ``bubblewrap``) builds a view of the
  system for the call: the system's programs and libraries read-only, the few files of
  ``/etc`` programs read (CA certificates, ``hosts``, name resolution), the workspace the
  only writable path besides a private, size-limited ``/tmp``, a ``/proc`` whose keyring
  files are hidden, a minimal ``/dev``, new user (when not root), PID, IPC, UTS, cgroup and
  network namespaces. The home folder, the run database, key files and every other path
  are not in the view at all.
* ``unshare``: where ``bwrap`` is missing, util-linux's ``unshare`` gives new mount, PID,
  IPC, UTS and network namespaces (and a user namespace when not root); the view of the
  file system is the host's, with private tmpfs on ``/tmp``, ``/var/tmp``, ``/dev/shm`` and
  ``/run``, and Landlock (where the kernel has it) keeping the call to the same paths as
  under bubblewrap. It is weaker, so it is never chosen on its own: an agent file, a
  runner or a policy rule must name it (``isolation: unshare``).
* ``none``: no isolation. A sandboxed call is never run bare: it is refused
  (``sandbox_unavailable``).

In every sandbox the first program is :mod:`oarlock.sandbox._enter`, run by this
interpreter with ``-I -S`` (no site-packages, only the standard library): it sets the
kernel limits, becomes the workspace's own uid with no capability at all (as root), joins
a fresh session keyring, sets no_new_privs, enforces Landlock and installs the seccomp
filter (:mod:`oarlock.sandbox._seccomp`), checks all of it, then runs the program; if any
of it fails the program never runs and the call is refused. Landlock is the second fence
for the file system: where the kernel lacks it the call still runs (``sandbox check`` says
so); where the seccomp filter or the change of user cannot be had, it is refused.

The host is probed once per process by running ``true`` through each kind of sandbox
(some ten milliseconds each).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from oarlock.sandbox._limits import DEFAULT_LIMITS, SandboxLimits

__all__ = [
    "ENTER_IN_SANDBOX",
    "ISOLATION_ORDER",
    "REFUSED",
    "CallCommand",
    "HostSupport",
    "entry_python",
    "folder_binds",
    "host_support",
    "landlock_abi",
    "sandbox_command",
    "system_binds",
    "system_paths",
    "unshare_argv",
]

ISOLATION_ORDER = ("bubblewrap", "unshare", "none")
ENTER_IN_SANDBOX = "/run/oarlock/enter"  # .py, or .pyc when compiled
ENTER_FILE = Path(__file__).with_name("_enter.py")
REFUSED = 125  # the entry program's status when it refused to run the program
_PROBE_TIMEOUT = 10.0
PROBE_UID = 999_999  # the uid the probes run as (as root): one no system user has
_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "timezone",
        "nsswitch.conf", "hosts", "host.conf", "gai.conf", "resolv.conf", "passwd", "group",
        "protocols", "services", "ssl", "ca-certificates", "ca-certificates.conf", "pki",
        "mime.types")  # fmt: skip
_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
_KEY_FILES = ("/proc/keys", "/proc/key-users")
_BASE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "TMPDIR": "/tmp"}


@dataclass(frozen=True, slots=True)
class HostSupport:
    """What this host supports; ``notes`` say why a kind is missing. ``bubblewrap`` and
    ``unshare`` are true only where a probe ran through that kind of sandbox with every
    fence up; ``drop_user`` is true as root (each workspace's calls then run as a uid of
    their own); ``landlock`` is the kernel's Landlock ABI (0: none)."""

    bubblewrap: bool
    unshare: bool
    drop_user: bool
    seccomp: bool = True
    landlock: int = 0
    notes: tuple[str, ...] = ()

    @property
    def strongest(self) -> str:
        if self.bubblewrap:
            return "bubblewrap"
        return "unshare" if self.unshare else "none"

    def supports(self, isolation: str) -> bool:
        return {"bubblewrap": self.bubblewrap, "unshare": self.unshare, "none": True}[isolation]


def system_paths() -> list[str]:
    """The host's paths in the system's view: ``/usr``, the top-level folders of programs
    and libraries (or their links into ``/usr``), and the few files of ``/etc`` programs
    read (the loader's cache, name resolution, users, CA certificates, the time zone)."""
    paths = ["/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        if os.path.islink(f"/{name}") or os.path.isdir(f"/{name}"):
            paths.append(f"/{name}")
    paths += [f"/etc/{name}" for name in _ETC if os.path.exists(f"/etc/{name}")]
    return paths


def system_binds() -> list[str]:
    """``bwrap`` arguments for the read-only view of the system (:func:`system_paths`),
    ``/etc`` made 0755 so that any user can read what is in it, never the rest of ``/etc``."""
    args = ["--perms", "0755", "--dir", "/etc"]
    for path in system_paths():
        if os.path.islink(path) and path.count("/") == 1:
            args += ["--symlink", os.readlink(path), path]
        else:
            args += ["--ro-bind", path, path]
    return args


def folder_binds(paths: Sequence[Path]) -> list[str]:
    """``bwrap`` arguments showing ``paths`` (folders or single files) read-only at their
    own paths (the folders on the way made 0755 in the sandbox and holding nothing else),
    without duplicates, paths inside others or paths the system view has already."""
    chosen: list[Path] = []
    for path in sorted({Path(p).resolve() for p in paths}, key=lambda p: len(p.parts)):
        inside = any(path.is_relative_to(c) for c in (*chosen, Path("/usr")))
        if path.exists() and not inside:
            chosen.append(path)
    args: list[str] = []
    made: set[Path] = set()
    for path in chosen:
        for parent in reversed(path.parents[:-1]):
            if parent not in made:
                made.add(parent)
                args += ["--perms", "0755", "--dir", str(parent)]
        args += ["--ro-bind", str(path), str(path)]
    return args


def unshare_argv(unshare: str = "unshare") -> list[str]:
    """``unshare`` with new mount, PID, IPC, UTS and network namespaces (and, when not
    root, a user namespace whose root the entry program then leaves powerless)."""
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return [unshare, *user, "--fork", "--pid", "--mount-proc", "--net", "--ipc", "--uts",
            "--kill-child", "--"]  # fmt: skip


def entry_python() -> tuple[str, list[Path]]:
    """The interpreter that runs the entry program (this one, by its real path, with
    ``-I -S`` it needs only its standard library) and the folders it needs to see."""
    exe = Path(os.path.realpath(sys.executable))
    folders = {Path(sys.base_prefix).resolve(), exe.parent}
    return str(exe), sorted(f for f in folders if not f.is_relative_to("/usr"))


def entry_program() -> Path:
    """The entry program to run: its compiled form (``__pycache__``, written on first use
    where it can be) when that is fresh, else its source, which Python compiles anew at
    every start (a few milliseconds of every call)."""
    import importlib.util

    source = ENTER_FILE
    try:
        cached = Path(importlib.util.cache_from_source(str(source)))
        stat = source.stat()
    except (OSError, NotImplementedError, ValueError):
        return source
    key = (stat.st_mtime_ns, stat.st_size)
    if _compiled.get(cached) == key:
        return cached
    if not _fresh(cached, source):
        import py_compile

        mode = py_compile.PycInvalidationMode.TIMESTAMP
        with contextlib.suppress(OSError, py_compile.PyCompileError):
            py_compile.compile(str(source), cfile=str(cached), doraise=True, invalidation_mode=mode)
    if _fresh(cached, source):
        _compiled[cached] = key
        return cached
    return source


_compiled: dict[Path, tuple[int, int]] = {}


def _fresh(cached: Path, source: Path) -> bool:
    """Whether ``cached`` is the bytecode of ``source`` as it is now, for this Python."""
    import importlib.util

    try:
        with cached.open("rb") as f:
            head = f.read(16)
        stat = source.stat()
        if len(head) != 16 or head[:4] != importlib.util.MAGIC_NUMBER:
            return False
        flags = int.from_bytes(head[4:8], "little")
        if flags & 1:  # hash-based
            return head[8:16] == importlib.util.source_hash(source.read_bytes())
    except OSError:
        return False
    mtime, size = int.from_bytes(head[8:12], "little"), int.from_bytes(head[12:16], "little")
    return flags == 0 and (mtime, size) == (int(stat.st_mtime) & 0xFFFFFFFF,
                                             stat.st_size & 0xFFFFFFFF)  # fmt: skip


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 where it has none (or has it disabled)."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        abi = int(libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1)))
    except (OSError, AttributeError):
        return 0
    return max(abi, 0)


@dataclass(frozen=True, slots=True)
class CallCommand:
    """What one sandboxed call's command is made of."""

    isolation: str  # bubblewrap or unshare
    workspace: Path
    uid: int | None  # the workspace's own uid (root), else None: the caller's user
    argv: Sequence[str]
    limits: SandboxLimits
    egress: str
    env: Mapping[str, str]
    readable: Sequence[Path]
    report: int  # the writing end of the report pipe (:mod:`oarlock.sandbox._enter`)
    socket: str | None = None  # the egress proxy's socket file, as the host sees it
    socket_inside: str | None = None  # where the call finds it


def sandbox_command(call: CallCommand, bpf: bytes) -> tuple[list[str], str | None, dict[str, str]]:
    """(argv, working folder, environment) starting ``call`` in its sandbox behind the
    entry program, which gets ``bpf`` (the seccomp filter) to install."""
    python, python_folders = entry_python()
    program = entry_program()
    inside = ENTER_IN_SANDBOX + program.suffix
    own = call.uid is not None
    nproc = call.limits.processes + (0 if own else _processes_of(os.getuid()))
    nproc += 1 if call.isolation == "unshare" else 0  # the entry program waits beside it
    lim = call.limits
    conf = [
        f"report={call.report}",
        f"limit=cpu:{lim.cpu_seconds}:{lim.cpu_seconds + 1}",
        f"limit=as:{lim.memory_bytes}:{lim.memory_bytes}",
        f"limit=fsize:{lim.file_bytes}:{lim.file_bytes}",
        f"limit=nproc:{nproc}:{nproc}",
        f"limit=nofile:{lim.open_files}:{lim.open_files}",
        f"net={'host' if call.egress == 'host' else 'proxy' if call.socket else 'none'}",
        f"bpf={bpf.hex()}",
    ]
    if own:
        conf += [f"uid={call.uid}", f"gid={call.uid}"]
    readable = [Path(p) for p in call.readable]
    if call.isolation == "bubblewrap":
        conf += _paths("ro", [*system_paths(), *map(str, python_folders), *map(str, readable),
                              "/proc"])  # fmt: skip
        conf += _paths("rw", ["/workspace", "/tmp", "/dev"]) + _paths("list", ["/"])
        args = ["bwrap", *system_binds(), "--dev", "/dev", "--proc", "/proc"]
        for path in _KEY_FILES:
            if os.path.exists(path):
                args += ["--ro-bind", "/dev/null", path]
        args += ["--perms", "1777", "--size", str(lim.tmp_bytes), "--tmpfs", "/tmp"]
        args += folder_binds([*python_folders, *readable])  # after /tmp: may be in it
        args += ["--perms", "0755", "--dir", "/run", "--perms", "0755", "--dir", "/run/oarlock",
                 "--ro-bind", str(program), inside]  # fmt: skip
        args += [
            "--bind", str(call.workspace), "/workspace", "--chdir", "/workspace",
            "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session", "--clearenv",
        ]  # fmt: skip
        if not own and os.geteuid() != 0:
            args.append("--unshare-user")
        if call.socket is not None:
            args += ["--bind", call.socket, call.socket_inside or call.socket]
        if call.egress != "host":
            args.append("--unshare-net")
        for key, value in {**_BASE_ENV, "HOME": "/workspace", **call.env}.items():
            args += ["--setenv", key, value]
        entry = [python, "-I", "-S", inside, *conf, "--", *call.argv]
        return [*args, "--", *entry], None, {}
    # unshare: the host's view, its temporary folders made private, Landlock around it
    ws = str(call.workspace)
    conf += ["fork=1", *_paths("chdir", [ws])]
    conf += _paths("ro", [*system_paths(), *map(str, readable), "/proc"])
    conf += _paths("rw", [ws, "/tmp", "/var/tmp", "/dev/shm", *_DEVICES])
    tmp = f"mode=1777,size={lim.tmp_bytes}"
    conf += _paths("tmpfs", [], [f"/tmp:{tmp}", f"/var/tmp:{tmp}", f"/dev/shm:{tmp}",
                                 "/run:mode=0755,size=1048576"])  # fmt: skip
    keep = [*map(str, readable), *([os.path.realpath("/etc/resolv.conf")])]
    conf += _paths("keeprw", [ws, *([call.socket] if call.socket else [])])
    conf += _paths("keep", keep) + _paths("hide", list(_KEY_FILES))
    if call.egress != "host":
        conf.append("lo=1")
    prefix = unshare_argv()
    if call.egress == "host":
        prefix.remove("--net")
    entry = [python, "-I", "-S", str(program), *conf, "--", *call.argv]
    return [*prefix, *entry], ws, {**_BASE_ENV, "HOME": ws, **call.env}


def _paths(name: str, paths: Sequence[str], raw: Sequence[str] = ()) -> list[str]:
    """Entry settings: each path hex-encoded; ``raw`` values as ``PATH:OPTIONS`` with only
    the path encoded."""
    items = [f"{name}={os.fsencode(p).hex()}" for p in paths]
    for value in raw:
        path, _, options = value.partition(":")
        items.append(f"{name}={os.fsencode(path).hex()}:{options}")
    return items


def _processes_of(uid: int) -> int:
    """How many processes ``uid`` has now (a count of ``/proc``): without a user of its
    own, the process limit counts them too, so it is raised by as many."""
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if entry.stat().st_uid == uid:
                    count += 1
    return count


def read_report(fd: int) -> str:
    """What the entry program wrote to the report pipe (its reading end, read without
    blocking once the sandbox has ended)."""
    chunks = []
    try:
        os.set_blocking(fd, False)
        while chunk := os.read(fd, 4096):
            chunks.append(chunk)
            if sum(map(len, chunks)) > 65536:
                break
    except OSError:
        pass
    return b"".join(chunks).decode("utf-8", "replace")


def _probe(isolation: str, bpf: bytes) -> tuple[bool, str, int]:
    """Run ``true`` in a sandbox of that kind: (it ran with every fence up, why not, the
    Landlock ABI the entry program applied)."""
    root = os.geteuid() == 0
    folder = Path(tempfile.mkdtemp(prefix="oarlock-probe-"))
    uid = PROBE_UID if root else None
    read, write = os.pipe()
    try:
        if uid is not None:
            os.chown(folder, uid, uid)
        call = CallCommand(isolation, folder, uid, ["true"], DEFAULT_LIMITS, "none", {}, [],
                           write)  # fmt: skip
        argv, cwd, env = sandbox_command(call, bpf)
        done = subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=_PROBE_TIMEOUT,
            check=False, cwd=cwd, env=env, pass_fds=(write,),
        )  # fmt: skip
        os.close(write)
        write = -1
        report = read_report(read)
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"{isolation}: {exc}", 0
    finally:
        for fd in (read, write):
            if fd >= 0:
                os.close(fd)
        shutil.rmtree(folder, ignore_errors=True)
    first = report.splitlines()[0] if report.strip() else ""
    if first.startswith("ok") and done.returncode == 0:
        abi = first.partition("landlock=")[2]
        return True, "", int(abi) if abi.isdigit() else 0
    if first.startswith("refused "):
        return False, f"{isolation}: {first[len('refused ') :]}", 0
    why = done.stderr.decode("utf-8", "replace").strip().splitlines()
    return False, f"{isolation}: {why[-1] if why else f'exit status {done.returncode}'}", 0


@cache
def host_support() -> HostSupport:
    """Probe the host once per process."""
    from oarlock.sandbox._seccomp import SeccompUnavailable, seccomp_filter

    notes: list[str] = []
    try:
        bpf = seccomp_filter()
    except SeccompUnavailable as exc:
        notes.append(f"{exc}; no sandbox runs without it")
        return HostSupport(False, False, os.geteuid() == 0, seccomp=False, notes=tuple(notes))
    results: dict[str, bool] = {}
    landlock = 0
    for isolation, program, install in (
        ("bubblewrap", "bwrap", "bwrap is not installed (apt install bubblewrap)"),
        ("unshare", "unshare", "unshare is not installed (util-linux)"),
    ):
        if shutil.which(program) is None:
            results[isolation] = False
            notes.append(f"{isolation}: {install}")
            continue
        works, why, abi = _probe(isolation, bpf)
        results[isolation] = works
        landlock = max(landlock, abi)
        if not works:
            notes.append(why)
    landlock = landlock or landlock_abi()
    if not landlock:
        notes.append("landlock: the kernel has none; the view of the files is the only fence")
    return HostSupport(
        bubblewrap=results["bubblewrap"],
        unshare=results["unshare"],
        drop_user=os.geteuid() == 0,
        seccomp=True,
        landlock=landlock,
        notes=tuple(notes),
    )


# -- what ``oarlock sandbox check`` reports -----------------------------------------------------
_CHECK_PROGRAM = r"""
import ctypes, errno, json, os, resource, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
status = {}
with open("/proc/self/status") as f:
    for line in f:
        name, _, value = line.partition(":")
        status[name] = value.strip()
def refused(call):
    ctypes.set_errno(0)
    return "allowed" if call() >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")
nr = {"x86_64": (250, 321, 298), "aarch64": (219, 280, 241)}.get(os.uname().machine)
calls = {
    "mount": lambda: libc.mount(b"none", b"/tmp", b"tmpfs", 0, None),
    "unshare": lambda: libc.unshare(0x10000000),
    "ptrace": lambda: libc.ptrace(16, 1, None, None),
}
if nr:
    calls["keyctl"] = lambda: libc.syscall(nr[0], 0, -3, 0)
    calls["bpf"] = lambda: libc.syscall(nr[1], 0, None, 0)
    calls["perf_event_open"] = lambda: libc.syscall(nr[2], None, 0, -1, -1, 0)
out = {
    "uid": os.getresuid(), "gid": os.getresgid(), "groups": os.getgroups(),
    "caps": {k: status.get(k) for k in ("CapEff", "CapPrm", "CapBnd", "CapInh", "CapAmb")},
    "noNewPrivs": status.get("NoNewPrivs"), "seccomp": status.get("Seccomp"),
    "refused": {name: refused(call) for name, call in calls.items()},
    "landlockAbi": max(libc.syscall(444, None, 0, 1), 0),
    "limits": {n: list(resource.getrlimit(getattr(resource, "RLIMIT_" + n.upper())))
               for n in ("cpu", "as", "fsize", "nproc", "nofile")},
}
try:
    with open("/proc/keys") as f:
        out["procKeys"] = len(f.read().splitlines())
except OSError as exc:
    out["procKeys"] = errno.errorcode.get(exc.errno, "?")
try:
    open(sys.argv[1]).close()
    out["landlockFiles"] = False
except OSError as exc:
    out["landlockFiles"] = exc.errno == errno.EACCES
with socket.socket() as s:
    try:
        s.bind(("127.0.0.1", 0))
        out["landlockTcp"] = False
    except OSError as exc:
        out["landlockTcp"] = exc.errno == errno.EACCES
out["egress"] = {}
for host, port in (("192.0.2.1", 80), ("127.0.0.1", int(sys.argv[2]))):
    try:
        socket.create_connection((host, port), timeout=1).close()
        out["egress"][f"{host}:{port}"] = "connected"
    except OSError as exc:
        out["egress"][f"{host}:{port}"] = errno.errorcode.get(exc.errno or 0, "timed out")
try:
    with open("/tmp/.oarlock-check", "w") as f:
        f.write("x")
    out["tmp"] = os.stat("/tmp").st_mode & 0o7777
except OSError:
    out["tmp"] = None
print(json.dumps(out))
"""


@dataclass(frozen=True, slots=True)
class Guarantee:
    name: str
    ok: bool
    detail: str
    required: bool = True  # a call runs only where it holds (Landlock: a second fence)


def check_guarantees(isolation: str) -> tuple[list[Guarantee], str]:
    """Run a probe program in a sandbox of that kind, through the entry program, with
    egress ``none``, and say of each guarantee whether it holds here; ("", why) when no
    such sandbox can be made."""
    import json
    import socket

    support = host_support()
    if not support.supports(isolation):
        return [], "; ".join(n for n in support.notes if n.startswith(isolation)) or "missing"
    from oarlock.sandbox._seccomp import seccomp_filter

    root = os.geteuid() == 0
    system = [p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.path.exists(p)]
    python, folders = (system[0], []) if system else entry_python()  # any user can run it
    inside = ENTER_IN_SANDBOX + entry_program().suffix
    outside = inside if isolation == "bubblewrap" else _outside_the_rules()
    folder = Path(tempfile.mkdtemp(prefix="oarlock-check-"))
    read, write = os.pipe()
    try:
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen()
            port = listener.getsockname()[1]
            if root:
                os.chown(folder, PROBE_UID, PROBE_UID)
            argv = [python, "-I", "-S", "-c", _CHECK_PROGRAM, outside, str(port)]
            call = CallCommand(isolation, folder, PROBE_UID if root else None, argv,
                               DEFAULT_LIMITS, "none", {}, folders, write)  # fmt: skip
            command, cwd, env = sandbox_command(call, seccomp_filter())
            done = subprocess.run(
                command, stdin=subprocess.DEVNULL, capture_output=True, timeout=30,
                check=False, cwd=cwd, env=env, pass_fds=(write,),
            )  # fmt: skip
        os.close(write)
        write = -1
        report = read_report(read)
    except (OSError, subprocess.SubprocessError) as exc:
        return [], f"the probe failed: {exc}"
    finally:
        for fd in (read, write):
            if fd >= 0:
                os.close(fd)
        shutil.rmtree(folder, ignore_errors=True)
    if report.startswith("refused "):
        return [], report.splitlines()[0][len("refused ") :]
    try:
        facts = json.loads(done.stdout)
    except ValueError:
        why = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return [], f"the probe failed: {why[-1] if why else f'exit status {done.returncode}'}"
    return _judge(facts, root, report), ""


def _outside_the_rules() -> str:
    """A file any user may read on the host that Landlock keeps from an ``unshare`` call:
    one of ``/etc`` outside the system's view."""
    with os.scandir("/etc") as entries:
        for entry in entries:
            if entry.name not in _ETC and entry.is_file(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    if entry.stat().st_mode & 0o004:
                        return entry.path
    return "/etc/hostname"


def _judge(facts: dict[str, object], root: bool, report: str) -> list[Guarantee]:
    """Each guarantee from what the probe saw."""
    uid, gid, groups = facts["uid"], facts["gid"], facts["groups"]
    if root:
        user = Guarantee("user", uid == [PROBE_UID] * 3 and gid == [PROBE_UID] * 3
                         and groups == [],
                         f"uid {_ids(uid)}, gid {_ids(gid)}, groups {groups or 'none'}: each "
                         "workspace's calls run as a uid of their own, never root")  # fmt: skip
    else:
        user = Guarantee("user", True, f"uid {_ids(uid)} in a user namespace: the caller's "
                         "own user (oarlock is not root)")  # fmt: skip
    caps = facts["caps"]
    assert isinstance(caps, dict)
    refused = facts["refused"]
    assert isinstance(refused, dict)
    keys = facts["procKeys"]
    limits = facts["limits"]
    lim = DEFAULT_LIMITS
    want = {"cpu": [lim.cpu_seconds, lim.cpu_seconds + 1], "as": [lim.memory_bytes] * 2,
            "fsize": [lim.file_bytes] * 2, "nofile": [lim.open_files] * 2}  # fmt: skip
    assert isinstance(limits, dict)
    abi = facts["landlockAbi"]
    landlock_on = bool(facts["landlockFiles"]) and bool(facts["landlockTcp"])
    egress = facts["egress"]
    assert isinstance(egress, dict)
    applied = report.partition("landlock=")[2].split()[:1]
    return [
        user,
        Guarantee("capabilities", all(v == "0" * 16 for v in caps.values()),
                  ", ".join(f"{k} {v}" for k, v in caps.items())),
        Guarantee("no_new_privs", facts["noNewPrivs"] == "1", f"NoNewPrivs {facts['noNewPrivs']}"),
        Guarantee("keyring", refused.get("keyctl") == "EPERM" and keys in (0, "EACCES"),
                  f"a fresh session keyring; keyctl {refused.get('keyctl')}; /proc/keys "
                  f"{'hidden' if keys in (0, 'EACCES') else f'shows {keys} keys'}"),
        Guarantee("seccomp", facts["seccomp"] == "2" and all(
                      refused.get(n) in ("EPERM", "ENOSYS") for n in
                      ("mount", "unshare", "ptrace", "bpf", "perf_event_open")),
                  f"mode {facts['seccomp']}; "
                  + ", ".join(f"{k} {v}" for k, v in refused.items())),
        Guarantee("landlock", landlock_on,
                  f"ABI {abi}, applied {applied[0] if applied else '?'}: "
                  + ("files and TCP fenced" if landlock_on else "not enforced; the view of "
                     "the files and the network namespace are the fences"), required=False),
        Guarantee("limits", all(limits.get(k) == v for k, v in want.items()),
                  "per process: " + ", ".join(f"{k} {_ids(v)}" for k, v in limits.items())
                  + f"; per call: {_cgroup_line()}"),
        Guarantee("egress none", all(v != "connected" for v in egress.values()),
                  ", ".join(f"{k} {v}" for k, v in egress.items())),
        Guarantee("/tmp", facts["tmp"] == 0o1777,
                  "private, writable by the call" if facts["tmp"] == 0o1777
                  else f"mode {facts['tmp']}"),
    ]  # fmt: skip


def _ids(values: object) -> str:
    """``[5, 5, 5]`` as ``5``, ``[1, 2]`` as ``1:2``."""
    items = list(values) if isinstance(values, list | tuple) else [values]
    return str(items[0]) if len(set(items)) == 1 else ":".join(map(str, items))


def _cgroup_line() -> str:
    try:
        from oarlock.sandbox import _cgroup
    except ImportError:
        return "unknown"
    host = getattr(_cgroup, "cgroup_host", None)
    if host is None:
        return "unknown"
    found = host()
    version = getattr(found, "version", None)
    return f"cgroup v{version}" if version else f"no cgroup ({getattr(found, 'reason', '?')})"

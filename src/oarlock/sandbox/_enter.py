"""The first program of every sandboxed call: it takes the call's privileges away, then runs
the call's program. Standard library only (it runs as ``python -I -S``, with no
site-packages), bound read-only into the sandbox; nothing in it trusts the program.

``python -I -S enter.py NAME=VALUE... -- PROGRAM ARGS...``, the settings written by the
runner (paths and the filter hex-encoded). In order, it:

1. under ``unshare`` (``fork=1``), as root of its namespaces: mounts private tmpfs on
   ``/tmp``, ``/var/tmp``, ``/dev/shm`` and ``/run`` (hiding the host's files and Unix
   sockets there), binds back the few paths the call needs that were below them (the
   workspace, read-only folders), hides ``/proc/keys`` and ``/proc/key-users`` and brings
   the network namespace's loopback up;
2. builds the Landlock ruleset where the kernel has Landlock (read and execute on the
   system's view and the read-only paths, read-write on the workspace, ``/tmp`` and the
   devices; TCP bind and connect handled: none at all, or only port 3128, the egress
   forwarder's);
3. sets the kernel limits (``RLIMIT_*``; the CPU hard limit a second above the soft one);
4. as root: locks the securebits, empties the capability bounding set, clears the ambient
   set, drops every group and becomes the workspace's own uid and gid; then clears every
   capability left (the inheritable ones too);
5. joins a fresh anonymous session keyring (the starting process's is out of reach);
6. sets no_new_privs, enforces the Landlock ruleset, installs the seccomp filter;
7. closes every descriptor but 0, 1, 2 (and the report pipe, closed at exec);
8. checks from ``/proc/self/status`` that no capability is left (effective, permitted,
   bounding, inheritable, ambient), that no_new_privs is 1, the filter on (seccomp mode 2)
   and, as root, that the uid is the workspace's and not 0.

Any step that fails ends it before the program ever runs: exit status 125, a line
``oarlock-sandbox: RULE`` on standard error and ``refused RULE`` on the report pipe, which
the runner turns into ``sandbox_unavailable``. Else it writes ``ok exec landlock=ABI`` to
the report pipe and becomes the program (bubblewrap, whose first process passes on how it
ended), or ``ok fork landlock=ABI``, forks the program, waits, and writes ``exit N`` or
``signal N`` (``unshare``, which does not). The program never holds the pipe (its copy
closes at ``exec``, and this process is not dumpable); after an ``exec`` report nothing
more is believed, so the program cannot forge how it ended.
"""

from __future__ import annotations

import _ctypes  # the C half of ctypes: ctypes itself costs milliseconds to import
import posix as os  # the os module costs a millisecond to import: posix is loaded
import resource
import sys

REFUSED = 125
_ARCH = {"x86_64": {"keyctl": 250}, "aarch64": {"keyctl": 219}}
_PR_SET_DUMPABLE = 4
_PR_SET_SECCOMP = 22
_PR_CAPBSET_DROP = 24
_PR_SET_SECUREBITS = 28
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_SECCOMP_MODE_FILTER = 2
# noroot, no_setuid_fixup unset, keep_caps off, no_cap_ambient_raise: each with its lock
_SECUREBITS = 0x01 | 0x02 | 0x20 | 0x40 | 0x80
_KEYCTL_JOIN_SESSION_KEYRING = 1
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC = 32, 4096, 16384
_MS_KEEP = 1 | 2 | 4 | 8 | 1024 | 2048  # the statvfs flags a read-only remount keeps
_ST_RELATIME, _MS_RELATIME = 4096, 1 << 21
_LIMITS = {
    "cpu": resource.RLIMIT_CPU,
    "as": resource.RLIMIT_AS,
    "fsize": resource.RLIMIT_FSIZE,
    "nproc": resource.RLIMIT_NPROC,
    "nofile": resource.RLIMIT_NOFILE,
}

# Landlock (uapi/linux/landlock.h)
_LL_CREATE, _LL_ADD, _LL_RESTRICT = 444, 445, 446
_LL_VERSION = 1
_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1, 2, 4, 8
_FS_REFER, _FS_TRUNCATE, _FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_FS_FILE = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV
_NET_BIND, _NET_CONNECT = 1, 2
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1, 2
_PROXY_PORT = 3128


class _Refused(Exception):
    """A fence could not be put up: the program must not run."""


# -- the few C types and functions needed, on ``_ctypes`` alone ---------------------------------
class _Long(_ctypes._SimpleCData):  # type: ignore[type-arg]
    _type_ = "l"


class _ULong(_ctypes._SimpleCData):  # type: ignore[type-arg]
    _type_ = "L"


class _U32(_ctypes._SimpleCData):  # type: ignore[type-arg]
    _type_ = "I"


class _I32(_ctypes._SimpleCData):  # type: ignore[type-arg]
    _type_ = "i"


class _U64(_ctypes._SimpleCData):  # type: ignore[type-arg]
    _type_ = "Q"


class _UShort(_ctypes._SimpleCData):  # type: ignore[type-arg]
    _type_ = "H"


class _VoidP(_ctypes._SimpleCData):  # type: ignore[type-arg]
    _type_ = "P"


class _Char(_ctypes._SimpleCData):  # type: ignore[type-arg]
    _type_ = "c"


class _Function(_ctypes.CFuncPtr):
    _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
    _restype_ = _Long


class _Libc:
    """The C library's functions by name (``errno`` kept for :func:`_check`)."""

    def __init__(self) -> None:
        self._handle = _ctypes.dlopen(None, 0)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> _Function:
        function = _Function((name, self))  # type: ignore[arg-type]
        setattr(self, name, function)
        return function


def _buffer(memory: bytearray) -> _ctypes.Array[_Char]:
    """C memory over ``memory`` (what C writes there shows in it)."""
    return (_Char * len(memory)).from_buffer(memory)


class _RulesetAttr(_ctypes.Structure):
    _fields_ = (("fs", _U64), ("net", _U64), ("scoped", _U64))


class _PathBeneath(_ctypes.Structure):
    _pack_ = 1
    _fields_ = (("allowed", _U64), ("parent_fd", _I32))


class _NetPort(_ctypes.Structure):
    _fields_ = (("allowed", _U64), ("port", _U64))


class _Program(_ctypes.Structure):  # struct sock_fprog
    _fields_ = (("len", _UShort), ("filter", _VoidP))


class _Config:
    def __init__(self, items: list[str]) -> None:
        self.report = -1
        self.fork = False
        self.uid: int | None = None
        self.gid: int | None = None
        self.limits: list[tuple[int, int, int]] = []
        self.ro: list[str] = []
        self.rw: list[str] = []
        self.listed: list[str] = []
        self.net = "host"
        self.bpf = b""
        self.tmpfs: list[tuple[str, str]] = []
        self.keep: list[tuple[str, bool]] = []
        self.hide: list[str] = []
        self.lo = False
        self.chdir: str | None = None
        for item in items:
            name, sep, value = item.partition("=")
            if not sep:
                raise _Refused(f"config: {item!r} is not NAME=VALUE")
            self._set(name, value)
        if self.report < 3 or not self.bpf:
            raise _Refused("config: the report pipe and the seccomp filter are required")

    def _set(self, name: str, value: str) -> None:
        if name == "report":
            self.report = int(value)
        elif name == "fork":
            self.fork = value == "1"
        elif name == "uid":
            self.uid = int(value)
        elif name == "gid":
            self.gid = int(value)
        elif name == "limit":
            kind, soft, hard = value.split(":")
            self.limits.append((_LIMITS[kind], int(soft), int(hard)))
        elif name in ("ro", "rw", "list"):
            {"ro": self.ro, "rw": self.rw, "list": self.listed}[name].append(_path(value))
        elif name == "net":
            if value not in ("none", "proxy", "host"):
                raise _Refused(f"config: net={value!r}")
            self.net = value
        elif name == "bpf":
            self.bpf = bytes.fromhex(value)
        elif name == "tmpfs":  # PATH:MODE:SIZE
            path, options = value.split(":", 1)
            self.tmpfs.append((_path(path), options))
        elif name in ("keep", "keeprw"):
            self.keep.append((_path(value), name == "keeprw"))
        elif name == "hide":
            self.hide.append(_path(value))
        elif name == "lo":
            self.lo = value == "1"
        elif name == "chdir":
            self.chdir = _path(value)
        else:
            raise _Refused(f"config: unknown setting {name!r}")


def _path(text: str) -> str:
    return bytes.fromhex(text).decode(sys.getfilesystemencoding(), sys.getfilesystemencodeerrors())


def _bytes(path: str) -> bytes:
    return path.encode(sys.getfilesystemencoding(), sys.getfilesystemencodeerrors())


_S_IFMT, _S_IFDIR, _S_IFREG, _S_IFLNK = 0o170000, 0o040000, 0o100000, 0o120000


def _kind(path: str, *, follow: bool = True) -> int:
    """The file's type bits (0 where there is none)."""
    try:
        return (os.stat(path) if follow else os.lstat(path)).st_mode & _S_IFMT
    except OSError:
        return 0


def _makedirs(path: str) -> None:
    done = ""
    for part in path.strip("/").split("/"):
        done += "/" + part
        try:  # noqa: SIM105 - contextlib is one import more to start
            os.mkdir(done, 0o755)
        except FileExistsError:
            pass




def _check(result: int, rule: str) -> int:
    if result < 0:
        err = _ctypes.get_errno()
        raise _Refused(f"{rule}: {os.strerror(err)} (errno {err})")
    return result


# -- 1. private mounts (unshare) ------------------------------------------------------------
def _mount(libc: _Libc, src: str | None, dst: str, *, kind: str | None = None,
           flags: int = 0, data: str | None = None, rule: str) -> None:  # fmt: skip
    enc = [None if s is None else _bytes(s) for s in (src, dst, kind, data)]
    _check(libc.mount(enc[0], enc[1], enc[2], _ULong(flags), enc[3]), rule)


def _private_mounts(libc: _Libc, conf: _Config) -> None:
    """tmpfs over the folders where the host keeps temporary files and sockets; the paths
    the call needs below them bound back at their own paths."""
    under = [t for t, _ in conf.tmpfs]
    kept: list[tuple[str, bool, int, bool]] = []
    for path, writable in conf.keep:
        below = any(path == t or path.startswith(t.rstrip("/") + "/") for t in under)
        if below and _kind(path):
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            kept.append((path, writable, fd, _kind(path) == _S_IFDIR))
    for path, options in conf.tmpfs:
        if _kind(path, follow=False) == _S_IFDIR:
            _mount(libc, "tmpfs", path, kind="tmpfs", flags=_MS_NOSUID | _MS_NODEV, data=options,
                   rule=f"private tmpfs on {path}")  # fmt: skip
    for path, writable, fd, folder in kept:
        _makedirs(path.rsplit("/", 1)[0])
        if folder:
            _makedirs(path)
        else:
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600))
        _mount(libc, f"/proc/self/fd/{fd}", path, flags=_MS_BIND | _MS_REC, rule=f"bind {path}")
        if not writable:
            vfs = os.statvfs(path).f_flag
            keep = (vfs & _MS_KEEP) | (_MS_RELATIME if vfs & _ST_RELATIME else 0)
            _mount(libc, None, path, flags=_MS_REMOUNT | _MS_BIND | _MS_RDONLY | keep,
                   rule=f"read-only {path}")  # fmt: skip
        os.close(fd)
    for path in conf.hide:
        if _kind(path):
            _mount(libc, "/dev/null", path, flags=_MS_BIND, rule=f"hide {path}")
    if conf.lo:
        _loopback_up(libc)


def _loopback_up(libc: _Libc) -> None:
    """``ip link set lo up``, with two ioctls."""
    sock = _check(libc.socket(2, 2 | 0o2000000, 0), "loopback: socket")  # AF_INET, DGRAM
    try:
        req = bytearray(b"lo".ljust(40, b"\0"))  # struct ifreq: the name, then the flags
        _check(libc.ioctl(sock, 0x8913, _buffer(req)), "loopback: SIOCGIFFLAGS")
        flags = int.from_bytes(req[16:18], sys.byteorder) | 0x1  # IFF_UP
        req[16:18] = flags.to_bytes(2, sys.byteorder)
        _check(libc.ioctl(sock, 0x8914, _buffer(req)), "loopback: SIOCSIFFLAGS")
    finally:
        os.close(sock)


# -- 2. Landlock ----------------------------------------------------------------------------
def _landlock_abi(libc: _Libc) -> int:
    abi = int(libc.syscall(_LL_CREATE, None, _ULong(0), _U32(_LL_VERSION)))
    return max(abi, 0)


def _landlock(libc: _Libc, conf: _Config) -> tuple[int, int]:
    """(the ruleset's descriptor, or -1 where the kernel has no Landlock; its ABI)."""
    abi = _landlock_abi(libc)
    if abi < 1:
        if conf.fork and conf.uid is None:
            raise _Refused("landlock: the unshare fallback, as a user other than root, needs "
                           "Landlock (without it the call could read all that user's files)")
        return -1, 0
    every = (1 << 13) - 1
    every |= (_FS_REFER if abi >= 2 else 0) | (_FS_TRUNCATE if abi >= 3 else 0)
    every |= _FS_IOCTL_DEV if abi >= 5 else 0
    read = _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR
    attr = _RulesetAttr(every, 0, 0)
    size = 8
    if abi >= 4 and conf.net != "host":
        attr.net, size = _NET_BIND | _NET_CONNECT, 16
    if abi >= 6:
        attr.scoped, size = _SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL, 24
    fd = _check(
        libc.syscall(_LL_CREATE, _ctypes.byref(attr), _ULong(size), _U32(0)),
        "landlock: create_ruleset",
    )
    try:
        for paths, access in ((conf.ro, read), (conf.rw, every), (conf.listed, _FS_READ_DIR)):
            for path in paths:
                _landlock_path(libc, fd, path, access & every)
        if attr.net and conf.net == "proxy":
            rule = _NetPort(_NET_BIND | _NET_CONNECT, _PROXY_PORT)
            _check(libc.syscall(_LL_ADD, fd, 2, _ctypes.byref(rule), 0), "landlock: port 3128")
    except BaseException:
        os.close(fd)
        raise
    return fd, abi


def _landlock_path(libc: _Libc, ruleset: int, path: str, access: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # not there: nothing to allow
    try:
        if _kind(f"/proc/self/fd/{fd}") != _S_IFDIR:
            access &= _FS_FILE
        if access:
            rule = _PathBeneath(access, fd)
            _check(libc.syscall(_LL_ADD, ruleset, 1, _ctypes.byref(rule), 0), f"landlock: {path}")
    finally:
        os.close(fd)


# -- 3, 4. limits and the user --------------------------------------------------------------
def _drop(libc: _Libc, conf: _Config) -> None:
    """No capability left, in any set; as root, the workspace's own uid and gid too."""
    for kind, soft, hard in conf.limits:
        try:
            resource.setrlimit(kind, (soft, hard))
        except (OSError, ValueError) as exc:
            raise _Refused(f"limit {kind}: {exc}") from None
    if _caps("CapEff") & (1 << 8):  # CAP_SETPCAP: this process may lower the sets
        _check(libc.prctl(_PR_SET_SECUREBITS, _ULong(_SECUREBITS), 0, 0, 0),
               "securebits")  # fmt: skip
        last = int(_read("/proc/sys/kernel/cap_last_cap").strip() or "40")
        for cap in range(last + 1):
            _check(libc.prctl(_PR_CAPBSET_DROP, _ULong(cap), 0, 0, 0),
                   f"bounding set: capability {cap}")  # fmt: skip
    _check(libc.prctl(_PR_CAP_AMBIENT, _ULong(_PR_CAP_AMBIENT_CLEAR_ALL), 0, 0, 0),
           "ambient capabilities")  # fmt: skip
    if conf.uid is not None:
        gid = conf.uid if conf.gid is None else conf.gid
        try:
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(conf.uid, conf.uid, conf.uid)
        except OSError as exc:
            raise _Refused(f"user {conf.uid}: {exc.strerror}") from None
    header = (_U32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (_U32 * 6)()  # effective, permitted, inheritable: all empty
    _check(libc.capset(header, data), "capabilities")


def _keyring(libc: _Libc) -> None:
    number = _ARCH.get(os.uname().machine, {}).get("keyctl")
    if number is None:
        raise _Refused(f"keyring: no keyctl number known for {os.uname().machine}")
    _check(libc.syscall(number, _KEYCTL_JOIN_SESSION_KEYRING, None), "keyring: join a new one")


# -- 6. no_new_privs, Landlock, seccomp -----------------------------------------------------
def _confine(libc: _Libc, conf: _Config, ruleset: int) -> None:
    _check(libc.prctl(_PR_SET_NO_NEW_PRIVS, _ULong(1), 0, 0, 0), "no_new_privs")
    if ruleset >= 0:
        _check(libc.syscall(_LL_RESTRICT, ruleset, 0), "landlock: restrict_self")
        os.close(ruleset)
    if len(conf.bpf) % 8:
        raise _Refused("seccomp: the filter is not whole instructions")
    code = _buffer(bytearray(conf.bpf))
    prog = _Program(len(conf.bpf) // 8, _ctypes.addressof(code))
    _check(libc.prctl(_PR_SET_SECCOMP, _ULong(_SECCOMP_MODE_FILTER), _ctypes.byref(prog),
                      0, 0), "seccomp: install the filter")  # fmt: skip


# -- 8. the check ---------------------------------------------------------------------------
def _read(path: str) -> str:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 65536).decode("ascii", "replace")
    finally:
        os.close(fd)


def _status() -> dict[str, str]:
    found = {}
    for line in _read("/proc/self/status").splitlines():
        name, _, value = line.partition(":")
        found[name] = value.strip()
    return found


def _caps(name: str) -> int:
    return int(_status().get(name, "0"), 16)


def _verify(conf: _Config) -> None:
    status = _status()
    for name in ("CapEff", "CapPrm", "CapBnd", "CapInh", "CapAmb"):
        if int(status.get(name, "1"), 16) != 0:
            raise _Refused(f"capabilities: {name} is {status.get(name)}, not 0")
    if status.get("NoNewPrivs") != "1":
        raise _Refused("no_new_privs is not set")
    if status.get("Seccomp") != "2":
        raise _Refused("seccomp: the filter is not on")
    uids = status.get("Uid", "").split()
    if conf.uid is not None and (uids != [str(conf.uid)] * 4 or conf.uid == 0):
        raise _Refused(f"user: running as {' '.join(uids)}, not {conf.uid}")
    if "0" in uids and _read("/proc/self/uid_map").split() == ["0", "0", "4294967295"]:
        raise _Refused("user: running as root (no uid of its own was given)")


# -- running the program --------------------------------------------------------------------
def _say(fd: int, text: str) -> None:
    try:  # noqa: SIM105 - contextlib is one import more to start
        os.write(fd, text.encode())
    except OSError:
        pass


def _which(name: str) -> str:
    """``name`` found on ``PATH`` as ``execvp`` would (whose own search imports a module
    of the standard library, which this process may no longer be able to read)."""
    if "/" in name:
        return name
    found = os.environ.get(b"PATH", b"/usr/bin:/bin")  # posix's: bytes
    for folder in _path(found.hex()).split(":"):
        base = folder or "."
        path = base + name if base.endswith("/") else f"{base}/{name}"
        if _kind(path) == _S_IFREG and os.access(path, os.X_OK):
            return path
    return name


def _exec(argv: list[str]) -> int:
    import _signal  # type: ignore[import-not-found]  # built in: Python ignores these two

    for sig in (_signal.SIGPIPE, _signal.SIGXFSZ):
        _signal.signal(sig, _signal.SIG_DFL)
    try:
        os.execv(_which(argv[0]), argv)
    except OSError as exc:
        sys.stderr.write(f"{argv[0]}: {exc.strerror}\n")
        sys.stderr.flush()
        return 127 if isinstance(exc, FileNotFoundError) else 126
    return 127  # unreachable: exec returned


def _supervise(argv: list[str], report: int) -> int:
    """Fork the program, reap every process (this is the PID namespace's first one) until
    it ends, and report how it ended."""
    pid = os.fork()
    if pid == 0:
        os._exit(_exec(argv))
    for fd in (0, 1):  # the program's alone
        try:  # noqa: SIM105 - contextlib is one import more to start
            os.close(fd)
        except OSError:
            pass
    while True:
        try:
            done, status = os.wait()
        except ChildProcessError:
            return 1
        if done == pid:
            break
    if os.WIFSIGNALED(status):
        _say(report, f"signal {os.WTERMSIG(status)}\n")
        return 128 + os.WTERMSIG(status)
    _say(report, f"exit {os.WEXITSTATUS(status)}\n")
    return os.WEXITSTATUS(status)


def main(args: list[str]) -> int:
    report = -1
    try:
        if "--" not in args or args.index("--") == len(args) - 1:
            raise _Refused("config: no program to run")
        cut = args.index("--")
        conf, argv = _Config(args[:cut]), args[cut + 1 :]
        report = conf.report
        os.set_inheritable(report, False)
        libc = _Libc()
        if conf.tmpfs or conf.hide or conf.lo:
            _private_mounts(libc, conf)
        ruleset, abi = _landlock(libc, conf)
        _drop(libc, conf)
        _keyring(libc)
        _confine(libc, conf, ruleset)
        os.closerange(3, report)
        os.closerange(report + 1, 1 << 20)
        _verify(conf)
        if conf.chdir is not None:
            os.chdir(conf.chdir)
        if conf.fork:  # no process of the same user may reach into this one
            _check(libc.prctl(_PR_SET_DUMPABLE, _ULong(0), 0, 0, 0), "dumpable")
    except Exception as exc:  # any failure: the program does not run
        rule = str(exc) if isinstance(exc, _Refused) else f"{type(exc).__name__}: {exc}"
        rule = " ".join(rule.split())
        sys.stderr.write(f"oarlock-sandbox: {rule}\n")
        sys.stderr.flush()
        if report >= 0:
            _say(report, f"refused {rule}\n")
        return REFUSED
    _say(report, f"ok {'fork' if conf.fork else 'exec'} landlock={abi}\n")
    if conf.fork:
        return _supervise(argv, report)
    return _exec(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

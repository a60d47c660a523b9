"""The seccomp filter every sandboxed call runs under, in the spirit of Docker's default
profile: every system call is allowed but those that reach past the call's own processes
and files, which fail with ``EPERM`` (``ENOSYS`` for ``clone3``, so that the C library
falls back to ``clone``, whose flags the filter can see):

* the kernel's keyrings (``keyctl``, ``add_key``, ``request_key``);
* other processes' memory (``ptrace``, ``process_vm_readv``/``writev``, ``kcmp``,
  ``pidfd_getfd``);
* kernel programs and counters, user faults, ``io_uring`` (``bpf``, ``perf_event_open``,
  ``userfaultfd``, ``io_uring_*``);
* mounts and namespaces (``mount``, ``umount2``, ``pivot_root``, the new mount API, ``setns``,
  and ``unshare`` and ``clone`` asking for any new namespace);
* the machine (modules, ``kexec``, ``reboot``, swap, process accounting, quotas, the kernel
  log, I/O ports, file handles, ``lookup_dcookie``);
* ``personality`` with anything but the default execution domain (``PER_LINUX``, with at
  most ``UNAME26`` and ``PER_LINUX32``) or the query ``0xffffffff``.

A system call of another architecture (32-bit calls on a 64-bit kernel) kills the process.
The filter is compiled once per process with libseccomp (``pyseccomp``) to classic BPF;
the sandbox's entry program (:mod:`oarlock.sandbox._enter`) installs it.
"""

from __future__ import annotations

import contextlib
import errno
import tempfile
import threading
from functools import cache

__all__ = ["SeccompUnavailable", "seccomp_filter"]

DENIED = (
    "keyctl", "add_key", "request_key",
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen", "fsmount",
    "fsconfig", "fspick", "mount_setattr", "setns",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
    "reboot", "swapon", "swapoff", "acct", "quotactl", "quotactl_fd",
    "open_by_handle_at", "name_to_handle_at", "lookup_dcookie", "syslog",
    "iopl", "ioperm", "uselib", "nfsservctl",
)  # fmt: skip
# CLONE_NEWTIME, NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET
NAMESPACE_FLAGS = (0x80, 0x20000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000,
                   0x40000000)  # fmt: skip
_PERSONALITY_ALLOWED = 0x0020008  # UNAME26 | PER_LINUX32, alone or together
_PERSONALITY_QUERY = 0xFFFFFFFF
_lock = threading.Lock()


class SeccompUnavailable(Exception):
    """The filter cannot be built on this host (libseccomp missing, an unknown
    architecture); the message says why."""


def seccomp_filter() -> bytes:
    """The filter as classic BPF (``struct sock_filter`` instructions), built on first use;
    SeccompUnavailable when it cannot be."""
    with _lock:
        return _compiled()


@cache
def _compiled() -> bytes:
    try:
        import pyseccomp as sc  # type: ignore[import-untyped]
    except (ImportError, OSError, AttributeError) as exc:
        raise SeccompUnavailable(f"seccomp: libseccomp cannot be loaded ({exc})") from None
    eperm = sc.ERRNO(errno.EPERM)
    try:
        f = sc.SyscallFilter(sc.ALLOW)
        f.set_attr(sc.Attr.ACT_BADARCH, sc.KILL_PROCESS)
        with contextlib.suppress(OSError, ValueError, RuntimeError):  # libseccomp >= 2.5
            f.set_attr(sc.Attr.CTL_OPTIMIZE, 2)  # a binary tree of the calls, not a list
        for name in DENIED:
            _rule(f, eperm, name)
        f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
        for flag in NAMESPACE_FLAGS:
            for name in ("clone", "unshare"):
                f.add_rule(eperm, name, sc.Arg(0, sc.MASKED_EQ, flag, flag))
        for mask, value in _personality_rules():
            f.add_rule(eperm, "personality", sc.Arg(0, sc.MASKED_EQ, mask, value))
        with tempfile.TemporaryFile() as out:  # libseccomp writes to a descriptor
            f.export_bpf(out)
            out.seek(0)
            bpf = out.read()
    except (OSError, ValueError, RuntimeError) as exc:
        raise SeccompUnavailable(f"seccomp: the filter cannot be built ({exc})") from None
    if not bpf or len(bpf) % 8:
        raise SeccompUnavailable("seccomp: libseccomp exported no filter")
    return bpf


def _rule(f: object, action: int, name: str) -> None:
    """Deny ``name``; a name this libseccomp or architecture does not know is skipped (the
    kernel then has no such call either, or it is not in this architecture's table)."""
    with contextlib.suppress(OSError, ValueError, RuntimeError):
        f.add_rule(action, name)  # type: ignore[attr-defined]


def _personality_rules() -> list[tuple[int, int]]:
    """Masked comparisons, any of which denies: the kernel reads ``personality``'s argument
    as 32 bits; allowed are the subsets of UNAME26 | PER_LINUX32, and the query
    (all 32 bits set). With ``p`` a bit outside the allowed ones: a value with ``p`` clear
    is denied when it has another bit outside them set, one with ``p`` set when any bit is
    clear (so it is not the query)."""
    outside = [b for b in range(32) if not (_PERSONALITY_ALLOWED >> b) & 1]
    p = outside[0]
    rules = [((1 << b) | (1 << p), 1 << b) for b in outside if b != p]
    rules += [((1 << p) | (1 << c), 1 << p) for c in range(32) if c != p]
    return rules

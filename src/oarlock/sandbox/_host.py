"""What isolation this host can give a sandboxed call, strongest first.

* ``bubblewrap``: the ``bwrap`` program (Debian package ``bubblewrap``) builds a view of the
  system for the call: the system's programs and libraries read-only, the workspace the
  only writable path, a private ``/tmp``, ``/proc`` and ``/dev``, new user, PID, IPC, UTS,
  cgroup and network namespaces. The home folder, the run database, key files and every
  other path are not in the view at all.
* ``unshare``: where ``bwrap`` is missing, util-linux's ``unshare`` gives new mount, PID,
  IPC, UTS and network namespaces; the view of the file system is the host's (a read-only
  remount is not available unprivileged), so the policy must ask for no more than process
  and network isolation to accept it.
* ``none``: no isolation. A sandboxed call is never run bare: it is refused
  (``sandbox_unavailable``).

As root, the namespaces are made as root and the call then becomes an unprivileged user
(a uid of its own, with no capabilities and no other process, so that the process limit
counts only its processes); as another user, it runs as that user in a user namespace.

Each probe runs a real sandboxed ``true`` once per process (a few milliseconds).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from functools import cache

__all__ = [
    "ISOLATION_ORDER",
    "HostSupport",
    "drop_user_argv",
    "host_support",
    "system_binds",
    "unshare_argv",
]

ISOLATION_ORDER = ("bubblewrap", "unshare", "none")
_PROBE_TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class HostSupport:
    """What this host supports; ``notes`` say why a kind is missing."""

    bubblewrap: bool
    unshare: bool
    drop_user: bool  # running as root: the call gets an unprivileged uid of its own
    prlimit: bool
    notes: tuple[str, ...] = ()

    @property
    def strongest(self) -> str:
        if self.bubblewrap:
            return "bubblewrap"
        return "unshare" if self.unshare else "none"

    def supports(self, isolation: str) -> bool:
        return {"bubblewrap": self.bubblewrap, "unshare": self.unshare, "none": True}[isolation]


def system_binds() -> list[str]:
    """``bwrap`` arguments for the read-only view of the system: ``/usr`` and the
    top-level links into it, the dynamic loader's cache and the few files of ``/etc``
    programs read (name resolution, time zone), never the rest of ``/etc``."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = f"/{name}"
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for name in ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime",
                 "nsswitch.conf", "hosts", "passwd", "group", "ssl", "mime.types"):  # fmt: skip
        path = f"/etc/{name}"
        if os.path.exists(path):
            args += ["--ro-bind", path, path]
    return args


def unshare_argv(unshare: str = "unshare") -> list[str]:
    """``unshare`` with new mount, PID, IPC, UTS and network namespaces (and, when not
    root, a user namespace)."""
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return [unshare, *user, "--fork", "--pid", "--mount-proc", "--net", "--ipc", "--uts",
            "--kill-child", "--"]  # fmt: skip


def drop_user_argv(uid: int) -> list[str]:
    """``setpriv`` becoming ``uid`` (as root, inside the namespaces oarlock made): no
    capabilities, no groups, no way back (no new privileges)."""
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs",
            "--bounding-set=-all", "--inh-caps=-all", "--"]  # fmt: skip


def _works(argv: list[str]) -> tuple[bool, str]:
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=_PROBE_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"{argv[0]}: {exc}"
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return False, f"{argv[0]}: {why[-1] if why else f'exit status {done.returncode}'}"
    return True, ""


@cache
def host_support() -> HostSupport:
    """Probe the host once per process."""
    notes: list[str] = []
    drop = os.geteuid() == 0 and shutil.which("setpriv") is not None
    user = drop_user_argv(65534) if drop else []
    true = shutil.which("true") or "/usr/bin/true"
    bwrap = shutil.which("bwrap")
    has_bwrap = False
    if bwrap is None:
        notes.append("bubblewrap: bwrap is not installed (apt install bubblewrap)")
    else:
        own = [] if os.geteuid() == 0 else ["--unshare-user"]
        has_bwrap, why = _works(
            [bwrap, *system_binds(), *own, "--unshare-pid", "--unshare-net",
             "--die-with-parent", "--", *user, true]
        )  # fmt: skip
        if not has_bwrap:
            notes.append(f"bubblewrap: {why}")
    unshare = shutil.which("unshare")
    has_unshare = False
    if unshare is None:
        notes.append("unshare: not installed (util-linux)")
    else:
        has_unshare, why = _works([*unshare_argv(unshare), *user, true])
        if not has_unshare:
            notes.append(f"unshare: {why}")
    has_prlimit = shutil.which("prlimit") is not None
    if not has_prlimit:
        notes.append("prlimit: not installed (util-linux); limits cannot be set")
    return HostSupport(
        bubblewrap=has_bwrap and has_prlimit,
        unshare=has_unshare and has_prlimit,
        drop_user=drop,
        prlimit=has_prlimit,
        notes=tuple(notes),
    )

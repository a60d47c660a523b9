"""Workspaces: one folder per run (named by the invocation's ``workspaceId``), the only
place a sandboxed call can write, kept for the run and removed by ``oarlock sandbox prune``.

Files are read and written from outside the sandbox only through :func:`read_file` and
:func:`write_file`, which never leave the workspace: a path must be relative, made of
plain names (no ``..``, no empty part, no NUL), and every folder on the way and the file
itself are opened without following a symbolic link (``O_NOFOLLOW``, one folder at a time
from the workspace's own descriptor), so a link that a sandboxed program planted cannot
lead a read or a write elsewhere. A file with more than one hard link is refused too.

A workspace's tree is walked (counted, listed, re-owned, removed) the same way, one
folder at a time by name from the descriptor of its parent and back up by ``..`` (checked
to be the folder it came from), with no recursion: a tree of any depth, or with names past
``PATH_MAX`` in all, is walked in bounded stack and with one descriptor open.

When oarlock runs as root, each workspace's calls run as a uid of its own
(:class:`UidRegistry`): allocated once, under an exclusive lock and with a record created
atomically (a link that fails when the record exists), in a registry shared by every
workspaces folder of the host (``$OARLOCK_SANDBOX_UIDS``, else
``/var/lib/oarlock/sandbox-uids``), so that no two live workspaces share one; stable for
the workspace (its folder is owned by it, and the record names the folder); freed when the
workspace is removed (or found gone); never a uid or gid the system's user and group
databases know, one in a subordinate range (``/etc/subuid``, ``/etc/subgid``), one a
process runs as, or one that owns another folder of the same workspaces folder.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import grp
import hashlib
import json
import os
import pwd
import re
import stat
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

from oarlock.errors import ToolError, UsageError

__all__ = [
    "UID_RANGE",
    "UidRegistry",
    "MAX_ENTRIES",
    "Workspace",
    "Workspaces",
    "WorkspaceInfo",
    "WorkspaceSize",
    "confined_parts",
    "default_uid_registry",
    "default_workspaces_root",
    "measure_workspace",
    "read_file",
    "write_file",
]

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_MAX_PATH = 4096
_MAX_PARTS = 64
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
UID_RANGE = range(200_000, 1_000_000)
"""The uids (and, the same number, gids) a workspace's calls may run as."""


def default_workspaces_root() -> Path:
    """``$OARLOCK_WORKSPACES``, else ``$XDG_DATA_HOME/oarlock/workspaces``, else
    ``~/.local/share/oarlock/workspaces``."""
    if explicit := os.environ.get("OARLOCK_WORKSPACES"):
        return Path(explicit).expanduser()
    data = os.environ.get("XDG_DATA_HOME", "")
    base = Path(data) if os.path.isabs(data) else Path.home() / ".local" / "share"
    return base / "oarlock" / "workspaces"


def default_uid_registry() -> Path:
    """``$OARLOCK_SANDBOX_UIDS``, else ``/var/lib/oarlock/sandbox-uids``: one for the host,
    whatever workspaces folder a run uses."""
    if explicit := os.environ.get("OARLOCK_SANDBOX_UIDS"):
        return Path(explicit).expanduser()
    return Path("/var/lib/oarlock/sandbox-uids")


@dataclass(frozen=True, slots=True)
class Workspace:
    workspace_id: str
    path: Path
    uid: int | None  # the owner calls run as (None: oarlock's own user)


@dataclass(frozen=True, slots=True)
class WorkspaceInfo:
    workspace_id: str
    path: Path
    files: int
    bytes: int
    modified: float


class Workspaces:
    """The workspaces below ``root`` (made 0711; each workspace 0700); ``uids`` the registry
    of their uids when oarlock runs as root (default: :func:`default_uid_registry`)."""

    def __init__(self, root: Path | None = None, *, uids: Path | None = None) -> None:
        self.root = root or default_workspaces_root()
        self.uids = UidRegistry(uids)

    def _path(self, workspace_id: str) -> Path:
        if not isinstance(workspace_id, str) or not _ID.fullmatch(workspace_id):
            raise UsageError(
                f"{workspace_id!r} is not a workspace id (letters, digits, '_', '.', '-')",
                code="workspace_invalid",
            )
        return self.root / workspace_id

    def ensure(self, workspace_id: str) -> Workspace:
        """The workspace, created on first use; as root, owned by its own uid (given on
        first use, the same ever after)."""
        path = self._path(workspace_id)
        if not self.root.exists():
            self.root.mkdir(mode=0o711, parents=True)  # each workspace is closed itself
        if os.geteuid() != 0:
            _make_folder(path)
            return Workspace(workspace_id, path, None)
        with contextlib.suppress(FileNotFoundError):
            uid = self.uids.uid_of(os.lstat(path))
            if uid is not None:
                return Workspace(workspace_id, path, uid)
        with self.uids.locked():
            made = _make_folder(path)
            st = os.lstat(path)
            uid = self.uids.uid_of(st)
            if uid is None:
                old = None if made else st.st_uid
                uid = self.uids.allocate(path, st, prefer=old, avoid=self._owners(path))
                if old is None:
                    os.chown(path, uid, uid, follow_symlinks=False)
                elif old != uid or st.st_gid != uid:
                    _reown_tree(path, old, uid)
        return Workspace(workspace_id, path, uid)

    def existing(self, workspace_id: str) -> Workspace:
        """The workspace if it exists (nothing made, no uid given); UsageError if not."""
        path = self._path(workspace_id)
        st = self._folder(path, workspace_id)
        uid = self.uids.uid_of(st) if os.geteuid() == 0 else None
        return Workspace(workspace_id, path, uid)

    def _folder(self, path: Path, workspace_id: str) -> os.stat_result:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            st = None
        if st is None or not stat.S_ISDIR(st.st_mode):
            raise UsageError(f"no workspace {workspace_id}", code="not_found")
        return st

    def _owners(self, but: Path) -> frozenset[int]:
        """The owners of the other entries of the workspaces folder: the uid of a
        workspace made before the registry, which it does not record, is given to no
        other."""
        owners = set()
        with os.scandir(self.root) as it:
            for entry in it:
                if entry.name != but.name:
                    with contextlib.suppress(OSError):
                        owners.add(entry.stat(follow_symlinks=False).st_uid)
        return frozenset(owners)

    def all(self) -> list[WorkspaceInfo]:
        if not self.root.is_dir():
            return []
        found = []
        for entry in sorted(self.root.iterdir()):
            if entry.is_dir() and not entry.is_symlink() and _ID.fullmatch(entry.name):
                with contextlib.suppress(UsageError):  # removed meanwhile
                    found.append(self.info(entry.name))
        return found

    def info(self, workspace_id: str) -> WorkspaceInfo:
        """The workspace's files, their bytes and its latest change. A tree that changes
        while it is counted is counted as far as it could be."""
        path = self._path(workspace_id)
        newest = self._folder(path, workspace_id).st_mtime
        files = size = 0
        with contextlib.suppress(OSError):
            for _fd, _folder, _name, st in _tree(path):
                if st is not None:
                    newest = max(newest, st.st_mtime)
                    if not stat.S_ISDIR(st.st_mode):
                        files, size = files + 1, size + st.st_size
        return WorkspaceInfo(workspace_id, path, files, size, newest)

    def files(self, workspace_id: str) -> Iterator[str]:
        """The paths of the workspace's files (every entry but folders), relative to it,
        each folder's in the order of their names."""
        path = self._path(workspace_id)
        self._folder(path, workspace_id)
        for _fd, folder, name, st in _tree(path):
            if st is not None and not stat.S_ISDIR(st.st_mode):
                yield "/".join([*folder, name])

    def remove(self, workspace_id: str) -> None:
        """Remove the workspace and all it holds, and free its uid."""
        path = self._path(workspace_id)
        st = self._folder(path, workspace_id)
        _remove_tree(path)
        if os.geteuid() == 0 and st.st_uid in UID_RANGE:
            with self.uids.locked():
                self.uids.free(st.st_uid, st)

    def prune(self, older_than_seconds: float) -> list[str]:
        """Remove the workspaces untouched for ``older_than_seconds``; their ids. As root,
        the uids of workspaces removed by other means are freed too."""
        cutoff = time.time() - older_than_seconds
        gone = []
        for info in self.all():
            if info.modified < cutoff:
                self.remove(info.workspace_id)
                gone.append(info.workspace_id)
        if os.geteuid() == 0 and self.uids.folder.is_dir():
            with self.uids.locked():
                self.uids.sweep()
        return gone


def _make_folder(path: Path) -> bool:
    """Make the workspace's folder (0700); whether it was made (False: it was there)."""
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        if path.is_symlink() or not path.is_dir():
            raise UsageError(
                f"{path} is not a workspace folder", code="workspace_invalid"
            ) from None
        return False
    return True


# -- the workspaces' own uids ----------------------------------------------------------------

_Record = tuple[str, int, int]  # the folder a uid is given to: path, device, inode
_UNREADABLE: _Record = ("", -1, -1)


class UidRegistry:
    """The uids given to workspaces (see the module documentation): a folder of this user,
    closed to others, holding ``lock`` (taken with ``flock`` for every change) and one
    record per uid given, named by the uid, naming the workspace folder it was given to
    (its path, device and inode). A record whose folder is gone, or is no longer that
    folder or no longer owned by the uid, is stale: its uid is free again."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder or default_uid_registry()

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the registry's lock (every allocation and release holds it)."""
        self._prepare()
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(self.folder / "lock", flags, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # the lock goes with it

    def _prepare(self) -> None:
        with contextlib.suppress(FileExistsError):
            self.folder.mkdir(mode=0o700, parents=True)
        st = os.lstat(self.folder)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
            raise ToolError(
                f"{self.folder} (the sandbox uid registry, $OARLOCK_SANDBOX_UIDS) is not a "
                "folder of this user closed to others; no workspace uid can be given",
                code="workspace_unavailable",
            )

    def record(self, uid: int) -> _Record | None:
        """The folder ``uid`` is given to, or None; a record that cannot be read holds its
        uid for a folder unknown."""
        try:
            fd = os.open(self.folder / str(uid), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError:
            return _UNREADABLE
        try:
            data = json.loads(os.read(fd, 65536))
            return str(data["path"]), int(data["dev"]), int(data["ino"])
        except (OSError, ValueError, KeyError, TypeError):
            return _UNREADABLE
        finally:
            os.close(fd)

    def uid_of(self, st: os.stat_result) -> int | None:
        """The uid given to the folder of ``st`` (its lstat), if it has one: its owner, when
        that uid's record names the folder."""
        if st.st_uid not in UID_RANGE:
            return None
        held = self.record(st.st_uid)
        if held is None or (held[1], held[2]) != (st.st_dev, st.st_ino):
            return None
        return st.st_uid

    def _stale(self, uid: int, held: _Record) -> bool:
        if held == _UNREADABLE:
            return False
        try:
            st = os.lstat(held[0])
        except (FileNotFoundError, NotADirectoryError):
            return True  # gone
        except OSError:
            return False
        return (st.st_dev, st.st_ino) != held[1:] or st.st_uid != uid

    def allocate(
        self, path: Path, st: os.stat_result, *, prefer: int | None = None,
        avoid: frozenset[int] = frozenset(),
    ) -> int:  # fmt: skip
        """Give the folder ``path`` (of lstat ``st``) a uid of its own; the caller holds the
        lock. ``prefer`` is tried first (the folder's owner, for a folder made before);
        ``avoid`` are uids in use that the registry does not know."""
        taken = avoid | _known_ids()
        subordinate = _subordinate_ranges()
        where = os.path.abspath(path)
        body = {"path": where, "dev": st.st_dev, "ino": st.st_ino, "at": time.time()}
        temporary = self.folder / f".new-{os.getpid()}-{time.monotonic_ns()}"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, json.dumps(body).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            for uid in _candidates(where, prefer):
                if uid in taken or any(uid in r for r in subordinate) or not _unknown(uid):
                    continue
                if self._link(temporary, uid):
                    return uid
        finally:
            os.unlink(temporary)
        raise ToolError(
            f"no sandbox uid is free in {UID_RANGE.start}-{UID_RANGE.stop - 1}: remove "
            "workspaces no longer needed (oarlock sandbox prune)",
            code="workspace_unavailable",
        )

    def _link(self, temporary: Path, uid: int) -> bool:
        """Make ``temporary`` the record of ``uid`` if it is free (a stale record replaced)."""
        final = self.folder / str(uid)
        for _ in range(2):
            try:
                os.link(temporary, final)
            except FileExistsError:
                held = self.record(uid)
                if held is not None and not self._stale(uid, held):
                    return False
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(final)
                continue
            self._sync()
            return True
        return False

    def free(self, uid: int, st: os.stat_result) -> None:
        """Release ``uid`` if it is given to the folder of ``st`` (the caller holds the
        lock)."""
        held = self.record(uid)
        if held is not None and (held[1], held[2]) == (st.st_dev, st.st_ino):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.folder / str(uid))
            self._sync()

    def sweep(self) -> int:
        """Free every stale record, and drop what an allocation that never finished left
        (the caller holds the lock, so none is under way); how many uids were freed."""
        freed = 0
        for uid, held in self.given().items():
            if self._stale(uid, held):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.folder / str(uid))
                    freed += 1
        with os.scandir(self.folder) as it:
            for entry in it:
                if entry.name.startswith(".new-"):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(entry.path)
        self._sync()
        return freed

    def given(self) -> dict[int, _Record]:
        """Every uid given, with its record."""
        found = {}
        with contextlib.suppress(FileNotFoundError), os.scandir(self.folder) as it:
            for entry in it:
                if entry.name.isdigit() and int(entry.name) in UID_RANGE:
                    held = self.record(int(entry.name))
                    if held is not None:
                        found[int(entry.name)] = held
        return found

    def _sync(self) -> None:
        fd = os.open(self.folder, _DIR)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _start(key: str) -> int:
    """Where the search for a free uid begins for ``key`` (spread, so that a search rarely
    passes many given uids)."""
    return int(hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:12], 16)


def _candidates(key: str, prefer: int | None) -> Iterator[int]:
    if prefer is not None and prefer in UID_RANGE:
        yield prefer
    n = len(UID_RANGE)
    start = _start(key) % n
    for i in range(n):
        yield UID_RANGE[(start + i) % n]


def _known_ids() -> frozenset[int]:
    """The uids and gids the user and group databases list, and those processes run as."""
    ids = {p.pw_uid for p in pwd.getpwall()} | {g.gr_gid for g in grp.getgrall()}
    with contextlib.suppress(OSError), os.scandir("/proc") as it:
        for entry in it:
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    st = entry.stat()
                    ids.update((st.st_uid, st.st_gid))
    return frozenset(ids)


def _unknown(uid: int) -> bool:
    """Whether neither a user nor a group of that number exists (a database that cannot be
    listed, like some directory services, answers this)."""
    for lookup in (pwd.getpwuid, grp.getgrgid):
        try:
            lookup(uid)
        except KeyError:
            continue
        return False
    return True


def _subordinate_ranges() -> list[range]:
    """The ranges ``/etc/subuid`` and ``/etc/subgid`` give users' own namespaces."""
    found = []
    for name in ("/etc/subuid", "/etc/subgid"):
        with contextlib.suppress(OSError), open(name, encoding="utf-8", errors="replace") as fh:
            for row in fh:
                fields = row.strip().split(":")
                if len(fields) == 3 and fields[1].isdigit() and fields[2].isdigit():
                    first = int(fields[1])
                    found.append(range(first, first + int(fields[2])))
    return found


# -- walking a tree without recursion -------------------------------------------------------

_Step = tuple[int, list[str], str, os.stat_result | None]


def _tree(root: Path) -> Iterator[_Step]:
    """Every entry below ``root``, as ``(fd, folder, name, lstat)``: ``fd`` the open folder
    holding ``name``, ``folder`` its names from the root (a list this walk goes on
    changing: copy what is kept). A folder's entries come before its subfolders'; after a
    subfolder's last entry comes ``(fd, folder, name, None)``, ``fd`` its parent again
    (where it can be removed). An entry that goes away meanwhile is skipped; a folder that
    moves while it is walked (``..`` is not the folder the walk came from) ends the walk
    with OSError. ``fd`` is valid until the next step."""
    fd = os.open(root, _DIR)
    try:
        folder: list[str] = []
        first = os.fstat(fd)
        stack = [((first.st_dev, first.st_ino), (yield from _scan(fd, folder)))]
        while stack:
            pending = stack[-1][1]
            if pending:
                name = pending.pop()
                try:
                    down = os.open(name, _DIR, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR, errno.EACCES):
                        continue  # gone, replaced by a link or a file, or closed to us
                    raise
                st = os.fstat(down)
                os.close(fd)
                fd = down
                folder.append(name)
                stack.append(((st.st_dev, st.st_ino), (yield from _scan(fd, folder))))
                continue
            stack.pop()
            if not stack:
                break
            up = os.open("..", _DIR, dir_fd=fd)
            os.close(fd)
            fd = up
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != stack[-1][0]:
                raise OSError(errno.ESTALE, f"a folder of {root} moved while it was walked")
            yield fd, folder, folder.pop(), None
    finally:
        os.close(fd)


def _scan(fd: int, folder: list[str]) -> Generator[_Step, None, list[str]]:
    """The entries of the open folder ``fd`` (sorted by name); returns its subfolders'
    names, last to be walked first."""
    with os.scandir(fd) as it:
        names = sorted(entry.name for entry in it)
    subfolders = []
    for name in names:
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        yield fd, folder, name, st
        if stat.S_ISDIR(st.st_mode):
            subfolders.append(name)
    subfolders.reverse()
    return subfolders


MAX_ENTRIES = 1_000_000


@dataclass(frozen=True, slots=True)
class WorkspaceSize:
    """The bytes a workspace holds, the entries counted, and whether the count stopped at
    its bound (``capped``: the workspace counts as full)."""

    bytes: int
    entries: int
    capped: bool = False

    def over(self, quota: int) -> bool:
        return self.capped or self.bytes > quota


def measure_workspace(path: Path, *, max_entries: int = MAX_ENTRIES) -> WorkspaceSize:
    """What the workspace at ``path`` holds, for its quota: each file's allocated blocks or
    its length, whichever is more, each hard-linked file once, and the folders' own
    blocks, walked as :func:`_tree` walks (any depth, never through a link), stopping at
    ``max_entries`` (then counted as full). A workspace whose folders move while they are
    counted is counted again, once, then taken as far as it was counted."""
    found = WorkspaceSize(0, 0)
    for _ in range(2):
        total, entries, linked = 0, 0, set[tuple[int, int]]()
        try:
            total = os.stat(path, follow_symlinks=False).st_blocks * 512
            for _fd, _folder, _name, st in _tree(path):
                if st is None:
                    continue
                entries += 1
                if entries > max_entries:
                    return WorkspaceSize(total, entries - 1, True)
                if stat.S_ISREG(st.st_mode):
                    if st.st_nlink > 1:
                        if (st.st_dev, st.st_ino) in linked:
                            continue
                        linked.add((st.st_dev, st.st_ino))
                    total += max(st.st_size, st.st_blocks * 512)
                else:
                    total += st.st_blocks * 512
        except FileNotFoundError:  # no workspace (yet): nothing held
            return WorkspaceSize(0, 0)
        except OSError as exc:
            if exc.errno != errno.ESTALE:
                raise
            found = WorkspaceSize(total, entries)  # a folder moved: count again, once
            continue
        return WorkspaceSize(total, entries)
    return found


def _remove_tree(path: Path) -> None:
    """Remove the folder ``path`` and all it holds, never following a link."""
    for fd, _folder, name, st in _tree(path):
        if st is None:
            os.rmdir(name, dir_fd=fd)
        elif not stat.S_ISDIR(st.st_mode):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=fd)
    os.rmdir(path)


def _reown_tree(path: Path, old: int, new: int) -> None:
    """Give ``new`` the folders and files ``old`` owns in the folder ``path`` (the folder
    too), each checked on its own open descriptor (never through a link, never a file with
    other hard links, which may be a file outside); links, pipes and sockets keep their
    owner (theirs gives no access)."""
    for fd, _folder, name, st in _tree(path):
        if st is None or st.st_uid != old:
            continue
        if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
            continue
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
        try:
            entry = os.open(name, flags, dir_fd=fd)
        except OSError:
            continue  # gone or replaced meanwhile
        try:
            now = os.fstat(entry)
            own = stat.S_ISDIR(now.st_mode) or (stat.S_ISREG(now.st_mode) and now.st_nlink == 1)
            if own and now.st_uid == old:
                os.fchown(entry, new, new)
        finally:
            os.close(entry)
    os.chown(path, new, new, follow_symlinks=False)


def confined_parts(path: str) -> list[str]:
    """The names of a path confined to a workspace; ToolError (``path_refused``) for an
    absolute path, ``..``, an empty or ``.`` part, a NUL, a lone surrogate, or a path too
    long."""
    if not isinstance(path, str) or not path:
        raise ToolError("the path is empty", code="path_refused")
    if "\0" in path or len(path) > _MAX_PATH:
        raise ToolError("the path holds a NUL or is too long", code="path_refused")
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise ToolError(
            "the path is not valid text (a lone surrogate)", code="path_refused"
        ) from None
    if path.startswith("/"):
        raise ToolError(
            f"{path!r} is absolute; give a path inside the workspace", code="path_refused"
        )
    parts = path.split("/")
    if len(parts) > _MAX_PARTS or any(p in ("", ".", "..") for p in parts):
        raise ToolError(
            f"{path!r} leaves the workspace or has an empty part; use plain names",
            code="path_refused",
        )
    return parts


def _open_dir(root: Path, parts: list[str], create: bool) -> int:
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for name in parts:
            try:
                nxt = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                os.mkdir(name, 0o755, dir_fd=fd)
                nxt = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def _refused(path: str, exc: OSError) -> ToolError:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return ToolError(f"{path!r} goes through a link or a file; refused", code="path_refused")
    if exc.errno == errno.ENOENT:
        return ToolError(f"{path!r} does not exist in the workspace", code="not_found")
    if exc.errno == errno.EISDIR:
        return ToolError(f"{path!r} is a folder", code="path_refused")
    return ToolError(f"{path!r}: {exc.strerror}", code="io_error")


def read_file(workspace: Workspace, path: str, *, max_bytes: int) -> tuple[bytes, int]:
    """The first ``max_bytes`` of a workspace file and its whole size."""
    parts = confined_parts(path)
    try:
        folder = _open_dir(workspace.path, parts[:-1], create=False)
        try:
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder)
        finally:
            os.close(folder)
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
                raise ToolError(
                    f"{path!r} is not a plain file of its own (a folder, a device, a pipe, "
                    "or a file with other hard links); refused",
                    code="path_refused",
                )
            return fh.read(max_bytes), st.st_size
    except OSError as exc:
        raise _refused(path, exc) from None


def write_file(workspace: Workspace, path: str, data: bytes) -> int:
    """Write ``data`` to a workspace file (folders on the way created); bytes written."""
    parts = confined_parts(path)
    try:
        folder = _open_dir(workspace.path, parts[:-1], create=True)
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
            fd = os.open(parts[-1], flags, 0o644, dir_fd=folder)
        finally:
            os.close(folder)
        with os.fdopen(fd, "wb") as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
                raise ToolError(
                    f"{path!r} is not a plain file of its own (a folder, a device, a pipe, "
                    "or a file with other hard links); refused",
                    code="path_refused",
                )
            fh.truncate(0)
            fh.write(data)
        if workspace.uid is not None:
            _own(workspace, parts)
        return len(data)
    except OSError as exc:
        raise _refused(path, exc) from None


def _own(workspace: Workspace, parts: list[str]) -> None:
    """Give what oarlock (as root) made to the workspace's uid, so the calls can use it."""
    assert workspace.uid is not None
    fd = os.open(workspace.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for i, name in enumerate(parts):
            os.chown(name, workspace.uid, workspace.uid, dir_fd=fd, follow_symlinks=False)
            if i < len(parts) - 1:
                nxt = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                os.close(fd)
                fd = nxt
    finally:
        os.close(fd)

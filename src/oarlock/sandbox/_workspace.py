"""Workspaces: one folder per run (named by the invocation's ``workspaceId``), the only
place a sandboxed call can write, kept for the run and removed by ``oarlock sandbox prune``.

Files are read and written from outside the sandbox only through :func:`read_file` and
:func:`write_file`, which never leave the workspace: a path must be relative, made of
plain names (no ``..``, no empty part, no NUL), and every folder on the way and the file
itself are opened without following a symbolic link (``O_NOFOLLOW``, one folder at a time
from the workspace's own descriptor), so a link that a sandboxed program planted cannot
lead a read or a write elsewhere. A file with more than one hard link is refused too.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from oarlock.errors import ToolError, UsageError

__all__ = [
    "Workspace",
    "Workspaces",
    "WorkspaceInfo",
    "confined_parts",
    "default_workspaces_root",
    "read_file",
    "write_file",
]

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_MAX_PATH = 4096
_MAX_PARTS = 64


def default_workspaces_root() -> Path:
    """``$OARLOCK_WORKSPACES``, else ``$XDG_DATA_HOME/oarlock/workspaces``, else
    ``~/.local/share/oarlock/workspaces``."""
    if explicit := os.environ.get("OARLOCK_WORKSPACES"):
        return Path(explicit).expanduser()
    data = os.environ.get("XDG_DATA_HOME", "")
    base = Path(data) if os.path.isabs(data) else Path.home() / ".local" / "share"
    return base / "oarlock" / "workspaces"


def sandbox_uid(workspace_id: str) -> int:
    """The unprivileged uid a workspace's calls run as when oarlock runs as root: one of
    its own (no other process shares its process limit), stable for the workspace."""
    import hashlib

    return 200_000 + int(hashlib.sha256(workspace_id.encode()).hexdigest()[:8], 16) % 800_000


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
    """The workspaces below ``root`` (made 0700)."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or default_workspaces_root()

    def _path(self, workspace_id: str) -> Path:
        if not isinstance(workspace_id, str) or not _ID.fullmatch(workspace_id):
            raise UsageError(
                f"{workspace_id!r} is not a workspace id (letters, digits, '_', '.', '-')",
                code="workspace_invalid",
            )
        return self.root / workspace_id

    def ensure(self, workspace_id: str) -> Workspace:
        """The workspace, created on first use (owned by its sandbox uid when root)."""
        path = self._path(workspace_id)
        uid = sandbox_uid(workspace_id) if os.geteuid() == 0 else None
        if not self.root.exists():
            self.root.mkdir(mode=0o711, parents=True)  # each workspace is closed itself
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            if path.is_symlink() or not path.is_dir():
                raise UsageError(
                    f"{path} is not a workspace folder", code="workspace_invalid"
                ) from None
        else:
            if uid is not None:
                os.chown(path, uid, uid)
        return Workspace(workspace_id, path, uid)

    def all(self) -> list[WorkspaceInfo]:
        if not self.root.is_dir():
            return []
        found = []
        for entry in sorted(self.root.iterdir()):
            if entry.is_dir() and not entry.is_symlink() and _ID.fullmatch(entry.name):
                found.append(self.info(entry.name))
        return found

    def info(self, workspace_id: str) -> WorkspaceInfo:
        path = self._path(workspace_id)
        if not path.is_dir():
            raise UsageError(f"no workspace {workspace_id}", code="not_found")
        files = size = 0
        newest = path.stat().st_mtime
        for folder, _dirs, names in os.walk(path):
            for name in names:
                with contextlib.suppress(OSError):
                    st = os.lstat(os.path.join(folder, name))
                    files, size = files + 1, size + st.st_size
                    newest = max(newest, st.st_mtime)
        return WorkspaceInfo(workspace_id, path, files, size, newest)

    def remove(self, workspace_id: str) -> None:
        shutil.rmtree(self._path(workspace_id), ignore_errors=False)

    def prune(self, older_than_seconds: float) -> list[str]:
        """Remove the workspaces untouched for ``older_than_seconds``; their ids."""
        cutoff = time.time() - older_than_seconds
        gone = []
        for info in self.all():
            if info.modified < cutoff:
                self.remove(info.workspace_id)
                gone.append(info.workspace_id)
        return gone


def confined_parts(path: str) -> list[str]:
    """The names of a path confined to a workspace; ToolError (``path_refused``) for an
    absolute path, ``..``, an empty or ``.`` part, a NUL, or a path too long."""
    if not isinstance(path, str) or not path:
        raise ToolError("the path is empty", code="path_refused")
    if "\0" in path or len(path) > _MAX_PATH:
        raise ToolError("the path holds a NUL or is too long", code="path_refused")
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
            if not stat.S_ISREG(st.st_mode):
                raise ToolError(f"{path!r} is not a regular file", code="path_refused")
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
                raise ToolError(f"{path!r} is not a plain file of its own", code="path_refused")
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

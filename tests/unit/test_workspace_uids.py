"""Each workspace's own uid (as root): given once, under the registry's lock, never to two
live workspaces, whatever processes or workspaces folders ask at once; the same ever after;
free again when the workspace is removed or gone; never a uid the system knows or a
process runs as; a workspace made before the registry keeps its uid or gets a new one and
its files with it."""

from __future__ import annotations

import multiprocessing
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oarlock.errors import ToolError
from oarlock.sandbox import _workspace
from oarlock.sandbox._workspace import UID_RANGE, Workspaces

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="workspace uids are given as root")

FIRST = UID_RANGE.start + 123_457  # where every search starts when the tests fix it


@pytest.fixture
def root() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="oarlock-uids-test-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def one_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every search for a free uid starts at FIRST: allocations collide unless the
    registry keeps them apart."""
    monkeypatch.setattr(_workspace, "_start", lambda _key: FIRST - UID_RANGE.start)


def _allocate_many(args: tuple[str, str, int, Any, Any]) -> None:
    root, uids, count, barrier, out = args
    _workspace._start = lambda _key: FIRST - UID_RANGE.start  # type: ignore[assignment]
    ws = Workspaces(Path(root), uids=Path(uids))
    barrier.wait()
    out.put((Path(root).name, [ws.ensure(f"w{i}").uid for i in range(count)]))


def test_two_processes_allocating_at_once_never_share_a_uid(root: Path) -> None:
    context = multiprocessing.get_context("fork")
    barrier, out = context.Barrier(2), context.Queue()
    procs = [
        context.Process(
            target=_allocate_many, args=((str(root / name), str(root / "uids"), 200, barrier, out),)
        )
        for name in ("a", "b")  # two workspaces folders, one registry
    ]
    for p in procs:
        p.start()
    got = [uids for _name, uids in sorted(out.get(timeout=120) for _ in procs)]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    every = got[0] + got[1]
    assert len(every) == 400 and None not in every
    assert len(set(every)) == 400, "a uid was given twice"
    assert all(uid in UID_RANGE for uid in every)
    assert min(every) == FIRST  # they did contend for the same uids
    for name, uids in zip(("a", "b"), got, strict=True):
        for i, uid in enumerate(uids):
            folder = root / name / f"w{i}"
            assert folder.stat().st_uid == uid and folder.stat().st_gid == uid
    assert sorted(Workspaces(root / "a", uids=root / "uids").uids.given()) == sorted(every)


def test_a_workspaces_uid_is_the_same_from_any_instance(root: Path) -> None:
    first = Workspaces(root / "ws", uids=root / "uids").ensure("run-1")
    again = Workspaces(root / "ws", uids=root / "uids").ensure("run-1")
    other = Workspaces(root / "ws", uids=root / "uids").ensure("run-2")
    assert first.uid is not None and again.uid == first.uid and other.uid != first.uid
    assert Workspaces(root / "ws", uids=root / "uids").existing("run-1").uid == first.uid
    record = Workspaces(root / "ws", uids=root / "uids").uids.record(first.uid)
    assert record is not None and record[0] == str(first.path)


def test_a_removed_workspaces_uid_is_free_again(root: Path, one_start: None) -> None:
    ws = Workspaces(root / "ws", uids=root / "uids")
    a, b = ws.ensure("a"), ws.ensure("b")
    assert (a.uid, b.uid) == (FIRST, FIRST + 1)
    ws.remove("a")
    assert ws.uids.record(FIRST) is None and ws.uids.record(FIRST + 1) is not None
    assert ws.ensure("c").uid == FIRST
    # a workspace removed by other means: its record is stale, and its uid is free
    shutil.rmtree(b.path)
    assert ws.ensure("d").uid == FIRST + 1


def test_a_pruned_workspaces_uid_is_free_again(root: Path) -> None:
    ws = Workspaces(root / "ws", uids=root / "uids")
    ws.ensure("old")
    elsewhere = Workspaces(root / "elsewhere", uids=root / "uids")
    shutil.rmtree(elsewhere.ensure("gone").path)  # removed by other means
    kept = Workspaces(root / "kept", uids=root / "uids").ensure("live").uid
    (root / "uids" / ".new-1-2").write_text("{}")  # an allocation that never finished
    assert len(ws.uids.given()) == 3
    assert ws.prune(-60) == ["old"]
    assert list(ws.uids.given()) == [kept]
    assert not (root / "uids" / ".new-1-2").exists()


def test_uids_of_users_and_of_running_processes_are_never_given(
    root: Path, one_start: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_getpwall = pwd.getpwall
    user = pwd.struct_passwd(("svc", "x", FIRST, FIRST, "", "/", "/bin/false"))
    monkeypatch.setattr(pwd, "getpwall", lambda: [*real_getpwall(), user])
    sleeper = subprocess.Popen(["sleep", "30"], user=FIRST + 1, group=FIRST + 1)
    try:
        uid = Workspaces(root / "ws", uids=root / "uids").ensure("w").uid
    finally:
        sleeper.kill()
        sleeper.wait()
    assert uid == FIRST + 2


def test_a_uid_a_lookup_knows_is_never_given(
    root: Path, one_start: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    known = {FIRST: "directory-user"}  # listed by no enumeration, answered by a lookup
    real = pwd.getpwuid

    def getpwuid(uid: int) -> Any:
        if uid in known:
            return pwd.struct_passwd((known[uid], "x", uid, uid, "", "/", "/bin/false"))
        return real(uid)

    monkeypatch.setattr(pwd, "getpwuid", getpwuid)
    assert Workspaces(root / "ws", uids=root / "uids").ensure("w").uid == FIRST + 1


def test_a_folder_made_before_the_registry_keeps_its_uid_or_gets_a_new_one(
    root: Path, one_start: None
) -> None:
    base = root / "ws"
    base.mkdir(mode=0o711)
    alone, shared = FIRST + 50, FIRST + 60
    outside = root / "outside.txt"
    outside.write_text("someone else's")
    os.chown(outside, shared, shared)
    owners = {"old1": alone, "old2": shared, "old3": shared}  # the old scheme's hashed uids
    for name, uid in owners.items():
        folder = base / name
        (folder / "sub").mkdir(parents=True)
        (folder / "sub" / "f.txt").write_text(name)
        for path in (folder, folder / "sub", folder / "sub" / "f.txt"):
            os.chown(path, uid, uid)
    os.link(outside, base / "old2" / "linked.txt")
    ws = Workspaces(base, uids=root / "uids")
    assert ws.ensure("old1").uid == alone  # its own uid, which no other folder has: kept
    # two folders with one uid: the first used cannot keep it (the other's files would be
    # its own), it gets a new one with its files; the other, alone with it then, keeps it
    moved = ws.ensure("old2").uid
    assert moved is not None and moved not in (alone, shared)
    for path in ("", "sub", "sub/f.txt"):
        st = (base / "old2" / path).stat()
        assert (st.st_uid, st.st_gid) == (moved, moved), path
    assert outside.stat().st_uid == shared  # a file with another link is left as it is
    assert ws.ensure("old3").uid == shared
    assert (base / "old3" / "sub" / "f.txt").stat().st_uid == shared
    assert (base / "old1" / "sub" / "f.txt").stat().st_uid == alone
    assert ws.ensure("fresh").uid not in (alone, shared, moved)


def test_a_registry_others_can_write_is_refused(root: Path) -> None:
    (root / "uids").mkdir(mode=0o777)
    (root / "uids").chmod(0o777)
    with pytest.raises(ToolError) as refused:
        Workspaces(root / "ws", uids=root / "uids").ensure("w")
    assert refused.value.code == "workspace_unavailable"
    assert "OARLOCK_SANDBOX_UIDS" in refused.value.message

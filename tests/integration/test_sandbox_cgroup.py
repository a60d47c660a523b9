"""Limits of the whole call, not of each process: the call's cgroup bounds the memory, the
tasks and the CPU of all its processes together, nothing outlives it, and its workspace is
bounded at the call's boundaries.

Real processes through :class:`oarlock.sandbox.SandboxRunner`. The cgroup tests run on
whatever this host gives (cgroup v1 as root on a hybrid host, cgroup v2 elsewhere) and are
skipped, saying why, where it gives none. The cgroup v2 code runs against the real kernel
where a cgroup2 hierarchy can be written (placement, CPU accounting, ``cgroup.kill``,
removal: the core files exist even without controllers) and, for the memory and pids
files a hierarchy without those controllers lacks, against a fake tree."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import secrets
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from oarlock.sandbox import SandboxLimits, SandboxRunner, Workspaces, _cgroup, call_sandboxed, shell
from oarlock.sandbox._cgroup import (
    PIDS_OVERHEAD,
    CallCgroup,
    CgroupError,
    CgroupHost,
    Hierarchies,
    Hierarchy,
    cgroup_host,
    find_hierarchies,
    probe,
)
from oarlock.sandbox._host import HostSupport, host_support
from oarlock.sandbox._workspace import measure_workspace

MiB = 1 << 20
HOST = cgroup_host()
SUPPORT = host_support()
needs_cgroup = pytest.mark.skipif(
    HOST.version is None, reason=f"this host gives oarlock no cgroup: {HOST.reason}"
)


class Recording(CgroupHost):
    """The host's cgroups, remembering each call's."""

    def __init__(self, host: CgroupHost) -> None:
        super().__init__(host.version, host.parents, host.controllers, host.reason)
        self.made: list[CallCgroup] = []

    def create(self, limits: SandboxLimits) -> CallCgroup:
        cg = super().create(limits)
        self.made.append(cg)
        return cg


def _support(isolation: str, *, drop_user: bool | None = None) -> HostSupport:
    """The host's support, limited to ``isolation`` (and without a user of the call's own
    when ``drop_user`` is False)."""
    assert SUPPORT.supports(isolation), SUPPORT.notes
    return dataclasses.replace(
        SUPPORT,
        bubblewrap=isolation == "bubblewrap",
        unshare=True,
        drop_user=SUPPORT.drop_user if drop_user is None else drop_user,
    )


@pytest.fixture
def root() -> Any:
    """A workspaces folder any user can pass through (the ``unshare`` call reaches its
    workspace by the host's path); removed with ``rm -rf``, which any depth suits."""
    base = Path(tempfile.mkdtemp(prefix="oarlock-cgroup-test-", dir="/tmp"))
    base.chmod(0o711)
    yield base / "workspaces"
    subprocess.run(["rm", "-rf", str(base)], check=False)


def make_runner(
    root: Path, isolation: str = "bubblewrap", cgroups: CgroupHost | None = None, **kw: Any
) -> SandboxRunner:
    return SandboxRunner(
        Workspaces(root), isolation=isolation, support=_support(isolation, **kw), cgroups=cgroups
    )


def sh(runner: SandboxRunner, script: str, **kw: Any) -> Any:
    return asyncio.run(runner.run(["/bin/sh", "-c", script], workspace_id="w1", **kw))


def _gone(cg: CallCgroup) -> bool:
    return cg.removed and not any(f.exists() for f in cg.folders.values())


ALLOCATE = (
    "import time\n"
    "x = bytearray(200 << 20)\n"
    "for i in range(0, len(x), 4096): x[i] = 1\n"  # touched: really held, not just mapped
    "time.sleep(1)\n"
)
SIX = f"for i in 1 2 3 4 5 6; do python3 -c '{ALLOCATE}' & done; wait; echo all done"
BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.5: pass\n"
FOUR = f"for i in 1 2 3 4; do python3 -c '{BURN}' & done; wait; echo all done"


# -- what the host gives ----------------------------------------------------------------------
def test_the_detector_reads_the_mount_table_of_a_hybrid_host(tmp_path: Path) -> None:
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        "30 25 0:26 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755\n"
        "31 30 0:27 / /sys/fs/cgroup/unified rw,relatime shared:5 - cgroup2 cgroup2 rw\n"
        "34 30 0:30 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
        "35 30 0:31 /kube/pod1 /sys/fs/cgroup/mem\\040ory rw - cgroup cgroup rw,memory\n"
        "36 30 0:32 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n"
        "37 30 0:33 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,name=systemd\n"
    )
    own = tmp_path / "cgroup"
    own.write_text(
        "5:pids:/user.slice\n4:memory:/kube/pod1/app\n2:cpu,cpuacct:/\n1:name=systemd:/x\n0::/\n"
    )
    found = find_hierarchies(str(mountinfo), str(own))
    unified = Path("/sys/fs/cgroup/unified")
    assert found.v2 == Hierarchy(unified, "/", unified)
    assert set(found.v1) == {"memory", "pids", "cpuacct"}
    memory = Path("/sys/fs/cgroup/mem ory")
    assert found.v1["memory"] == Hierarchy(memory, "/kube/pod1", memory / "app")
    assert found.v1["pids"].own == Path("/sys/fs/cgroup/pids/user.slice")
    assert found.v1["cpuacct"].mount == Path("/sys/fs/cgroup/cpu,cpuacct")


def test_this_host_gets_the_cgroups_it_has() -> None:
    found = find_hierarchies()
    v2_has = _cgroup._words(found.v2.mount / "cgroup.controllers") if found.v2 else set()
    if os.geteuid() != 0 or {"memory", "pids"} <= v2_has or not {"memory", "pids"} <= set(found.v1):
        pytest.skip("not a hybrid host with the controllers on cgroup v1, as root")
    # the hybrid host: cgroup v1 holds memory and pids; v2 has neither, and says so
    assert HOST.version == 1, HOST.reason
    assert HOST.reason is not None and "no memory or pids controller" in HOST.reason
    assert HOST.parents["memory"] == found.v1["memory"].mount / "oarlock"


def test_an_unwritable_root_gives_no_cgroup_and_says_why(tmp_path: Path) -> None:
    nowhere = Hierarchy(Path("/proc/sys"), "/", Path("/proc/sys"))
    host = probe(Hierarchies(v2=nowhere, v1={"memory": nowhere, "pids": nowhere}))
    assert host.version is None
    assert host.reason is not None and "cgroup v2" in host.reason and "cgroup v1" in host.reason
    with pytest.raises(CgroupError):
        host.create(SandboxLimits())
    assert probe(Hierarchies()).reason == (
        "cgroup v2: not mounted; cgroup v1: no hierarchy is mounted"
    )


# -- memory, tasks and CPU of the whole call -----------------------------------------------
@needs_cgroup
@pytest.mark.parametrize("isolation", ["bubblewrap", "unshare"])
def test_six_processes_cannot_together_exceed_the_memory_limit(root: Path, isolation: str) -> None:
    host = Recording(HOST)
    runner = make_runner(root, isolation, host)
    result = sh(runner, SIX, limits=SandboxLimits(memory_bytes=256 * MiB, timeout_seconds=60))
    assert result.error_code == "memory_limit", (result.stdout, result.stderr)
    usage = result.cgroup
    assert usage is not None and usage.oom_kills >= 1
    assert usage.memory_peak is not None and usage.memory_peak <= 256 * MiB + 4 * MiB
    data = result.to_json()
    assert data["cgroup"]["version"] == HOST.version
    assert data["cgroup"]["memoryPeakBytes"] == usage.memory_peak
    assert b"oarlock: the call's processes together needed more than" in result.stderr
    assert [_gone(cg) for cg in host.made] == [True]


@needs_cgroup
def test_the_call_s_tmp_counts_toward_its_memory(root: Path) -> None:
    """(Run as the sandbox's root, which can write its ``/tmp`` whatever its mode.)"""
    limits = SandboxLimits(memory_bytes=128 * MiB, file_bytes=1 << 30, tmp_bytes=1 << 30)
    runner = make_runner(root, drop_user=False)
    result = sh(runner, "head -c 300000000 /dev/zero > /tmp/big; ls -l /tmp", limits=limits)
    assert result.error_code == "memory_limit", result.stderr
    assert result.cgroup is not None and result.cgroup.memory_peak is not None
    assert result.cgroup.memory_peak <= 128 * MiB + 4 * MiB


@needs_cgroup
def test_a_fork_bomb_is_bounded_for_the_whole_call(root: Path) -> None:
    """The call's tasks, counted by its cgroup, stay under the process limit and the
    entry program's few (a call never runs as root: its own uid's RLIMIT_NPROC refuses the
    forks first, and the cgroup's task limit stands behind it)."""
    host = Recording(HOST)
    runner = make_runner(root, cgroups=host)
    t0 = time.monotonic()
    result = sh(
        runner,
        "b() { b | b & }; b; sleep 1; exit 7",
        limits=SandboxLimits(processes=16, timeout_seconds=10),
    )
    assert time.monotonic() - t0 < 12
    usage = result.cgroup
    assert usage is not None and usage.pids_peak is not None
    assert usage.pids_peak <= 16 + PIDS_OVERHEAD
    assert result.error_code in ("process_limit", "timeout")
    assert [_gone(cg) for cg in host.made] == [True]


def _cpu_case(root: Path, host: CgroupHost) -> Any:
    t0 = time.monotonic()
    result = sh(make_runner(root, cgroups=host), FOUR, limits=SandboxLimits(cpu_seconds=2))
    return result, time.monotonic() - t0


@needs_cgroup
def test_the_cpu_of_several_processes_is_summed_against_the_limit(root: Path) -> None:
    """Four processes of 1.5 s of CPU each: each under its own limit of 2 s, 6 s together."""
    result, took = _cpu_case(root, HOST)
    assert (result.error_code, result.signal) == ("cpu_limit", "SIGKILL"), result.stderr
    assert b"all done" not in result.stdout
    cpu = result.cgroup.cpu_micros
    budget = 2_000_000 + _cgroup.CPU_SLACK_US
    assert budget < cpu < budget + 0.2e6 * (os.cpu_count() or 1) + 0.3e6
    assert took < 6


def test_without_a_cgroup_the_per_process_limits_still_apply(root: Path) -> None:
    """What the cgroup is for: without one (a host that gives none), the six allocators and
    the four CPU burners each stay under their own limits and the call succeeds; one
    process over its limits is still stopped, and the receipt says no cgroup applied."""
    nowhere = Hierarchy(Path("/proc/sys"), "/", Path("/proc/sys"))
    none = probe(Hierarchies(v2=nowhere, v1={"memory": nowhere, "pids": nowhere}))
    runner = make_runner(root, cgroups=none)
    six = sh(runner, SIX, limits=SandboxLimits(memory_bytes=256 * MiB, timeout_seconds=60))
    assert six.ok and six.stdout == b"all done\n"
    data = six.to_json()
    assert data["cgroup"] is None and "cgroup v2" in data["cgroupUnavailable"]
    one = asyncio.run(
        runner.run(
            ["python3", "-c", "x = bytearray(2 << 30)"],
            workspace_id="w1",
            limits=SandboxLimits(memory_bytes=256 * MiB),
        )
    )
    assert one.error_code == "memory_limit" and b"MemoryError" in one.stderr
    four, _took = _cpu_case(root, none)
    assert four.ok and four.stdout == b"all done\n"
    assert four.to_json()["cgroup"] is None


# -- nothing outlives the call; no cgroup is left ---------------------------------------
def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):  # a zombie is dead
        if Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z"):
            return False
    return True


@needs_cgroup
@pytest.mark.parametrize("isolation", ["bubblewrap", "unshare"])
def test_nothing_is_left_in_the_cgroup_after_a_timeout(root: Path, isolation: str) -> None:
    host = Recording(HOST)
    runner = make_runner(root, isolation, host)
    script = "sh -c 'setsid sh -c \"sleep 300 & sleep 300\" &'; sleep 300"
    result = sh(runner, script, limits=SandboxLimits(timeout_seconds=1))
    assert result.error_code == "timeout"
    [cg] = host.made
    assert _gone(cg)  # a cgroup with a process in it cannot be removed


@needs_cgroup
def test_the_cgroup_is_removed_after_every_call(root: Path) -> None:
    host = Recording(HOST)
    runner = make_runner(root, cgroups=host)
    endings = [
        ("echo fine", SandboxLimits()),
        ("exit 3", SandboxLimits()),
        ("yes", SandboxLimits(output_bytes=1000)),
        ("head -c 10000000 /dev/zero > f", SandboxLimits(file_bytes=MiB)),
        ("kill -9 $$", SandboxLimits()),
    ]
    for script, limits in endings:
        sh(runner, script, limits=limits)

    async def cancelled() -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(runner.run(["sleep", "300"], workspace_id="w1"), 0.5)

    asyncio.run(cancelled())
    assert len(host.made) == len(endings) + 1
    assert [_gone(cg) for cg in host.made] == [True] * len(host.made)
    assert _cgroup._LIVE.isdisjoint(cg.name for cg in host.made)


@needs_cgroup
def test_a_call_that_cannot_join_its_cgroup_runs_without_one(root: Path) -> None:
    """Its gate is never opened: it is started again, outside any cgroup, and says so."""

    class Refusing(Recording):
        def create(self, limits: SandboxLimits) -> CallCgroup:
            cg = super().create(limits)

            def place(pid: int) -> None:
                raise PermissionError(13, "Permission denied")

            cg.place = place  # type: ignore[method-assign]
            return cg

    host = Refusing(HOST)
    result = sh(make_runner(root, cgroups=host), "echo ran")
    assert result.ok and result.stdout == b"ran\n"  # once: the gate never let the first through
    assert result.cgroup is None
    assert result.to_json()["cgroupUnavailable"] == (
        "the call could not join its cgroup: Permission denied"
    )
    assert [_gone(cg) for cg in host.made] == [True]


def _place(folders: list[Path], argv: list[str]) -> subprocess.Popen[bytes]:
    """Start ``argv`` in the cgroup folders (as the runner does, before it can fork)."""
    fds = [os.open(f / "cgroup.procs", os.O_WRONLY) for f in folders]

    def enter() -> None:
        for fd in fds:
            os.write(fd, b"0")

    try:
        return subprocess.Popen(argv, preexec_fn=enter, start_new_session=True)  # noqa: PLW1509
    finally:
        for fd in fds:
            os.close(fd)


def _sleepers(pidfile: Path) -> list[str]:
    """A shell that leaves two sleepers of their own sessions behind and writes their pids:
    no process-group kill reaches them."""
    return [
        "/bin/sh",
        "-c",
        f"setsid sleep 300 & echo $! >> {pidfile}; setsid sleep 301 & echo $! >> {pidfile}",
    ]


def _wait_for_pids(pidfile: Path, n: int) -> list[int]:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        pids = [int(p) for p in pidfile.read_text().split()] if pidfile.exists() else []
        if len(pids) == n:
            return pids
        time.sleep(0.01)
    raise AssertionError(f"the sleepers did not start: {pidfile}")


@needs_cgroup
def test_removing_a_call_s_cgroup_kills_what_left_its_session(tmp_path: Path) -> None:
    cg = HOST.create(SandboxLimits())
    try:
        started = _place(list(dict.fromkeys(cg.folders.values())), _sleepers(tmp_path / "pids"))
        started.wait()
        pids = _wait_for_pids(tmp_path / "pids", 2)
        assert all(_alive(p) for p in pids)
    finally:
        asyncio.run(cg.remove())
    assert _gone(cg) and not any(_alive(p) for p in pids)


@needs_cgroup
def test_a_stale_cgroup_is_cleaned_at_a_later_call(root: Path, tmp_path: Path) -> None:
    """A cgroup whose owner crashed (its pid gone) is killed and removed at the next sweep;
    one whose owner lives is left alone."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = f"oarlock-{dead.pid}-{secrets.token_hex(4)}"
    live = f"oarlock-{os.getppid()}-{secrets.token_hex(4)}"
    stale_folders = list(dict.fromkeys(HOST.folders(stale).values()))
    live_folders = list(dict.fromkeys(HOST.folders(live).values()))
    for folder in stale_folders + live_folders:
        folder.mkdir()
    try:
        _place(stale_folders, _sleepers(tmp_path / "pids")).wait()
        pids = _wait_for_pids(tmp_path / "pids", 2)
        fresh = probe(find_hierarchies())  # a new process's host: its first call sweeps
        result = sh(make_runner(root, cgroups=fresh), "echo hi")
        assert result.ok
        assert not any(f.exists() for f in stale_folders)
        assert not any(_alive(p) for p in pids)
        assert all(f.exists() for f in live_folders)
    finally:
        for folder in stale_folders + live_folders:
            with contextlib.suppress(OSError):
                folder.rmdir()


# -- cgroup v2 against the real kernel (no memory or pids controller needed) -------------
@pytest.fixture
def v2_parent() -> Any:
    found = find_hierarchies()
    if found.v2 is None or os.geteuid() != 0:
        pytest.skip("no cgroup2 hierarchy, or not root")
    parent = found.v2.mount / f"oarlock-test-{secrets.token_hex(4)}"
    try:
        parent.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot make a cgroup in {found.v2.mount}: {exc}")
    yield parent
    for child in parent.iterdir():
        if child.is_dir():
            with contextlib.suppress(OSError):
                child.rmdir()
    parent.rmdir()


def test_cgroup_v2_places_sums_the_cpu_of_kills_and_removes_a_call(
    root: Path, v2_parent: Path, tmp_path: Path
) -> None:
    controllers = frozenset(_cgroup._words(v2_parent / "cgroup.controllers") & {"memory", "pids"})
    host = Recording(CgroupHost(2, {"": v2_parent}, controllers))
    done = sh(make_runner(root, cgroups=host), "echo hello")
    assert done.ok and done.cgroup is not None and done.cgroup.version == 2
    assert done.cgroup.cpu_micros is not None and done.cgroup.cpu_micros > 0  # it was placed
    result, took = _cpu_case(root, host)
    assert (result.error_code, result.signal) == ("cpu_limit", "SIGKILL")
    assert result.cgroup.cpu_micros > 2_000_000 + _cgroup.CPU_SLACK_US and took < 6
    cg = host.create(SandboxLimits())
    _place([cg.folders[""]], _sleepers(tmp_path / "pids")).wait()
    pids = _wait_for_pids(tmp_path / "pids", 2)
    asyncio.run(cg.remove())  # cgroup.kill
    assert not any(_alive(p) for p in pids)
    assert [_gone(c) for c in host.made] == [True] * 3


# -- cgroup v2's memory and pids files, against a fake tree --------------------------------
_FILES = {
    "cgroup.controllers": "cpu memory pids",
    "cgroup.subtree_control": "",
    "cgroup.procs": "",
    "cgroup.kill": "",
    "memory.max": "max",
    "memory.swap.max": "max",
    "memory.oom.group": "0",
    "memory.peak": "0",
    "memory.events": "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n",
    "pids.max": "max",
    "pids.peak": "0",
    "pids.events": "max 0\n",
    "cpu.stat": "usage_usec 0\nuser_usec 0\nsystem_usec 0\n",
}


@pytest.fixture
def fake_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory tree in place of cgroup2: a folder made gets the kernel's files, a folder
    removed loses them."""

    def mkdir(path: Path) -> None:
        os.mkdir(path)
        for name, text in _FILES.items():
            (path / name).write_text(text)

    def rmdir(path: Path) -> None:
        for name in _FILES:
            with contextlib.suppress(FileNotFoundError):
                (path / name).unlink()
        os.rmdir(path)

    monkeypatch.setattr(_cgroup, "_mkdir", mkdir)
    monkeypatch.setattr(_cgroup, "_rmdir", rmdir)
    mount = tmp_path / "cgroup"
    mkdir(mount)
    return mount


def test_cgroup_v2_as_root_enables_its_controllers_and_limits_a_call(
    fake_kernel: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_cgroup.os, "geteuid", lambda: 0)
    host = probe(Hierarchies(v2=Hierarchy(fake_kernel, "/", fake_kernel / "service")))
    assert (host.version, host.parents) == (2, {"": fake_kernel / "oarlock"})
    assert (fake_kernel / "cgroup.subtree_control").read_text() == "+memory +pids"
    assert (fake_kernel / "oarlock" / "cgroup.subtree_control").read_text() == "+memory +pids"
    cg = host.create(SandboxLimits(memory_bytes=256 * MiB, processes=16))
    folder = cg.folders[""]
    assert folder.parent == fake_kernel / "oarlock" and folder.name.startswith(
        f"oarlock-{os.getpid()}-"
    )
    assert (folder / "memory.max").read_text() == str(256 * MiB)
    assert (folder / "memory.swap.max").read_text() == "0"
    assert (folder / "memory.oom.group").read_text() == "1"
    assert (folder / "pids.max").read_text() == str(16 + PIDS_OVERHEAD)
    (folder / "memory.peak").write_text(f"{200 * MiB}\n")
    (folder / "memory.events").write_text("low 0\nhigh 0\nmax 9\noom 2\noom_kill 2\n")
    (folder / "pids.peak").write_text("12\n")
    (folder / "pids.events").write_text("max 3\n")
    (folder / "cpu.stat").write_text("usage_usec 1234567\nuser_usec 1000000\n")
    usage = cg.usage()
    assert usage.to_json() == {
        "version": 2,
        "memoryPeakBytes": 200 * MiB,
        "cpuMicros": 1234567,
        "pidsPeak": 12,
        "oomKills": 2,
        "forksRefused": 3,
    }
    (folder / "cgroup.procs").write_text("4194303\n")  # a process the kernel has not killed
    assert asyncio.run(cg.kill_all(wait=0.05)) is False
    assert (folder / "cgroup.kill").read_text() == "1"
    (folder / "cgroup.procs").write_text("")
    asyncio.run(cg.remove())
    assert _gone(cg)


def test_cgroup_v2_delegated_moves_this_process_into_a_leaf(
    fake_kernel: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_cgroup.os, "geteuid", lambda: 1000)
    own = fake_kernel / "user.slice" / "app.scope"
    own.parent.mkdir()
    _cgroup._mkdir(own)
    (own / "cgroup.procs").write_text(f"{os.getpid()}\n")
    host = probe(Hierarchies(v2=Hierarchy(fake_kernel, "/", own)))
    assert (host.version, host.parents) == (2, {"": own / "oarlock"})
    assert (own / "oarlock-runner" / "cgroup.procs").read_text() == str(os.getpid())
    assert (own / "cgroup.subtree_control").read_text() == "+memory +pids"
    (own / "cgroup.procs").write_text(f"{os.getpid()}\n1\n")  # not alone in it
    refused = probe(Hierarchies(v2=Hierarchy(fake_kernel, "/", own)))
    assert refused.version is None
    assert refused.reason is not None and "holds other processes" in refused.reason


def test_cgroup_v2_without_memory_or_pids_is_not_used(fake_kernel: Path) -> None:
    (fake_kernel / "cgroup.controllers").write_text("cpu io")
    host = probe(Hierarchies(v2=Hierarchy(fake_kernel, "/", fake_kernel)))
    assert host.version is None
    assert host.reason is not None and "no memory or pids controller" in host.reason


def test_a_stale_v2_cgroup_is_swept_and_a_live_one_kept(fake_kernel: Path) -> None:
    parent = fake_kernel / "oarlock"
    _cgroup._mkdir(parent)
    dead = subprocess.Popen(["true"])
    dead.wait()
    for name in (f"oarlock-{dead.pid}-aa", f"oarlock-{os.getppid()}-bb", "other"):
        _cgroup._mkdir(parent / name)
    host = CgroupHost(2, {"": parent}, frozenset({"memory", "pids"}))
    assert host.sweep() == [f"oarlock-{dead.pid}-aa"]
    assert sorted(p.name for p in parent.iterdir() if p.is_dir()) == [
        f"oarlock-{os.getppid()}-bb",
        "other",
    ]


# -- the workspace's quota --------------------------------------------------------------------
def test_a_full_workspace_refuses_the_call_without_running_it(root: Path) -> None:
    runner = make_runner(root)
    ws = runner.workspaces.ensure("w1")
    (ws.path / "big").write_bytes(b"x" * (3 * MiB))
    limits = SandboxLimits(workspace_bytes=2 * MiB)
    result = sh(runner, "touch ran", limits=limits)
    assert (result.error_code, result.exit_code) == ("workspace_full", None)
    assert not (ws.path / "ran").exists()
    assert result.workspace_bytes is not None and result.workspace_bytes >= 3 * MiB
    assert b"over its quota of 2097152 (workspace_bytes); the call was not run" in result.stderr
    runner.limits = limits  # the receipt's path: the executor's call of a tool
    outcome = asyncio.run(
        call_sandboxed(runner, shell, {"command": "touch ran"}, workspace_id="w1", egress="none")
    )
    assert outcome.status == "Failed" and outcome.error is not None
    assert outcome.error[0] == "workspace_full" and "quota" in outcome.error[1]
    assert outcome.usage()["workspaceBytes"] >= 3 * MiB
    assert not (ws.path / "ran").exists()


def test_a_call_past_the_quota_fails_keeps_its_files_and_the_next_is_refused(
    root: Path,
) -> None:
    runner = make_runner(root)
    limits = SandboxLimits(workspace_bytes=2 * MiB)
    small = sh(runner, "head -c 100000 /dev/zero > small", limits=limits)
    assert small.ok and 100_000 <= small.workspace_bytes < 2 * MiB
    assert small.to_json()["workspaceBytes"] == small.workspace_bytes
    over = sh(runner, "head -c 3000000 /dev/zero > big", limits=limits)
    assert (over.error_code, over.exit_code) == ("workspace_quota", 0)
    assert over.workspace_bytes >= 3_000_000
    assert b"its files stay" in over.stderr
    assert (runner.workspaces.root / "w1" / "big").stat().st_size == 3_000_000
    assert sh(runner, "echo again", limits=limits).error_code == "workspace_full"
    assert sh(runner, "echo bigger quota", limits=SandboxLimits(workspace_bytes=8 * MiB)).ok


def test_the_size_counts_links_once_and_never_follows_them(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a").write_bytes(b"x" * MiB)
    os.link(ws / "a", ws / "a-again")  # one file, two names
    with open(ws / "sparse", "wb") as fh:
        fh.truncate(5 * MiB)  # no blocks, but its length counts
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "huge").write_bytes(b"y" * (4 * MiB))
    (ws / "link").symlink_to(outside)
    (ws / "d").mkdir()
    (ws / "d" / "b").write_bytes(b"z" * 1000)
    size = measure_workspace(ws)
    assert 6 * MiB + 1000 <= size.bytes < 6 * MiB + 64 * 1024
    assert (size.entries, size.capped) == (6, False)
    capped = measure_workspace(ws, max_entries=3)
    assert capped.capped and capped.over(1 << 40)
    assert measure_workspace(tmp_path / "missing").bytes == 0


def test_a_tree_1500_folders_deep_is_measured(root: Path) -> None:
    """Deeper than Python's recursion limit and than PATH_MAX: walked one folder at a time."""
    runner = make_runner(root)
    ws = runner.workspaces.ensure("w1")
    name = "d" * 200
    fd = os.open(ws.path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(1500):
            os.mkdir(name, dir_fd=fd)
            down = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = down
        deep = os.open("bottom", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(deep, b"x" * (2 * MiB))
        os.close(deep)
    finally:
        os.close(fd)
    size = measure_workspace(ws.path)
    assert size.entries == 1501 and size.bytes >= 2 * MiB
    result = sh(runner, "echo ok", limits=SandboxLimits(workspace_bytes=MiB))
    assert result.error_code == "workspace_full" and result.workspace_bytes >= 2 * MiB

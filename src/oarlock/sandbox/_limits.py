"""The limits of one sandboxed call, each enforced by the kernel (rlimits per process, set
by the sandbox's entry program: :mod:`oarlock.sandbox._enter`; a
cgroup for the whole call where the host gives one: :mod:`oarlock.sandbox._cgroup`), by
the sandbox's mounts (the size of its ``/tmp``) or by the runner (the wall clock, the
output kept, the workspace's size at the call's boundaries)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from oarlock.errors import ConfigError

__all__ = ["DEFAULT_LIMITS", "SandboxLimits"]

_MAXIMA = {
    "cpu_seconds": 3600,
    "memory_bytes": 64 << 30,
    "file_bytes": 64 << 30,
    "processes": 4096,
    "open_files": 65536,
    "timeout_seconds": 86400,
    "output_bytes": 64 << 20,
    "workspace_bytes": 1 << 40,
    "tmp_bytes": 64 << 30,
}


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    """CPU seconds (RLIMIT_CPU per process; the whole call's in its cgroup), memory
    (RLIMIT_AS per process; the whole call's in its cgroup, its ``/tmp`` included), the
    size of a file written (RLIMIT_FSIZE), processes (RLIMIT_NPROC, counted for the call's
    own user; the whole call's in its cgroup), open files (RLIMIT_NOFILE), wall-clock
    seconds, the bytes of standard output and error kept (each; past eight times that, the
    call is stopped: ``output_limit``), the bytes the workspace may hold (checked before
    and after the call: ``workspace_full``, ``workspace_quota``) and the size of the
    call's private ``/tmp``."""

    cpu_seconds: int = 10
    memory_bytes: int = 1 << 30
    file_bytes: int = 64 << 20
    processes: int = 64
    open_files: int = 256
    timeout_seconds: float = 30.0
    output_bytes: int = 1 << 20
    workspace_bytes: int = 1 << 30
    tmp_bytes: int = 64 << 20

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            whole = f.name != "timeout_seconds"
            ok = (
                not isinstance(value, bool)
                and isinstance(value, int if whole else int | float)
                and (whole or math.isfinite(value))
                and 0 < value <= _MAXIMA[f.name]
            )
            if not ok:
                kind = "a whole number" if whole else "a number"
                raise ConfigError(
                    f"sandbox limit {f.name} must be {kind} above 0 and at most "
                    f"{_MAXIMA[f.name]}, not {value!r}",
                    code="sandbox_limits_invalid",
                )

    def merged(self, changes: Mapping[str, Any] | None) -> SandboxLimits:
        """These limits with ``changes`` (a tool's or an agent file's) applied; unknown
        names are refused."""
        if not changes:
            return self
        unknown = sorted(set(changes) - set(_MAXIMA))
        if unknown:
            raise ConfigError(
                f"unknown sandbox limit {unknown[0]!r} (known: {', '.join(_MAXIMA)})",
                code="sandbox_limits_invalid",
            )
        return dataclasses.replace(self, **dict(changes))

    def to_json(self) -> dict[str, Any]:
        return {
            "cpuSeconds": self.cpu_seconds,
            "memoryBytes": self.memory_bytes,
            "fileBytes": self.file_bytes,
            "processes": self.processes,
            "openFiles": self.open_files,
            "timeoutSeconds": self.timeout_seconds,
            "outputBytes": self.output_bytes,
            "workspaceBytes": self.workspace_bytes,
            "tmpBytes": self.tmp_bytes,
        }


DEFAULT_LIMITS = SandboxLimits()

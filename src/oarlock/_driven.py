"""Where a run is driven, as its document's ``drivenBy`` extension member says: the one
reading of it, for the command line, the server and :mod:`oarlock.temporal`. It imports
neither Temporal's SDK nor pydantic, so that asking it of any run costs nothing; only a
run that Temporal drives needs ``oarlock[temporal]`` to act on.

A run driven by Temporal carries ``{"engine": "temporal", "address": HOST:PORT,
"namespace": NS, "taskQueue": QUEUE}``; a run without the member (or naming another
engine) is driven natively."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from oarlock.errors import ConfigError

if TYPE_CHECKING:
    from oarlock.formats._models import RunDocument

__all__ = ["ENGINE", "TemporalTarget", "driven_by"]

ENGINE = "temporal"


class TemporalTarget(NamedTuple):
    """Where runs are driven: a Temporal frontend, namespace and task queue (a named
    tuple: ``dataclasses`` stays unloaded by commands that only read, such as
    ``runs show``)."""

    address: str
    task_queue: str
    namespace: str = "default"

    def member(self) -> dict[str, str]:
        return {"engine": ENGINE, "address": self.address, "namespace": self.namespace,
                "taskQueue": self.task_queue}  # fmt: skip


def driven_by(doc: RunDocument) -> TemporalTarget | None:
    """Where Temporal drives the run; None when it does not. A member that names Temporal
    without where (an address, a task queue and a namespace, each a non-empty string) is
    refused (ConfigError, code ``temporal_target``): such a run is driven neither here
    nor there until its document is mended."""
    member = (doc.model_extra or {}).get("drivenBy")
    if not isinstance(member, dict) or member.get("engine") != ENGINE:
        return None
    address, queue, namespace = (member.get(k) for k in ("address", "taskQueue", "namespace"))
    if not (isinstance(address, str) and address and isinstance(queue, str) and queue
            and isinstance(namespace, str) and namespace):  # fmt: skip
        raise ConfigError(
            f"run {doc.id} is driven by Temporal, but its drivenBy member does not say "
            "where (address, taskQueue and namespace, each a non-empty string)",
            code="temporal_target",
        )
    return TemporalTarget(address, queue, namespace)

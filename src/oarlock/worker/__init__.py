"""Workers: many runs driven at once, claimed from a run queue under leases."""

from oarlock.worker._settings import WorkerSettings
from oarlock.worker._worker import Worker, WorkerEvent, worker_id

__all__ = ["Worker", "WorkerEvent", "WorkerSettings", "worker_id"]

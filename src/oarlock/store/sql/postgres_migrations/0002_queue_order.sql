-- 0002: the run queue's order as the protocol states it (oarlock.store._queue) and as the
-- SQLite store keeps it (sqlite_migrations/0004): tenants take turns, the tenant served
-- longest ago first, and each tenant's runs go in the order they became runnable; the
-- leader rows and approval deadlines of the workers' approval sweep. Version 1 gave each
-- running run a fixed place, which put a quiet tenant's new run behind a flooding
-- tenant's second run, and a released run back in front of the runs queued after it.
--
-- * ready_at: from when the run may be claimed (seconds since the epoch, the database's
--   clock): when it was created running, released, or made running by a save without a
--   lease, or the deadline of the lease that holds it (a claim and a renewal set it to
--   the lease's deadline); NULL once a save makes its status anything but running. A run
--   is runnable when its status is running, ready_at <= now and no live lease holds it.
-- * claimed_at: the latest claim of the run; the latest claim of any run of a tenant is
--   when that tenant was last served (runs_served).
-- * approval_due: the earliest deadline of an undecided approval of a waiting run
--   (runs_approval_due); runs migrated here get theirs from their documents, after this
--   script (oarlock.store._postgres_queue).
--
-- Running runs keep their order: a free one is ready from its former place, taken as
-- microseconds after the epoch (all long past); a held one at its lease's deadline.

ALTER TABLE runs
    ADD COLUMN ready_at     double precision,
    ADD COLUMN claimed_at   double precision,
    ADD COLUMN approval_due double precision;

UPDATE runs
SET ready_at = CASE WHEN lease_owner IS NOT NULL AND lease_until IS NOT NULL THEN lease_until
                    ELSE coalesce(place, 0) / 1e6 END
WHERE status = 'running' OR lease_owner IS NOT NULL;

DROP INDEX runs_queued;
DROP INDEX runs_queued_by_tenant;
ALTER TABLE runs DROP COLUMN place;

-- claim_runs: runnable runs by queue, tenant and the time they became runnable
CREATE INDEX runs_runnable ON runs (queue, tenant, ready_at, id) WHERE ready_at IS NOT NULL;
-- when each tenant was last served
CREATE INDEX runs_served ON runs (tenant, claimed_at) WHERE claimed_at IS NOT NULL;
-- waiting runs by the deadline of their approvals
CREATE INDEX runs_approval_due ON runs (approval_due, id) WHERE approval_due IS NOT NULL;

-- one row per role that one worker at a time plays (the approval sweep)
CREATE TABLE leaders (
    role  text             NOT NULL PRIMARY KEY,
    owner text             NOT NULL,
    until double precision NOT NULL            -- seconds since the epoch, the database's clock
);

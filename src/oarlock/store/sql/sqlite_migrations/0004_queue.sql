-- 0004: runs as work for workers: each run's tenant and queue, its lease (owner, epoch,
-- deadline), when it became runnable and when it was last claimed; the workers' heartbeats;
-- leader rows; the run and lease epoch of each idempotency claim. See
-- oarlock.store._queue for the protocol and oarlock.store._sqlite_queue for the queries.
--
-- runs is rebuilt (create, copy, drop, rename, as in 0003) so that the new columns come
-- before the document: a running document often spills into overflow pages, and a column
-- after it would be read from the last of them on every claim and fence check.
--
-- * ready_at: from when the run may be claimed (seconds since the epoch): when it was
--   created, released or decided, or the deadline of the lease that holds it (a claim and
--   a renewal set it to the lease's deadline); NULL once its status is not running (a save
--   of another status sets it so). A run is runnable when status = 'running' AND ready_at
--   <= now; runs_runnable makes the claim a walk of an index, queue by queue and tenant by
--   tenant. The index is partial on ready_at, not on status: a save by the holder of a run
--   that goes on running assigns neither, so the index costs the turns of a run nothing.
-- * lease_epoch: 0 for a run never claimed; every claim adds one, never reused.
-- * claimed_at: the latest claim of the run; the latest claim of any run of a tenant is
--   when that tenant was last served (runs_served), which orders tenants in a claim.
-- * approval_due: the earliest deadline of an undecided approval of a waiting run, for the
--   workers' sweep of lapsed approvals (runs_approval_due). Runs migrated here get theirs
--   from their documents, after this script (oarlock.store._sqlite).
-- * claims.run_id and claims.epoch: the run document's id and the lease epoch a claim was
--   taken under (NULL for claims taken without a lease, as every claim made before).

CREATE TABLE runs_v4 (
    num          INTEGER NOT NULL PRIMARY KEY,   -- 1, 2, ... in order of creation
    id           TEXT    NOT NULL UNIQUE,
    agent        TEXT    NOT NULL,
    status       TEXT    NOT NULL,
    turns        INTEGER NOT NULL,
    tags         TEXT    NOT NULL DEFAULT '{}',  -- JSON object, a copy of the document's tags
    created_at   TEXT    NOT NULL,
    updated_at   TEXT    NOT NULL,
    version      INTEGER NOT NULL CHECK (version >= 1),
    agent_ref    TEXT,
    tenant       TEXT    NOT NULL DEFAULT 'default',
    queue        TEXT    NOT NULL DEFAULT 'default',
    ready_at     REAL,
    lease_owner  TEXT,
    lease_epoch  INTEGER NOT NULL DEFAULT 0 CHECK (lease_epoch >= 0),
    lease_until  REAL,
    claimed_at   REAL,
    approval_due REAL,
    document     BLOB    NOT NULL                -- JSON bytes, or compressed (see 0003)
) WITHOUT ROWID;

INSERT INTO runs_v4 (num, id, agent, status, turns, tags, created_at, updated_at, version,
                     agent_ref, ready_at, document)
SELECT num, id, agent, status, turns, tags, created_at, updated_at, version, agent_ref,
       CASE WHEN status = 'running' THEN 0 END, document
FROM runs;

DROP TABLE runs;         -- and its indexes and triggers; events and run_tags go on
                         -- referring to runs
ALTER TABLE runs_v4 RENAME TO runs;

-- as in 0003
CREATE INDEX runs_by_created ON runs (created_at DESC, id DESC);
CREATE INDEX runs_by_status ON runs (status, created_at DESC, id DESC);

CREATE TRIGGER runs_tags_created AFTER INSERT ON runs
BEGIN
    INSERT INTO run_tags (run_id, key, value) SELECT new.id, key, value FROM json_each(new.tags);
END;

CREATE TRIGGER runs_tags_changed AFTER UPDATE OF tags ON runs WHEN old.tags IS NOT new.tags
BEGIN
    DELETE FROM run_tags WHERE run_id = new.id;
    INSERT INTO run_tags (run_id, key, value) SELECT new.id, key, value FROM json_each(new.tags);
END;

-- the claim: runnable runs by queue, tenant and the time they became runnable
CREATE INDEX runs_runnable ON runs (queue, tenant, ready_at) WHERE ready_at IS NOT NULL;
-- when each tenant was last served
CREATE INDEX runs_served ON runs (tenant, claimed_at) WHERE claimed_at IS NOT NULL;
-- the leases held, by holder (oarlock workers, runs list)
CREATE INDEX runs_by_holder ON runs (lease_owner, lease_until) WHERE lease_owner IS NOT NULL;
-- waiting runs by the deadline of their approvals
CREATE INDEX runs_approval_due ON runs (approval_due) WHERE approval_due IS NOT NULL;

-- one row per worker, refreshed by its heartbeats
CREATE TABLE workers (
    owner        TEXT    NOT NULL PRIMARY KEY,
    host         TEXT    NOT NULL,
    pid          INTEGER NOT NULL,
    started_at   TEXT    NOT NULL,
    heartbeat_at TEXT    NOT NULL,
    heartbeat    REAL    NOT NULL,               -- heartbeat_at in seconds since the epoch
    concurrency  INTEGER NOT NULL
) WITHOUT ROWID;

-- one row per role that one worker at a time plays (the approval sweep)
CREATE TABLE leaders (
    role  TEXT NOT NULL PRIMARY KEY,
    owner TEXT NOT NULL,
    until REAL NOT NULL
) WITHOUT ROWID;

ALTER TABLE claims ADD COLUMN run_id TEXT;
ALTER TABLE claims ADD COLUMN epoch INTEGER;

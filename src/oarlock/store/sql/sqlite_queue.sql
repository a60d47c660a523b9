-- Named queries of oarlock.store._sqlite_queue (runs as work: leases, workers, leaders).
-- Each block starts with "-- name: <name>"; the schema is in sqlite_migrations/ (0004).
-- Times are seconds since the epoch (REAL). A run is runnable when its status is 'running'
-- and ready_at <= :now (ready_at is NULL while it is not running, and runs_runnable holds
-- only the others); a lease is live while lease_until > :now.

-- name: claim
-- One statement: find the runnable runs (of the queues and tenants given as JSON arrays,
-- or of all) and lease up to :limit of them, round-robin across tenants (see
-- oarlock.store._queue). queues and lanes walk runs_runnable from one (queue, tenant) to
-- the next; each lane gives at most :limit runs, oldest first; tenants are ordered by when
-- they were last served (never first), then by their oldest runnable run, then by name.
WITH RECURSIVE
queues (queue) AS (
    SELECT value FROM json_each(:queues)
    UNION ALL
    SELECT (SELECT min(r.queue) FROM runs AS r INDEXED BY runs_runnable
            WHERE r.ready_at IS NOT NULL)
    WHERE :queues IS NULL
    UNION ALL
    SELECT (SELECT min(r.queue) FROM runs AS r INDEXED BY runs_runnable
            WHERE r.ready_at IS NOT NULL AND r.queue > q.queue)
    FROM queues AS q
    WHERE :queues IS NULL AND q.queue IS NOT NULL
),
lanes (queue, tenant) AS (
    SELECT q.queue, t.value FROM queues AS q, json_each(:tenants) AS t
    WHERE q.queue IS NOT NULL
    UNION ALL
    SELECT q.queue,
           (SELECT min(r.tenant) FROM runs AS r INDEXED BY runs_runnable
            WHERE r.ready_at IS NOT NULL AND r.queue = q.queue)
    FROM queues AS q
    WHERE :tenants IS NULL AND q.queue IS NOT NULL
    UNION ALL
    SELECT l.queue,
           (SELECT min(r.tenant) FROM runs AS r INDEXED BY runs_runnable
            WHERE r.ready_at IS NOT NULL AND r.queue = l.queue AND r.tenant > l.tenant)
    FROM lanes AS l
    WHERE :tenants IS NULL AND l.tenant IS NOT NULL
),
candidates AS (
    SELECT r.num, r.tenant, r.ready_at,
           row_number() OVER (PARTITION BY r.tenant ORDER BY r.ready_at, r.num) AS turn
    FROM lanes AS l
    JOIN runs AS r ON r.num IN (
        SELECT n.num FROM runs AS n INDEXED BY runs_runnable
        WHERE n.queue = l.queue AND n.tenant = l.tenant AND n.ready_at <= :now
          AND n.status = 'running'
        ORDER BY n.ready_at, n.num
        LIMIT :limit)
    WHERE l.tenant IS NOT NULL
),
tenants AS (
    SELECT c.tenant, min(c.ready_at) AS first_ready,
           (SELECT max(s.claimed_at) FROM runs AS s
            WHERE s.tenant = c.tenant AND s.claimed_at IS NOT NULL) AS served
    FROM candidates AS c
    GROUP BY c.tenant
),
chosen AS (
    SELECT c.num
    FROM candidates AS c JOIN tenants AS t ON t.tenant = c.tenant
    ORDER BY c.turn, t.served IS NOT NULL, t.served, t.first_ready, c.tenant
    LIMIT :limit
)
UPDATE runs
SET lease_owner = :owner, lease_epoch = lease_epoch + 1, lease_until = :until,
    ready_at = :until, claimed_at = :now
WHERE num IN (SELECT num FROM chosen)
RETURNING id, lease_epoch, tenant, queue, agent_ref;

-- name: claim_run
UPDATE runs
SET lease_owner = :owner, lease_epoch = lease_epoch + 1, lease_until = :until,
    ready_at = :until, claimed_at = :now
WHERE id = :id AND (lease_owner IS NULL OR lease_owner = :owner OR lease_until <= :now)
RETURNING lease_epoch, tenant, queue, agent_ref;

-- name: lease_of
SELECT lease_owner, lease_epoch, lease_until FROM runs WHERE id = :id;

-- name: renew
UPDATE runs
SET lease_until = :until, ready_at = :until
WHERE id = :id AND lease_epoch = :epoch AND lease_owner = :owner
RETURNING tenant, queue, agent_ref;

-- name: release
UPDATE runs
SET lease_owner = NULL, lease_until = NULL,
    ready_at = CASE WHEN status = 'running' THEN :now END
WHERE id = :id AND lease_epoch = :epoch AND lease_owner = :owner
RETURNING status;

-- name: leases
SELECT id, lease_owner, lease_epoch, lease_until, tenant, queue, agent_ref
FROM runs
WHERE lease_owner IS NOT NULL AND lease_until > :now
ORDER BY lease_owner, id;

-- name: heartbeat
INSERT INTO workers (owner, host, pid, started_at, heartbeat_at, heartbeat, concurrency)
VALUES (:owner, :host, :pid, :started_at, :heartbeat_at, :heartbeat, :concurrency)
ON CONFLICT (owner) DO UPDATE
SET host = excluded.host, pid = excluded.pid, started_at = excluded.started_at,
    heartbeat_at = excluded.heartbeat_at, heartbeat = excluded.heartbeat,
    concurrency = excluded.concurrency;

-- name: forget_workers
-- Workers silent for a day are forgotten.
DELETE FROM workers WHERE heartbeat < :before;

-- name: workers
SELECT w.owner, w.host, w.pid, w.started_at, w.heartbeat_at, w.concurrency,
       (SELECT json_group_array(h.id)
        FROM (SELECT r.id FROM runs AS r
              WHERE r.lease_owner = w.owner AND r.lease_until > :now ORDER BY r.id) AS h
       ) AS held
FROM workers AS w
WHERE w.heartbeat >= :since
ORDER BY w.owner;

-- name: runnable
-- Whether any run is runnable (wait_for_work's look after another connection's commit).
SELECT 1 FROM runs INDEXED BY runs_runnable
WHERE ready_at <= :now AND status = 'running' LIMIT 1;

-- name: lead
-- Take or keep the role: free, ours already, or expired for longer than :margin.
INSERT INTO leaders (role, owner, until) VALUES (:role, :owner, :until)
ON CONFLICT (role) DO UPDATE
SET owner = excluded.owner, until = excluded.until
WHERE leaders.owner = excluded.owner OR leaders.until + :margin < :now
RETURNING owner;

-- name: lapsed_approvals
-- approval_due is set only while a run waits for approval (every save sets it).
SELECT id FROM runs
WHERE approval_due IS NOT NULL AND approval_due <= :now
ORDER BY approval_due, num
LIMIT :limit;

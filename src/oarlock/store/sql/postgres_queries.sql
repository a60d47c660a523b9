-- Named queries of oarlock.store._postgres and oarlock.store._postgres_queue. Each block
-- starts with "-- name: <name>" and holds one statement with %(name)s parameters. The
-- schema is in postgres_migrations/. Times of leases and heartbeats are the database's
-- (statement_timestamp()), so that workers on machines whose clocks differ agree.

-- name: schema_exists
SELECT to_regclass('oarlock_schema') IS NOT NULL AS found;

-- name: schema_table
CREATE TABLE IF NOT EXISTS oarlock_schema (
    version    integer     NOT NULL PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- name: schema_version
-- As text: a column whose type was changed is read, then refused, as any other value.
SELECT version::text AS version FROM oarlock_schema;

-- name: schema_record
INSERT INTO oarlock_schema (version) VALUES (%(version)s);

-- name: schema_lock
-- One migrating process at a time (the key is "oarlock" in ASCII).
SELECT pg_advisory_xact_lock(7951821729681263467);

-- name: create_run
-- A run that is created running is runnable from now (ready_at, see the migration 0002)
-- and wakes the workers when this commits. With %(lazy)s, its commit does not wait for
-- the disk (synchronous_commit off until this statement's transaction ends; mode is the
-- source of the insert, so it is set before anything is written). %(events)s: the events
-- as one JSON array of [kind, at, data as JSON text] (oarlock.store._postgres
-- ._event_columns), %(count)s its length.
WITH mode AS (
    SELECT CASE WHEN %(lazy)s::boolean THEN set_config('synchronous_commit', 'off', true)
           END AS lazy
), created AS (
    INSERT INTO runs (id, tenant, queue, agent, status, turns, tags, created_at, updated_at,
                      version, agent_ref, document, events, ready_at, approval_due)
    SELECT %(id)s, %(tenant)s, %(queue)s, %(agent)s, %(status)s, %(turns)s,
           %(tags)s::jsonb, %(created_at)s, %(updated_at)s, 1, %(agent_ref)s, %(document)s,
           %(count)s::integer,
           CASE WHEN %(status)s = 'running' THEN extract(epoch FROM statement_timestamp())
           END,
           %(approval_due)s::double precision
    FROM mode
    RETURNING id, tenant, status
), added AS (
    INSERT INTO events (run_id, seq, kind, at, data)
    SELECT c.id, e.ord, e.v ->> 0, e.v ->> 1, e.v ->> 2
    FROM created AS c, json_array_elements(%(events)s::json) WITH ORDINALITY AS e (v, ord)
)
SELECT pg_notify('oarlock_work', c.tenant) FROM created AS c WHERE c.status = 'running';

-- name: save_run
-- The compare-and-swap of a run's version, fenced by a lease when one is given (%(epoch)s
-- not NULL): the run's lease epoch and owner must be the lease's. A save without a lease
-- (a decision, a cancellation) makes a running run that no live lease holds runnable from
-- now, and wakes the workers when this commits if its status became running; a running
-- run a lease holds stays ready at the lease's deadline. One row when saved; none when
-- refused (see run_state). With %(lazy)s, its commit does not wait for the disk
-- (synchronous_commit off until this statement's transaction ends: current sets it as it
-- locks the row, before anything is written). %(events)s and %(count)s: as create_run's.
-- With %(release)s (a lease given), the save also gives the lease back, as release does:
-- in the same fenced update, so that it releases nothing when the fence or the version
-- does not hold, and in the same commit. With %(records)s (not NULL), the records of the
-- step's calls that ran before they were claimed are written too, only when the run was
-- saved (oarlock_record_all, migration 0005; it raises OA001, rolling the save back, when
-- one cannot be written so).
WITH current AS (
    SELECT r.id, r.status AS was, r.tenant,
           CASE WHEN %(lazy)s::boolean THEN set_config('synchronous_commit', 'off', true)
           END AS lazy
    FROM runs AS r WHERE r.id = %(id)s FOR UPDATE
), saved AS (
    UPDATE runs AS r
    SET agent = %(agent)s, status = %(status)s, turns = %(turns)s, tags = %(tags)s::jsonb,
        created_at = %(created_at)s, updated_at = %(updated_at)s, document = %(document)s,
        version = r.version + 1, approval_due = %(approval_due)s::double precision,
        events = r.events + %(count)s::integer,
        lease_owner = CASE WHEN %(release)s::boolean THEN NULL ELSE r.lease_owner END,
        lease_until = CASE WHEN %(release)s::boolean THEN NULL ELSE r.lease_until END,
        ready_at = CASE
            WHEN %(status)s <> 'running' THEN NULL
            WHEN %(release)s::boolean THEN extract(epoch FROM statement_timestamp())
            WHEN %(epoch)s::bigint IS NOT NULL AND r.ready_at IS NOT NULL THEN r.ready_at
            ELSE greatest(coalesce(r.ready_at, 0), coalesce(r.lease_until, 0),
                          extract(epoch FROM statement_timestamp()))
        END
    FROM current AS c
    WHERE r.id = c.id AND r.version = %(expected_version)s
      AND (%(epoch)s::bigint IS NULL
           OR (r.lease_epoch = %(epoch)s::bigint AND r.lease_owner = %(owner)s::text))
    RETURNING r.id, r.tenant, r.events - %(count)s::integer AS base, c.lazy,
              r.status = 'running'
                  AND (%(release)s::boolean
                       OR c.was <> 'running'
                          AND (r.lease_owner IS NULL
                               OR r.lease_until < extract(epoch FROM statement_timestamp())))
                  AS wake
), added AS (
    INSERT INTO events (run_id, seq, kind, at, data)
    SELECT s.id, s.base + e.ord, e.v ->> 0, e.v ->> 1, e.v ->> 2
    FROM saved AS s, json_array_elements(%(events)s::json) WITH ORDINALITY AS e (v, ord)
)
SELECT s.id, CASE WHEN s.wake THEN pg_notify('oarlock_work', s.tenant) END AS woke,
       CASE WHEN %(records)s::json IS NOT NULL
            THEN oarlock_record_all(%(lazy)s::boolean, %(records)s::json, %(results)s::bytea[])
       END AS recorded
FROM saved AS s;

-- name: run_state
-- Why a save was refused; ``ours``: the run holds the very document the save wrote (a
-- retry of a save whose COMMIT had committed as its connection was ended).
SELECT version, lease_epoch, lease_owner, document = %(document)s AS ours
FROM runs WHERE id = %(id)s;

-- name: saved_state
-- A save whose commit's outcome is unknown committed if the run is at its version with
-- its document.
SELECT version, document FROM runs WHERE id = %(id)s;

-- name: load_run
SELECT document, version, agent_ref FROM runs WHERE id = %(id)s;

-- name: list_events
-- One row with a NULL seq when the run has no events; no row when there is no such run.
SELECT e.seq, e.kind, e.at, e.data
FROM runs AS r LEFT JOIN events AS e ON e.run_id = r.id
WHERE r.id = %(id)s
ORDER BY e.seq;

-- name: ids_starting
-- Runs whose id starts with a prefix, across tenants; compared as text whatever the
-- database's collation.
SELECT id FROM runs
WHERE starts_with(id, %(prefix)s::text)
ORDER BY id COLLATE "C"
LIMIT %(limit)s;

-- name: list_runs
-- Across tenants unless %(tenant)s is given. holder and lease_until: the live lease.
SELECT id, agent, status, tags, turns, created_at, updated_at, tenant,
       CASE WHEN lease_until >= extract(epoch FROM statement_timestamp())
            THEN lease_owner END AS holder,
       CASE WHEN lease_owner IS NOT NULL
                 AND lease_until >= extract(epoch FROM statement_timestamp())
            THEN lease_until END AS lease_until
FROM runs
WHERE (%(status)s::text IS NULL OR status = %(status)s::text)
  AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
  AND (%(tags)s::jsonb IS NULL OR tags @> %(tags)s::jsonb)
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s;

-- name: claim_runs
-- Take up to %(limit)s runnable runs (status running, ready, no live lease), round-robin
-- across tenants (see oarlock.store._queue), skipping rows another claimer has locked;
-- each gets the next lease epoch. lanes walks runs_runnable from one (queue, tenant) to
-- the next (of the queues and tenants given, or of all); candidates: each lane's oldest
-- runnable runs, at most %(limit)s; tenants are ordered by when they were last served
-- (never first), then by their first ready run, then by name; chosen: the runs the round
-- robin picks, which tell how many each lane gives (quotas). Then each lane's oldest
-- runnable runs are locked, skipping those another claimer locked, up to its quota: a
-- claimer locks only rows it takes, and claimers at once take the next runs of each lane
-- rather than none. rank: the order of the claim, for the caller.
WITH RECURSIVE lanes (queue, tenant) AS (
    (SELECT q.queue, q.tenant FROM runs AS q
     WHERE q.ready_at IS NOT NULL
       AND (%(queues)s::text[] IS NULL OR q.queue = ANY (%(queues)s::text[]))
       AND (%(tenants)s::text[] IS NULL OR q.tenant = ANY (%(tenants)s::text[]))
     ORDER BY q.queue, q.tenant
     LIMIT 1)
    UNION ALL
    SELECT n.queue, n.tenant
    FROM lanes AS l,
         LATERAL (SELECT q.queue, q.tenant FROM runs AS q
                  WHERE q.ready_at IS NOT NULL AND (q.queue, q.tenant) > (l.queue, l.tenant)
                    AND (%(queues)s::text[] IS NULL OR q.queue = ANY (%(queues)s::text[]))
                    AND (%(tenants)s::text[] IS NULL OR q.tenant = ANY (%(tenants)s::text[]))
                  ORDER BY q.queue, q.tenant
                  LIMIT 1) AS n
), candidates AS (
    SELECT l.queue, l.tenant, c.ready_at,
           row_number() OVER (PARTITION BY l.tenant ORDER BY c.ready_at, c.id) AS turn
    FROM lanes AS l,
         LATERAL (SELECT q.id, q.ready_at FROM runs AS q
                  WHERE q.queue = l.queue AND q.tenant = l.tenant
                    AND q.ready_at <= extract(epoch FROM statement_timestamp())
                    AND q.status = 'running'
                    AND (q.lease_owner IS NULL
                         OR q.lease_until < extract(epoch FROM statement_timestamp()))
                  ORDER BY q.ready_at, q.id
                  LIMIT %(limit)s) AS c
), tenants AS (
    SELECT c.tenant, min(c.ready_at) AS first_ready,
           (SELECT max(s.claimed_at) FROM runs AS s
            WHERE s.tenant = c.tenant AND s.claimed_at IS NOT NULL) AS served
    FROM candidates AS c
    GROUP BY c.tenant
), chosen AS (
    SELECT c.queue, c.tenant,
           row_number() OVER (ORDER BY c.turn, t.served NULLS FIRST, t.first_ready,
                                       c.tenant) AS rank
    FROM candidates AS c JOIN tenants AS t ON t.tenant = c.tenant
    ORDER BY rank
    LIMIT %(limit)s
), quotas AS (
    SELECT c.queue, c.tenant, count(*) AS quota, min(c.rank) AS first FROM chosen AS c
    GROUP BY c.queue, c.tenant
), locked AS (
    SELECT k.id, row_number() OVER (PARTITION BY q.tenant ORDER BY k.ready_at, k.id) AS turn,
           min(q.first) OVER (PARTITION BY q.tenant) AS first
    FROM quotas AS q,
         LATERAL (SELECT r.id, r.ready_at FROM runs AS r
                  WHERE r.queue = q.queue AND r.tenant = q.tenant
                    AND r.ready_at <= extract(epoch FROM statement_timestamp())
                    AND r.status = 'running'
                    AND (r.lease_owner IS NULL
                         OR r.lease_until < extract(epoch FROM statement_timestamp()))
                  ORDER BY r.ready_at, r.id
                  LIMIT q.quota
                  FOR UPDATE SKIP LOCKED) AS k
    LIMIT %(limit)s  -- never fewer rows (the quotas sum to the limit at most), but with it
                     -- the planner expects few and updates them by key, not by a scan
)
UPDATE runs AS r
SET lease_owner = %(owner)s, lease_epoch = r.lease_epoch + 1,
    lease_until = extract(epoch FROM statement_timestamp()) + %(seconds)s,
    ready_at = extract(epoch FROM statement_timestamp()) + %(seconds)s,
    claimed_at = extract(epoch FROM statement_timestamp())
FROM locked AS k
WHERE r.id = k.id
RETURNING r.id, r.lease_owner, r.lease_epoch, r.lease_until, r.tenant, r.queue, r.agent_ref,
          k.turn, k.first;

-- name: claim_run
-- This run's lease, unless another owner holds it live.
UPDATE runs
SET lease_owner = %(owner)s, lease_epoch = lease_epoch + 1,
    lease_until = extract(epoch FROM statement_timestamp()) + %(seconds)s,
    ready_at = extract(epoch FROM statement_timestamp()) + %(seconds)s,
    claimed_at = extract(epoch FROM statement_timestamp())
WHERE id = %(id)s
  AND (lease_owner IS NULL OR lease_owner = %(owner)s
       OR lease_until < extract(epoch FROM statement_timestamp()))
RETURNING id, lease_owner, lease_epoch, lease_until, tenant, queue, agent_ref;

-- name: holder
SELECT lease_owner, lease_until, lease_epoch FROM runs WHERE id = %(id)s;

-- name: renew
UPDATE runs
SET lease_until = extract(epoch FROM statement_timestamp()) + %(seconds)s,
    ready_at = extract(epoch FROM statement_timestamp()) + %(seconds)s
WHERE id = %(id)s AND lease_epoch = %(epoch)s AND lease_owner = %(owner)s
RETURNING lease_until;

-- name: release
-- Give a run back: runnable again from now, behind the runs ready before it (the workers
-- woken when this commits), if running.
WITH released AS (
    UPDATE runs
    SET lease_owner = NULL, lease_until = NULL,
        ready_at = CASE WHEN status = 'running' THEN extract(epoch FROM statement_timestamp())
                   END
    WHERE id = %(id)s AND lease_epoch = %(epoch)s AND lease_owner = %(owner)s
    RETURNING tenant, status
)
SELECT pg_notify('oarlock_work', tenant) FROM released WHERE status = 'running';

-- name: heartbeat
-- On the database's clock, as old as the worker says it is (a stopping worker's last
-- heartbeat is dated 1970: it is no longer listed).
INSERT INTO workers (owner, host, pid, started_at, concurrency, heartbeat_at)
VALUES (%(owner)s, %(host)s, %(pid)s, %(started_at)s, %(concurrency)s,
        statement_timestamp() - make_interval(secs => %(age)s))
ON CONFLICT (owner) DO UPDATE
SET host = excluded.host, pid = excluded.pid, started_at = excluded.started_at,
    concurrency = excluded.concurrency, heartbeat_at = excluded.heartbeat_at;

-- name: workers
-- Across tenants: workers serve any.
SELECT w.owner, w.host, w.pid, w.started_at, w.concurrency,
       to_char(w.heartbeat_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
           AS heartbeat_at,
       coalesce((SELECT array_agg(r.id ORDER BY r.id) FROM runs AS r
                 WHERE r.lease_owner = w.owner
                   AND r.lease_until >= extract(epoch FROM statement_timestamp())),
                '{}') AS held
FROM workers AS w
WHERE w.heartbeat_at >= statement_timestamp() - make_interval(secs => %(within)s)
ORDER BY w.owner;

-- name: leases
-- Every live lease, across tenants.
SELECT id, lease_owner, lease_epoch, lease_until, tenant, queue, agent_ref
FROM runs
WHERE lease_owner IS NOT NULL AND lease_until >= extract(epoch FROM statement_timestamp())
ORDER BY lease_until, id;

-- name: runnable
-- Whether any run is runnable (wait_for_work's look when it starts listening).
SELECT 1 FROM runs
WHERE ready_at <= extract(epoch FROM statement_timestamp()) AND status = 'running'
  AND (lease_owner IS NULL OR lease_until < extract(epoch FROM statement_timestamp()))
LIMIT 1;

-- name: lead
-- Take or keep the role: free, ours already, or expired for longer than %(margin)s.
INSERT INTO leaders (role, owner, until)
VALUES (%(role)s, %(owner)s, extract(epoch FROM statement_timestamp()) + %(ttl)s)
ON CONFLICT (role) DO UPDATE
SET owner = excluded.owner, until = excluded.until
WHERE leaders.owner = excluded.owner
   OR leaders.until + %(margin)s < extract(epoch FROM statement_timestamp())
RETURNING owner;

-- name: lapsed_approvals
-- approval_due is set only while a run waits for approval (every save sets it).
SELECT id FROM runs
WHERE approval_due <= %(now)s
ORDER BY approval_due, id
LIMIT %(limit)s;

-- name: waiting_runs
-- The runs of a database migrated to version 2 that may have an approval deadline.
SELECT id, document FROM runs WHERE status = 'waiting_approval';

-- name: set_approval_due
UPDATE runs SET approval_due = %(due)s WHERE id = %(id)s;

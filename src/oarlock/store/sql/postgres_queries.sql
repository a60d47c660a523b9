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
-- A run that is created running takes its place in the queue (see place_of) and wakes
-- the workers when this commits.
WITH created AS (
    INSERT INTO runs (id, tenant, queue, agent, status, turns, tags, created_at, updated_at,
                      version, agent_ref, document, events, place)
    VALUES (%(id)s, %(tenant)s, %(queue)s, %(agent)s, %(status)s, %(turns)s,
            %(tags)s::jsonb, %(created_at)s, %(updated_at)s, 1, %(agent_ref)s, %(document)s,
            cardinality(%(kinds)s::text[]),
            CASE WHEN %(status)s = 'running' THEN
                greatest((SELECT min(place) FROM runs WHERE status = 'running'),
                         (SELECT max(place) FROM runs
                          WHERE status = 'running' AND tenant = %(tenant)s),
                         0) + 1
            END)
    RETURNING id, tenant, status
), added AS (
    INSERT INTO events (run_id, seq, kind, at, data)
    SELECT c.id, e.ord, e.kind, e.at, e.data
    FROM created AS c,
         unnest(%(kinds)s::text[], %(ats)s::text[], %(datas)s::text[])
             WITH ORDINALITY AS e (kind, at, data, ord)
)
SELECT pg_notify('oarlock_work', c.tenant) FROM created AS c WHERE c.status = 'running';

-- name: save_run
-- The compare-and-swap of a run's version, fenced by a lease when one is given (%(epoch)s
-- not NULL): the run's lease epoch and owner must be the lease's. A run whose status
-- becomes running takes a place in the queue and, unless a live lease holds it, wakes
-- the workers when this commits. One row when saved; none when refused (see run_state).
WITH current AS (
    SELECT r.id, r.status AS was, r.tenant FROM runs AS r WHERE r.id = %(id)s FOR UPDATE
), saved AS (
    UPDATE runs AS r
    SET agent = %(agent)s, status = %(status)s, turns = %(turns)s, tags = %(tags)s::jsonb,
        created_at = %(created_at)s, updated_at = %(updated_at)s, document = %(document)s,
        version = r.version + 1,
        events = r.events + cardinality(%(kinds)s::text[]),
        place = CASE
            WHEN %(status)s <> 'running' THEN NULL
            WHEN c.was = 'running' AND r.place IS NOT NULL THEN r.place
            ELSE greatest((SELECT min(q.place) FROM runs AS q WHERE q.status = 'running'),
                          (SELECT max(q.place) FROM runs AS q
                           WHERE q.status = 'running' AND q.tenant = c.tenant),
                          0) + 1
        END
    FROM current AS c
    WHERE r.id = c.id AND r.version = %(expected_version)s
      AND (%(epoch)s::bigint IS NULL
           OR (r.lease_epoch = %(epoch)s::bigint AND r.lease_owner = %(owner)s::text))
    RETURNING r.id, r.tenant, r.events - cardinality(%(kinds)s::text[]) AS base,
              c.was <> 'running' AND r.status = 'running'
                  AND (r.lease_owner IS NULL
                       OR r.lease_until < extract(epoch FROM statement_timestamp()))
                  AS wake
), added AS (
    INSERT INTO events (run_id, seq, kind, at, data)
    SELECT s.id, s.base + e.ord, e.kind, e.at, e.data
    FROM saved AS s,
         unnest(%(kinds)s::text[], %(ats)s::text[], %(datas)s::text[])
             WITH ORDINALITY AS e (kind, at, data, ord)
)
SELECT s.id, CASE WHEN s.wake THEN pg_notify('oarlock_work', s.tenant) END AS woke
FROM saved AS s;

-- name: run_state
SELECT version, lease_epoch, lease_owner FROM runs WHERE id = %(id)s;

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
-- Take up to %(limit)s runnable runs (status running, no live lease), in queue order,
-- skipping rows another claimer has locked; each gets the next lease epoch. Runs take
-- their place when they become running: one after the later of the queue's head and
-- their tenant's last queued run, so that the runs of tenants interleave (a tenant with
-- many queued runs does not starve another). Across tenants unless %(tenants)s is given.
UPDATE runs AS r
SET lease_owner = %(owner)s, lease_epoch = r.lease_epoch + 1,
    lease_until = extract(epoch FROM statement_timestamp()) + %(seconds)s
WHERE r.id IN (
    SELECT q.id FROM runs AS q
    WHERE q.status = 'running'
      AND (q.lease_owner IS NULL OR q.lease_until < extract(epoch FROM statement_timestamp()))
      AND (%(tenants)s::text[] IS NULL OR q.tenant = ANY (%(tenants)s::text[]))
      AND (%(queues)s::text[] IS NULL OR q.queue = ANY (%(queues)s::text[]))
    ORDER BY q.place, q.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
RETURNING r.id, r.lease_owner, r.lease_epoch, r.lease_until, r.tenant, r.queue, r.agent_ref,
          r.place;

-- name: claim_run
-- This run's lease, unless another owner holds it live.
UPDATE runs
SET lease_owner = %(owner)s, lease_epoch = lease_epoch + 1,
    lease_until = extract(epoch FROM statement_timestamp()) + %(seconds)s
WHERE id = %(id)s
  AND (lease_owner IS NULL OR lease_owner = %(owner)s
       OR lease_until < extract(epoch FROM statement_timestamp()))
RETURNING id, lease_owner, lease_epoch, lease_until, tenant, queue, agent_ref;

-- name: holder
SELECT lease_owner, lease_until, lease_epoch FROM runs WHERE id = %(id)s;

-- name: renew
UPDATE runs SET lease_until = extract(epoch FROM statement_timestamp()) + %(seconds)s
WHERE id = %(id)s AND lease_epoch = %(epoch)s AND lease_owner = %(owner)s
RETURNING lease_until;

-- name: release
-- Give a run back: runnable again (the workers woken when this commits) if running.
WITH released AS (
    UPDATE runs SET lease_owner = NULL, lease_until = NULL
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

-- Named queries of oarlock.store._sqlite. Each block starts with "-- name: <name>" and
-- holds one statement with :named parameters. The schema is in sqlite_migrations/.

-- name: create_run
-- Runs are numbered 1, 2, ... (see 0003); the triggers of 0004 write its run_tags. A new
-- run is runnable from now (ready_at), if its status is running.
INSERT INTO runs (num, id, agent, status, turns, tags, created_at, updated_at, version,
                  agent_ref, tenant, queue, ready_at, approval_due, document)
VALUES ((SELECT coalesce(max(num), 0) + 1 FROM runs), :id, :agent, :status, :turns, :tags,
        :created_at, :updated_at, 1, :agent_ref, :tenant, :queue,
        CASE WHEN :status = 'running' THEN :now END, :approval_due, :document);

-- name: load_run
-- One row per message row of the run (one row when it has none), in order, in one
-- statement and so from one snapshot. message_rows NULL: the document is whole; else it
-- lacks its messages, which are rows of messages (see 0007).
SELECT r.document, r.version, r.agent_ref, r.message_rows, m.idx, m.data, r.num
FROM runs AS r LEFT JOIN messages AS m ON m.run_num = r.num AND r.message_rows IS NOT NULL
WHERE r.id = :id
ORDER BY m.idx;

-- name: append_message
INSERT INTO messages (run_num, idx, data) VALUES (:num, :idx, :data);

-- name: run_num
SELECT num FROM runs WHERE id = :id;

-- name: drop_messages
DELETE FROM messages WHERE run_num = :num;

-- name: drop_run_messages
DELETE FROM messages WHERE run_num = (SELECT num FROM runs WHERE id = :id);

-- name: run_version
SELECT version, lease_epoch, lease_owner FROM runs WHERE id = :id;

-- name: save_run
-- The triggers of 0004 rewrite the run's run_tags if its tags change. A save without a
-- lease (a decision, a cancellation) makes a running run that no live lease holds runnable
-- from now; one a lease holds stays ready at the lease's deadline.
UPDATE runs
SET agent = :agent, status = :status, turns = :turns, tags = :tags,
    created_at = :created_at, updated_at = :updated_at, document = :document, message_rows = :message_rows,
    approval_due = :approval_due, version = version + 1,
    ready_at = CASE WHEN :status = 'running' THEN max(coalesce(ready_at, 0), :now) END
WHERE id = :id AND version = :expected_version;

-- name: save_run_same_tags
-- save_run when the run's tags are those stored, as at nearly every save: it does not
-- assign them, so that its program holds no copy of the trigger that rewrites run_tags
-- (compiling one took about 40 us of a fresh connection's first save, 18 us of each other
-- statement that assigns tags). No row when they changed (or the version does not
-- match): the store then runs save_run.
UPDATE runs
SET agent = :agent, status = :status, turns = :turns,
    created_at = :created_at, updated_at = :updated_at, document = :document, message_rows = :message_rows,
    approval_due = :approval_due, version = version + 1,
    ready_at = CASE WHEN :status = 'running' THEN max(coalesce(ready_at, 0), :now) END
WHERE id = :id AND version = :expected_version AND tags = :tags;

-- name: save_run_fenced
-- The lease holder's save of a run that goes on running: only while the run is still at
-- the lease's epoch and owner. It assigns no column of runs_runnable (see 0004).
UPDATE runs
SET agent = :agent, status = :status, turns = :turns, tags = :tags,
    created_at = :created_at, updated_at = :updated_at, document = :document, message_rows = :message_rows,
    approval_due = :approval_due, version = version + 1
WHERE id = :id AND version = :expected_version AND lease_epoch = :epoch
  AND lease_owner = :owner;

-- name: save_run_fenced_turn
-- save_run_fenced when the run's status, created_at and tags are those stored, as on every
-- turn of a running run: it assigns none of them, so SQLite rewrites no entry of the
-- indexes that hold the first two (runs_by_created, runs_by_status: two pages fewer in
-- each commit) and the program holds no copy of the trigger on tags (see
-- save_run_same_tags). No row when they changed (or the version or the lease does not
-- match): the store then runs save_run_fenced, which tells them apart.
UPDATE runs
SET agent = :agent, turns = :turns, updated_at = :updated_at,
    document = :document, message_rows = :message_rows, approval_due = :approval_due, version = version + 1
WHERE id = :id AND version = :expected_version AND lease_epoch = :epoch
  AND lease_owner = :owner AND status = :status AND created_at = :created_at AND tags = :tags;

-- name: save_run_fenced_at_rest
-- The lease holder's save of a run that stops running (finished, waiting): no longer ready.
UPDATE runs
SET agent = :agent, status = :status, turns = :turns, tags = :tags,
    created_at = :created_at, updated_at = :updated_at, document = :document, message_rows = :message_rows,
    approval_due = :approval_due, version = version + 1, ready_at = NULL
WHERE id = :id AND version = :expected_version AND lease_epoch = :epoch
  AND lease_owner = :owner;

-- name: save_run_fenced_at_rest_same_tags
-- save_run_fenced_at_rest when the run's tags are those stored (see save_run_same_tags);
-- no row when they changed (or the version or the lease does not match).
UPDATE runs
SET agent = :agent, status = :status, turns = :turns,
    created_at = :created_at, updated_at = :updated_at, document = :document, message_rows = :message_rows,
    approval_due = :approval_due, version = version + 1, ready_at = NULL
WHERE id = :id AND version = :expected_version AND lease_epoch = :epoch
  AND lease_owner = :owner AND tags = :tags;

-- name: append_event
INSERT INTO events (run_num, seq, kind, at, data)
VALUES ((SELECT num FROM runs WHERE id = :run_id),
        (SELECT coalesce(max(seq), 0) + 1 FROM events
         WHERE run_num = (SELECT num FROM runs WHERE id = :run_id)),
        :kind, :at, :data);

-- name: list_events
-- One row with a NULL seq when the run has no events; no row when there is no such run.
SELECT e.seq, e.kind, e.at, e.data
FROM runs AS r LEFT JOIN events AS e ON e.run_num = r.num
WHERE r.id = :id
ORDER BY e.seq;

-- name: ids_starting
-- Runs whose id starts with a prefix: :low is the prefix, :high the prefix and U+10FFFF
-- (ids compare as binary text, so the range is exactly the ids starting with it).
SELECT id FROM runs WHERE id >= :low AND id < :high ORDER BY id LIMIT :limit;

-- name: list_runs
-- Each run with its tenant, and the holder and deadline of its lease while it is live.
SELECT id, agent, status, tags, turns, created_at, updated_at, tenant,
       CASE WHEN lease_until > :now THEN lease_owner END AS holder,
       CASE WHEN lease_until > :now THEN lease_until END AS lease_until
FROM runs
WHERE :tenant IS NULL OR tenant = :tenant
ORDER BY created_at DESC, id DESC
LIMIT :limit;

-- name: list_runs_by_status
SELECT id, agent, status, tags, turns, created_at, updated_at, tenant,
       CASE WHEN lease_until > :now THEN lease_owner END AS holder,
       CASE WHEN lease_until > :now THEN lease_until END AS lease_until
FROM runs
WHERE status = :status AND (:tenant IS NULL OR tenant = :tenant)
ORDER BY created_at DESC, id DESC
LIMIT :limit;

-- name: list_runs_by_tags
-- :tags is a JSON object; a run matches when it has all :tag_count of its pairs.
SELECT id, agent, status, tags, turns, created_at, updated_at, tenant,
       CASE WHEN lease_until > :now THEN lease_owner END AS holder,
       CASE WHEN lease_until > :now THEN lease_until END AS lease_until
FROM runs
WHERE id IN (SELECT t.run_id
             FROM json_each(:tags) AS j
             JOIN run_tags AS t ON t.key = j.key AND t.value = j.value
             GROUP BY t.run_id
             HAVING count(*) = :tag_count)
  AND (:status IS NULL OR status = :status)
  AND (:tenant IS NULL OR tenant = :tenant)
ORDER BY created_at DESC, id DESC
LIMIT :limit;

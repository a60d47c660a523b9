-- Named queries of oarlock.store._sqlite_governance (the governed executor's records).
-- Each block starts with "-- name: <name>"; the schema is in sqlite_migrations/ (0002-0005).

-- name: ledger_head
SELECT seq, entry_hash FROM ledger ORDER BY seq DESC LIMIT 1;

-- name: ledger_append
INSERT INTO ledger (seq, kind, at, body, prev_hash, entry_hash)
VALUES (:seq, :kind, :at, :body, :prev_hash, :entry_hash);

-- name: ledger_all
SELECT seq, kind, at, body, prev_hash, entry_hash FROM ledger ORDER BY seq;

-- name: approval_ledger
-- The ledger from the entry of a call's approval to the head.
SELECT seq, kind, at, body, prev_hash, entry_hash FROM ledger
WHERE seq >= (SELECT ledger_seq FROM approvals
              WHERE run_id = :run_id AND tool_call_id = :tool_call_id)
ORDER BY seq;

-- name: insert_invocation
INSERT INTO invocations (invocation_id, run_id, ledger_seq)
VALUES (:invocation_id, :run_id, :ledger_seq);

-- name: run_epoch
-- The lease epoch of a run (by its document id), which a fenced write must still hold.
SELECT lease_epoch FROM runs WHERE id = :run_id;

-- name: insert_claim
INSERT INTO claims (tenant_id, tool_id, idempotency_key, invocation_id, arguments_hash, owner,
                    claimed_at, lease_until, run_id, epoch)
VALUES (:tenant_id, :tool_id, :idempotency_key, :invocation_id, :arguments_hash, :owner,
        :claimed_at, :lease_until, :run_id, :epoch)
ON CONFLICT DO NOTHING;

-- name: claim_of
-- The claim, its receipt (if any), and the current lease epoch of the claim's run.
SELECT c.tenant_id, c.tool_id, c.idempotency_key, c.invocation_id, c.arguments_hash, c.owner,
       c.claimed_at, c.lease_until, c.run_id, c.epoch, l.body AS receipt,
       (SELECT u.lease_epoch FROM runs AS u WHERE u.id = c.run_id) AS run_epoch
FROM claims AS c
LEFT JOIN receipts AS r ON r.invocation_id = c.invocation_id
LEFT JOIN ledger AS l ON l.seq = r.ledger_seq
WHERE c.tenant_id = :tenant_id AND c.tool_id = :tool_id AND c.idempotency_key = :idempotency_key;

-- name: take_over
UPDATE claims
SET invocation_id = :invocation_id, owner = :owner, claimed_at = :claimed_at,
    lease_until = :lease_until, run_id = :run_id, epoch = :epoch
WHERE tenant_id = :tenant_id AND tool_id = :tool_id AND idempotency_key = :idempotency_key
  AND invocation_id = :stale_invocation_id AND owner = :stale_owner
  AND NOT EXISTS (SELECT 1 FROM receipts WHERE invocation_id = :stale_invocation_id);

-- name: open_claims
SELECT c.tenant_id, c.tool_id, c.idempotency_key, c.invocation_id, c.arguments_hash, c.owner,
       c.claimed_at, c.lease_until, c.run_id, c.epoch
FROM claims AS c
WHERE NOT EXISTS (SELECT 1 FROM receipts AS r WHERE r.invocation_id = c.invocation_id)
ORDER BY c.claimed_at;

-- name: insert_approval
INSERT INTO approvals (approval_id, run_id, tool_call_id, used_by, ledger_seq)
VALUES (:approval_id, :run_id, :tool_call_id, NULL, :ledger_seq);

-- name: approval_for
SELECT l.body, a.used_by
FROM approvals AS a JOIN ledger AS l ON l.seq = a.ledger_seq
WHERE a.run_id = :run_id AND a.tool_call_id = :tool_call_id;

-- name: use_approval
UPDATE approvals SET used_by = :invocation_id
WHERE approval_id = :approval_id AND used_by IS NULL;

-- name: insert_receipt
INSERT INTO receipts (invocation_id, status, ledger_seq)
VALUES (:invocation_id, :status, :ledger_seq);

-- name: receipt_status
SELECT status FROM receipts WHERE invocation_id = :invocation_id;

-- name: insert_artifact
INSERT INTO artifacts (ref, data) VALUES (:ref, :data) ON CONFLICT DO NOTHING;

-- name: artifact
SELECT data FROM artifacts WHERE ref = :ref;

-- name: load_invocation
SELECT li.body AS invocation, lr.body AS receipt
FROM invocations AS i
JOIN ledger AS li ON li.seq = i.ledger_seq
LEFT JOIN receipts AS r ON r.invocation_id = i.invocation_id
LEFT JOIN ledger AS lr ON lr.seq = r.ledger_seq
WHERE i.invocation_id = :invocation_id;

-- name: insert_reconciliation
INSERT INTO reconciliations (reconciliation_id, invocation_id, ledger_seq)
VALUES (:reconciliation_id, :invocation_id, :ledger_seq);

-- name: latest_reconciliation
SELECT l.body FROM reconciliations AS c JOIN ledger AS l ON l.seq = c.ledger_seq
WHERE c.invocation_id = :invocation_id ORDER BY c.ledger_seq DESC LIMIT 1;

-- name: reconciliations
SELECT l.body FROM reconciliations AS c JOIN ledger AS l ON l.seq = c.ledger_seq
WHERE c.invocation_id = :invocation_id ORDER BY c.ledger_seq;

-- name: reconciliations_of_many
SELECT c.invocation_id, l.body FROM reconciliations AS c JOIN ledger AS l ON l.seq = c.ledger_seq
WHERE c.invocation_id IN (SELECT value FROM json_each(:invocation_ids)) ORDER BY c.ledger_seq;

-- name: list_receipts
SELECT li.body AS invocation, lr.body AS receipt
FROM receipts AS r
JOIN invocations AS i ON i.invocation_id = r.invocation_id
JOIN ledger AS li ON li.seq = i.ledger_seq
JOIN ledger AS lr ON lr.seq = r.ledger_seq
WHERE (:run_id IS NULL OR i.run_id = :run_id) AND (:status IS NULL OR r.status = :status)
ORDER BY r.ledger_seq DESC
LIMIT :limit;

-- name: insert_checkpoint
INSERT INTO checkpoints (seq, body) VALUES (:seq, :body);

-- name: checkpoints
SELECT body FROM checkpoints ORDER BY seq, rowid;

-- Named queries of oarlock.store._postgres_governance: the governed executor's records.
-- Each block starts with "-- name: <name>" and holds one statement with %(name)s
-- parameters. The schema is in postgres_migrations/.

-- name: fence
-- A fenced write's check: the run's lease, locked against a claim until this commits.
SELECT lease_epoch, lease_owner FROM runs WHERE id = %(id)s FOR SHARE;

-- name: lock_head
-- The head of a chain, locked until the transaction ends; made (from the chain's last
-- entry, else the genesis) when the chain has none.
INSERT INTO ledger_heads (chain, seq, entry_hash)
SELECT %(chain)s, coalesce(l.seq, 0), coalesce(l.entry_hash, %(genesis)s)
FROM (SELECT 1) AS one
LEFT JOIN LATERAL (SELECT seq, entry_hash FROM ledger WHERE chain = %(chain)s
                   ORDER BY seq DESC LIMIT 1) AS l ON true
ON CONFLICT (chain) DO UPDATE SET chain = excluded.chain
RETURNING seq, entry_hash;

-- name: ledger_append
INSERT INTO ledger (chain, seq, kind, at, body, prev_hash, entry_hash)
VALUES (%(chain)s, %(seq)s, %(kind)s, %(at)s, %(body)s, %(prev_hash)s, %(entry_hash)s);

-- name: move_head
UPDATE ledger_heads SET seq = %(seq)s, entry_hash = %(entry_hash)s WHERE chain = %(chain)s;

-- name: insert_claim
INSERT INTO claims (tenant_id, tool_id, idempotency_key, invocation_id, arguments_hash, owner,
                    claimed_at, lease_until, run_id, epoch)
VALUES (%(tenant_id)s, %(tool_id)s, %(idempotency_key)s, %(invocation_id)s,
        %(arguments_hash)s, %(owner)s, %(claimed_at)s, %(lease_until)s, %(run_id)s,
        %(epoch)s)
ON CONFLICT DO NOTHING;

-- name: claim_of
-- run_epoch: the lease epoch of the run the claim was taken for, now.
SELECT c.tenant_id, c.tool_id, c.idempotency_key, c.invocation_id, c.arguments_hash,
       c.owner, c.claimed_at, c.lease_until, c.run_id, c.epoch, l.body AS receipt,
       run.lease_epoch AS run_epoch
FROM claims AS c
LEFT JOIN receipts AS r ON r.invocation_id = c.invocation_id
LEFT JOIN ledger AS l ON l.chain = r.chain AND l.seq = r.ledger_seq
LEFT JOIN runs AS run ON run.id = c.run_id
WHERE c.tenant_id = %(tenant_id)s AND c.tool_id = %(tool_id)s
  AND c.idempotency_key = %(idempotency_key)s;

-- name: take_over
UPDATE claims
SET invocation_id = %(invocation_id)s, arguments_hash = %(arguments_hash)s,
    owner = %(owner)s, claimed_at = %(claimed_at)s, lease_until = %(lease_until)s,
    run_id = %(run_id)s, epoch = %(epoch)s
WHERE tenant_id = %(tenant_id)s AND tool_id = %(tool_id)s
  AND idempotency_key = %(idempotency_key)s
  AND invocation_id = %(stale_invocation_id)s AND owner = %(stale_owner)s
  AND NOT EXISTS (SELECT 1 FROM receipts WHERE invocation_id = %(stale_invocation_id)s);

-- name: open_claims
-- Across tenants.
SELECT c.tenant_id, c.tool_id, c.idempotency_key, c.invocation_id, c.arguments_hash,
       c.owner, c.claimed_at, c.lease_until, c.run_id, c.epoch
FROM claims AS c
WHERE NOT EXISTS (SELECT 1 FROM receipts AS r WHERE r.invocation_id = c.invocation_id)
ORDER BY c.claimed_at, c.tenant_id, c.tool_id, c.idempotency_key;

-- name: insert_invocation
INSERT INTO invocations (invocation_id, run_id, chain, ledger_seq)
VALUES (%(invocation_id)s, %(run_id)s, %(chain)s, %(ledger_seq)s);

-- name: invocation_chain
SELECT i.chain, r.status
FROM invocations AS i LEFT JOIN receipts AS r ON r.invocation_id = i.invocation_id
WHERE i.invocation_id = %(invocation_id)s;

-- name: insert_approval
INSERT INTO approvals (approval_id, run_id, tool_call_id, used_by, chain, ledger_seq)
VALUES (%(approval_id)s, %(run_id)s, %(tool_call_id)s, %(used_by)s, %(chain)s,
        %(ledger_seq)s);

-- name: approval_for
SELECT l.body, a.used_by
FROM approvals AS a JOIN ledger AS l ON l.chain = a.chain AND l.seq = a.ledger_seq
WHERE a.run_id = %(run_id)s AND a.tool_call_id = %(tool_call_id)s;

-- name: use_approval
UPDATE approvals SET used_by = %(invocation_id)s
WHERE approval_id = %(approval_id)s AND used_by IS NULL;

-- name: insert_receipt
INSERT INTO receipts (invocation_id, status, chain, ledger_seq)
VALUES (%(invocation_id)s, %(status)s, %(chain)s, %(ledger_seq)s);

-- name: insert_artifact
INSERT INTO artifacts (ref, data) VALUES (%(ref)s, %(data)s) ON CONFLICT DO NOTHING;

-- name: artifact
SELECT data FROM artifacts WHERE ref = %(ref)s;

-- name: load_invocation
SELECT li.body AS invocation, lr.body AS receipt
FROM invocations AS i
JOIN ledger AS li ON li.chain = i.chain AND li.seq = i.ledger_seq
LEFT JOIN receipts AS r ON r.invocation_id = i.invocation_id
LEFT JOIN ledger AS lr ON lr.chain = r.chain AND lr.seq = r.ledger_seq
WHERE i.invocation_id = %(invocation_id)s;

-- name: insert_reconciliation
INSERT INTO reconciliations (reconciliation_id, invocation_id, chain, ledger_seq)
VALUES (%(reconciliation_id)s, %(invocation_id)s, %(chain)s, %(ledger_seq)s);

-- name: latest_reconciliation
SELECT l.body
FROM reconciliations AS c JOIN ledger AS l ON l.chain = c.chain AND l.seq = c.ledger_seq
WHERE c.invocation_id = %(invocation_id)s
ORDER BY c.ledger_seq DESC
LIMIT 1;

-- name: reconciliations
SELECT c.invocation_id, l.body
FROM reconciliations AS c JOIN ledger AS l ON l.chain = c.chain AND l.seq = c.ledger_seq
WHERE c.invocation_id = ANY (%(invocation_ids)s::text[])
ORDER BY c.invocation_id, c.ledger_seq;

-- name: list_receipts
-- Newest first, across tenants.
SELECT li.body AS invocation, lr.body AS receipt
FROM receipts AS r
JOIN invocations AS i ON i.invocation_id = r.invocation_id
JOIN ledger AS li ON li.chain = i.chain AND li.seq = i.ledger_seq
JOIN ledger AS lr ON lr.chain = r.chain AND lr.seq = r.ledger_seq
WHERE (%(run_id)s::text IS NULL OR i.run_id = %(run_id)s::text)
  AND (%(status)s::text IS NULL OR r.status = %(status)s::text)
ORDER BY r.num DESC
LIMIT %(limit)s;

-- name: ledger_chain
SELECT seq, kind, at, body, prev_hash, entry_hash
FROM ledger WHERE chain = %(chain)s ORDER BY seq;

-- name: ledger_all
SELECT seq, kind, at, body, prev_hash, entry_hash FROM ledger ORDER BY chain, seq;

-- name: approval_ledger
-- The chain of a call's approval, from the approval's entry to the head.
SELECT l.seq, l.kind, l.at, l.body, l.prev_hash, l.entry_hash
FROM approvals AS a JOIN ledger AS l ON l.chain = a.chain AND l.seq >= a.ledger_seq
WHERE a.run_id = %(run_id)s AND a.tool_call_id = %(tool_call_id)s
ORDER BY l.seq;

-- name: chains
-- Every chain with an entry or a head.
SELECT chain FROM ledger_heads
UNION
SELECT DISTINCT chain FROM ledger
ORDER BY chain;

-- name: insert_checkpoint
INSERT INTO checkpoints (chain, seq, body) VALUES (%(chain)s, %(seq)s, %(body)s);

-- name: checkpoints
SELECT body FROM checkpoints ORDER BY chain, seq, num;

-- name: begin_fast
-- begin in one statement (the function of migration 0003): 'ok', or 'slow' having written
-- nothing (SQLSTATE OA001 or a unique violation: rolled back), when the store does it as
-- a transaction of the statements above.
SELECT oarlock_begin(
    %(lazy)s::boolean, %(fence_run)s::text, %(fence_epoch)s::bigint, %(fence_owner)s::text,
    %(tenant_id)s::text, %(tool_id)s::text, %(idempotency_key)s::text,
    %(invocation_id)s::text, %(arguments_hash)s::text, %(owner)s::text,
    %(claimed_at)s::text, %(lease_until)s::double precision, %(run_id)s::text,
    %(epoch)s::bigint, %(approval_id)s::text, %(chain)s::text, %(at)s::text,
    %(invocation_body)s::text, %(invocation_run)s::text, %(grant_body)s::text,
    %(grant_id)s::text, %(grant_run)s::text, %(grant_call)s::text) AS outcome;

-- name: finish_fast
-- finish in one statement, as begin_fast.
SELECT oarlock_finish(
    %(lazy)s::boolean, %(fence_run)s::text, %(fence_epoch)s::bigint, %(fence_owner)s::text,
    %(invocation_id)s::text, %(status)s::text, %(at)s::text, %(receipt_body)s::text,
    %(ref)s::text, %(data)s::bytea) AS outcome;

-- name: record_fast
-- record in one statement (the function of migration 0004), as begin_fast.
SELECT oarlock_record(
    %(lazy)s::boolean, %(fence_run)s::text, %(fence_epoch)s::bigint, %(fence_owner)s::text,
    %(tenant_id)s::text, %(tool_id)s::text, %(idempotency_key)s::text,
    %(invocation_id)s::text, %(arguments_hash)s::text, %(owner)s::text,
    %(claimed_at)s::text, %(lease_until)s::double precision, %(run_id)s::text,
    %(epoch)s::bigint, %(chain)s::text, %(at)s::text, %(invocation_body)s::text,
    %(invocation_run)s::text, %(status)s::text, %(finished_at)s::text,
    %(receipt_body)s::text, %(ref)s::text, %(data)s::bytea) AS outcome;

-- name: entry_hash
-- The entry hash as the database computes it (NULL when it is written in Python).
SELECT oarlock_entry_hash(%(seq)s::bigint, %(kind)s::text, %(at)s::text, %(body)s::text,
                          %(prev)s::text) AS entry_hash;

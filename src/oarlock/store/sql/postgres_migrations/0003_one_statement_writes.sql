-- 0003: the governed executor's two writes of every call, a claim (begin) and a receipt
-- (finish), as one statement each: functions that run in the statement's own transaction
-- what oarlock.store._postgres_governance otherwise does in several round trips (the
-- fence, the claim, the chain's head, the ledger entries and their index rows). Each does
-- the usual case only: anything else (a lease lost, a claim held, a receipt there already,
-- an approval used, text whose entry hash needs escaping) returns 'slow' having written
-- nothing, or raises SQLSTATE OA001 so that the statement rolls back; the store then does
-- the write as before, which says why it refuses.
--
-- Each takes ``lazy``: when true, the statement's transaction commits with
-- synchronous_commit off (set_config(..., true) lasts until the transaction ends, and a
-- commit follows the setting in effect when it commits).

-- The hash of a ledger entry, as oarlock.governance._ledger.entry_hash_canonical makes it
-- from the body's JCS text: the SHA-256 of
-- {"at":"<at>","body":<body>,"kind":"<kind>","prevHash":"<prev>","seq":<seq>}
-- when at, kind and prev are printable ASCII without a quote or a backslash (they are
-- their own JSON strings) and seq is a safe integer; NULL otherwise (written in Python).
CREATE FUNCTION oarlock_entry_hash(seq bigint, kind text, at text, body text, prev text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT 'sha256:' || encode(sha256(convert_to(
               '{"at":"' || at || '","body":' || body || ',"kind":"' || kind
               || '","prevHash":"' || prev || '","seq":' || seq || '}', 'UTF8')), 'hex')
    WHERE abs(seq) < 9007199254740992
      AND at || kind || prev ~ '^[ -~]*$'
      AND strpos(at || kind || prev, chr(34)) = 0
      AND strpos(at || kind || prev, chr(92)) = 0
$$;

-- Append one entry to a chain whose head this transaction holds (locked), after the
-- entry (seq, prev); its hash, or OA001 when it is not plain text.
CREATE FUNCTION oarlock_append_entry(chain text, seq bigint, kind text, at text, body text,
                                     prev text)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    hash text := oarlock_entry_hash(seq, kind, at, body, prev);
BEGIN
    IF hash IS NULL THEN
        RAISE EXCEPTION 'oarlock: an entry hash to write in Python' USING ERRCODE = 'OA001';
    END IF;
    INSERT INTO ledger (chain, seq, kind, at, body, prev_hash, entry_hash)
    VALUES (chain, seq, kind, at, body, prev, hash);
    RETURN hash;
END
$$;

-- The head of a chain, locked until the transaction ends: its row FOR UPDATE, else (a
-- chain without one) made as the named query lock_head makes it, from the chain's last
-- entry or the genesis.
CREATE FUNCTION oarlock_lock_head(p_chain text, OUT seq bigint, OUT entry_hash text)
LANGUAGE plpgsql
AS $$
BEGIN
    SELECT h.seq, h.entry_hash INTO seq, entry_hash
    FROM ledger_heads AS h WHERE h.chain = p_chain FOR UPDATE;
    IF FOUND THEN
        RETURN;
    END IF;
    INSERT INTO ledger_heads AS h (chain, seq, entry_hash)
    SELECT p_chain, coalesce(l.seq, 0), coalesce(l.entry_hash, 'sha256:' || repeat('0', 64))
    FROM (SELECT 1) AS one
    LEFT JOIN LATERAL (SELECT g.seq, g.entry_hash FROM ledger AS g WHERE g.chain = p_chain
                       ORDER BY g.seq DESC LIMIT 1) AS l ON true
    ON CONFLICT (chain) DO UPDATE SET chain = excluded.chain
    RETURNING h.seq, h.entry_hash INTO seq, entry_hash;
END
$$;

-- Whether the run's lease is still (epoch, owner), its row locked FOR SHARE against a
-- claim until the transaction ends; true without a fence (run_id NULL).
CREATE FUNCTION oarlock_fenced(run_id text, epoch bigint, owner text)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    found_epoch bigint;
    found_owner text;
BEGIN
    IF run_id IS NULL THEN
        RETURN true;
    END IF;
    SELECT r.lease_epoch, r.lease_owner INTO found_epoch, found_owner
    FROM runs AS r WHERE r.id = run_id FOR SHARE;
    RETURN FOUND AND found_epoch IS NOT DISTINCT FROM epoch
        AND found_owner IS NOT DISTINCT FROM owner;
END
$$;

-- How begin and finish start: their transaction set to commit without a flush when
-- ``lazy``, then the fence (oarlock_fenced): false when it does not hold.
CREATE FUNCTION oarlock_start(lazy boolean, fence_run text, fence_epoch bigint,
                              fence_owner text)
RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    IF lazy THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    RETURN oarlock_fenced(fence_run, fence_epoch, fence_owner);
END
$$;

-- begin: the claim of a call and its invocation's entry (after a granted approval's, when
-- grant_body is given), or the use of a standing approval (approval_id).
CREATE FUNCTION oarlock_begin(
    lazy boolean, fence_run text, fence_epoch bigint, fence_owner text,
    p_tenant_id text, p_tool_id text, p_key text, p_invocation_id text,
    p_arguments_hash text, p_owner text, p_claimed_at text, p_lease_until double precision,
    p_run_id text, p_epoch bigint, p_approval_id text,
    p_chain text, p_at text, p_invocation_body text, p_invocation_run text,
    grant_body text, grant_id text, grant_run text, grant_call text)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    head_seq bigint;
    head_hash text;
BEGIN
    IF NOT oarlock_start(lazy, fence_run, fence_epoch, fence_owner) THEN
        RETURN 'slow';
    END IF;
    INSERT INTO claims (tenant_id, tool_id, idempotency_key, invocation_id, arguments_hash,
                        owner, claimed_at, lease_until, run_id, epoch)
    VALUES (p_tenant_id, p_tool_id, p_key, p_invocation_id, p_arguments_hash, p_owner,
            p_claimed_at, p_lease_until, p_run_id, p_epoch)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN 'slow';
    END IF;
    IF p_approval_id IS NOT NULL AND grant_body IS NULL THEN
        UPDATE approvals SET used_by = p_invocation_id
        WHERE approval_id = p_approval_id AND used_by IS NULL;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'oarlock: approval used' USING ERRCODE = 'OA001';
        END IF;
    END IF;
    SELECT h.seq, h.entry_hash INTO head_seq, head_hash FROM oarlock_lock_head(p_chain) AS h;
    IF grant_body IS NOT NULL THEN
        head_seq := head_seq + 1;
        head_hash := oarlock_append_entry(p_chain, head_seq, 'approval', p_at, grant_body,
                                          head_hash);
        INSERT INTO approvals (approval_id, run_id, tool_call_id, used_by, chain, ledger_seq)
        VALUES (grant_id, grant_run, grant_call, p_invocation_id, p_chain, head_seq);
    END IF;
    head_seq := head_seq + 1;
    head_hash := oarlock_append_entry(p_chain, head_seq, 'invocation', p_at,
                                      p_invocation_body, head_hash);
    INSERT INTO invocations (invocation_id, run_id, chain, ledger_seq)
    VALUES (p_invocation_id, p_invocation_run, p_chain, head_seq);
    UPDATE ledger_heads SET seq = head_seq, entry_hash = head_hash WHERE chain = p_chain;
    RETURN 'ok';
END
$$;

-- finish: a call's receipt (and its result's artifact), in the chain of its invocation.
CREATE FUNCTION oarlock_finish(
    lazy boolean, fence_run text, fence_epoch bigint, fence_owner text,
    p_invocation_id text, p_status text, p_at text, p_receipt_body text,
    p_ref text, p_data bytea)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    target text;
    found_status text;
    head_seq bigint;
    head_hash text;
BEGIN
    IF NOT oarlock_start(lazy, fence_run, fence_epoch, fence_owner) THEN
        RETURN 'slow';
    END IF;
    SELECT i.chain, r.status INTO target, found_status
    FROM invocations AS i LEFT JOIN receipts AS r ON r.invocation_id = i.invocation_id
    WHERE i.invocation_id = p_invocation_id;
    IF NOT FOUND OR found_status IS NOT NULL THEN
        RETURN 'slow';
    END IF;
    IF p_data IS NOT NULL THEN
        INSERT INTO artifacts (ref, data) VALUES (p_ref, p_data) ON CONFLICT DO NOTHING;
    END IF;
    SELECT h.seq, h.entry_hash INTO head_seq, head_hash FROM oarlock_lock_head(target) AS h;
    head_seq := head_seq + 1;
    head_hash := oarlock_append_entry(target, head_seq, 'receipt', p_at, p_receipt_body,
                                      head_hash);
    INSERT INTO receipts (invocation_id, status, chain, ledger_seq)
    VALUES (p_invocation_id, p_status, target, head_seq);
    UPDATE ledger_heads SET seq = head_seq, entry_hash = head_hash WHERE chain = target;
    RETURN 'ok';
END
$$;

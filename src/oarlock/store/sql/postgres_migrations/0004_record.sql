-- 0004: the one write of a call that ran before it was claimed (a ``read`` call the policy
-- allows: see oarlock.store._postgres_governance, record): its claim and invocation
-- (oarlock_begin), then its receipt and result (oarlock_finish), in the statement's own
-- transaction. 'slow' when begin wrote nothing (the store then does the write as a
-- transaction of several statements, which says why); should finish not write after its
-- begin did, SQLSTATE OA001 rolls both back, and the store does the same.
CREATE FUNCTION oarlock_record(
    lazy boolean, fence_run text, fence_epoch bigint, fence_owner text,
    p_tenant_id text, p_tool_id text, p_key text, p_invocation_id text,
    p_arguments_hash text, p_owner text, p_claimed_at text, p_lease_until double precision,
    p_run_id text, p_epoch bigint, p_chain text, p_at text, p_invocation_body text,
    p_invocation_run text, p_status text, p_finished_at text, p_receipt_body text,
    p_ref text, p_data bytea)
RETURNS text
LANGUAGE plpgsql
AS $$
BEGIN
    IF oarlock_begin(lazy, fence_run, fence_epoch, fence_owner, p_tenant_id, p_tool_id, p_key,
                     p_invocation_id, p_arguments_hash, p_owner, p_claimed_at, p_lease_until,
                     p_run_id, p_epoch, NULL, p_chain, p_at, p_invocation_body,
                     p_invocation_run, NULL, NULL, NULL, NULL) <> 'ok' THEN
        RETURN 'slow';
    END IF;
    IF oarlock_finish(lazy, fence_run, fence_epoch, fence_owner, p_invocation_id, p_status,
                      p_finished_at, p_receipt_body, p_ref, p_data) <> 'ok' THEN
        RAISE EXCEPTION 'oarlock: a receipt to write in Python' USING ERRCODE = 'OA001';
    END IF;
    RETURN 'ok';
END
$$;

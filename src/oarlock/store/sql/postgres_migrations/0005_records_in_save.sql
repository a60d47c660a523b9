-- 0005: the records of a step's calls that ran before they were claimed (``read`` calls
-- the policy allows, made in the drive that received their model response), written in
-- the statement that saves the step (save_run, with %(records)s): each as oarlock_record
-- writes it, unfenced (the save's own compare-and-swap is the fence: this runs only for
-- the row it saved). SQLSTATE OA001 when one is not written so (its key is held, or an
-- entry's hash needs escaping), which rolls the whole save back; the store then writes
-- the records as record does, and saves without them.
--
-- ``records``: a JSON array of objects with oarlock_record's arguments by name (without
-- the p_ prefix); ``results``: their results, by position.
CREATE FUNCTION oarlock_record_all(lazy boolean, records json, results bytea[])
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    r json;
    n integer := 0;
BEGIN
    FOR r IN SELECT value FROM json_array_elements(records) LOOP
        n := n + 1;
        IF oarlock_record(lazy, NULL, NULL, NULL, r ->> 'tenant_id', r ->> 'tool_id',
                          r ->> 'idempotency_key', r ->> 'invocation_id',
                          r ->> 'arguments_hash', r ->> 'owner', r ->> 'claimed_at',
                          (r ->> 'lease_until')::double precision, r ->> 'run_id',
                          (r ->> 'epoch')::bigint, r ->> 'chain', r ->> 'at',
                          r ->> 'invocation_body', r ->> 'invocation_run', r ->> 'status',
                          r ->> 'finished_at', r ->> 'receipt_body', r ->> 'ref',
                          results[n]) <> 'ok' THEN
            RAISE EXCEPTION 'oarlock: records to write in Python' USING ERRCODE = 'OA001';
        END IF;
    END LOOP;
    RETURN n;
END
$$;

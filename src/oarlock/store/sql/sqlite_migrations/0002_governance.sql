-- 0002: the governed executor: ledger (hash chain), invocations, claims, approvals,
-- receipts, reconciliations, artifacts, checkpoints. Records live in the ledger once;
-- the other tables index them by ledger_seq.

CREATE TABLE ledger (
    seq        INTEGER NOT NULL PRIMARY KEY CHECK (seq >= 1),
    kind       TEXT    NOT NULL,
    at         TEXT    NOT NULL,
    body       TEXT    NOT NULL,              -- the record as JCS (RFC 8785) text
    prev_hash  TEXT    NOT NULL,
    entry_hash TEXT    NOT NULL
);

CREATE TABLE invocations (
    invocation_id TEXT    NOT NULL PRIMARY KEY,
    run_id        TEXT    NOT NULL,           -- the invocation's runId (a UUID)
    ledger_seq    INTEGER NOT NULL UNIQUE REFERENCES ledger (seq)
) WITHOUT ROWID;

CREATE INDEX invocations_by_run ON invocations (run_id);

-- The idempotency claim: one per (tenant, tool, key), taken before the tool runs.
CREATE TABLE claims (
    tenant_id       TEXT NOT NULL,
    tool_id         TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    invocation_id   TEXT NOT NULL,            -- the invocation holding it (not yet stored when taken)
    arguments_hash  TEXT NOT NULL,
    owner           TEXT NOT NULL,
    claimed_at      TEXT NOT NULL,
    lease_until     REAL NOT NULL,
    PRIMARY KEY (tenant_id, tool_id, idempotency_key)
) WITHOUT ROWID;

CREATE TABLE approvals (
    approval_id  TEXT    NOT NULL PRIMARY KEY,
    run_id       TEXT    NOT NULL,            -- the run document's id
    tool_call_id TEXT    NOT NULL,
    used_by      TEXT,                        -- the invocation that used it
    ledger_seq   INTEGER NOT NULL UNIQUE REFERENCES ledger (seq),
    UNIQUE (run_id, tool_call_id)
) WITHOUT ROWID;

CREATE TABLE receipts (
    invocation_id TEXT    NOT NULL PRIMARY KEY REFERENCES invocations (invocation_id),
    status        TEXT    NOT NULL,
    ledger_seq    INTEGER NOT NULL UNIQUE REFERENCES ledger (seq)
);

CREATE INDEX receipts_by_status ON receipts (status, ledger_seq DESC);

CREATE TABLE reconciliations (
    reconciliation_id TEXT    NOT NULL PRIMARY KEY,
    invocation_id     TEXT    NOT NULL REFERENCES receipts (invocation_id),
    ledger_seq        INTEGER NOT NULL UNIQUE REFERENCES ledger (seq)
) WITHOUT ROWID;

CREATE INDEX reconciliations_by_invocation ON reconciliations (invocation_id, ledger_seq);

-- Raw tool results, addressed by the sha256 of their bytes.
CREATE TABLE artifacts (
    ref  TEXT NOT NULL PRIMARY KEY,
    data BLOB NOT NULL
) WITHOUT ROWID;

CREATE TABLE checkpoints (
    seq  INTEGER NOT NULL,
    body TEXT    NOT NULL                     -- the signed checkpoint as JSON
);

-- 0001: runs, their events and the run queue (leases, workers); the governed executor's
-- records and its ledger, one hash chain per tenant.
-- Applied by oarlock.store._postgres inside one transaction, under an advisory lock;
-- oarlock_schema records it.

CREATE TABLE runs (
    id          text    NOT NULL PRIMARY KEY,
    tenant      text    NOT NULL,
    queue       text    NOT NULL,
    agent       text    NOT NULL,
    status      text    NOT NULL,
    turns       integer NOT NULL,
    tags        jsonb   NOT NULL DEFAULT '{}',  -- a copy of the document's tags
    created_at  text    NOT NULL,
    updated_at  text    NOT NULL,
    version     bigint  NOT NULL CHECK (version >= 1),
    agent_ref   text,
    document    bytea   NOT NULL,               -- compact JSON bytes (dump_json)
    events      integer NOT NULL DEFAULT 0,     -- how many events it has (the last seq)
    -- The run queue. place: where the run stands while its status is running (see
    -- claim_runs); lease_epoch: incremented by every claim, never reused;
    -- lease_until: seconds since the epoch, by the database's clock.
    place       bigint,
    lease_owner text,
    lease_epoch bigint  NOT NULL DEFAULT 0,
    lease_until double precision
);

-- list_runs: newest first, with or without a status, tenant or tag filter.
CREATE INDEX runs_by_created ON runs (created_at DESC, id DESC);
CREATE INDEX runs_by_status ON runs (status, created_at DESC, id DESC);
CREATE INDEX runs_by_tenant ON runs (tenant, created_at DESC, id DESC);
CREATE INDEX runs_by_tags ON runs USING gin (tags jsonb_path_ops);
-- claim_runs: runnable runs in queue order; place_of: the head of the queue and the last
-- place of a tenant.
CREATE INDEX runs_queued ON runs (place, id) WHERE status = 'running';
CREATE INDEX runs_queued_by_tenant ON runs (tenant, place) WHERE status = 'running';
-- leases and workers: the runs each worker holds.
CREATE INDEX runs_held ON runs (lease_owner, lease_until) WHERE lease_owner IS NOT NULL;

CREATE TABLE events (
    run_id text    NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    seq    integer NOT NULL CHECK (seq >= 1),
    kind   text    NOT NULL,
    at     text    NOT NULL,
    data   text    NOT NULL,                    -- a JSON object
    PRIMARY KEY (run_id, seq)
);

CREATE TABLE workers (
    owner        text        NOT NULL PRIMARY KEY,
    host         text        NOT NULL,
    pid          integer     NOT NULL,
    started_at   text        NOT NULL,
    concurrency  integer     NOT NULL,
    heartbeat_at timestamptz NOT NULL           -- the database's clock
);

-- The ledger: one hash chain per tenant (chain = the tenant of the record's scope).
-- Each record is written once, as an entry; the tables below index it by (chain, seq).
CREATE TABLE ledger (
    chain      text   NOT NULL,
    seq        bigint NOT NULL CHECK (seq >= 1),
    kind       text   NOT NULL,
    at         text   NOT NULL,
    body       text   NOT NULL,                 -- the record as JCS (RFC 8785) text
    prev_hash  text   NOT NULL,
    entry_hash text   NOT NULL,
    PRIMARY KEY (chain, seq)
);

-- Where each chain ends: locked (FOR UPDATE) by the transaction that appends to it.
CREATE TABLE ledger_heads (
    chain      text   NOT NULL PRIMARY KEY,
    seq        bigint NOT NULL,
    entry_hash text   NOT NULL
);

CREATE TABLE invocations (
    invocation_id text   NOT NULL PRIMARY KEY,
    run_id        text   NOT NULL,              -- the invocation's runId (a UUID)
    chain         text   NOT NULL,              -- its tenant
    ledger_seq    bigint NOT NULL,
    FOREIGN KEY (chain, ledger_seq) REFERENCES ledger (chain, seq)
);

CREATE INDEX invocations_by_run ON invocations (run_id);

-- The idempotency claim: one per (tenant, tool, key), taken before the tool runs.
CREATE TABLE claims (
    tenant_id       text             NOT NULL,
    tool_id         text             NOT NULL,
    idempotency_key text             NOT NULL,
    invocation_id   text             NOT NULL,  -- the invocation holding it
    arguments_hash  text             NOT NULL,
    owner           text             NOT NULL,
    claimed_at      text             NOT NULL,
    lease_until     double precision NOT NULL,
    run_id          text,                       -- the run (runs.id) it was taken for
    epoch           bigint,                     -- that run's lease epoch when taken
    PRIMARY KEY (tenant_id, tool_id, idempotency_key)
);

CREATE INDEX claims_by_invocation ON claims (invocation_id);

CREATE TABLE approvals (
    approval_id  text   NOT NULL PRIMARY KEY,
    run_id       text   NOT NULL,               -- the run document's id
    tool_call_id text   NOT NULL,
    used_by      text,                          -- the invocation that used it
    chain        text   NOT NULL,               -- its tenant
    ledger_seq   bigint NOT NULL,
    UNIQUE (run_id, tool_call_id),
    FOREIGN KEY (chain, ledger_seq) REFERENCES ledger (chain, seq)
);

CREATE TABLE receipts (
    invocation_id text   NOT NULL PRIMARY KEY REFERENCES invocations (invocation_id),
    num           bigint GENERATED ALWAYS AS IDENTITY UNIQUE,  -- receipts newest first
    status        text   NOT NULL,
    chain         text   NOT NULL,
    ledger_seq    bigint NOT NULL,
    FOREIGN KEY (chain, ledger_seq) REFERENCES ledger (chain, seq)
);

CREATE INDEX receipts_by_status ON receipts (status, num DESC);

CREATE TABLE reconciliations (
    reconciliation_id text   NOT NULL PRIMARY KEY,
    invocation_id     text   NOT NULL REFERENCES receipts (invocation_id),
    chain             text   NOT NULL,
    ledger_seq        bigint NOT NULL,
    FOREIGN KEY (chain, ledger_seq) REFERENCES ledger (chain, seq)
);

CREATE INDEX reconciliations_by_invocation ON reconciliations (invocation_id, ledger_seq);

-- Raw tool results, addressed by the sha256 of their bytes.
CREATE TABLE artifacts (
    ref  text  NOT NULL PRIMARY KEY,
    data bytea NOT NULL
);

CREATE TABLE checkpoints (
    num   bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    chain text   NOT NULL,
    seq   bigint NOT NULL,
    body  text   NOT NULL                       -- the signed checkpoint as JSON
);

CREATE INDEX checkpoints_by_chain ON checkpoints (chain, seq);

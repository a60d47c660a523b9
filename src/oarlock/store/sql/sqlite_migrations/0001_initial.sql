-- 0001: runs (document, version, listing columns), events (run_id, seq), run_tags, listing indexes.
-- Applied by oarlock.store._sqlite inside one transaction; PRAGMA user_version records it.

CREATE TABLE runs (
    id         TEXT    NOT NULL PRIMARY KEY,
    agent      TEXT    NOT NULL,
    status     TEXT    NOT NULL,
    turns      INTEGER NOT NULL,
    tags       TEXT    NOT NULL DEFAULT '{}',  -- JSON object, a copy of the document's tags
    created_at TEXT    NOT NULL,
    updated_at TEXT    NOT NULL,
    version    INTEGER NOT NULL CHECK (version >= 1),
    agent_ref  TEXT,
    document   BLOB    NOT NULL                -- compact JSON bytes (dump_json)
);

-- list_runs: newest first, with or without a status filter.
CREATE INDEX runs_by_created ON runs (created_at DESC, id DESC);
CREATE INDEX runs_by_status ON runs (status, created_at DESC, id DESC);

CREATE TABLE events (
    run_id TEXT    NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    seq    INTEGER NOT NULL CHECK (seq >= 1),
    kind   TEXT    NOT NULL,
    at     TEXT    NOT NULL,
    data   TEXT    NOT NULL DEFAULT '{}',      -- JSON object
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;

-- One row per tag of a run, so that list_runs(tags=...) never reads documents.
CREATE TABLE run_tags (
    run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    key    TEXT NOT NULL,
    value  TEXT NOT NULL,
    PRIMARY KEY (run_id, key)
) WITHOUT ROWID;

CREATE INDEX run_tags_by_value ON run_tags (key, value, run_id);

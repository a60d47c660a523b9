-- 0003: fewer bytes, and fewer pages written, per run.
--
-- Values: from this version on, runs.document may hold a compressed document, a BLOB that
-- does not start with '{' (a zlib stream; see oarlock.store._sqlite); any other value is
-- JSON as before. Documents written earlier stay as they are. The version number keeps an
-- older oarlock, which would take a compressed document for a corrupt one, away from the
-- file.
--
-- Tables, rebuilt (create, copy, drop, rename; the store runs migrations with foreign keys
-- off, and each copy keeps every key):
-- * runs: keyed by a number (num), which events use instead of repeating the run's id
--   (a 36-character UUID) in every row, and WITHOUT ROWID: a run's row grows while it
--   runs and shrinks when it comes to rest (its document compressed), and in a rowid
--   table each growing row was moved to a leaf page of its own, which it then kept.
-- * events: keyed by (run_num, seq), so a run's events are appended at the end of the
--   table instead of wherever its id sorts. Events of no run (none, unless the file was
--   edited) are not copied.
-- * invocations: without UNIQUE (ledger_seq), an index no query reads; the row is written
--   right after its ledger entry, in the same transaction.
-- * receipts: WITHOUT ROWID, keyed by invocation_id (a rowid table kept the key in an
--   index of its own), and without receipts_by_status, an index no query reads.
--   UNIQUE (ledger_seq) stays: receipts are listed newest first through it.
-- * run_tags is kept by triggers from runs.tags: rewritten when a run is created and when
--   a save changes its tags, rather than by every save.

CREATE TABLE runs_v3 (
    num        INTEGER NOT NULL PRIMARY KEY,   -- 1, 2, ... in order of creation
    id         TEXT    NOT NULL UNIQUE,
    agent      TEXT    NOT NULL,
    status     TEXT    NOT NULL,
    turns      INTEGER NOT NULL,
    tags       TEXT    NOT NULL DEFAULT '{}',  -- JSON object, a copy of the document's tags
    created_at TEXT    NOT NULL,
    updated_at TEXT    NOT NULL,
    version    INTEGER NOT NULL CHECK (version >= 1),
    agent_ref  TEXT,
    document   BLOB    NOT NULL                -- JSON bytes, or compressed (see above)
) WITHOUT ROWID;

INSERT INTO runs_v3 (num, id, agent, status, turns, tags, created_at, updated_at, version,
                     agent_ref, document)
SELECT rowid, id, agent, status, turns, tags, created_at, updated_at, version, agent_ref,
       document
FROM runs;

CREATE TABLE events_v3 (
    run_num INTEGER NOT NULL REFERENCES runs (num) ON DELETE CASCADE,
    seq     INTEGER NOT NULL CHECK (seq >= 1),
    kind    TEXT    NOT NULL,
    at      TEXT    NOT NULL,
    data    TEXT    NOT NULL DEFAULT '{}',     -- JSON object
    PRIMARY KEY (run_num, seq)
) WITHOUT ROWID;

INSERT INTO events_v3 (run_num, seq, kind, at, data)
SELECT r.rowid, e.seq, e.kind, e.at, e.data
FROM events AS e JOIN runs AS r ON r.id = e.run_id;

CREATE TABLE invocations_v3 (
    invocation_id TEXT    NOT NULL PRIMARY KEY,
    run_id        TEXT    NOT NULL,           -- the invocation's runId (a UUID)
    ledger_seq    INTEGER NOT NULL REFERENCES ledger (seq)
) WITHOUT ROWID;

INSERT INTO invocations_v3 (invocation_id, run_id, ledger_seq)
SELECT invocation_id, run_id, ledger_seq FROM invocations;

CREATE TABLE receipts_v3 (
    invocation_id TEXT    NOT NULL PRIMARY KEY REFERENCES invocations (invocation_id),
    status        TEXT    NOT NULL,
    ledger_seq    INTEGER NOT NULL UNIQUE REFERENCES ledger (seq)
) WITHOUT ROWID;

INSERT INTO receipts_v3 (invocation_id, status, ledger_seq)
SELECT invocation_id, status, ledger_seq FROM receipts;

DROP TABLE events;
DROP TABLE runs;         -- and its indexes; run_tags goes on referring to runs (id)
DROP TABLE receipts;     -- reconciliations go on referring to receipts (invocation_id)
DROP TABLE invocations;
ALTER TABLE runs_v3 RENAME TO runs;
ALTER TABLE events_v3 RENAME TO events;
ALTER TABLE invocations_v3 RENAME TO invocations;
ALTER TABLE receipts_v3 RENAME TO receipts;

-- as in 0001 and 0002
CREATE INDEX runs_by_created ON runs (created_at DESC, id DESC);
CREATE INDEX runs_by_status ON runs (status, created_at DESC, id DESC);
CREATE INDEX invocations_by_run ON invocations (run_id);

CREATE TRIGGER runs_tags_created AFTER INSERT ON runs
BEGIN
    INSERT INTO run_tags (run_id, key, value) SELECT new.id, key, value FROM json_each(new.tags);
END;

CREATE TRIGGER runs_tags_changed AFTER UPDATE OF tags ON runs WHEN old.tags IS NOT new.tags
BEGIN
    DELETE FROM run_tags WHERE run_id = new.id;
    INSERT INTO run_tags (run_id, key, value) SELECT new.id, key, value FROM json_each(new.tags);
END;

-- 0005: fewer bytes per ledger entry and claim.
--
-- Values: from this version on, a ledger row's body may be a compressed BLOB (a format byte
-- and a DEFLATE stream made with a preset dictionary), and its entry_hash and prev_hash the
-- 32 bytes of the SHA-256 rather than "sha256:" and 64 hex digits; likewise a claim's
-- arguments_hash (see oarlock.store._sqlite_governance). Rows written earlier keep their
-- form (JCS text, hash text) and are read as they are. The version number keeps an older
-- oarlock, which would take such a row for a corrupt one, away from the file.
--
-- ledger is rebuilt (create, copy, drop, rename, as in 0003) to declare what its columns
-- hold; every row is copied as it is.

CREATE TABLE ledger_v5 (
    seq        INTEGER NOT NULL PRIMARY KEY CHECK (seq >= 1),
    kind       TEXT    NOT NULL,
    at         TEXT    NOT NULL,
    body       BLOB    NOT NULL,              -- compressed (see above), or JCS text
    prev_hash  BLOB    NOT NULL,              -- 32 bytes, or "sha256:" and hex text
    entry_hash BLOB    NOT NULL               -- 32 bytes, or "sha256:" and hex text
);

INSERT INTO ledger_v5 (seq, kind, at, body, prev_hash, entry_hash)
SELECT seq, kind, at, body, prev_hash, entry_hash FROM ledger;

DROP TABLE ledger;       -- invocations, approvals, receipts and reconciliations go on
                         -- referring to ledger (seq)
ALTER TABLE ledger_v5 RENAME TO ledger;

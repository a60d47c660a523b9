-- 0007: a running run's messages in rows of their own.
--
-- A running run is saved twice a turn. Its document was written whole at each save: past
-- about 4 KB it spills into overflow pages, which every save frees and allocates again
-- (the pages themselves, the free list's page and the file's header: three pages or more
-- a save, more as the run grows). From this version on, the document of a running run
-- is stored as two parts: runs.document holds it without its messages (a JSON object
-- without "messages"), and messages holds each message's JSON, numbered from 0, so a save
-- appends the messages the run gained. runs.message_rows counts them: NULL means the
-- document is whole in runs.document, as it is for every run at rest (compressed, the
-- message rows deleted) and every row written before this version. The version number
-- keeps an older oarlock, which would read a document without its messages, away from
-- the file.

CREATE TABLE messages (
    run_num INTEGER NOT NULL REFERENCES runs (num) ON DELETE CASCADE,
    idx     INTEGER NOT NULL CHECK (idx >= 0),
    data    TEXT    NOT NULL,                  -- one message's JSON
    PRIMARY KEY (run_num, idx)
) WITHOUT ROWID;

ALTER TABLE runs ADD COLUMN message_rows INTEGER CHECK (message_rows >= 0);

-- 0006: fewer bytes per event and per call.
--
-- Values: from this version on, an event's data may be compressed: a BLOB of one format
-- byte (2) and a DEFLATE stream made with a preset dictionary of the members of events (see
-- oarlock.store._packing and oarlock.store._sqlite); data of fewer than 512 bytes of JSON
-- stays JSON text, and so do the events written earlier. A BLOB that starts with '{' is
-- JSON; any other BLOB is compressed, and one of an unknown format byte is refused when it
-- is read. The version number keeps an older oarlock, which would take such a row for a
-- corrupt one, away from the file.
--
-- events is not rebuilt: in a column of TEXT affinity a BLOB is kept as it is.
--
-- invocations_by_run goes: no query reads it (the receipts of one run are found by a walk
-- of the receipts newest first, through receipts' UNIQUE (ledger_seq), as every receipt
-- is), and every call wrote an entry to it: some 75 bytes a call, and the pages they fill.

DROP INDEX invocations_by_run;

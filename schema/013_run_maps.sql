-- heapstore schema, version 13: the runs' id maps stored in chunks.
--
-- run_pcs (run, pc, frame) and run_stacks (run, stack_id, trace), what a
-- run's collector-local ids mean, were a row per entry: 14 bytes of
-- payload and about as much of SQLite's own per row, 0.85 MB of an
-- every-allocation run of python3. They are now stored as chunks of up to
-- 4096 entries of one run and one map, one row each, in a codec of their
-- own (schema/hs_maps.h): kind 0 is the pcs (pc -> frames.id), kind 1 the
-- stacks (stack id -> traces.id). A run's map is its chunks in seq order,
-- a later entry for a key replacing an earlier one; only a live run's
-- last chunk changes (the writer rewrites it at each commit until it is
-- full).
--
-- For SQL, the read-only virtual tables run_pcs and run_stacks that
-- heapstore's connections have stand where the tables were, each run's
-- entries by key; `run = ?` reads that run's chunks only.
--
-- A rowid table: a chunk of a few KB stays on its page (a WITHOUT ROWID
-- row keeps only about 1 KB there and the rest on an overflow page of its
-- own, mostly empty).
--
-- This migration moves the rows of both tables into chunks, in C after
-- this file (schema/hs_schema.c), then drops the tables, in the same
-- transaction.
CREATE TABLE IF NOT EXISTS run_maps (
    run  INTEGER NOT NULL,
    kind INTEGER NOT NULL,
    seq  INTEGER NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (run, kind, seq)
);

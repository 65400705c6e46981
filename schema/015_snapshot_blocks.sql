-- heapstore schema, version 15: the snapshot rows stored in blocks.
--
-- snapshots (001_init.sql) held a row per (run, kind, bucket, trace): some
-- 18 bytes a row on disk, the largest table of an every-allocation run once
-- the stack tree and the frames had shrunk. The writer writes a bucket's
-- rows of one kind together and readers read them together, so they are
-- now stored that way: one row per block of up to 256 of them, by trace,
-- in a codec of their own (schema/hs_snaps.h) under zstd, first and last
-- the block's lowest and highest trace. A (run, kind, bucket) is written
-- whole, never grown: its blocks are replaced.
--
-- For SQL, the read-only virtual table `snapshots` (run, kind, bucket,
-- trace, bytes, count) that heapstore's connections have stands where the
-- table was.
--
-- This migration moves the rows of snapshots into blocks, in C after this
-- file (schema/hs_schema.c), then drops the table, in the same transaction.
CREATE TABLE IF NOT EXISTS snapshot_blocks (
    run    INTEGER NOT NULL,
    kind   INTEGER NOT NULL,
    bucket INTEGER NOT NULL,
    first  INTEGER NOT NULL,
    last   INTEGER NOT NULL,
    data   BLOB NOT NULL,
    PRIMARY KEY (run, kind, bucket, first)
) WITHOUT ROWID;

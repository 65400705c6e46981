-- heapstore schema, version 16: the delta rows of each window of buckets,
-- by trace.
--
-- snapshot_blocks (015) keeps a bucket's delta rows together, for the state
-- at a moment. A question that follows a few traces through a run read one
-- block per bucket and trace. snapshot_series holds the same rows (trace,
-- bucket, bytes) of each window of 32 buckets (bucket, a multiple of 32,
-- the window's first) by trace, in blocks of whole traces (first and last
-- the lowest and highest; codec in schema/hs_series.h): one seek a window
-- and trace. The writer adds a window's blocks once its run has moved past
-- it and at the run's end; a window without blocks, runs written before
-- this version among them, is read from snapshot_blocks as before.
CREATE TABLE IF NOT EXISTS snapshot_series (
    run    INTEGER NOT NULL,
    bucket INTEGER NOT NULL,
    first  INTEGER NOT NULL,
    last   INTEGER NOT NULL,
    data   BLOB NOT NULL,
    PRIMARY KEY (run, bucket, first)
) WITHOUT ROWID;

-- heapstore schema, version 2: per-trace summaries of the delta rollup, so
-- that ranking traces over a whole run (history's top N, leak detection)
-- reads one row per trace instead of every delta row of the run.
--
-- trace_stats holds, for each trace of a run with at least one delta row
-- (snapshots kind 0), what a pass over its delta rows in bucket order
-- yields (schema/hs_tstats.h): the rows summed are those of buckets <=
-- runs.stats_bucket. The writer rewrites the rows of the traces that changed
-- once the delta rows written since reach a fixed multiple of their number
-- (server/store_rollup.c), and at the run's end, then sets stats_bucket; a
-- reader adds the delta rows of the buckets after stats_bucket itself (so a
-- bounded number per trace, whatever the run's length). stats_bucket NULL:
-- no trace_stats yet, every delta row is read. Rebuilding an open run's
-- rollups (a resumed run) clears both first.
--
-- The sums are the least-squares sums of a trace's live bytes y against the
-- bucket index x, over buckets 0 .. last_bucket - 1 (y is constant between
-- two delta rows; the segment from last_bucket on is left to the reader,
-- who knows where the run ends): sy = sum(y), sxy = sum(x*y), syy =
-- sum(y*y), accumulated segment by segment as doubles, in bucket order, by
-- the one function that readers use too, so that both give the same bits.
-- This migration fills the table for the runs already stored (in C, after
-- this file: hs_tstats_backfill()).
CREATE TABLE trace_stats (
    run          INTEGER NOT NULL,
    trace        INTEGER NOT NULL,
    rows         INTEGER NOT NULL, -- delta rows summed
    first_bucket INTEGER NOT NULL, -- bucket of the first of them
    last_bucket  INTEGER NOT NULL, -- bucket of the last of them
    bytes        INTEGER NOT NULL, -- live bytes after the last (sum of the deltas)
    max_bytes    INTEGER NOT NULL, -- highest live bytes at the end of a bucket, >= 0
    ups          INTEGER NOT NULL, -- delta rows with bytes > 0
    first_up     INTEGER NOT NULL, -- bucket of the first and of the last of those
    last_up      INTEGER NOT NULL, --   (0 when ups = 0)
    up_bytes     REAL NOT NULL,    -- sum of the increases
    down_bytes   REAL NOT NULL,    -- sum of the decreases (positive)
    sy           REAL NOT NULL,
    sxy          REAL NOT NULL,
    syy          REAL NOT NULL,
    PRIMARY KEY (run, trace)
) WITHOUT ROWID;

ALTER TABLE runs ADD COLUMN stats_bucket INTEGER;

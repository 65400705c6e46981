-- heapstore schema, version 8: the exact heap totals a collector counts at
-- every allocation and free (docs/protocol.md, "Exact heap totals"; DROPS
-- kinds 32 to 43), whatever its sampling rate. Bytes are the allocator's
-- usable sizes of the blocks (malloc_usable_size), not the requested sizes.
--
-- When a run has them in its figures (run_exact.flags & 256), runs.peak_bytes,
-- peak_t_ns, live_bytes, live_count, total_alloc_bytes and total_alloc_count
-- hold the exact figures, and the peak snapshot (snapshots kind 2) is the
-- sites' state at the exact peak's moment. Only the breakdown by site stays
-- estimated. Runs sampled at every allocation keep their sampled figures
-- (exact in requested bytes), as do runs whose samples see objects the totals
-- leave out (a Python program's small objects): their flags lack 256.
-- (Tables, IF NOT EXISTS: a file taken back to an older version number by
-- hand keeps them.)

-- One row per run whose collector sent exact totals (the latest observation).
CREATE TABLE IF NOT EXISTS run_exact (
    run         INTEGER PRIMARY KEY,
    flags       INTEGER NOT NULL, -- HS_EXACT_F_* of the collector, | 256: in the run's figures
    allocs      INTEGER NOT NULL, -- allocations counted
    frees       INTEGER NOT NULL, -- frees counted
    alloc_bytes INTEGER NOT NULL, -- their bytes
    free_bytes  INTEGER NOT NULL,
    live_bytes  INTEGER NOT NULL, -- live heap at the latest observation
    peak_bytes  INTEGER NOT NULL, -- highest live heap, and when
    peak_t_ns   INTEGER NOT NULL,
    error_bytes INTEGER NOT NULL, -- bound on |live figure - true live heap| at any moment
    est_peak_bytes INTEGER NOT NULL, -- the sampled series' peak, and when
    est_peak_t_ns  INTEGER NOT NULL
);

-- The exact live heap per time bucket (runs.granularity_ns), one row per
-- bucket with an observation or a high in it: live_bytes at the bucket's
-- last observation (or at its high), the highest live heap within it and
-- when, and the cumulative counts then.
CREATE TABLE IF NOT EXISTS heap_exact (
    run        INTEGER NOT NULL,
    bucket     INTEGER NOT NULL,
    live_bytes INTEGER NOT NULL,
    max_bytes  INTEGER NOT NULL,
    max_t_ns   INTEGER NOT NULL,
    allocs     INTEGER NOT NULL,
    frees      INTEGER NOT NULL,
    PRIMARY KEY (run, bucket)
) WITHOUT ROWID;

-- heapstore schema, version 8: the exact heap totals a collector counts at
-- every allocation and free (docs/protocol.md, "Exact heap totals"; DROPS
-- kinds 32 to 43), whatever its sampling rate. Bytes are the allocator's
-- usable sizes of the blocks (malloc_usable_size), not the requested sizes.
--
-- When a run has them (exact_flags & 256), runs.peak_bytes, peak_t_ns,
-- live_bytes, live_count, total_alloc_bytes and total_alloc_count hold the
-- exact figures, the peak snapshot (snapshots kind 2) is the sites' state at
-- the exact peak's moment, and est_peak_* keep the peak of the sampled
-- series. Only the breakdown by site stays estimated. Runs sampled at every
-- allocation keep their sampled figures (exact in requested bytes), as do
-- runs whose samples see objects the totals leave out (a Python program's
-- small objects): those have exact_flags without 256.

-- NULL: no exact figures (an older collector, or one that could not read
-- the allocator's sizes); else the collector's flags (HS_EXACT_F_*), with
-- 256 when the run's figures are the exact ones.
ALTER TABLE runs ADD COLUMN exact_flags INTEGER;
ALTER TABLE runs ADD COLUMN exact_allocs INTEGER;      -- allocations counted
ALTER TABLE runs ADD COLUMN exact_frees INTEGER;       -- frees counted
ALTER TABLE runs ADD COLUMN exact_alloc_bytes INTEGER; -- their bytes
ALTER TABLE runs ADD COLUMN exact_free_bytes INTEGER;
ALTER TABLE runs ADD COLUMN exact_live_bytes INTEGER;  -- live heap at the latest observation
ALTER TABLE runs ADD COLUMN exact_peak_bytes INTEGER;  -- highest live heap, and when
ALTER TABLE runs ADD COLUMN exact_peak_t_ns INTEGER;
ALTER TABLE runs ADD COLUMN exact_error_bytes INTEGER; -- bound on |figure - true live heap|
ALTER TABLE runs ADD COLUMN est_peak_bytes INTEGER;    -- the sampled series' peak, and when
ALTER TABLE runs ADD COLUMN est_peak_t_ns INTEGER;

-- The exact live heap per time bucket (runs.granularity_ns), one row per
-- bucket with an observation or a high in it: live_bytes at the bucket's
-- last observation (or at its high), the highest live heap within it and
-- when, and the cumulative counts then.
CREATE TABLE heap_exact (
    run        INTEGER NOT NULL,
    bucket     INTEGER NOT NULL,
    live_bytes INTEGER NOT NULL,
    max_bytes  INTEGER NOT NULL,
    max_t_ns   INTEGER NOT NULL,
    allocs     INTEGER NOT NULL,
    frees      INTEGER NOT NULL,
    PRIMARY KEY (run, bucket)
) WITHOUT ROWID;

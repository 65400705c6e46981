-- The ClickHouse layout of a heapstore store (docs/clickhouse.md).
--
-- Written by server/ch_ship.c, read by queries/store_clickhouse.c. Tested
-- on ClickHouse 18.16 (Debian 12) and written to run on current releases:
-- no TTL, no Nullable, no LowCardinality, new-style MergeTree clauses.
--
-- Ids are content: a run's id is a hash of its uuid, a frame's a
-- hash of its key (function, file, line; or module and offset while it is
-- unnamed), a trace node's a hash of (parent's id, frame's id); so front
-- ends that never talk to each other write the same ids. Every table is a
-- ReplacingMergeTree over its natural key: shipping a row twice (a resend,
-- a restart of the front end) leaves one row once parts merge, and readers
-- use FINAL (or pick the latest ver) so that they never count one twice.
-- Per-run tables carry the run's start day and are partitioned by its
-- month: retention drops whole partitions (ALTER TABLE … DROP PARTITION).
-- trace_stats holds a trace's summary (schema/hs_tstats.h) as of each
-- mark (runs.stats_bucket when it was written): a reader takes, per trace,
-- the row of the highest mark not above its run's stats_bucket, then the
-- delta rows after that bucket.
-- runs.front names the front end that shipped the row (a random id kept in
-- its marks file): a front end leaves alone a run another one has carried
-- further. runs.key_sha is the SHA-256 of the run's resume key (hex; '' for
-- none), so that any front end can check a resumed HELLO without the key
-- being stored; frames.key is the buffer's frame key, so that a front end
-- that fetches a run back gives its frames the same content ids.
-- runs.has_rss, rss_peak_bytes, has_leak, leak_bytes_per_s: the summary
-- figures the SQLite store writes when a run ends (its schema 9); readers
-- compute them for runs that have not ended.
-- heap_series.span and process_samples.span: 1 for a bucket's row, N for
-- a row that stands for N buckets merged by downsampling
-- (server/ch_downsample.c).
-- Statements are separated by lines holding only ';'.

CREATE TABLE IF NOT EXISTS runs (
    id Int64, uuid String, parent_uuid String, parent_id Int64, has_parent UInt8,
    program String, argv String, host String, pid Int64, ppid Int64,
    start_unix_ns Int64, sample_bytes Int64, max_depth Int64, rss_interval_ms Int64,
    granularity_ns Int64, keyframe_every Int64, collector_version String, state String,
    clean_exit Int8, end_ns Int64, next_seq Int64, alloc_events Int64, free_events Int64,
    bye_alloc_events Int64, has_bye_alloc UInt8, bye_free_events Int64, has_bye_free UInt8,
    dropped_alloc_events Int64, dropped_free_events Int64, dropped_alloc_bytes Int64,
    dropped_free_bytes Int64, stacks_truncated Int64, unwind_failed Int64, live_set_full Int64,
    peak_bytes Int64, peak_count Int64, peak_t_ns Int64, live_bytes Int64, live_count Int64,
    total_alloc_bytes Int64, total_alloc_count Int64, python_fallback Int64,
    main_end_ns Int64, python_small_unseen Int64, stats_bucket Int64,
    day Date, ver UInt64, key_sha String, front UInt64,
    has_rss UInt8, rss_peak_bytes Int64, has_leak UInt8, leak_bytes_per_s Float64
) ENGINE = ReplacingMergeTree(ver) PARTITION BY toYYYYMM(day) ORDER BY id
;
CREATE TABLE IF NOT EXISTS run_labels (
    run Int64, day Date, key String, value String, ver UInt64
) ENGINE = ReplacingMergeTree(ver) PARTITION BY toYYYYMM(day) ORDER BY (run, key)
;
CREATE TABLE IF NOT EXISTS mappings (
    run Int64, day Date, t_ns Int64, start UInt64, end UInt64, file_offset UInt64,
    build_id String, path String
) ENGINE = ReplacingMergeTree PARTITION BY toYYYYMM(day) ORDER BY (run, t_ns, start)
;
CREATE TABLE IF NOT EXISTS frames (
    id Int64, key String, function String, file String, line Int64, module String,
    module_offset Int64, ver UInt64
) ENGINE = ReplacingMergeTree(ver) ORDER BY id
;
CREATE TABLE IF NOT EXISTS traces (
    id Int64, parent Int64, frame Int64, depth Int32
) ENGINE = ReplacingMergeTree ORDER BY id
;
CREATE TABLE IF NOT EXISTS run_pcs (
    run Int64, day Date, pc UInt64, frame Int64
) ENGINE = ReplacingMergeTree PARTITION BY toYYYYMM(day) ORDER BY (run, pc)
;
CREATE TABLE IF NOT EXISTS run_stacks (
    run Int64, day Date, stack_id UInt64, trace Int64
) ENGINE = ReplacingMergeTree PARTITION BY toYYYYMM(day) ORDER BY (run, stack_id)
;
CREATE TABLE IF NOT EXISTS events (
    run Int64, day Date, seq Int64, t_first_ns Int64, t_last_ns Int64, n_events Int64,
    codec Int32, data String
) ENGINE = ReplacingMergeTree PARTITION BY toYYYYMM(day) ORDER BY (run, seq)
;
CREATE TABLE IF NOT EXISTS snapshots (
    run Int64, day Date, kind Int8, bucket Int64, trace Int64, bytes Int64, count Int64,
    ver UInt64
) ENGINE = ReplacingMergeTree(ver) PARTITION BY toYYYYMM(day) ORDER BY (run, kind, bucket, trace)
;
CREATE TABLE IF NOT EXISTS heap_series (
    run Int64, day Date, bucket Int64, live_bytes Int64, live_count Int64, max_bytes Int64,
    alloc_bytes Int64, free_bytes Int64, ver UInt64, span Int64 DEFAULT 1
) ENGINE = ReplacingMergeTree(ver) PARTITION BY toYYYYMM(day) ORDER BY (run, bucket)
;
CREATE TABLE IF NOT EXISTS process_samples (
    run Int64, day Date, t_ns Int64, rss_bytes Int64, vsize_bytes Int64, span Int64 DEFAULT 1
) ENGINE = ReplacingMergeTree PARTITION BY toYYYYMM(day) ORDER BY (run, t_ns)
;
CREATE TABLE IF NOT EXISTS size_hist (
    run Int64, day Date, bucket Int64, allocs Int64, bytes Int64, ver UInt64
) ENGINE = ReplacingMergeTree(ver) PARTITION BY toYYYYMM(day) ORDER BY (run, bucket)
;
CREATE TABLE IF NOT EXISTS run_exact (
    run Int64, day Date, flags Int64, allocs Int64, frees Int64, alloc_bytes Int64,
    free_bytes Int64, live_bytes Int64, peak_bytes Int64, peak_t_ns Int64, error_bytes Int64,
    est_peak_bytes Int64, est_peak_t_ns Int64, ver UInt64
) ENGINE = ReplacingMergeTree(ver) PARTITION BY toYYYYMM(day) ORDER BY run
;
CREATE TABLE IF NOT EXISTS heap_exact (
    run Int64, day Date, bucket Int64, live_bytes Int64, max_bytes Int64, max_t_ns Int64,
    allocs Int64, frees Int64, ver UInt64
) ENGINE = ReplacingMergeTree(ver) PARTITION BY toYYYYMM(day) ORDER BY (run, bucket)
;
CREATE TABLE IF NOT EXISTS trace_stats (
    run Int64, day Date, trace Int64, mark Int64, rows Int64, first_bucket Int64,
    last_bucket Int64, bytes Int64, max_bytes Int64, ups Int64, first_up Int64, last_up Int64,
    up_bytes Float64, down_bytes Float64, sy Float64, sxy Float64, syy Float64
) ENGINE = ReplacingMergeTree PARTITION BY toYYYYMM(day) ORDER BY (run, trace, mark)

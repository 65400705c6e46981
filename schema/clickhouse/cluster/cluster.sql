-- The cluster recipe (docs/clickhouse.md): run on EVERY server of cluster
-- {cluster} before any front end ships to it, with {cluster} replaced by
-- the cluster's name in the servers' remote_servers configuration (an
-- example: tests/clickhouse/server.xml.in, heapstore_two_shards). It creates
-- each table of 001_init.sql as NAME_local on this server and NAME as a
-- Distributed table over NAME_local on every shard, sharded by run (by id
-- for runs, frames and trace nodes), so that all rows of a run, and every
-- copy of a row, live on one shard: FINAL and the queries' subqueries
-- (distributed_product_mode = global) then answer as on one server.
-- Front ends and queries name the plain tables and never know.
--
-- With a coordinator (ZooKeeper), replace ReplacingMergeTree(…) in the
-- NAME_local tables by ReplicatedReplacingMergeTree('/clickhouse/tables/
-- {shard}/heapstore/NAME', '{replica}', …) and list each shard's replicas
-- in remote_servers; the Distributed tables stay as they are.
-- Statements are separated by lines holding only ';'.

CREATE TABLE IF NOT EXISTS runs_local (
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
CREATE TABLE IF NOT EXISTS runs AS runs_local
    ENGINE = Distributed({cluster}, currentDatabase(), runs_local, id)
;
CREATE TABLE IF NOT EXISTS run_labels_local (
    run Int64, day Date, key String, value String, ver UInt64
) ENGINE = ReplacingMergeTree(ver) PARTITION BY toYYYYMM(day) ORDER BY (run, key)
;
CREATE TABLE IF NOT EXISTS run_labels AS run_labels_local
    ENGINE = Distributed({cluster}, currentDatabase(), run_labels_local, run)
;
CREATE TABLE IF NOT EXISTS mappings_local (
    run Int64, day Date, t_ns Int64, start UInt64, end UInt64, file_offset UInt64,
    build_id String, path String
) ENGINE = ReplacingMergeTree PARTITION BY toYYYYMM(day) ORDER BY (run, t_ns, start)
;
CREATE TABLE IF NOT EXISTS mappings AS mappings_local
    ENGINE = Distributed({cluster}, currentDatabase(), mappings_local, run)
;
CREATE TABLE IF NOT EXISTS frames_local (
    id Int64, key String, function String, file String, line Int64, module String,
    module_offset Int64, ver UInt64
) ENGINE = ReplacingMergeTree(ver) ORDER BY id
;
CREATE TABLE IF NOT EXISTS frames AS frames_local
    ENGINE = Distributed({cluster}, currentDatabase(), frames_local, id)
;
CREATE TABLE IF NOT EXISTS traces_local (
    id Int64, parent Int64, frame Int64, depth Int32
) ENGINE = ReplacingMergeTree ORDER BY id
;
CREATE TABLE IF NOT EXISTS traces AS traces_local
    ENGINE = Distributed({cluster}, currentDatabase(), traces_local, id)
;
CREATE TABLE IF NOT EXISTS run_pcs_local (
    run Int64, day Date, pc UInt64, frame Int64
) ENGINE = ReplacingMergeTree PARTITION BY toYYYYMM(day) ORDER BY (run, pc)
;
CREATE TABLE IF NOT EXISTS run_pcs AS run_pcs_local
    ENGINE = Distributed({cluster}, currentDatabase(), run_pcs_local, run)
;
CREATE TABLE IF NOT EXISTS run_stacks_local (
    run Int64, day Date, stack_id UInt64, trace Int64
) ENGINE = ReplacingMergeTree PARTITION BY toYYYYMM(day) ORDER BY (run, stack_id)
;
CREATE TABLE IF NOT EXISTS run_stacks AS run_stacks_local
    ENGINE = Distributed({cluster}, currentDatabase(), run_stacks_local, run)
;
CREATE TABLE IF NOT EXISTS events_local (
    run Int64, day Date, seq Int64, t_first_ns Int64, t_last_ns Int64, n_events Int64,
    codec Int32, data String
) ENGINE = ReplacingMergeTree PARTITION BY toYYYYMM(day) ORDER BY (run, seq)
;
CREATE TABLE IF NOT EXISTS events AS events_local
    ENGINE = Distributed({cluster}, currentDatabase(), events_local, run)
;
CREATE TABLE IF NOT EXISTS snapshots_local (
    run Int64, day Date, kind Int8, bucket Int64, trace Int64, bytes Int64, count Int64,
    ver UInt64
) ENGINE = ReplacingMergeTree(ver) PARTITION BY toYYYYMM(day) ORDER BY (run, kind, bucket, trace)
;
CREATE TABLE IF NOT EXISTS snapshots AS snapshots_local
    ENGINE = Distributed({cluster}, currentDatabase(), snapshots_local, run)
;
CREATE TABLE IF NOT EXISTS heap_series_local (
    run Int64, day Date, bucket Int64, live_bytes Int64, live_count Int64, max_bytes Int64,
    alloc_bytes Int64, free_bytes Int64, ver UInt64, span Int64 DEFAULT 1
) ENGINE = ReplacingMergeTree(ver) PARTITION BY toYYYYMM(day) ORDER BY (run, bucket)
;
CREATE TABLE IF NOT EXISTS heap_series AS heap_series_local
    ENGINE = Distributed({cluster}, currentDatabase(), heap_series_local, run)
;
CREATE TABLE IF NOT EXISTS process_samples_local (
    run Int64, day Date, t_ns Int64, rss_bytes Int64, vsize_bytes Int64, span Int64 DEFAULT 1
) ENGINE = ReplacingMergeTree PARTITION BY toYYYYMM(day) ORDER BY (run, t_ns)
;
CREATE TABLE IF NOT EXISTS process_samples AS process_samples_local
    ENGINE = Distributed({cluster}, currentDatabase(), process_samples_local, run)
;
CREATE TABLE IF NOT EXISTS size_hist_local (
    run Int64, day Date, bucket Int64, allocs Int64, bytes Int64, ver UInt64
) ENGINE = ReplacingMergeTree(ver) PARTITION BY toYYYYMM(day) ORDER BY (run, bucket)
;
CREATE TABLE IF NOT EXISTS size_hist AS size_hist_local
    ENGINE = Distributed({cluster}, currentDatabase(), size_hist_local, run)
;
CREATE TABLE IF NOT EXISTS run_exact_local (
    run Int64, day Date, flags Int64, allocs Int64, frees Int64, alloc_bytes Int64,
    free_bytes Int64, live_bytes Int64, peak_bytes Int64, peak_t_ns Int64, error_bytes Int64,
    est_peak_bytes Int64, est_peak_t_ns Int64, ver UInt64
) ENGINE = ReplacingMergeTree(ver) PARTITION BY toYYYYMM(day) ORDER BY run
;
CREATE TABLE IF NOT EXISTS run_exact AS run_exact_local
    ENGINE = Distributed({cluster}, currentDatabase(), run_exact_local, run)
;
CREATE TABLE IF NOT EXISTS heap_exact_local (
    run Int64, day Date, bucket Int64, live_bytes Int64, max_bytes Int64, max_t_ns Int64,
    allocs Int64, frees Int64, ver UInt64
) ENGINE = ReplacingMergeTree(ver) PARTITION BY toYYYYMM(day) ORDER BY (run, bucket)
;
CREATE TABLE IF NOT EXISTS heap_exact AS heap_exact_local
    ENGINE = Distributed({cluster}, currentDatabase(), heap_exact_local, run)
;
CREATE TABLE IF NOT EXISTS trace_stats_local (
    run Int64, day Date, trace Int64, mark Int64, rows Int64, first_bucket Int64,
    last_bucket Int64, bytes Int64, max_bytes Int64, ups Int64, first_up Int64, last_up Int64,
    up_bytes Float64, down_bytes Float64, sy Float64, sxy Float64, syy Float64
) ENGINE = ReplacingMergeTree PARTITION BY toYYYYMM(day) ORDER BY (run, trace, mark)
;
CREATE TABLE IF NOT EXISTS trace_stats AS trace_stats_local
    ENGINE = Distributed({cluster}, currentDatabase(), trace_stats_local, run)

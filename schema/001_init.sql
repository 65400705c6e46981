-- heapstore schema, version 1. Applied in one transaction when
-- PRAGMA user_version < 1; the code sets user_version after it.
--
-- Units: bytes and counts are 64-bit integers; times are nanoseconds relative
-- to the run's start, except runs.start_unix_ns (wall clock). "Estimated"
-- numbers are sums of sampling weights (see docs/protocol.md, EVENTS).

-- One row per profiled process.
CREATE TABLE runs (
    id                   INTEGER PRIMARY KEY,
    uuid                 BLOB NOT NULL UNIQUE,      -- run_id of HELLO (16 bytes)
    parent_uuid          BLOB,                      -- parent_run_id, NULL when none
    parent_id            INTEGER,                   -- runs.id of the parent once known
    program              TEXT NOT NULL,
    argv                 TEXT NOT NULL,             -- JSON array of strings
    host                 TEXT NOT NULL,
    pid                  INTEGER NOT NULL,
    ppid                 INTEGER NOT NULL,
    start_unix_ns        INTEGER NOT NULL,
    sample_bytes         INTEGER NOT NULL,          -- mean sampling interval; 1 = every allocation
    max_depth            INTEGER NOT NULL,
    rss_interval_ms      INTEGER NOT NULL,
    granularity_ns       INTEGER NOT NULL,          -- width of a snapshot bucket
    keyframe_every       INTEGER NOT NULL,          -- a full snapshot every K buckets
    collector_version    TEXT NOT NULL DEFAULT '',
    state                TEXT NOT NULL DEFAULT 'open'
                         CHECK (state IN ('open', 'ended', 'lost')),
    clean_exit           INTEGER,                   -- BYE flag; NULL until the run ends
    end_ns               INTEGER,                   -- last known time of the run
    next_seq             INTEGER NOT NULL DEFAULT 0, -- frames committed (acknowledged)
    alloc_events         INTEGER NOT NULL DEFAULT 0, -- events stored
    free_events          INTEGER NOT NULL DEFAULT 0,
    bye_alloc_events     INTEGER,                   -- events the collector says it emitted
    bye_free_events      INTEGER,
    dropped_alloc_events INTEGER NOT NULL DEFAULT 0, -- DROPS counters (latest values)
    dropped_free_events  INTEGER NOT NULL DEFAULT 0,
    dropped_alloc_bytes  INTEGER NOT NULL DEFAULT 0,
    dropped_free_bytes   INTEGER NOT NULL DEFAULT 0,
    stacks_truncated     INTEGER NOT NULL DEFAULT 0,
    unwind_failed        INTEGER NOT NULL DEFAULT 0,
    live_set_full        INTEGER NOT NULL DEFAULT 0,
    peak_bytes           INTEGER NOT NULL DEFAULT 0, -- highest estimated live heap
    peak_count           INTEGER NOT NULL DEFAULT 0,
    peak_t_ns            INTEGER NOT NULL DEFAULT 0,
    live_bytes           INTEGER NOT NULL DEFAULT 0, -- estimated live heap now / at the end
    live_count           INTEGER NOT NULL DEFAULT 0,
    total_alloc_bytes    INTEGER NOT NULL DEFAULT 0, -- estimated bytes ever allocated
    total_alloc_count    INTEGER NOT NULL DEFAULT 0,
    collector_peak_bytes INTEGER
);
CREATE INDEX runs_program ON runs(program, start_unix_ns);
CREATE INDEX runs_start ON runs(start_unix_ns);

CREATE TABLE run_labels (
    run   INTEGER NOT NULL,
    key   TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (run, key)
) WITHOUT ROWID;
CREATE INDEX run_labels_kv ON run_labels(key, value);

-- Executable mappings of loaded objects; a MAPPINGS frame at t replaces the set.
CREATE TABLE mappings (
    run         INTEGER NOT NULL,
    t_ns        INTEGER NOT NULL,
    start       INTEGER NOT NULL,
    end         INTEGER NOT NULL,
    file_offset INTEGER NOT NULL,
    build_id    BLOB,
    path        TEXT NOT NULL,
    PRIMARY KEY (run, t_ns, start)
) WITHOUT ROWID;

-- Symbolized frames, shared by all runs. Identity (key) is the symbolized
-- content, not the address: "function\x1ffile\x1fline" when the function is
-- known, else "\x1fmodule\x1foffset", so the same code in two runs or two
-- builds is the same frame.
CREATE TABLE frames (
    id            INTEGER PRIMARY KEY,
    key           TEXT NOT NULL UNIQUE,
    function      TEXT NOT NULL,   -- demangled; '' when unknown
    file          TEXT NOT NULL,   -- '' when unknown
    line          INTEGER NOT NULL,-- 0 when unknown
    module        TEXT NOT NULL,   -- path of the object (as first seen)
    module_offset INTEGER NOT NULL
);
CREATE INDEX frames_function ON frames(function);

-- Stacks as a prefix tree shared by all runs: a node is (parent, frame), the
-- root's parent is 0 and holds the outermost frame; a trace is the id of its
-- leaf node (the allocation site). Identical stacks in any runs share an id.
CREATE TABLE traces (
    id     INTEGER PRIMARY KEY,
    parent INTEGER NOT NULL,
    frame  INTEGER NOT NULL,
    depth  INTEGER NOT NULL,   -- 1 for a root node
    UNIQUE (parent, frame)
);

-- What a run's collector-local ids mean, so that a resumed connection (after
-- a server restart) can go on using them. Since schema 13 they are stored
-- in chunks (run_maps, 013_run_maps.sql), and these names are read-only
-- virtual tables over them.
CREATE TABLE run_pcs (
    run   INTEGER NOT NULL,
    pc    INTEGER NOT NULL,
    frame INTEGER NOT NULL,
    PRIMARY KEY (run, pc)
) WITHOUT ROWID;

CREATE TABLE run_stacks (
    run      INTEGER NOT NULL,
    stack_id INTEGER NOT NULL,
    trace    INTEGER NOT NULL,
    PRIMARY KEY (run, stack_id)
) WITHOUT ROWID;

-- Raw events, one row per EVENTS frame: `data` is the frame's payload as
-- sent (docs/protocol.md), its stack ids resolved through run_stacks. The
-- SQL function/table event_rows(run) expands them for people.
CREATE TABLE events (
    run       INTEGER NOT NULL,
    seq       INTEGER NOT NULL,
    t_first_ns INTEGER NOT NULL,
    t_last_ns INTEGER NOT NULL,
    n_events  INTEGER NOT NULL,
    data      BLOB NOT NULL,
    PRIMARY KEY (run, seq)
);
CREATE INDEX events_time ON events(run, t_last_ns);

-- Rollups, written while ingesting. Bucket b covers [b*g, (b+1)*g) with g =
-- runs.granularity_ns.
--   kind 0 (delta): the net change of a trace's live bytes/count during b.
--   kind 1 (keyframe): a trace's live bytes/count at the end of b, for every
--          trace with live blocks; written every keyframe_every buckets and
--          at the run's end.
--   kind 2 (peak): the live state at the instant of the run's peak (the
--          bucket is the peak's); rewritten when a new peak is reached.
-- The state at the end of bucket B = the keyframe at the largest kb <= B plus
-- the deltas of buckets kb+1 .. B: O(traces * keyframe_every) rows. With no
-- keyframe <= B, start from the empty state (every trace at 0) and add the
-- deltas of buckets 0 .. B. Delta rows exist only for traces that changed in
-- a bucket; a keyframe lists only traces with live blocks.
-- count is the estimated number of blocks (sum of weight/size), rounded.
-- An event counts in the bucket of its time, except that an event older than
-- the newest bucket already begun (batches from different threads can overlap
-- in time) counts in that newest bucket. The rows of the bucket in progress
-- are written when the run's events move past it or the run ends.
CREATE TABLE snapshots (
    run    INTEGER NOT NULL,
    kind   INTEGER NOT NULL,
    bucket INTEGER NOT NULL,
    trace  INTEGER NOT NULL,
    bytes  INTEGER NOT NULL,
    count  INTEGER NOT NULL,
    PRIMARY KEY (run, kind, bucket, trace)
) WITHOUT ROWID;

-- Per-run totals over time, one row per bucket that saw events.
CREATE TABLE heap_series (
    run         INTEGER NOT NULL,
    bucket      INTEGER NOT NULL,
    live_bytes  INTEGER NOT NULL, -- estimated live heap at the end of the bucket
    live_count  INTEGER NOT NULL,
    max_bytes   INTEGER NOT NULL, -- highest estimated live heap within the bucket
    alloc_bytes INTEGER NOT NULL, -- estimated bytes allocated during the bucket
    free_bytes  INTEGER NOT NULL,
    PRIMARY KEY (run, bucket)
) WITHOUT ROWID;

-- PROCESS samples: resident set and virtual size.
CREATE TABLE process_samples (
    run         INTEGER NOT NULL,
    t_ns        INTEGER NOT NULL,
    rss_bytes   INTEGER NOT NULL,
    vsize_bytes INTEGER NOT NULL,
    PRIMARY KEY (run, t_ns)
) WITHOUT ROWID;

-- SIZES: all allocation requests by power-of-two bucket (latest frame).
CREATE TABLE size_hist (
    run    INTEGER NOT NULL,
    bucket INTEGER NOT NULL, -- sizes in [2^bucket, 2^(bucket+1)); 0 also holds size 0
    allocs INTEGER NOT NULL,
    bytes  INTEGER NOT NULL,
    PRIMARY KEY (run, bucket)
) WITHOUT ROWID;

/* hs_qstore: what the query core asks of stored runs.
 *
 * The typed core (hs_core.h) answers people's questions over this
 * interface, which is named by the questions a store answers, not by the
 * tables that hold the answers: which runs match some filters, one run's
 * record, a run's state at a moment (live bytes and count per trace), its
 * heap per bucket, one trace's or every trace's changes over time, the
 * summaries of those changes, stacks (trace nodes and frames), the size
 * histogram, RSS samples, the events of a span (an exact end, exports),
 * the mappings and addresses pprof wants, and the summaries of many runs at
 * once (trend: one question, however many runs). How a store keeps them (SQLite's
 * keyframes plus per-bucket deltas, a column store's aggregates) is its own
 * business: a second store implements hs_qstore_ops and the views do not
 * change. SQLite (store_sqlite.c) is the one store today; the server's
 * writer (server/hs_store.h) is the other side of the same file and not
 * this interface.
 *
 * Conventions. Every op returns 0 or a negative HS_E code with err filled
 * (HS_ENOENT: no such run; HS_EDB: the store's trouble, its own words).
 * Ops that yield rows call cb once per row, in the order each op states;
 * a non-zero return from cb stops the walk and is returned as it is (cb
 * fills err). Strings are lent until the next call on the same store
 * unless an op says otherwise. A store is used by one thread at a time.
 * Times are ns from the run's start; bucket b covers [b*g, (b+1)*g) of a
 * run of granularity g (common/hs_snap.h).
 */
#ifndef HS_QSTORE_H
#define HS_QSTORE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "hs_core.h"
#include "hs_tstats.h"

typedef struct hs_qstore hs_qstore;
typedef struct hs_qstore_ops hs_qstore_ops;

/* Every store starts with this; its ops follow from it. */
struct hs_qstore {
    const hs_qstore_ops *ops;
};

/* ---- the types the ops answer with ------------------------------------------ */

/* A run's record as the store keeps it. Strings are lent (until the next
 * call); a field the store's data does not have is 0 (and its has_ flag
 * 0 where 0 is a value). */
/* A run's exact heap totals (schema 8), counted by its collector at every
 * allocation and free in the allocator's usable sizes: has is 0 when its
 * collector sent none; in_figures when the run's peak, end and totals (and
 * its heap series) are these exact figures rather than the sampled ones;
 * usable_call when sizes came from malloc_usable_size (else glibc's chunk
 * headers); est_peak_* is the sampled series' peak. */
typedef struct hs_qstore_exact {
    int has, in_figures, usable_call;
    int64_t allocs, frees, alloc_bytes, free_bytes, error_bytes;
    int64_t est_peak_bytes, est_peak_t_ns;
} hs_qstore_exact;

typedef struct hs_qstore_run {
    int64_t id;
    const char *uuid; /* 32 hex digits, lower case */
    const char *program, *argv_json, *host, *state, *collector_version;
    int64_t pid, ppid, parent_id, start_unix_ns;
    int has_parent;
    int64_t end_ns; /* 0 when unknown (an open run) */
    int clean_exit; /* -1 unknown, 0 or 1 */
    int64_t peak_bytes, peak_count, peak_t_ns, live_bytes, live_count;
    int64_t total_alloc_bytes, total_alloc_count, alloc_events, free_events;
    int64_t granularity_ns, keyframe_every, sample_bytes, max_depth;
    int64_t dropped_alloc_events, dropped_free_events, dropped_alloc_bytes, dropped_free_bytes;
    int64_t stacks_truncated, unwind_failed, live_set_full, python_fallback, python_small_unseen;
    int64_t bye_alloc_events, bye_free_events; /* what the collector said it sent */
    int has_bye_alloc, has_bye_free;
    int64_t main_end_ns; /* the end of the program's main code, 0 when unknown */
    int64_t last_bucket; /* the last bucket with data, -1 when none */
    hs_qstore_exact exact;
} hs_qstore_run;

/* A filter of runs_find: key is program (a path or its base name), host,
 * id, pid, state, parent (a run id: the runs it started), root (a run id:
 * it and its descendants), or else a label's key. */
typedef struct hs_qstore_filter {
    const char *key, *value;
} hs_qstore_filter;

/* Which state: at the end of bucket, or the run's peak snapshot (the state
 * at the end of bucket when the run has none); exact: plus the events of
 * [(bucket + 1) * granularity_ns, at_ns]. */
typedef struct hs_qstore_moment {
    int64_t run, granularity_ns;
    int peak, exact;
    int64_t bucket, at_ns;
} hs_qstore_moment;

/* A trace's live bytes and count. */
typedef struct hs_qstore_live {
    int64_t trace, bytes, count;
} hs_qstore_live;

/* The delta rows of a run summed per trace (schema/hs_tstats.h): rows in
 * the order of their traces' first delta row (bucket, then trace). */
typedef struct hs_qstore_tsum {
    int64_t trace;
    hs_tstats s;
} hs_qstore_tsum;
typedef struct hs_qstore_tsums {
    hs_qstore_tsum *rows; /* malloc'd */
    size_t n, cap;
    int64_t delta_rows; /* delta rows summed, over all traces */
} hs_qstore_tsums;

/* The whole heap at the end of a bucket, and its highest within it. */
typedef struct hs_qstore_heap {
    int64_t bucket, live_bytes, max_bytes, live_count;
} hs_qstore_heap;

/* A node of the stack tree: a trace is its leaf node; parent 0 at a root. */
typedef struct hs_qstore_node {
    int64_t parent, frame;
    int depth; /* 1 at a root */
} hs_qstore_node;

/* A frame; strings lent (until the next call), all three "" when there
 * is no such frame. */
typedef struct hs_qstore_frame {
    const char *function, *file, *module;
    int64_t line, module_offset;
} hs_qstore_frame;

/* A stored sampled event, its stack already a trace. */
typedef struct hs_qstore_event {
    int64_t t_ns, trace;
    uint64_t size, weight;
    int is_free;
} hs_qstore_event;

/* A mapping of the run's last mapping set; build_id's bytes and path lent. */
typedef struct hs_qstore_mapping {
    uint64_t start, end, offset;
    const void *build_id;
    size_t build_id_len;
    const char *path;
} hs_qstore_mapping;

/* events: from this moment is from the run's start. */
#define HS_QSTORE_FROM_START INT64_MIN

/* runs_summary's question: the runs matching every filter (as runs_find's,
 * at most limit, the newest), those with label by when by is set, and,
 * when code is set, the bytes of the stacks through some code in each run
 * at a moment. */
typedef struct hs_qstore_summary_ask {
    const hs_qstore_filter *f;
    int n;
    int64_t limit;
    const char *by; /* a label's key, or NULL */
    /* the code: a function's name (a stack through any frame of it counts
     * once), or a site: frames of file (its base name) at line */
    const char *function, *file;
    int64_t line;
    int code_at_end; /* the code's bytes at the end (the last keyframe), else at the peak */
} hs_qstore_summary_ask;

/* A run's summary; strings lent until the next row. A figure the store
 * cannot give is flagged absent (has_*). */
typedef struct hs_qstore_summary {
    int64_t id, start_unix_ns, duration_ns;
    const char *program, *state;
    const char *label; /* by's value (NULL without by) */
    int64_t peak_bytes, end_bytes, total_alloc_bytes, dropped_events;
    int64_t rss_peak_bytes, code_bytes;
    double leak_bytes_per_s;
    int has_rss, has_leak, has_code;
} hs_qstore_summary;

/* ---- the ops ------------------------------------------------------------------ */

struct hs_qstore_ops {
    const char *name; /* "sqlite" */
    void (*free)(hs_qstore *s);
    /* Between requests: nothing held open (no read transaction pinning an
     * old snapshot). */
    void (*idle)(hs_qstore *s);
    /* 1 when the store's location cannot be written, and why (a sentence
     * after its path), else 0. */
    int (*read_only)(hs_qstore *s, char *why, size_t len);

    /* -- runs -- */
    /* The ids of the runs matching every filter, newest first, at most
     * limit; *ids malloc'd (NULL when none). */
    int (*runs_find)(hs_qstore *s, const hs_qstore_filter *f, int n, int64_t limit, int64_t **ids,
                     size_t *nids, hs_qerr *err);
    /* The runs whose uuid starts with hex (any case): *matches 0, 1 or 2
     * (more than one), *id the one found. */
    int (*runs_by_uuid)(hs_qstore *s, const char *hex, int64_t *id, int *matches, hs_qerr *err);
    /* One run's record; HS_ENOENT when there is none. */
    int (*run)(hs_qstore *s, int64_t id, hs_qstore_run *out, hs_qerr *err);
    /* Its labels, by key. */
    int (*run_labels)(hs_qstore *s, int64_t id,
                      int (*cb)(const char *key, const char *value, void *data), void *data,
                      hs_qerr *err);

    /* -- a moment -- */
    /* The live traces at a moment, each once, unordered, with any row
     * (also those at 0 or below: the caller keeps what is live); *rows
     * malloc'd (NULL when none). */
    int (*state)(hs_qstore *s, const hs_qstore_moment *m, hs_qstore_live **rows, size_t *n,
                 hs_qerr *err);
    /* Every trace's changes in buckets <= upto, summed (hs_tstats), at a
     * cost of O(traces) where the store keeps summaries. */
    int (*trace_sums)(hs_qstore *s, int64_t run, int64_t upto, hs_qstore_tsums *out, hs_qerr *err);

    /* -- series -- */
    /* The heap at the end of each bucket with data, by bucket: the exact
     * totals' series when they are the run's figures (hs_qstore_exact). */
    int (*heap_series)(hs_qstore *s, int64_t run, int (*cb)(const hs_qstore_heap *h, void *data),
                       void *data, hs_qerr *err);
    /* Every trace's change in each bucket after after_bucket, by bucket. */
    int (*deltas)(hs_qstore *s, int64_t run, int64_t after_bucket,
                  int (*cb)(int64_t bucket, int64_t trace, int64_t bytes, void *data), void *data,
                  hs_qerr *err);
    /* One trace's change in each bucket of [first, last] where it changed,
     * by bucket. */
    int (*trace_deltas)(hs_qstore *s, int64_t run, int64_t trace, int64_t first, int64_t last,
                        int (*cb)(int64_t bucket, int64_t bytes, void *data), void *data,
                        hs_qerr *err);
    /* Process samples, by time. */
    int (*rss)(hs_qstore *s, int64_t run,
               int (*cb)(int64_t t_ns, int64_t rss_bytes, int64_t vsize_bytes, void *data),
               void *data, hs_qerr *err);
    /* The RSS of the latest sample at or before t_ns, 0 when none. */
    int (*rss_at)(hs_qstore *s, int64_t run, int64_t t_ns, int64_t *rss, hs_qerr *err);
    /* The allocation size histogram: power-of-two buckets, by bucket. */
    int (*sizes)(hs_qstore *s, int64_t run,
                 int (*cb)(int64_t bucket, int64_t allocs, int64_t bytes, void *data), void *data,
                 hs_qerr *err);

    /* -- stacks -- */
    /* One stack tree node; HS_EDB when missing. */
    int (*node)(hs_qstore *s, int64_t id, hs_qstore_node *out, hs_qerr *err);
    /* One frame (all strings "" when there is no such frame). */
    int (*frame)(hs_qstore *s, int64_t id, hs_qstore_frame *out, hs_qerr *err);

    /* -- events, mappings -- */
    /* The sampled events with from_ns <= t <= upto_ns (HS_QSTORE_FROM_START:
     * from the start), in the order they were stored; events of stacks the
     * run never defined are skipped. */
    int (*events)(hs_qstore *s, int64_t run, int64_t from_ns, int64_t upto_ns,
                  int (*cb)(const hs_qstore_event *e, void *data), void *data, hs_qerr *err);
    /* The run's last set of mappings, by start address. */
    int (*mappings)(hs_qstore *s, int64_t run, int (*cb)(const hs_qstore_mapping *m, void *data),
                    void *data, hs_qerr *err);
    /* The addresses the run's frames were seen at (pc, frame). */
    int (*pcs)(hs_qstore *s, int64_t run, int (*cb)(uint64_t pc, int64_t frame, void *data),
               void *data, hs_qerr *err);

    /* -- the store's own query language -- */
    /* /api/sql: one read-only statement in the store's dialect (SQLite's),
     * answered as docs/api.md says; NULL when the store has none. */
    int (*sql)(hs_qstore *s, const char *body, size_t len, json_t **out, hs_qerr *err);

    /* -- across runs -- */
    /* The summaries of the runs ask names, oldest first (start, then id),
     * in one question to the store whatever their number. */
    int (*runs_summary)(hs_qstore *s, const hs_qstore_summary_ask *ask,
                        int (*cb)(const hs_qstore_summary *r, void *data), void *data,
                        hs_qerr *err);
};

/* The SQLite store over the database file at path, opened read-only.
 * 0 or an HS_E code with err filled. */
int hs_qstore_sqlite_open(hs_qstore **out, const char *path, hs_qerr *err);

/* The version of the database layout this build writes (what /api/health
 * calls "schema"), also when no database could be opened. */
int hs_qstore_sqlite_schema(void);

/* hs_qstore_ops' free; accepts NULL. */
static inline void hs_qstore_free(hs_qstore *s)
{
    if (s) s->ops->free(s);
}

#endif

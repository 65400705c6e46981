/* q_internal: what the files of queries/ share and nobody else sees.
 *
 * The query handle (hs_q) over its store (hs_qstore.h: SQLite's today, the
 * only code of queries/ that speaks SQL); caches of trace nodes and frames,
 * which never change once written (the prefix tree and the frame table are
 * append-only), so they stay valid across queries; a resolved run (hs__run)
 * and the state of a run at a moment (hs__state: live bytes per trace).
 *
 * The files call one way, each only the ones below it (bench/layout/report.py
 * finds no cycle):
 *
 *   adapters    api.c, api_trend.c over api_params.c (api_internal.h);
 *               export.c (files from stacks.c's result)
 *   questions   check.c > gdiff.c > diff.c; top.c, views.c, leaks.c,
 *               history.c, runs.c, sizes.c, stacks.c, trend.c
 *   grouping    group.c (rows by site, function or stack, keyed by
 *               content; the content order of ties)
 *   core base   core.c (result pieces, parameters) > q.c (handle, runs,
 *               moments, state, stacks) > site.c (frame names and sites)
 *   store       store_sqlite.c > store_sqlite_trend.c, store_sqlite_sql.c
 *               > store_sqlite_base.c; store_clickhouse.c; store_acc.c
 *   foundations qbase.c (maps, buffer, errors), sel.c (selectors)
 *
 * Nothing here speaks HTTP: the adapter's declarations are in
 * api_internal.h, which no file under it includes.
 */
#ifndef HS_Q_INTERNAL_H
#define HS_Q_INTERNAL_H

#include <stdint.h>
#include <stdlib.h>

#include "hs_buf.h"
#include "hs_map.h"
#include "hs_core.h"
#include "hs_qstore.h"
#include "hs_tstats.h"

/* ---- the u64 -> u64 map of common/ (every key, 0 included, and value) ---- */
typedef hs_map hs__map;

static inline int hs__map_put(hs__map *m, uint64_t key, uint64_t val)
{
    return hs_map_put(m, key, val);
}
/* Returns 1 and sets *val when key is present, else 0. */
static inline int hs__map_get(const hs__map *m, uint64_t key, uint64_t *val)
{
    return hs_map_get(m, key, val);
}
static inline void hs__map_free(hs__map *m)
{
    hs_map_free(m);
}

/* A string -> index map; keys are copied, unless borrow is set: then they
 * are the caller's (NUL-terminated at their length), neither copied nor
 * freed, and must outlive the map. */
typedef struct hs__smap {
    char **keys;
    uint64_t *hashes;
    size_t *vals;
    size_t cap, n;
    int borrow;
} hs__smap;
/* Returns the index stored for key, or stores next and returns it (*added=1).
 * Returns (size_t)-1 when out of memory. */
size_t hs__smap_intern(hs__smap *m, const char *key, size_t len, size_t next, int *added);
/* The same, with the key as stored (lasting until hs__smap_free) in *stored. */
size_t hs__smap_put(hs__smap *m, const char *key, size_t len, size_t next, int *added,
                    const char **stored);
void hs__smap_free(hs__smap *m);

typedef struct hs__frame {
    char *function, *file, *module;
    int64_t line, module_offset;
    char *name;  /* function less clone suffixes (site.c), or "module+0xoff" when unknown */
    char *label; /* "name (file:line)" when a file is known, else name */
    unsigned char python;    /* a Python frame: a function and no module */
    unsigned char machinery; /* HS_MACH_*: what site.c skips to find a stack's site */
    size_t slot; /* its index in q's frame cache (hs_q.frames), for a request's arrays */
} hs__frame;

/* ---- sites (site.c) ---------------------------------------------------------- */

enum { HS_MACH_NONE, HS_MACH_ALLOC, HS_MACH_STDLIB };
/* function's display name: clone suffixes removed (malloc'd; NULL when out
 * of memory). python: a Python qualified name, kept as it is. */
char *hs__fn_name(const char *function, int python);
/* Sets f->python and f->machinery from its names. */
void hs__frame_classify(hs__frame *f);
/* Applies a request's rules (and HEAPSTORE_ALLOC_WRAPPERS); the per-trace
 * cache is dropped when they change. 0, or HS_EINVAL in err. */
int hs__site_apply(hs_q *q, const hs_site_rules *r, hs_qerr *err);
/* Drops the site caches past what an idle connection keeps (between
 * requests); 1 when it freed something. */
int hs__site_trim(hs_q *q);
/* The index of the site in frames[0..depth) (leaf first), trace's stack. */
int hs__site_index(hs_q *q, int64_t trace, const int64_t *frames, int depth, hs_qerr *err);
/* The site's index in a stack of frames, uncached (>= 0, or an HS_E code). */
int hs__site_of(hs_q *q, const int64_t *frames, int depth, hs_qerr *err);

struct hs_q {
    hs_qstore *store; /* where the runs are (owned) */
    char *path;       /* the database named at open */
    int series_path;  /* history's points: 0 the cheaper way, 1 lookups, 2 a pass (tests) */
    hs__map node_idx; /* trace node id -> index into nodes */
    struct hs__node {
        int64_t parent, frame;
        int32_t depth;
    } * nodes;
    size_t nnodes, capnodes;
    hs__map frame_idx;  /* frame id -> index into frames */
    hs__frame **frames; /* each allocated alone: pointers stay valid until hs__cache_trim */
    size_t nframes, capframes;
    size_t node_misses; /* trace nodes read from the database in this request */
    /* sites (site.c): the current rules and trace -> site frame under them */
    int site_mode;            /* HS_SITE_* */
    char site_wrappers[2048]; /* comma-separated user wrappers */
    hs__map site_cache;       /* trace -> site frame id */
    hs__map site_class;       /* frame id -> its class under the rules (site.c) */
    int big;                  /* the last request was big: trim malloc's pages */
};

/* Releases what a decoded result held (hs_core.h), once. */
static inline void hs__held_release(hs_qheld *h)
{
    if (h->release) h->release(h->data);
    *h = (hs_qheld){0};
}

/* Fills err (code: a negative HS_E code) and returns code. */
int hs__err(hs_qerr *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* A run resolved from a selector. */
typedef struct hs__run {
    int64_t id;
    int64_t g;              /* granularity_ns */
    int64_t keyframe_every; /* buckets */
    int64_t end_ns;         /* duration so far */
    int64_t main_end_ns;    /* when the program's main code finished, 0 when unknown */
    int64_t last_bucket;    /* last bucket with data, -1 when none */
    int64_t peak_t_ns, peak_bytes, end_bytes;
    int64_t sample_bytes;
    hs_run_record rec; /* its whole record; strings in strs and labels (owned) */
    char *strs;
    hs_qlabel *labels;
    size_t caplabels;
} hs__run;

int hs__run_resolve(hs_q *q, const hs_run_sel *sel, hs__run *out, hs_qerr *err);
int hs__run_load(hs_q *q, int64_t id, hs__run *out, hs_qerr *err);
#define MAX_RUN_FILTERS 24
/* The ids of the runs matching every key=value (at most MAX_RUN_FILTERS),
 * newest first, at most limit; *ids malloc'd. */
int hs__runs_select(hs_q *q, const char *const *keys, const char *const *values, int n,
                    int64_t limit, int64_t **ids, size_t *nids, hs_qerr *err);
void hs__run_clear(hs__run *r);

/* A moment of a run. */
typedef struct hs__at {
    int kind;       /* HS_TSEL_* */
    int64_t bucket; /* state at the end of this bucket (unless peak); -1: none */
    int64_t at_ns;
    /* 1: the state is the one at at_ns exactly (the end of a program's main
     * code): bucket's state (bucket is the last one that ends before at_ns)
     * plus the stored events from then up to at_ns */
    int exact;
} hs__at;

int hs__at_resolve(hs_q *q, const hs__run *run, const hs_t_sel *t, hs__at *out, hs_qerr *err);

typedef hs_qstore_live hs__live;

typedef struct hs__state {
    hs__live *rows; /* live traces (bytes > 0 or count > 0), unordered */
    size_t n;
    int64_t total_bytes, total_count;
} hs__state;

int hs__state_at(hs_q *q, const hs__run *run, const hs__at *at, hs__state *out, hs_qerr *err);
void hs__state_clear(hs__state *s);

/* The delta rows of a run summed per trace (schema/hs_tstats.h), for the
 * traces with delta rows in buckets <= upto: the stored summaries
 * (trace_stats) plus the delta rows written after them (the writer keeps
 * those to a few per trace, server/store_rollup.c), which costs O(traces)
 * whatever the run's length; a database of schema 1 has no summaries, and
 * then every delta row is read. Rows are
 * in the order of their traces' first delta row (bucket, then trace), the
 * order in which one pass over the delta rows meets them. */
typedef hs_qstore_tsum hs__tsum;
typedef hs_qstore_tsums hs__tsums;
int hs__tsums_load(hs_q *q, const hs__run *run, int64_t upto, hs__tsums *out, hs_qerr *err);
void hs__tsums_clear(hs__tsums *t);

/* Frames of a trace, leaf first, into out (at most max). Returns the depth
 * (>= 0) or a negative HS_E code. */
int hs__stack(hs_q *q, int64_t trace, int64_t *out, int max, hs_qerr *err);
/* The frame id of trace's site (0 for an empty stack; site.c's rules),
 * cached per trace. 0 or an HS_E code. */
int hs__site(hs_q *q, int64_t trace, int64_t *frame, hs_qerr *err);
const hs__frame *hs__frame_get(hs_q *q, int64_t frame, hs_qerr *err);
/* Frames in content order: name, file, line, module, offset, function. */
int hs__frame_cmp(const hs__frame *a, const hs__frame *b);
/* Traces a and b in content order into *out (<0, 0, >0): their sites'
 * frames (hs__frame_cmp; an empty stack first), then their stacks leaf
 * first, frame by frame (the shorter first), then (the same content
 * twice) their ids. 0 or an HS_E code. */
int hs__trace_cmp(hs_q *q, int64_t a, int64_t b, int *out, hs_qerr *err);
/* Rows that tie in content order: base holds n elements of size sz sorted
 * by an int64_t weight (at weight_off), each naming a trace (int64_t at
 * trace_off); every run of equal weights that starts before want is
 * ordered by its traces' content (hs__trace_cmp), so that no store's ids
 * decide an order. 0 or an HS_E code. */
int hs__ties_by_content(hs_q *q, void *base, size_t n, size_t sz, size_t weight_off,
                        size_t trace_off, size_t want, hs_qerr *err);
/* s's rows by bytes, largest first, ties in content order up to want
 * rows (hs__ties_by_content; SIZE_MAX: all). 0 or an HS_E code. */
int hs__state_rank(hs_q *q, hs__state *s, size_t want, hs_qerr *err);
/* Drops the caches if they grew past what an idle connection keeps; only
 * between requests. Returns 1 when it freed something. */
int hs__cache_trim(hs_q *q);
/* 1 when the frame cache is at its cap: a view takes no more new stacks
 * (and says so in its answer), which bounds a request's memory. */
int hs__frames_full(const hs_q *q);
/* An answer stops taking rows past about this many bytes of JSON. */
#define HS_ANSWER_BYTES (8u << 20)

/* qsort for arrays that may be empty: an answer with nothing in it (a run
 * with nothing live) has no array at all (NULL), which qsort must not be
 * given (UBSan stops a sanitized server on it). */
static inline void hs__sort(void *base, size_t n, size_t size,
                            int (*cmp)(const void *, const void *))
{
    if (n > 1) qsort(base, n, size, cmp);
}

/* One trace node (parent node id, frame id, depth: 1 at a root), cached. */
int hs__node(hs_q *q, int64_t id, int64_t *parent, int64_t *frame, int *depth, hs_qerr *err);

/* The flame tree of a state: nodes are trace nodes; n[0] is the root "all". */
typedef struct hs__fnode {
    int64_t frame, parent_node;
    int64_t bytes, count, self_bytes, self_count;
    size_t first_child, next_sibling; /* indexes, (size_t)-1 for none */
} hs__fnode;
typedef struct hs__flame {
    hs__fnode *n;
    size_t len, cap;
    hs__map idx; /* trace node id -> index */
    /* what the build left out: stacks past the node budget (the smallest),
     * frames deeper than max_depth */
    size_t stacks_omitted;
    int64_t omitted_bytes, omitted_count;
    int depth_cut;
} hs__flame;
/* Sorts s's rows by bytes, largest first, and builds the tree of their
 * frames down to max_depth, taking stacks while the tree has fewer than
 * max_nodes nodes. */
int hs__flame_build(hs_q *q, hs__state *s, int max_depth, size_t max_nodes, hs__flame *f,
                    hs_qerr *err);
void hs__flame_free(hs__flame *f);

/* The stacks of state s (run at at), sorted by bytes, and with allocs the
 * sampled allocations up to at (stacks.c); hs_stacks_result_clear frees. */
int hs__stacks_build(hs_q *q, const hs__run *run, const hs__at *at, hs__state *s, int allocs,
                     hs_stacks_result *out, hs_qerr *err);

/* name in a collapsed stack: ';' separates frames and the last ' ' the
 * count, so they become ':' and '_' (export's collapsed and diff's alike). */
void hs__collapsed_put(hs_buf *b, const char *name);
/* The integer parameter key from its text v: 0, or HS_EINVAL unless a
 * decimal in [lo, hi]. */
int hs__int_text(const char *key, const char *v, int64_t lo, int64_t hi, int64_t *out,
                 hs_qerr *err);

/* The typed parts of results (core.c): a run's brief (lending run's record),
 * a cached frame as a result's frame (lending its strings), and trace's
 * stack cut to max_frames (frames lent from the frame cache; out->frames
 * malloc'd, the caller frees it, also on failure). */
int hs__run_brief(hs_run_brief *out, const hs__run *run);
hs_qframe hs__qframe(const hs__frame *f);
int hs__qstack(hs_q *q, int64_t trace, int max_frames, hs_qstack *out, hs_qerr *err);
/* A resolved moment's name in answers: "peak", "end", "exit" or its
 * seconds from the start ("%.9g", in buf). */
const char *hs__at_name(const hs__at *at, char *buf, size_t len);
/* Live rows by bytes, largest first (then by trace). */
int hs__cmp_live_bytes(const void *a, const void *b);

/* The parameters of questions answering rows with stacks (top, leaks):
 * limit (1 to limit_hi), max_frames, site, wrappers; other keys are left
 * alone. 0 or HS_EINVAL. */
int hs__rows_param(const char *key, const char *value, int64_t limit_hi, int64_t *limit,
                   int *max_frames, hs_site_rules *site, hs_qerr *err);

/* The k-th largest of the n values at w (1 <= k <= n); sorts w, descending:
 * where the answers cut a tree to its k widest nodes. */
int64_t hs__kth_largest(int64_t *w, size_t n, size_t k);

/* ---- the grouping engine (group.c) ------------------------------------------ */

/* Rows of a grouping keyed by content (group.c says what identifies a row
 * of each hs_group). A trace's entries are worked out once: at ents[head]
 * a header (row: how many entries follow), then one entry a row it counts
 * for (by function, each function once a stack, site marking the one
 * holding the stack's site). */
typedef struct hs__gent {
    size_t row;
    const hs__frame *frame; /* the frame naming the row in this stack (NULL: empty stack) */
    int site;
} hs__gent;
typedef struct hs__grow {
    const char *key;            /* its content key (held by the grouping; NULL by site and
                                 * by stack with file and line: its frame is its key) */
    const hs__frame *frame;     /* names the row (NULL: empty stacks, or not read yet:
                                 * hs__group_frame) */
    int64_t fid;                /* by site, and stack with file and line: its site frame */
    int64_t trace, trace_bytes; /* the representative: the trace holding most */
    uint64_t seen;
    uint32_t gen; /* times the representative held more than the one before */
} hs__grow;
/* A trace offered as a row's representative that held as much as it. */
typedef struct hs__gtie {
    size_t row;
    int64_t trace;
    const hs__frame *frame;
    uint32_t gen; /* the row's gen then: an older one was outgrown */
} hs__gtie;
/* NAMES: frames matched by name only (across builds); EMPTY: empty stacks
 * count for a row keyed "" (frame NULL); ALL: every trace placed, past the
 * frames a request may read too; ONCE: each trace is asked for once (its
 * entries last until the next is asked for); KEPT: each trace is asked for
 * once and its entries last: the caller keeps its head (no trace index). */
enum {
    HS__GROUP_NAMES = 1,
    HS__GROUP_EMPTY = 2,
    HS__GROUP_ALL = 4,
    HS__GROUP_ONCE = 8,
    HS__GROUP_KEPT = 16
};
#define HS__GNONE ((size_t)-1)
typedef struct hs__grouping {
    hs_q *q;
    hs_group by;
    int names;
    int empty, all, once, kept;
    uint64_t ntraces; /* traces placed */
    hs__smap keys;    /* key -> row (by function, and with names) or the keys held */
    hs__map fidx;     /* frame id -> its row (by site without names) */
    size_t *slot_row; /* by name: a frame's row by its slot (hs__frame), NONE when not met */
    size_t nslots;
    hs__grow *rows;
    size_t n, cap;
    hs__map tidx; /* trace -> head of its entries */
    hs__gent *ents;
    size_t nents, capents;
    hs__gtie *ties; /* ties of representatives, settled when asked */
    size_t nties, capties;
    int ties_oom;
    hs_buf key;
} hs__grouping;
void hs__group_init(hs__grouping *g, hs_q *q, hs_group by, int flags);
void hs__group_free(hs__grouping *g);
/* Room for rows rows (a hint: the rows grow past it as needed). 0 or
 * HS_ENOMEM. */
int hs__group_reserve(hs__grouping *g, size_t rows);
/* The head of trace's entries in g->ents (worked out once), or HS__GNONE
 * when the request's frames ran out (hs__frames_full). 0 or an HS_E code. */
int hs__group_trace(hs__grouping *g, int64_t trace, size_t *head, hs_qerr *err);
/* The same for a trace whose stack the caller has read: its d frame ids
 * (leaf first) and their frames, every one read. */
int hs__group_stack(hs__grouping *g, int64_t trace, const int64_t *frames,
                    const hs__frame *const *fr, int d, size_t *head, hs_qerr *err);
/* Offers trace (holding bytes) as the representative of the row of entry
 * j (1 ..) of head: the most bytes, ties to the first in content order
 * (hs__trace_cmp), which hs__group_settle works out. */
void hs__group_offer(hs__grouping *g, size_t head, size_t j, int64_t trace, int64_t bytes);
/* Settles the ties of the representatives of the n rows at rows (NULL:
 * of every row): only the rows shown pay for their ties. 0 or HS_ENOMEM. */
int hs__group_settle(hs__grouping *g, const size_t *rows, size_t n, hs_qerr *err);
/* Row's frame (read when first asked; NULL for empty stacks, or when it
 * cannot be read, err then set). */
const hs__frame *hs__group_frame(hs__grouping *g, size_t row, hs_qerr *err);
/* Rows a and b in content order (their keys, else their frames by
 * hs__frame_cmp, rows that are traces then by hs__trace_cmp): how rows
 * that tie are ordered. */
int hs__group_cmp(hs__grouping *g, size_t a, size_t b);

/* Group diff (gdiff.c): the sampling variance of a trace's estimated bytes
 * (count: its estimated blocks) in a run of sample_bytes sample
 * (hs_core.h says how), and the runs a side's selector names (every match
 * of a group, at most HS_GDIFF_MAX_RUNS; else one run) into out's runs,
 * nruns, more and selector. */
double hs__sampling_var(int64_t bytes, int64_t count, int64_t sample);
int hs__gdiff_runs(hs_q *q, const hs_diff_side_sel *sel, hs_gdiff_side *out, hs_qerr *err);

/* ---- a moment's state built up from rows (store_acc.c, for the stores) ---- */

/* Live bytes and count per trace, each trace once (rows in first-seen
 * order; idx maps a trace to its row). A zeroed one is empty. */
typedef struct hs__state_acc {
    hs_map idx;
    hs_qstore_live *rows;
    size_t n, cap;
} hs__state_acc;
/* Adds to trace's row (made when new). 0 or HS_ENOMEM. */
int hs__acc_add(hs__state_acc *a, int64_t trace, int64_t bytes, int64_t count);
/* Adds store s's events of run with from <= t <= upto (its events op),
 * counts rounded per trace as the rollups round them. */
int hs__acc_events(hs_qstore *s, int64_t run, int64_t from, int64_t upto, hs__state_acc *a,
                   hs_qerr *err);
/* The state op's end: a's rows to the caller (*rows malloc'd, NULL when
 * none), or, when rc is an error, none; returns rc. */
int hs__acc_finish(hs__state_acc *a, int rc, hs_qstore_live **rows, size_t *n);

#endif

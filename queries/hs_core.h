/* hs_core: the typed query core of heapstore.
 *
 * C functions that take typed parameters and return typed results, so that
 * the JSON API (api.c, over HTTP in server/http.c) and the CLI's tables are
 * adapters over one answer. This header holds what every adapter shares:
 * the one error type of the query layer (an HS_E code and a sentence; the
 * HTTP status is the API adapter's business), every default defined once,
 * the grouping of a moment's state (one enum), the selectors (RUN, T,
 * RUN@T: pure parsers), the one frame label, and the typed questions with
 * their results.
 *
 * Ownership: a result is filled by its hs_core_* call and released with its
 * _clear function. Strings in a result are lent: they live in the hs_q's
 * caches (or, for a result decoded from JSON, in the JSON it was decoded
 * from) and stay valid until the next call on the same hs_q; copy what must
 * outlive that. An hs_q is used by one thread at a time.
 */
#ifndef HS_CORE_H
#define HS_CORE_H

#include <stddef.h>
#include <stdint.h>

typedef struct hs_q hs_q;

/* ---- the one error type -------------------------------------------------- */

/* An error for a person: code is a negative HS_E code (hs_error.h): EINVAL
 * a bad parameter, ENOENT no such run, ETOOBIG a request past a bound,
 * ETIMEOUT a query stopped at its time limit, ENOMEM, EDB and ECORRUPT the
 * server's trouble. */
typedef struct hs_qerr {
    int code;
    char msg[512];
} hs_qerr;

/* Opens db_path read-only. Returns 0 or an HS_E code with err filled. */
int hs_q_open(hs_q **out, const char *db_path, hs_qerr *err);
void hs_q_free(hs_q *q);

/* ---- defaults, each defined once ------------------------------------------ */

/* The API's documented defaults (docs/api.md). */
#define HS_RUNS_LIMIT  100 /* runs listed */
#define HS_TOP_LIMIT   50  /* top's rows */
#define HS_LEAKS_LIMIT 20  /* leaks: rows of each list */
#define HS_DIFF_LIMIT  100 /* diff's rows */
#define HS_TOP_AT      "peak"
#define HS_FLAME_AT    "peak"
#define HS_EXPORT_AT   "peak"
#define HS_DIFF_AT     "end" /* RUN without @T in a diff */
/* The CLI's tables show fewer rows (its documented choice, in its help). */
#define HS_CLI_TOP_LIMIT   20
#define HS_CLI_LEAKS_LIMIT 10
#define HS_CLI_DIFF_LIMIT  20

/* Frames per stack in an answer's stacks (max_frames=), and the deepest
 * stack read. */
#define HS_STACK_FRAMES 64
#define HS_MAX_DEPTH    1024

/* ---- grouping ------------------------------------------------------------- */

/* What a row of a moment's state (top, diff, group diff, check, leaks'
 * growing sites) stands for, one numbering for every question: a stack's
 * site (site.c: its function, file and line), a function (every function
 * of a stack counts it once in its total, the site's function in its
 * self), or the whole stack. A row is what its frames are, never a store's
 * id; one grouping engine (queries/group.c) counts every question's rows. */
typedef enum hs_group { HS_GROUP_SITE, HS_GROUP_FUNCTION, HS_GROUP_STACK } hs_group;

/* "site", "function", "stack" -> *out; -1 for anything else. */
int hs_group_parse(const char *s, hs_group *out);
const char *hs_group_name(hs_group g);

/* ---- frame labels --------------------------------------------------------- */

/* "name (file.c:12)": the base name of file and the line, or just name when
 * there is no file. Writes at most len bytes (NUL included); returns the
 * length it wanted, as snprintf does. The one label of a frame, for the
 * answers (history's names) and the CLI's tables alike. */
int hs_frame_label(char *buf, size_t len, const char *name, const char *file, int64_t line);

/* ---- selectors (pure) ---------------------------------------------------- */

#define HS_SEL_MAX_KV 16

enum hs_run_sel_kind {
    HS_RUNSEL_ID,     /* digits: a run id (or, if no such id, a uuid prefix) */
    HS_RUNSEL_UUID,   /* hex: a unique prefix of a run's uuid */
    HS_RUNSEL_LATEST, /* "latest" */
    HS_RUNSEL_MATCH,  /* key=value[,key=value…][,latest]: the newest match, or, where a
                         question takes a group of runs (diff, check) and without ',latest',
                         every match */
};

typedef struct hs_run_sel {
    int kind;
    int64_t id;
    char hex[33];
    int nkv;
    struct {
        char key[64];
        char value[256];
    } kv[HS_SEL_MAX_KV];
    int latest; /* HS_RUNSEL_MATCH: ended in ",latest" (always one run) */
} hs_run_sel;

/* END is the end of the program's main code where the run knows it (a
 * Python program: before its interpreter's teardown), else the process's
 * end; EXIT is always the process's end. */
enum hs_t_sel_kind { HS_TSEL_SECONDS, HS_TSEL_PEAK, HS_TSEL_END, HS_TSEL_EXIT };

typedef struct hs_t_sel {
    int kind;
    int64_t ns; /* HS_TSEL_SECONDS: nanoseconds from the run's start */
} hs_t_sel;

/* Each returns 0 or HS_EINVAL with a sentence in err. */
int hs_sel_parse_run(hs_run_sel *out, const char *s, hs_qerr *err);
int hs_sel_parse_t(hs_t_sel *out, const char *s, hs_qerr *err);
/* 1 when sel may name a group of runs (key=value… without ",latest"),
 * where diff and check take every match; elsewhere the newest match. */
int hs_sel_is_group(const hs_run_sel *sel);
/* id=A..B: 1 and the bounds (inclusive) when v is "A..B" with A <= B. */
int hs_sel_id_range(const char *v, int64_t *lo, int64_t *hi);
/* "RUN@T"; T defaults to def (e.g. "end") when there is no '@'. */
int hs_sel_parse_at(hs_run_sel *run, hs_t_sel *t, const char *s, const char *def, hs_qerr *err);

/* For a question whose parameters were refused (rc, err filled): a missing
 * run is named first, as the API always has (404 before 400). Returns the
 * run's error when it cannot be resolved, else rc with err unchanged. */
int hs_run_check(hs_q *q, const hs_run_sel *sel, hs_qerr *err, int rc);

/* ---- sites ---------------------------------------------------------------- */

/* What names a stack (site.c): user (the default), alloc or leaf, and more
 * allocation wrappers to look through (comma-separated, lent; added to
 * HEAPSTORE_ALLOC_WRAPPERS). */
enum hs_site_mode { HS_SITE_USER, HS_SITE_ALLOC, HS_SITE_LEAF };
typedef struct hs_site_rules {
    int mode;
    const char *wrappers; /* NULL: none */
} hs_site_rules;

/* site= and wrappers= (either may be NULL) -> out. 0 or HS_EINVAL. */
int hs_site_rules_parse(hs_site_rules *out, const char *site, const char *wrappers, hs_qerr *err);

/* ---- shared parts of results ---------------------------------------------- */

/* What a result made elsewhere (the CLI decodes a server's answer into the
 * core's result types) lends its strings from: the result's _clear calls
 * release(data) when release is set. */
typedef struct hs_qheld {
    void *data;
    void (*release)(void *data);
} hs_qheld;

/* A frame as answers show it: name is the function less clone suffixes
 * (or "module+0xoff"), file and module "" when unknown. Lent strings. */
typedef struct hs_qframe {
    const char *name, *file, *module;
    int64_t line;
} hs_qframe;

/* A stack, leaf first, cut to max_frames: depth is the whole stack's depth
 * (> n when it was cut), site its site's index in the whole stack. */
typedef struct hs_qstack {
    hs_qframe *frames;
    int n, depth, site;
} hs_qstack;

/* ---- a run's record ---------------------------------------------------- */

typedef struct hs_qlabel {
    const char *key, *value;
} hs_qlabel;

/* What the collector dropped or could not do, each a count (of events, or
 * bytes for the _BYTES ones); hs_run_drop_name is each one's name in the
 * API's "dropped" object, in this order. */
enum hs_run_drop {
    HS_RUNDROP_ALLOC_EVENTS,
    HS_RUNDROP_FREE_EVENTS,
    HS_RUNDROP_ALLOC_BYTES,
    HS_RUNDROP_FREE_BYTES,
    HS_RUNDROP_STACKS_TRUNCATED,
    HS_RUNDROP_UNWIND_FAILED,
    HS_RUNDROP_LIVE_SET_FULL,
    HS_RUNDROP_PYTHON_FALLBACK,
    HS_RUNDROP_PYTHON_SMALL_UNSEEN,
    HS_RUNDROP__COUNT
};
const char *hs_run_drop_name(int d);

/* How a run was sampled (the API's "sampling" object). */
typedef struct hs_run_sampling {
    int64_t sample_bytes; /* the mean interval between samples; 1: every allocation */
    int64_t max_depth;    /* frames per stack the collector kept */
    int64_t dropped[HS_RUNDROP__COUNT];
} hs_run_sampling;

/* The collector's exact totals (the API's "exact" object), when it sent
 * them (has). in_figures: the record's peak_bytes, peak_t_ns, end_bytes,
 * end_count and totals are these exact figures (else the sampled ones, at
 * every-allocation sampling or when samples see what the totals do not);
 * est_peak_* is the sampled series' peak. */
typedef struct hs_run_exact {
    int has, in_figures;
    const char *sizes; /* "malloc_usable_size" or "glibc chunk sizes" (static) */
    int64_t allocs, frees, alloc_bytes, free_bytes, error_bytes;
    int64_t est_peak_bytes, est_peak_t_ns;
} hs_run_exact;

/* A run's whole record, as the core reads it from its store (q.c) and as
 * the API's "run" object shows it (api.c encodes it; the CLI decodes it
 * from a server's answer). Strings lent, never NULL (labels and argv_json
 * may be empty in a record decoded from an answer that has none). */
typedef struct hs_run_record {
    int64_t id;
    const char *uuid; /* 32 hex digits */
    const char *program, *host, *collector_version;
    const char *state;     /* "open", "ended" or "lost" */
    const char *argv_json; /* the arguments: a JSON array's text, as stored ("" none) */
    int64_t pid, ppid;
    int has_parent;    /* parent_id is known */
    int64_t parent_id; /* the run of the process that started it */
    const hs_qlabel *labels;
    size_t nlabels;
    int64_t start_unix_ms, duration_ns;
    int clean_exit; /* ended through exit(): 1, 0, or -1 unknown */
    int64_t peak_bytes, peak_count, peak_t_ns, end_bytes, end_count;
    int64_t total_alloc_bytes, total_alloc_count, alloc_events, free_events;
    int64_t granularity_ns, keyframe_every;
    int has_bye_alloc, has_bye_free; /* the counts the collector said it sent */
    int64_t bye_alloc_events, bye_free_events;
    int64_t main_end_ns; /* the end of the program's main code; 0 unknown */
    hs_run_exact exact;
    hs_run_sampling sampling;
} hs_run_record;

/* The run a result is about: what the tables print, and its whole record. */
typedef struct hs_run_brief {
    int64_t id;
    const char *program;
    int64_t sample_bytes;
    int open;       /* still running (state "open") */
    int clean_exit; /* ended through exit() */
    hs_run_record record;
} hs_run_brief;

/* A brief of record (its strings lent from it). */
void hs_run_brief_of(hs_run_brief *out, const hs_run_record *record);

/* ---- runs: the stored runs, and one run ----------------------------------- */

#define HS_RUNS_MAX_FILTERS 24

typedef struct hs_runs_params {
    int64_t limit; /* runs, 1 to 100000 */
    int nfilters;  /* all must hold */
    struct {
        char key[128];     /* program, host, pid, state, or a label's key */
        const char *value; /* lent */
    } filter[HS_RUNS_MAX_FILTERS];
} hs_runs_params;

/* Defaults: HS_RUNS_LIMIT runs, no filter. */
void hs_runs_params_init(hs_runs_params *p);
/* Sets limit, or adds a filter: before (a run id: the runs listed after it,
 * for paging), program, host, pid or state, parent (the
 * runs a run started) or root (a run and every run below it in its
 * process tree) (an empty value is no filter) or label (key=value). Other keys are ignored. 0 or
 * HS_EINVAL with the sentence the API answers. value is lent to p. */
int hs_runs_param(hs_runs_params *p, const char *key, const char *value, hs_qerr *err);

/* A run as the listing shows it; the whole record is brief.record. */
typedef struct hs_run_info {
    hs_run_brief brief;
    const char *host, *state; /* state: "open", "ended" or "lost" */
    int64_t start_unix_ms, duration_ns, peak_bytes, end_bytes;
    int64_t events;         /* allocations and frees received */
    int64_t dropped_events; /* allocations and frees the collector dropped */
    int has_clean_exit;     /* clean_exit is known */
    int64_t parent_id;      /* the run of the process that started it (fork, exec); 0: none */
    const hs_qlabel *labels;
    size_t nlabels;
} hs_run_info;

typedef struct hs_runs_result {
    hs_run_info *runs; /* newest first */
    size_t nruns;
    int64_t next;      /* paging: before= this run id lists the next page; 0 when none */
    hs_qlabel *labels; /* a decoded result's labels, one array (owned); NULL: lent by runs */
    void *own;
    hs_qheld held; /* as in hs_top_result */
} hs_runs_result;

int hs_core_runs(hs_q *q, const hs_runs_params *p, hs_runs_result *out, hs_qerr *err);
/* One run: a result of one run (nruns = 1), or HS_ENOENT. */
int hs_core_run(hs_q *q, const hs_run_sel *sel, hs_runs_result *out, hs_qerr *err);
void hs_runs_result_clear(hs_runs_result *r);

/* ---- history: a run's heap over time ------------------------------------ */

#define HS_HISTORY_TOP_MAX 1000 /* series of the top N traces */
#define HS_HISTORY_TRACES  64   /* series asked for by trace id */

typedef struct hs_history_params {
    hs_run_sel run;
    int64_t top;                       /* series of the N traces highest at any moment, 0 to 1000 */
    int64_t traces[HS_HISTORY_TRACES]; /* and of these traces (each once) */
    size_t ntraces;
    hs_site_rules site; /* what names a series */
} hs_history_params;

/* Defaults: no series, user sites; run must still be set. */
void hs_history_params_init(hs_history_params *p);
/* top, trace (ids separated by commas), site, wrappers, as hs_top_param. */
int hs_history_param(hs_history_params *p, const char *key, const char *value, hs_qerr *err);

/* The heap at the end of a point's buckets, and the highest within them. */
typedef struct hs_history_point {
    int64_t t_ns, heap_bytes, heap_max_bytes, heap_count;
} hs_history_point;

typedef struct hs_rss_point {
    int64_t t_ns, rss_bytes, vsize_bytes;
} hs_rss_point;

typedef struct hs_series_point {
    int64_t t_ns, bytes;
} hs_series_point;

/* A trace's live bytes over the run: a point where they changed. */
typedef struct hs_history_series {
    int64_t trace;
    const char *name; /* its site's frame label, "?" for an empty stack */
    hs_qstack stack;  /* HS_STACK_FRAMES frames at most (depth: the whole) */
    hs_series_point *points;
    size_t npoints;
    int64_t max_bytes;
} hs_history_series;

typedef struct hs_history_result {
    hs_run_brief run;
    int64_t peak_bytes, peak_t_ns, end_bytes;
    int64_t granularity_ns; /* of a point */
    hs_history_point *points;
    size_t npoints;
    hs_rss_point *rss; /* the highest sample of each point's span */
    size_t nrss;
    hs_history_series *series; /* top first, then those asked for */
    size_t nseries;
    /* what the answer merged or left out (truncated when cut is set) */
    int cut;
    int64_t buckets_per_point, rss_samples;
    int series_cut; /* the series stopped at their bound of points */
    void *own;
    hs_qheld held; /* as in hs_top_result */
} hs_history_result;

int hs_core_history(hs_q *q, const hs_history_params *p, hs_history_result *out, hs_qerr *err);
/* The heap's points, one a bucket, as CSV ("t_ns,heap_bytes,heap_max_bytes,
 * rss_bytes" lines, rss the latest sample at or before each point): a file
 * as an export's (hs_export_result, below; hs_export_result_clear). */
typedef struct hs_export_result hs_export_result;
int hs_core_history_csv(hs_q *q, const hs_run_sel *run, hs_export_result *out, hs_qerr *err);
void hs_history_result_clear(hs_history_result *r);

/* ---- top: a moment's state, grouped ---------------------------------------- */

typedef struct hs_top_params {
    hs_run_sel run;
    hs_t_sel at;
    hs_group by;
    int64_t limit;  /* rows, 1 to 1000000 */
    int max_frames; /* frames per row's stack, 1 to HS_MAX_DEPTH */
    hs_site_rules site;
} hs_top_params;

/* Defaults (at peak, by site, HS_TOP_LIMIT rows, HS_STACK_FRAMES frames,
 * user sites); run must still be set. */
void hs_top_params_init(hs_top_params *p);
/* Sets the parameter named key (at, by, limit, max_frames, site,
 * wrappers) from its text as the API and the CLI take it; other keys are
 * ignored. 0 or HS_EINVAL with the sentence both print. value is lent to p
 * (wrappers). */
int hs_top_param(hs_top_params *p, const char *key, const char *value, hs_qerr *err);

typedef struct hs_top_row {
    hs_qframe frame; /* by function: file "" and line 0 */
    int64_t trace;   /* the row's largest trace */
    int64_t self_bytes, self_count, total_bytes, total_count;
    double share;    /* of the moment's bytes: self by function, else total */
    hs_qstack stack; /* the trace's stack (none by function: n = depth = 0) */
} hs_top_row;

typedef struct hs_top_result {
    hs_run_brief run;
    char at[32]; /* "peak", "end", "exit" or seconds */
    int64_t at_ns;
    hs_group by;
    int64_t total_bytes, total_count;
    int64_t rows_total; /* rows before the limit */
    hs_top_row *rows;
    size_t nrows;
    /* what the answer left out (truncated when any is set) */
    int frames_cut;         /* a stack was cut to max_frames */
    int max_frames;         /* the cut */
    int64_t stacks_omitted; /* stacks past what a request may read */
    int64_t stacks_bytes;
    int64_t rows_cut; /* rows within the limit left out (answer_bytes) */
    int bytes_cut;    /* stopped at the answer's byte bound */
    void *own;        /* what the result holds (freed by _clear) */
    hs_qheld held;    /* a decoded result: what its strings live in */
} hs_top_result;

int hs_core_top(hs_q *q, const hs_top_params *p, hs_top_result *out, hs_qerr *err);
void hs_top_result_clear(hs_top_result *r);

/* ---- leaks: what was live at the end, and what grew --------------------- */

typedef struct hs_leaks_params {
    hs_run_sel run;
    int64_t limit;  /* rows of each list, 1 to 100000 */
    int max_frames; /* frames per row's stack */
    hs_site_rules site;
} hs_leaks_params;

/* Defaults: HS_LEAKS_LIMIT rows, HS_STACK_FRAMES frames, user sites. */
void hs_leaks_params_init(hs_leaks_params *p);
/* limit, max_frames, site, wrappers, as hs_top_param. */
int hs_leaks_param(hs_leaks_params *p, const char *key, const char *value, hs_qerr *err);

/* A trace's row: its site (name "?" for an empty stack) and stack, and
 * either what it holds at the end (live) or how it grew (growing). */
typedef struct hs_leak_row {
    hs_qframe site;
    int64_t trace;
    hs_qstack stack;
    int64_t bytes, count; /* live */
    double share;         /* live: of the bytes live at the end */
    double slope;         /* growing: bytes a second, least squares over the run */
    double r2, steady, span, score;
    int64_t end_bytes;
} hs_leak_row;

typedef struct hs_leaks_result {
    hs_run_brief run;
    int64_t at_ns; /* the end (as T=end) */
    int64_t total_bytes, total_count;
    hs_leak_row *live, *growing; /* largest first; most likely leak first */
    size_t nlive, ngrowing;
    int frames_cut, max_frames; /* a stack was cut to max_frames */
    int bytes_cut;              /* stopped at the answer's byte bound */
    void *own;
    hs_qheld held; /* as in hs_top_result */
} hs_leaks_result;

int hs_core_leaks(hs_q *q, const hs_leaks_params *p, hs_leaks_result *out, hs_qerr *err);
void hs_leaks_result_clear(hs_leaks_result *r);

/* ---- sizes: the allocation size histogram -------------------------------- */

/* Allocations by size, power-of-two buckets: bucket b holds sizes
 * [lo, hi] = [2^b, 2^(b+1) - 1] (bucket 0: 0 and 1). Estimated from the
 * samples (each stands for weight / size allocations of its size), exact
 * at every allocation. */
typedef struct hs_qsize_bucket {
    int bucket;
    int64_t lo, hi, allocs, bytes;
} hs_qsize_bucket;

typedef struct hs_sizes_result {
    hs_run_brief run;
    hs_qsize_bucket *buckets; /* the buckets with allocations, smallest first */
    size_t nbuckets;
    int64_t total_allocs, total_bytes;
    int64_t suggested_sample_bytes; /* for about 20,000 samples a second */
    char reason[300];               /* why, in a sentence */
    void *own;
    hs_qheld held; /* as in hs_top_result */
} hs_sizes_result;

int hs_core_sizes(hs_q *q, const hs_run_sel *run, hs_sizes_result *out, hs_qerr *err);
void hs_sizes_result_clear(hs_sizes_result *r);

/* ---- flame: a moment's state as a tree of stacks ---------------------- */

#define HS_FLAME_MAX_NODES 5000 /* nodes in an answer (max_nodes, up to 100000) */
#define HS_FLAME_MAX_DEPTH 256  /* frames deep (max_depth, up to HS_MAX_DEPTH) */

typedef struct hs_flame_params {
    hs_run_sel run;
    hs_t_sel at;
    double min_share; /* nodes narrower than this share of the bytes are left out */
    int64_t max_nodes, max_depth;
} hs_flame_params;

/* Defaults: at peak, every node, HS_FLAME_MAX_NODES nodes at most,
 * HS_FLAME_MAX_DEPTH deep; run must still be set. */
void hs_flame_params_init(hs_flame_params *p);
/* at, min_share, max_nodes, max_depth, as hs_top_param. */
int hs_flame_param(hs_flame_params *p, const char *key, const char *value, hs_qerr *err);

/* A node: a frame where stacks pass (the root: name and label "all"). */
typedef struct hs_flame_node {
    hs_qframe frame;
    const char *label; /* hs_frame_label of the frame */
    int64_t bytes, count, self_bytes;
    size_t nchildren; /* its children: the next subtrees in nodes, widest first */
} hs_flame_node;

typedef struct hs_flame_result {
    hs_run_brief run;
    char at[32];
    int64_t at_ns, total_bytes, total_count;
    hs_flame_node *nodes; /* depth first: nodes[0] is the root, each node before its children */
    size_t nnodes;
    /* what the answer left out (truncated when cut is set) */
    int cut;
    int64_t nodes_cut, nodes_shown; /* nodes built but not in the answer; nodes in it */
    int64_t min_bytes;              /* the narrowest node it could hold */
    int64_t depth_cut;              /* max_depth when deeper frames were left out, else 0 */
    int64_t stacks_omitted, stacks_bytes;
    int bytes_cut; /* stopped at the answer's byte bound */
    void *own;
    hs_qheld held; /* as in hs_top_result */
} hs_flame_result;

int hs_core_flame(hs_q *q, const hs_flame_params *p, hs_flame_result *out, hs_qerr *err);
void hs_flame_result_clear(hs_flame_result *r);

/* ---- stacks: a moment's live stacks with their frames ------------------- */

/* What the exports are written from. A stack keeps its innermost
 * HS_STACKS_FRAMES frames, and the result takes stacks, largest first,
 * while they name fewer than HS_STACKS_MAX_FRAMES distinct frames; what
 * was cut or left out is counted. */
#define HS_STACKS_FRAMES     64
#define HS_STACKS_MAX_FRAMES (96u << 10)

/* A frame as the exports name it (strings lent, as in hs_qframe). */
typedef struct hs_sframe {
    int64_t id;
    const char *name, *file, *module;
    int64_t line, module_offset;
} hs_sframe;

typedef struct hs_stack_row {
    int64_t trace, bytes, count;
    double alloc_objects, alloc_space; /* sampled allocations up to the moment (with allocs) */
    int depth, cut;                    /* frames kept; cut: the stack was deeper */
    int64_t *frames;                   /* frame ids, leaf first (hs_stacks_frame) */
} hs_stack_row;

typedef struct hs_stacks_params {
    hs_run_sel run;
    hs_t_sel at;
    int allocs; /* also every sampled allocation made up to the moment */
} hs_stacks_params;

typedef struct hs_stacks_result {
    hs_run_brief run;
    int64_t at_ns, total_bytes, total_count;
    hs_stack_row *rows; /* live ones by bytes, largest first; then allocations' only */
    size_t nrows;
    size_t omitted; /* stacks left out (frames ran out) */
    int64_t omitted_bytes;
    size_t cut; /* stacks cut to HS_STACKS_FRAMES */
    void *own;
    hs_qheld held; /* as in hs_top_result */
} hs_stacks_result;

int hs_core_stacks(hs_q *q, const hs_stacks_params *p, hs_stacks_result *out, hs_qerr *err);
/* The frame of id, one of r's rows' (never NULL for those). */
const hs_sframe *hs_stacks_frame(const hs_stacks_result *r, int64_t id);
void hs_stacks_result_clear(hs_stacks_result *r);

/* ---- exports: files other tools open ------------------------------------ */

/* collapsed: "outer;…;leaf BYTES" lines (flamegraph.pl, inferno,
 * speedscope); pprof: gzipped profile.proto; speedscope: its JSON; dot: a
 * Graphviz call graph. */
typedef enum hs_export_format {
    HS_EXPORT_COLLAPSED,
    HS_EXPORT_PPROF,
    HS_EXPORT_SPEEDSCOPE,
    HS_EXPORT_DOT
} hs_export_format;

typedef struct hs_export_params {
    hs_run_sel run;
    hs_t_sel at;
    int format;        /* hs_export_format */
    double min_share;  /* collapsed: stacks narrower than this share are left out */
    int has_min_share; /* given (an error for the other formats) */
} hs_export_params;

/* Defaults: pprof at peak; run must still be set. */
void hs_export_params_init(hs_export_params *p);
/* at, format, min_share, as hs_top_param. */
int hs_export_param(hs_export_params *p, const char *key, const char *value, hs_qerr *err);

typedef struct hs_export_result {
    char *body; /* the file (owned) */
    size_t len;
    const char *content_type, *filename; /* static */
} hs_export_result;

int hs_core_export(hs_q *q, const hs_export_params *p, hs_export_result *out, hs_qerr *err);
void hs_export_result_clear(hs_export_result *r);

/* ---- diff: two moments of one run, or of two runs --------------------------- */

/* One side: RUN@T (T defaults to HS_DIFF_AT). */
typedef struct hs_diff_side_sel {
    hs_run_sel run;
    hs_t_sel at;
    int given;
    const char *text; /* as given (lent) */
} hs_diff_side_sel;

typedef struct hs_diff_params {
    hs_diff_side_sel a, b;
    hs_group by;    /* rows by stack (default), site or function */
    int64_t limit;  /* rows, 1 to 1000000 */
    int max_frames; /* frames per row's stack */
    hs_site_rules site;
    int collapsed; /* format=collapsed: "stack A_BYTES B_BYTES" lines, by stack */
} hs_diff_params;

/* Defaults: by stack, HS_DIFF_LIMIT rows, HS_STACK_FRAMES frames, user
 * sites; a and b must still be given. */
void hs_diff_params_init(hs_diff_params *p);
/* a, b (RUN@T), by, limit, max_frames, format (json or collapsed), site,
 * wrappers, as hs_top_param. */
int hs_diff_param(hs_diff_params *p, const char *key, const char *value, hs_qerr *err);
/* For a mistake in b= (rc, err filled): the API checks a= first, so a's
 * missing run or moment outside it is named instead. Returns that error,
 * else rc with err unchanged. */
int hs_diff_b_check(hs_q *q, const hs_diff_params *p, hs_qerr *err, int rc);

typedef struct hs_diff_side {
    hs_run_brief run;
    char at[32];
    int64_t at_ns, total_bytes;
} hs_diff_side;

/* A row: stacks matched by their frames' names (not by trace id). */
typedef struct hs_diff_row {
    const char *name; /* the site's or function's name, or the stack's site */
    int64_t trace;    /* a representative trace (b's when b has one) */
    int64_t a_bytes, a_count, b_bytes, b_count;
    hs_qstack stack; /* the trace's stack (none by function) */
} hs_diff_row;

/* A node of the differential flame, depth first as in hs_flame_result. */
typedef struct hs_dflame_node {
    const char *name;
    int64_t a_bytes, b_bytes;
    size_t nchildren;
} hs_dflame_node;

typedef struct hs_diff_result {
    hs_diff_side a, b;
    hs_group by;
    hs_diff_row *rows; /* the largest changes first */
    size_t nrows;
    hs_dflame_node *flame; /* flame[0]: "all" */
    size_t nflame;
    char *collapsed; /* format=collapsed: the lines, instead of rows and flame (owned) */
    size_t collapsed_len;
    /* what the answer left out */
    int flame_cut, frames_cut, max_frames;
    int64_t stacks_omitted, stacks_bytes;
    void *own;
    hs_qheld held; /* as in hs_top_result */
} hs_diff_result;

int hs_core_diff(hs_q *q, const hs_diff_params *p, hs_diff_result *out, hs_qerr *err);
void hs_diff_result_clear(hs_diff_result *r);

/* ---- group diff: two groups of runs, noise told apart from change ------- */

/* A side of diff whose selector is a group (key=value… without ",latest",
 * id=A..B) and matches several runs is compared as a group: per row, each
 * side's mean over its runs, its spread across them and the error of the
 * mean, which holds both the spread (sd²/n) and the sampling error of the
 * runs' estimates (their sampling variance summed, / n²). A row's
 * sampling variance in one run is, per trace, B · f(B / C) with B its
 * bytes, C its count (both estimates: sums of the samples' weights w and
 * w / size), f(s) = s / (exp(s / S) - 1) and S the run's sample_bytes:
 * the unbiased estimate sum of w·(w - s) over the live samples of a
 * byte-interval sampler (weight w = s / (1 - exp(-s / S))), exact when a
 * trace's live blocks have one size, and never above B · S (snapshots keep
 * B and C, not the sum of w²; a trace mixing blocks of about S with much
 * larger ones is underestimated). A side's total at the peak or the end is
 * the runs' exact figure where they have one (no sampling error). A row
 * changed (grew or shrank) only when |delta| > HS_GDIFF_K · sqrt(se_a² +
 * se_b²), else its change is noise. hs_diff_is_group refuses
 * format=collapsed (two runs only) when a side names several runs. */
#define HS_GDIFF_K        3.0
#define HS_GDIFF_MAX_RUNS 100 /* runs a side takes: the newest matches */

typedef enum hs_gdiff_verdict {
    HS_GDIFF_SAME,   /* no change at all */
    HS_GDIFF_NOISE,  /* a change within the noise */
    HS_GDIFF_GREW,   /* grew past the noise */
    HS_GDIFF_SHRANK, /* shrank past the noise */
} hs_gdiff_verdict;
const char *hs_gdiff_verdict_name(int v);

/* One side's figure: mean over its n runs, sd across them, the sampling
 * error of the mean (sqrt(sum of the runs' sampling variances) / n) and
 * the mean's whole error (sqrt(sd² / n + sampling_se²)). */
typedef struct hs_gstat {
    double mean, sd, sampling_se, se;
} hs_gstat;

typedef struct hs_gdiff_side {
    char selector[2050]; /* as given, less its @T */
    char at[32];
    int64_t *runs; /* ids used, newest first (owned by the result) */
    size_t nruns;
    int more;             /* the selector matched more than HS_GDIFF_MAX_RUNS runs */
    int64_t sample_bytes; /* the largest of its runs' (1: every allocation) */
    hs_gstat total;
} hs_gdiff_side;

/* By function, what the function allocated itself (the stacks whose site
 * is in it; its callers' rows hold the same bytes inclusive): the same
 * figures as the row's. By site and stack, the row's own. */
typedef struct hs_gdiff_self {
    hs_gstat a, b;
    double delta, se;
    int verdict;
} hs_gdiff_self;

typedef struct hs_gdiff_row {
    const char *name; /* the row's name, as in hs_diff_row */
    const char *file; /* where: its frame's file ("" unknown) and line */
    int64_t line;
    int64_t trace; /* a representative trace */
    hs_gstat a, b;
    double delta, se;   /* b.mean - a.mean, sqrt(a.se² + b.se²) */
    double share;       /* delta / the total's delta (0 when that is 0) */
    int verdict;        /* hs_gdiff_verdict */
    hs_gdiff_self self; /* by function: its own allocations */
    hs_qstack stack;    /* the trace's stack (none by function) */
} hs_gdiff_row;

typedef struct hs_gdiff_result {
    hs_gdiff_side a, b;
    hs_group by;
    double delta, se; /* of the totals */
    int verdict;
    hs_gdiff_row *rows; /* changed rows first (by |self.delta|, then |delta|), then noise */
    size_t nrows;
    int64_t rows_total; /* rows before the limit */
    int frames_cut, max_frames;
    int64_t stacks_omitted, stacks_bytes; /* live traces past the frames a request may read */
    void *own;
    hs_qheld held; /* as in hs_top_result */
} hs_gdiff_result;

/* 1 in *group when either side of p names several runs (then
 * hs_core_gdiff answers; else hs_core_diff, as for two runs). 0 or an
 * HS_E code (a side matching no run is left to hs_core_diff to name). */
int hs_diff_is_group(hs_q *q, const hs_diff_params *p, int *group, hs_qerr *err);
int hs_core_gdiff(hs_q *q, const hs_diff_params *p, hs_gdiff_result *out, hs_qerr *err);
void hs_gdiff_result_clear(hs_gdiff_result *r);

/* ---- check: budgets and a baseline, for CI --------------------------------- */

typedef enum hs_check_status { HS_CHECK_PASS, HS_CHECK_WARN, HS_CHECK_FAIL } hs_check_status;
const char *hs_check_status_name(int s);

typedef struct hs_check_params {
    hs_diff_side_sel run;      /* RUN-OR-SELECTOR (T unused) */
    int64_t max_peak, max_end; /* bytes; -1: no budget */
    double max_leak_rate;      /* bytes a second; < 0: no budget */
    hs_diff_side_sel baseline; /* given: compare with it */
    double tolerance;          /* growth of the total allowed, a share of the baseline's */
    hs_t_sel at;               /* the baseline's moment (default peak) */
    hs_group by;               /* rows that grew (default site) */
    int64_t limit;             /* rows named per check */
} hs_check_params;

void hs_check_params_init(hs_check_params *p);
/* run, max_peak, max_end (sizes: 200MiB, 10MB, 4096), max_leak_rate
 * (1MiB/s), baseline, tolerance (5% or 0.05), at, by, limit. 0 or
 * HS_EINVAL. */
int hs_check_param(hs_check_params *p, const char *key, const char *value, hs_qerr *err);

/* Where bytes are: a row of a check. */
typedef struct hs_check_where {
    const char *name, *file;
    int64_t line;
    double bytes;  /* grew by (baseline), or held (budgets) */
    double share;  /* of the growth, or of the moment's bytes */
    char via[200]; /* the callers of its site, "f ← g ← h" ("" by function) */
} hs_check_where;

/* One budget, or the baseline: value against limit. For a budget, the
 * worst of the target's runs (run); for the baseline, the growth of the
 * total's mean against tolerance · the baseline's mean. */
typedef struct hs_check_item {
    char name[32];    /* "max_peak", "max_end", "max_leak_rate", "baseline" */
    int status;       /* hs_check_status */
    double value, se; /* the estimate and its standard error (0: exact) */
    double limit;
    int64_t run; /* the run it is about (budgets) */
    int exact;   /* value is an exact figure */
    char message[512];
    hs_check_where *where;
    size_t nwhere;
} hs_check_item;

typedef struct hs_check_result {
    const char *selector, *baseline;
    int64_t *runs; /* the target's runs (owned) */
    size_t nruns;
    int status; /* the worst item's */
    hs_check_item *items;
    size_t nitems;
    void *own;
} hs_check_result;

int hs_core_check(hs_q *q, const hs_check_params *p, hs_check_result *out, hs_qerr *err);
void hs_check_result_clear(hs_check_result *r);
/* ---- trend: the figures of many runs, or of the groups of a label -------- */

/* Runs a trend reads at most (the newest): limit=, 1 to HS_TREND_MAX. */
#define HS_TREND_LIMIT 10000
#define HS_TREND_MAX   100000

/* The figures of a trend's row; each has its JSON name (hs_trend_metric_name)
 * and its CLI name (peak, end, total, leak_rate, rss_peak, duration, dropped,
 * code). CODE is a function's or site's bytes (the params' code). */
enum hs_trend_metric {
    HS_TM_PEAK,      /* peak_bytes: the run's highest live heap */
    HS_TM_END,       /* end_bytes: live at the end */
    HS_TM_TOTAL,     /* total_alloc_bytes */
    HS_TM_LEAK_RATE, /* leak_bytes_per_s (schema/009_run_summary.sql) */
    HS_TM_RSS_PEAK,  /* rss_peak_bytes */
    HS_TM_DURATION,  /* duration_ns */
    HS_TM_DROPPED,   /* dropped_events: allocations and frees dropped */
    HS_TM_CODE,      /* code_bytes */
    HS_TM__COUNT
};
const char *hs_trend_metric_name(int m);
/* A CLI name or a JSON name -> *out; -1 for anything else. */
int hs_trend_metric_parse(const char *s, int *out);

typedef struct hs_trend_params {
    hs_run_sel runs; /* whose filters the runs match (a MATCH selector; "all": every run) */
    int all;
    char by[128];        /* a label's key: one row per value; "" one row per run */
    char function[512];  /* the code whose bytes each row adds, or "" */
    char site_file[512]; /* or a site: file (base name) and line */
    int64_t site_line;
    int site_is_function; /* site= named a function (function holds it) */
    int at_end;           /* the code's bytes at the end, else at the peak */
    int metric;           /* the chart's (the sparkline's) figure */
    int64_t limit;        /* runs read, the newest */
} hs_trend_params;

/* Defaults: every run, by run, no code, at the peak, metric peak (code when
 * a code is given), HS_TREND_LIMIT runs. */
void hs_trend_params_init(hs_trend_params *p);
/* runs (a selector, or "all"), by, function, site (FILE:LINE, a frame
 * label "NAME (FILE:LINE)", or a function's name), at (peak or end),
 * metric, limit; other keys are ignored. 0 or HS_EINVAL. */
int hs_trend_param(hs_trend_params *p, const char *key, const char *value, hs_qerr *err);

/* A run, or the runs of a label's value (a group): a group's figures are
 * the means over its runs that have them, lo and hi their least and
 * greatest (a run's are its figures). */
typedef struct hs_trend_row {
    int64_t run;                 /* the run's id; 0 for a group */
    const char *program, *state; /* a run's ("" for a group) */
    const char *value;           /* by's value (NULL by run without by) */
    int64_t start_unix_ms;       /* a run's start; a group's first run's */
    int64_t runs;                /* 1 for a run */
    int64_t first_run, last_run; /* a group's lowest and highest run id */
    double v[HS_TM__COUNT], lo[HS_TM__COUNT], hi[HS_TM__COUNT];
    int has[HS_TM__COUNT]; /* the figure is known (for a group: of one run at least) */
} hs_trend_row;

typedef struct hs_trend_result {
    hs_trend_row *rows; /* runs oldest first; groups in the label's natural order */
    size_t nrows;
    int metric;
    const char *by;       /* NULL: by run */
    const char *function; /* the code (NULL when none): a function, */
    const char *site;     /* or a site "file:line" */
    int at_end;
    int64_t runs_read; /* runs the rows hold */
    int cut;           /* more runs matched than limit: the oldest were left out */
    void *own;
    hs_qheld held; /* as in hs_top_result */
} hs_trend_result;

/* One question to the store (hs_qstore runs_summary) whatever the number of
 * runs. */
int hs_core_trend(hs_q *q, const hs_trend_params *p, hs_trend_result *out, hs_qerr *err);
void hs_trend_result_clear(hs_trend_result *r);

/* Natural order of label values: runs of digits compare as numbers
 * ("1.9" < "1.10" < "2"), the rest as bytes. <0, 0, >0 as strcmp. */
int hs_natural_cmp(const char *a, const char *b);

#endif

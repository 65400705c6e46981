/* store_clickhouse: the ClickHouse store of the query core (hs_qstore.h)
 * over the layout of schema/clickhouse/001_init.sql, through ClickHouse's
 * HTTP interface (common/hs_chttp.h), answers read as TabSeparated.
 *
 * Every op is the SQLite store's question asked in ClickHouse's dialect:
 * the state at a moment is the nearest keyframe plus the delta rows since
 * (or the latest version of the peak's snapshot), a trace's summary is the
 * writer's stored one as of its run's mark plus the delta rows after it
 * (hs_tstats_add in bucket order: the SQLite store's very doubles). Rows are read
 * with FINAL, so that a row the shipper sent twice counts once. Trace
 * nodes and frames never change once written: they are cached here, and a
 * run's whole stack tree is fetched in one query per depth the first time
 * a node of it is asked for, rather than one round trip per node.
 */
#include <assert.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hs_chttp.h"
#include "hs_error.h"
#include "hs_evcodec.h"
#include "hs_snap.h"
#include "q_internal.h"
#include "store_clickhouse.h"

typedef struct ch_cached_frame {
    char *function, *file, *module;
    int64_t line, module_offset;
} ch_cached_frame;

typedef struct chstore {
    hs_qstore base;
    hs_ch *ch;
    hs_ch *sqlch; /* /api/sql's connection: as the URL's sql_user when it has one */
    char *url;
    hs_buf ans, runbuf; /* the last answer; the last run's record */
    hs_buf sql;
    hs_map node_idx, frame_idx; /* id -> index in nodes / frames */
    hs_qstore_node *nodes;
    int64_t *node_ids;
    size_t nnodes, capnodes;
    ch_cached_frame *frames;
    size_t nframes, capframes;
    hs_map prefetched; /* runs whose stack trees are in the caches */
    int64_t last_run;
    /* The records (and labels) of the runs the last runs_find() listed,
     * read in four queries rather than four per run; dropped at idle(). */
    hs_buf rc_buf, rc_lbuf;
    hs_qstore_run *rc_runs;
    size_t rc_n;
    hs_map rc_idx;
    struct ch_label {
        int64_t run;
        const char *key, *value;
    } * rc_labels;
    size_t rc_nlabels;
} chstore;

static const hs_qstore_ops ch_ops;
static void runs_cache_drop(chstore *q);
static void ch_free(hs_qstore *s);

#define BASE_SETTINGS "distributed_product_mode=global"

/* ---- asking --------------------------------------------------------------------- */

/* Runs the SQL printed from fmt (FORMAT TabSeparated appended) into q->ans
 * and starts t on it. */
static int ask(chstore *q, hs_tsv *t, hs_qerr *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int ask(chstore *q, hs_tsv *t, hs_qerr *err, const char *fmt, ...)
{
    q->sql.n = 0;
    q->sql.oom = 0;
    va_list ap;
    va_start(ap, fmt);
    char tmp[4096];
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) return hs__err(err, HS_ENOMEM, "query too long");
    hs_buf_put(&q->sql, tmp, (size_t)n);
    hs_buf_printf(&q->sql, " FORMAT TabSeparated");
    if (q->sql.oom) return hs__err(err, HS_ENOMEM, "out of memory");
    char msg[480];
    int rc = hs_ch_query(q->ch, q->sql.p, NULL, 0, &q->ans, msg, sizeof msg);
    if (rc) return hs__err(err, rc == HS_ENOMEM ? HS_ENOMEM : HS_EDB, "%s", msg);
    hs_tsv_init(t, &q->ans);
    return 0;
}

/* The same for SQL already in q->sql (long IN lists). */
static int ask_buf(chstore *q, hs_tsv *t, hs_qerr *err)
{
    hs_buf_printf(&q->sql, " FORMAT TabSeparated");
    if (q->sql.oom) return hs__err(err, HS_ENOMEM, "out of memory");
    char msg[480];
    int rc = hs_ch_query(q->ch, q->sql.p, NULL, 0, &q->ans, msg, sizeof msg);
    if (rc) return hs__err(err, rc == HS_ENOMEM ? HS_ENOMEM : HS_EDB, "%s", msg);
    hs_tsv_init(t, &q->ans);
    return 0;
}

/* ask_buf on a query built in b instead of q->sql (b keeps its buffer, which
 * the FORMAT clause may have moved; the caller frees it). */
static int ask_built(chstore *q, hs_buf *b, hs_tsv *t, hs_qerr *err)
{
    hs_buf keep = q->sql;
    q->sql = *b;
    int rc = ask_buf(q, t, err);
    *b = q->sql;
    q->sql = keep;
    return rc;
}

static uint64_t tsv_u64(hs_tsv *t)
{
    const char *f = hs_tsv_field(t, NULL);
    return f ? strtoull(f, NULL, 10) : 0;
}

/* ---- open/close ---------------------------------------------------------------- */

int hs_qstore_clickhouse_open(hs_qstore **out, const char *url, hs_qerr *err)
{
    *out = NULL;
    chstore *q = calloc(1, sizeof *q);
    if (!q) return hs__err(err, HS_ENOMEM, "out of memory");
    q->base.ops = &ch_ops;
    char msg[400];
    int rc = hs_ch_open(&q->ch, url, msg, sizeof msg);
    if (rc) {
        free(q);
        return hs__err(err, rc, "%s", msg);
    }
    if (!(q->url = strdup(url))) {
        ch_free(&q->base);
        return hs__err(err, HS_ENOMEM, "out of memory");
    }
    /* subqueries over Distributed tables (a cluster) run once, on this
     * server, whatever shards their rows are on */
    hs_tsv t;
    if ((rc = hs_ch_settings(q->ch, BASE_SETTINGS)) ||
        (rc = ask(q, &t, err, "SELECT count() FROM runs"))) {
        ch_free(&q->base);
        return rc;
    }
    *out = &q->base;
    return 0;
}

static void ch_free(hs_qstore *s)
{
    chstore *q = (chstore *)s;
    hs_ch_free(q->ch);
    hs_ch_free(q->sqlch);
    free(q->url);
    hs_buf_free(&q->ans);
    hs_buf_free(&q->runbuf);
    hs_buf_free(&q->sql);
    for (size_t i = 0; i < q->nframes; i++) {
        free(q->frames[i].function);
        free(q->frames[i].file);
        free(q->frames[i].module);
    }
    free(q->frames);
    free(q->nodes);
    free(q->node_ids);
    hs_map_free(&q->node_idx);
    hs_map_free(&q->frame_idx);
    hs_map_free(&q->prefetched);
    runs_cache_drop(q);
    free(q);
}

static void runs_cache_drop(chstore *q)
{
    hs_buf_free(&q->rc_buf);
    hs_buf_free(&q->rc_lbuf);
    free(q->rc_runs);
    free(q->rc_labels);
    q->rc_runs = NULL;
    q->rc_labels = NULL;
    q->rc_n = q->rc_nlabels = 0;
    hs_map_free(&q->rc_idx);
}

static void ch_idle(hs_qstore *s)
{
    chstore *q = (chstore *)s;
    runs_cache_drop(q);
    if (q->ans.cap > (4u << 20)) hs_buf_free(&q->ans);
}

static int ch_read_only(hs_qstore *s, char *why, size_t len)
{
    (void)s;
    if (len) why[0] = 0;
    return 0;
}

/* ---- runs ----------------------------------------------------------------------- */

#define RUN_COLS                                                                                   \
    "uuid, program, argv, host, pid, ppid, parent_id, has_parent, start_unix_ns, end_ns, state, "  \
    "clean_exit, peak_bytes, peak_count, peak_t_ns, live_bytes, live_count, total_alloc_bytes, "   \
    "alloc_events, free_events, granularity_ns, sample_bytes, dropped_alloc_events, "              \
    "dropped_free_events, dropped_alloc_bytes, dropped_free_bytes, stacks_truncated, "             \
    "unwind_failed, live_set_full, keyframe_every, total_alloc_count, max_depth, "                 \
    "collector_version, bye_alloc_events, has_bye_alloc, bye_free_events, has_bye_free, "          \
    "main_end_ns, python_fallback, python_small_unseen"

static void run_row(hs_tsv *t, int64_t id, hs_qstore_run *o)
{
    memset(o, 0, sizeof *o);
    o->id = id;
    o->uuid = hs_tsv_field(t, NULL);
    o->program = hs_tsv_field(t, NULL);
    o->argv_json = hs_tsv_field(t, NULL);
    o->host = hs_tsv_field(t, NULL);
    o->pid = hs_tsv_i64(t, NULL);
    o->ppid = hs_tsv_i64(t, NULL);
    o->parent_id = hs_tsv_i64(t, NULL);
    o->has_parent = hs_tsv_i64(t, NULL) != 0;
    o->start_unix_ns = hs_tsv_i64(t, NULL);
    o->end_ns = hs_tsv_i64(t, NULL);
    o->state = hs_tsv_field(t, NULL);
    o->clean_exit = (int)hs_tsv_i64(t, NULL);
    int64_t *f[] = {&o->peak_bytes,
                    &o->peak_count,
                    &o->peak_t_ns,
                    &o->live_bytes,
                    &o->live_count,
                    &o->total_alloc_bytes,
                    &o->alloc_events,
                    &o->free_events,
                    &o->granularity_ns,
                    &o->sample_bytes,
                    &o->dropped_alloc_events,
                    &o->dropped_free_events,
                    &o->dropped_alloc_bytes,
                    &o->dropped_free_bytes,
                    &o->stacks_truncated,
                    &o->unwind_failed,
                    &o->live_set_full,
                    &o->keyframe_every,
                    &o->total_alloc_count,
                    &o->max_depth};
    for (size_t i = 0; i < sizeof f / sizeof *f; i++) *f[i] = hs_tsv_i64(t, NULL);
    o->collector_version = hs_tsv_field(t, NULL);
    o->bye_alloc_events = hs_tsv_i64(t, NULL);
    o->has_bye_alloc = hs_tsv_i64(t, NULL) != 0;
    o->bye_free_events = hs_tsv_i64(t, NULL);
    o->has_bye_free = hs_tsv_i64(t, NULL) != 0;
    o->main_end_ns = hs_tsv_i64(t, NULL);
    o->python_fallback = hs_tsv_i64(t, NULL);
    o->python_small_unseen = hs_tsv_i64(t, NULL);
}

/* "flags, allocs, frees, alloc_bytes, free_bytes, error_bytes,
 * est_peak_bytes, est_peak_t_ns" of run_exact into x. */
static void exact_row(hs_tsv *t, hs_qstore_exact *x)
{
    int64_t fl = hs_tsv_i64(t, NULL);
    *x = (hs_qstore_exact){.has = 1, .in_figures = (fl & 256) != 0, .usable_call = (fl & 1) != 0};
    x->allocs = hs_tsv_i64(t, NULL);
    x->frees = hs_tsv_i64(t, NULL);
    x->alloc_bytes = hs_tsv_i64(t, NULL);
    x->free_bytes = hs_tsv_i64(t, NULL);
    x->error_bytes = hs_tsv_i64(t, NULL);
    x->est_peak_bytes = hs_tsv_i64(t, NULL);
    x->est_peak_t_ns = hs_tsv_i64(t, NULL);
}

static int run_exact(chstore *q, hs_qstore_run *o, hs_qerr *err)
{
    hs_tsv t;
    int rc = ask(q, &t, err,
                 "SELECT flags, allocs, frees, alloc_bytes, free_bytes, error_bytes, "
                 "est_peak_bytes, est_peak_t_ns FROM run_exact FINAL WHERE run = %" PRId64,
                 o->id);
    if (rc || !hs_tsv_row(&t)) return rc;
    exact_row(&t, &o->exact);
    return 0;
}

static int ch_run(hs_qstore *s, int64_t id, hs_qstore_run *out, hs_qerr *err)
{
    chstore *q = (chstore *)s;
    hs_tsv t;
    q->last_run = id;
    uint64_t i;
    if (hs_map_get(&q->rc_idx, (uint64_t)id, &i)) {
        *out = q->rc_runs[i];
        return 0;
    }
    int rc = ask(q, &t, err,
                 "SELECT count(), max(bucket) FROM heap_series FINAL WHERE run = %" PRId64, id);
    if (rc) return rc;
    int64_t last = -1;
    if (hs_tsv_row(&t) && hs_tsv_i64(&t, NULL) > 0) last = hs_tsv_i64(&t, NULL);
    if ((rc = ask(q, &t, err, "SELECT " RUN_COLS " FROM runs FINAL WHERE id = %" PRId64, id)))
        return rc;
    if (!hs_tsv_row(&t)) return hs__err(err, HS_ENOENT, "no run with id %" PRId64, id);
    /* the record's strings live in runbuf until the next run() */
    hs_buf tmp = q->runbuf;
    q->runbuf = q->ans;
    q->ans = tmp;
    hs_tsv_init(&t, &q->runbuf);
    hs_tsv_row(&t);
    run_row(&t, id, out);
    out->last_bucket = last;
    return run_exact(q, out, err);
}

static int ch_run_labels(hs_qstore *s, int64_t id,
                         int (*cb)(const char *key, const char *value, void *data), void *data,
                         hs_qerr *err)
{
    chstore *q = (chstore *)s;
    uint64_t i;
    if (hs_map_get(&q->rc_idx, (uint64_t)id, &i)) { /* listed by runs_find: cached */
        int rc = 0;
        for (size_t k = 0; !rc && k < q->rc_nlabels; k++)
            if (q->rc_labels[k].run == id)
                rc = cb(q->rc_labels[k].key, q->rc_labels[k].value, data);
        return rc;
    }
    hs_tsv t;
    int rc =
        ask(q, &t, err,
            "SELECT key, value FROM run_labels FINAL WHERE run = %" PRId64 " ORDER BY key", id);
    while (!rc && hs_tsv_row(&t)) {
        const char *k = hs_tsv_field(&t, NULL), *v = hs_tsv_field(&t, NULL);
        rc = cb(k ? k : "", v ? v : "", data);
    }
    return rc;
}

/* The run and its descendants: "r.id IN (…)", level by level (ClickHouse
 * has no recursive queries). */
static int root_ids(chstore *q, int64_t root, hs_buf *cond, hs_qerr *err)
{
    int64_t *ids = malloc(sizeof *ids), n = 1, done = 0;
    if (!ids) return hs__err(err, HS_ENOMEM, "out of memory");
    ids[0] = root;
    int rc = 0;
    while (!rc && done < n && n < 100000) {
        hs_buf sql = {0};
        hs_buf_printf(&sql, "SELECT id FROM runs FINAL WHERE parent_uuid IN (SELECT uuid FROM "
                            "runs FINAL WHERE id IN (");
        for (int64_t i = done; i < n; i++)
            hs_buf_printf(&sql, "%s%" PRId64, i > done ? "," : "", ids[i]);
        hs_buf_printf(&sql, ")) AND parent_uuid != ''");
        done = n;
        hs_tsv t;
        rc = ask_built(q, &sql, &t, err);
        hs_buf_free(&sql);
        while (!rc && hs_tsv_row(&t)) {
            int64_t *np = realloc(ids, (size_t)(n + 1) * sizeof *np);
            if (!np) {
                rc = hs__err(err, HS_ENOMEM, "out of memory");
                break;
            }
            ids = np;
            ids[n++] = hs_tsv_i64(&t, NULL);
        }
    }
    hs_buf_printf(cond, " AND id IN (");
    for (int64_t i = 0; i < n; i++) hs_buf_printf(cond, "%s%" PRId64, i ? "," : "", ids[i]);
    hs_buf_printf(cond, ")");
    free(ids);
    return rc;
}

static int where_kv(chstore *q, hs_buf *b, const char *key, const char *v, hs_qerr *err)
{
    size_t n = strlen(v);
    int64_t i = strtoll(v, NULL, 10), lo, hi;
    if (!strcmp(key, "program")) {
        hs_buf_printf(b, " AND (program = ");
        hs_ch_quote(b, v, n);
        /* or its last n + 1 bytes are "/v" */
        hs_buf_printf(
            b,
            " OR (length(program) > %zu AND substring(program, length(program) - %zu, %zu) = ", n,
            n, n + 1);
        hs_buf_put(b, "'/", 2);
        for (size_t k = 0; k < n; k++) {
            if (v[k] == '\\' || v[k] == '\'') hs_buf_put(b, "\\", 1);
            hs_buf_put(b, v + k, 1);
        }
        hs_buf_put(b, "'))", 3);
        return 0;
    }
    if (!strcmp(key, "host") || !strcmp(key, "state")) {
        hs_buf_printf(b, " AND %s = ", key);
        hs_ch_quote(b, v, n);
    } else if (!strcmp(key, "id") && hs_sel_id_range(v, &lo, &hi)) { /* id=A..B */
        hs_buf_printf(b, " AND id BETWEEN %" PRId64 " AND %" PRId64, lo, hi);
    } else if (!strcmp(key, "id") || !strcmp(key, "pid")) {
        hs_buf_printf(b, " AND %s = %" PRId64, key, i);
    } else if (!strcmp(key, "before")) { /* keyset paging: the runs listed after run i */
        hs_buf_printf(b,
                      " AND (start_unix_ns < (SELECT any(start_unix_ns) FROM runs FINAL WHERE "
                      "id = %" PRId64 ") OR (start_unix_ns = (SELECT any(start_unix_ns) FROM "
                      "runs FINAL WHERE id = %" PRId64 ") AND id < %" PRId64 "))",
                      i, i, i);
    } else if (!strcmp(key, "parent")) {
        hs_buf_printf(b,
                      " AND parent_uuid != '' AND parent_uuid IN (SELECT uuid FROM runs "
                      "FINAL WHERE id = %" PRId64 ")",
                      i);
    } else if (!strcmp(key, "root")) {
        return root_ids(q, i, b, err);
    } else {
        hs_buf_printf(b, " AND id IN (SELECT run FROM run_labels FINAL WHERE key = ");
        hs_ch_quote(b, key, strlen(key));
        hs_buf_printf(b, " AND value = ");
        hs_ch_quote(b, v, n);
        hs_buf_printf(b, ")");
    }
    return 0;
}

/* Asks "SELECT … WHERE col IN (ids) …" (fmt holds %s for the list). */
static int ask_in(chstore *q, hs_tsv *t, hs_qerr *err, const char *fmt, const int64_t *ids,
                  size_t n)
{
    hs_buf list = {0};
    for (size_t i = 0; i < n; i++) hs_buf_printf(&list, "%s%" PRId64, i ? "," : "", ids[i]);
    q->sql.n = 0;
    hs_buf_printf(&q->sql, fmt, list.p ? list.p : "0");
    hs_buf_free(&list);
    return ask_buf(q, t, err);
}

/* The records, last buckets, exact totals and labels of runs ids, into
 * the runs cache: what listing them asks next, in four round trips. */
static int runs_cache_fill(chstore *q, const int64_t *ids, size_t n, hs_qerr *err)
{
    runs_cache_drop(q);
    hs_tsv t;
    int rc = ask_in(q, &t, err, "SELECT id, " RUN_COLS " FROM runs FINAL WHERE id IN (%s)", ids, n);
    if (rc) return rc;
    hs_buf tmp = q->rc_buf;
    q->rc_buf = q->ans;
    q->ans = tmp;
    hs_tsv_init(&t, &q->rc_buf);
    if (!(q->rc_runs = calloc(n ? n : 1, sizeof *q->rc_runs))) goto oom;
    while (q->rc_n < n && hs_tsv_row(&t)) {
        int64_t id = hs_tsv_i64(&t, NULL);
        uint64_t dup;
        if (hs_map_get(&q->rc_idx, (uint64_t)id, &dup)) continue;
        run_row(&t, id, &q->rc_runs[q->rc_n]);
        q->rc_runs[q->rc_n].last_bucket = -1;
        if (hs_map_put(&q->rc_idx, (uint64_t)id, q->rc_n++)) goto oom;
    }
    rc = ask_in(q, &t, err,
                "SELECT run, max(bucket) FROM heap_series FINAL WHERE run IN (%s) GROUP BY run",
                ids, n);
    for (uint64_t i; !rc && hs_tsv_row(&t);)
        if (hs_map_get(&q->rc_idx, (uint64_t)hs_tsv_i64(&t, NULL), &i))
            q->rc_runs[i].last_bucket = hs_tsv_i64(&t, NULL);
    if (!rc)
        rc = ask_in(q, &t, err,
                    "SELECT run, flags, allocs, frees, alloc_bytes, free_bytes, error_bytes, "
                    "est_peak_bytes, est_peak_t_ns FROM run_exact FINAL WHERE run IN (%s)",
                    ids, n);
    for (uint64_t i; !rc && hs_tsv_row(&t);)
        if (hs_map_get(&q->rc_idx, (uint64_t)hs_tsv_i64(&t, NULL), &i))
            exact_row(&t, &q->rc_runs[i].exact);
    if (!rc)
        rc = ask_in(q, &t, err,
                    "SELECT run, key, value FROM run_labels FINAL WHERE run IN (%s) ORDER BY run, "
                    "key",
                    ids, n);
    if (rc) return rc;
    tmp = q->rc_lbuf;
    q->rc_lbuf = q->ans;
    q->ans = tmp;
    hs_tsv_init(&t, &q->rc_lbuf);
    size_t cap = 0;
    while (hs_tsv_row(&t)) {
        if (q->rc_nlabels == cap) {
            cap = cap ? cap * 2 : 64;
            struct ch_label *np = realloc(q->rc_labels, cap * sizeof *np);
            if (!np) goto oom;
            q->rc_labels = np;
        }
        struct ch_label *l = &q->rc_labels[q->rc_nlabels++];
        l->run = hs_tsv_i64(&t, NULL);
        l->key = hs_tsv_field(&t, NULL);
        l->value = hs_tsv_field(&t, NULL);
        if (!l->key) l->key = "";
        if (!l->value) l->value = "";
    }
    return 0;
oom:
    runs_cache_drop(q);
    return hs__err(err, HS_ENOMEM, "out of memory");
}

static int ch_runs_find(hs_qstore *s, const hs_qstore_filter *f, int n, int64_t limit,
                        int64_t **ids, size_t *nids, hs_qerr *err)
{
    chstore *q = (chstore *)s;
    *ids = NULL;
    *nids = 0;
    hs_buf b = {0};
    int rc = 0;
    hs_buf_printf(&b, "SELECT id FROM runs FINAL WHERE 1");
    for (int i = 0; !rc && i < n; i++) rc = where_kv(q, &b, f[i].key, f[i].value, err);
    hs_buf_printf(&b, " ORDER BY start_unix_ns DESC, id DESC LIMIT %" PRId64, limit);
    hs_tsv t;
    if (!rc) rc = ask_built(q, &b, &t, err);
    hs_buf_free(&b);
    size_t cap = 0;
    while (!rc && hs_tsv_row(&t)) {
        if (*nids == cap) {
            cap = cap ? cap * 2 : 16;
            int64_t *np = realloc(*ids, cap * sizeof *np);
            if (!np) {
                rc = hs__err(err, HS_ENOMEM, "out of memory");
                break;
            }
            *ids = np;
        }
        (*ids)[(*nids)++] = hs_tsv_i64(&t, NULL);
    }
    if (!rc && *nids) rc = runs_cache_fill(q, *ids, *nids, err);
    if (rc) {
        free(*ids);
        *ids = NULL;
        *nids = 0;
    }
    return rc;
}

static int ch_runs_by_uuid(hs_qstore *s, const char *hex, int64_t *id, int *matches, hs_qerr *err)
{
    chstore *q = (chstore *)s;
    char low[40];
    size_t n = 0;
    for (; hex[n] && n < 32; n++) {
        char c = hex[n];
        if (c >= 'A' && c <= 'F') c = (char)(c + 32);
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
            *matches = 0;
            return 0;
        }
        low[n] = c;
    }
    low[n] = 0;
    hs_tsv t;
    int rc =
        ask(q, &t, err, "SELECT DISTINCT id FROM runs WHERE substring(uuid, 1, %zu) = '%s' LIMIT 2",
            n, low);
    *matches = 0;
    while (!rc && hs_tsv_row(&t)) {
        *id = hs_tsv_i64(&t, NULL);
        (*matches)++;
    }
    return rc;
}

/* ---- a moment's state ------------------------------------------------------------ */

static int acc_rows(hs_tsv *t, hs__state_acc *a, hs_qerr *err)
{
    while (hs_tsv_row(t)) {
        int64_t tr = hs_tsv_i64(t, NULL), b = hs_tsv_i64(t, NULL), c = hs_tsv_i64(t, NULL);
        if (hs__acc_add(a, tr, b, c)) return hs__err(err, HS_ENOMEM, "out of memory");
    }
    return 0;
}

/* The peak's snapshot: its latest bucket, and of that bucket the rows of
 * the latest shipment (the shipper sends the whole snapshot again, with a
 * new version, whenever it changes). */
static int state_peak(chstore *q, int64_t run, hs__state_acc *a, int *found, hs_qerr *err)
{
    hs_tsv t;
    *found = 0;
    int rc = ask(q, &t, err,
                 "SELECT trace, bytes, count FROM snapshots WHERE run = %" PRId64
                 " AND kind = " HS_SNAP_PEAK_SQL " AND (bucket, ver) IN (SELECT bucket, max(ver) "
                 "FROM snapshots WHERE run = %" PRId64 " AND kind = " HS_SNAP_PEAK_SQL
                 " GROUP BY bucket ORDER BY bucket DESC LIMIT 1)",
                 run, run);
    if (rc) return rc;
    *found = t.p < t.end;
    return acc_rows(&t, a, err);
}

static int state_bucket(chstore *q, const hs_qstore_moment *m, hs__state_acc *a, hs_qerr *err)
{
    hs_tsv t;
    int rc = ask(q, &t, err,
                 "SELECT count(), max(bucket) FROM snapshots WHERE run = %" PRId64
                 " AND kind = " HS_SNAP_KEYFRAME_SQL " AND bucket <= %" PRId64,
                 m->run, m->bucket);
    if (rc) return rc;
    int64_t kb = -1;
    if (hs_tsv_row(&t) && hs_tsv_i64(&t, NULL) > 0) kb = hs_tsv_i64(&t, NULL);
    if (kb >= 0) {
        rc = ask(q, &t, err,
                 "SELECT trace, bytes, count FROM snapshots FINAL WHERE run = %" PRId64
                 " AND kind = " HS_SNAP_KEYFRAME_SQL " AND bucket = %" PRId64,
                 m->run, kb);
        if (rc || (rc = acc_rows(&t, a, err))) return rc;
    }
    rc = ask(q, &t, err,
             "SELECT trace, bytes, count FROM snapshots FINAL WHERE run = %" PRId64
             " AND kind = " HS_SNAP_DELTA_SQL " AND bucket > %" PRId64 " AND bucket <= %" PRId64,
             m->run, kb, m->bucket);
    return rc ? rc : acc_rows(&t, a, err);
}

/* ---- events ------------------------------------------------------------------------ */

static int run_stacks(chstore *q, int64_t run, hs_map *stacks, hs_qerr *err)
{
    hs_tsv t;
    int rc =
        ask(q, &t, err, "SELECT stack_id, trace FROM run_stacks FINAL WHERE run = %" PRId64, run);
    while (!rc && hs_tsv_row(&t)) {
        uint64_t sid = tsv_u64(&t);
        if (hs_map_put(stacks, sid, (uint64_t)hs_tsv_i64(&t, NULL)))
            rc = hs__err(err, HS_ENOMEM, "out of memory");
    }
    return rc;
}

static int ch_events(hs_qstore *s, int64_t run, int64_t from_ns, int64_t upto_ns,
                     int (*cb)(const hs_qstore_event *e, void *data), void *data, hs_qerr *err)
{
    chstore *q = (chstore *)s;
    hs_map stacks = {0};
    hs_evdec dec = {0};
    hs_tsv t;
    int more = 0, rc = run_stacks(q, run, &stacks, err);
    if (!rc && from_ns == HS_QSTORE_FROM_START)
        rc = ask(q, &t, err,
                 "SELECT codec, data FROM events FINAL WHERE run = %" PRId64
                 " AND t_first_ns <= %" PRId64 " ORDER BY seq",
                 run, upto_ns);
    else if (!rc)
        rc = ask(q, &t, err,
                 "SELECT codec, data FROM events FINAL WHERE run = %" PRId64
                 " AND t_last_ns >= %" PRId64 " AND t_first_ns <= %" PRId64 " ORDER BY seq",
                 run, from_ns, upto_ns);
    while (!rc && hs_tsv_row(&t)) {
        int codec = (int)hs_tsv_i64(&t, NULL);
        size_t len;
        const char *blob = hs_tsv_field(&t, &len);
        hs_event e;
        if ((more = hs_evdec_open_row(&dec, codec, (const uint8_t *)blob, blob ? len : 0))) break;
        while (!rc && (more = hs_evdec_next(&dec, &e)) == 1) {
            if ((int64_t)e.t_ns < from_ns || (int64_t)e.t_ns > upto_ns) continue;
            uint64_t trace;
            if (!hs_map_get(&stacks, e.stack_id, &trace)) continue;
            hs_qstore_event ev = {.t_ns = (int64_t)e.t_ns,
                                  .trace = (int64_t)trace,
                                  .size = e.size,
                                  .weight = e.weight,
                                  .is_free = e.is_free};
            rc = cb(&ev, data);
        }
        if (!rc && more) break;
    }
    if (!rc && more)
        rc = hs__err(err, HS_EDB, "the stored events of run %" PRId64 " cannot be read: %s", run,
                     hs_strerror(more));
    hs_evdec_free(&dec);
    hs_map_free(&stacks);
    return rc;
}

static int ch_state(hs_qstore *s, const hs_qstore_moment *m, hs_qstore_live **rows, size_t *n,
                    hs_qerr *err)
{
    chstore *q = (chstore *)s;
    q->last_run = m->run;
    hs__state_acc a = {0};
    int rc = 0, found = 0;
    if (m->peak && (rc = state_peak(q, m->run, &a, &found, err))) goto out;
    if (!found && (rc = state_bucket(q, m, &a, err))) goto out;
    if (!found && m->exact)
        rc = hs__acc_events(&q->base, m->run, (m->bucket + 1) * m->granularity_ns, m->at_ns, &a,
                            err);
out:
    return hs__acc_finish(&a, rc, rows, n);
}

/* ---- per-trace summaries -------------------------------------------------------------- */

static int cmp_tsum_first(const void *a, const void *b)
{
    const hs_qstore_tsum *x = a, *y = b;
    if (x->s.first != y->s.first) return x->s.first < y->s.first ? -1 : 1;
    return (x->trace > y->trace) - (x->trace < y->trace);
}

/* The summary of trace tr in out (added, zeroed, when new); NULL when out
 * of memory. */
static hs_qstore_tsum *tsum_get(hs_qstore_tsums *out, hs_map *idx, int64_t tr)
{
    uint64_t i;
    if (hs_map_get(idx, (uint64_t)tr, &i)) return &out->rows[i];
    if (out->n == out->cap) {
        size_t ncap = out->cap ? out->cap * 2 : 256;
        hs_qstore_tsum *np = realloc(out->rows, ncap * sizeof *np);
        if (!np) return NULL;
        out->rows = np;
        out->cap = ncap;
    }
    if (hs_map_put(idx, (uint64_t)tr, out->n)) return NULL;
    hs_qstore_tsum *r = &out->rows[out->n++];
    memset(r, 0, sizeof *r);
    r->trace = tr;
    return r;
}

/* The summaries of run as of its mark (trace_stats rows of the highest
 * mark not above it, per trace); *mark -1 when there are none to use (no
 * mark, or one past upto: summaries cannot be cut back). */
static int tsums_stored(chstore *q, int64_t run, int64_t upto, int64_t *mark, hs_qstore_tsums *out,
                        hs_map *idx, hs_qerr *err)
{
    hs_tsv t;
    *mark = -1;
    int rc = ask(q, &t, err, "SELECT stats_bucket FROM runs FINAL WHERE id = %" PRId64, run);
    if (rc || !hs_tsv_row(&t)) return rc;
    int64_t m = hs_tsv_i64(&t, NULL);
    if (m < 0 || m > upto) return 0;
    *mark = m;
    rc = ask(q, &t, err,
             "SELECT trace, rows, first_bucket, last_bucket, bytes, max_bytes, ups, first_up, "
             "last_up, up_bytes, down_bytes, sy, sxy, syy FROM trace_stats WHERE run = %" PRId64
             " AND mark <= %" PRId64 " ORDER BY trace, mark DESC LIMIT 1 BY trace",
             run, m);
    while (!rc && hs_tsv_row(&t)) {
        hs_qstore_tsum *r = tsum_get(out, idx, hs_tsv_i64(&t, NULL));
        if (!r) return hs__err(err, HS_ENOMEM, "out of memory");
        hs_tstats *x = &r->s;
        int64_t *iv[] = {&x->rows, &x->first, &x->last,     &x->bytes,
                         &x->max,  &x->ups,   &x->first_up, &x->last_up};
        for (size_t k = 0; k < sizeof iv / sizeof *iv; k++) *iv[k] = hs_tsv_i64(&t, NULL);
        double *dv[] = {&x->up, &x->down, &x->sy, &x->sxy, &x->syy};
        for (size_t k = 0; k < sizeof dv / sizeof *dv; k++) *dv[k] = hs_tsv_f64(&t);
        out->delta_rows += x->rows;
    }
    return rc;
}

/* The stored summaries as of the run's mark, plus the delta rows after it
 * up to upto folded in bucket order: the SQLite store's very doubles
 * (hs_tstats.h). */
static int ch_trace_sums(hs_qstore *s, int64_t run, int64_t upto, hs_qstore_tsums *out,
                         hs_qerr *err)
{
    chstore *q = (chstore *)s;
    q->last_run = run;
    memset(out, 0, sizeof *out);
    hs_map idx = {0};
    hs_tsv t;
    int64_t mark;
    int rc = tsums_stored(q, run, upto, &mark, out, &idx, err);
    if (!rc)
        rc = ask(q, &t, err,
                 "SELECT bucket, trace, bytes FROM snapshots FINAL WHERE run = %" PRId64
                 " AND kind = " HS_SNAP_DELTA_SQL " AND bucket > %" PRId64 " AND bucket <= %" PRId64
                 " ORDER BY bucket",
                 run, mark, upto);
    while (!rc && hs_tsv_row(&t)) {
        int64_t b = hs_tsv_i64(&t, NULL), tr = hs_tsv_i64(&t, NULL), by = hs_tsv_i64(&t, NULL);
        hs_qstore_tsum *r = tsum_get(out, &idx, tr);
        if (!r) {
            rc = hs__err(err, HS_ENOMEM, "out of memory");
            break;
        }
        hs_tstats_add(&r->s, b, by);
        out->delta_rows++;
    }
    hs_map_free(&idx);
    if (!rc) hs__sort(out->rows, out->n, sizeof *out->rows, cmp_tsum_first);
    if (rc) {
        free(out->rows);
        memset(out, 0, sizeof *out);
    }
    return rc;
}

/* ---- series ------------------------------------------------------------------------------ */

static int ch_heap_series(hs_qstore *s, int64_t run, int (*cb)(const hs_qstore_heap *h, void *data),
                          void *data, hs_qerr *err)
{
    chstore *q = (chstore *)s;
    hs_qstore_run r = {.id = run};
    int rc = run_exact(q, &r, err);
    if (rc) return rc;
    hs_tsv t;
    if (r.exact.in_figures)
        rc = ask(q, &t, err,
                 "SELECT bucket, live_bytes, max_bytes, greatest(allocs - frees, 0) FROM "
                 "heap_exact FINAL WHERE run = %" PRId64 " ORDER BY bucket",
                 run);
    else
        rc = ask(q, &t, err,
                 "SELECT bucket, live_bytes, max_bytes, live_count FROM heap_series FINAL WHERE "
                 "run = %" PRId64 " ORDER BY bucket",
                 run);
    while (!rc && hs_tsv_row(&t)) {
        hs_qstore_heap h;
        h.bucket = hs_tsv_i64(&t, NULL);
        h.live_bytes = hs_tsv_i64(&t, NULL);
        h.max_bytes = hs_tsv_i64(&t, NULL);
        h.live_count = hs_tsv_i64(&t, NULL);
        rc = cb(&h, data);
    }
    return rc;
}

static int ch_deltas(hs_qstore *s, int64_t run, int64_t after_bucket,
                     int (*cb)(int64_t bucket, int64_t trace, int64_t bytes, void *data),
                     void *data, hs_qerr *err)
{
    chstore *q = (chstore *)s;
    hs_tsv t;
    int rc = ask(q, &t, err,
                 "SELECT bucket, trace, bytes FROM snapshots FINAL WHERE run = %" PRId64
                 " AND kind = " HS_SNAP_DELTA_SQL " AND bucket > %" PRId64 " ORDER BY bucket",
                 run, after_bucket);
    while (!rc && hs_tsv_row(&t)) {
        int64_t b = hs_tsv_i64(&t, NULL), tr = hs_tsv_i64(&t, NULL);
        rc = cb(b, tr, hs_tsv_i64(&t, NULL), data);
    }
    return rc;
}

static int ch_trace_deltas(hs_qstore *s, int64_t run, int64_t trace, int64_t first, int64_t last,
                           int (*cb)(int64_t bucket, int64_t bytes, void *data), void *data,
                           hs_qerr *err)
{
    chstore *q = (chstore *)s;
    hs_tsv t;
    int rc = ask(q, &t, err,
                 "SELECT bucket, bytes FROM snapshots FINAL WHERE run = %" PRId64
                 " AND kind = " HS_SNAP_DELTA_SQL " AND trace = %" PRId64 " AND bucket >= %" PRId64
                 " AND bucket <= %" PRId64 " ORDER BY bucket",
                 run, trace, first, last);
    while (!rc && hs_tsv_row(&t)) {
        int64_t b = hs_tsv_i64(&t, NULL);
        rc = cb(b, hs_tsv_i64(&t, NULL), data);
    }
    return rc;
}

static int ch_rss(hs_qstore *s, int64_t run,
                  int (*cb)(int64_t t_ns, int64_t rss_bytes, int64_t vsize_bytes, void *data),
                  void *data, hs_qerr *err)
{
    chstore *q = (chstore *)s;
    hs_tsv t;
    int rc = ask(q, &t, err,
                 "SELECT t_ns, rss_bytes, vsize_bytes FROM process_samples FINAL WHERE run = "
                 "%" PRId64 " ORDER BY t_ns",
                 run);
    while (!rc && hs_tsv_row(&t)) {
        int64_t a = hs_tsv_i64(&t, NULL), b = hs_tsv_i64(&t, NULL);
        rc = cb(a, b, hs_tsv_i64(&t, NULL), data);
    }
    return rc;
}

static int ch_rss_at(hs_qstore *s, int64_t run, int64_t t_ns, int64_t *rss, hs_qerr *err)
{
    chstore *q = (chstore *)s;
    hs_tsv t;
    *rss = 0;
    int rc = ask(q, &t, err,
                 "SELECT rss_bytes FROM process_samples WHERE run = %" PRId64
                 " AND t_ns <= %" PRId64 " ORDER BY t_ns DESC LIMIT 1",
                 run, t_ns);
    if (!rc && hs_tsv_row(&t)) *rss = hs_tsv_i64(&t, NULL);
    return rc;
}

static int ch_sizes(hs_qstore *s, int64_t run,
                    int (*cb)(int64_t bucket, int64_t allocs, int64_t bytes, void *data),
                    void *data, hs_qerr *err)
{
    chstore *q = (chstore *)s;
    hs_tsv t;
    int rc = ask(q, &t, err,
                 "SELECT bucket, allocs, bytes FROM size_hist FINAL WHERE run = %" PRId64
                 " ORDER BY bucket",
                 run);
    while (!rc && hs_tsv_row(&t)) {
        int64_t a = hs_tsv_i64(&t, NULL), b = hs_tsv_i64(&t, NULL);
        rc = cb(a, b, hs_tsv_i64(&t, NULL), data);
    }
    return rc;
}

/* ---- stacks ---------------------------------------------------------------------------------- */

static int node_put(chstore *q, int64_t id, const hs_qstore_node *n)
{
    uint64_t i;
    if (hs_map_get(&q->node_idx, (uint64_t)id, &i)) return 0;
    if (q->nnodes == q->capnodes) {
        size_t cap = q->capnodes ? q->capnodes * 2 : 1024;
        hs_qstore_node *np = realloc(q->nodes, cap * sizeof *np);
        if (!np) return HS_ENOMEM;
        q->nodes = np;
        int64_t *ip = realloc(q->node_ids, cap * sizeof *ip);
        if (!ip) return HS_ENOMEM;
        q->node_ids = ip;
        q->capnodes = cap;
    }
    q->nodes[q->nnodes] = *n;
    q->node_ids[q->nnodes] = id;
    if (hs_map_put(&q->node_idx, (uint64_t)id, q->nnodes)) return HS_ENOMEM;
    q->nnodes++;
    return 0;
}

/* Reads "id, parent, frame, depth" rows of t into the cache; the parents
 * not cached yet go to next ("," separated). */
static int nodes_read(chstore *q, hs_tsv *t, hs_buf *next, hs_qerr *err)
{
    while (hs_tsv_row(t)) {
        int64_t id = hs_tsv_i64(t, NULL);
        hs_qstore_node n;
        n.parent = hs_tsv_i64(t, NULL);
        n.frame = hs_tsv_i64(t, NULL);
        n.depth = (int)hs_tsv_i64(t, NULL);
        uint64_t i;
        if (n.parent && !hs_map_get(&q->node_idx, (uint64_t)n.parent, &i))
            hs_buf_printf(next, "%s%" PRId64, next->n ? "," : "", n.parent);
        if (node_put(q, id, &n)) return hs__err(err, HS_ENOMEM, "out of memory");
    }
    return next->oom ? hs__err(err, HS_ENOMEM, "out of memory") : 0;
}

/* Caches the frame of row t (after its id), or refreshes the cached one. */
static int frame_put(chstore *q, int64_t id, hs_tsv *t)
{
    const char *fn = hs_tsv_field(t, NULL), *file = hs_tsv_field(t, NULL);
    int64_t line = hs_tsv_i64(t, NULL);
    const char *mod = hs_tsv_field(t, NULL);
    ch_cached_frame nf = {strdup(fn ? fn : ""), strdup(file ? file : ""), strdup(mod ? mod : ""),
                          line, hs_tsv_i64(t, NULL)};
    uint64_t at;
    int known = hs_map_get(&q->frame_idx, (uint64_t)id, &at);
    if (!nf.function || !nf.file || !nf.module) goto oom;
    if (!known && q->nframes == q->capframes) {
        size_t cap = q->capframes ? q->capframes * 2 : 1024;
        ch_cached_frame *np = realloc(q->frames, cap * sizeof *np);
        if (!np) goto oom;
        q->frames = np;
        q->capframes = cap;
    }
    if (!known && hs_map_put(&q->frame_idx, (uint64_t)id, q->nframes)) goto oom;
    ch_cached_frame *f = &q->frames[known ? at : q->nframes++];
    if (known) {
        free(f->function);
        free(f->file);
        free(f->module);
    }
    *f = nf;
    return 0;
oom:
    free(nf.function);
    free(nf.file);
    free(nf.module);
    return HS_ENOMEM;
}

/* Caches the stack tree of run: its stacks' leaf nodes, then their
 * parents one depth at a time, then every frame they name. */
static int prefetch(chstore *q, int64_t run, hs_qerr *err)
{
    uint64_t v;
    if (hs_map_get(&q->prefetched, (uint64_t)run, &v)) return 0;
    hs_tsv t;
    hs_buf next = {0};
    size_t first = q->nnodes;
    int rc = ask(q, &t, err,
                 "SELECT id, parent, frame, depth FROM traces FINAL WHERE id IN (SELECT trace "
                 "FROM run_stacks WHERE run = %" PRId64 ")",
                 run);
    if (!rc) rc = nodes_read(q, &t, &next, err);
    for (int level = 0; !rc && next.n && level < 4096; level++) {
        q->sql.n = 0;
        hs_buf_printf(&q->sql, "SELECT id, parent, frame, depth FROM traces FINAL WHERE id IN (");
        hs_buf_put(&q->sql, next.p, next.n);
        hs_buf_printf(&q->sql, ")");
        next.n = 0;
        if (!(rc = ask_buf(q, &t, err))) rc = nodes_read(q, &t, &next, err);
    }
    /* the frames of the nodes just cached */
    for (size_t k = first; !rc && k < q->nnodes; k++) {
        uint64_t i;
        if (hs_map_get(&q->frame_idx, (uint64_t)q->nodes[k].frame, &i)) continue;
        hs_buf_printf(&next, "%s%" PRId64, next.n ? "," : "", q->nodes[k].frame);
    }
    if (!rc && next.n) {
        q->sql.n = 0;
        hs_buf_printf(&q->sql, "SELECT id, function, file, line, module, module_offset FROM "
                               "frames FINAL WHERE id IN (");
        hs_buf_put(&q->sql, next.p, next.n);
        hs_buf_printf(&q->sql, ")");
        rc = ask_buf(q, &t, err);
        while (!rc && hs_tsv_row(&t)) {
            int64_t id = hs_tsv_i64(&t, NULL);
            uint64_t i;
            if (!hs_map_get(&q->frame_idx, (uint64_t)id, &i) && frame_put(q, id, &t))
                rc = hs__err(err, HS_ENOMEM, "out of memory");
        }
    }
    hs_buf_free(&next);
    if (!rc && hs_map_put(&q->prefetched, (uint64_t)run, 1))
        rc = hs__err(err, HS_ENOMEM, "out of memory");
    return rc;
}

static int ch_node(hs_qstore *s, int64_t id, hs_qstore_node *out, hs_qerr *err)
{
    chstore *q = (chstore *)s;
    uint64_t i;
    int rc;
    if (!hs_map_get(&q->node_idx, (uint64_t)id, &i) && q->last_run &&
        (rc = prefetch(q, q->last_run, err)))
        return rc;
    if (!hs_map_get(&q->node_idx, (uint64_t)id, &i)) {
        hs_tsv t;
        hs_buf next = {0};
        rc = ask(q, &t, err,
                 "SELECT id, parent, frame, depth FROM traces FINAL WHERE id = %" PRId64, id);
        if (!rc) rc = nodes_read(q, &t, &next, err);
        hs_buf_free(&next);
        if (rc) return rc;
        if (!hs_map_get(&q->node_idx, (uint64_t)id, &i))
            return hs__err(err, HS_EDB, "trace node %" PRId64 " is missing", id);
    }
    *out = q->nodes[i];
    return 0;
}

static int ch_frame(hs_qstore *s, int64_t id, hs_qstore_frame *out, hs_qerr *err)
{
    chstore *q = (chstore *)s;
    *out = (hs_qstore_frame){.function = "", .file = "", .module = ""};
    uint64_t i;
    /* an unnamed frame is asked again: a front end may have named it since */
    if (!hs_map_get(&q->frame_idx, (uint64_t)id, &i) || !q->frames[i].function[0]) {
        hs_tsv t;
        int rc = ask(q, &t, err,
                     "SELECT id, function, file, line, module, module_offset FROM frames FINAL "
                     "WHERE id = %" PRId64,
                     id);
        if (rc) return rc;
        if (!hs_tsv_row(&t)) return 0;
        hs_tsv_i64(&t, NULL);
        if (frame_put(q, id, &t)) return hs__err(err, HS_ENOMEM, "out of memory");
        if (!hs_map_get(&q->frame_idx, (uint64_t)id, &i)) return 0;
    }
    const ch_cached_frame *f = &q->frames[i];
    *out = (hs_qstore_frame){f->function, f->file, f->module, f->line, f->module_offset};
    return 0;
}

/* ---- mappings and addresses (pprof) ---------------------------------------------------------- */

static int ch_mappings(hs_qstore *s, int64_t run, int (*cb)(const hs_qstore_mapping *m, void *data),
                       void *data, hs_qerr *err)
{
    chstore *q = (chstore *)s;
    hs_tsv t;
    int rc = ask(q, &t, err,
                 "SELECT start, end, file_offset, build_id, path FROM mappings FINAL WHERE run = "
                 "%" PRId64 " AND t_ns IN (SELECT max(t_ns) FROM mappings WHERE run = %" PRId64
                 ") ORDER BY start",
                 run, run);
    while (!rc && hs_tsv_row(&t)) {
        hs_qstore_mapping m;
        m.start = tsv_u64(&t);
        m.end = tsv_u64(&t);
        m.offset = tsv_u64(&t);
        m.build_id = hs_tsv_field(&t, &m.build_id_len);
        m.path = hs_tsv_field(&t, NULL);
        if (!m.build_id_len) m.build_id = NULL;
        if (!m.path) m.path = "";
        rc = cb(&m, data);
    }
    return rc;
}

static int ch_pcs(hs_qstore *s, int64_t run, int (*cb)(uint64_t pc, int64_t frame, void *data),
                  void *data, hs_qerr *err)
{
    chstore *q = (chstore *)s;
    hs_tsv t;
    int rc = ask(q, &t, err,
                 "SELECT pc, frame FROM run_pcs FINAL WHERE run = %" PRId64 " ORDER BY pc", run);
    while (!rc && hs_tsv_row(&t)) {
        uint64_t pc = tsv_u64(&t);
        rc = cb(pc, hs_tsv_i64(&t, NULL), data);
    }
    return rc;
}

/* ---- /api/sql: ClickHouse's dialect, read-only -------------------------------------------------
 */

/* {"sql": …, "limit": N, "timeout_ms": N} as docs/api.md says, run with
 * readonly = 1 and the limits as ClickHouse settings. */
/* /api/sql's connection, opened at its first use: as the URL's sql_user
 * (hs_chttp.h) when it names one, so that ClickHouse itself refuses what
 * that user may not do. NULL with msg filled when it cannot be opened. */
static hs_ch *sql_conn(chstore *q, char *msg, size_t len)
{
    if (q->sqlch) return q->sqlch;
    if (hs_ch_open(&q->sqlch, q->url, msg, len)) return NULL;
    if (hs_ch_use_sql_user(q->sqlch)) {
        snprintf(msg, len, "out of memory");
        hs_ch_free(q->sqlch);
        q->sqlch = NULL;
    }
    return q->sqlch;
}

static int ch_sql(hs_qstore *s, const char *body, size_t len, json_t **out, hs_qerr *err)
{
    chstore *q = (chstore *)s;
    *out = NULL;
    json_error_t je;
    json_t *req = json_loadb(body, len, 0, &je);
    const char *sql = req ? json_string_value(json_object_get(req, "sql")) : NULL;
    json_t *jl = req ? json_object_get(req, "limit") : NULL,
           *jt = req ? json_object_get(req, "timeout_ms") : NULL;
    json_int_t limit = jl ? json_integer_value(jl) : 1000, tmo = jt ? json_integer_value(jt) : 2000;
    int rc = 0;
    if (!sql || !*sql)
        rc = hs__err(err, HS_EINVAL, "the body must be {\"sql\": \"SELECT …\"}");
    else if ((jl && !json_is_integer(jl)) || limit < 1 || limit > 100000)
        rc = hs__err(err, HS_EINVAL, "limit must be 1 to 100000");
    else if ((jt && !json_is_integer(jt)) || tmo < 1 || tmo > 30000)
        rc = hs__err(err, HS_EINVAL, "timeout_ms must be 1 to 30000");
    if (rc) {
        json_decref(req);
        return rc;
    }
    char settings[300], msg[480];
    hs_ch *c = sql_conn(q, msg, sizeof msg);
    if (!c) {
        json_decref(req);
        return hs__err(err, HS_EDB, "%s", msg);
    }
    /* as sql_user, whose profile is read-only (readonly = 2: settings may
     * change, nothing else), the limits come from here and readonly from
     * the profile; else readonly=1 is sent with the query */
    snprintf(settings, sizeof settings,
             "max_execution_time=%lld&max_result_rows=%lld&result_overflow_mode=break&"
             "output_format_json_quote_64bit_integers=0%s",
             (long long)((tmo + 999) / 1000), (long long)limit + 1,
             hs_ch_sql_user(c) ? "" : "&readonly=1");
    hs_buf b = {0};
    size_t n = strlen(sql);
    while (n && (sql[n - 1] == ';' || sql[n - 1] == ' ' || sql[n - 1] == '\n')) n--;
    hs_buf_put(&b, sql, n);
    hs_buf_printf(&b, " FORMAT JSONCompact");
    hs_ch_settings(c, settings);
    rc = b.oom ? HS_ENOMEM : hs_ch_query(c, b.p, NULL, 0, &q->ans, msg, sizeof msg);
    hs_buf_free(&b);
    json_decref(req);
    if (rc)
        return hs__err(err,
                       strstr(msg, "Code: 159,") || strstr(msg, "imeout exceeded") ? HS_ETIMEOUT
                                                                                   : HS_EINVAL,
                       "%s", msg);
    json_t *ans = json_loadb(q->ans.p, q->ans.n, 0, &je);
    json_t *meta = json_object_get(ans, "meta"), *data = json_object_get(ans, "data");
    if (!json_is_array(meta) || !json_is_array(data)) {
        json_decref(ans);
        return hs__err(err, HS_EDB, "ClickHouse's answer is not JSONCompact");
    }
    json_t *cols = json_array(), *rows = json_array();
    size_t i;
    json_t *v;
    json_array_foreach(meta, i, v) json_array_append(cols, json_object_get(v, "name"));
    size_t nrows = json_array_size(data), keep = nrows > (size_t)limit ? (size_t)limit : nrows;
    for (i = 0; i < keep; i++) json_array_append(rows, json_array_get(data, i));
    *out = json_pack("{s:o, s:o, s:b, s:I}", "columns", cols, "rows", rows, "truncated",
                     nrows > (size_t)limit, "row_count", (json_int_t)keep);
    json_decref(ans);
    return *out ? 0 : hs__err(err, HS_ENOMEM, "out of memory");
}

/* ---- runs_summary (trend) ------------------------------------------------------ */

/* A run's summary as read; strings owned. */
typedef struct ch_sum {
    hs_qstore_summary r;
    char *program, *state, *label;
    int64_t g;
} ch_sum;

typedef struct ch_sums {
    ch_sum *v;
    size_t n;
    hs_map idx; /* run id -> index */
} ch_sums;

static void sums_free(ch_sums *x)
{
    for (size_t i = 0; i < x->n; i++) {
        free(x->v[i].program);
        free(x->v[i].state);
        free(x->v[i].label);
    }
    free(x->v);
    hs_map_free(&x->idx);
}

static char *dup_field(hs_tsv *t)
{
    const char *f = hs_tsv_field(t, NULL);
    return strdup(f ? f : "");
}

/* The runs ask selects, newest first as runs_find lists them. */
static int sums_read(chstore *q, const hs_qstore_summary_ask *a, ch_sums *x, hs_qerr *err)
{
    hs_buf b = {0};
    int rc = 0;
    hs_buf_printf(&b, "SELECT id, start_unix_ns, end_ns, program, state, peak_bytes, live_bytes, "
                      "total_alloc_bytes, dropped_alloc_events + dropped_free_events, has_rss, "
                      "rss_peak_bytes, has_leak, leak_bytes_per_s, granularity_ns FROM runs "
                      "FINAL WHERE 1");
    for (int i = 0; !rc && i < a->n; i++) rc = where_kv(q, &b, a->f[i].key, a->f[i].value, err);
    if (a->by) {
        hs_buf_printf(&b, " AND id IN (SELECT run FROM run_labels FINAL WHERE key = ");
        hs_ch_quote(&b, a->by, strlen(a->by));
        hs_buf_printf(&b, ")");
    }
    hs_buf_printf(&b, " ORDER BY start_unix_ns DESC, id DESC LIMIT %" PRId64, a->limit);
    hs_tsv t;
    if (!rc) rc = ask_built(q, &b, &t, err);
    hs_buf_free(&b);
    size_t cap = 0;
    while (!rc && hs_tsv_row(&t)) {
        if (x->n == cap) {
            cap = cap ? cap * 2 : 64;
            ch_sum *np = realloc(x->v, cap * sizeof *np);
            if (!np) return hs__err(err, HS_ENOMEM, "out of memory");
            x->v = np;
        }
        ch_sum *c = &x->v[x->n];
        memset(c, 0, sizeof *c);
        c->r.id = hs_tsv_i64(&t, NULL);
        c->r.start_unix_ns = hs_tsv_i64(&t, NULL);
        c->r.duration_ns = hs_tsv_i64(&t, NULL);
        c->program = dup_field(&t);
        c->state = dup_field(&t);
        c->r.peak_bytes = hs_tsv_i64(&t, NULL);
        c->r.end_bytes = hs_tsv_i64(&t, NULL);
        c->r.total_alloc_bytes = hs_tsv_i64(&t, NULL);
        c->r.dropped_events = hs_tsv_i64(&t, NULL);
        c->r.has_rss = (int)hs_tsv_i64(&t, NULL);
        c->r.rss_peak_bytes = hs_tsv_i64(&t, NULL);
        c->r.has_leak = (int)hs_tsv_i64(&t, NULL);
        c->r.leak_bytes_per_s = hs_tsv_f64(&t);
        c->g = hs_tsv_i64(&t, NULL);
        if (!c->program || !c->state || hs_map_put(&x->idx, (uint64_t)c->r.id, x->n))
            rc = hs__err(err, HS_ENOMEM, "out of memory");
        x->n++;
    }
    return rc;
}

/* " IN (a,b,…)" of the runs of x that want (NULL: all). */
static void ids_in(hs_buf *b, const ch_sums *x, int (*want)(const ch_sum *c))
{
    int any = 0;
    hs_buf_printf(b, " IN (");
    for (size_t i = 0; i < x->n; i++)
        if (!want || want(&x->v[i])) hs_buf_printf(b, "%s%" PRId64, any++ ? "," : "", x->v[i].r.id);
    hs_buf_printf(b, "%s)", any ? "" : "0");
}

static int no_rss(const ch_sum *c)
{
    return !c->r.has_rss;
}

static int no_leak(const ch_sum *c)
{
    return !c->r.has_leak;
}

static ch_sum *sum_of(ch_sums *x, int64_t run)
{
    uint64_t i;
    return hs_map_get(&x->idx, (uint64_t)run, &i) ? &x->v[i] : NULL;
}

/* The figures the runs row leaves out: by's value; and, for runs that
 * have not ended (their row has none yet), the highest RSS sample and the
 * leak rate (schema/hs_schema.h's HS_SCHEMA_*_SQL, the same arithmetic). */
static int sums_fill(chstore *q, const hs_qstore_summary_ask *a, ch_sums *x, hs_qerr *err)
{
    hs_tsv t;
    int rc = 0;
    if (a->by) {
        q->sql.n = 0;
        hs_buf_printf(&q->sql, "SELECT run, value FROM run_labels FINAL WHERE key = ");
        hs_ch_quote(&q->sql, a->by, strlen(a->by));
        hs_buf_printf(&q->sql, " AND run");
        ids_in(&q->sql, x, NULL);
        rc = ask_buf(q, &t, err);
        while (!rc && hs_tsv_row(&t)) {
            ch_sum *c = sum_of(x, hs_tsv_i64(&t, NULL));
            if (c && !c->label && !(c->label = dup_field(&t)))
                rc = hs__err(err, HS_ENOMEM, "out of memory");
        }
    }
    if (rc) return rc;
    q->sql.n = 0;
    hs_buf_printf(&q->sql, "SELECT run, max(rss_bytes) FROM process_samples FINAL WHERE run");
    ids_in(&q->sql, x, no_rss);
    hs_buf_printf(&q->sql, " GROUP BY run");
    rc = ask_buf(q, &t, err);
    while (!rc && hs_tsv_row(&t)) {
        ch_sum *c = sum_of(x, hs_tsv_i64(&t, NULL));
        if (!c || c->r.has_rss) continue;
        c->r.rss_peak_bytes = hs_tsv_i64(&t, NULL);
        c->r.has_rss = 1;
    }
    if (rc) return rc;
    /* 18.16 has no window functions: the run's last bucket is joined in */
    q->sql.n = 0;
    hs_buf_printf(&q->sql, "SELECT run, m, bucket, live_bytes FROM heap_series FINAL ANY INNER "
                           "JOIN (SELECT run, max(bucket) AS m FROM heap_series FINAL WHERE run");
    ids_in(&q->sql, x, no_leak);
    hs_buf_printf(&q->sql, " GROUP BY run) USING run WHERE bucket >= intDiv(m, 4) ORDER BY run");
    rc = ask_buf(q, &t, err);
    ch_sum *c = NULL;
    int64_t lo2 = 0, lo4 = 0, m = 0;
    int h2 = 0, h4 = 0;
    for (int more = !rc; more;) {
        more = hs_tsv_row(&t);
        int64_t run = more ? hs_tsv_i64(&t, NULL) : 0;
        if (c && (!more || run != c->r.id)) { /* the run before is complete */
            c->r.leak_bytes_per_s =
                m < 4 || !h2 || !h4 ? 0.0 : (double)(lo4 - lo2) * 2e9 / (double)(m * c->g);
            c->r.has_leak = 1;
            c = NULL;
        }
        if (!more) break;
        if (!c) {
            c = sum_of(x, run);
            h2 = h4 = 0;
        }
        if (!c || c->r.has_leak) continue;
        m = hs_tsv_i64(&t, NULL);
        int64_t b = hs_tsv_i64(&t, NULL), live = hs_tsv_i64(&t, NULL);
        if (b >= 3 * m / 4 && (!h4 || live < lo4)) lo4 = live, h4 = 1;
        if (b < m / 2 && (!h2 || live < lo2)) lo2 = live, h2 = 1;
    }
    for (size_t i = 0; i < x->n; i++)
        if (!x->v[i].r.has_leak) x->v[i].r.has_leak = 1; /* no series: 0 */
    return rc;
}

/* 1 when node id or one of its ancestors is of a frame in frames (memo
 * keeps the answers: id -> 1 + answer). */
static int through(chstore *q, int64_t id, const hs_map *frames, hs_map *memo, int *yes,
                   hs_qerr *err)
{
    uint64_t v;
    if (hs_map_get(memo, (uint64_t)id, &v)) {
        *yes = (int)v - 1;
        return 0;
    }
    hs_qstore_node n;
    int rc = ch_node(&q->base, id, &n, err);
    if (rc) return rc;
    *yes = hs_map_get(frames, (uint64_t)n.frame, &v);
    if (!*yes && n.parent && (rc = through(q, n.parent, frames, memo, yes, err))) return rc;
    return hs_map_put(memo, (uint64_t)id, (uint64_t)*yes + 1)
               ? hs__err(err, HS_ENOMEM, "out of memory")
               : 0;
}

/* The code's bytes in each run: its peak's (or last keyframe's) rows
 * whose stack passes through one of the code's frames. */
static int sums_code(chstore *q, const hs_qstore_summary_ask *a, ch_sums *x, hs_qerr *err)
{
    hs_map frames = {0}, memo = {0};
    hs_tsv t;
    q->sql.n = 0;
    if (a->function) {
        hs_buf_printf(&q->sql, "SELECT id FROM frames FINAL WHERE function = ");
        hs_ch_quote(&q->sql, a->function, strlen(a->function));
    } else {
        size_t n = strlen(a->file);
        hs_buf_printf(&q->sql,
                      "SELECT id FROM frames FINAL WHERE line = %" PRId64 " AND (file = ", a->line);
        hs_ch_quote(&q->sql, a->file, n);
        hs_buf_printf(&q->sql, " OR endsWith(file, concat('/', ");
        hs_ch_quote(&q->sql, a->file, n);
        hs_buf_printf(&q->sql, ")))");
    }
    int rc = ask_buf(q, &t, err);
    size_t nframes = 0;
    while (!rc && hs_tsv_row(&t) && ++nframes)
        if (hs_map_put(&frames, (uint64_t)hs_tsv_i64(&t, NULL), 1))
            rc = hs__err(err, HS_ENOMEM, "out of memory");
    for (size_t i = 0; !rc && i < x->n; i++) {
        ch_sum *c = &x->v[i];
        c->r.has_code = 1;
        if (!nframes) continue;
        int64_t run = c->r.id;
        if ((rc = prefetch(q, run, err))) break;
        if (a->code_at_end)
            rc = ask(q, &t, err,
                     "SELECT trace, bytes FROM snapshots FINAL WHERE run = %" PRId64
                     " AND kind = " HS_SNAP_KEYFRAME_SQL " AND bucket = (SELECT max(bucket) FROM "
                     "snapshots WHERE run = %" PRId64 " AND kind = " HS_SNAP_KEYFRAME_SQL ")",
                     run, run);
        else
            rc = ask(q, &t, err,
                     "SELECT trace, bytes FROM snapshots WHERE run = %" PRId64
                     " AND kind = " HS_SNAP_PEAK_SQL " AND (bucket, ver) IN (SELECT bucket, "
                     "max(ver) FROM snapshots WHERE run = %" PRId64 " AND kind = " HS_SNAP_PEAK_SQL
                     " GROUP BY bucket ORDER BY bucket DESC LIMIT 1)",
                     run, run);
        /* the rows first: through() asks ClickHouse too, into the same buffer */
        int64_t *rows = NULL;
        size_t nr = 0, cap = 0;
        while (!rc && hs_tsv_row(&t)) {
            if (nr + 2 > cap) {
                cap = cap ? cap * 2 : 256;
                int64_t *np = realloc(rows, cap * sizeof *np);
                if (!np) {
                    rc = hs__err(err, HS_ENOMEM, "out of memory");
                    break;
                }
                rows = np;
            }
            rows[nr++] = hs_tsv_i64(&t, NULL);
            rows[nr++] = hs_tsv_i64(&t, NULL);
        }
        for (size_t k = 0; !rc && k < nr; k += 2) {
            int yes = 0;
            rc = through(q, rows[k], &frames, &memo, &yes, err);
            if (yes) c->r.code_bytes += rows[k + 1];
        }
        free(rows);
    }
    hs_map_free(&frames);
    hs_map_free(&memo);
    return rc;
}

static int cmp_sum(const void *a, const void *b)
{
    const ch_sum *x = a, *y = b;
    if (x->r.start_unix_ns != y->r.start_unix_ns)
        return x->r.start_unix_ns < y->r.start_unix_ns ? -1 : 1;
    return (x->r.id > y->r.id) - (x->r.id < y->r.id);
}

static int ch_runs_summary(hs_qstore *s, const hs_qstore_summary_ask *a,
                           int (*cb)(const hs_qstore_summary *r, void *data), void *data,
                           hs_qerr *err)
{
    chstore *q = (chstore *)s;
    assert(a->limit > 0 && (!a->file || !a->function));
    ch_sums x = {0};
    int rc = sums_read(q, a, &x, err);
    if (!rc && x.n) rc = sums_fill(q, a, &x, err);
    if (!rc && x.n && (a->function || a->file)) rc = sums_code(q, a, &x, err);
    if (!rc && x.n) qsort(x.v, x.n, sizeof *x.v, cmp_sum); /* oldest first */
    for (size_t i = 0; !rc && i < x.n; i++) {
        ch_sum *c = &x.v[i];
        c->r.program = c->program;
        c->r.state = c->state;
        c->r.label = c->label;
        rc = cb(&c->r, data);
    }
    sums_free(&x);
    return rc;
}

static const hs_qstore_ops ch_ops = {
    .name = "clickhouse",
    .free = ch_free,
    .idle = ch_idle,
    .read_only = ch_read_only,
    .runs_find = ch_runs_find,
    .runs_by_uuid = ch_runs_by_uuid,
    .run = ch_run,
    .run_labels = ch_run_labels,
    .state = ch_state,
    .trace_sums = ch_trace_sums,
    .heap_series = ch_heap_series,
    .deltas = ch_deltas,
    .trace_deltas = ch_trace_deltas,
    .rss = ch_rss,
    .rss_at = ch_rss_at,
    .sizes = ch_sizes,
    .node = ch_node,
    .frame = ch_frame,
    .events = ch_events,
    .mappings = ch_mappings,
    .pcs = ch_pcs,
    .sql = ch_sql,
    .runs_summary = ch_runs_summary,
};

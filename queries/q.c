/* q: the query handle of queries/ over its store (hs_qstore.h), its caches,
 * and the pieces every view stands on: resolving a run and a moment, the
 * live state at that moment, and stacks as frames (named by site.c). It
 * calls only the store, site.c and qbase.c. */
#include <assert.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hs_error.h"
#include "hs_snap.h"
#include "q_internal.h"
#ifdef HS_WITH_CLICKHOUSE
#include "store_clickhouse.h"
#endif

/* ---- open/close ----------------------------------------------------------- */

static int cmp_i64_desc(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x < y) - (x > y);
}

int64_t hs__kth_largest(int64_t *w, size_t n, size_t k)
{
    assert(k >= 1 && k <= n);
    hs__sort(w, n, sizeof *w, cmp_i64_desc);
    return w[k - 1];
}

int hs_q_open(hs_q **out, const char *db_path, hs_qerr *err)
{
    *out = NULL;
    hs_q *q = calloc(1, sizeof *q);
    if (!q || !(q->path = strdup(db_path))) {
        free(q);
        return hs__err(err, HS_ENOMEM, "out of memory");
    }
    int rc;
    if (!strncmp(db_path, "clickhouse://", 13)) /* docs/clickhouse.md */
#ifdef HS_WITH_CLICKHOUSE
        rc = hs_qstore_clickhouse_open(&q->store, db_path, err);
#else
        rc = hs__err(err, HS_ENOTSUP, "this build has no ClickHouse store (it needs libcurl)");
#endif
    else
        rc = hs_qstore_sqlite_open(&q->store, db_path, err);
    if (rc) {
        free(q->path);
        free(q);
        return rc;
    }
    *out = q;
    return 0;
}

static void frames_clear(hs_q *q)
{
    for (size_t i = 0; i < q->nframes; i++) {
        hs__frame *f = q->frames[i];
        free(f->function);
        free(f->file);
        free(f->module);
        free(f->name);
        free(f->label);
        free(f);
    }
    free(q->frames);
    q->frames = NULL;
    q->nframes = q->capframes = 0;
    hs__map_free(&q->frame_idx);
}

void hs_q_free(hs_q *q)
{
    if (!q) return;
    hs_qstore_free(q->store);
    frames_clear(q);
    free(q->nodes);
    hs__map_free(&q->node_idx);
    hs__map_free(&q->site_cache);
    hs__map_free(&q->site_class);
    free(q->path);
    free(q);
}

/* ---- runs ----------------------------------------------------------------- */

/* The numbers a view uses, from the record. */
static void run_numbers(hs__run *out, const hs_qstore_run *r)
{
    out->id = r->id;
    out->g = r->granularity_ns;
    if (out->g <= 0) out->g = 1000000000;
    out->keyframe_every = r->keyframe_every;
    out->last_bucket = r->last_bucket;
    /* An open run's end_ns may lag its data; the data's extent is a floor. */
    int64_t data_end = hs_bucket_end(out->last_bucket, out->g), end_ns = r->end_ns;
    if (end_ns <= 0) end_ns = data_end;
    if (end_ns < r->peak_t_ns) end_ns = r->peak_t_ns;
    out->end_ns = end_ns;
    /* The end of a Python program's main code: only a moment inside the
     * run counts. */
    out->main_end_ns = r->main_end_ns > 0 && r->main_end_ns <= end_ns ? r->main_end_ns : 0;
    out->peak_t_ns = r->peak_t_ns;
    out->peak_bytes = r->peak_bytes;
    out->end_bytes = r->live_bytes;
    out->sample_bytes = r->sample_bytes;
}

/* The record's strings, copied (the store's are lent until its next call):
 * into one block, out->strs. 0 or HS_ENOMEM. */
static int run_strings(hs__run *out, const hs_qstore_run *r, hs_qerr *err)
{
    const char *src[] = {r->uuid,  r->program,  r->host, r->collector_version,
                         r->state, r->argv_json};
    const char **dst[] = {&out->rec.uuid,  &out->rec.program,
                          &out->rec.host,  &out->rec.collector_version,
                          &out->rec.state, &out->rec.argv_json};
    size_t len[HS_COUNTOF(src)], total = 0;
    for (size_t i = 0; i < HS_COUNTOF(src); i++)
        total += (len[i] = src[i] ? strlen(src[i]) : 0) + 1;
    char *p = out->strs = malloc(total);
    if (!p) return hs__err(err, HS_ENOMEM, "out of memory");
    for (size_t i = 0; i < HS_COUNTOF(src); i++) {
        if (len[i]) memcpy(p, src[i], len[i]);
        p[len[i]] = '\0';
        *dst[i] = p;
        p += len[i] + 1;
    }
    return 0;
}

/* The record from the store's run and out's numbers (strings still to copy). */
static void run_record(hs_run_record *rec, const hs_qstore_run *r, const hs__run *out)
{
    const hs_qstore_exact *e = &r->exact;
    *rec = (hs_run_record){
        .id = r->id,
        .pid = r->pid,
        .ppid = r->ppid,
        .has_parent = r->has_parent,
        .parent_id = r->has_parent ? r->parent_id : 0,
        .start_unix_ms = r->start_unix_ns / 1000000,
        .duration_ns = out->end_ns,
        .clean_exit = r->clean_exit < 0 ? -1 : !!r->clean_exit,
        .peak_bytes = out->peak_bytes,
        .peak_count = r->peak_count,
        .peak_t_ns = out->peak_t_ns,
        .end_bytes = out->end_bytes,
        .end_count = r->live_count,
        .total_alloc_bytes = r->total_alloc_bytes,
        .total_alloc_count = r->total_alloc_count,
        .alloc_events = r->alloc_events,
        .free_events = r->free_events,
        .granularity_ns = out->g,
        .keyframe_every = out->keyframe_every,
        .has_bye_alloc = r->has_bye_alloc,
        .has_bye_free = r->has_bye_free,
        .bye_alloc_events = r->bye_alloc_events,
        .bye_free_events = r->bye_free_events,
        .main_end_ns = out->main_end_ns,
        .exact = {.has = e->has,
                  .in_figures = e->has && e->in_figures,
                  .sizes = e->usable_call ? "malloc_usable_size" : "glibc chunk sizes",
                  .allocs = e->allocs,
                  .frees = e->frees,
                  .alloc_bytes = e->alloc_bytes,
                  .free_bytes = e->free_bytes,
                  .error_bytes = e->error_bytes,
                  .est_peak_bytes = e->est_peak_bytes,
                  .est_peak_t_ns = e->est_peak_t_ns},
        .sampling = {.sample_bytes = r->sample_bytes,
                     .max_depth = r->max_depth,
                     .dropped = {[HS_RUNDROP_ALLOC_EVENTS] = r->dropped_alloc_events,
                                 [HS_RUNDROP_FREE_EVENTS] = r->dropped_free_events,
                                 [HS_RUNDROP_ALLOC_BYTES] = r->dropped_alloc_bytes,
                                 [HS_RUNDROP_FREE_BYTES] = r->dropped_free_bytes,
                                 [HS_RUNDROP_STACKS_TRUNCATED] = r->stacks_truncated,
                                 [HS_RUNDROP_UNWIND_FAILED] = r->unwind_failed,
                                 [HS_RUNDROP_LIVE_SET_FULL] = r->live_set_full,
                                 [HS_RUNDROP_PYTHON_FALLBACK] = r->python_fallback,
                                 [HS_RUNDROP_PYTHON_SMALL_UNSEEN] = r->python_small_unseen}}};
}

/* A label of the run: key and value copied into one block. */
static int label_put(const char *key, const char *value, void *data)
{
    hs__run *run = data;
    if (!key || !value) return 0; /* none stored */
    if (run->rec.nlabels == run->caplabels) {
        size_t cap = run->caplabels ? 2 * run->caplabels : 4;
        hs_qlabel *l = realloc(run->labels, cap * sizeof *l);
        if (!l) return HS_ENOMEM;
        run->labels = l;
        run->caplabels = cap;
    }
    size_t kl = strlen(key), vl = strlen(value);
    char *p = malloc(kl + vl + 2);
    if (!p) return HS_ENOMEM;
    memcpy(p, key, kl + 1);
    memcpy(p + kl + 1, value, vl + 1);
    run->labels[run->rec.nlabels++] = (hs_qlabel){.key = p, .value = p + kl + 1};
    run->rec.labels = run->labels;
    return 0;
}

int hs__run_load(hs_q *q, int64_t id, hs__run *out, hs_qerr *err)
{
    memset(out, 0, sizeof *out);
    hs_qstore_run r;
    int rc = q->store->ops->run(q->store, id, &r, err);
    if (rc) return rc;
    run_numbers(out, &r);
    run_record(&out->rec, &r, out);
    if ((rc = run_strings(out, &r, err))) return rc;
    rc = q->store->ops->run_labels(q->store, id, label_put, out, err);
    if (rc == HS_ENOMEM) hs__err(err, HS_ENOMEM, "out of memory");
    if (rc) hs__run_clear(out);
    return rc;
}
void hs__run_clear(hs__run *r)
{
    for (size_t i = 0; i < r->rec.nlabels; i++) free((char *)r->labels[i].key);
    free(r->labels);
    free(r->strs);
    memset(r, 0, sizeof *r);
}

int hs__runs_select(hs_q *q, const char *const *keys, const char *const *values, int n,
                    int64_t limit, int64_t **ids, size_t *nids, hs_qerr *err)
{
    hs_qstore_filter f[MAX_RUN_FILTERS];
    assert(n >= 0 && n <= MAX_RUN_FILTERS);
    for (int i = 0; i < n; i++) f[i] = (hs_qstore_filter){keys[i], values[i]};
    return q->store->ops->runs_find(q->store, f, n, limit, ids, nids, err);
}

static int resolve_uuid(hs_q *q, const char *hex, int64_t *id, hs_qerr *err)
{
    int found = 0, rc = q->store->ops->runs_by_uuid(q->store, hex, id, &found, err);
    if (rc) return rc;
    if (found == 0) return hs__err(err, HS_ENOENT, "no run with id or uuid prefix '%s'", hex);
    if (found > 1)
        return hs__err(err, HS_EINVAL, "run uuid prefix '%s' is ambiguous; give more digits", hex);
    return 0;
}

int hs__run_resolve(hs_q *q, const hs_run_sel *sel, hs__run *out, hs_qerr *err)
{
    int64_t id = 0;
    int rc;
    memset(out, 0, sizeof *out);
    switch (sel->kind) {
    case HS_RUNSEL_ID:
        rc = hs__run_load(q, sel->id, out, err);
        if (rc != HS_ENOENT) return rc;
        if (strlen(sel->hex) < 4) return rc; /* too short to be a meaningful uuid prefix */
        /* digits may also be the start of a uuid */
        __attribute__((fallthrough));
    case HS_RUNSEL_UUID:
        if ((rc = resolve_uuid(q, sel->hex, &id, err))) return rc;
        return hs__run_load(q, id, out, err);
    default: {
        const char *keys[HS_SEL_MAX_KV], *values[HS_SEL_MAX_KV];
        for (int i = 0; i < sel->nkv; i++) {
            keys[i] = sel->kv[i].key;
            values[i] = sel->kv[i].value;
        }
        int64_t *ids;
        size_t n;
        if ((rc = hs__runs_select(q, keys, values, sel->kind == HS_RUNSEL_MATCH ? sel->nkv : 0, 1,
                                  &ids, &n, err)))
            return rc;
        id = n ? ids[0] : 0;
        free(ids);
        if (!n)
            return hs__err(err, HS_ENOENT,
                           sel->kind == HS_RUNSEL_LATEST ? "no runs stored yet"
                                                         : "no run matches the selector");
        return hs__run_load(q, id, out, err);
    }
    }
}

/* ---- moments and state ------------------------------------------------------ */

int hs__at_resolve(hs_q *q, const hs__run *run, const hs_t_sel *t, hs__at *out, hs_qerr *err)
{
    (void)q;
    out->kind = t->kind;
    out->exact = 0;
    int64_t last = run->last_bucket;
    if (last < hs_bucket_at(run->end_ns, run->g)) last = hs_bucket_at(run->end_ns, run->g);
    switch (t->kind) {
    case HS_TSEL_PEAK:
        out->bucket = hs_bucket_of((uint64_t)run->peak_t_ns, (uint64_t)run->g);
        out->at_ns = run->peak_t_ns;
        return 0;
    case HS_TSEL_END:
        if (run->main_end_ns > 0) {
            /* What the program held when its main code finished: the
             * teardown that follows (a Python interpreter's frees its
             * modules' globals) may share that moment's bucket. */
            out->bucket = run->main_end_ns / run->g - 1;
            out->at_ns = run->main_end_ns;
            out->exact = 1;
            return 0;
        }
        /* fall through */
    case HS_TSEL_EXIT:
        out->bucket = last;
        out->at_ns = run->end_ns;
        return 0;
    default:
        if (t->ns < 0 || t->ns > run->end_ns)
            return hs__err(err, HS_EINVAL,
                           "time %.3fs is outside run %" PRId64 " (it lasted %.3fs; use 0 to "
                           "%.3f, 'peak' or 'end')",
                           t->ns / 1e9, run->id, run->end_ns / 1e9, run->end_ns / 1e9);
        /* the bucket (b*g, (b+1)*g] holding T, so that T = a bucket's end is
         * that bucket, as history's points show it */
        out->bucket = hs_bucket_at(t->ns, run->g);
        if (out->bucket > last) out->bucket = last;
        out->at_ns = hs_bucket_end(out->bucket, run->g);
        if (out->at_ns > run->end_ns) out->at_ns = run->end_ns;
        return 0;
    }
}

int hs__state_at(hs_q *q, const hs__run *run, const hs__at *at, hs__state *out, hs_qerr *err)
{
    memset(out, 0, sizeof *out);
    hs_qstore_moment m = {.run = run->id,
                          .granularity_ns = run->g,
                          .peak = at->kind == HS_TSEL_PEAK,
                          .exact = at->exact,
                          .bucket = at->bucket,
                          .at_ns = at->at_ns};
    int rc = q->store->ops->state(q->store, &m, &out->rows, &out->n, err);
    if (rc) return rc;
    size_t w = 0;
    for (size_t i = 0; i < out->n; i++) {
        hs__live r = out->rows[i];
        if (r.bytes <= 0 && r.count <= 0) continue;
        out->rows[w++] = r;
        out->total_bytes += r.bytes;
        out->total_count += r.count;
    }
    out->n = w;
    return 0;
}

void hs__state_clear(hs__state *s)
{
    free(s->rows);
    memset(s, 0, sizeof *s);
}

int hs__tsums_load(hs_q *q, const hs__run *run, int64_t upto, hs__tsums *out, hs_qerr *err)
{
    return q->store->ops->trace_sums(q->store, run->id, upto, out, err);
}

void hs__tsums_clear(hs__tsums *t)
{
    free(t->rows);
    memset(t, 0, sizeof *t);
}

/* ---- stacks and frames ---------------------------------------------------- */

/* The caches of trace nodes and frames. A request may grow them up to the
 * caps (nodes past NODE_CACHE_MAX are looked up but not kept; a view stops
 * taking new stacks once FRAME_CACHE_MAX frames are cached, see
 * hs__frames_full); between requests they are dropped when past the KEEP
 * sizes, so that an idle pooled connection holds a few MB, not a big
 * request's working set. About 56 B a cached node, 270 B a cached frame. */
#define NODE_CACHE_MAX   (512u << 10)
#define NODE_CACHE_KEEP  (256u << 10)
#define FRAME_CACHE_MAX  (200u << 10)
#define FRAME_CACHE_KEEP (64u << 10)

static int node_get(hs_q *q, int64_t id, struct hs__node *out, hs_qerr *err)
{
    uint64_t i;
    if (hs__map_get(&q->node_idx, (uint64_t)id, &i)) {
        *out = q->nodes[i];
        return 0;
    }
    hs_qstore_node nd;
    int rc = q->store->ops->node(q->store, id, &nd, err);
    if (rc) return rc;
    q->node_misses++;
    *out = (struct hs__node){nd.parent, nd.frame, nd.depth};
    if (q->nnodes >= NODE_CACHE_MAX) return 0; /* answered, not kept */
    if (q->nnodes == q->capnodes) {
        size_t ncap = q->capnodes ? q->capnodes * 2 : 1024;
        struct hs__node *np = realloc(q->nodes, ncap * sizeof *np);
        if (!np) return 0; /* not cached; still answered */
        q->nodes = np;
        q->capnodes = ncap;
    }
    if (hs__map_put(&q->node_idx, (uint64_t)id, q->nnodes) == 0) q->nodes[q->nnodes++] = *out;
    return 0;
}

int hs__node(hs_q *q, int64_t id, int64_t *parent, int64_t *frame, int *depth, hs_qerr *err)
{
    struct hs__node nd;
    int rc = node_get(q, id, &nd, err);
    if (rc) return rc;
    *parent = nd.parent;
    *frame = nd.frame;
    *depth = nd.depth;
    return 0;
}

int hs__frames_full(const hs_q *q)
{
    return q->nframes >= FRAME_CACHE_MAX;
}

int hs__stack(hs_q *q, int64_t trace, int64_t *out, int max, hs_qerr *err)
{
    int n = 0;
    int64_t node = trace;
    while (node != 0 && n < max) {
        struct hs__node nd;
        int rc = node_get(q, node, &nd, err);
        if (rc) return rc;
        out[n++] = nd.frame;
        if (nd.parent == node) break; /* defensive: a self-loop would never end */
        node = nd.parent;
    }
    return n;
}

int hs__frame_cmp(const hs__frame *a, const hs__frame *b)
{
    int d = strcmp(a->name, b->name);
    if (!d) d = strcmp(a->file, b->file);
    if (!d && a->line != b->line) d = a->line < b->line ? -1 : 1;
    if (!d) d = strcmp(a->module, b->module);
    if (!d && a->module_offset != b->module_offset)
        d = a->module_offset < b->module_offset ? -1 : 1;
    return d ? d : strcmp(a->function, b->function);
}

int hs__site(hs_q *q, int64_t trace, int64_t *frame, hs_qerr *err)
{
    uint64_t v;
    if (hs__map_get(&q->site_cache, (uint64_t)trace, &v)) {
        *frame = (int64_t)v;
        return 0;
    }
    int64_t frames[HS_MAX_DEPTH];
    int d = hs__stack(q, trace, frames, HS_MAX_DEPTH, err);
    if (d < 0) return d;
    *frame = 0;
    if (d == 0) return 0;
    int k = hs__site_of(q, frames, d, err);
    if (k < 0) return k;
    *frame = frames[k];
    /* not kept when out of memory: answered all the same */
    (void)hs__map_put(&q->site_cache, (uint64_t)trace, (uint64_t)*frame);
    return 0;
}

static char *xstrdup(const char *s)
{
    return strdup(s ? s : "");
}

const hs__frame *hs__frame_get(hs_q *q, int64_t frame, hs_qerr *err)
{
    uint64_t i;
    if (hs__map_get(&q->frame_idx, (uint64_t)frame, &i)) return q->frames[i];
    if (q->nframes == q->capframes) {
        size_t ncap = q->capframes ? q->capframes * 2 : 1024;
        hs__frame **np = realloc(q->frames, ncap * sizeof *np);
        if (!np) {
            hs__err(err, HS_ENOMEM, "out of memory");
            return NULL;
        }
        q->frames = np;
        q->capframes = ncap;
    }
    hs_qstore_frame sf;
    if (q->store->ops->frame(q->store, frame, &sf, err)) return NULL;
    hs__frame f = {.function = xstrdup(sf.function),
                   .file = xstrdup(sf.file),
                   .module = xstrdup(sf.module),
                   .line = sf.line,
                   .module_offset = sf.module_offset};
    char tmp[512];
    if (f.function && f.function[0]) {
        f.name = hs__fn_name(f.function, f.module && !f.module[0]);
    } else {
        const char *base = f.module ? strrchr(f.module, '/') : NULL;
        base = base ? base + 1 : (f.module && f.module[0] ? f.module : "?");
        snprintf(tmp, sizeof tmp, "%s+0x%" PRIx64, base, (uint64_t)f.module_offset);
        f.name = xstrdup(tmp);
    }
    if (f.name && f.file) { /* one formatting in the common case: labels are short */
        char lb[256];
        size_t need = (size_t)hs_frame_label(lb, sizeof lb, f.name, f.file, f.line) + 1;
        if ((f.label = malloc(need))) {
            if (need <= sizeof lb)
                memcpy(f.label, lb, need);
            else
                hs_frame_label(f.label, need, f.name, f.file, f.line);
        }
    }
    hs__frame *fp = malloc(sizeof *fp);
    if (!fp || !f.function || !f.file || !f.module || !f.name || !f.label ||
        hs__map_put(&q->frame_idx, (uint64_t)frame, q->nframes)) {
        free(fp);
        free(f.function);
        free(f.file);
        free(f.module);
        free(f.name);
        free(f.label);
        hs__err(err, HS_ENOMEM, "out of memory");
        return NULL;
    }
    hs__frame_classify(&f);
    f.slot = q->nframes;
    *fp = f;
    q->frames[q->nframes++] = fp;
    return fp;
}

int hs__cache_trim(hs_q *q)
{
    int freed = hs__site_trim(q);
    if (q->nframes > FRAME_CACHE_KEEP) {
        frames_clear(q);
        freed = 1;
    }
    if (q->nnodes > NODE_CACHE_KEEP) {
        free(q->nodes);
        q->nodes = NULL;
        q->nnodes = q->capnodes = 0;
        hs__map_free(&q->node_idx);
        freed = 1;
    }
    return freed;
}

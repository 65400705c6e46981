/* top: a moment's state grouped by site, function or stack, as a typed
 * result (hs_core.h). The state at the moment is read once (q.c); each
 * live trace is counted for its rows by the grouping engine (group.c: a
 * row is what its frames are): by site and by stack once, by function once
 * per function of the stack (total) and for the site's function (self).
 * Rows are ranked by total bytes (by function: self bytes), ties by their
 * content, and cut to the limit and to the answer's byte bound; only the
 * rows answered get their stacks. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hs_error.h"
#include "q_internal.h"

void hs_top_params_init(hs_top_params *p)
{
    memset(p, 0, sizeof *p);
    p->at.kind = HS_TSEL_PEAK;
    p->by = HS_GROUP_SITE;
    p->limit = HS_TOP_LIMIT;
    p->max_frames = HS_STACK_FRAMES;
    p->site.mode = HS_SITE_USER;
}

int hs_top_param(hs_top_params *p, const char *key, const char *value, hs_qerr *err)
{
    if (!strcmp(key, "at")) return hs_sel_parse_t(&p->at, value, err);
    if (strcmp(key, "by"))
        return hs__rows_param(key, value, 1000000, &p->limit, &p->max_frames, &p->site, err);
    if (hs_group_parse(value, &p->by))
        return hs__err(err, HS_EINVAL, "by must be site, function or stack (not '%s')", value);
    return 0;
}

int hs_run_check(hs_q *q, const hs_run_sel *sel, hs_qerr *err, int rc)
{
    hs__run run;
    hs_qerr e2;
    int rrc = hs__run_resolve(q, sel, &run, &e2);
    hs__run_clear(&run);
    if (!rrc) return rc;
    *err = e2;
    return rrc;
}

/* ---- grouping ------------------------------------------------------------- */

/* A row's figures, beside the grouping's row of the same index (group.c:
 * what names the row and its representative trace). */
typedef struct top_row {
    size_t row; /* its index in the grouping: what orders rows that tie */
    int64_t self_bytes, self_count, total_bytes, total_count;
} top_row;

typedef struct top_acc {
    hs__grouping g;
    top_row *rows; /* per grouping row */
    size_t cap;
    int64_t omitted, omitted_bytes; /* stacks past the frames a request may read */
} top_acc;

static void top_acc_free(top_acc *t)
{
    free(t->rows);
    hs__group_free(&t->g);
}

/* Counts live trace lv of the state for its rows: by site and by stack
 * once, by function once per function of the stack (total) and for the
 * site's function (self). */
static int top_count(top_acc *t, const hs__live *lv, hs_qerr *err)
{
    size_t head;
    int rc = hs__group_trace(&t->g, lv->trace, &head, err);
    if (rc) return rc;
    if (head == HS__GNONE) {
        t->omitted++;
        t->omitted_bytes += lv->bytes;
        return 0;
    }
    if (t->g.n > t->cap) {
        size_t cap = t->g.n * 2;
        top_row *np = realloc(t->rows, cap * sizeof *np);
        if (!np) return hs__err(err, HS_ENOMEM, "out of memory");
        memset(np + t->cap, 0, (cap - t->cap) * sizeof *np);
        t->rows = np;
        t->cap = cap;
    }
    for (size_t j = 1; j <= t->g.ents[head].row; j++) {
        const hs__gent *e = &t->g.ents[head + j];
        top_row *r = &t->rows[e->row];
        if (e->site) {
            r->self_bytes += lv->bytes;
            r->self_count += lv->count;
        }
        r->total_bytes += lv->bytes;
        r->total_count += lv->count;
        hs__group_offer(&t->g, head, j, lv->trace, lv->bytes);
    }
    return 0;
}

static int cmp_total(const top_row *x, const top_row *y, hs__grouping *g)
{
    if (x->total_bytes != y->total_bytes) return x->total_bytes < y->total_bytes ? 1 : -1;
    return hs__group_cmp(g, x->row, y->row);
}

static int cmp_top_total(const void *a, const void *b, void *g)
{
    return cmp_total(a, b, g);
}

static int cmp_top_self(const void *a, const void *b, void *g) /* by function */
{
    const top_row *x = a, *y = b;
    if (x->self_bytes != y->self_bytes) return x->self_bytes < y->self_bytes ? 1 : -1;
    return cmp_total(x, y, g);
}

/* Groups the state's traces into t's rows, ranked. */
static int top_group(top_acc *t, hs__state *state, hs_qerr *err)
{
    /* largest first: when the frames a request may hold run out (by
     * function, a stack's every frame is read), the stacks left are the
     * smallest, and the answer says how many */
    hs__sort(state->rows, state->n, sizeof *state->rows, hs__cmp_live_bytes);
    /* by site and by stack, a row a trace at most: room made once */
    if (t->g.by != HS_GROUP_FUNCTION &&
        (hs__group_reserve(&t->g, state->n) ||
         !(t->rows = calloc(state->n ? state->n : 1, sizeof *t->rows))))
        return hs__err(err, HS_ENOMEM, "out of memory");
    if (t->rows) t->cap = state->n ? state->n : 1;
    for (size_t i = 0; i < state->n; i++) {
        int rc = top_count(t, &state->rows[i], err);
        if (rc) return rc;
    }
    for (size_t i = 0; i < t->g.n; i++) t->rows[i].row = i;
    if (t->g.n > 1)
        qsort_r(t->rows, t->g.n, sizeof *t->rows,
                t->g.by == HS_GROUP_FUNCTION ? cmp_top_self : cmp_top_total, &t->g);
    return 0;
}

/* ---- the result ----------------------------------------------------------- */

/* Answer bytes a row costs in the JSON of docs/api.md, about: what bounds
 * an answer (HS_ANSWER_BYTES) whoever renders it. */
static size_t row_bytes(const hs__frame *f, const hs_qstack *st)
{
    return 200 + strlen(f->name) + strlen(f->file) + strlen(f->module) + 120 * (size_t)st->n;
}

/* The first rows of t, up to the limit and the answer's bound, into out. */
static int top_rows(hs_q *q, top_acc *t, const hs_top_params *p, hs_top_result *out, hs_qerr *err)
{
    size_t want = (int64_t)t->g.n < p->limit ? t->g.n : (size_t)p->limit, bytes = 0;
    size_t *shown = malloc((want ? want : 1) * sizeof *shown);
    if (!shown || !(out->rows = calloc(want ? want : 1, sizeof *out->rows))) {
        free(shown);
        return hs__err(err, HS_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < want; i++) shown[i] = t->rows[i].row;
    int rc = hs__group_settle(&t->g, shown, want, err); /* their stacks */
    free(shown);
    if (rc) return rc;
    int fn = t->g.by == HS_GROUP_FUNCTION;
    for (size_t i = 0; i < want; i++) {
        if (bytes >= HS_ANSWER_BYTES) {
            out->bytes_cut = 1;
            break;
        }
        const top_row *r = &t->rows[i];
        const hs__grow *g = &t->g.rows[r->row];
        const hs__frame *f = hs__group_frame(&t->g, r->row, err);
        if (!f) return HS_EDB;
        hs_top_row *o = &out->rows[out->nrows++];
        *o = (hs_top_row){.frame = hs__qframe(f),
                          .trace = g->trace,
                          .self_bytes = r->self_bytes,
                          .self_count = r->self_count,
                          .total_bytes = r->total_bytes,
                          .total_count = r->total_count};
        if (fn) {
            o->frame.file = "";
            o->frame.line = 0;
        }
        o->share = out->total_bytes
                       ? (double)(fn ? r->self_bytes : r->total_bytes) / (double)out->total_bytes
                       : 0.0;
        if (!fn) {
            rc = hs__qstack(q, g->trace, p->max_frames, &o->stack, err);
            if (rc) return rc;
            if (o->stack.depth > o->stack.n) out->frames_cut = 1;
        }
        bytes += row_bytes(f, &o->stack);
    }
    out->rows_cut = (int64_t)(want - out->nrows);
    return 0;
}

int hs_core_top(hs_q *q, const hs_top_params *p, hs_top_result *out, hs_qerr *err)
{
    memset(out, 0, sizeof *out);
    hs__run *run = calloc(1, sizeof *run);
    if (!run) return hs__err(err, HS_ENOMEM, "out of memory");
    out->own = run;
    hs__at at;
    hs__state state = {0};
    top_acc t = {0};
    hs__group_init(&t.g, q, p->by, HS__GROUP_ONCE); /* a state holds a trace once */
    int rc = hs__site_apply(q, &p->site, err);
    if (!rc) rc = hs__run_resolve(q, &p->run, run, err);
    if (!rc) rc = hs__at_resolve(q, run, &p->at, &at, err);
    if (!rc) rc = hs__state_at(q, run, &at, &state, err);
    if (!rc) rc = top_group(&t, &state, err);
    if (rc) goto out;
    hs__run_brief(&out->run, run);
    char tb[32];
    snprintf(out->at, sizeof out->at, "%s", hs__at_name(&at, tb, sizeof tb));
    out->at_ns = at.at_ns;
    out->by = p->by;
    out->total_bytes = state.total_bytes;
    out->total_count = state.total_count;
    out->rows_total = (int64_t)t.g.n;
    out->max_frames = p->max_frames;
    out->stacks_omitted = t.omitted;
    out->stacks_bytes = t.omitted_bytes;
    rc = top_rows(q, &t, p, out, err);
out:
    top_acc_free(&t);
    hs__state_clear(&state);
    if (rc) hs_top_result_clear(out);
    return rc;
}

void hs_top_result_clear(hs_top_result *r)
{
    for (size_t i = 0; r->rows && i < r->nrows; i++) free(r->rows[i].stack.frames);
    free(r->rows);
    if (r->own) hs__run_clear(r->own);
    free(r->own);
    hs__held_release(&r->held);
    memset(r, 0, sizeof *r);
}

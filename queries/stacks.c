/* stacks: a moment's live stacks with their frames, as a typed result
 * (hs_core.h), which the exports (export.c) are written from; with
 * allocs, also every sampled allocation made up to the moment (pprof's
 * alloc_* values).
 *
 * Bounds: a stack keeps its HS_STACKS_FRAMES innermost frames (the
 * allocation site and its callers, as a collector's depth limit keeps
 * them), and the result takes stacks, largest first, while it names fewer
 * than HS_STACKS_MAX_FRAMES distinct frames: every frame named is read, and
 * a frame costs the request about 270 B in the frame cache. What was cut
 * is said in the files (pprof's comments, speedscope's name, dot's label, a
 * "[truncated]" outermost frame in collapsed lines). */
#include <assert.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "hs_error.h"
#include "q_internal.h"

/* What a result holds besides its public members. */
typedef struct stacks_own {
    hs__run *run; /* resolved by hs_core_stacks (owned), else NULL */
    size_t cap;   /* of rows */
    hs__map idx;  /* trace -> row */
    hs__map seen; /* frame id -> 1 + its index in frames */
    hs_sframe *frames;
    size_t nframes, capframes;
} stacks_own;

/* The frame of id into the table (read through the frame cache). */
static int frame_add(hs_q *q, stacks_own *o, int64_t id, hs_qerr *err)
{
    const hs__frame *f = hs__frame_get(q, id, err);
    if (!f) return HS_EDB;
    if (o->nframes == o->capframes) {
        size_t ncap = o->capframes ? o->capframes * 2 : 1024;
        hs_sframe *np = realloc(o->frames, ncap * sizeof *np);
        if (!np) return hs__err(err, HS_ENOMEM, "out of memory");
        o->frames = np;
        o->capframes = ncap;
    }
    o->frames[o->nframes] = (hs_sframe){.id = id,
                                        .name = f->name,
                                        .file = f->file,
                                        .module = f->module,
                                        .line = f->line,
                                        .module_offset = f->module_offset};
    if (hs__map_put(&o->seen, (uint64_t)id, ++o->nframes))
        return hs__err(err, HS_ENOMEM, "out of memory");
    return 0;
}

/* A new row for trace (its frames read), at *ix. */
static int row_new(hs_q *q, hs_stacks_result *x, stacks_own *o, int64_t trace,
                   const int64_t *frames, int d, int cut, size_t *ix, hs_qerr *err)
{
    uint64_t v;
    for (int k = 0; k < d; k++) {
        if (hs__map_get(&o->seen, (uint64_t)frames[k], &v)) continue;
        int rc = frame_add(q, o, frames[k], err);
        if (rc) return rc;
    }
    x->cut += (size_t)cut;
    if (x->nrows == o->cap) {
        o->cap = o->cap ? o->cap * 2 : 256;
        hs_stack_row *np = realloc(x->rows, o->cap * sizeof *np);
        if (!np) return hs__err(err, HS_ENOMEM, "out of memory");
        x->rows = np;
    }
    hs_stack_row *t = &x->rows[x->nrows];
    memset(t, 0, sizeof *t);
    t->trace = trace;
    t->depth = d;
    t->cut = cut;
    t->frames = malloc((size_t)(d ? d : 1) * sizeof *t->frames);
    if (!t->frames || hs__map_put(&o->idx, (uint64_t)trace, x->nrows)) {
        free(t->frames);
        return hs__err(err, HS_ENOMEM, "out of memory");
    }
    memcpy(t->frames, frames, (size_t)d * sizeof *frames);
    *ix = x->nrows++;
    return 0;
}

/* Returns 0 with *ix, 1 when the stack is left out, or an HS_E code. */
static int row_get(hs_q *q, hs_stacks_result *x, int64_t trace, size_t *ix, hs_qerr *err)
{
    stacks_own *o = x->own;
    uint64_t v;
    if (hs__map_get(&o->idx, (uint64_t)trace, &v)) {
        *ix = v;
        return 0;
    }
    int64_t frames[HS_MAX_DEPTH];
    int d = hs__stack(q, trace, frames, HS_MAX_DEPTH, err), cut = 0;
    if (d < 0) return d;
    if (d > HS_STACKS_FRAMES) {
        d = HS_STACKS_FRAMES;
        cut = 1;
    }
    size_t fresh = 0;
    for (int k = 0; k < d; k++) fresh += !hs__map_get(&o->seen, (uint64_t)frames[k], &v);
    if (o->seen.count + fresh > HS_STACKS_MAX_FRAMES) return 1;
    return row_new(q, x, o, trace, frames, d, cut, ix, err);
}

static int stacks_live(hs_q *q, hs__state *s, hs_stacks_result *x, hs_qerr *err)
{
    x->total_bytes = s->total_bytes;
    x->total_count = s->total_count;
    hs__sort(s->rows, s->n, sizeof *s->rows, hs__cmp_live_bytes);
    int rc = 0;
    for (size_t i = 0; !rc && i < s->n; i++) {
        size_t ix;
        rc = row_get(q, x, s->rows[i].trace, &ix, err);
        if (rc == 1) {
            x->omitted++;
            x->omitted_bytes += s->rows[i].bytes;
            rc = 0;
            continue;
        }
        if (rc) return rc;
        x->rows[ix].bytes += s->rows[i].bytes;
        x->rows[ix].count += s->rows[i].count;
    }
    return rc;
}

/* alloc_* per trace: every sampled allocation made up to at_ns. */
typedef struct allocs_walk {
    hs_q *q;
    hs_stacks_result *x;
    hs_qerr *err;
} allocs_walk;

static int alloc_row(const hs_qstore_event *ev, void *data)
{
    allocs_walk *w = data;
    if (ev->is_free) return 0;
    size_t ix;
    int rc = row_get(w->q, w->x, ev->trace, &ix, w->err);
    if (rc == 1) return 0;
    if (rc) return rc;
    w->x->rows[ix].alloc_space += (double)ev->weight;
    w->x->rows[ix].alloc_objects += ev->size ? (double)ev->weight / (double)ev->size : 1.0;
    return 0;
}

int hs__stacks_build(hs_q *q, const hs__run *run, const hs__at *at, hs__state *s, int allocs,
                     hs_stacks_result *out, hs_qerr *err)
{
    memset(out, 0, sizeof *out);
    if (!(out->own = calloc(1, sizeof(stacks_own))))
        return hs__err(err, HS_ENOMEM, "out of memory");
    hs__run_brief(&out->run, run);
    out->at_ns = at->at_ns;
    int rc = stacks_live(q, s, out, err);
    if (!rc && allocs) {
        allocs_walk w = {.q = q, .x = out, .err = err};
        rc = q->store->ops->events(q->store, run->id, HS_QSTORE_FROM_START, at->at_ns, alloc_row,
                                   &w, err);
    }
    /* rows of equal bytes in content order (their frames are read by now),
     * which the exports' bytes follow; the trace index is done with */
    if (!rc)
        rc = hs__ties_by_content(q, out->rows, out->nrows, sizeof *out->rows,
                                 offsetof(hs_stack_row, bytes), offsetof(hs_stack_row, trace),
                                 SIZE_MAX, err);
    if (!rc) hs__map_free(&((stacks_own *)out->own)->idx);
    if (rc) hs_stacks_result_clear(out);
    return rc;
}

int hs_core_stacks(hs_q *q, const hs_stacks_params *p, hs_stacks_result *out, hs_qerr *err)
{
    memset(out, 0, sizeof *out);
    hs__run *run = calloc(1, sizeof *run);
    if (!run) return hs__err(err, HS_ENOMEM, "out of memory");
    hs__at at;
    hs__state s = {0};
    int rc = hs__run_resolve(q, &p->run, run, err);
    if (!rc) rc = hs__at_resolve(q, run, &p->at, &at, err);
    if (!rc) rc = hs__state_at(q, run, &at, &s, err);
    if (!rc) rc = hs__stacks_build(q, run, &at, &s, p->allocs, out, err);
    hs__state_clear(&s);
    if (rc) {
        hs__run_clear(run);
        free(run);
        return rc;
    }
    ((stacks_own *)out->own)->run = run;
    return 0;
}

const hs_sframe *hs_stacks_frame(const hs_stacks_result *r, int64_t id)
{
    const stacks_own *o = r->own;
    uint64_t v;
    int found = hs__map_get(&o->seen, (uint64_t)id, &v);
    assert(found && v >= 1 && v <= o->nframes);
    (void)found;
    return &o->frames[v - 1];
}

void hs_stacks_result_clear(hs_stacks_result *r)
{
    for (size_t i = 0; i < r->nrows; i++) free(r->rows[i].frames);
    free(r->rows);
    stacks_own *o = r->own;
    if (o) {
        hs__map_free(&o->idx);
        hs__map_free(&o->seen);
        free(o->frames);
        if (o->run) hs__run_clear(o->run);
        free(o->run);
        free(o);
    }
    hs__held_release(&r->held);
    memset(r, 0, sizeof *r);
}

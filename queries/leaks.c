/* leaks: what a run held at its end, and which traces grew through it, as
 * a typed result (hs_core.h).
 *
 * Least squares of a trace's live bytes against the bucket index over the
 * whole run (buckets 0..L). Live bytes are constant between the buckets
 * where a trace changes, so each trace only costs its delta rows: a constant
 * segment [a, c] at value y adds y*(c-a+1), y*sum(a..c) and y*y*(c-a+1)
 * (hs_tstats_close). Those sums are kept per trace as the rows are written
 * (trace_stats), so a run's length costs nothing here.
 *
 * A straight line in time is not the only shape of a leak: a program's pace
 * varies (it waits, it is descheduled, one phase is slower), and a leak that
 * grows in a few bursts spread over the run fits a line badly. So a trace
 * also counts as growing when its changes are nearly all increases
 * (steadiness: (up - down) / (up + down) of its per-bucket changes) and its
 * increases span most of the run (first to last increasing bucket), which a
 * cache that fills early and then stays full does not. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hs_error.h"
#include "q_internal.h"

#define TREND_MIN_R2     0.5
#define TREND_MIN_STEADY 0.9
#define TREND_MIN_SPAN   0.5

void hs_leaks_params_init(hs_leaks_params *p)
{
    memset(p, 0, sizeof *p);
    p->limit = HS_LEAKS_LIMIT;
    p->max_frames = HS_STACK_FRAMES;
    p->site.mode = HS_SITE_USER;
}

int hs_leaks_param(hs_leaks_params *p, const char *key, const char *value, hs_qerr *err)
{
    return hs__rows_param(key, value, 100000, &p->limit, &p->max_frames, &p->site, err);
}

/* What the rows answered so far cost: frames in their stacks bound the
 * answer's size (about 120 bytes of JSON each). */
typedef struct leaks_out {
    hs_q *q;
    const hs_leaks_params *p;
    hs_leaks_result *r;
    size_t frames;
} leaks_out;

/* Fills row's site and stack for trace; 1 when the answer is full (the
 * row is not taken), 0, or an HS_E code. */
static int leak_row(leaks_out *o, hs_leak_row *row, int64_t trace, hs_qerr *err)
{
    if (o->frames * 120 >= HS_ANSWER_BYTES || hs__frames_full(o->q)) {
        o->r->bytes_cut = 1;
        return 1;
    }
    int64_t sf;
    int rc = hs__site(o->q, trace, &sf, err);
    if (rc) return rc;
    const hs__frame *site = sf ? hs__frame_get(o->q, sf, err) : NULL;
    if (sf && !site) return HS_EDB;
    row->site = site ? (hs_qframe){.name = site->name, .file = site->file, .line = site->line}
                     : (hs_qframe){.name = "?", .file = ""};
    row->site.module = "";
    row->trace = trace;
    if ((rc = hs__qstack(o->q, trace, o->p->max_frames, &row->stack, err))) return rc;
    if (row->stack.depth > row->stack.n) o->r->frames_cut = 1;
    o->frames += 1 + (size_t)row->stack.n;
    return 0;
}

static int leaks_live(leaks_out *o, hs__state *state, hs_qerr *err)
{
    hs_leaks_result *r = o->r;
    size_t want = (int64_t)state->n < o->p->limit ? state->n : (size_t)o->p->limit;
    if (!(r->live = calloc(want ? want : 1, sizeof *r->live)))
        return hs__err(err, HS_ENOMEM, "out of memory");
    hs__sort(state->rows, state->n, sizeof *state->rows, hs__cmp_live_bytes);
    for (size_t i = 0; i < want; i++) {
        hs_leak_row *row = &r->live[r->nlive];
        const hs__live *lv = &state->rows[i];
        int rc = leak_row(o, row, lv->trace, err);
        if (rc) {
            free(row->stack.frames);
            return rc > 0 ? 0 : rc;
        }
        r->nlive++;
        row->bytes = lv->bytes;
        row->count = lv->count;
        row->share = state->total_bytes ? (double)lv->bytes / (double)state->total_bytes : 0.0;
    }
    return 0;
}

static int cmp_score(const void *a, const void *b)
{
    const hs_leak_row *x = a, *y = b;
    if (x->score != y->score) return x->score < y->score ? 1 : -1;
    return (x->count > y->count) - (x->count < y->count); /* count: the order met */
}

/* The growing traces' fits, unranked, into *out (count: their order). */
static int leaks_fit(const hs__tsums *sums, const hs__run *run, int64_t L_, hs_leak_row **out,
                     size_t *n)
{
    double L = (double)L_, nb = L + 1;
    double sx = L * (L + 1) / 2, sxx = L * (L + 1) * (2 * L + 1) / 6;
    double vx = nb * sxx - sx * sx;
    hs_leak_row *c = calloc(sums->n ? sums->n : 1, sizeof *c);
    if (!c) return HS_ENOMEM;
    *out = c;
    for (size_t i = 0; i < sums->n && nb >= 3 && vx > 0; i++) {
        hs_tstats *t = &sums->rows[i].s;
        hs_tstats_close(t, L_ + 1);
        if (t->bytes <= 0 || t->ups < 2) continue;
        double cov = nb * t->sxy - sx * t->sy, vy = nb * t->syy - t->sy * t->sy;
        if (cov <= 0 || vy <= 0) continue;
        double slope = cov / vx, r2 = cov * cov / (vx * vy);
        double steady = (t->up - t->down) / (t->up + t->down);
        double span = (double)(t->last_up - t->first_up + 1) / nb;
        int steady_growth = steady >= TREND_MIN_STEADY && span >= TREND_MIN_SPAN;
        if (r2 < TREND_MIN_R2 && !steady_growth) continue;
        double fit = steady_growth && steady * span > r2 ? steady * span : r2;
        c[*n] = (hs_leak_row){.trace = sums->rows[i].trace,
                              .end_bytes = t->bytes,
                              .slope = slope * 1e9 / (double)run->g,
                              .r2 = r2,
                              .steady = steady,
                              .span = span,
                              .score = (double)t->bytes * fit,
                              .count = (int64_t)*n};
        (*n)++;
    }
    return 0;
}

/* Ranks the growing traces (equal scores keep the order of their first
 * delta row, as a pass over the rows meets them); stacks only for the rows
 * answered. */
static int leaks_growing(leaks_out *o, const hs__run *run, const hs__at *at, hs_qerr *err)
{
    hs__tsums sums = {0};
    hs_leaks_result *r = o->r;
    size_t n = 0;
    int rc = hs__tsums_load(o->q, run, at->bucket, &sums, err);
    if (!rc && leaks_fit(&sums, run, at->bucket, &r->growing, &n))
        rc = hs__err(err, HS_ENOMEM, "out of memory");
    hs__tsums_clear(&sums);
    if (rc) return rc;
    hs__sort(r->growing, n, sizeof *r->growing, cmp_score);
    size_t want = (int64_t)n < o->p->limit ? n : (size_t)o->p->limit;
    for (size_t i = 0; i < want; i++) {
        hs_leak_row *row = &r->growing[i];
        row->count = 0;
        if ((rc = leak_row(o, row, row->trace, err))) {
            free(row->stack.frames);
            row->stack.frames = NULL;
            return rc > 0 ? 0 : rc;
        }
        r->ngrowing++;
    }
    return 0;
}

int hs_core_leaks(hs_q *q, const hs_leaks_params *p, hs_leaks_result *out, hs_qerr *err)
{
    memset(out, 0, sizeof *out);
    hs__run *run = calloc(1, sizeof *run);
    if (!run) return hs__err(err, HS_ENOMEM, "out of memory");
    out->own = run;
    out->max_frames = p->max_frames;
    hs__at at;
    hs__state state = {0};
    hs_t_sel tend = {.kind = HS_TSEL_END};
    leaks_out o = {.q = q, .p = p, .r = out};
    int rc = hs__site_apply(q, &p->site, err);
    if (!rc) rc = hs__run_resolve(q, &p->run, run, err);
    if (!rc) rc = hs__at_resolve(q, run, &tend, &at, err);
    if (!rc) rc = hs__state_at(q, run, &at, &state, err);
    if (!rc) rc = leaks_live(&o, &state, err);
    if (!rc) rc = leaks_growing(&o, run, &at, err);
    if (!rc) {
        hs__run_brief(&out->run, run);
        out->at_ns = at.at_ns;
        out->total_bytes = state.total_bytes;
        out->total_count = state.total_count;
    }
    hs__state_clear(&state);
    if (rc) hs_leaks_result_clear(out);
    return rc;
}

void hs_leaks_result_clear(hs_leaks_result *r)
{
    for (size_t i = 0; r->live && i < r->nlive; i++) free(r->live[i].stack.frames);
    for (size_t i = 0; r->growing && i < r->ngrowing; i++) free(r->growing[i].stack.frames);
    free(r->live);
    free(r->growing);
    if (r->own) hs__run_clear(r->own);
    free(r->own);
    json_decref(r->own_json);
    memset(r, 0, sizeof *r);
}

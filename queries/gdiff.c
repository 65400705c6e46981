/* gdiff: diff of two groups of runs (hs_core.h, "group diff"), noise told
 * apart from change. Each side's runs are the matches of its selector
 * (newest first, at most HS_GDIFF_MAX_RUNS); each run's state at its own
 * moment (peak, end or a time) is read once and counted per row as diff
 * matches rows (the grouping engine, group.c: by names, across builds).
 * What a trace counts for is worked out once a request (traces are shared
 * by the runs of a program), so a run costs a pass over its live traces.
 *
 * Per row and side the pass keeps sums over runs of the bytes, of their
 * squares and of the runs' sampling variances (a run that does not hold a
 * row counts 0 for it); means, spreads and errors follow at the end. The
 * sampling variance of a trace's bytes B (count C) in a run of
 * sample_bytes S is B · f(B / C), f(s) = s / (exp(s / S) - 1): hs_core.h
 * says why. A side's total at the peak or the end is a run's exact figure
 * where its collector counted every allocation (hs_qstore_exact: no
 * sampling error), else the sum of the state's estimates. */
#include <assert.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hs_error.h"
#include "q_internal.h"

#define NONE ((size_t)-1)

/* A row's figures, beside the grouping's row of the same index (its
 * frame names and places it; its representative: the largest trace). */
typedef struct grow {
    double sum[2], sumsq[2], var[2]; /* over the side's runs */
    double cur, curvar;              /* the run being counted */
    /* by function, the same for the stacks whose site is in it (its self) */
    double ssum[2], ssumsq[2], svar[2], scur, scurvar;
    size_t touched; /* the last run counted */
} grow;

typedef struct gctx {
    hs_q *q;
    hs_qerr *err;
    hs__grouping g;
    grow *rows; /* per grouping row */
    size_t cap;
    size_t *touched; /* rows counted in the run being counted */
    size_t ntouched, tcap;
    size_t run_no;
    int64_t omitted, omitted_bytes;     /* live traces of runs past the request's frames */
    double tsum[2], tsumsq[2], tvar[2]; /* the totals */
} gctx;

const char *hs_gdiff_verdict_name(int v)
{
    static const char *const names[] = {"same", "noise", "grew", "shrank"};
    return v >= 0 && v < 4 ? names[v] : "?";
}

double hs__sampling_var(int64_t bytes, int64_t count, int64_t sample)
{
    if (sample <= 1 || bytes <= 0) return 0;
    double s = count > 0 ? (double)bytes / (double)count : (double)bytes;
    double x = s / (double)sample;
    if (x > 700) return 0; /* e^-x below any double's use */
    double f = x < 1e-9 ? (double)sample : s / expm1(x);
    assert(f >= 0 && f <= (double)sample * 1.000001);
    return (double)bytes * f;
}

/* Counts one live trace of the run being counted. */
static int count_trace(gctx *c, const hs__live *lv, int64_t sample)
{
    size_t head;
    int rc = hs__group_trace(&c->g, lv->trace, &head, c->err);
    if (rc) return rc;
    if (head == HS__GNONE) {
        c->omitted++;
        c->omitted_bytes += lv->bytes;
        return 0;
    }
    if (c->g.n > c->cap) {
        size_t cap = c->g.n * 2;
        grow *np = realloc(c->rows, cap * sizeof *np);
        if (!np) return hs__err(c->err, HS_ENOMEM, "out of memory");
        for (size_t i = c->cap; i < cap; i++) np[i] = (grow){.touched = NONE};
        c->rows = np;
        c->cap = cap;
    }
    double v = hs__sampling_var(lv->bytes, lv->count, sample);
    for (size_t j = 1; j <= c->g.ents[head].row; j++) {
        const hs__gent *e = &c->g.ents[head + j];
        size_t ri = e->row;
        grow *r = &c->rows[ri];
        if (r->touched != c->run_no) {
            if (c->ntouched == c->tcap) {
                size_t cap = c->tcap ? c->tcap * 2 : 1024;
                size_t *np = realloc(c->touched, cap * sizeof *np);
                if (!np) return hs__err(c->err, HS_ENOMEM, "out of memory");
                c->touched = np;
                c->tcap = cap;
            }
            c->touched[c->ntouched++] = ri;
            r->touched = c->run_no;
            r->cur = r->curvar = r->scur = r->scurvar = 0;
        }
        r->cur += (double)lv->bytes;
        r->curvar += v;
        if (e->site) {
            r->scur += (double)lv->bytes;
            r->scurvar += v;
        }
        hs__group_offer(&c->g, head, j, lv->trace, lv->bytes);
    }
    return 0;
}

/* One run of side: its state at t, counted and folded into the sums. */
static int count_run(gctx *c, int64_t id, const hs_t_sel *t, int side, hs_gdiff_side *out)
{
    hs__run run;
    hs__at at;
    hs__state s = {0};
    int rc = hs__run_load(c->q, id, &run, c->err);
    if (rc) return rc;
    if (!(rc = hs__at_resolve(c->q, &run, t, &at, c->err)))
        rc = hs__state_at(c->q, &run, &at, &s, c->err);
    int64_t sample = run.sample_bytes, exact = -1;
    if (run.rec.exact.in_figures) /* the collector's own count */
        exact = t->kind == HS_TSEL_PEAK ? run.peak_bytes
                : t->kind == HS_TSEL_EXIT || (t->kind == HS_TSEL_END && !run.main_end_ns)
                    ? run.end_bytes
                    : -1;
    if (!rc && !out->at[0]) {
        char tb[32];
        snprintf(out->at, sizeof out->at, "%s", hs__at_name(&at, tb, sizeof tb));
    }
    hs__run_clear(&run);
    if (sample > out->sample_bytes) out->sample_bytes = sample;
    c->run_no++;
    c->ntouched = 0;
    double tvar = 0;
    for (size_t i = 0; !rc && i < s.n; i++) {
        if (s.rows[i].bytes <= 0) continue;
        tvar += hs__sampling_var(s.rows[i].bytes, s.rows[i].count, sample);
        rc = count_trace(c, &s.rows[i], sample);
    }
    for (size_t i = 0; !rc && i < c->ntouched; i++) {
        grow *r = &c->rows[c->touched[i]];
        r->sum[side] += r->cur;
        r->sumsq[side] += r->cur * r->cur;
        r->var[side] += r->curvar;
        r->ssum[side] += r->scur;
        r->ssumsq[side] += r->scur * r->scur;
        r->svar[side] += r->scurvar;
    }
    double tot = (double)(exact >= 0 ? exact : s.total_bytes);
    if (exact >= 0) tvar = 0;
    c->tsum[side] += tot;
    c->tsumsq[side] += tot * tot;
    c->tvar[side] += tvar;
    hs__state_clear(&s);
    return rc;
}

/* A side's figure from its sums over n runs. */
static hs_gstat gstat(double sum, double sumsq, double var, size_t n)
{
    assert(n > 0);
    hs_gstat g = {.mean = sum / (double)n};
    if (n > 1) {
        double v = (sumsq - sum * sum / (double)n) / (double)(n - 1);
        g.sd = v > 0 ? sqrt(v) : 0;
    }
    g.sampling_se = sqrt(var) / (double)n;
    g.se = sqrt(g.sd * g.sd / (double)n + g.sampling_se * g.sampling_se);
    return g;
}

static int verdict(double delta, double se)
{
    if (delta == 0) return HS_GDIFF_SAME;
    if (fabs(delta) <= HS_GDIFF_K * se) return HS_GDIFF_NOISE;
    return delta > 0 ? HS_GDIFF_GREW : HS_GDIFF_SHRANK;
}

/* The runs of a side's selector: every match (at most HS_GDIFF_MAX_RUNS,
 * the newest) for a group, else the one run. */
int hs__gdiff_runs(hs_q *q, const hs_diff_side_sel *sel, hs_gdiff_side *out, hs_qerr *err)
{
    snprintf(out->selector, sizeof out->selector, "%s", sel->text ? sel->text : "");
    char *at = strrchr(out->selector, '@');
    if (at) *at = '\0';
    if (!hs_sel_is_group(&sel->run)) {
        hs__run run;
        int rc = hs__run_resolve(q, &sel->run, &run, err);
        if (rc) return rc;
        if (!(out->runs = malloc(sizeof *out->runs))) {
            hs__run_clear(&run);
            return hs__err(err, HS_ENOMEM, "out of memory");
        }
        out->runs[0] = run.id;
        out->nruns = 1;
        hs__run_clear(&run);
        return 0;
    }
    const char *keys[HS_SEL_MAX_KV], *values[HS_SEL_MAX_KV];
    for (int i = 0; i < sel->run.nkv; i++) {
        keys[i] = sel->run.kv[i].key;
        values[i] = sel->run.kv[i].value;
    }
    int rc = hs__runs_select(q, keys, values, sel->run.nkv, HS_GDIFF_MAX_RUNS + 1, &out->runs,
                             &out->nruns, err);
    if (rc) return rc;
    if (!out->nruns) return hs__err(err, HS_ENOENT, "no run matches the selector");
    if (out->nruns > HS_GDIFF_MAX_RUNS) {
        out->nruns = HS_GDIFF_MAX_RUNS;
        out->more = 1;
    }
    return 0;
}

int hs_diff_is_group(hs_q *q, const hs_diff_params *p, int *group, hs_qerr *err)
{
    *group = 0;
    if (!p->a.given || !p->b.given) return 0;
    for (int s = 0; s < 2 && !*group; s++) {
        const hs_diff_side_sel *sel = s ? &p->b : &p->a;
        if (!hs_sel_is_group(&sel->run)) continue;
        hs_gdiff_side side = {0};
        hs_qerr e2;
        int rc = hs__gdiff_runs(q, sel, &side, &e2);
        free(side.runs);
        if (rc == HS_ENOENT) continue; /* hs_core_diff names it */
        if (rc) {
            *err = e2;
            return rc;
        }
        *group = side.nruns > 1;
        if (*group && p->collapsed)
            return hs__err(err, HS_EINVAL,
                           "format=collapsed compares two runs, and %s= names several (end it "
                           "with ',latest' for the newest)",
                           s ? "b" : "a");
    }
    return 0;
}

/* Changed rows first, then by |self delta| (by function: the change of
 * the function's own allocations, so that its callers, whose inclusive
 * change is as large, come after it; else the delta), |delta|, name. */
typedef struct keyed_row {
    hs_gdiff_row row;
    const char *key; /* the grouping row's content key: the last tie-break */
} keyed_row;

static int cmp_grow(const void *x, const void *y)
{
    const keyed_row *ka = x, *kb = y;
    const hs_gdiff_row *a = &ka->row, *b = &kb->row;
    int ca = a->verdict >= HS_GDIFF_GREW, cb = b->verdict >= HS_GDIFF_GREW;
    if (ca != cb) return ca ? -1 : 1;
    double sa = fabs(a->self.delta), sb = fabs(b->self.delta);
    if (sa != sb) return sa < sb ? 1 : -1;
    double da = fabs(a->delta), db = fabs(b->delta);
    if (da != db) return da < db ? 1 : -1;
    int d = strcmp(a->name, b->name);
    return d ? d : strcmp(ka->key, kb->key);
}

/* r's rows ranked (cmp_grow); keys[i] is row i's key. */
static int rank_rows(gctx *c, hs_gdiff_result *r, const char **keys)
{
    keyed_row *k = malloc((r->nrows ? r->nrows : 1) * sizeof *k);
    if (!k) return hs__err(c->err, HS_ENOMEM, "out of memory");
    for (size_t i = 0; i < r->nrows; i++) k[i] = (keyed_row){r->rows[i], keys[i]};
    hs__sort(k, r->nrows, sizeof *k, cmp_grow);
    for (size_t i = 0; i < r->nrows; i++) r->rows[i] = k[i].row;
    free(k);
    return 0;
}

/* Every row's figures, ranked, cut to the limit; the rows kept get stacks. */
static int gdiff_rows(gctx *c, const hs_diff_params *p, hs_gdiff_result *r)
{
    size_t na = r->a.nruns, nb = r->b.nruns, n = c->g.n;
    int rc = hs__group_settle(&c->g, NULL, 0, c->err); /* every row's stack */
    if (rc) return rc;
    const char **keys = malloc((n ? n : 1) * sizeof *keys);
    if (!keys || !(r->rows = calloc(n ? n : 1, sizeof *r->rows))) {
        free(keys);
        return hs__err(c->err, HS_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        const grow *w = &c->rows[i];
        const hs__grow *gr = &c->g.rows[i];
        hs_gdiff_row *row = &r->rows[r->nrows];
        keys[r->nrows] = gr->key;
        *row = (hs_gdiff_row){.name = gr->frame->name,
                              .file = gr->frame->file ? gr->frame->file : "",
                              .line = gr->frame->line,
                              .trace = gr->trace,
                              .a = gstat(w->sum[0], w->sumsq[0], w->var[0], na),
                              .b = gstat(w->sum[1], w->sumsq[1], w->var[1], nb)};
        if (row->a.mean == 0 && row->b.mean == 0) continue;
        row->delta = row->b.mean - row->a.mean;
        row->se = sqrt(row->a.se * row->a.se + row->b.se * row->b.se);
        row->verdict = verdict(row->delta, row->se);
        row->self = (hs_gdiff_self){
            .a = row->a, .b = row->b, .delta = row->delta, .se = row->se, .verdict = row->verdict};
        if (c->g.by == HS_GROUP_FUNCTION) {
            hs_gdiff_self *sf = &row->self;
            sf->a = gstat(w->ssum[0], w->ssumsq[0], w->svar[0], na);
            sf->b = gstat(w->ssum[1], w->ssumsq[1], w->svar[1], nb);
            sf->delta = sf->b.mean - sf->a.mean;
            sf->se = sqrt(sf->a.se * sf->a.se + sf->b.se * sf->b.se);
            sf->verdict = verdict(sf->delta, sf->se);
        }
        row->share = r->delta != 0 ? row->delta / r->delta : 0;
        r->nrows++;
    }
    r->rows_total = (int64_t)r->nrows;
    rc = rank_rows(c, r, keys);
    free(keys);
    if (rc) return rc;
    if (r->nrows > (size_t)p->limit) r->nrows = (size_t)p->limit;
    for (size_t i = 0; c->g.by != HS_GROUP_FUNCTION && i < r->nrows; i++) {
        hs_gdiff_row *row = &r->rows[i];
        if ((rc = hs__qstack(c->q, row->trace, p->max_frames, &row->stack, c->err))) return rc;
        if (row->stack.depth > row->stack.n) r->frames_cut = 1;
    }
    return 0;
}

static void gctx_free(gctx *c)
{
    hs__group_free(&c->g);
    free(c->rows);
    free(c->touched);
}

int hs_core_gdiff(hs_q *q, const hs_diff_params *p, hs_gdiff_result *out, hs_qerr *err)
{
    memset(out, 0, sizeof *out);
    out->by = p->by;
    out->max_frames = p->max_frames;
    if (!p->a.given) return hs__err(err, HS_EINVAL, "diff needs a=RUN@T");
    if (!p->b.given) return hs__err(err, HS_EINVAL, "diff needs b=RUN@T");
    gctx c = {.q = q, .err = err, .run_no = 0};
    hs__group_init(&c.g, q, p->by, HS__GROUP_NAMES);
    int rc = hs__site_apply(q, &p->site, err);
    if (!rc) rc = hs__gdiff_runs(q, &p->a, &out->a, err);
    if (!rc) rc = hs__gdiff_runs(q, &p->b, &out->b, err);
    for (size_t i = 0; !rc && i < out->a.nruns; i++)
        rc = count_run(&c, out->a.runs[i], &p->a.at, 0, &out->a);
    for (size_t i = 0; !rc && i < out->b.nruns; i++)
        rc = count_run(&c, out->b.runs[i], &p->b.at, 1, &out->b);
    if (!rc) {
        out->a.total = gstat(c.tsum[0], c.tsumsq[0], c.tvar[0], out->a.nruns);
        out->b.total = gstat(c.tsum[1], c.tsumsq[1], c.tvar[1], out->b.nruns);
        out->delta = out->b.total.mean - out->a.total.mean;
        out->se = sqrt(out->a.total.se * out->a.total.se + out->b.total.se * out->b.total.se);
        out->verdict = verdict(out->delta, out->se);
        rc = gdiff_rows(&c, p, out);
    }
    out->stacks_omitted = c.omitted;
    out->stacks_bytes = c.omitted_bytes;
    gctx_free(&c);
    if (rc) hs_gdiff_result_clear(out);
    return rc;
}

void hs_gdiff_result_clear(hs_gdiff_result *r)
{
    for (size_t i = 0; r->rows && i < r->nrows; i++) free(r->rows[i].stack.frames);
    free(r->rows);
    free(r->a.runs);
    free(r->b.runs);
    hs__held_release(&r->held);
    memset(r, 0, sizeof *r);
}

/* leaks: what a run held at its end, and which sites grew through it, as a
 * typed result (hs_core.h).
 *
 * Growth is judged per site (site.c: the innermost Python frame, or the
 * first frame outside the allocation machinery; a row of the grouping
 * engine, group.c, so a site is its function, file and line), not per trace: a function
 * that leaks through several stacks (an append that sometimes reallocates,
 * a helper called from two places) leaks as one. A site's series is the sum
 * of its traces' delta rows, read for the sites that may qualify only: the
 * per-trace summaries (hs_tstats) bound what the merged series can be (its
 * bytes at the end, its increases, the line's covariance are sums), so
 * most sites are ruled out without reading a row.
 *
 * What counts as growing is the shape of the bytes a site still holds at
 * the end: its floor, F(b) = min of its live bytes over buckets b..end,
 * which rises only where bytes were allocated that stay live to the end. A
 * sawtooth that returns to where it was has a flat floor; a leak under
 * churn has the staircase of what it kept. The floor must rise in at least
 * LEAK_MIN_STEPS buckets, and its rise must be spread over its window (from
 * where it holds LEAK_EDGE of its rise to where it holds all but LEAK_EDGE
 * of it): cut into LEAK_PARTS equal parts, at least LEAK_MIN_SPREAD of them
 * (of as many as it has steps, when fewer) each hold a quarter of an even
 * share of the rise. The window must cover
 * LEAK_MIN_WINDOW of the run. One allocation kept, two or three big steps,
 * or a cache filled early in the run do not pass; a leak of a little every
 * iteration of a loop does, at every-allocation sampling or at a sparse
 * rate (where it shows as a random staircase of sample-sized steps), also
 * when the loop ends well before the run. The least-squares line over the
 * whole run (buckets 0..L, constant between a series' changes) still gives
 * the slope and r², for the reader. */
#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hs_error.h"
#include "q_internal.h"

#define LEAK_MIN_STEPS  4    /* buckets where the floor rose */
#define LEAK_PARTS      8    /* the growth window is judged in this many parts */
#define LEAK_MIN_SPREAD 0.6  /* share of the parts that must hold growth */
#define LEAK_MIN_WINDOW 0.25 /* the window's share of the run's buckets */
#define LEAK_EDGE       0.05 /* the window leaves out this share at each end */

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
    int rc = hs__state_rank(o->q, state, want, err);
    for (size_t i = 0; !rc && i < want; i++) {
        hs_leak_row *row = &r->live[r->nlive];
        const hs__live *lv = &state->rows[i];
        if ((rc = leak_row(o, row, lv->trace, err))) {
            free(row->stack.frames);
            return rc > 0 ? 0 : rc;
        }
        r->nlive++;
        row->bytes = lv->bytes;
        row->count = lv->count;
        row->share = state->total_bytes ? (double)lv->bytes / (double)state->total_bytes : 0.0;
    }
    return rc;
}

static int cmp_score(const void *a, const void *b)
{
    const hs_leak_row *x = a, *y = b;
    if (x->score != y->score) return x->score < y->score ? 1 : -1;
    return (x->count > y->count) - (x->count < y->count); /* count: the site's key's rank */
}

/* ---- growth, per site ------------------------------------------------------ */

/* A site's change in one bucket. */
typedef struct leak_delta {
    int64_t bucket, bytes;
} leak_delta;

typedef struct leak_site {
    /* its traces' summaries summed: what rules a site out unread */
    int64_t bytes, ups, first_up, last_up;
    double sy, sxy;
    int may_grow;
    leak_delta *d; /* may_grow: its traces' delta rows, then merged by bucket */
    size_t nd, capd;
} leak_site;

typedef struct leak_sites {
    hs__grouping g; /* by site: its rows are the sites (representative: the
                     * trace holding most at the end, the row's stack) */
    leak_site *s;   /* per site (row of g) */
    size_t n, cap;
    size_t *of;     /* per row of the summaries, its site's index */
    hs__map traces; /* trace -> site index, for the sites that may grow */
} leak_sites;

/* A trace's delta rows cost about this many rows of a pass over all of a
 * run's rows when looked up bucket by bucket (as history.c weighs it). */
#define LEAK_LOOKUP_COST 8

static void sites_clear(leak_sites *ls)
{
    for (size_t i = 0; i < ls->n; i++) free(ls->s[i].d);
    free(ls->s);
    free(ls->of);
    hs__group_free(&ls->g);
    hs__map_free(&ls->traces);
    memset(ls, 0, sizeof *ls);
}

/* The site of trace (holding bytes at the end) in the grouping, made when
 * new; NULL when out of memory, or with *rc set on a store's error. */
static leak_site *site_get(leak_sites *ls, int64_t trace, int64_t bytes, size_t *index, int *rc,
                           hs_qerr *err)
{
    size_t head;
    if ((*rc = hs__group_trace(&ls->g, trace, &head, err))) return NULL;
    assert(head != HS__GNONE && ls->g.ents[head].row == 1);
    hs__group_offer(&ls->g, head, 1, trace, bytes);
    for (; ls->n < ls->g.n; ls->n++) {
        if (ls->n == ls->cap) {
            size_t ncap = ls->cap ? 2 * ls->cap : 64;
            leak_site *np = realloc(ls->s, ncap * sizeof *np);
            if (!np) return NULL;
            ls->s = np;
            ls->cap = ncap;
        }
        ls->s[ls->n] = (leak_site){.first_up = INT64_MAX, .last_up = -1};
    }
    *index = ls->g.ents[head + 1].row;
    return &ls->s[*index];
}

/* Groups the traces of sums by site and sums their summaries (closed at
 * L + 1: live bytes stay as they are up to the end). */
static int sites_group(hs_q *q, const hs__tsums *sums, int64_t L, leak_sites *ls, hs_qerr *err)
{
    /* a site a trace at most (and one for the empty stacks) */
    if (!(ls->of = malloc((sums->n ? sums->n : 1) * sizeof *ls->of)) ||
        hs__group_reserve(&ls->g, sums->n + 1) || !(ls->s = malloc((sums->n + 1) * sizeof *ls->s)))
        return hs__err(err, HS_ENOMEM, "out of memory");
    ls->cap = sums->n + 1;
    for (size_t i = 0; i < sums->n; i++) {
        hs_tstats t = sums->rows[i].s;
        hs_tstats_close(&t, L + 1);
        int rc;
        leak_site *s = site_get(ls, sums->rows[i].trace, t.bytes, &ls->of[i], &rc, err);
        if (!s) return rc ? rc : hs__err(err, HS_ENOMEM, "out of memory");
        s->bytes += t.bytes;
        s->ups += t.ups;
        s->sy += t.sy;
        s->sxy += t.sxy;
        if (t.ups && t.first_up < s->first_up) s->first_up = t.first_up;
        if (t.ups && t.last_up > s->last_up) s->last_up = t.last_up;
    }
    (void)q;
    return 0;
}

/* 0 when the summed summaries already rule the site out: nothing live at
 * the end, a line that does not rise, or too few increases, too close
 * together, for its floor to pass site_judge. */
static int site_may_grow(const leak_site *s, int64_t L)
{
    double nb = (double)(L + 1), sx = (double)L * (double)(L + 1) / 2;
    if (s->bytes <= 0 || s->ups < LEAK_MIN_STEPS || nb * s->sxy - sx * s->sy <= 0) return 0;
    /* the window lies within the increases' span */
    int64_t span = s->last_up - s->first_up + 1;
    return span >= LEAK_MIN_STEPS && (double)span >= LEAK_MIN_WINDOW * nb;
}

static int site_put(leak_site *s, int64_t bucket, int64_t bytes)
{
    if (s->nd == s->capd) {
        size_t ncap = s->capd ? 2 * s->capd : 16;
        leak_delta *np = realloc(s->d, ncap * sizeof *np);
        if (!np) return HS_ENOMEM;
        s->d = np;
        s->capd = ncap;
    }
    s->d[s->nd++] = (leak_delta){bucket, bytes};
    return 0;
}

/* The rows of buckets <= upto of the traces in ls->traces, in one pass
 * over the run's delta rows. */
typedef struct scan_acc {
    leak_sites *ls;
    int64_t upto;
} scan_acc;

#define SCAN_STOP 1 /* a row past upto: the pass is done (not an error) */

static int scan_row(int64_t bucket, int64_t trace, int64_t bytes, void *data)
{
    scan_acc *a = data;
    uint64_t k;
    if (bucket > a->upto) return SCAN_STOP;
    if (!hs__map_get(&a->ls->traces, (uint64_t)trace, &k)) return 0;
    return site_put(&a->ls->s[k], bucket, bytes);
}

static int sites_scan(hs_q *q, const hs__run *run, int64_t upto, leak_sites *ls, hs_qerr *err)
{
    scan_acc a = {ls, upto};
    int rc = q->store->ops->deltas(q->store, run->id, -1, scan_row, &a, err);
    if (rc == SCAN_STOP) return 0;
    if (rc == HS_ENOMEM) return hs__err(err, HS_ENOMEM, "out of memory");
    return rc;
}

static int lookup_row(int64_t bucket, int64_t bytes, void *data)
{
    return site_put(data, bucket, bytes);
}

/* The rows of buckets first..last of one trace, looked up. */
static int site_lookup(hs_q *q, const hs__run *run, int64_t trace, int64_t first, int64_t last,
                       leak_site *site, hs_qerr *err)
{
    int rc =
        q->store->ops->trace_deltas(q->store, run->id, trace, first, last, lookup_row, site, err);
    if (rc == HS_ENOMEM) return hs__err(err, HS_ENOMEM, "out of memory");
    return rc;
}

static int cmp_delta_bucket(const void *a, const void *b)
{
    const leak_delta *x = a, *y = b;
    return (x->bucket > y->bucket) - (x->bucket < y->bucket);
}

/* The series of the sites that may grow: their traces' rows of buckets <=
 * upto, by a pass or by lookups, whichever reads fewer rows; then one
 * change per bucket. */
static int sites_read(hs_q *q, const hs__run *run, int64_t upto, const hs__tsums *sums,
                      leak_sites *ls, hs_qerr *err)
{
    int64_t lookups = 0;
    for (size_t i = 0; i < sums->n; i++) {
        const hs_tstats *t = &sums->rows[i].s;
        if (!ls->s[ls->of[i]].may_grow) continue;
        if (hs__map_put(&ls->traces, (uint64_t)sums->rows[i].trace, ls->of[i]))
            return hs__err(err, HS_ENOMEM, "out of memory");
        lookups += (t->last < upto ? t->last : upto) - t->first + 1;
    }
    int rc = 0;
    if (lookups * LEAK_LOOKUP_COST >= sums->delta_rows) {
        rc = sites_scan(q, run, upto, ls, err);
    } else {
        for (size_t i = 0; !rc && i < sums->n; i++) {
            const hs_tstats *t = &sums->rows[i].s;
            leak_site *s = &ls->s[ls->of[i]];
            if (s->may_grow)
                rc = site_lookup(q, run, sums->rows[i].trace, t->first,
                                 t->last < upto ? t->last : upto, s, err);
        }
    }
    for (size_t i = 0; !rc && i < ls->n; i++) {
        leak_site *s = &ls->s[i];
        hs__sort(s->d, s->nd, sizeof *s->d, cmp_delta_bucket);
        size_t w = 0;
        for (size_t k = 0; k < s->nd; k++) {
            if (w && s->d[w - 1].bucket == s->d[k].bucket)
                s->d[w - 1].bytes += s->d[k].bytes;
            else
                s->d[w++] = s->d[k];
        }
        s->nd = w;
    }
    return rc;
}

/* How the floor of the series d (one change per bucket, buckets <= L)
 * rose: returns the buckets in the window where it rose (-1 when out of
 * memory) and sets *spread (of the window's parts, as many as it rose in
 * buckets at most, the share holding at least a quarter of an even share
 * of the rise) and *window (the window's share of buckets 0..L). The window runs from the bucket
 * where the floor first holds LEAK_EDGE of its rise to the one where it first holds all but
 * LEAK_EDGE: a little kept before or after the growth does not stretch it. */
static int floor_rise(const leak_delta *d, size_t n, int64_t L, double *spread, double *window)
{
    *spread = *window = 0;
    if (!n) return 0;
    double *f = malloc(n * sizeof *f), y = 0;
    if (!f) return -1;
    for (size_t k = 0; k < n; k++) f[k] = y += (double)d[k].bytes;
    for (size_t k = n - 1; k-- > 0;)
        if (f[k + 1] < f[k]) f[k] = f[k + 1];
    double f0 = f[0] < 0 ? f[0] : 0, rise = f[n - 1] - f0;
    int steps = 0;
    if (rise > 0) {
        size_t k0 = 0, k1;
        while (f[k0] - f0 < LEAK_EDGE * rise) k0++;
        for (k1 = k0; f[k1] - f0 < (1 - LEAK_EDGE) * rise; k1++) {
        }
        int64_t b0 = d[k0].bucket, w = d[k1].bucket - b0 + 1,
                parts = w < LEAK_PARTS ? w : LEAK_PARTS;
        double part[LEAK_PARTS] = {0};
        for (size_t k = k0; k <= k1; k++) {
            double inc = f[k] - (k ? f[k - 1] : f0);
            if (inc <= 0) continue;
            int64_t j = (d[k].bucket - b0) * parts / w;
            assert(j >= 0 && j < parts);
            part[j] += inc;
            steps++;
        }
        /* a staircase of a few steps (a sparse rate's samples) can fill no
         * more parts than it has steps */
        int held = 0, room = steps < parts ? steps : (int)parts;
        for (int64_t j = 0; j < parts; j++) held += part[j] >= rise / (4.0 * (double)parts);
        *spread = room ? (double)held / room : 0;
        *window = (double)w / (double)(L + 1);
    }
    free(f);
    return steps;
}

/* 1 with row filled when site s grew steadily (see the top of the file),
 * 0 when not, -1 when out of memory. */
static int site_judge(const leak_site *s, const hs__run *run, int64_t L, hs_leak_row *row)
{
    hs_tstats t = {0};
    for (size_t k = 0; k < s->nd; k++) hs_tstats_add(&t, s->d[k].bucket, s->d[k].bytes);
    hs_tstats_close(&t, L + 1);
    double nb = (double)(L + 1), sx = (double)L * nb / 2, sxx = (double)L * nb * (2 * nb - 1) / 6;
    double vx = nb * sxx - sx * sx, cov = nb * t.sxy - sx * t.sy, vy = nb * t.syy - t.sy * t.sy;
    if (t.bytes <= 0 || cov <= 0 || vx <= 0) return 0;
    double spread, window;
    int steps = floor_rise(s->d, s->nd, L, &spread, &window);
    if (steps < 0) return -1;
    if (steps < LEAK_MIN_STEPS || spread + 1e-9 < LEAK_MIN_SPREAD || window < LEAK_MIN_WINDOW)
        return 0;
    *row = (hs_leak_row){.end_bytes = t.bytes,
                         .slope = cov / vx * 1e9 / (double)run->g,
                         .r2 = vy > 0 ? cov * cov / (vx * vy) : 0,
                         .steady = spread,
                         .span = window,
                         .score = (double)t.bytes * spread};
    return 1;
}

typedef struct site_at {
    size_t site, row; /* a growing site and its row */
} site_at;

static int cmp_site(const void *a, const void *b, void *g)
{
    return hs__group_cmp(g, ((const site_at *)a)->site, ((const site_at *)b)->site);
}

/* rows[i].count: row i's site, made its rank among the n rows' sites in
 * content order (hs__group_cmp): how sites of equal scores are ordered. */
static int sites_rank(leak_sites *ls, hs_leak_row *rows, size_t n, hs_qerr *err)
{
    site_at *k = malloc((n ? n : 1) * sizeof *k);
    if (!k) return hs__err(err, HS_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) k[i] = (site_at){(size_t)rows[i].count, i};
    if (n > 1) qsort_r(k, n, sizeof *k, cmp_site, &ls->g);
    for (size_t i = 0; i < n; i++) rows[k[i].row].count = (int64_t)i;
    free(k);
    return 0;
}

/* The growing sites' rows, unranked, into *out (count: the rank of their
 * site's key). */
static int leaks_fit(hs_q *q, const hs__run *run, int64_t L, const hs__tsums *sums,
                     hs_leak_row **out, size_t *n, hs_qerr *err)
{
    leak_sites ls = {0};
    hs__group_init(&ls.g, q, HS_GROUP_SITE, HS__GROUP_EMPTY | HS__GROUP_ALL | HS__GROUP_ONCE);
    int rc = sites_group(q, sums, L, &ls, err);
    if (!rc) rc = hs__group_settle(&ls.g, NULL, 0, err); /* the sites' stacks */
    for (size_t i = 0; !rc && i < ls.n; i++) ls.s[i].may_grow = site_may_grow(&ls.s[i], L);
    if (!rc) rc = sites_read(q, run, L, sums, &ls, err);
    if (!rc && !(*out = calloc(ls.n ? ls.n : 1, sizeof **out)))
        rc = hs__err(err, HS_ENOMEM, "out of memory");
    for (size_t i = 0; !rc && i < ls.n; i++) {
        if (!ls.s[i].may_grow) continue;
        int g = site_judge(&ls.s[i], run, L, &(*out)[*n]);
        if (g < 0) rc = hs__err(err, HS_ENOMEM, "out of memory");
        if (g > 0) {
            (*out)[*n].trace = ls.g.rows[i].trace;
            (*out)[(*n)++].count = (int64_t)i;
        }
    }
    if (!rc) rc = sites_rank(&ls, *out, *n, err);
    sites_clear(&ls);
    return rc;
}

/* Ranks the growing sites (equal scores in the order of their sites'
 * content, group.c); stacks only for the rows
 * answered. The summaries and the rows are read in the request's one read
 * transaction (the store's, held by the run's record). */
static int leaks_growing(leaks_out *o, const hs__run *run, const hs__at *at, hs_qerr *err)
{
    hs__tsums sums = {0};
    hs_leaks_result *r = o->r;
    size_t n = 0;
    int rc = hs__tsums_load(o->q, run, at->bucket, &sums, err);
    if (!rc && at->bucket >= 0) rc = leaks_fit(o->q, run, at->bucket, &sums, &r->growing, &n, err);
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
    hs__held_release(&r->held);
    memset(r, 0, sizeof *r);
}

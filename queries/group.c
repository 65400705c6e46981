/* group: the one grouping engine of the questions (top, diff, gdiff,
 * check, leaks), and the content order of rows that tie. A moment's live
 * traces are counted for rows by site, function or stack (hs_group, the
 * one numbering), and a row is what its frames are, never a store's id:
 *
 *   site      the stack's site frame (site.c): a code address (module and
 *             offset) with its function, file and line
 *   function  a function's name (every function of the stack)
 *   stack     the whole stack: its frames, named by its site; a store holds
 *             each sequence of frames once, as one trace
 *
 * With names set (the questions that compare across runs and builds: diff,
 * gdiff, check) a frame is its name alone (function less clone suffixes,
 * or module+offset when unknown): a site is its function's name, a stack
 * its collapsed line, so that a changed line number or another build still
 * matches (docs/api.md). Within a store a frame's id stands for its
 * content, so rows by site and stack are keyed by ids without reading a
 * frame, a function's key is worked out once a frame, and a trace's rows
 * once (traces are shared by the moments and runs counted). A row's
 * representative trace is the one holding most, ties going to the first in
 * content order (hs__trace_cmp: its site's frame, then its stack leaf
 * first), settled for the rows shown; rows that tie are ordered by their
 * keys or frames (hs__frame_cmp), then as their traces: no store's ids
 * decide what an answer holds or its order. */
#include <assert.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hs_error.h"
#include "q_internal.h"

void hs__group_init(hs__grouping *g, hs_q *q, hs_group by, int flags)
{
    memset(g, 0, sizeof *g);
    g->q = q;
    g->by = by;
    g->names = (flags & HS__GROUP_NAMES) != 0;
    g->empty = (flags & HS__GROUP_EMPTY) != 0;
    g->all = (flags & HS__GROUP_ALL) != 0;
    g->once = (flags & HS__GROUP_ONCE) != 0;
    g->kept = (flags & HS__GROUP_KEPT) != 0;
    /* keys are frames' names (held by q's frame cache), or "" for the empty
     * stacks; only collapsed lines are made here, and copied */
    g->keys.borrow = !(by == HS_GROUP_STACK && g->names);
}

void hs__group_free(hs__grouping *g)
{
    hs__smap_free(&g->keys);
    hs__map_free(&g->fidx);
    free(g->slot_row);
    hs__map_free(&g->tidx);
    free(g->rows);
    free(g->ents);
    free(g->ties);
    free(g->key.p);
    memset(g, 0, sizeof *g);
}

/* Room for one more entry; 0 or HS_ENOMEM. */
static int ents_grow(hs__grouping *g, hs_qerr *err)
{
    size_t cap = g->capents ? g->capents * 2 : 4096;
    hs__gent *np = realloc(g->ents, cap * sizeof *np);
    if (!np) return hs__err(err, HS_ENOMEM, "out of memory");
    g->ents = np;
    g->capents = cap;
    return 0;
}

static inline int ent_push(hs__grouping *g, hs__gent e, hs_qerr *err)
{
    if (g->nents == g->capents && ents_grow(g, err)) return HS_ENOMEM;
    g->ents[g->nents++] = e;
    return 0;
}

int hs__group_reserve(hs__grouping *g, size_t rows)
{
    if (rows <= g->cap) return 0;
    hs__grow *np = realloc(g->rows, rows * sizeof *np);
    if (!np) return HS_ENOMEM;
    g->rows = np;
    g->cap = rows;
    return 0;
}

/* A new row keyed key (held by g->keys; NULL: worked out when asked),
 * named by f (or frame fid, read when asked); NONE when out of memory. */
static inline size_t row_new(hs__grouping *g, const char *key, const hs__frame *f, int64_t fid)
{
    if (g->n == g->cap && hs__group_reserve(g, g->cap ? g->cap * 2 : 256)) return HS__GNONE;
    g->rows[g->n] = (hs__grow){.key = key, .frame = f, .fid = fid, .seen = UINT64_MAX};
    return g->n++;
}

/* key (len bytes) as held by g->keys, and its row there (*row: NONE when
 * new); NULL when out of memory. */
static const char *key_held(hs__grouping *g, const char *key, size_t len, size_t *row)
{
    int added;
    const char *stored;
    size_t i = hs__smap_put(&g->keys, key, len, g->n, &added, &stored);
    if (i == HS__GNONE) return NULL;
    *row = added ? HS__GNONE : i;
    return stored;
}

/* Room in g->slot_row for slot; 0 or HS_ENOMEM. */
static int slots_grow(hs__grouping *g, size_t slot)
{
    size_t n = g->nslots ? g->nslots : g->q->nframes > 1024 ? g->q->nframes : 1024;
    while (n <= slot) n *= 2;
    size_t *np = realloc(g->slot_row, n * sizeof *np);
    if (!np) return HS_ENOMEM;
    for (size_t i = g->nslots; i < n; i++) np[i] = HS__GNONE;
    g->slot_row = np;
    g->nslots = n;
    return 0;
}

/* The row keyed by the name of f (frame id): looked up once a frame,
 * then found by the frame's slot in q's frame cache. NONE when out of
 * memory. */
static size_t name_row(hs__grouping *g, int64_t id, const hs__frame *f)
{
    assert(f && f->slot < g->q->nframes && g->q->frames[f->slot] == f);
    if (f->slot < g->nslots && g->slot_row[f->slot] != HS__GNONE) return g->slot_row[f->slot];
    if (f->slot >= g->nslots && slots_grow(g, f->slot)) return HS__GNONE;
    size_t row;
    const char *key = key_held(g, f->name, strlen(f->name), &row);
    if (!key) return HS__GNONE;
    if (row == HS__GNONE) row = row_new(g, key, f, id);
    g->slot_row[f->slot] = row;
    return row;
}

/* The row of frame id: by function (and by site with names), keyed by
 * its name (name_row); by site, the frame itself (a frame is a code
 * address, its function, file and line: within a store its id stands for
 * it), read when asked; by stack, a new row (the trace's) named by it.
 * NONE when out of memory. */
static size_t frame_row(hs__grouping *g, int64_t id, const hs__frame *f)
{
    uint64_t v;
    if (g->by == HS_GROUP_STACK) return row_new(g, NULL, NULL, id);
    if (g->by == HS_GROUP_FUNCTION || g->names) return name_row(g, id, f);
    if (hs__map_get(&g->fidx, (uint64_t)id, &v)) return (size_t)v;
    size_t row = row_new(g, NULL, NULL, id);
    if (row == HS__GNONE || hs__map_put(&g->fidx, (uint64_t)id, row)) return HS__GNONE;
    return row;
}

const hs__frame *hs__group_frame(hs__grouping *g, size_t row, hs_qerr *err)
{
    hs__grow *r = &g->rows[row];
    if (!r->frame && r->fid) r->frame = hs__frame_get(g->q, r->fid, err);
    return r->frame;
}

/* Row i's entry in the trace's list (from start), once a stack (the site's
 * mark kept). */
static int ent_row(hs__grouping *g, size_t i, const hs__frame *f, int site, size_t start,
                   uint64_t stamp, hs_qerr *err)
{
    if (i == HS__GNONE) return hs__err(err, HS_ENOMEM, "out of memory");
    if (g->rows[i].seen == stamp) { /* a function twice in a stack: once, the site's mark kept */
        for (size_t j = start; site && j < g->nents; j++)
            if (g->ents[j].row == i) {
                g->ents[j].site = 1;
                g->ents[j].frame = f;
            }
        return 0;
    }
    g->rows[i].seen = stamp;
    return ent_push(g, (hs__gent){.row = i, .frame = f, .site = site}, err);
}

/* The row of a stack by names: its collapsed line (fr: its frames); its
 * site's frame in *f. NONE when out of memory. */
static size_t names_row(hs__grouping *g, const hs__frame *const *fr, int d, int site,
                        const hs__frame **f)
{
    g->key.n = 0;
    for (int j = d - 1; j >= 0; j--) {
        hs__collapsed_put(&g->key, fr[j]->name);
        if (j) hs_buf_put(&g->key, ";", 1);
        if (j == site) *f = fr[j];
    }
    size_t row;
    const char *key = g->key.oom ? NULL : key_held(g, g->key.p ? g->key.p : "", g->key.n, &row);
    if (!key) return HS__GNONE;
    return row != HS__GNONE ? row : row_new(g, key, *f, 0);
}

/* The entries of trace's stack (frames: its d frame ids, leaf first, or
 * its site's alone, as trace_frames gives them; site its site's index). By site, and by stack with
 * file and line, no frame is read: a site is its frame, a stack its trace, which its store holds
 * once for each sequence of frames (hs_qstore.h). */
static int stack_rows(hs__grouping *g, const int64_t *frames, const hs__frame *const *fr, int d,
                      int site, size_t start, hs_qerr *err)
{
    uint64_t stamp = g->ntraces;
    if (d == 0) {
        if (!g->empty) return 0;
        size_t row;
        const char *key = key_held(g, "", 0, &row);
        if (key && row == HS__GNONE) row = row_new(g, key, NULL, 0);
        return ent_row(g, key ? row : HS__GNONE, NULL, 1, start, stamp, err);
    }
    if (g->by == HS_GROUP_STACK && g->names) {
        const hs__frame *f = NULL;
        size_t row = names_row(g, fr, d, site, &f);
        return ent_row(g, row, f, 1, start, stamp, err);
    }
    if (!g->names && g->by != HS_GROUP_FUNCTION) { /* one row: the frame, read when asked */
        size_t row = frame_row(g, frames[site], NULL);
        if (row == HS__GNONE) return hs__err(err, HS_ENOMEM, "out of memory");
        return ent_push(g, (hs__gent){.row = row, .site = 1}, err);
    }
    int fn = g->by == HS_GROUP_FUNCTION; /* else a site by its name */
    for (int k = fn ? 0 : site; k < (fn ? d : site + 1); k++) {
        int rc = ent_row(g, frame_row(g, frames[k], fr[k]), fr[k], k == site, start, stamp, err);
        if (rc) return rc;
    }
    return 0;
}

/* Trace's stack, by function and with names: its d frame ids (leaf first)
 * into frames, their frames into fr and its site's index into *site;
 * returns d, or an HS_E code. */
static int trace_frames(hs__grouping *g, int64_t trace, int64_t *frames, const hs__frame **fr,
                        int *site, hs_qerr *err)
{
    assert(g->names || g->by == HS_GROUP_FUNCTION);
    int d = hs__stack(g->q, trace, frames, HS_MAX_DEPTH, err);
    if (d < 0) return d;
    /* frames to be read anyway are read first: the site's rules then find
     * them cached (site.c reads the others without keeping them) */
    for (int k = 0; k < d; k++)
        if (!(fr[k] = hs__frame_get(g->q, frames[k], err))) return HS_EDB;
    *site = d ? hs__site_index(g->q, trace, frames, d, err) : 0;
    return *site < 0 ? *site : d;
}

/* 1 when trace needs no placing: its entries are known (at *off), or the
 * request's frames ran out (*off NONE: counted, not placed). */
static int trace_known(hs__grouping *g, int64_t trace, size_t *off)
{
    uint64_t v;
    if (g->once) {
        g->nents = 0; /* the last trace's entries are done with */
    } else if (!g->kept && hs__map_get(&g->tidx, (uint64_t)trace, &v)) {
        *off = (size_t)v;
        return 1;
    }
    if (!g->all && hs__frames_full(g->q)) {
        *off = HS__GNONE;
        return 1;
    }
    return 0;
}

/* Trace's entries are at head: counted, and kept in the trace index. */
static int trace_placed(hs__grouping *g, int64_t trace, size_t head, size_t *off, hs_qerr *err)
{
    g->ntraces++;
    if (!g->once && !g->kept && hs__map_put(&g->tidx, (uint64_t)trace, head))
        return hs__err(err, HS_ENOMEM, "out of memory");
    *off = head;
    return 0;
}

/* Places trace (its stack as trace_frames or hs__group_stack give it):
 * its entries, at *off. */
static int trace_place(hs__grouping *g, int64_t trace, const int64_t *frames,
                       const hs__frame *const *fr, int d, int site, size_t *off, hs_qerr *err)
{
    size_t head = g->nents;
    int rc = ent_push(g, (hs__gent){.row = 0}, err);
    if (!rc) rc = stack_rows(g, frames, fr, d, site, head + 1, err);
    if (rc) return rc;
    g->ents[head].row = g->nents - head - 1;
    return trace_placed(g, trace, head, off, err);
}

/* By site, and by stack with file and line, a trace's one entry: its site
 * frame's row, the frame from the per-trace site cache (its nodes are not
 * walked, no frame is read); an empty stack as trace_place places it. */
static int site_place(hs__grouping *g, int64_t trace, size_t *off, hs_qerr *err)
{
    int64_t sf;
    int rc = hs__site(g->q, trace, &sf, err);
    if (rc) return rc;
    if (!sf) return trace_place(g, trace, &sf, NULL, 0, 0, off, err);
    size_t row = frame_row(g, sf, NULL), head = g->nents;
    if (row == HS__GNONE) return hs__err(err, HS_ENOMEM, "out of memory");
    if ((rc = ent_push(g, (hs__gent){.row = 1}, err)) ||
        (rc = ent_push(g, (hs__gent){.row = row, .site = 1}, err)))
        return rc;
    return trace_placed(g, trace, head, off, err);
}

int hs__group_trace(hs__grouping *g, int64_t trace, size_t *off, hs_qerr *err)
{
    if (trace_known(g, trace, off)) return 0;
    if (!g->names && g->by != HS_GROUP_FUNCTION) return site_place(g, trace, off, err);
    int64_t frames[HS_MAX_DEPTH];
    const hs__frame *fr[HS_MAX_DEPTH];
    int site, d = trace_frames(g, trace, frames, fr, &site, err);
    if (d < 0) return d;
    return trace_place(g, trace, frames, fr, d, site, off, err);
}

int hs__group_stack(hs__grouping *g, int64_t trace, const int64_t *frames,
                    const hs__frame *const *fr, int d, size_t *off, hs_qerr *err)
{
    assert(d >= 0 && d <= HS_MAX_DEPTH);
    if (trace_known(g, trace, off)) return 0;
    int site = d ? hs__site_index(g->q, trace, frames, d, err) : 0;
    if (site < 0) return site;
    return trace_place(g, trace, frames, fr, d, site, off, err);
}

/* 1 when trace a comes before trace b in content order (hs__trace_cmp);
 * 0 also when either cannot be read (the one kept stays). */
static int trace_before(hs_q *q, int64_t a, int64_t b)
{
    hs_qerr e;
    int c = 0;
    return !hs__trace_cmp(q, a, b, &c, &e) && c < 0;
}

void hs__group_offer(hs__grouping *g, size_t head, size_t j, int64_t trace, int64_t bytes)
{
    assert(j >= 1 && j <= g->ents[head].row);
    const hs__gent *e = &g->ents[head + j];
    hs__grow *r = &g->rows[e->row];
    if (r->trace == trace) { /* the same trace again (another run's): its most */
        if (bytes > r->trace_bytes) r->trace_bytes = bytes;
        return;
    }
    if (r->trace && bytes < r->trace_bytes) return;
    if (r->trace && bytes == r->trace_bytes) { /* a tie: settled when the row is shown */
        if (g->nties == g->capties) {
            size_t cap = g->capties ? g->capties * 2 : 256;
            hs__gtie *np = realloc(g->ties, cap * sizeof *np);
            if (!np) {
                g->ties_oom = 1;
                return;
            }
            g->ties = np;
            g->capties = cap;
        }
        g->ties[g->nties++] = (hs__gtie){e->row, trace, e->frame, r->gen};
        return;
    }
    r->trace = trace;
    r->trace_bytes = bytes;
    r->gen++; /* the ties offered so far hold less */
    if (e->frame) r->frame = e->frame;
}

int hs__group_settle(hs__grouping *g, const size_t *rows, size_t n, hs_qerr *err)
{
    if (g->ties_oom) return hs__err(err, HS_ENOMEM, "out of memory");
    unsigned char *want = rows ? calloc(g->n ? g->n : 1, 1) : NULL;
    if (rows && !want) return hs__err(err, HS_ENOMEM, "out of memory");
    for (size_t i = 0; rows && i < n; i++) want[rows[i]] = 1;
    for (size_t i = 0; i < g->nties; i++) {
        const hs__gtie *t = &g->ties[i];
        hs__grow *r = &g->rows[t->row];
        if ((want && !want[t->row]) || t->gen != r->gen || t->trace == r->trace ||
            !trace_before(g->q, t->trace, r->trace))
            continue;
        r->trace = t->trace;
        if (t->frame) r->frame = t->frame;
    }
    free(want);
    return 0;
}

int hs__group_cmp(hs__grouping *g, size_t a, size_t b)
{
    if (a == b) return 0;
    hs__grow *x = &g->rows[a], *y = &g->rows[b];
    int d = 0;
    if (x->key && y->key) return strcmp(x->key, y->key); /* by function, with names */
    /* by site and stack with file and line: their frames, no key made */
    hs_qerr e;
    const hs__frame *fx = hs__group_frame(g, a, &e), *fy = hs__group_frame(g, b, &e);
    if (!fx || !fy) return fx ? 1 : fy ? -1 : 0; /* the empty stacks' row first */
    if (x->fid != y->fid && (d = hs__frame_cmp(fx, fy))) return d;
    if (g->by == HS_GROUP_STACK) hs__trace_cmp(g->q, x->trace, y->trace, &d, &e);
    return d ? d : (x->fid > y->fid) - (x->fid < y->fid);
}

/* ---- ties in content order ------------------------------------------------- */

/* The first frames where the stacks of a and b (from nodes na, nb, leaf
 * first) differ, compared: a frame's id stands for its content within a
 * store, so only frames of different ids are read; a stack that ends
 * first comes first. */
static int stacks_cmp(hs_q *q, int64_t na, int64_t nb, int *out, hs_qerr *err)
{
    *out = 0;
    while (na != nb) {
        if (!na || !nb) {
            *out = na ? 1 : -1;
            return 0;
        }
        int64_t pa, pb, fa, fb;
        int da, db;
        if (hs__node(q, na, &pa, &fa, &da, err) || hs__node(q, nb, &pb, &fb, &db, err))
            return HS_EDB;
        if (fa != fb) {
            const hs__frame *x = hs__frame_get(q, fa, err), *y = hs__frame_get(q, fb, err);
            if (!x || !y) return HS_EDB;
            if ((*out = hs__frame_cmp(x, y))) return 0;
        }
        if (pa == na || pb == nb) return 0; /* defensive: a self-loop */
        na = pa;
        nb = pb;
    }
    return 0;
}

int hs__trace_cmp(hs_q *q, int64_t a, int64_t b, int *out, hs_qerr *err)
{
    *out = 0;
    if (a == b) return 0;
    int64_t sa, sb;
    int rc = hs__site(q, a, &sa, err);
    if (!rc) rc = hs__site(q, b, &sb, err);
    if (rc) return rc;
    if ((!sa || !sb) && sa != sb) {
        *out = sa ? 1 : -1;
        return 0;
    }
    if (sa != sb) {
        const hs__frame *x = hs__frame_get(q, sa, err), *y = hs__frame_get(q, sb, err);
        if (!x || !y) return HS_EDB;
        if ((*out = hs__frame_cmp(x, y))) return 0;
    }
    if ((rc = stacks_cmp(q, a, b, out, err)) || *out) return rc;
    *out = (a > b) - (a < b); /* the same content twice in a store */
    return 0;
}

/* A trace among ties, its site's frame looked up once. */
typedef struct tie_el {
    const hs__frame *site; /* NULL: an empty stack */
    int64_t trace;
    size_t at; /* its index among the ties */
} tie_el;

typedef struct tie_ctx {
    hs_q *q;
    int rc;
    hs_qerr *err;
} tie_ctx;

/* hs__trace_cmp with the sites at hand. */
static int cmp_tie(const void *a, const void *b, void *data)
{
    const tie_el *x = a, *y = b;
    tie_ctx *c = data;
    if (x->site != y->site) {
        if (!x->site || !y->site) return x->site ? 1 : -1;
        int d = hs__frame_cmp(x->site, y->site);
        if (d) return d;
    }
    int out = 0;
    if (!c->rc) c->rc = stacks_cmp(c->q, x->trace, y->trace, &out, c->err);
    return out ? out : (x->trace > y->trace) - (x->trace < y->trace);
}

/* The m first of el[0..k) in content order into el[0..m), the rest after
 * them in no order: a sort when all are wanted, else one pass keeping the
 * m first (a leaks answer wants 20 of thousands of equal stacks). */
static void ties_pick(tie_el *el, size_t k, size_t m, tie_ctx *c)
{
    qsort_r(el, m, sizeof *el, cmp_tie, c);
    for (size_t j = m; j < k && m; j++) {
        if (cmp_tie(&el[j], &el[m - 1], c) >= 0) continue;
        tie_el v = el[j];
        size_t lo = 0, hi = m - 1; /* v goes before el[hi] */
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (cmp_tie(&v, &el[mid], c) < 0)
                hi = mid;
            else
                lo = mid + 1;
        }
        el[j] = el[m - 1];
        memmove(&el[lo + 1], &el[lo], (m - 1 - lo) * sizeof *el);
        el[lo] = v;
    }
}

/* Orders base[lo..hi) (ties, elements of size sz) in content order, the
 * first m of them at least; tmp holds hi - lo elements. */
static int ties_order(tie_ctx *c, char *base, size_t lo, size_t hi, size_t m, size_t sz,
                      size_t trace_off, tie_el *el, char *tmp)
{
    for (size_t i = lo; i < hi; i++) {
        tie_el *e = &el[i - lo];
        memcpy(&e->trace, base + i * sz + trace_off, sizeof e->trace);
        e->at = i;
        int64_t sf;
        int rc = hs__site(c->q, e->trace, &sf, c->err);
        if (rc) return rc;
        e->site = NULL;
        if (sf && !(e->site = hs__frame_get(c->q, sf, c->err))) return HS_EDB;
    }
    ties_pick(el, hi - lo, m, c);
    if (c->rc) return c->rc;
    for (size_t i = lo; i < hi; i++) memcpy(tmp + (i - lo) * sz, base + el[i - lo].at * sz, sz);
    memcpy(base + lo * sz, tmp, (hi - lo) * sz);
    return 0;
}

int hs__ties_by_content(hs_q *q, void *base, size_t n, size_t sz, size_t weight_off,
                        size_t trace_off, size_t want, hs_qerr *err)
{
    char *b = base, *tmp = NULL;
    tie_el *el = NULL;
    size_t cap = 0;
    tie_ctx c = {.q = q, .err = err};
    /* a request's frames bound its memory: past them, ties stay by id */
    for (size_t lo = 0, hi; !c.rc && lo < n && lo < want && !hs__frames_full(q); lo = hi) {
        int64_t w, v;
        memcpy(&w, b + lo * sz + weight_off, sizeof w);
        for (hi = lo + 1; hi < n; hi++) {
            memcpy(&v, b + hi * sz + weight_off, sizeof v);
            if (v != w) break;
        }
        if (hi - lo < 2) continue;
        if (hi - lo > cap) {
            cap = hi - lo;
            free(el);
            free(tmp);
            el = malloc(cap * sizeof *el);
            tmp = malloc(cap * sz);
            if (!el || !tmp) c.rc = hs__err(err, HS_ENOMEM, "out of memory");
        }
        size_t m = (want < hi ? want : hi) - lo;
        if (!c.rc) c.rc = ties_order(&c, b, lo, hi, m, sz, trace_off, el, tmp);
    }
    free(el);
    free(tmp);
    return c.rc;
}

int hs__state_rank(hs_q *q, hs__state *s, size_t want, hs_qerr *err)
{
    hs__sort(s->rows, s->n, sizeof *s->rows, hs__cmp_live_bytes);
    return hs__ties_by_content(q, s->rows, s->n, sizeof *s->rows, offsetof(hs__live, bytes),
                               offsetof(hs__live, trace), want, err);
}

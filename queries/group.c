/* group: the one grouping engine of the questions (top, diff, gdiff,
 * check, leaks). A moment's live traces are counted for rows by site,
 * function or stack (hs_group), and a row is what its frames are, never a
 * store's id:
 *
 *   site      the stack's site frame (site.c): function, file and line
 *   function  a function's name (every function of the stack)
 *   stack     the whole stack, root first, each frame as a site is
 *
 * A frame is its name (function less clone suffixes, or module+offset when
 * unknown) with its file and line; with names set (the questions that
 * compare across runs and builds: diff, gdiff, check) file and line are
 * left out, so that a changed line number still matches (docs/api.md).
 * A trace's rows are worked out once (traces are shared by the moments and
 * runs counted), with its stack's content hash (hs__trace_hash): a row's
 * representative trace is the one holding most, ties going to the lower
 * hash, and rows that tie are ordered by their keys: no store's ids decide
 * what an answer holds or its order. */
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
}

void hs__group_free(hs__grouping *g)
{
    hs__smap_free(&g->keys);
    hs__map_free(&g->tidx);
    free(g->rows);
    free(g->ents);
    free(g->key.p);
    memset(g, 0, sizeof *g);
}

static int ent_push(hs__grouping *g, hs__gent e, hs_qerr *err)
{
    if (g->nents == g->capents) {
        size_t cap = g->capents ? g->capents * 2 : 4096;
        hs__gent *np = realloc(g->ents, cap * sizeof *np);
        if (!np) return hs__err(err, HS_ENOMEM, "out of memory");
        g->ents = np;
        g->capents = cap;
    }
    g->ents[g->nents++] = e;
    return 0;
}

/* Appends frame f's part of a key to g->key. */
static void key_frame(hs__grouping *g, const hs__frame *f)
{
    if (g->by == HS_GROUP_STACK && g->names) {
        hs__collapsed_put(&g->key, f->name); /* the key is the collapsed line */
        return;
    }
    hs_buf_put(&g->key, f->name, strlen(f->name));
    if (g->by == HS_GROUP_FUNCTION || g->names) return;
    hs_buf_printf(&g->key, "\x1f%s\x1f%010" PRId64, f->file, f->line);
}

/* The row of the key in g->key (named by f), its entry added to the
 * trace's list once a stack (the site's mark kept). */
static int key_row(hs__grouping *g, const hs__frame *f, int site, size_t start, uint64_t stamp,
                   hs_qerr *err)
{
    if (g->key.oom) return hs__err(err, HS_ENOMEM, "out of memory");
    int added;
    const char *stored;
    size_t i = hs__smap_put(&g->keys, g->key.p ? g->key.p : "", g->key.n, g->n, &added, &stored);
    if (i == (size_t)-1) return hs__err(err, HS_ENOMEM, "out of memory");
    if (added) {
        if (g->n == g->cap) {
            size_t cap = g->cap ? g->cap * 2 : 256;
            hs__grow *np = realloc(g->rows, cap * sizeof *np);
            if (!np) return hs__err(err, HS_ENOMEM, "out of memory");
            g->rows = np;
            g->cap = cap;
        }
        g->rows[g->n++] = (hs__grow){.key = stored, .frame = f, .seen = UINT64_MAX};
    }
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

/* The entries of trace's stack (frames: its d frame ids, leaf first; site
 * its site's index). By site, and by stack with file and line, only the
 * site's frame is read: a stack is then its trace, which its store holds
 * once for each sequence of frames (hs_qstore.h). */
static int stack_rows(hs__grouping *g, int64_t trace, const int64_t *frames, int d, int site,
                      size_t start, hs_qerr *err)
{
    uint64_t stamp = g->tidx.count;
    g->key.n = 0;
    if (d == 0) return g->empty ? key_row(g, NULL, 1, start, stamp, err) : 0;
    const hs__frame *fr[HS_MAX_DEPTH];
    int all = g->by == HS_GROUP_FUNCTION || (g->by == HS_GROUP_STACK && g->names);
    for (int k = all ? 0 : site; k < (all ? d : site + 1); k++)
        if (!(fr[k] = hs__frame_get(g->q, frames[k], err))) return HS_EDB;
    if (g->by == HS_GROUP_FUNCTION) {
        for (int k = 0; k < d; k++) {
            g->key.n = 0;
            key_frame(g, fr[k]);
            int rc = key_row(g, fr[k], k == site, start, stamp, err);
            if (rc) return rc;
        }
        return 0;
    }
    if (g->by == HS_GROUP_SITE || !g->names) key_frame(g, fr[site]);
    if (g->by == HS_GROUP_STACK && !g->names) hs_buf_printf(&g->key, "\x1d%" PRId64, trace);
    for (int j = d - 1; g->by == HS_GROUP_STACK && g->names && j >= 0; j--) {
        key_frame(g, fr[j]);
        if (j) hs_buf_put(&g->key, ";", 1);
    }
    return key_row(g, fr[site], 1, start, stamp, err);
}

int hs__group_trace(hs__grouping *g, int64_t trace, size_t *off, hs_qerr *err)
{
    uint64_t v;
    if (hs__map_get(&g->tidx, (uint64_t)trace, &v)) {
        *off = (size_t)v;
        return 0;
    }
    if (!g->all && hs__frames_full(g->q)) { /* the request's frames ran out: counted, not placed */
        *off = HS__GNONE;
        return 0;
    }
    int64_t frames[HS_MAX_DEPTH];
    int d = hs__stack(g->q, trace, frames, HS_MAX_DEPTH, err);
    if (d < 0) return d;
    int site = d ? hs__site_index(g->q, trace, frames, d, err) : 0;
    if (site < 0) return site;
    size_t head = g->nents;
    int rc = ent_push(g, (hs__gent){.row = 0}, err);
    if (!rc) rc = stack_rows(g, trace, frames, d, site, head + 1, err);
    if (rc) return rc;
    g->ents[head].row = g->nents - head - 1;
    if (hs__map_put(&g->tidx, (uint64_t)trace, head))
        return hs__err(err, HS_ENOMEM, "out of memory");
    *off = head;
    return 0;
}

/* 1 when trace a comes before trace b in content order (hs__trace_order);
 * 0 also when either cannot be read (the one kept stays). */
static int trace_before(hs_q *q, int64_t a, int64_t b)
{
    const hs__frame *sa, *sb;
    uint64_t ha, hb;
    hs_qerr e;
    if (hs__trace_content(q, a, &sa, &ha, &e) || hs__trace_content(q, b, &sb, &hb, &e)) return 0;
    return hs__trace_order(sa, ha, a, sb, hb, b) < 0;
}

void hs__group_offer(hs__grouping *g, size_t head, size_t j, int64_t trace, int64_t bytes)
{
    assert(j >= 1 && j <= g->ents[head].row);
    const hs__gent *e = &g->ents[head + j];
    hs__grow *r = &g->rows[e->row];
    if (r->trace && (bytes < r->trace_bytes || trace == r->trace ||
                     (bytes == r->trace_bytes && !trace_before(g->q, trace, r->trace))))
        return;
    r->trace = trace;
    r->trace_bytes = bytes;
    r->hashed = 0;
    if (e->frame) r->frame = e->frame;
}

/* Keys compared up to a stack's trace (after \x1d). */
static int key_cmp(const char *a, const char *b)
{
    while (*a && *a == *b && *a != '\x1d') a++, b++;
    int ea = *a == '\x1d' || !*a, eb = *b == '\x1d' || !*b;
    if (ea || eb) return ea && eb ? 0 : ea ? -1 : 1;
    return (unsigned char)*a < (unsigned char)*b ? -1 : 1;
}

int hs__group_cmp(hs__grouping *g, size_t a, size_t b)
{
    hs__grow *x = &g->rows[a], *y = &g->rows[b];
    int d = key_cmp(x->key, y->key);
    if (d || a == b) return d;
    /* by stack, rows that are traces: by their stacks' content */
    hs_qerr e;
    if (!x->hashed && !hs__trace_hash(g->q, x->trace, &x->hash, &e)) x->hashed = 1;
    if (!y->hashed && !hs__trace_hash(g->q, y->trace, &y->hash, &e)) y->hashed = 1;
    return hs__trace_order(NULL, x->hash, x->trace, NULL, y->hash, y->trace);
}

/* ---- ties in content order ------------------------------------------------- */

typedef struct tie_el {
    const hs__frame *site; /* NULL: an empty stack */
    uint64_t hash;
    int64_t trace;
    size_t at; /* index in the array being ordered */
} tie_el;

int hs__trace_order(const hs__frame *sa, uint64_t ha, int64_t ta, const hs__frame *sb, uint64_t hb,
                    int64_t tb)
{
    if (!sa || !sb) {
        if (sa || sb) return sa ? 1 : -1;
    } else {
        int d = hs__frame_cmp(sa, sb);
        if (d) return d;
    }
    if (ha != hb) return ha < hb ? -1 : 1;
    return (ta > tb) - (ta < tb);
}

static int cmp_tie(const void *a, const void *b)
{
    const tie_el *x = a, *y = b;
    return hs__trace_order(x->site, x->hash, x->trace, y->site, y->hash, y->trace);
}

int hs__trace_content(hs_q *q, int64_t trace, const hs__frame **site, uint64_t *hash, hs_qerr *err)
{
    int64_t sf;
    int rc = hs__site(q, trace, &sf, err);
    if (rc) return rc;
    *site = NULL;
    if (sf && !(*site = hs__frame_get(q, sf, err))) return HS_EDB;
    return hs__trace_hash(q, trace, hash, err);
}

/* Orders base[lo..hi) (elements of size sz that tie) by their traces'
 * content hashes; tmp holds hi - lo elements. */
static int ties_order(hs_q *q, char *base, size_t lo, size_t hi, size_t sz, size_t trace_off,
                      tie_el *el, char *tmp, hs_qerr *err)
{
    for (size_t i = lo; i < hi; i++) {
        tie_el *e = &el[i - lo];
        memcpy(&e->trace, base + i * sz + trace_off, sizeof e->trace);
        e->at = i;
        int rc = hs__trace_content(q, e->trace, &e->site, &e->hash, err);
        if (rc) return rc;
    }
    qsort(el, hi - lo, sizeof *el, cmp_tie);
    for (size_t i = lo; i < hi; i++) memcpy(tmp + (i - lo) * sz, base + el[i - lo].at * sz, sz);
    memcpy(base + lo * sz, tmp, (hi - lo) * sz);
    return 0;
}

int hs__ties_by_content(hs_q *q, void *base, size_t n, size_t sz, size_t weight_off,
                        size_t trace_off, size_t want, hs_qerr *err)
{
    char *b = base;
    tie_el *el = NULL;
    char *tmp = NULL;
    size_t cap = 0;
    int rc = 0;
    /* a request's frames bound its memory: past them, ties stay by id */
    for (size_t lo = 0, hi; !rc && lo < n && lo < want && !hs__frames_full(q); lo = hi) {
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
            if (!el || !tmp) rc = hs__err(err, HS_ENOMEM, "out of memory");
        }
        if (!rc) rc = ties_order(q, b, lo, hi, sz, trace_off, el, tmp, err);
    }
    free(el);
    free(tmp);
    return rc;
}

int hs__state_rank(hs_q *q, hs__state *s, size_t want, hs_qerr *err)
{
    hs__sort(s->rows, s->n, sizeof *s->rows, hs__cmp_live_bytes);
    return hs__ties_by_content(q, s->rows, s->n, sizeof *s->rows, offsetof(hs__live, bytes),
                               offsetof(hs__live, trace), want, err);
}

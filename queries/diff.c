/* diff: two moments of one run, or of two runs, matched by symbolized
 * stacks. Frames match by name only (function less clone suffixes, or
 * module+offset when the function is unknown), so a changed line number or
 * another build of the same program still matches; trace ids are not used
 * for matching. By site, a stack counts for its site (site.c). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hs_error.h"
#include "q_internal.h"

typedef struct drow {
    int64_t a_bytes, a_count, b_bytes, b_count;
    int64_t trace; /* a representative trace, for the stack */
    int side;      /* 0: a, 1: b (where the representative comes from) */
    size_t seen;   /* last stack counted, for by=function */
    const char *name;
} drow;

typedef struct dnode { /* differential flame node, children linked */
    const char *name;
    int64_t a_bytes, b_bytes;
    size_t first_child, next_sibling;
} dnode;

#define NONE ((size_t)-1)

typedef struct dctx {
    hs_q *q;
    hs_qerr *err;
    hs_group by;
    hs__smap keys;
    drow *rows;
    size_t n, cap;
    hs__smap tkeys; /* "parent\x1fname" -> flame node */
    dnode *t;
    size_t tn, tcap;
    hs__buf key;
    size_t stamp;
    size_t omitted; /* stacks left out when the request's frames ran out */
    int64_t omitted_bytes;
} dctx;

static size_t drow_get(dctx *c, const char *k, size_t len, const char *name)
{
    int added;
    size_t i = hs__smap_intern(&c->keys, k, len, c->n, &added);
    if (i == NONE) return NONE;
    if (added) {
        if (c->n == c->cap) {
            c->cap = c->cap ? c->cap * 2 : 256;
            drow *np = realloc(c->rows, c->cap * sizeof *np);
            if (!np) return NONE;
            c->rows = np;
        }
        c->rows[c->n++] = (drow){.seen = NONE, .name = name};
    }
    return i;
}

static size_t tnode_get(dctx *c, size_t parent, const char *name)
{
    char k[600];
    int n = snprintf(k, sizeof k, "%zu\x1f%s", parent, name);
    if (n < 0) return NONE;
    if ((size_t)n >= sizeof k) n = sizeof k - 1;
    int added;
    size_t i = hs__smap_intern(&c->tkeys, k, (size_t)n, c->tn, &added);
    if (i == NONE || !added) return i;
    if (c->tn == c->tcap) {
        c->tcap = c->tcap ? c->tcap * 2 : 1024;
        dnode *np = realloc(c->t, c->tcap * sizeof *np);
        if (!np) return NONE;
        c->t = np;
    }
    c->t[i] = (dnode){.name = name, .first_child = NONE, .next_sibling = NONE};
    c->tn++;
    if (parent != NONE) {
        c->t[i].next_sibling = c->t[parent].first_child;
        c->t[parent].first_child = i;
    }
    return i;
}

static int add_state(dctx *c, hs__state *s, int side)
{
    /* largest first: the stacks left when the frames a request may hold run
     * out are the smallest (the answer counts them) */
    hs__sort(s->rows, s->n, sizeof *s->rows, hs__cmp_live_bytes);
    for (size_t i = 0; i < s->n; i++) {
        const hs__live *lv = &s->rows[i];
        if (hs__frames_full(c->q)) {
            c->omitted++;
            c->omitted_bytes += lv->bytes;
            continue;
        }
        int64_t frames[HS_MAX_DEPTH];
        const hs__frame *fr[HS_MAX_DEPTH];
        int d = hs__stack(c->q, lv->trace, frames, HS_MAX_DEPTH, c->err);
        if (d < 0) return d;
        if (d == 0) continue;
        for (int k = 0; k < d; k++)
            if (!(fr[k] = hs__frame_get(c->q, frames[k], c->err))) return HS_EDB;
        c->stamp++;
        int site = hs__site_index(c->q, lv->trace, frames, d, c->err);
        if (site < 0) return site;
        int lo = c->by == HS_GROUP_SITE ? site : 0, hi = c->by == HS_GROUP_FUNCTION ? d : lo + 1;
        for (int k = lo; k < hi; k++) {
            c->key.n = 0;
            const char *name = fr[k]->name;
            if (c->by == HS_GROUP_STACK) { /* the whole stack, root first, named by its site */
                for (int j = d - 1; j >= 0; j--) {
                    hs__collapsed_put(&c->key, fr[j]->name);
                    if (j) hs__buf_put(&c->key, ";", 1);
                }
                name = fr[site]->name;
            } else {
                hs__buf_put(&c->key, name, strlen(name));
            }
            if (c->key.oom) return hs__err(c->err, HS_ENOMEM, "out of memory");
            size_t r = drow_get(c, c->key.p, c->key.n, name);
            if (r == NONE) return hs__err(c->err, HS_ENOMEM, "out of memory");
            drow *row = &c->rows[r];
            if (row->seen == c->stamp) continue;
            row->seen = c->stamp;
            if (side == 0) {
                row->a_bytes += lv->bytes;
                row->a_count += lv->count;
            } else {
                row->b_bytes += lv->bytes;
                row->b_count += lv->count;
            }
            if (!row->trace || (side == 1 && row->side == 0)) {
                row->trace = lv->trace;
                row->side = side;
            }
        }
        /* differential flame, root first */
        size_t node = 0;
        c->t[0].a_bytes += side == 0 ? lv->bytes : 0;
        c->t[0].b_bytes += side == 1 ? lv->bytes : 0;
        for (int j = d - 1; j >= 0; j--) {
            node = tnode_get(c, node, fr[j]->name);
            if (node == NONE) return hs__err(c->err, HS_ENOMEM, "out of memory");
            if (side == 0)
                c->t[node].a_bytes += lv->bytes;
            else
                c->t[node].b_bytes += lv->bytes;
        }
    }
    return 0;
}

static int cmp_delta(const void *x, const void *y)
{
    const drow *a = x, *b = y;
    int64_t da = llabs(a->b_bytes - a->a_bytes), db = llabs(b->b_bytes - b->a_bytes);
    if (da != db) return da < db ? 1 : -1;
    if (a->b_bytes != b->b_bytes) return a->b_bytes < b->b_bytes ? 1 : -1;
    return strcmp(a->name, b->name);
}

/* The differential flame holds the DFLAME_NODES widest nodes (by the larger
 * side) down to DFLAME_DEPTH, as the flame view does. */
#define DFLAME_NODES 5000
#define DFLAME_DEPTH 256

static int64_t dwidth(const dnode *n)
{
    return n->a_bytes > n->b_bytes ? n->a_bytes : n->b_bytes;
}

static json_t *dflame_json(dctx *c, size_t i, int depth, int64_t min_w, size_t *left, int *cut)
{
    dnode *n = &c->t[i];
    json_t *o = json_pack("{s:s,s:I,s:I,s:I}", "name", n->name, "a_bytes", (json_int_t)n->a_bytes,
                          "b_bytes", (json_int_t)n->b_bytes, "delta_bytes",
                          (json_int_t)(n->b_bytes - n->a_bytes));
    json_t *kids = json_array();
    for (size_t k = n->first_child; k != NONE; k = c->t[k].next_sibling) {
        if (!c->t[k].a_bytes && !c->t[k].b_bytes) continue;
        if (depth >= DFLAME_DEPTH || dwidth(&c->t[k]) < min_w || !*left) {
            *cut = 1;
            continue;
        }
        (*left)--;
        json_array_append_new(kids, dflame_json(c, k, depth + 1, min_w, left, cut));
    }
    json_object_set_new(o, "children", kids);
    return o;
}

static int side_parse(hs_q *q, const hs__params *p, const char *key, hs__run *run, hs__at *at,
                      hs__state *s, hs_qerr *err)
{
    const char *v = hs__param(p, key);
    if (!v) return hs__err(err, HS_EINVAL, "diff needs %s=RUN@T", key);
    hs_run_sel rs;
    hs_t_sel ts;
    hs_qerr sel;
    if (hs_sel_parse_at(&rs, &ts, v, HS_DIFF_AT, &sel))
        return hs__err(err, HS_EINVAL, "%s: %s", key, sel.msg);
    int rc = hs__run_resolve(q, &rs, run, err);
    if (!rc) rc = hs__at_resolve(q, run, &ts, at, err);
    if (!rc) rc = hs__state_at(q, run, at, s, err);
    return rc;
}

int hs__view_diff(hs_q *q, const hs__params *p, hs_api_reply *out, hs_qerr *err)
{
    hs__run ra = {0}, rb = {0};
    hs__at aa, ab;
    hs__state sa = {0}, sb = {0};
    dctx c = {.q = q, .err = err};
    json_t *rows = NULL;
    int64_t limit = HS_DIFF_LIMIT;
    int rc, max_frames, frames_cut = 0;
    const char *by = hs__param(p, "by");
    if (!by) by = "stack";
    if (hs_group_parse(by, &c.by))
        return hs__err(err, HS_EINVAL, "by must be stack, site or function (not '%s')", by);
    const char *ls = hs__param(p, "limit");
    if (ls) {
        char *end;
        limit = strtoll(ls, &end, 10);
        if (!*ls || *end || limit < 1 || limit > 1000000)
            return hs__err(err, HS_EINVAL, "limit must be an integer from 1 to 1000000");
    }
    if ((rc = hs__max_frames_param(p, &max_frames, err))) return rc;
    const char *format = hs__param(p, "format");
    if (format && strcmp(format, "json") && strcmp(format, "collapsed"))
        return hs__err(err, HS_EINVAL, "diff formats: json, collapsed (not '%s')", format);
    int collapsed = format && !strcmp(format, "collapsed");
    if (collapsed) c.by = HS_GROUP_STACK;
    if ((rc = side_parse(q, p, "a", &ra, &aa, &sa, err))) goto out;
    if ((rc = side_parse(q, p, "b", &rb, &ab, &sb, err))) goto out;
    if (tnode_get(&c, NONE, "all") == NONE) goto oom;
    if ((rc = add_state(&c, &sa, 0)) || (rc = add_state(&c, &sb, 1))) goto out;
    if (collapsed) {
        hs__buf b = {0};
        for (size_t i = 0; i < c.keys.cap; i++) {
            if (!c.keys.keys[i]) continue;
            drow *r = &c.rows[c.keys.vals[i]];
            hs__buf_printf(&b, "%s %" PRId64 " %" PRId64 "\n", c.keys.keys[i], r->a_bytes,
                           r->b_bytes);
        }
        if (b.oom || !b.p) {
            free(b.p);
            if (b.oom) goto oom;
            b.p = strdup("");
        }
        out->status = 200;
        out->content_type = "text/plain; charset=utf-8";
        out->body = b.p;
        out->len = b.n;
        out->filename = "diff.folded";
        rc = 0;
        goto out;
    }
    hs__sort(c.rows, c.n, sizeof *c.rows, cmp_delta);
    rows = json_array();
    for (size_t i = 0; i < c.n && (int64_t)i < limit; i++) {
        drow *r = &c.rows[i];
        if (r->a_bytes == r->b_bytes && r->a_count == r->b_count) continue;
        json_t *row = json_pack("{s:s,s:I,s:I,s:I,s:I,s:I,s:I}", "name", r->name, "a_bytes",
                                (json_int_t)r->a_bytes, "b_bytes", (json_int_t)r->b_bytes,
                                "delta_bytes", (json_int_t)(r->b_bytes - r->a_bytes), "a_count",
                                (json_int_t)r->a_count, "b_count", (json_int_t)r->b_count,
                                "delta_count", (json_int_t)(r->b_count - r->a_count));
        if (!row) goto oom;
        if (c.by != HS_GROUP_FUNCTION &&
            (rc = hs__row_stack(q, row, r->trace, max_frames, &frames_cut, err))) {
            json_decref(row);
            goto out;
        }
        json_array_append_new(rows, row);
    }
    int64_t min_w = 1;
    if (c.tn > DFLAME_NODES + 1) { /* the width of the DFLAME_NODES-th widest */
        int64_t *w = malloc(c.tn * sizeof *w);
        if (!w) goto oom;
        for (size_t i = 1; i < c.tn; i++) w[i - 1] = dwidth(&c.t[i]);
        min_w = hs__kth_largest(w, c.tn - 1, DFLAME_NODES);
        if (min_w < 1) min_w = 1;
        free(w);
    }
    size_t left = DFLAME_NODES;
    int flame_cut = 0;
    json_t *flame = dflame_json(&c, 0, 0, min_w, &left, &flame_cut);
    json_t *cut = json_null();
    if (flame_cut || frames_cut || c.omitted)
        cut = json_pack("{s:b,s:o,s:I,s:I}", "flame", flame_cut, "max_frames",
                        frames_cut ? json_integer(max_frames) : json_null(), "stacks",
                        (json_int_t)c.omitted, "stacks_bytes", (json_int_t)c.omitted_bytes);
    char t1[32], t2[32];
    out->json =
        json_pack("{s:{s:O,s:s,s:I,s:I},s:{s:O,s:s,s:I,s:I},s:s,s:o,s:o,s:o,s:{s:O,s:O}}", "a",
                  "run", ra.info, "at", hs__at_name(&aa, t1, sizeof t1), "at_ns",
                  (json_int_t)aa.at_ns, "total_bytes", (json_int_t)sa.total_bytes, "b", "run",
                  rb.info, "at", hs__at_name(&ab, t2, sizeof t2), "at_ns", (json_int_t)ab.at_ns,
                  "total_bytes", (json_int_t)sb.total_bytes, "by", by, "rows", rows, "flame", flame,
                  "truncated", cut, "sampling", "a", ra.sampling, "b", rb.sampling);
    rows = NULL;
    if (!out->json) goto oom;
    out->status = 200;
    out->content_type = "application/json";
    rc = 0;
    goto out;
oom:
    rc = hs__err(err, HS_ENOMEM, "out of memory");
out:
    json_decref(rows);
    hs__smap_free(&c.keys);
    hs__smap_free(&c.tkeys);
    free(c.rows);
    free(c.t);
    free(c.key.p);
    hs__state_clear(&sa);
    hs__state_clear(&sb);
    hs__run_clear(&ra);
    hs__run_clear(&rb);
    return rc;
}

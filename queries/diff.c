/* diff: two moments of one run, or of two runs, matched by symbolized
 * stacks: the grouping engine's rows (group.c) with frames matched by name
 * only (function less clone suffixes, or module+offset when the function
 * is unknown), so a changed line number or another build of the same
 * program still matches; trace ids are not used for matching. By site, a
 * stack counts for its site (site.c). */
#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hs_error.h"
#include "q_internal.h"

/* A row's figures, beside the grouping's row of the same index. */
typedef struct drow {
    int64_t a_bytes, a_count, b_bytes, b_count;
    int side;        /* where the representative comes from: 0 a, 1 b (preferred) */
    const char *key; /* the row's content key */
    size_t row;      /* its index in the grouping */
    const char *name;
} drow;

typedef struct dnode { /* differential flame node, children linked */
    const char *name;
    int64_t a_bytes, b_bytes;
    size_t parent, first_child, next_sibling;
} dnode;

#define NONE ((size_t)-1)

typedef struct dctx {
    hs_q *q;
    hs_qerr *err;
    hs__grouping g;
    drow *rows; /* per grouping row */
    size_t cap;
    hs__smap tkeys; /* "parent\x1fname" -> flame node */
    dnode *t;
    size_t tn, tcap;
    hs__map traces; /* trace -> its index in tr, once placed */
    struct dtrace {
        size_t head; /* its entries in the grouping */
        size_t leaf; /* its flame leaf (NONE: an empty stack) */
    } * tr;
    size_t ntr, captr;
    size_t omitted; /* stacks left out when the request's frames ran out */
    int64_t omitted_bytes;
} dctx;

/* "PARENT\x1fNAME" into k (len bytes), cut to len - 1 bytes as snprintf
 * would cut it; its length. Made by hand: a diff makes one a node of
 * every new stack, and snprintf cost more than the rest of the lookup. */
static size_t tnode_key(char *k, size_t len, size_t parent, const char *name)
{
    char digits[24];
    size_t nd = 0, n = 0;
    assert(len > 24);
    do digits[nd++] = (char)('0' + parent % 10);
    while ((parent /= 10));
    while (nd) k[n++] = digits[--nd];
    k[n++] = '\x1f';
    size_t l = strnlen(name, len - 1 - n);
    memcpy(k + n, name, l);
    n += l;
    k[n] = '\0';
    return n;
}

static size_t tnode_get(dctx *c, size_t parent, const char *name)
{
    char k[600];
    size_t n = tnode_key(k, sizeof k, parent, name);
    int added;
    size_t i = hs__smap_intern(&c->tkeys, k, n, c->tn, &added);
    if (i == NONE || !added) return i;
    if (c->tn == c->tcap) {
        c->tcap = c->tcap ? c->tcap * 2 : 1024;
        dnode *np = realloc(c->t, c->tcap * sizeof *np);
        if (!np) return NONE;
        c->t = np;
    }
    c->t[i] = (dnode){.name = name, .parent = parent, .first_child = NONE, .next_sibling = NONE};
    c->tn++;
    if (parent != NONE) {
        c->t[i].next_sibling = c->t[parent].first_child;
        c->t[parent].first_child = i;
    }
    return i;
}

/* Counts live trace lv of side for its rows (head: its entries). */
static int add_rows(dctx *c, const hs__live *lv, size_t head, int side)
{
    if (c->g.n > c->cap) {
        size_t cap = c->g.n * 2;
        drow *np = realloc(c->rows, cap * sizeof *np);
        if (!np) return hs__err(c->err, HS_ENOMEM, "out of memory");
        memset(np + c->cap, 0, (cap - c->cap) * sizeof *np);
        c->rows = np;
        c->cap = cap;
    }
    for (size_t j = 1; j <= c->g.ents[head].row; j++) {
        size_t ri = c->g.ents[head + j].row;
        drow *row = &c->rows[ri];
        if (side == 0) {
            row->a_bytes += lv->bytes;
            row->a_count += lv->count;
        } else {
            row->b_bytes += lv->bytes;
            row->b_count += lv->count;
        }
        if (side == 1 && row->side == 0) { /* b's stacks name a row that b holds */
            c->g.rows[ri].trace = 0;
            row->side = 1;
        }
        hs__group_offer(&c->g, head, j, lv->trace, lv->bytes);
    }
    return 0;
}

/* Keeps trace's head and leaf, by its index in c->tr. */
static int trace_keep(dctx *c, int64_t trace, size_t head, size_t leaf)
{
    if (c->ntr == c->captr) {
        size_t cap = c->captr ? c->captr * 2 : 1024;
        struct dtrace *np = realloc(c->tr, cap * sizeof *np);
        if (!np) return hs__err(c->err, HS_ENOMEM, "out of memory");
        c->tr = np;
        c->captr = cap;
    }
    c->tr[c->ntr] = (struct dtrace){head, leaf};
    if (hs__map_put(&c->traces, (uint64_t)trace, c->ntr++))
        return hs__err(c->err, HS_ENOMEM, "out of memory");
    return 0;
}

/* Trace's entries (*head) and flame leaf (*leaf, NONE: an empty stack).
 * Its stack is read once, the first time it is met, for both; *head is
 * NONE when the request's frames had run out by then (the trace is
 * counted as left out). */
static int diff_trace(dctx *c, int64_t trace, size_t *head, size_t *leaf)
{
    uint64_t v;
    if (hs__map_get(&c->traces, (uint64_t)trace, &v)) {
        *head = c->tr[v].head;
        *leaf = c->tr[v].leaf;
        return 0;
    }
    *head = HS__GNONE;
    if (hs__frames_full(c->q)) return 0;
    int64_t frames[HS_MAX_DEPTH];
    const hs__frame *fr[HS_MAX_DEPTH];
    int d = hs__stack(c->q, trace, frames, HS_MAX_DEPTH, c->err);
    if (d < 0) return d;
    for (int k = 0; k < d; k++)
        if (!(fr[k] = hs__frame_get(c->q, frames[k], c->err))) return HS_EDB;
    int rc = hs__group_stack(&c->g, trace, frames, fr, d, head, c->err);
    if (rc) return rc;
    assert(*head != HS__GNONE);
    size_t node = 0; /* the differential flame's path, root first */
    for (int j = d - 1; j >= 0 && node != NONE; j--) node = tnode_get(c, node, fr[j]->name);
    if (d && node == NONE) return hs__err(c->err, HS_ENOMEM, "out of memory");
    *leaf = d ? node : NONE;
    return trace_keep(c, trace, *head, *leaf);
}

static int add_state(dctx *c, hs__state *s, int side)
{
    /* largest first: the stacks left when the frames a request may hold run
     * out are the smallest (the answer counts them) */
    hs__sort(s->rows, s->n, sizeof *s->rows, hs__cmp_live_bytes);
    int rc = 0;
    for (size_t i = 0; !rc && i < s->n; i++) {
        const hs__live *lv = &s->rows[i];
        size_t head, leaf;
        if ((rc = diff_trace(c, lv->trace, &head, &leaf))) return rc;
        if (head == HS__GNONE) {
            c->omitted++;
            c->omitted_bytes += lv->bytes;
            continue;
        }
        if ((rc = add_rows(c, lv, head, side))) return rc;
        if (leaf == NONE) continue;
        /* the differential flame: the leaf's path up to the root, and it */
        for (size_t node = leaf;; node = c->t[node].parent) {
            if (side == 0)
                c->t[node].a_bytes += lv->bytes;
            else
                c->t[node].b_bytes += lv->bytes;
            if (!node) break;
        }
    }
    return rc;
}

static int cmp_delta(const void *x, const void *y)
{
    const drow *a = x, *b = y;
    int64_t da = llabs(a->b_bytes - a->a_bytes), db = llabs(b->b_bytes - b->a_bytes);
    if (da != db) return da < db ? 1 : -1;
    if (a->b_bytes != b->b_bytes) return a->b_bytes < b->b_bytes ? 1 : -1;
    int d = strcmp(a->name, b->name);
    return d ? d : strcmp(a->key, b->key);
}

static int cmp_key(const void *x, const void *y)
{
    const drow *a = x, *b = y;
    return strcmp(a->key, b->key);
}

/* The differential flame holds the DFLAME_NODES widest nodes (by the larger
 * side) down to DFLAME_DEPTH, as the flame view does. */
#define DFLAME_NODES 5000
#define DFLAME_DEPTH 256

static int64_t dwidth(const dnode *n)
{
    return n->a_bytes > n->b_bytes ? n->a_bytes : n->b_bytes;
}

/* Children widest first (by the larger side), then by name: an order of
 * their content, whatever order the stacks were met in. */
static int cmp_dnode(const void *x, const void *y, void *data)
{
    const dctx *c = data;
    const dnode *a = &c->t[*(const size_t *)x], *b = &c->t[*(const size_t *)y];
    int64_t wa = dwidth(a), wb = dwidth(b);
    if (wa != wb) return wa < wb ? 1 : -1;
    return strcmp(a->name, b->name);
}

/* The differential flame's node i and, widest first, its children, depth
 * first into out->flame. */
typedef struct dflame_out {
    dctx *c;
    hs_diff_result *r;
    size_t cap, left;
    int64_t min_w;
} dflame_out;

static int dflame_walk(dflame_out *o, size_t i, int depth)
{
    dctx *c = o->c;
    hs_diff_result *r = o->r;
    if (r->nflame == o->cap) {
        size_t ncap = o->cap ? o->cap * 2 : 256;
        hs_dflame_node *np = realloc(r->flame, ncap * sizeof *np);
        if (!np) return hs__err(c->err, HS_ENOMEM, "out of memory");
        r->flame = np;
        o->cap = ncap;
    }
    size_t me = r->nflame++, nk = 0, *kids;
    r->flame[me] = (hs_dflame_node){
        .name = c->t[i].name, .a_bytes = c->t[i].a_bytes, .b_bytes = c->t[i].b_bytes};
    for (size_t k = c->t[i].first_child; k != NONE; k = c->t[k].next_sibling) nk++;
    if (!(kids = malloc((nk ? nk : 1) * sizeof *kids)))
        return hs__err(c->err, HS_ENOMEM, "out of memory");
    nk = 0;
    for (size_t k = c->t[i].first_child; k != NONE; k = c->t[k].next_sibling) kids[nk++] = k;
    if (nk > 1) qsort_r(kids, nk, sizeof *kids, cmp_dnode, c);
    int rc = 0;
    for (size_t j = 0; !rc && j < nk; j++) {
        size_t k = kids[j];
        if (!c->t[k].a_bytes && !c->t[k].b_bytes) continue;
        if (depth >= DFLAME_DEPTH || dwidth(&c->t[k]) < o->min_w || !o->left) {
            r->flame_cut = 1;
            continue;
        }
        o->left--;
        if (!(rc = dflame_walk(o, k, depth + 1))) r->flame[me].nchildren++;
    }
    free(kids);
    return rc;
}

/* The differential flame: its DFLAME_NODES widest nodes. */
static int dflame(dctx *c, hs_diff_result *r)
{
    int64_t min_w = 1;
    if (c->tn > DFLAME_NODES + 1) { /* the width of the DFLAME_NODES-th widest */
        int64_t *w = malloc(c->tn * sizeof *w);
        if (!w) return hs__err(c->err, HS_ENOMEM, "out of memory");
        for (size_t i = 1; i < c->tn; i++) w[i - 1] = dwidth(&c->t[i]);
        min_w = hs__kth_largest(w, c->tn - 1, DFLAME_NODES);
        if (min_w < 1) min_w = 1;
        free(w);
    }
    dflame_out o = {.c = c, .r = r, .left = DFLAME_NODES, .min_w = min_w};
    return dflame_walk(&o, 0, 0);
}

/* "stack A_BYTES B_BYTES" lines (a row's key by stack and names is its
 * collapsed stack), in the stacks' order. */
static int diff_collapsed(dctx *c, hs_diff_result *r)
{
    hs_buf b = {0};
    hs__sort(c->rows, c->g.n, sizeof *c->rows, cmp_key);
    for (size_t i = 0; i < c->g.n; i++) {
        drow *w = &c->rows[i];
        hs_buf_printf(&b, "%s %" PRId64 " %" PRId64 "\n", w->key, w->a_bytes, w->b_bytes);
    }
    if (b.oom || !b.p) {
        free(b.p);
        if (b.oom) return hs__err(c->err, HS_ENOMEM, "out of memory");
        b.p = strdup("");
        if (!b.p) return hs__err(c->err, HS_ENOMEM, "out of memory");
    }
    r->collapsed = b.p;
    r->collapsed_len = b.n;
    return 0;
}

/* The rows that changed among the limit largest changes, with stacks. */
static int diff_rows(dctx *c, const hs_diff_params *p, hs_diff_result *r)
{
    hs__sort(c->rows, c->g.n, sizeof *c->rows, cmp_delta);
    size_t n = c->g.n < (size_t)p->limit ? c->g.n : (size_t)p->limit;
    size_t *shown = malloc((n ? n : 1) * sizeof *shown);
    if (!shown || !(r->rows = calloc(n ? n : 1, sizeof *r->rows))) {
        free(shown);
        return hs__err(c->err, HS_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++) shown[i] = c->rows[i].row;
    int rc = hs__group_settle(&c->g, shown, n, c->err); /* their stacks */
    free(shown);
    if (rc) return rc;
    for (size_t i = 0; i < n; i++) {
        drow *w = &c->rows[i];
        if (w->a_bytes == w->b_bytes && w->a_count == w->b_count) continue;
        hs_diff_row *row = &r->rows[r->nrows++];
        *row = (hs_diff_row){.name = w->name,
                             .trace = c->g.rows[w->row].trace,
                             .a_bytes = w->a_bytes,
                             .a_count = w->a_count,
                             .b_bytes = w->b_bytes,
                             .b_count = w->b_count};
        if (c->g.by == HS_GROUP_FUNCTION) continue;
        rc = hs__qstack(c->q, row->trace, p->max_frames, &row->stack, c->err);
        if (rc) return rc;
        if (row->stack.depth > row->stack.n) r->frames_cut = 1;
    }
    return 0;
}

void hs_diff_params_init(hs_diff_params *p)
{
    memset(p, 0, sizeof *p);
    p->by = HS_GROUP_STACK;
    p->limit = HS_DIFF_LIMIT;
    p->max_frames = HS_STACK_FRAMES;
    p->site.mode = HS_SITE_USER;
}

/* a= or b=: RUN@T, T "end" when not given. */
static int diff_side_param(hs_diff_side_sel *s, const char *key, const char *value, hs_qerr *err)
{
    hs_qerr sel;
    if (hs_sel_parse_at(&s->run, &s->at, value, HS_DIFF_AT, &sel))
        return hs__err(err, HS_EINVAL, "%s: %s", key, sel.msg);
    s->given = 1;
    s->text = value;
    return 0;
}

int hs_diff_param(hs_diff_params *p, const char *key, const char *value, hs_qerr *err)
{
    if (!strcmp(key, "a")) return diff_side_param(&p->a, key, value, err);
    if (!strcmp(key, "b")) return diff_side_param(&p->b, key, value, err);
    if (!strcmp(key, "by")) {
        if (hs_group_parse(value, &p->by))
            return hs__err(err, HS_EINVAL, "by must be stack, site or function (not '%s')", value);
        return 0;
    }
    if (!strcmp(key, "limit")) {
        char *end;
        long long v = strtoll(value, &end, 10);
        if (!*value || *end || v < 1 || v > 1000000)
            return hs__err(err, HS_EINVAL, "limit must be an integer from 1 to 1000000");
        p->limit = v;
        return 0;
    }
    if (!strcmp(key, "format")) {
        if (strcmp(value, "json") && strcmp(value, "collapsed"))
            return hs__err(err, HS_EINVAL, "diff formats: json, collapsed (not '%s')", value);
        p->collapsed = !strcmp(value, "collapsed");
        return 0;
    }
    return hs__rows_param(key, value, 1000000, &p->limit, &p->max_frames, &p->site, err);
}

int hs_diff_b_check(hs_q *q, const hs_diff_params *p, hs_qerr *err, int rc)
{
    if (!p->a.given) return hs__err(err, HS_EINVAL, "diff needs a=RUN@T");
    hs__run run;
    hs__at at;
    hs_qerr e2;
    int arc = hs__run_resolve(q, &p->a.run, &run, &e2);
    if (!arc) arc = hs__at_resolve(q, &run, &p->a.at, &at, &e2);
    hs__run_clear(&run);
    if (!arc) return rc;
    *err = e2;
    return arc;
}

/* One side: its run, moment and state, into the context's stacks. */
static int diff_side(dctx *c, const hs_diff_side_sel *sel, const char *key, int side,
                     hs_diff_side *out, hs__run *run)
{
    if (!sel->given) return hs__err(c->err, HS_EINVAL, "diff needs %s=RUN@T", key);
    hs__at at;
    hs__state s = {0};
    int rc = hs__run_resolve(c->q, &sel->run, run, c->err);
    if (!rc) rc = hs__at_resolve(c->q, run, &sel->at, &at, c->err);
    if (!rc) rc = hs__state_at(c->q, run, &at, &s, c->err);
    if (rc) return rc;
    hs__run_brief(&out->run, run);
    char tb[32];
    snprintf(out->at, sizeof out->at, "%s", hs__at_name(&at, tb, sizeof tb));
    out->at_ns = at.at_ns;
    out->total_bytes = s.total_bytes;
    rc = add_state(c, &s, side);
    hs__state_clear(&s);
    return rc;
}

int hs_core_diff(hs_q *q, const hs_diff_params *p, hs_diff_result *out, hs_qerr *err)
{
    memset(out, 0, sizeof *out);
    hs__run *runs = calloc(2, sizeof *runs);
    if (!runs) return hs__err(err, HS_ENOMEM, "out of memory");
    out->own = runs;
    dctx c = {.q = q, .err = err};
    hs__group_init(&c.g, q, p->collapsed ? HS_GROUP_STACK : p->by,
                   HS__GROUP_NAMES | HS__GROUP_KEPT); /* diff_trace keeps the heads */
    out->by = p->by;
    out->max_frames = p->max_frames;
    int rc = hs__site_apply(q, &p->site, err);
    if (!rc && tnode_get(&c, NONE, "all") == NONE) rc = hs__err(err, HS_ENOMEM, "out of memory");
    if (!rc) rc = diff_side(&c, &p->a, "a", 0, &out->a, &runs[0]);
    if (!rc) rc = diff_side(&c, &p->b, "b", 1, &out->b, &runs[1]);
    for (size_t i = 0; !rc && i < c.g.n; i++) {
        c.rows[i].key = c.g.rows[i].key;
        c.rows[i].name = c.g.rows[i].frame->name;
        c.rows[i].row = i;
    }
    if (!rc && p->collapsed) rc = diff_collapsed(&c, out);
    if (!rc && !p->collapsed && !(rc = diff_rows(&c, p, out))) rc = dflame(&c, out);
    out->stacks_omitted = (int64_t)c.omitted;
    out->stacks_bytes = c.omitted_bytes;
    hs__group_free(&c.g);
    hs__smap_free(&c.tkeys);
    hs__map_free(&c.traces);
    free(c.tr);
    free(c.rows);
    free(c.t);
    if (rc) hs_diff_result_clear(out);
    return rc;
}

void hs_diff_result_clear(hs_diff_result *r)
{
    for (size_t i = 0; i < r->nrows; i++) free(r->rows[i].stack.frames);
    free(r->rows);
    free(r->flame);
    free(r->collapsed);
    hs__run *runs = r->own;
    if (runs) {
        hs__run_clear(&runs[0]);
        hs__run_clear(&runs[1]);
    }
    free(runs);
    hs__held_release(&r->held);
    memset(r, 0, sizeof *r);
}

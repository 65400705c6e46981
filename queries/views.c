/* views: flame, a moment's state as a tree of stacks, as a typed result
 * (hs_core.h). Each view reads the state of a run at a moment (q.c) and
 * aggregates it in memory: the cost grows with the number of live stacks,
 * not with the number of events. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hs_error.h"
#include "q_internal.h"

/* ---- flame ---------------------------------------------------------------- */

/* The flame tree of one run is a subtree of the traces prefix tree: its nodes
 * are trace nodes, so nothing needs merging by name. Index 0 is the root.
 *
 * Bounds (docs/api.md, "truncated"): the tree is built from the largest
 * stacks down while it has fewer than FLAME_BUILD_NODES nodes (about 64 B a
 * node, plus its map slot), frames deeper than max_depth are not built, and
 * the answer holds at most max_nodes nodes, the widest, and about
 * FLAME_ANSWER_BYTES of JSON. A crafted run of 1,000 stacks of 1,024
 * distinct frames once answered 158 MB and took the server to 3 GB. */
#define NONE               ((size_t)-1)
#define FLAME_BUILD_NODES  (512u << 10)
#define FLAME_MAX_DEPTH    HS_FLAME_MAX_DEPTH
#define FLAME_MAX_NODES    HS_FLAME_MAX_NODES
#define FLAME_NODES_LIMIT  100000
#define FLAME_ANSWER_BYTES (8u << 20)

int hs__flame_build(hs_q *q, hs__state *s, int max_depth, size_t max_nodes, hs__flame *f,
                    hs_qerr *err)
{
    memset(f, 0, sizeof *f);
    f->cap = 1024;
    if (!(f->n = malloc(f->cap * sizeof *f->n))) return hs__err(err, HS_ENOMEM, "out of memory");
    f->n[0] = (hs__fnode){.first_child = NONE, .next_sibling = NONE};
    f->n[0].bytes = s->total_bytes;
    f->n[0].count = s->total_count;
    f->len = 1;
    hs__sort(s->rows, s->n, sizeof *s->rows, hs__cmp_live_bytes);
    for (size_t i = 0; i < s->n; i++) {
        const hs__live *lv = &s->rows[i];
        if (f->len >= max_nodes) { /* the rest are smaller: counted, not drawn */
            f->stacks_omitted++;
            f->omitted_bytes += lv->bytes;
            f->omitted_count += lv->count;
            continue;
        }
        int64_t node = lv->trace;
        size_t prev = NONE;
        int prev_new = 0, first = 1;
        while (node) {
            uint64_t ix;
            int known = hs__map_get(&f->idx, (uint64_t)node, &ix);
            if (!known) {
                int64_t parent, frame;
                int depth;
                if (hs__node(q, node, &parent, &frame, &depth, err)) return HS_EDB;
                if (depth > max_depth) { /* below the deepest row drawn */
                    f->depth_cut = 1;
                    first = 0;
                    if (parent == node) break; /* defensive */
                    node = parent;
                    continue;
                }
                if (f->len == f->cap) {
                    f->cap *= 2;
                    hs__fnode *np = realloc(f->n, f->cap * sizeof *np);
                    if (!np) return hs__err(err, HS_ENOMEM, "out of memory");
                    f->n = np;
                }
                ix = f->len++;
                f->n[ix] = (hs__fnode){.frame = frame,
                                       .parent_node = parent,
                                       .first_child = NONE,
                                       .next_sibling = NONE};
                if (hs__map_put(&f->idx, (uint64_t)node, ix))
                    return hs__err(err, HS_ENOMEM, "out of memory");
            }
            hs__fnode *fn = &f->n[ix];
            fn->bytes += lv->bytes;
            fn->count += lv->count;
            if (first) {
                fn->self_bytes += lv->bytes;
                fn->self_count += lv->count;
                first = 0;
            }
            if (prev_new) {
                f->n[prev].next_sibling = fn->first_child;
                fn->first_child = prev;
            }
            prev = ix;
            prev_new = !known;
            if (fn->parent_node == node) break; /* defensive */
            node = fn->parent_node;
        }
        if (prev_new) {
            f->n[prev].next_sibling = f->n[0].first_child;
            f->n[0].first_child = prev;
        }
    }
    return 0;
}

void hs__flame_free(hs__flame *f)
{
    free(f->n);
    hs__map_free(&f->idx);
    memset(f, 0, sizeof *f);
}

/* The answer's nodes, depth first, as the tree is walked from the root. */
typedef struct flame_out {
    hs_q *q;
    const hs__flame *f;
    hs_flame_result *r;
    size_t cap;
    int64_t min_bytes;  /* nodes narrower are left out */
    size_t left, shown; /* nodes the answer may still hold; nodes it holds */
    size_t bytes;       /* the answer's JSON so far, about */
    int bytes_cut;      /* stopped at FLAME_ANSWER_BYTES */
    hs_qerr *err;
} flame_out;

static int flame_visible(const flame_out *o, size_t c)
{
    return o->f->n[c].bytes >= o->min_bytes && o->f->n[c].bytes > 0;
}

/* Appends tree node ix to the answer (frames lent from the frame cache). */
static int flame_put(flame_out *o, size_t ix)
{
    const hs__fnode *n = &o->f->n[ix];
    hs_flame_result *r = o->r;
    if (r->nnodes == o->cap) {
        size_t ncap = o->cap ? o->cap * 2 : 256;
        hs_flame_node *np = realloc(r->nodes, ncap * sizeof *np);
        if (!np) return hs__err(o->err, HS_ENOMEM, "out of memory");
        r->nodes = np;
        o->cap = ncap;
    }
    hs_flame_node *fn = &r->nodes[r->nnodes];
    *fn = (hs_flame_node){.bytes = n->bytes, .count = n->count};
    if (ix == 0) {
        fn->frame = (hs_qframe){.name = "all", .file = "", .module = ""};
        fn->label = "all";
    } else {
        const hs__frame *fr = hs__frame_get(o->q, n->frame, o->err);
        if (!fr) return HS_EDB;
        fn->frame =
            (hs_qframe){.name = fr->name, .file = fr->file, .module = fr->module, .line = fr->line};
        fn->label = fr->label;
        fn->self_bytes = n->self_bytes;
        o->bytes +=
            120 + strlen(fr->label) + strlen(fr->name) + strlen(fr->file) + strlen(fr->module);
    }
    r->nnodes++;
    o->shown++;
    return 0;
}

/* 1 when node x's frame comes before node y's in content order
 * (hs__frame_cmp): how nodes as wide are ordered, so that no store's ids
 * order a tie. */
static int tie_before(const flame_out *o, const hs__fnode *x, const hs__fnode *y)
{
    hs_qerr e;
    const hs__frame *fa = hs__frame_get(o->q, x->frame, &e),
                    *fb = hs__frame_get(o->q, y->frame, &e);
    return fa && fb && hs__frame_cmp(fa, fb) < 0;
}

/* Node ix and, widest first, its children while the answer may hold more. */
static int flame_walk(flame_out *o, size_t ix)
{
    const hs__flame *f = o->f;
    size_t me = o->r->nnodes, *order = NULL, nk = 0;
    int rc = flame_put(o, ix);
    if (rc) return rc;
    for (size_t c = f->n[ix].first_child; c != NONE; c = f->n[c].next_sibling)
        nk += flame_visible(o, c);
    if (!(order = malloc((nk ? nk : 1) * sizeof *order)))
        return hs__err(o->err, HS_ENOMEM, "out of memory");
    nk = 0;
    for (size_t c = f->n[ix].first_child; c != NONE; c = f->n[c].next_sibling)
        if (flame_visible(o, c)) order[nk++] = c;
    /* widest first, then as tie_before orders them: an insertion sort
     * (most nodes have few children) */
    for (size_t a = 1; a < nk; a++) {
        size_t v = order[a], b = a;
        const hs__fnode *x = &f->n[v];
        int64_t w = x->bytes;
        for (; b > 0; b--) {
            const hs__fnode *y = &f->n[order[b - 1]];
            if (w < y->bytes || (w == y->bytes && !tie_before(o, x, y))) break;
            order[b] = order[b - 1];
        }
        order[b] = v;
    }
    for (size_t k = 0; !rc && k < nk && o->left > 0; k++) {
        if (o->bytes >= FLAME_ANSWER_BYTES) {
            o->bytes_cut = 1;
            break;
        }
        o->left--;
        if (!(rc = flame_walk(o, order[k]))) o->r->nodes[me].nchildren++;
    }
    free(order);
    return rc;
}

/* The narrowest node the answer can hold: min_bytes, or the width of the
 * max_nodes-th widest node when more are at least min_bytes wide. A node is
 * never wider than its parent, so the nodes at least that wide form a tree. */
static int64_t flame_threshold(const hs__flame *f, int64_t min_bytes, size_t max_nodes)
{
    size_t n = 0;
    for (size_t i = 1; i < f->len; i++) n += f->n[i].bytes >= min_bytes && f->n[i].bytes > 0;
    if (n <= max_nodes) return min_bytes;
    int64_t *w = malloc(n * sizeof *w);
    if (!w) return INT64_MAX; /* only the root, rather than fail */
    n = 0;
    for (size_t i = 1; i < f->len; i++)
        if (f->n[i].bytes >= min_bytes && f->n[i].bytes > 0) w[n++] = f->n[i].bytes;
    int64_t t = hs__kth_largest(w, n, max_nodes);
    /* ties at t may still pass max_nodes: the walk stops there */
    free(w);
    return t > min_bytes ? t : min_bytes;
}

void hs_flame_params_init(hs_flame_params *p)
{
    memset(p, 0, sizeof *p);
    p->at.kind = HS_TSEL_PEAK;
    p->max_nodes = FLAME_MAX_NODES;
    p->max_depth = FLAME_MAX_DEPTH;
}

int hs_flame_param(hs_flame_params *p, const char *key, const char *value, hs_qerr *err)
{
    if (!strcmp(key, "at")) return hs_sel_parse_t(&p->at, value, err);
    if (!strcmp(key, "max_nodes"))
        return hs__int_text(key, value, 1, FLAME_NODES_LIMIT, &p->max_nodes, err);
    if (!strcmp(key, "max_depth"))
        return hs__int_text(key, value, 1, HS_MAX_DEPTH, &p->max_depth, err);
    if (strcmp(key, "min_share")) return 0;
    char *end;
    p->min_share = strtod(value, &end);
    if (!*value || *end || !(p->min_share >= 0 && p->min_share <= 1))
        return hs__err(err, HS_EINVAL, "min_share must be a number from 0 to 1 (not '%s')", value);
    return 0;
}

/* The tree's nodes into out, and what they left out. */
static int flame_answer(hs_q *q, const hs_flame_params *p, hs__flame *f, int64_t total,
                        hs_flame_result *out, hs_qerr *err)
{
    int64_t min_bytes = (int64_t)(p->min_share * (double)total);
    flame_out o = {.q = q,
                   .f = f,
                   .r = out,
                   .min_bytes = flame_threshold(f, min_bytes, (size_t)p->max_nodes),
                   .left = (size_t)p->max_nodes,
                   .err = err};
    int rc = flame_walk(&o, 0);
    if (rc) return rc;
    size_t built = f->len - 1, shown = o.shown - 1;
    out->cut = shown < built || f->depth_cut || f->stacks_omitted || o.bytes_cut;
    out->nodes_cut = (int64_t)(built - shown);
    out->nodes_shown = (int64_t)shown;
    out->min_bytes = o.min_bytes;
    out->depth_cut = f->depth_cut ? p->max_depth : 0;
    out->stacks_omitted = (int64_t)f->stacks_omitted;
    out->stacks_bytes = f->omitted_bytes;
    out->bytes_cut = o.bytes_cut;
    return 0;
}

int hs_core_flame(hs_q *q, const hs_flame_params *p, hs_flame_result *out, hs_qerr *err)
{
    memset(out, 0, sizeof *out);
    hs__run *run = calloc(1, sizeof *run);
    if (!run) return hs__err(err, HS_ENOMEM, "out of memory");
    out->own = run;
    hs__at at;
    hs__state state = {0};
    hs__flame f = {0};
    int rc = hs__run_resolve(q, &p->run, run, err);
    if (!rc) rc = hs__at_resolve(q, run, &p->at, &at, err);
    if (!rc) rc = hs__state_at(q, run, &at, &state, err);
    if (!rc) rc = hs__flame_build(q, &state, (int)p->max_depth, FLAME_BUILD_NODES, &f, err);
    if (!rc) rc = flame_answer(q, p, &f, state.total_bytes, out, err);
    if (rc) goto out;
    hs__run_brief(&out->run, run);
    char tb[32];
    snprintf(out->at, sizeof out->at, "%s", hs__at_name(&at, tb, sizeof tb));
    out->at_ns = at.at_ns;
    out->total_bytes = state.total_bytes;
    out->total_count = state.total_count;
out:
    hs__flame_free(&f);
    hs__state_clear(&state);
    if (rc) hs_flame_result_clear(out);
    return rc;
}

void hs_flame_result_clear(hs_flame_result *r)
{
    free(r->nodes);
    if (r->own) hs__run_clear(r->own);
    free(r->own);
    hs__held_release(&r->held);
    memset(r, 0, sizeof *r);
}

/* views: flame, as the JSON of
 * docs/api.md. Each view reads the state of a run at a moment (q.c) and
 * aggregates it in memory: the cost grows with the number of live stacks,
 * not with the number of events. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hs_error.h"
#include "q_internal.h"

int hs__at_param(hs_q *q, const hs__run *run, const hs__params *p, const char *def, hs__at *at,
                 hs_qerr *err)
{
    const char *v = hs__param(p, "at");
    hs_t_sel t;
    int rc = hs_sel_parse_t(&t, v ? v : def, err);
    if (rc) return rc;
    return hs__at_resolve(q, run, &t, at, err);
}

const char *hs__at_name(const hs__at *at, char *buf, size_t len)
{
    if (at->kind == HS_TSEL_PEAK) return "peak";
    if (at->kind == HS_TSEL_END) return "end";
    if (at->kind == HS_TSEL_EXIT) return "exit";
    snprintf(buf, len, "%.9g", at->at_ns / 1e9);
    return buf;
}

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
#define FLAME_MAX_DEPTH    256
#define FLAME_MAX_NODES    5000
#define FLAME_NODES_LIMIT  100000
#define FLAME_ANSWER_BYTES (8u << 20)

int hs__cmp_live_bytes(const void *a, const void *b)
{
    const hs__live *x = a, *y = b;
    if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
    return (x->trace > y->trace) - (x->trace < y->trace);
}

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

typedef struct flame_out {
    hs_q *q;
    const hs__flame *f;
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

static json_t *flame_json(flame_out *o, size_t ix)
{
    const hs__flame *f = o->f;
    const hs__fnode *n = &f->n[ix];
    json_t *o_ = NULL, *kids = NULL;
    size_t *order = NULL;
    if (ix == 0) {
        o_ = json_pack("{s:s,s:I,s:I,s:I}", "name", "all", "bytes", (json_int_t)n->bytes, "count",
                       (json_int_t)n->count, "self_bytes", (json_int_t)0);
    } else {
        const hs__frame *fr = hs__frame_get(o->q, n->frame, o->err);
        if (!fr) return NULL;
        o_ = json_pack("{s:s,s:s,s:s,s:I,s:s,s:I,s:I,s:I}", "name", fr->label, "function", fr->name,
                       "file", fr->file, "line", (json_int_t)fr->line, "module", fr->module,
                       "bytes", (json_int_t)n->bytes, "count", (json_int_t)n->count, "self_bytes",
                       (json_int_t)n->self_bytes);
        o->bytes +=
            120 + strlen(fr->label) + strlen(fr->name) + strlen(fr->file) + strlen(fr->module);
    }
    o->shown++;
    kids = json_array();
    if (!o_ || !kids) goto oom;
    /* children by bytes, descending */
    size_t nk = 0;
    for (size_t c = n->first_child; c != NONE; c = f->n[c].next_sibling) nk += flame_visible(o, c);
    if (!(order = malloc((nk ? nk : 1) * sizeof *order))) goto oom;
    nk = 0;
    for (size_t c = n->first_child; c != NONE; c = f->n[c].next_sibling)
        if (flame_visible(o, c)) order[nk++] = c;
    for (size_t a = 1; a < nk; a++) { /* insertion sort: most nodes have few children */
        size_t v = order[a], b = a;
        while (b > 0 && f->n[order[b - 1]].bytes < f->n[v].bytes) {
            order[b] = order[b - 1];
            b--;
        }
        order[b] = v;
    }
    for (size_t k = 0; k < nk && o->left > 0; k++) {
        if (o->bytes >= FLAME_ANSWER_BYTES) {
            o->bytes_cut = 1;
            break;
        }
        o->left--;
        json_t *c = flame_json(o, order[k]);
        if (!c) {
            free(order);
            json_decref(o_);
            json_decref(kids);
            return NULL;
        }
        json_array_append_new(kids, c);
    }
    free(order);
    json_object_set_new(o_, "children", kids);
    return o_;
oom:
    json_decref(o_);
    json_decref(kids);
    hs__err(o->err, HS_ENOMEM, "out of memory");
    return NULL;
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

int hs__view_flame(hs_q *q, hs__run *run, const hs__params *p, json_t **out, hs_qerr *err)
{
    hs__at at;
    int64_t max_nodes, max_depth;
    int rc = hs__at_param(q, run, p, HS_FLAME_AT, &at, err);
    if (rc) return rc;
    double min_share;
    if ((rc = hs__min_share_param(p, &min_share, err))) return rc;
    if ((rc =
             hs__param_int(p, "max_nodes", FLAME_MAX_NODES, 1, FLAME_NODES_LIMIT, &max_nodes, err)))
        return rc;
    if ((rc = hs__param_int(p, "max_depth", FLAME_MAX_DEPTH, 1, HS_MAX_DEPTH, &max_depth, err)))
        return rc;
    hs__state state;
    if ((rc = hs__state_at(q, run, &at, &state, err))) return rc;
    hs__flame f;
    if ((rc = hs__flame_build(q, &state, (int)max_depth, FLAME_BUILD_NODES, &f, err))) goto out;
    int64_t min_bytes = (int64_t)(min_share * (double)state.total_bytes);
    flame_out o = {.q = q,
                   .f = &f,
                   .min_bytes = flame_threshold(&f, min_bytes, (size_t)max_nodes),
                   .left = (size_t)max_nodes,
                   .err = err};
    json_t *root = flame_json(&o, 0);
    if (!root) {
        rc = HS_EDB;
        goto out;
    }
    size_t built = f.len - 1, shown = o.shown - 1;
    json_t *cut = json_null();
    if (shown < built || f.depth_cut || f.stacks_omitted || o.bytes_cut)
        cut = json_pack("{s:I,s:I,s:I,s:o,s:I,s:I,s:b}", "nodes", (json_int_t)(built - shown),
                        "nodes_shown", (json_int_t)shown, "min_bytes", (json_int_t)o.min_bytes,
                        "depth", f.depth_cut ? json_integer(max_depth) : json_null(), "stacks",
                        (json_int_t)f.stacks_omitted, "stacks_bytes", (json_int_t)f.omitted_bytes,
                        "answer_bytes", o.bytes_cut);
    char tb[32];
    *out = json_pack("{s:O,s:s,s:I,s:I,s:I,s:o,s:o,s:O}", "run", run->info, "at",
                     hs__at_name(&at, tb, sizeof tb), "at_ns", (json_int_t)at.at_ns, "total_bytes",
                     (json_int_t)state.total_bytes, "total_count", (json_int_t)state.total_count,
                     "root", root, "truncated", cut, "sampling", run->sampling);
    rc = *out ? 0 : hs__err(err, HS_ENOMEM, "out of memory");
out:
    hs__flame_free(&f);
    hs__state_clear(&state);
    return rc;
}

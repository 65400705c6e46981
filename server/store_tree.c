/* store_tree: the writer's stack tree (schema/hs_tree.h).
 *
 * The store is the database's one writer (its PATH-lock), so it can give
 * node ids itself and find a node by (parent, frame) in memory: the index
 * holds every node of the database, read from its blocks the first time a
 * stack is interned after the store opens or a rollback (32 bytes a node).
 * New nodes go to the last block, kept here and written into trace_blocks
 * by hs__tree_flush (at each commit, and when it fills up, after which a new
 * one starts). A rollback forgets everything: the next intern reads the
 * blocks again, so ids the rolled-back transaction gave are given again.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "hs_error.h"
#include "store_int.h"

/* The key of node (parent, frame) in the index; 0 when an id is too large
 * for it (such nodes go to t->odd). No frame id is 0: frames.id starts at 1. */
static uint64_t node_key(int64_t parent, int64_t frame)
{
    if (parent < 0 || parent > UINT32_MAX || frame <= 0 || frame > UINT32_MAX) return 0;
    return (uint64_t)parent << 32 | (uint64_t)frame;
}

static int index_put(hs_wtree *t, const hs_tree_node *x)
{
    uint64_t key = node_key(x->parent, x->frame);
    if (key) return hs_map_put(&t->index, key, (uint64_t)x->id);
    if (t->nodd == t->odd_cap) {
        size_t cap = t->odd_cap ? t->odd_cap * 2 : 16;
        hs_tree_node *np = realloc(t->odd, cap * sizeof *np);
        if (!np) return HS_ENOMEM;
        t->odd = np;
        t->odd_cap = cap;
    }
    t->odd[t->nodd++] = *x;
    return 0;
}

/* The id of node (parent, frame), 0 when it is not in the index. */
static int64_t index_get(const hs_wtree *t, int64_t parent, int64_t frame)
{
    uint64_t key = node_key(parent, frame), id;
    if (key) return hs_map_get(&t->index, key, &id) ? (int64_t)id : 0;
    for (size_t i = 0; i < t->nodd; i++)
        if (t->odd[i].parent == parent && t->odd[i].frame == frame) return t->odd[i].id;
    return 0;
}

static int load_node(const hs_tree_node *x, void *data)
{
    hs_wtree *t = data;
    if (x->id >= t->next_id) t->next_id = x->id + 1;
    return index_put(t, x);
}

/* Reads every node into the index and the last block into t->open. */
static int tree_load(hs_store *s)
{
    hs_wtree *t = &s->tree;
    assert(!t->loaded);
    t->next_id = 1;
    int rc = hs_tree_scan(s->db, 0, load_node, t);
    hs_tree_node *last = NULL;
    size_t n = 0;
    if (!rc) rc = hs_tree_last_block(s->db, &last, &n);
    if (!rc && n < t->block_max) { /* room left: appends go there */
        if (n) memcpy(t->open, last, n * sizeof *last);
        t->nopen = n;
    }
    free(last);
    if (rc) {
        hs__tree_forget(s);
        if (rc == HS_EDB) s->db_failed = 1;
        return rc;
    }
    t->loaded = 1;
    return 0;
}

int hs__tree_flush(hs_store *s)
{
    hs_wtree *t = &s->tree;
    if (!t->dirty) return 0;
    assert(t->nopen > 0 && t->nopen <= t->block_max && t->block_max <= HS_TREE_BLOCK_NODES);
    int rc = hs_tree_put_block(s->db, t->open, t->nopen);
    if (rc == HS_EDB) s->db_failed = 1;
    if (!rc) t->dirty = 0;
    return rc;
}

int hs__tree_intern(hs_store *s, int64_t parent, int64_t frame, int64_t depth, int64_t *id)
{
    hs_wtree *t = &s->tree;
    int rc;
    if (!t->loaded && (rc = tree_load(s))) return rc;
    int64_t got = index_get(t, parent, frame);
    if (got) {
        *id = got;
        return 0;
    }
    assert(parent < t->next_id);
    if (t->nopen >= t->block_max) { /* full: written, and a new one starts */
        if ((rc = hs__tree_flush(s))) return rc;
        t->nopen = 0;
    }
    hs_tree_node x = {t->next_id, parent, frame, depth};
    if ((rc = index_put(t, &x))) return rc;
    t->open[t->nopen++] = x;
    t->next_id++;
    t->dirty = 1;
    *id = x.id;
    return 0;
}

void hs__tree_forget(hs_store *s)
{
    hs_wtree *t = &s->tree;
    hs_map_clear(&t->index);
    t->nodd = 0;
    t->nopen = 0;
    t->dirty = 0;
    t->loaded = 0;
}

int hs__tree_init(hs_store *s)
{
    s->tree.block_max = HS_TREE_BLOCK_NODES;
    s->tree.open = malloc(HS_TREE_BLOCK_NODES * sizeof *s->tree.open);
    return s->tree.open ? 0 : HS_ENOMEM;
}

void hs__tree_free(hs_store *s)
{
    hs_map_free(&s->tree.index);
    free(s->tree.odd);
    free(s->tree.open);
    memset(&s->tree, 0, sizeof s->tree);
}

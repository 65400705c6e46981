/* store_maps: the writer's side of the runs' id maps (schema/hs_maps.h).
 *
 * A live run keeps the open (last) chunk of each of its two maps in
 * memory: the entries added since its last full chunk, in the order they
 * came. hs__maps_flush writes those that changed, settled (one entry a
 * key, by key), as their run_maps row, at each commit; a chunk that holds
 * HS_MAPS_CHUNK keys is written at once and the next one starts. The
 * store adds an entry only when it changes the map (a collector resends a
 * definition unchanged), so a chunk holds few repeats.
 *
 * A rollback marks the runs it touched broken, and a broken run is loaded
 * again by hs__maps_load, open chunks included: nothing here is undone.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "hs_error.h"
#include "store_int.h"

static int grow_slots(hs_run *r)
{
    uint32_t cap = r->cap ? r->cap * 2 : 64;
    hs_slot *ns = realloc(r->slots, cap * sizeof *ns);
    if (!ns) return HS_ENOMEM;
    r->slots = ns;
    r->cap = cap;
    return 0;
}

int hs__store_bind_stack(hs_run *r, uint64_t stack_id, int64_t trace)
{
    uint64_t idx;
    if (!hs_map_get(&r->traces, (uint64_t)trace, &idx)) {
        if (r->nslots >= HS_RUN_MAX_STACKS) return HS_ETOOBIG;
        if (r->nslots == r->cap && grow_slots(r)) return HS_ENOMEM;
        idx = r->nslots;
        hs_slot *sl = &r->slots[idx];
        memset(sl, 0, sizeof *sl);
        sl->trace = trace;
        if (hs_map_put(&r->traces, (uint64_t)trace, idx)) return HS_ENOMEM;
        r->nslots++;
    }
    return hs_map_put(&r->stacks, stack_id, idx);
}

/* Adds the entries of a chunk to the run's map in memory. */
static int load_entries(hs_run *r, int kind, const hs_maps_entry *e, size_t n)
{
    int rc = 0;
    for (size_t i = 0; !rc && i < n; i++)
        rc = kind == HS_MAPS_PCS ? hs_map_put(&r->pcs, (uint64_t)e[i].key, (uint64_t)e[i].value)
                                 : hs__store_bind_stack(r, (uint64_t)e[i].key, e[i].value);
    return rc;
}

int hs__maps_load(hs_store *s, hs_run *r)
{
    sqlite3_stmt *st = s->st[ST_MAPS_LOAD];
    int rc = 0;
    for (int k = 0; !rc && k < HS_MAPS_KINDS; k++) {
        hs_wmap *m = &r->maps[k];
        hs_maps_entry *last = NULL;
        size_t n = 0;
        int64_t seq = -1;
        int step;
        sqlite3_bind_int64(st, 1, r->id);
        sqlite3_bind_int(st, 2, k);
        while (!rc && (step = sqlite3_step(st)) == SQLITE_ROW) {
            free(last);
            seq = sqlite3_column_int64(st, 0);
            rc = hs_maps_decode(sqlite3_column_blob(st, 1), (size_t)sqlite3_column_bytes(st, 1),
                                &last, &n);
            if (!rc) rc = load_entries(r, k, last, n);
        }
        if (!rc && step != SQLITE_DONE) rc = HS_EDB;
        sqlite3_reset(st);
        m->dirty = 0;
        if (!rc && seq >= 0 && n < HS_MAPS_CHUNK) { /* room left: new entries go there */
            free(m->open);
            m->open = last;
            m->n = m->cap = n;
            m->seq = seq;
            last = NULL;
        } else {
            m->n = 0;
            m->seq = seq + 1;
        }
        free(last);
    }
    if (rc == HS_EDB) s->db_failed = 1;
    return rc;
}

/* Writes the open chunk of kind as its row, settled. */
static int put_open(hs_store *s, hs_run *r, int kind)
{
    hs_wmap *m = &r->maps[kind];
    assert(m->n > 0 && m->n <= HS_MAPS_CHUNK);
    int rc = hs_maps_settle(m->open, &m->n);
    if (!rc) rc = hs_maps_put_chunk(s->db, r->id, kind, m->seq, m->open, m->n);
    if (rc == HS_EDB) s->db_failed = 1;
    if (!rc) m->dirty = 0;
    return rc;
}

int hs__maps_put(hs_store *s, hs_run *r, int kind, int64_t key, int64_t value)
{
    assert(kind >= 0 && kind < HS_MAPS_KINDS && !r->stub);
    hs_wmap *m = &r->maps[kind];
    assert(m->n < HS_MAPS_CHUNK && m->n <= m->cap);
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 64;
        if (cap > HS_MAPS_CHUNK) cap = HS_MAPS_CHUNK;
        hs_maps_entry *ne = realloc(m->open, cap * sizeof *ne);
        if (!ne) return HS_ENOMEM;
        m->open = ne;
        m->cap = cap;
    }
    m->open[m->n++] = (hs_maps_entry){key, value};
    m->dirty = 1;
    hs__store_touch(s, r); /* written at this transaction's commit, or forgotten with it */
    if (m->n < HS_MAPS_CHUNK) return 0;
    /* full, unless it held repeats: written, and the next one starts */
    int rc = hs_maps_settle(m->open, &m->n);
    if (rc || m->n < HS_MAPS_CHUNK) return rc;
    if ((rc = put_open(s, r, kind))) return rc;
    m->seq++;
    m->n = 0;
    return 0;
}

int hs__maps_flush(hs_store *s, hs_run *r)
{
    int rc = 0;
    for (int k = 0; !rc && k < HS_MAPS_KINDS; k++)
        if (r->maps[k].dirty) rc = put_open(s, r, k);
    return rc;
}

void hs__maps_free(hs_run *r)
{
    for (int k = 0; k < HS_MAPS_KINDS; k++) {
        free(r->maps[k].open);
        memset(&r->maps[k], 0, sizeof r->maps[k]);
    }
}

/* hs_tree: the stored form of the stack tree (see hs_tree.h). */
#include "hs_tree.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "hs_cols.h"
#include "hs_error.h"
#include "hs_schema.h"
#include "hs_wire.h"

enum { COL_ID, COL_PARENT, COL_FRAME, COL_DEPTH, COL_COUNT };

/* zstd level 3: a block is written a few times (the last one as it grows)
 * and read often; the frames column is where the bytes are. */
#define TREE_LEVEL 3

/* ---- codec -------------------------------------------------------------- */

int hs_tree_encode(const hs_tree_node *nodes, size_t n, hs_buf *out)
{
    assert(n >= 1);
    hs_cols cols;
    if (hs_cols_init(&cols, COL_COUNT, n)) return HS_ENOMEM;
    int64_t prev_depth = 0;
    for (size_t i = 0; i < n; i++) {
        const hs_tree_node *x = &nodes[i];
        if (i) {
            assert(x->id > nodes[i - 1].id);
            hs_cols_put(&cols, COL_ID, (uint64_t)(x->id - nodes[i - 1].id));
        }
        hs_cols_put(&cols, COL_PARENT, hs_zigzag(x->id - x->parent));
        hs_cols_put(&cols, COL_FRAME, hs_zigzag(x->frame));
        hs_cols_put(&cols, COL_DEPTH, hs_zigzag(x->depth - prev_depth - 1));
        prev_depth = x->depth;
    }
    uint8_t hdr[1 + 2 * HS_VARINT_MAX];
    hs_wr wr;
    hs_wr_init(&wr, hdr, sizeof hdr);
    hs_wr_u8(&wr, HS_TREE_CODEC);
    hs_wr_varint(&wr, n);
    hs_wr_varint(&wr, (uint64_t)nodes[0].id);
    assert(!wr.err);
    hs_buf_put(out, hdr, hs_wr_len(&wr));
    int rc = hs_cols_write(&cols, TREE_LEVEL, out, NULL);
    hs_cols_free(&cols);
    return rc;
}

/* Reads the columns into nodes[0..n). */
static int decode_cols(hs_cols_rd *cols, size_t n, int64_t first, hs_tree_node *nodes)
{
    hs_rd *rd = cols->col;
    int64_t id = first, depth = 0;
    for (size_t i = 0; i < n; i++) {
        if (i) {
            uint64_t step = hs_rd_varint(&rd[COL_ID]);
            if (step == 0 || step > (uint64_t)(INT64_MAX - id)) return HS_ECORRUPT;
            id += (int64_t)step;
        }
        nodes[i].id = id;
        nodes[i].parent =
            (int64_t)((uint64_t)id - (uint64_t)hs_unzigzag(hs_rd_varint(&rd[COL_PARENT])));
        nodes[i].frame = hs_unzigzag(hs_rd_varint(&rd[COL_FRAME]));
        depth =
            (int64_t)((uint64_t)depth + 1 + (uint64_t)hs_unzigzag(hs_rd_varint(&rd[COL_DEPTH])));
        nodes[i].depth = depth;
    }
    return hs_cols_done(cols);
}

int hs_tree_decode(const void *blob, size_t blen, hs_tree_node **nodes, size_t *n)
{
    hs_rd rd;
    hs_rd_init(&rd, blob, blen);
    *nodes = NULL;
    *n = 0;
    if (hs_rd_u8(&rd) != HS_TREE_CODEC) return HS_ECORRUPT;
    uint64_t count = hs_rd_varint_max(&rd, HS_TREE_BLOCK_NODES);
    uint64_t first = hs_rd_varint(&rd);
    if (rd.err || count == 0 || first > INT64_MAX) return HS_ECORRUPT;
    hs_cols_rd cols;
    int rc = hs_cols_open(&rd, COL_COUNT, count * HS_VARINT_MAX, &cols, NULL);
    if (rc) return rc;
    hs_tree_node *out = malloc((size_t)count * sizeof *out);
    rc = out ? decode_cols(&cols, (size_t)count, (int64_t)first, out) : HS_ENOMEM;
    hs_cols_rd_free(&cols);
    if (rc) {
        free(out);
        return rc;
    }
    *nodes = out;
    *n = (size_t)count;
    return 0;
}

/* ---- reading ---------------------------------------------------------------- */

#define RD_CACHE 8

typedef struct rd_block {
    hs_tree_node *nodes; /* NULL: an empty entry */
    size_t n;
    uint64_t used; /* for eviction: the least recently used goes */
} rd_block;

struct hs_tree_rd {
    sqlite3 *db;
    sqlite3_stmt *get; /* the block holding ?1, or the node ?1 (old layout) */
    int blocks;
    rd_block cache[RD_CACHE];
    uint64_t clock;
};

int hs_tree_in_blocks(sqlite3 *db)
{
    return hs_schema_has_table(db, "trace_blocks");
}

int hs_tree_rd_open(sqlite3 *db, hs_tree_rd **out)
{
    *out = NULL;
    int blocks = hs_tree_in_blocks(db);
    if (blocks < 0) return blocks;
    hs_tree_rd *r = calloc(1, sizeof *r);
    if (!r) return HS_ENOMEM;
    r->db = db;
    r->blocks = blocks;
    /* the block that starts at or before the id (its last checked here: a
     * condition on it would read every earlier block for an id in no block) */
    const char *sql = blocks ? "SELECT last, data FROM trace_blocks WHERE first <= ?1 ORDER BY "
                               "first DESC LIMIT 1"
                             : "SELECT id, parent, frame, depth FROM traces WHERE id = ?1";
    if (sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &r->get, NULL) != SQLITE_OK) {
        free(r);
        return HS_EDB;
    }
    *out = r;
    return 0;
}

void hs_tree_rd_free(hs_tree_rd *r)
{
    if (!r) return;
    for (int i = 0; i < RD_CACHE; i++) free(r->cache[i].nodes);
    sqlite3_finalize(r->get);
    free(r);
}

/* The node of id in a decoded block (ids increasing), or NULL. */
static const hs_tree_node *block_find(const hs_tree_node *nodes, size_t n, int64_t id)
{
    if (!n || id < nodes[0].id || id > nodes[n - 1].id) return NULL;
    size_t k = (size_t)(id - nodes[0].id); /* ids are dense but for gaps */
    if (k < n && nodes[k].id == id) return &nodes[k];
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (nodes[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && nodes[lo].id == id ? &nodes[lo] : NULL;
}

/* Reads the block of id into the cache: 1 (*hit set), 0 none, or an error. */
static int rd_fetch(hs_tree_rd *r, int64_t id, const hs_tree_node **hit)
{
    sqlite3_bind_int64(r->get, 1, id);
    int step = sqlite3_step(r->get), rc = 0;
    if (step == SQLITE_ROW && sqlite3_column_int64(r->get, 0) >= id) {
        hs_tree_node *nodes;
        size_t n;
        rc = hs_tree_decode(sqlite3_column_blob(r->get, 1), (size_t)sqlite3_column_bytes(r->get, 1),
                            &nodes, &n);
        if (!rc) {
            rd_block *victim = &r->cache[0];
            for (int i = 1; i < RD_CACHE; i++)
                if (r->cache[i].used < victim->used) victim = &r->cache[i];
            free(victim->nodes);
            *victim = (rd_block){nodes, n, ++r->clock};
            *hit = block_find(nodes, n, id);
            rc = *hit != NULL;
        }
    } else if (step != SQLITE_DONE && step != SQLITE_ROW) {
        rc = HS_EDB;
    }
    sqlite3_reset(r->get);
    return rc;
}

int hs_tree_rd_node(hs_tree_rd *r, int64_t id, hs_tree_node *out)
{
    if (!r->blocks) {
        sqlite3_bind_int64(r->get, 1, id);
        int step = sqlite3_step(r->get);
        if (step == SQLITE_ROW)
            *out = (hs_tree_node){sqlite3_column_int64(r->get, 0), sqlite3_column_int64(r->get, 1),
                                  sqlite3_column_int64(r->get, 2), sqlite3_column_int64(r->get, 3)};
        sqlite3_reset(r->get);
        return step == SQLITE_ROW ? 1 : step == SQLITE_DONE ? 0 : HS_EDB;
    }
    for (int i = 0; i < RD_CACHE; i++) {
        const hs_tree_node *x = block_find(r->cache[i].nodes, r->cache[i].n, id);
        if (x) {
            r->cache[i].used = ++r->clock;
            *out = *x;
            return 1;
        }
    }
    const hs_tree_node *x = NULL;
    int rc = rd_fetch(r, id, &x);
    if (rc == 1) *out = *x;
    return rc;
}

/* The nodes of the traces table of schema 1 to 10 with ids above after. */
static int scan_rows(sqlite3 *db, int64_t after, int (*cb)(const hs_tree_node *n, void *data),
                     void *data)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db,
                           "SELECT id, parent, frame, depth FROM main.traces WHERE id > ?1 "
                           "ORDER BY id",
                           -1, &st, NULL) != SQLITE_OK)
        return HS_EDB;
    sqlite3_bind_int64(st, 1, after);
    int rc = 0, step;
    while (!rc && (step = sqlite3_step(st)) == SQLITE_ROW) {
        hs_tree_node x = {sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1),
                          sqlite3_column_int64(st, 2), sqlite3_column_int64(st, 3)};
        rc = cb(&x, data);
    }
    if (!rc && step != SQLITE_DONE) rc = HS_EDB;
    sqlite3_finalize(st);
    return rc;
}

int hs_tree_scan(sqlite3 *db, int64_t after, int (*cb)(const hs_tree_node *n, void *data),
                 void *data)
{
    int blocks = hs_tree_in_blocks(db);
    if (blocks <= 0) return blocks < 0 ? blocks : scan_rows(db, after, cb, data);
    sqlite3_stmt *st;
    /* from the block that holds after + 1 */
    if (sqlite3_prepare_v2(db,
                           "SELECT data FROM trace_blocks WHERE first >= coalesce((SELECT "
                           "max(first) FROM trace_blocks WHERE first <= ?1 + 1), 0) ORDER BY first",
                           -1, &st, NULL) != SQLITE_OK)
        return HS_EDB;
    sqlite3_bind_int64(st, 1, after);
    int rc = 0, step;
    while (!rc && (step = sqlite3_step(st)) == SQLITE_ROW) {
        hs_tree_node *nodes;
        size_t n;
        rc = hs_tree_decode(sqlite3_column_blob(st, 0), (size_t)sqlite3_column_bytes(st, 0), &nodes,
                            &n);
        for (size_t i = 0; !rc && i < n; i++)
            if (nodes[i].id > after) rc = cb(&nodes[i], data);
        free(nodes);
    }
    if (!rc && step != SQLITE_DONE) rc = HS_EDB;
    sqlite3_finalize(st);
    return rc;
}

/* ---- the tree in memory ---------------------------------------------------- */

static int mem_add(const hs_tree_node *x, void *data)
{
    hs_tree_mem *m = data;
    if (m->n && x->id <= m->nodes[m->n - 1].id) return HS_ECORRUPT;
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 4096;
        if (cap >= HS_TREE_NONE) return HS_ENOMEM;
        hs_tree_node *nn = realloc(m->nodes, cap * sizeof *nn);
        if (nn) m->nodes = nn;
        uint32_t *nu = nn ? realloc(m->up, cap * sizeof *nu) : NULL;
        if (!nu) return HS_ENOMEM;
        m->up = nu;
        m->cap = cap;
    }
    /* a parent comes before its child (hs_tree.h): found among the nodes
     * read so far, where ids are dense but for gaps */
    const hs_tree_node *p = x->parent ? block_find(m->nodes, m->n, x->parent) : NULL;
    m->up[m->n] = p ? (uint32_t)(p - m->nodes) : HS_TREE_NONE;
    m->nodes[m->n++] = *x;
    return 0;
}

int hs_tree_mem_update(sqlite3 *db, hs_tree_mem *m)
{
    size_t had = m->n;
    int rc = hs_tree_scan(db, m->n ? m->nodes[m->n - 1].id : INT64_MIN, mem_add, m);
    if (rc) m->n = had;
    return rc;
}

void hs_tree_mem_free(hs_tree_mem *m)
{
    free(m->nodes);
    free(m->up);
    memset(m, 0, sizeof *m);
}

/* ---- writing ------------------------------------------------------------------ */

int hs_tree_put_block(sqlite3 *db, const hs_tree_node *nodes, size_t n)
{
    assert(n >= 1 && n <= HS_TREE_BLOCK_NODES);
    hs_buf b = {0};
    int rc = hs_tree_encode(nodes, n, &b);
    sqlite3_stmt *st = NULL;
    if (!rc && sqlite3_prepare_v3(db,
                                  "INSERT OR REPLACE INTO trace_blocks (first, last, data) "
                                  "VALUES (?1, ?2, ?3)",
                                  -1, SQLITE_PREPARE_PERSISTENT, &st, NULL) != SQLITE_OK)
        rc = HS_EDB;
    if (!rc) {
        sqlite3_bind_int64(st, 1, nodes[0].id);
        sqlite3_bind_int64(st, 2, nodes[n - 1].id);
        sqlite3_bind_blob(st, 3, b.p, (int)b.n, SQLITE_STATIC);
        if (sqlite3_step(st) != SQLITE_DONE) rc = HS_EDB;
    }
    sqlite3_finalize(st);
    hs_buf_free(&b);
    return rc;
}

int hs_tree_last_block(sqlite3 *db, hs_tree_node **nodes, size_t *n)
{
    *nodes = NULL;
    *n = 0;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "SELECT data FROM trace_blocks ORDER BY first DESC LIMIT 1", -1, &st,
                           NULL) != SQLITE_OK)
        return HS_EDB;
    int step = sqlite3_step(st), rc = 0;
    if (step == SQLITE_ROW)
        rc = hs_tree_decode(sqlite3_column_blob(st, 0), (size_t)sqlite3_column_bytes(st, 0), nodes,
                            n);
    else if (step != SQLITE_DONE)
        rc = HS_EDB;
    sqlite3_finalize(st);
    return rc;
}

/* ---- SQL: the traces virtual table -------------------------------------------- */

typedef struct tree_vtab {
    sqlite3_vtab base;
    sqlite3 *db;
    hs_tree_rd *rd; /* lookups by id, with its blocks kept (opened when first needed) */
} tree_vtab;

typedef struct tree_cur {
    sqlite3_vtab_cursor base;
    sqlite3_stmt *st;    /* blocks from the lowest id asked for */
    hs_tree_node *nodes; /* the current block (NULL for a lookup by id) */
    hs_tree_node one;    /* the node a lookup by id found */
    size_t n, i;
    int64_t lo, hi; /* ids asked for */
    int eof;
} tree_cur;

enum { PLAN_EQ = 1, PLAN_LO = 2, PLAN_HI = 4 };

static int tv_connect(sqlite3 *db, void *aux, int argc, const char *const *argv, sqlite3_vtab **out,
                      char **err)
{
    (void)aux, (void)argc, (void)argv, (void)err;
    int rc = sqlite3_declare_vtab(db, "CREATE TABLE x(id INTEGER PRIMARY KEY, parent INTEGER, "
                                      "frame INTEGER, depth INTEGER)");
    if (rc != SQLITE_OK) return rc;
    tree_vtab *v = sqlite3_malloc(sizeof *v);
    if (!v) return SQLITE_NOMEM;
    memset(v, 0, sizeof *v);
    v->db = db;
    sqlite3_vtab_config(db, SQLITE_VTAB_INNOCUOUS);
    *out = &v->base;
    return SQLITE_OK;
}

static int tv_disconnect(sqlite3_vtab *v)
{
    hs_tree_rd_free(((tree_vtab *)v)->rd);
    sqlite3_free(v);
    return SQLITE_OK;
}

/* Constraints on id: one equality, or a range; the rest SQLite checks. */
static int tv_best_index(sqlite3_vtab *v, sqlite3_index_info *ix)
{
    (void)v;
    int plan = 0, argv = 0, eq = -1, lo = -1, hi = -1;
    for (int i = 0; i < ix->nConstraint; i++) {
        const struct sqlite3_index_constraint *c = &ix->aConstraint[i];
        if (!c->usable || c->iColumn != 0) continue;
        if (c->op == SQLITE_INDEX_CONSTRAINT_EQ) eq = i;
        if (c->op == SQLITE_INDEX_CONSTRAINT_GT || c->op == SQLITE_INDEX_CONSTRAINT_GE) lo = i;
        if (c->op == SQLITE_INDEX_CONSTRAINT_LT || c->op == SQLITE_INDEX_CONSTRAINT_LE) hi = i;
    }
    if (eq >= 0) {
        plan = PLAN_EQ;
        ix->aConstraintUsage[eq].argvIndex = ++argv;
        ix->aConstraintUsage[eq].omit = 1;
        ix->estimatedCost = 10;
        ix->estimatedRows = 1;
        ix->idxFlags = SQLITE_INDEX_SCAN_UNIQUE;
    } else {
        /* the bounds are checked again by SQLite (> against >=) */
        if (lo >= 0) plan |= PLAN_LO, ix->aConstraintUsage[lo].argvIndex = ++argv;
        if (hi >= 0) plan |= PLAN_HI, ix->aConstraintUsage[hi].argvIndex = ++argv;
        ix->estimatedCost = plan ? 1e5 : 1e6;
        ix->estimatedRows = plan ? 1e5 : 1e6;
    }
    if (ix->nOrderBy == 1 && ix->aOrderBy[0].iColumn == 0 && !ix->aOrderBy[0].desc)
        ix->orderByConsumed = 1;
    ix->idxNum = plan;
    return SQLITE_OK;
}

static int tv_open(sqlite3_vtab *v, sqlite3_vtab_cursor **out)
{
    (void)v;
    tree_cur *c = sqlite3_malloc(sizeof *c);
    if (!c) return SQLITE_NOMEM;
    memset(c, 0, sizeof *c);
    *out = &c->base;
    return SQLITE_OK;
}

static int tv_close(sqlite3_vtab_cursor *cur)
{
    tree_cur *c = (tree_cur *)cur;
    sqlite3_finalize(c->st);
    free(c->nodes);
    sqlite3_free(c);
    return SQLITE_OK;
}

/* Moves to the next node within [lo, hi], reading blocks as needed. */
static int tv_advance(tree_cur *c)
{
    for (;;) {
        while (c->i < c->n) {
            const hs_tree_node *x = &c->nodes[c->i];
            if (x->id > c->hi) break;
            if (x->id >= c->lo) return SQLITE_OK;
            c->i++;
        }
        if (c->i < c->n) break; /* past hi */
        free(c->nodes);
        c->nodes = NULL;
        c->n = c->i = 0;
        int step = sqlite3_step(c->st);
        if (step == SQLITE_DONE) break;
        if (step != SQLITE_ROW) return SQLITE_ERROR;
        if (hs_tree_decode(sqlite3_column_blob(c->st, 0), (size_t)sqlite3_column_bytes(c->st, 0),
                           &c->nodes, &c->n))
            return SQLITE_CORRUPT;
    }
    c->eof = 1;
    return SQLITE_OK;
}

static int tv_filter(sqlite3_vtab_cursor *cur, int plan, const char *s, int argc,
                     sqlite3_value **argv)
{
    (void)s, (void)argc;
    tree_cur *c = (tree_cur *)cur;
    tree_vtab *v = (tree_vtab *)cur->pVtab;
    int a = 0;
    c->lo = INT64_MIN;
    c->hi = INT64_MAX;
    c->eof = 0;
    if (plan & PLAN_LO) c->lo = sqlite3_value_int64(argv[a++]);
    if (plan & PLAN_HI) c->hi = sqlite3_value_int64(argv[a++]);
    free(c->nodes);
    c->nodes = NULL;
    c->n = c->i = 0;
    if (plan & PLAN_EQ) { /* one node, from the blocks the table keeps */
        int rc = v->rd ? 0 : hs_tree_rd_open(v->db, &v->rd);
        if (!rc) rc = hs_tree_rd_node(v->rd, sqlite3_value_int64(argv[0]), &c->one);
        if (rc < 0) return rc == HS_ENOMEM ? SQLITE_NOMEM : SQLITE_ERROR;
        c->eof = rc == 0;
        return SQLITE_OK;
    }
    if (!c->st && sqlite3_prepare_v3(v->db,
                                     "SELECT data FROM trace_blocks WHERE first >= coalesce(("
                                     "SELECT max(first) FROM trace_blocks WHERE first <= ?1), "
                                     "?1) AND first <= ?2 ORDER BY first",
                                     -1, SQLITE_PREPARE_PERSISTENT, &c->st, NULL) != SQLITE_OK) {
        v->base.zErrMsg = sqlite3_mprintf("%s", sqlite3_errmsg(v->db));
        return SQLITE_ERROR;
    }
    sqlite3_reset(c->st);
    sqlite3_bind_int64(c->st, 1, c->lo);
    sqlite3_bind_int64(c->st, 2, c->hi);
    return tv_advance(c);
}

static int tv_next(sqlite3_vtab_cursor *cur)
{
    tree_cur *c = (tree_cur *)cur;
    if (!c->nodes) { /* a lookup by id has one row */
        c->eof = 1;
        return SQLITE_OK;
    }
    c->i++;
    return tv_advance(c);
}

static int tv_eof(sqlite3_vtab_cursor *cur)
{
    return ((tree_cur *)cur)->eof;
}

static int tv_column(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int col)
{
    tree_cur *c = (tree_cur *)cur;
    const hs_tree_node *x = c->nodes ? &c->nodes[c->i] : &c->one;
    int64_t v = col == 0 ? x->id : col == 1 ? x->parent : col == 2 ? x->frame : x->depth;
    sqlite3_result_int64(ctx, v);
    return SQLITE_OK;
}

static int tv_rowid(sqlite3_vtab_cursor *cur, sqlite_int64 *rowid)
{
    tree_cur *c = (tree_cur *)cur;
    *rowid = c->nodes ? c->nodes[c->i].id : c->one.id;
    return SQLITE_OK;
}

/* INSERT only (for fixtures and repairs by hand, with no writer running):
 * a node whose id is above every stored one (NULL: the next), added to the
 * last block while it has room. */
static int tv_update(sqlite3_vtab *vt, int argc, sqlite3_value **argv, sqlite_int64 *rowid)
{
    tree_vtab *v = (tree_vtab *)vt;
    if (argc < 6 || sqlite3_value_type(argv[0]) != SQLITE_NULL) {
        vt->zErrMsg = sqlite3_mprintf("traces: nodes are only ever added");
        return SQLITE_CONSTRAINT;
    }
    hs_tree_node *last = NULL, x;
    size_t n = 0;
    int rc = hs_tree_last_block(v->db, &last, &n);
    int64_t top = n ? last[n - 1].id : 0;
    sqlite3_value *id = sqlite3_value_type(argv[2]) != SQLITE_NULL ? argv[2] : argv[1];
    x.id = sqlite3_value_type(id) == SQLITE_NULL ? top + 1 : sqlite3_value_int64(id);
    x.parent = sqlite3_value_int64(argv[3]);
    x.frame = sqlite3_value_int64(argv[4]);
    x.depth = sqlite3_value_int64(argv[5]);
    if (!rc && x.id <= top) {
        free(last);
        vt->zErrMsg =
            sqlite3_mprintf("traces: id %lld is not above %lld", (long long)x.id, (long long)top);
        return SQLITE_CONSTRAINT;
    }
    hs_tree_node *grown = rc ? NULL : realloc(last, (n + 1) * sizeof *grown);
    if (grown) last = grown;
    if (!rc && !grown) rc = HS_ENOMEM;
    if (!rc && n < HS_TREE_BLOCK_NODES) {
        last[n] = x;
        rc = hs_tree_put_block(v->db, last, n + 1);
    } else if (!rc) {
        rc = hs_tree_put_block(v->db, &x, 1);
    }
    free(last);
    *rowid = x.id;
    return rc == 0 ? SQLITE_OK : rc == HS_ENOMEM ? SQLITE_NOMEM : SQLITE_ERROR;
}

static const sqlite3_module tree_module = {
    .xConnect = tv_connect,
    .xBestIndex = tv_best_index,
    .xDisconnect = tv_disconnect,
    .xOpen = tv_open,
    .xClose = tv_close,
    .xFilter = tv_filter,
    .xNext = tv_next,
    .xEof = tv_eof,
    .xColumn = tv_column,
    .xRowid = tv_rowid,
    .xUpdate = tv_update,
};

int hs_tree_sql_register(sqlite3 *db)
{
    return sqlite3_create_module(db, "traces", &tree_module, NULL);
}

/* ---- migration 11 ------------------------------------------------------------- */

typedef struct move_ctx {
    sqlite3 *db;
    hs_tree_node *block;
    size_t n;
} move_ctx;

static int move_node(const hs_tree_node *x, void *data)
{
    move_ctx *m = data;
    if (m->n && x->id <= m->block[m->n - 1].id) return HS_ECORRUPT;
    m->block[m->n++] = *x;
    if (m->n < HS_TREE_BLOCK_NODES) return 0;
    int rc = hs_tree_put_block(m->db, m->block, m->n);
    m->n = 0;
    return rc;
}

int hs_tree_migrate(sqlite3 *db)
{
    move_ctx m = {db, malloc(HS_TREE_BLOCK_NODES * sizeof *m.block), 0};
    if (!m.block) return HS_ENOMEM;
    /* the table's rows (trace_blocks, made by the migration's SQL, is empty) */
    int rc = scan_rows(db, INT64_MIN, move_node, &m);
    if (!rc && m.n) rc = hs_tree_put_block(db, m.block, m.n);
    free(m.block);
    if (!rc && sqlite3_exec(db, "DROP TABLE main.traces", NULL, NULL, NULL) != SQLITE_OK)
        rc = HS_EDB;
    return rc;
}

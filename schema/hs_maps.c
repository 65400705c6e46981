/* hs_maps: the stored form of each run's id maps (see hs_maps.h). */
#include "hs_maps.h"

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hs_cols.h"
#include "hs_error.h"
#include "hs_schema.h"
#include "hs_wire.h"

enum { COL_KEY, COL_VALUE, COL_COUNT };

/* As the stack tree's blocks: the open chunk is written a few times, and
 * every chunk is read whole whenever its run is. */
#define MAPS_LEVEL 3

/* The tables of schema 1 to 12, by kind: name, key column, value column. */
static const char *const old_table[HS_MAPS_KINDS][3] = {
    [HS_MAPS_PCS] = {"run_pcs", "pc", "frame"},
    [HS_MAPS_STACKS] = {"run_stacks", "stack_id", "trace"},
};

/* ---- codec -------------------------------------------------------------- */

int hs_maps_encode(const hs_maps_entry *e, size_t n, hs_buf *out)
{
    assert(n >= 1 && n <= HS_MAPS_CHUNK);
    hs_cols cols;
    if (hs_cols_init(&cols, COL_COUNT, n)) return HS_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        if (i) {
            assert(e[i].key > e[i - 1].key);
            hs_cols_put(&cols, COL_KEY, (uint64_t)e[i].key - (uint64_t)e[i - 1].key);
        } else {
            hs_cols_put(&cols, COL_KEY, hs_zigzag(e[0].key));
        }
        uint64_t prev = i ? (uint64_t)e[i - 1].value : 0;
        hs_cols_put(&cols, COL_VALUE, hs_zigzag((int64_t)((uint64_t)e[i].value - prev)));
    }
    uint8_t hdr[1 + HS_VARINT_MAX];
    hs_wr wr;
    hs_wr_init(&wr, hdr, sizeof hdr);
    hs_wr_u8(&wr, HS_MAPS_CODEC);
    hs_wr_varint(&wr, n);
    assert(!wr.err);
    hs_buf_put(out, hdr, hs_wr_len(&wr));
    int rc = hs_cols_write(&cols, MAPS_LEVEL, out, NULL);
    hs_cols_free(&cols);
    return rc;
}

/* Reads the columns into e[0..n). */
static int decode_cols(hs_cols_rd *cols, size_t n, hs_maps_entry *e)
{
    hs_rd *rd = cols->col;
    uint64_t value = 0;
    for (size_t i = 0; i < n; i++) {
        if (i) {
            uint64_t step = hs_cols_get(&rd[COL_KEY]);
            /* keys increase and stay within int64 (room wraps as it should
             * for a negative key) */
            uint64_t room = (uint64_t)INT64_MAX - (uint64_t)e[i - 1].key;
            if (step == 0 || step > room) return HS_ECORRUPT;
            e[i].key = (int64_t)((uint64_t)e[i - 1].key + step);
        } else {
            e[0].key = hs_unzigzag(hs_cols_get(&rd[COL_KEY]));
        }
        value += (uint64_t)hs_unzigzag(hs_cols_get(&rd[COL_VALUE]));
        e[i].value = (int64_t)value;
    }
    return hs_cols_done(cols);
}

int hs_maps_decode(const void *blob, size_t blen, hs_maps_entry **e, size_t *n)
{
    hs_rd rd;
    hs_rd_init(&rd, blob, blen);
    *e = NULL;
    *n = 0;
    if (hs_rd_u8(&rd) != HS_MAPS_CODEC) return HS_ECORRUPT;
    uint64_t count = hs_rd_varint_max(&rd, HS_MAPS_CHUNK);
    if (rd.err || count == 0) return HS_ECORRUPT;
    hs_cols_rd cols;
    int rc = hs_cols_open(&rd, COL_COUNT, count * HS_VARINT_MAX, &cols, NULL);
    if (rc) return rc;
    hs_maps_entry *out = malloc((size_t)count * sizeof *out);
    rc = out ? decode_cols(&cols, (size_t)count, out) : HS_ENOMEM;
    hs_cols_rd_free(&cols);
    if (rc) {
        free(out);
        return rc;
    }
    *e = out;
    *n = (size_t)count;
    return 0;
}

int hs_maps_push(hs_maps_entry **e, size_t *n, size_t *cap, hs_maps_entry x)
{
    if (hs_array_room((void **)e, cap, *n + 1, sizeof **e)) return HS_ENOMEM;
    (*e)[(*n)++] = x;
    return 0;
}

int hs_maps_settle(hs_maps_entry *e, size_t *n)
{
    size_t m = *n, i;
    for (i = 1; i < m && e[i].key > e[i - 1].key; i++) {
    }
    if (i >= m) return 0; /* the common case: chunks of increasing keys */
    /* a stable merge sort, bottom up, so that of equal keys the last given
     * is still the last */
    hs_maps_entry *tmp = malloc(m * sizeof *tmp), *a = e, *b = tmp;
    if (!tmp) return HS_ENOMEM;
    for (size_t w = 1; w < m; w *= 2) {
        for (size_t lo = 0; lo < m; lo += 2 * w) {
            size_t mid = lo + w < m ? lo + w : m, hi = lo + 2 * w < m ? lo + 2 * w : m;
            size_t x = lo, y = mid, k = lo;
            while (x < mid && y < hi) b[k++] = a[y].key < a[x].key ? a[y++] : a[x++];
            while (x < mid) b[k++] = a[x++];
            while (y < hi) b[k++] = a[y++];
        }
        hs_maps_entry *t = a;
        a = b;
        b = t;
    }
    if (a != e) memcpy(e, a, m * sizeof *e);
    free(tmp);
    size_t k = 0;
    for (i = 0; i < m; i++) {
        if (k && e[k - 1].key == e[i].key)
            e[k - 1] = e[i];
        else
            e[k++] = e[i];
    }
    *n = k;
    return 0;
}

/* ---- reading ---------------------------------------------------------------- */

int hs_maps_in_chunks(sqlite3 *db)
{
    return hs_schema_has_table(db, "run_maps");
}

/* Appends the entries of a chunk to *e (*n of *cap used). */
static int append_chunk(hs_maps_entry **e, size_t *n, size_t *cap, const void *blob, size_t len)
{
    hs_maps_entry *x;
    size_t m;
    int rc = hs_maps_decode(blob, len, &x, &m);
    if (rc) return rc;
    if (hs_array_room((void **)e, cap, *n + m, sizeof **e)) {
        free(x);
        return HS_ENOMEM;
    }
    memcpy(*e + *n, x, m * sizeof *x);
    *n += m;
    free(x);
    return 0;
}

int hs_maps_read_chunks(sqlite3_stmt *st, hs_maps_entry **e, size_t *n)
{
    hs_maps_entry *all = NULL;
    size_t m = 0, cap = 0;
    int rc = 0, step;
    while (!rc && (step = sqlite3_step(st)) == SQLITE_ROW)
        rc = append_chunk(&all, &m, &cap, sqlite3_column_blob(st, 0),
                          (size_t)sqlite3_column_bytes(st, 0));
    if (!rc && step != SQLITE_DONE) rc = HS_EDB;
    if (!rc) rc = hs_maps_settle(all, &m);
    if (rc) {
        free(all);
        all = NULL;
        m = 0;
    }
    *e = all;
    *n = m;
    return rc;
}

/* The rows of a table of schema 1 to 12, by key (its primary key's order). */
static int read_rows(sqlite3 *db, int64_t run, int kind, hs_maps_entry **e, size_t *n)
{
    char sql[128];
    sqlite3_stmt *st;
    snprintf(sql, sizeof sql, "SELECT %s, %s FROM %s WHERE run = ?1 ORDER BY %s",
             old_table[kind][1], old_table[kind][2], old_table[kind][0], old_table[kind][1]);
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) return HS_EDB;
    sqlite3_bind_int64(st, 1, run);
    hs_maps_entry *all = NULL;
    size_t m = 0, cap = 0;
    int rc = 0, step;
    while (!rc && (step = sqlite3_step(st)) == SQLITE_ROW)
        rc =
            hs_maps_push(&all, &m, &cap,
                         (hs_maps_entry){sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1)});
    if (!rc && step != SQLITE_DONE) rc = HS_EDB;
    sqlite3_finalize(st);
    if (rc) {
        free(all);
        all = NULL;
        m = 0;
    }
    *e = all;
    *n = m;
    return rc;
}

int hs_maps_read(sqlite3 *db, int64_t run, int kind, hs_maps_entry **e, size_t *n)
{
    assert(kind >= 0 && kind < HS_MAPS_KINDS);
    *e = NULL;
    *n = 0;
    int chunks = hs_maps_in_chunks(db);
    if (chunks <= 0) return chunks < 0 ? chunks : read_rows(db, run, kind, e, n);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, HS_MAPS_CHUNKS_SQL, -1, &st, NULL) != SQLITE_OK) return HS_EDB;
    sqlite3_bind_int64(st, 1, run);
    sqlite3_bind_int(st, 2, kind);
    int rc = hs_maps_read_chunks(st, e, n);
    sqlite3_finalize(st);
    return rc;
}

/* ---- writing ------------------------------------------------------------------ */

int hs_maps_put_chunk(sqlite3 *db, int64_t run, int kind, int64_t seq, const hs_maps_entry *e,
                      size_t n)
{
    assert(kind >= 0 && kind < HS_MAPS_KINDS && seq >= 0);
    hs_buf b = {0};
    int rc = hs_maps_encode(e, n, &b);
    sqlite3_stmt *st = NULL;
    if (!rc && sqlite3_prepare_v3(db,
                                  "INSERT OR REPLACE INTO run_maps (run, kind, seq, data) "
                                  "VALUES (?1, ?2, ?3, ?4)",
                                  -1, SQLITE_PREPARE_PERSISTENT, &st, NULL) != SQLITE_OK)
        rc = HS_EDB;
    if (!rc) {
        sqlite3_bind_int64(st, 1, run);
        sqlite3_bind_int(st, 2, kind);
        sqlite3_bind_int64(st, 3, seq);
        sqlite3_bind_blob(st, 4, b.p, (int)b.n, SQLITE_STATIC);
        if (sqlite3_step(st) != SQLITE_DONE) rc = HS_EDB;
    }
    sqlite3_finalize(st);
    hs_buf_free(&b);
    return rc;
}

/* The seq after the last chunk of run's map of kind (0: none yet). */
static int next_seq(sqlite3 *db, int64_t run, int kind, int64_t *out)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db,
                           "SELECT coalesce(max(seq) + 1, 0) FROM run_maps WHERE run = ?1 AND "
                           "kind = ?2",
                           -1, &st, NULL) != SQLITE_OK)
        return HS_EDB;
    sqlite3_bind_int64(st, 1, run);
    sqlite3_bind_int(st, 2, kind);
    int rc = sqlite3_step(st) == SQLITE_ROW ? 0 : HS_EDB;
    if (!rc) *out = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return rc;
}

int hs_maps_append(sqlite3 *db, int64_t run, int kind, hs_maps_entry *e, size_t n)
{
    int64_t seq = 0;
    int rc = hs_maps_settle(e, &n);
    if (!rc && n) rc = next_seq(db, run, kind, &seq);
    for (size_t i = 0; !rc && i < n; i += HS_MAPS_CHUNK)
        rc = hs_maps_put_chunk(db, run, kind, seq++, e + i,
                               n - i < HS_MAPS_CHUNK ? n - i : HS_MAPS_CHUNK);
    return rc;
}

/* ---- migration 13 ------------------------------------------------------------- */

/* The rows of one old table into chunks, a run at a time: rows come by
 * (run, key), so each chunk's keys increase. */
static int move_table(sqlite3 *db, int kind, hs_maps_entry *buf)
{
    char sql[160];
    sqlite3_stmt *st;
    snprintf(sql, sizeof sql, "SELECT run, %s, %s FROM main.%s ORDER BY run, %s",
             old_table[kind][1], old_table[kind][2], old_table[kind][0], old_table[kind][1]);
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) return HS_EDB;
    int64_t run = 0, seq = 0;
    size_t n = 0;
    int rc = 0, step;
    while (!rc && (step = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t r = sqlite3_column_int64(st, 0);
        if (n && (r != run || n == HS_MAPS_CHUNK)) {
            rc = hs_maps_put_chunk(db, run, kind, seq, buf, n);
            seq = r != run ? 0 : seq + 1;
            n = 0;
        } else if (!n && r != run) {
            seq = 0;
        }
        run = r;
        buf[n++] = (hs_maps_entry){sqlite3_column_int64(st, 1), sqlite3_column_int64(st, 2)};
    }
    if (!rc && step != SQLITE_DONE) rc = HS_EDB;
    if (!rc && n) rc = hs_maps_put_chunk(db, run, kind, seq, buf, n);
    sqlite3_finalize(st);
    return rc;
}

int hs_maps_migrate(sqlite3 *db)
{
    hs_maps_entry *buf = malloc(HS_MAPS_CHUNK * sizeof *buf);
    if (!buf) return HS_ENOMEM;
    int rc = 0, old[HS_MAPS_KINDS];
    /* (a file taken back to an older version by hand may have chunks already) */
    for (int k = 0; !rc && k < HS_MAPS_KINDS; k++)
        if ((old[k] = hs_schema_has_table(db, old_table[k][0])) < 0) rc = old[k];
    for (int k = 0; !rc && k < HS_MAPS_KINDS; k++)
        if (old[k]) rc = move_table(db, k, buf);
    free(buf);
    for (int k = 0; !rc && k < HS_MAPS_KINDS; k++) {
        if (!old[k]) continue;
        char sql[64];
        snprintf(sql, sizeof sql, "DROP TABLE main.%s", old_table[k][0]);
        if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK) rc = HS_EDB;
    }
    return rc;
}

/* ---- SQL: the run_pcs and run_stacks virtual tables ---------------------------- */

typedef struct maps_vtab {
    sqlite3_vtab base;
    sqlite3 *db;
    int kind;
    unsigned gen; /* counts the inserts made through the table */
} maps_vtab;

typedef struct maps_cur {
    sqlite3_vtab_cursor base;
    sqlite3_stmt *one; /* a run's chunks */
    sqlite3_stmt *all; /* every run's chunks, by run */
    int pending;       /* all is on a row not read yet (the next run's first chunk) */
    hs_maps_entry *e;  /* the current run's map, by key */
    size_t n, cap;
    size_t i, end; /* the rows of e given: [i, end) */
    int64_t run;   /* e's */
    int cached;    /* e is run's map as of generation gen (a join asks for a run again) */
    unsigned gen;
    int plan;
    int64_t key; /* with PLAN_KEY */
    int64_t rowid;
    int eof;
} maps_cur;

enum { PLAN_RUN = 1, PLAN_KEY = 2 };

static int mv_connect(sqlite3 *db, void *aux, int argc, const char *const *argv, sqlite3_vtab **out,
                      char **err)
{
    (void)argc, (void)argv, (void)err;
    int kind = (int)(intptr_t)aux;
    char decl[128];
    snprintf(decl, sizeof decl, "CREATE TABLE x(run INTEGER, %s INTEGER, %s INTEGER)",
             old_table[kind][1], old_table[kind][2]);
    int rc = sqlite3_declare_vtab(db, decl);
    if (rc != SQLITE_OK) return rc;
    maps_vtab *v = sqlite3_malloc(sizeof *v);
    if (!v) return SQLITE_NOMEM;
    memset(v, 0, sizeof *v);
    v->db = db;
    v->kind = kind;
    sqlite3_vtab_config(db, SQLITE_VTAB_INNOCUOUS);
    sqlite3_vtab_config(db, SQLITE_VTAB_CONSTRAINT_SUPPORT, 1);
    *out = &v->base;
    return SQLITE_OK;
}

static int mv_disconnect(sqlite3_vtab *v)
{
    sqlite3_free(v);
    return SQLITE_OK;
}

/* An equality on run reads that run's chunks only; one on the key as well
 * finds its entry; the rest SQLite checks. Rows come by (run, key). */
static int mv_best_index(sqlite3_vtab *v, sqlite3_index_info *ix)
{
    (void)v;
    int eq[2] = {-1, -1}, argv = 0, plan = 0;
    for (int i = 0; i < ix->nConstraint; i++) {
        const struct sqlite3_index_constraint *c = &ix->aConstraint[i];
        if (c->usable && c->op == SQLITE_INDEX_CONSTRAINT_EQ && c->iColumn >= 0 && c->iColumn < 2)
            eq[c->iColumn] = i;
    }
    if (eq[0] >= 0) {
        plan |= PLAN_RUN;
        ix->aConstraintUsage[eq[0]].argvIndex = ++argv;
        ix->aConstraintUsage[eq[0]].omit = 1;
    }
    if (eq[1] >= 0) {
        plan |= PLAN_KEY;
        ix->aConstraintUsage[eq[1]].argvIndex = ++argv;
        ix->aConstraintUsage[eq[1]].omit = 1;
    }
    /* As a key search would cost in a table of a row per entry: a run's
     * entries are found directly, a scan reads every run's (and must lose
     * to any join that can give the run). */
    ix->estimatedCost = plan == (PLAN_RUN | PLAN_KEY) ? 10 : plan & PLAN_RUN ? 25 : 4e9;
    ix->estimatedRows = plan == (PLAN_RUN | PLAN_KEY) ? 1 : plan & PLAN_RUN ? 25 : 1e9;
    if (plan == (PLAN_RUN | PLAN_KEY)) ix->idxFlags = SQLITE_INDEX_SCAN_UNIQUE;
    int ordered = ix->nOrderBy <= 2;
    for (int i = 0; ordered && i < ix->nOrderBy; i++) {
        int col = ix->aOrderBy[i].iColumn;
        /* (run, key), or key alone when the run is fixed */
        ordered = !ix->aOrderBy[i].desc &&
                  (col == i || (col == 1 && i == 0 && ix->nOrderBy == 1 && (plan & PLAN_RUN)));
    }
    ix->orderByConsumed = ordered && ix->nOrderBy > 0;
    ix->idxNum = plan;
    return SQLITE_OK;
}

static int mv_open(sqlite3_vtab *v, sqlite3_vtab_cursor **out)
{
    (void)v;
    maps_cur *c = sqlite3_malloc(sizeof *c);
    if (!c) return SQLITE_NOMEM;
    memset(c, 0, sizeof *c);
    *out = &c->base;
    return SQLITE_OK;
}

static int mv_close(sqlite3_vtab_cursor *cur)
{
    maps_cur *c = (maps_cur *)cur;
    sqlite3_finalize(c->one);
    sqlite3_finalize(c->all);
    free(c->e);
    sqlite3_free(c);
    return SQLITE_OK;
}

static int sqlite_code(int rc)
{
    return rc == HS_ENOMEM ? SQLITE_NOMEM : rc == HS_ECORRUPT ? SQLITE_CORRUPT : SQLITE_ERROR;
}

/* The rows of e to give: all, or the key's entry. */
static void set_range(maps_cur *c)
{
    c->i = 0;
    c->end = c->n;
    if (!(c->plan & PLAN_KEY)) return;
    size_t lo = 0, hi = c->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c->e[mid].key < c->key)
            lo = mid + 1;
        else
            hi = mid;
    }
    c->i = lo;
    c->end = lo < c->n && c->e[lo].key == c->key ? lo + 1 : lo;
}

/* The next run of the whole table with rows to give, or eof. */
static int next_run(maps_cur *c)
{
    for (;;) {
        if (!c->pending) {
            int step = sqlite3_step(c->all);
            if (step == SQLITE_DONE) {
                c->eof = 1;
                return SQLITE_OK;
            }
            if (step != SQLITE_ROW) return SQLITE_ERROR;
        }
        c->run = sqlite3_column_int64(c->all, 0);
        c->n = 0;
        int step = SQLITE_DONE, rc = 0;
        do {
            rc = append_chunk(&c->e, &c->n, &c->cap, sqlite3_column_blob(c->all, 1),
                              (size_t)sqlite3_column_bytes(c->all, 1));
        } while (!rc && (step = sqlite3_step(c->all)) == SQLITE_ROW &&
                 sqlite3_column_int64(c->all, 0) == c->run);
        if (!rc && step != SQLITE_ROW && step != SQLITE_DONE) return SQLITE_ERROR;
        if (!rc) rc = hs_maps_settle(c->e, &c->n);
        if (rc) return sqlite_code(rc);
        c->pending = step == SQLITE_ROW;
        set_range(c);
        if (c->i < c->end) return SQLITE_OK;
        if (!c->pending) {
            c->eof = 1;
            return SQLITE_OK;
        }
    }
}

static int mv_filter(sqlite3_vtab_cursor *cur, int plan, const char *s, int argc,
                     sqlite3_value **argv)
{
    (void)s, (void)argc;
    maps_cur *c = (maps_cur *)cur;
    maps_vtab *v = (maps_vtab *)cur->pVtab;
    int a = 0, rc;
    c->plan = plan;
    c->eof = 0;
    c->rowid = 0;
    int64_t run = plan & PLAN_RUN ? sqlite3_value_int64(argv[a++]) : 0;
    if (plan & PLAN_KEY) c->key = sqlite3_value_int64(argv[a++]);
    if (plan & PLAN_RUN) {
        if (!(c->cached && c->run == run && c->gen == v->gen)) {
            if (!c->one &&
                sqlite3_prepare_v3(v->db, HS_MAPS_CHUNKS_SQL, -1, SQLITE_PREPARE_PERSISTENT,
                                   &c->one, NULL) != SQLITE_OK)
                goto fail;
            sqlite3_bind_int64(c->one, 1, run);
            sqlite3_bind_int(c->one, 2, v->kind);
            free(c->e);
            c->e = NULL;
            c->cap = 0;
            rc = hs_maps_read_chunks(c->one, &c->e, &c->n);
            sqlite3_reset(c->one);
            if (rc) {
                c->cached = 0;
                return rc == HS_EDB ? SQLITE_ERROR : sqlite_code(rc);
            }
            c->cap = c->n;
            c->run = run;
            c->cached = 1;
            c->gen = v->gen;
        }
        set_range(c);
        c->eof = c->i >= c->end;
        return SQLITE_OK;
    }
    c->cached = 0; /* e is about to hold other runs' */
    if (!c->all && sqlite3_prepare_v3(v->db,
                                      "SELECT run, data FROM run_maps WHERE kind = ?1 ORDER BY "
                                      "run, kind, seq",
                                      -1, SQLITE_PREPARE_PERSISTENT, &c->all, NULL) != SQLITE_OK)
        goto fail;
    sqlite3_reset(c->all);
    sqlite3_bind_int(c->all, 1, v->kind);
    c->pending = 0;
    return next_run(c);
fail:
    sqlite3_free(v->base.zErrMsg);
    v->base.zErrMsg = sqlite3_mprintf("%s", sqlite3_errmsg(v->db));
    return SQLITE_ERROR;
}

static int mv_next(sqlite3_vtab_cursor *cur)
{
    maps_cur *c = (maps_cur *)cur;
    c->rowid++;
    if (++c->i < c->end) return SQLITE_OK;
    if ((c->plan & PLAN_RUN) || !c->pending) {
        c->eof = 1;
        return SQLITE_OK;
    }
    return next_run(c);
}

static int mv_eof(sqlite3_vtab_cursor *cur)
{
    return ((maps_cur *)cur)->eof;
}

static int mv_column(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int col)
{
    maps_cur *c = (maps_cur *)cur;
    assert(c->i < c->end && c->end <= c->n);
    const hs_maps_entry *x = &c->e[c->i];
    sqlite3_result_int64(ctx, col == 0 ? c->run : col == 1 ? x->key : x->value);
    return SQLITE_OK;
}

static int mv_rowid(sqlite3_vtab_cursor *cur, sqlite_int64 *rowid)
{
    *rowid = ((maps_cur *)cur)->rowid;
    return SQLITE_OK;
}

/* INSERT only (fixtures and repairs by hand, with no writer running): the
 * entry goes into the run's last chunk while it has room, else a new one.
 * A key the run has already is a conflict, as with the table of schema 1
 * to 12: INSERT OR REPLACE replaces the entry, OR IGNORE keeps it. */
static int mv_update(sqlite3_vtab *vt, int argc, sqlite3_value **argv, sqlite_int64 *rowid)
{
    maps_vtab *v = (maps_vtab *)vt;
    if (argc < 5 || sqlite3_value_type(argv[0]) != SQLITE_NULL) {
        vt->zErrMsg = sqlite3_mprintf("%s: entries are only ever added", old_table[v->kind][0]);
        return SQLITE_CONSTRAINT;
    }
    for (int i = 2; i < 5; i++)
        if (sqlite3_value_type(argv[i]) == SQLITE_NULL) {
            vt->zErrMsg = sqlite3_mprintf("NOT NULL constraint failed: %s", old_table[v->kind][0]);
            return SQLITE_CONSTRAINT;
        }
    int64_t run = sqlite3_value_int64(argv[2]);
    hs_maps_entry x = {sqlite3_value_int64(argv[3]), sqlite3_value_int64(argv[4])};
    hs_maps_entry *e = NULL;
    size_t n = 0;
    int rc = 0;
    int mode = sqlite3_vtab_on_conflict(v->db);
    if (mode != SQLITE_REPLACE) {
        rc = hs_maps_read(v->db, run, v->kind, &e, &n);
        for (size_t i = 0; !rc && i < n; i++)
            if (e[i].key == x.key) {
                free(e);
                if (mode == SQLITE_IGNORE) return SQLITE_OK;
                vt->zErrMsg = sqlite3_mprintf("UNIQUE constraint failed: %s.run, %s.%s",
                                              old_table[v->kind][0], old_table[v->kind][0],
                                              old_table[v->kind][1]);
                return SQLITE_CONSTRAINT;
            }
        free(e);
        e = NULL;
    }
    sqlite3_stmt *st = NULL;
    if (!rc && sqlite3_prepare_v2(v->db,
                                  "SELECT seq, data FROM run_maps WHERE run = ?1 AND kind = ?2 "
                                  "ORDER BY seq DESC LIMIT 1",
                                  -1, &st, NULL) != SQLITE_OK)
        rc = HS_EDB;
    int64_t seq = 0;
    if (!rc) {
        sqlite3_bind_int64(st, 1, run);
        sqlite3_bind_int(st, 2, v->kind);
        int step = sqlite3_step(st);
        if (step == SQLITE_ROW) {
            seq = sqlite3_column_int64(st, 0);
            rc = hs_maps_decode(sqlite3_column_blob(st, 1), (size_t)sqlite3_column_bytes(st, 1), &e,
                                &n);
            if (!rc && n >= HS_MAPS_CHUNK) { /* full: a chunk of its own */
                free(e);
                e = NULL;
                n = 0;
                seq++;
            }
        } else if (step != SQLITE_DONE) {
            rc = HS_EDB;
        }
    }
    sqlite3_finalize(st);
    hs_maps_entry *grown = rc ? NULL : realloc(e, (n + 1) * sizeof *grown);
    if (!rc && !grown) rc = HS_ENOMEM;
    if (!rc) {
        e = grown;
        e[n++] = x;
        rc = hs_maps_settle(e, &n);
    }
    if (!rc) rc = hs_maps_put_chunk(v->db, run, v->kind, seq, e, n);
    free(e);
    v->gen++;
    *rowid = 0;
    if (rc == HS_EDB) {
        vt->zErrMsg = sqlite3_mprintf("%s", sqlite3_errmsg(v->db));
        return SQLITE_ERROR;
    }
    return rc ? sqlite_code(rc) : SQLITE_OK;
}

static const sqlite3_module maps_module = {
    .xConnect = mv_connect,
    .xBestIndex = mv_best_index,
    .xDisconnect = mv_disconnect,
    .xOpen = mv_open,
    .xClose = mv_close,
    .xFilter = mv_filter,
    .xNext = mv_next,
    .xEof = mv_eof,
    .xColumn = mv_column,
    .xRowid = mv_rowid,
    .xUpdate = mv_update,
};

int hs_maps_sql_register(sqlite3 *db)
{
    int rc = SQLITE_OK;
    for (int k = 0; rc == SQLITE_OK && k < HS_MAPS_KINDS; k++)
        rc = sqlite3_create_module(db, old_table[k][0], &maps_module, (void *)(intptr_t)k);
    return rc;
}

/* hs_refill: stored frames named once their build comes (see hs_refill.h). */
#include "hs_refill.h"

#include <assert.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "hs_buf.h"
#include "hs_error.h"
#include "hs_log.h"
#include "hs_map.h"
#include "hs_text.h"

static _Atomic uint64_t generation; /* hs_refill_generation() */

uint64_t hs_refill_generation(void)
{
    return atomic_load(&generation);
}

typedef struct missing {
    uint8_t bid[HS_BUILD_ID_MAX];
    uint32_t blen;
    char *path; /* NULL: slot free */
} missing;

struct hs_refill {
    sqlite3 *db;
    hs_syms *syms;
    sqlite3_stmt *rows;   /* a path's unnamed frames after an id */
    sqlite3_stmt *shared; /* those of them runs of other builds use */
    missing miss[HS_REFILL_MISSING_MAX];
    unsigned next_slot; /* where the next missing build goes (the oldest) */
    uint64_t next_check_ns;
    /* the build being named */
    int active, out, acked; /* out: a job is at the writer; acked: one came back */
    missing cur;
    int64_t last_id;
    int64_t runs_seen; /* the highest run id when skip was read */
    hs_map skip;       /* frame ids left unnamed (shared with other builds) */
    uint64_t named, renamed;
    hs_buf out_buf; /* the payload being built (oom: give up this build) */
};

int hs_refill_new(hs_refill **out, sqlite3 *db, hs_syms *syms)
{
    hs_refill *f = calloc(1, sizeof *f);
    if (!f) return HS_ENOMEM;
    f->db = db;
    f->syms = syms;
    /* in id order from the last one seen: one pass over frames a build */
    if (sqlite3_prepare_v3(db,
                           "SELECT id, module_offset FROM frames WHERE id > ?2 AND +function = ''"
                           " AND module = ?1 ORDER BY id LIMIT ?3",
                           -1, SQLITE_PREPARE_PERSISTENT, &f->rows, NULL) != SQLITE_OK ||
        sqlite3_prepare_v3(db,
                           "SELECT DISTINCT p.frame FROM mappings m JOIN run_pcs p ON p.run = m.run"
                           " JOIN frames f ON f.id = p.frame WHERE m.path = ?1"
                           " AND (m.build_id IS NULL OR m.build_id <> ?2)"
                           " AND f.function = '' AND f.module = ?1",
                           -1, SQLITE_PREPARE_PERSISTENT, &f->shared, NULL) != SQLITE_OK) {
        hs_log("symbols: stored frames cannot be named later: %s", sqlite3_errmsg(db));
        hs_refill_free(f);
        return HS_EDB;
    }
    *out = f;
    return 0;
}

void hs_refill_free(hs_refill *f)
{
    if (!f) return;
    sqlite3_finalize(f->rows);
    sqlite3_finalize(f->shared);
    for (size_t i = 0; i < HS_REFILL_MISSING_MAX; i++) free(f->miss[i].path);
    free(f->cur.path);
    hs_map_free(&f->skip);
    hs_buf_free(&f->out_buf);
    free(f);
}

static int same_build(const missing *m, const uint8_t *bid, size_t blen, const char *path)
{
    return m->path && m->blen == blen && !memcmp(m->bid, bid, blen) && !strcmp(m->path, path);
}

void hs_refill_missing(hs_refill *f, const uint8_t *bid, size_t blen, const char *path)
{
    if (!blen || blen > HS_BUILD_ID_MAX || !path || !*path) return;
    if (f->active && same_build(&f->cur, bid, blen, path)) return;
    for (size_t i = 0; i < HS_REFILL_MISSING_MAX; i++)
        if (same_build(&f->miss[i], bid, blen, path)) return;
    char *p = strdup(path);
    if (!p) return; /* forgotten: a later run of the build tells again */
    missing *m = &f->miss[f->next_slot++ % HS_REFILL_MISSING_MAX];
    free(m->path);
    m->path = p;
    memcpy(m->bid, bid, blen);
    m->blen = (uint32_t)blen;
}

void hs_refill_scan(hs_refill *f)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(f->db,
                           "SELECT DISTINCT build_id, path FROM mappings WHERE build_id IS NOT NULL"
                           " AND path IN (SELECT module FROM frames WHERE function = ''"
                           " AND module <> '') LIMIT ?1",
                           -1, &st, NULL) != SQLITE_OK) {
        hs_log("symbols: cannot list the builds of unnamed frames: %s", sqlite3_errmsg(f->db));
        return;
    }
    sqlite3_bind_int(st, 1, HS_REFILL_MISSING_MAX);
    while (sqlite3_step(st) == SQLITE_ROW) {
        const void *bid = sqlite3_column_blob(st, 0);
        int blen = sqlite3_column_bytes(st, 0);
        const char *path = (const char *)sqlite3_column_text(st, 1);
        if (bid && path) hs_refill_missing(f, bid, (size_t)blen, path);
    }
    sqlite3_finalize(st);
}

void hs_refill_recheck(hs_refill *f)
{
    f->next_check_ns = 0;
}

/* ---- one build ----------------------------------------------------------- */

static void put(hs_refill *f, const void *p, size_t n)
{
    hs_buf_put(&f->out_buf, p, n);
}

static void put_varint(hs_refill *f, uint64_t v)
{
    uint8_t b[HS_VARINT_MAX];
    put(f, b, hs_varint_encode(b, v));
}

static void put_str(hs_refill *f, hs_str s)
{
    put_varint(f, s.len);
    put(f, s.ptr, s.len);
}

/* The frames of cur's path that runs of other builds use: left unnamed. */
static int load_shared(hs_refill *f)
{
    hs_map_clear(&f->skip);
    /* runs stored after this (and open ones) are the writer's to check */
    sqlite3_stmt *mx = NULL;
    if (sqlite3_prepare_v2(f->db, "SELECT coalesce(max(id), 0) FROM runs", -1, &mx, NULL) !=
            SQLITE_OK ||
        sqlite3_step(mx) != SQLITE_ROW) {
        sqlite3_finalize(mx);
        return HS_EDB;
    }
    f->runs_seen = sqlite3_column_int64(mx, 0);
    sqlite3_finalize(mx);
    sqlite3_bind_text(f->shared, 1, f->cur.path, -1, SQLITE_STATIC);
    sqlite3_bind_blob(f->shared, 2, f->cur.bid, (int)f->cur.blen, SQLITE_STATIC);
    int step, rc = 0;
    while (!rc && (step = sqlite3_step(f->shared)) == SQLITE_ROW)
        rc = hs_map_put(&f->skip, (uint64_t)sqlite3_column_int64(f->shared, 0), 1);
    if (!rc && step != SQLITE_DONE) rc = HS_EDB;
    sqlite3_reset(f->shared);
    return rc;
}

/* Takes the first missing build a file can be read of now as cur. */
static int pick(hs_refill *f)
{
    for (size_t i = 0; i < HS_REFILL_MISSING_MAX; i++) {
        missing *m = &f->miss[i];
        if (!m->path || !hs_syms_available(f->syms, m->bid, m->blen, m->path)) continue;
        f->cur = *m;
        m->path = NULL;
        f->active = 1;
        f->acked = 0;
        f->last_id = 0;
        f->named = f->renamed = 0;
        if (load_shared(f)) {
            hs_log("symbols: cannot tell which frames of %s other builds use: %s", f->cur.path,
                   sqlite3_errmsg(f->db));
            f->active = 0;
            hs_refill_missing(f, f->cur.bid, f->cur.blen, f->cur.path);
            free(f->cur.path);
            f->cur.path = NULL;
            continue;
        }
        return 1;
    }
    return 0;
}

static void finish(hs_refill *f, const char *why)
{
    char hex[2 * HS_BUILD_ID_MAX + 1];
    hs_hex(hex, f->cur.bid, f->cur.blen);
    if (why) {
        hs_log("symbols: stored frames of build %s (%s) not named: %s; tried again later", hex,
               f->cur.path, why);
        hs_refill_missing(f, f->cur.bid, f->cur.blen, f->cur.path);
    } else if (f->named) {
        hs_log("symbols: build %s (%s) found: %" PRIu64 " stored frames named (%" PRIu64
               " under a key of their own)%s",
               hex, f->cur.path, f->named, f->renamed,
               f->skip.count ? "; those runs of other builds of the path use stay unnamed" : "");
    }
    free(f->cur.path);
    f->cur.path = NULL;
    f->active = 0;
    hs_map_clear(&f->skip);
}

/* Reads the next rows of cur and names them into a job; NULL when cur is
 * done (or failed). */
static hs_wjob *next_batch(hs_refill *f)
{
    hs_buf_reset(&f->out_buf);
    sqlite3_bind_text(f->rows, 1, f->cur.path, -1, SQLITE_STATIC);
    sqlite3_bind_int64(f->rows, 2, f->last_id);
    sqlite3_bind_int(f->rows, 3, HS_REFILL_BATCH);
    int nrows = 0, step;
    hs_symbol out[HS_SYMS_INLINE_MAX];
    put_str(f, (hs_str){.ptr = (const char *)f->cur.bid, .len = f->cur.blen});
    put_str(f, (hs_str){.ptr = f->cur.path, .len = strlen(f->cur.path)});
    put_varint(f, (uint64_t)f->runs_seen);
    while ((step = sqlite3_step(f->rows)) == SQLITE_ROW) {
        int64_t id = sqlite3_column_int64(f->rows, 0);
        int64_t off = sqlite3_column_int64(f->rows, 1);
        nrows++;
        f->last_id = id;
        uint64_t v;
        if (hs_map_get(&f->skip, (uint64_t)id, &v) || off < 0) continue;
        int n = hs_syms_lookup(f->syms, f->cur.bid, f->cur.blen, f->cur.path, (uint64_t)off, out,
                               HS_SYMS_INLINE_MAX);
        if (n < 1 || !out[0].function.len) continue; /* no symbol covers it */
        put_varint(f, (uint64_t)id);
        put_str(f, out[0].function);
        put_str(f, out[0].file);
        put_varint(f, out[0].line);
    }
    sqlite3_reset(f->rows);
    if (step != SQLITE_DONE) {
        finish(f, sqlite3_errmsg(f->db));
        return NULL;
    }
    /* nothing after a job came back: every frame committed before is done */
    if (!nrows && f->acked) {
        finish(f, NULL);
        return NULL;
    }
    hs_wjob *j = hs_wjob_new(HS_WJOB_REFILL, 0, NULL);
    if (!j || f->out_buf.oom ||
        hs_wjob_add_frame(j, 0, HS_WFRAME_REFILL, (const uint8_t *)f->out_buf.p, f->out_buf.n)) {
        hs_wjob_free(j);
        finish(f, "out of memory");
        return NULL;
    }
    f->out = 1;
    return j;
}

hs_wjob *hs_refill_step(hs_refill *f, uint64_t now_ns, uint64_t *due_ns)
{
    *due_ns = 0;
    if (f->out) return NULL;
    if (!f->active) {
        int any = 0;
        for (size_t i = 0; i < HS_REFILL_MISSING_MAX && !any; i++) any = f->miss[i].path != NULL;
        if (!any) return NULL;
        if (now_ns < f->next_check_ns) {
            *due_ns = f->next_check_ns;
            return NULL;
        }
        f->next_check_ns = now_ns + HS_REFILL_CHECK_MS * 1000000ull;
        *due_ns = f->next_check_ns;
        if (!pick(f)) return NULL;
    }
    hs_wjob *j = next_batch(f);
    /* a build done: the next one found is taken at the next step */
    if (!j && !f->active) *due_ns = now_ns;
    return j;
}

void hs_refill_done(hs_refill *f, hs_wjob *j)
{
    assert(f->out && f->active && j->kind == HS_WJOB_REFILL);
    f->out = 0;
    f->acked = 1;
    f->named += j->named;
    f->renamed += j->renamed;
    if (j->named) atomic_fetch_add(&generation, 1);
    if (j->err == HS_ENOTSUP) { /* the database is read-only: nothing to do */
        f->named = 0;
        finish(f, NULL);
    } else if (j->err) {
        finish(f, hs_strerror(j->err));
    }
    hs_wjob_free(j);
}

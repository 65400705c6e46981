/* ch_marks: the shipper's watermarks kept on disk, in a SQLite file of its
 * own beside the buffer (PATH-chship), so that a front end that restarts
 * goes on where it stopped instead of sending its whole buffer again.
 *
 * It holds what hs_chship keeps in memory: the content id of every local
 * frame and trace node shipped (a frame named after it was shipped keeps
 * the id of its unnamed key, which cannot be computed again from the
 * buffer), the frames shipped unnamed and each run's watermarks. It is written after a pass landed,
 * in one transaction, so it is never ahead of ClickHouse: a crash loses at most the last pass's
 * marks, whose rows are then sent again (ReplacingMergeTree keys make that harmless). A marks file
 * of another buffer (the buffer was replaced: another inode) or of another ClickHouse database (the
 * URL as logged, without its password) is emptied and started over; a run whose
 * local id names another run now (a pruned run's id taken again) is
 * dropped. Any error is logged and leaves the shipper working without it.
 */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ch_ship_int.h"
#include "hs_error.h"
#include "hs_log.h"

static const char marks_schema[] =
    "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;"
    "CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v INTEGER NOT NULL);"
    "CREATE TABLE IF NOT EXISTS ids (kind INTEGER NOT NULL, local INTEGER NOT NULL, "
    "content INTEGER NOT NULL, PRIMARY KEY (kind, local)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS unnamed (local INTEGER PRIMARY KEY);"
    "CREATE TABLE IF NOT EXISTS runs (local INTEGER PRIMARY KEY, id INTEGER, day INTEGER, "
    "sig INTEGER, seq INTEGER, snap INTEGER, series INTEGER, ps INTEGER, hx INTEGER, "
    "mapt INTEGER, peak_sig INTEGER, npcs INTEGER, nstacks INTEGER, stats INTEGER, "
    "next_seq INTEGER, moved INTEGER, ended INTEGER, quiet_ns INTEGER);";

#define RUN_COLS                                                                                   \
    "local, id, day, sig, seq, snap, series, ps, hx, mapt, peak_sig, npcs, nstacks, stats, "       \
    "next_seq, moved, ended, quiet_ns"

static int64_t meta_get(sqlite3 *db, const char *k, int64_t dflt)
{
    sqlite3_stmt *st;
    int64_t v = dflt;
    if (sqlite3_prepare_v2(db, "SELECT v FROM meta WHERE k = ?1", -1, &st, NULL) != SQLITE_OK)
        return dflt;
    sqlite3_bind_text(st, 1, k, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW) v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

static int meta_put(sqlite3 *db, const char *k, int64_t v)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO meta (k, v) VALUES (?1, ?2)", -1, &st,
                           NULL) != SQLITE_OK)
        return HS_EDB;
    sqlite3_bind_text(st, 1, k, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, v);
    int rc = sqlite3_step(st) == SQLITE_DONE ? 0 : HS_EDB;
    sqlite3_finalize(st);
    return rc;
}

/* A front end's id: a hash of its host's name and its buffer's real path
 * (53 bits: it travels as a JSON number). The same front end has the same
 * id after a restart, with or without its marks file; two front ends never
 * share a buffer (the store's lock), nor a host and a path. */
static uint64_t front_id(const char *db_path)
{
    char host[256] = "", *real = realpath(db_path, NULL);
    gethostname(host, sizeof host - 1);
    hs_buf b = {0};
    hs_buf_printf(&b, "%s:%s", host, real ? real : db_path);
    free(real);
    uint64_t v = hs_ch_hash(b.p ? b.p : "", b.n, 0x46);
    hs_buf_free(&b);
    return v;
}

static int load_ids(hs_chship *s)
{
    sqlite3_stmt *st;
    int rc = 0;
    if (sqlite3_prepare_v2(s->marks, "SELECT kind, local, content FROM ids", -1, &st, NULL))
        return HS_EDB;
    while (!rc && sqlite3_step(st) == SQLITE_ROW) {
        hs_map *m = sqlite3_column_int(st, 0) == 'f' ? &s->frame_id : &s->node_id;
        rc = hs_map_put(m, (uint64_t)sqlite3_column_int64(st, 1),
                        (uint64_t)sqlite3_column_int64(st, 2));
    }
    sqlite3_finalize(st);
    if (rc || sqlite3_prepare_v2(s->marks, "SELECT local FROM unnamed", -1, &st, NULL))
        return rc ? rc : HS_EDB;
    while (!rc && sqlite3_step(st) == SQLITE_ROW) {
        if (s->nunnamed == s->capunnamed) {
            size_t cap = s->capunnamed ? s->capunnamed * 2 : 64;
            int64_t *np = realloc(s->unnamed, cap * sizeof *np);
            if (!np) {
                rc = HS_ENOMEM;
                break;
            }
            s->unnamed = np;
            s->capunnamed = cap;
        }
        s->unnamed[s->nunnamed++] = sqlite3_column_int64(st, 0);
    }
    sqlite3_finalize(st);
    return rc;
}

/* 1 when local run id names, in the buffer, the run of content id id. */
static int same_run(hs_chship *s, int64_t local, int64_t id)
{
    sqlite3_stmt *st;
    int same = 0;
    if (sqlite3_prepare_v2(s->db, "SELECT uuid FROM runs WHERE id = ?1", -1, &st, NULL)) return 0;
    sqlite3_bind_int64(st, 1, local);
    if (sqlite3_step(st) == SQLITE_ROW)
        same = hs__chship_run_id(sqlite3_column_blob(st, 0), sqlite3_column_bytes(st, 0)) == id;
    sqlite3_finalize(st);
    return same;
}

static int load_runs(hs_chship *s)
{
    sqlite3_stmt *st;
    int rc = 0;
    if (sqlite3_prepare_v2(s->marks, "SELECT " RUN_COLS " FROM runs", -1, &st, NULL)) return HS_EDB;
    while (!rc && sqlite3_step(st) == SQLITE_ROW) {
        ship_run r = {0};
        int64_t *f[] = {&r.local, &r.id,   NULL, NULL,    &r.seq,     &r.snap,  &r.series,  &r.ps,
                        &r.hx,    &r.mapt, NULL, &r.npcs, &r.nstacks, &r.stats, &r.next_seq};
        for (int i = 0; i < 15; i++)
            if (f[i]) *f[i] = sqlite3_column_int64(st, i);
        r.day = (uint16_t)sqlite3_column_int(st, 2);
        r.sig = (uint64_t)sqlite3_column_int64(st, 3);
        r.peak_sig = (uint64_t)sqlite3_column_int64(st, 10);
        r.moved = sqlite3_column_int(st, 15);
        r.ended = sqlite3_column_int(st, 16);
        r.quiet_ns = (uint64_t)sqlite3_column_int64(st, 17);
        if (!same_run(s, r.local, r.id)) continue; /* pruned, or its id taken again */
        if (s->nrs == s->caprs) {
            size_t cap = s->caprs ? s->caprs * 2 : 64;
            ship_run *np = realloc(s->rs, cap * sizeof *np);
            if (!np) {
                rc = HS_ENOMEM;
                break;
            }
            s->rs = np;
            s->caprs = cap;
        }
        rc = hs_map_put(&s->run_idx, (uint64_t)r.local, s->nrs);
        if (!rc && r.next_seq > 0)
            rc = hs_map_put(&s->shipped, (uint64_t)r.id, (uint64_t)r.next_seq);
        s->rs[s->nrs++] = r;
    }
    sqlite3_finalize(st);
    return rc;
}

/* Empties the file (it belonged to another buffer or database). */
static int start_over(hs_chship *s, int64_t dev, int64_t ino, int64_t dest)
{
    int rc = sqlite3_exec(s->marks,
                          "BEGIN; DELETE FROM ids; DELETE FROM unnamed; DELETE FROM runs; "
                          "DELETE FROM meta;",
                          NULL, NULL, NULL)
                 ? HS_EDB
                 : 0;
    if (!rc) rc = meta_put(s->marks, "dev", dev);
    if (!rc) rc = meta_put(s->marks, "ino", ino);
    if (!rc) rc = meta_put(s->marks, "dest", dest);
    if (!rc && sqlite3_exec(s->marks, "COMMIT", NULL, NULL, NULL)) rc = HS_EDB;
    if (rc) sqlite3_exec(s->marks, "ROLLBACK", NULL, NULL, NULL);
    return rc;
}

int hs__chmarks_open(hs_chship *s, const char *db_path)
{
    size_t n = strlen(db_path) + 8;
    struct stat sb;
    s->front = front_id(db_path);
    if (!(s->marks_path = malloc(n))) return HS_ENOMEM;
    snprintf(s->marks_path, n, "%s-chship", db_path);
    int rc = stat(db_path, &sb) ? HS_EIO : 0;
    if (!rc && sqlite3_open(s->marks_path, &s->marks) != SQLITE_OK) rc = HS_EDB;
    if (!rc) sqlite3_busy_timeout(s->marks, 5000);
    if (!rc && sqlite3_exec(s->marks, marks_schema, NULL, NULL, NULL)) rc = HS_EDB;
    /* the marks of this buffer and this ClickHouse database (host, port,
     * database and user: the URL as logged) */
    const char *dest = hs_ch_display(s->ch);
    int64_t dh = (int64_t)hs_ch_hash(dest, strlen(dest), 0x6d);
    int same = !rc && meta_get(s->marks, "dev", -1) == (int64_t)sb.st_dev &&
               meta_get(s->marks, "ino", -1) == (int64_t)sb.st_ino &&
               meta_get(s->marks, "dest", -1) == dh;
    if (!rc && !same) rc = start_over(s, (int64_t)sb.st_dev, (int64_t)sb.st_ino, dh);
    if (!rc && same) {
        s->wm_frame = meta_get(s->marks, "wm_frame", 0);
        s->wm_trace = meta_get(s->marks, "wm_trace", 0);
        rc = load_ids(s);
        if (!rc) rc = load_runs(s);
    }
    if (rc) {
        hs_log("ClickHouse marks file %s cannot be used (%s): a start sends the whole buffer",
               s->marks_path, s->marks ? sqlite3_errmsg(s->marks) : hs_strerror(rc));
        hs__chmarks_close(s);
        /* what was loaded stays valid: it came from a file of this buffer */
    }
    return 0;
}

static int save_run(sqlite3_stmt *st, const ship_run *r)
{
    int64_t v[] = {
        r->local,    r->id,    r->day,   (int64_t)r->sig,      r->seq,  r->snap,    r->series,
        r->ps,       r->hx,    r->mapt,  (int64_t)r->peak_sig, r->npcs, r->nstacks, r->stats,
        r->next_seq, r->moved, r->ended, (int64_t)r->quiet_ns};
    sqlite3_reset(st);
    for (int i = 0; i < 18; i++) sqlite3_bind_int64(st, i + 1, v[i]);
    return sqlite3_step(st) == SQLITE_DONE ? 0 : HS_EDB;
}

static int save_all(hs_chship *s, const size_t *idx, size_t n)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(s->marks, "INSERT OR REPLACE INTO ids VALUES (?1, ?2, ?3)", -1, &st,
                                NULL)
                 ? HS_EDB
                 : 0;
    for (size_t i = 0; !rc && i < s->nnewids; i++) {
        sqlite3_reset(st);
        sqlite3_bind_int(st, 1, s->newids[i].kind);
        sqlite3_bind_int64(st, 2, s->newids[i].local);
        sqlite3_bind_int64(st, 3, s->newids[i].content);
        if (sqlite3_step(st) != SQLITE_DONE) rc = HS_EDB;
    }
    sqlite3_finalize(st);
    st = NULL;
    if (!rc && s->unnamed_dirty) {
        rc = sqlite3_exec(s->marks, "DELETE FROM unnamed", NULL, NULL, NULL) ? HS_EDB : 0;
        if (!rc && sqlite3_prepare_v2(s->marks, "INSERT OR IGNORE INTO unnamed VALUES (?1)", -1,
                                      &st, NULL))
            rc = HS_EDB;
        for (size_t i = 0; !rc && i < s->nunnamed; i++) {
            sqlite3_reset(st);
            sqlite3_bind_int64(st, 1, s->unnamed[i]);
            if (sqlite3_step(st) != SQLITE_DONE) rc = HS_EDB;
        }
        sqlite3_finalize(st);
        st = NULL;
    }
    if (!rc && sqlite3_prepare_v2(s->marks,
                                  "INSERT OR REPLACE INTO runs (" RUN_COLS
                                  ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, "
                                  "?12, ?13, ?14, ?15, ?16, ?17, ?18)",
                                  -1, &st, NULL))
        rc = HS_EDB;
    for (size_t i = 0; !rc && i < n; i++) rc = save_run(st, &s->rs[idx[i]]);
    sqlite3_finalize(st);
    if (!rc) rc = meta_put(s->marks, "wm_frame", s->wm_frame);
    if (!rc) rc = meta_put(s->marks, "wm_trace", s->wm_trace);
    return rc;
}

void hs__chmarks_save(hs_chship *s, const size_t *idx, size_t n)
{
    if (!s->marks || (!n && !s->nnewids && !s->unnamed_dirty)) return;
    int rc = sqlite3_exec(s->marks, "BEGIN", NULL, NULL, NULL) ? HS_EDB : 0;
    if (!rc) rc = save_all(s, idx, n);
    if (!rc && sqlite3_exec(s->marks, "COMMIT", NULL, NULL, NULL)) rc = HS_EDB;
    if (rc) {
        hs_log("ClickHouse marks file %s: %s (it goes unused from now on)", s->marks_path,
               sqlite3_errmsg(s->marks));
        sqlite3_exec(s->marks, "ROLLBACK", NULL, NULL, NULL);
        /* a file that missed a pass would be behind the maps: never used again */
        sqlite3_close(s->marks);
        s->marks = NULL;
        unlink(s->marks_path);
        return;
    }
    s->unnamed_dirty = 0;
}

void hs__chmarks_forget(hs_chship *s, int64_t local)
{
    sqlite3_stmt *st;
    if (!s->marks ||
        sqlite3_prepare_v2(s->marks, "DELETE FROM runs WHERE local = ?1", -1, &st, NULL))
        return;
    sqlite3_bind_int64(st, 1, local);
    sqlite3_step(st);
    sqlite3_finalize(st);
}

void hs__chmarks_close(hs_chship *s)
{
    if (s->marks) sqlite3_close(s->marks);
    s->marks = NULL;
}

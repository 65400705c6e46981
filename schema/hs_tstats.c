/* hs_tstats: per-trace summaries of delta rows, and the migration that
 * fills them for runs stored before schema version 2. */
#include "hs_tstats.h"

#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

#include "hs_error.h"
#include "hs_schema.h"
#include "hs_snap.h"

void hs_tstats_close(hs_tstats *t, int64_t upto)
{
    if (upto <= t->last || t->bytes == 0) {
        t->last = upto;
        return;
    }
    double a = (double)t->last, c = (double)(upto - 1), n = c - a + 1, y = (double)t->bytes;
    t->sy += y * n;
    t->sxy += y * (a + c) * n / 2;
    t->syy += y * y * n;
    t->last = upto;
}

void hs_tstats_add(hs_tstats *t, int64_t bucket, int64_t delta)
{
    if (!t->rows) t->first = bucket;
    t->rows++;
    hs_tstats_close(t, bucket);
    t->bytes += delta;
    if (t->bytes > t->max) t->max = t->bytes;
    if (delta > 0) {
        if (!t->ups) t->first_up = bucket;
        t->ups++;
        t->up += (double)delta;
        t->last_up = bucket;
    } else {
        t->down -= (double)delta;
    }
}

void hs_tstats_bind(sqlite3_stmt *st, int first, const hs_tstats *t)
{
    const int64_t iv[] = {t->rows, t->first, t->last,     t->bytes,
                          t->max,  t->ups,   t->first_up, t->last_up};
    const double dv[] = {t->up, t->down, t->sy, t->sxy, t->syy};
    int i = first;
    for (size_t k = 0; k < sizeof iv / sizeof iv[0]; k++) sqlite3_bind_int64(st, i++, iv[k]);
    for (size_t k = 0; k < sizeof dv / sizeof dv[0]; k++) sqlite3_bind_double(st, i++, dv[k]);
}

void hs_tstats_read(sqlite3_stmt *st, int first, hs_tstats *t)
{
    int i = first;
    t->rows = sqlite3_column_int64(st, i++);
    t->first = sqlite3_column_int64(st, i++);
    t->last = sqlite3_column_int64(st, i++);
    t->bytes = sqlite3_column_int64(st, i++);
    t->max = sqlite3_column_int64(st, i++);
    t->ups = sqlite3_column_int64(st, i++);
    t->first_up = sqlite3_column_int64(st, i++);
    t->last_up = sqlite3_column_int64(st, i++);
    t->up = sqlite3_column_double(st, i++);
    t->down = sqlite3_column_double(st, i++);
    t->sy = sqlite3_column_double(st, i++);
    t->sxy = sqlite3_column_double(st, i++);
    t->syy = sqlite3_column_double(st, i++);
}

static int put_row(sqlite3_stmt *ins, int64_t run, int64_t trace, const hs_tstats *t)
{
    sqlite3_bind_int64(ins, 1, run);
    sqlite3_bind_int64(ins, 2, trace);
    hs_tstats_bind(ins, 3, t);
    return hs_schema_step_done(ins);
}

/* One run: its delta rows sorted by trace, then bucket (a sort the
 * migration pays once), so each trace's summary is done when the next trace
 * begins. */
static int backfill_run(sqlite3_stmt *sel, sqlite3_stmt *ins, sqlite3_stmt *mark, int64_t run)
{
    int rc = 0, step;
    int64_t trace = 0, top = -1;
    hs_tstats t;
    memset(&t, 0, sizeof t);
    sqlite3_bind_int64(sel, 1, run);
    while (!rc && (step = sqlite3_step(sel)) == SQLITE_ROW) {
        int64_t tr = sqlite3_column_int64(sel, 0), b = sqlite3_column_int64(sel, 1);
        if (tr != trace && t.rows) {
            rc = put_row(ins, run, trace, &t);
            memset(&t, 0, sizeof t);
        }
        trace = tr;
        hs_tstats_add(&t, b, sqlite3_column_int64(sel, 2));
        if (b > top) top = b;
    }
    if (!rc && step != SQLITE_DONE) rc = HS_EDB;
    sqlite3_reset(sel);
    if (!rc && t.rows) rc = put_row(ins, run, trace, &t);
    if (!rc && top >= 0) {
        sqlite3_bind_int64(mark, 1, run);
        sqlite3_bind_int64(mark, 2, top);
        if (sqlite3_step(mark) != SQLITE_DONE) rc = HS_EDB;
        sqlite3_reset(mark);
    }
    return rc;
}

int hs_tstats_backfill(sqlite3 *db, char *errmsg, size_t errlen)
{
    static const char *const sql[] = {
        "SELECT id FROM runs ORDER BY id",
        "SELECT trace, bucket, bytes FROM snapshots WHERE run = ?1 AND kind = " HS_SNAP_DELTA_SQL
        " ORDER BY trace, bucket",
        "INSERT OR REPLACE INTO trace_stats (run, trace, " HS_TSTATS_COLS ") VALUES (?1, ?2, ?3, "
        "?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
        "UPDATE runs SET stats_bucket = ?2 WHERE id = ?1",
    };
    sqlite3_stmt *st[4] = {0};
    int rc = 0, step = SQLITE_DONE;
    for (int i = 0; i < 4 && !rc; i++)
        if (sqlite3_prepare_v2(db, sql[i], -1, &st[i], NULL) != SQLITE_OK) rc = HS_EDB;
    while (!rc && (step = sqlite3_step(st[0])) == SQLITE_ROW)
        rc = backfill_run(st[1], st[2], st[3], sqlite3_column_int64(st[0], 0));
    if (!rc && step != SQLITE_DONE) rc = HS_EDB;
    if (rc && errmsg && errlen)
        snprintf(errmsg, errlen, "filling trace_stats: %s", sqlite3_errmsg(db));
    for (int i = 0; i < 4; i++) sqlite3_finalize(st[i]);
    return rc;
}

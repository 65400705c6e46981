/* hs_evrecode: events rows from wire payloads to the storage codec (see
 * hs_evrecode.h). Rows are read in rowid order a batch at a time, and the
 * batch rewritten before the next is read, so that no statement reads the
 * table while it is being written. */
#include "hs_evrecode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hs_error.h"
#include "hs_evcodec.h"
#include "hs_proto.h"

#define RECODE_BATCH 256
#define HS_STR_(x)   #x
#define HS_STR(x)    HS_STR_(x)
/* Migration 10 closes a segment as the writer does (server/store_int.h,
 * HS_EVSEG_Z_CAP). */
#define SEGMENT_Z_CAP (64u << 10)

typedef struct old_row {
    sqlite3_int64 rowid, run, seq;
    uint8_t *data;
    size_t len;
} old_row;

/* One payload re-encoded into enc; 0 or HS_E*. */
static int recode_one(hs_evenc *enc, const old_row *row, const uint8_t **out, size_t *outlen)
{
    hs_batch_it it;
    hs_event e;
    int rc = hs_events_begin(&it, row->data, row->len), more = 0;
    if (rc) return rc;
    hs_evenc_begin(enc, 1);
    uint64_t last = 0;
    while ((more = hs_events_next(&it, &e)) == 1) {
        if (e.t_ns < last) return HS_ERANGE; /* cannot happen: dt is unsigned */
        last = e.t_ns;
        hs_evenc_add(enc, &e);
    }
    if (more < 0) return more;
    return hs_evenc_finish(enc, out, outlen);
}

int hs_events_recode(sqlite3 *db, char *errmsg, size_t errlen)
{
    sqlite3_stmt *rd = NULL, *wr = NULL;
    hs_evenc enc = {0};
    old_row rows[RECODE_BATCH];
    size_t n = 0;
    int rc = HS_EDB;
    sqlite3_int64 after = 0;
    memset(rows, 0, sizeof rows);
    if (sqlite3_prepare_v2(db,
                           "SELECT rowid, run, seq, data FROM events WHERE rowid > ?1 "
                           "ORDER BY rowid LIMIT ?2",
                           -1, &rd, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "UPDATE events SET data = ?2 WHERE rowid = ?1", -1, &wr, NULL) !=
            SQLITE_OK) {
        snprintf(errmsg, errlen, "%s", sqlite3_errmsg(db));
        goto out;
    }
    for (;;) {
        n = 0;
        sqlite3_bind_int64(rd, 1, after);
        sqlite3_bind_int(rd, 2, RECODE_BATCH);
        int step;
        while ((step = sqlite3_step(rd)) == SQLITE_ROW) {
            old_row *r = &rows[n];
            r->rowid = sqlite3_column_int64(rd, 0);
            r->run = sqlite3_column_int64(rd, 1);
            r->seq = sqlite3_column_int64(rd, 2);
            r->len = (size_t)sqlite3_column_bytes(rd, 3);
            if (!(r->data = malloc(r->len ? r->len : 1))) {
                rc = HS_ENOMEM;
                snprintf(errmsg, errlen, "out of memory");
                sqlite3_reset(rd);
                goto out;
            }
            if (r->len) memcpy(r->data, sqlite3_column_blob(rd, 3), r->len);
            n++;
        }
        sqlite3_reset(rd);
        if (step != SQLITE_DONE) {
            snprintf(errmsg, errlen, "%s", sqlite3_errmsg(db));
            goto out;
        }
        if (!n) break;
        for (size_t i = 0; i < n; i++) {
            const uint8_t *blob;
            size_t len;
            int err = recode_one(&enc, &rows[i], &blob, &len);
            if (err) {
                rc = err;
                snprintf(errmsg, errlen,
                         "events row seq %lld of run %lld is not a valid EVENTS payload (%s); "
                         "the database is left at its older version",
                         (long long)rows[i].seq, (long long)rows[i].run, hs_strerror(err));
                goto out;
            }
            sqlite3_bind_int64(wr, 1, rows[i].rowid);
            sqlite3_bind_blob(wr, 2, blob, (int)len, SQLITE_STATIC);
            if (sqlite3_step(wr) != SQLITE_DONE) {
                snprintf(errmsg, errlen, "%s", sqlite3_errmsg(db));
                sqlite3_reset(wr);
                goto out;
            }
            sqlite3_reset(wr);
        }
        after = rows[n - 1].rowid;
        for (size_t i = 0; i < n; i++) {
            free(rows[i].data);
            rows[i].data = NULL;
        }
    }
    rc = 0;
out:
    for (size_t i = 0; i < RECODE_BATCH; i++) free(rows[i].data);
    sqlite3_finalize(rd);
    sqlite3_finalize(wr);
    hs_evenc_free(&enc);
    return rc;
}

/* ---- migration 10: rows of one frame into segments ----------------------- */

typedef struct seg_state {
    sqlite3_stmt *put;
    hs_evseg seg;
    sqlite3_int64 run, seq; /* the open segment's */
    hs_evdec dec;
} seg_state;

static int seg_close(sqlite3 *db, seg_state *g)
{
    if (!g->seg.n) return 0;
    const uint8_t *blob;
    size_t len;
    int rc = hs_evseg_blob(&g->seg, 1, &blob, &len);
    if (rc) return rc;
    sqlite3_bind_int64(g->put, 1, g->run);
    sqlite3_bind_int64(g->put, 2, g->seq);
    sqlite3_bind_int64(g->put, 3, (sqlite3_int64)g->seg.t_first);
    sqlite3_bind_int64(g->put, 4, (sqlite3_int64)g->seg.t_last);
    sqlite3_bind_int64(g->put, 5, (sqlite3_int64)g->seg.n);
    sqlite3_bind_blob(g->put, 6, blob, (int)len, SQLITE_STATIC);
    rc = sqlite3_step(g->put) == SQLITE_DONE ? 0 : HS_EDB;
    sqlite3_reset(g->put);
    (void)db;
    hs_evseg_begin(&g->seg, 1);
    return rc;
}

/* One old row's events into the open segment, which closes first when the
 * run changes or the row could take it past its cap, and after when full. */
static int seg_add_row(sqlite3 *db, seg_state *g, const old_row *row)
{
    int rc = 0, more;
    if (g->seg.n && (row->run != g->run ||
                     hs_evseg_raw(&g->seg) + 2 * (uint64_t)row->len + 64 > HS_EVSEG_RAW_CAP))
        rc = seg_close(db, g);
    if (rc || (rc = hs_evdec_open(&g->dec, row->data, row->len))) return rc;
    if (!g->seg.n) {
        g->run = row->run;
        g->seq = row->seq;
    }
    hs_event e;
    while ((more = hs_evdec_next(&g->dec, &e)) == 1) hs_evseg_add(&g->seg, &e);
    if (more < 0) return more;
    if (hs_evseg_zlen(&g->seg) >= SEGMENT_Z_CAP || hs_evseg_raw(&g->seg) >= HS_EVSEG_RAW_CAP)
        rc = seg_close(db, g);
    return rc;
}

/* A batch of old rows after (run, seq) *at, deleted as they are read; 0
 * rows at the end. */
static int seg_batch(sqlite3 *db, sqlite3_stmt *rd, sqlite3_stmt *del, old_row *rows, size_t *n,
                     sqlite3_int64 at[2])
{
    *n = 0;
    sqlite3_bind_int64(rd, 1, at[0]);
    sqlite3_bind_int64(rd, 2, at[1]);
    int step;
    while ((step = sqlite3_step(rd)) == SQLITE_ROW) {
        old_row *r = &rows[*n];
        r->rowid = sqlite3_column_int64(rd, 0);
        r->run = sqlite3_column_int64(rd, 1);
        r->seq = sqlite3_column_int64(rd, 2);
        r->len = (size_t)sqlite3_column_bytes(rd, 3);
        free(r->data);
        if (!(r->data = malloc(r->len ? r->len : 1))) {
            sqlite3_reset(rd);
            return HS_ENOMEM;
        }
        if (r->len) memcpy(r->data, sqlite3_column_blob(rd, 3), r->len);
        (*n)++;
    }
    sqlite3_reset(rd);
    if (step != SQLITE_DONE) return HS_EDB;
    for (size_t i = 0; i < *n; i++) {
        sqlite3_bind_int64(del, 1, rows[i].rowid);
        step = sqlite3_step(del);
        sqlite3_reset(del);
        if (step != SQLITE_DONE) return HS_EDB;
    }
    if (*n) {
        at[0] = rows[*n - 1].run;
        at[1] = rows[*n - 1].seq;
    }
    (void)db;
    return 0;
}

int hs_events_segment(sqlite3 *db, char *errmsg, size_t errlen)
{
    sqlite3_stmt *rd = NULL, *del = NULL;
    seg_state g = {0};
    old_row rows[RECODE_BATCH];
    memset(rows, 0, sizeof rows);
    sqlite3_int64 at[2] = {-1, -1};
    size_t n = 0;
    int rc = HS_EDB;
    /* rows in (run, seq) order: each segment is written with the seq of its
     * first row, which was read (and deleted) before it, so no segment is
     * read again */
    if (sqlite3_prepare_v2(db,
                           "SELECT rowid, run, seq, data FROM events WHERE (run, seq) > (?1, ?2) "
                           "ORDER BY run, seq LIMIT " HS_STR(RECODE_BATCH),
                           -1, &rd, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "DELETE FROM events WHERE rowid = ?1", -1, &del, NULL) !=
            SQLITE_OK ||
        sqlite3_prepare_v2(db,
                           "INSERT INTO events (run, seq, t_first_ns, t_last_ns, n_events, data) "
                           "VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                           -1, &g.put, NULL) != SQLITE_OK)
        goto out;
    hs_evseg_begin(&g.seg, 1);
    while ((rc = seg_batch(db, rd, del, rows, &n, at)) == 0 && n) {
        for (size_t i = 0; i < n && !rc; i++) rc = seg_add_row(db, &g, &rows[i]);
        if (rc) break;
    }
    if (!rc) rc = seg_close(db, &g);
out:
    if (rc == HS_EDB || (rc && !n))
        snprintf(errmsg, errlen, "%s", sqlite3_errmsg(db));
    else if (rc)
        snprintf(errmsg, errlen,
                 "an events row of run %lld cannot be read (%s); the database is left at its "
                 "older version",
                 (long long)g.run, hs_strerror(rc));
    for (size_t i = 0; i < RECODE_BATCH; i++) free(rows[i].data);
    sqlite3_finalize(rd);
    sqlite3_finalize(del);
    sqlite3_finalize(g.put);
    hs_evseg_free(&g.seg);
    hs_evdec_free(&g.dec);
    return rc;
}

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

/* hs_schema: opening a database and applying the embedded migrations. */
#include "hs_schema.h"

#include <stdarg.h>
#include <stdio.h>

#include "hs_error.h"
#include "hs_tstats.h"

/* What a migration does beyond its SQL file, in the same transaction: the
 * backfills that SQL cannot do the way the code does them. */
static int after_sql(sqlite3 *db, int version, char *errmsg, size_t errlen)
{
    return version == 2 ? hs_tstats_backfill(db, errmsg, errlen) : 0;
}

static void set_err(char *buf, size_t len, const char *fmt, ...)
{
    if (!buf || !len) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}

int hs_schema_version(void)
{
    return hs_migration_count ? hs_migrations[hs_migration_count - 1].version : 0;
}

static int user_version(sqlite3 *db, int *out)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL) != SQLITE_OK) return HS_EDB;
    int rc = sqlite3_step(st);
    *out = rc == SQLITE_ROW ? sqlite3_column_int(st, 0) : 0;
    sqlite3_finalize(st);
    return rc == SQLITE_ROW ? 0 : HS_EDB;
}

int hs_schema_migrate(sqlite3 *db, char *errmsg, size_t errlen)
{
    int have;
    if (user_version(db, &have)) {
        set_err(errmsg, errlen, "cannot read schema version: %s", sqlite3_errmsg(db));
        return HS_EDB;
    }
    if (have > hs_schema_version()) {
        set_err(errmsg, errlen, "database schema version %d is newer than this build (%d)", have,
                hs_schema_version());
        return HS_EVERSION;
    }
    for (int i = 0; i < hs_migration_count; i++) {
        const hs_migration *m = &hs_migrations[i];
        if (m->version <= have) continue;
        char *err = NULL, cmsg[256] = "";
        char pragma[64];
        snprintf(pragma, sizeof pragma, "PRAGMA user_version = %d", m->version);
        /* IMMEDIATE: two processes opening a new file must not both migrate. */
        if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, &err) != SQLITE_OK ||
            (user_version(db, &have) == 0 && have < m->version &&
             (sqlite3_exec(db, m->sql, NULL, NULL, &err) != SQLITE_OK ||
              after_sql(db, m->version, cmsg, sizeof cmsg) != 0 ||
              sqlite3_exec(db, pragma, NULL, NULL, &err) != SQLITE_OK)) ||
            sqlite3_exec(db, "COMMIT", NULL, NULL, &err) != SQLITE_OK) {
            set_err(errmsg, errlen, "migration %s failed: %s", m->name,
                    err       ? err
                    : cmsg[0] ? cmsg
                              : sqlite3_errmsg(db));
            sqlite3_free(err);
            sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
            return HS_EDB;
        }
    }
    return 0;
}

int hs_schema_open(sqlite3 **out, const char *path, int flags, char *errmsg, size_t errlen)
{
    sqlite3 *db = NULL;
    int ro = flags & HS_SCHEMA_READONLY;
    int oflags = ro ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    *out = NULL;
    if (sqlite3_open_v2(path, &db, oflags | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
        set_err(errmsg, errlen, "cannot open database %s: %s", path,
                db ? sqlite3_errmsg(db) : "out of memory");
        sqlite3_close_v2(db);
        return ro ? HS_ENOENT : HS_EIO;
    }
    sqlite3_busy_timeout(db, 5000);
    sqlite3_extended_result_codes(db, 1);
    int err = 0;
    if (!ro) {
        char *msg = NULL;
        /* page_size only acts on a new file (before WAL): 16 KiB pages pack
         * the events rows (one EVENTS payload each, often 1-10 KiB) with
         * little slack, where 4 KiB pages would hold one such row each. */
        if (sqlite3_exec(db,
                         "PRAGMA page_size=16384; PRAGMA journal_mode=WAL; "
                         "PRAGMA synchronous=NORMAL;",
                         NULL, NULL, &msg) != SQLITE_OK) {
            set_err(errmsg, errlen, "cannot set up database %s: %s", path, msg);
            sqlite3_free(msg);
            err = HS_EIO;
        } else {
            err = hs_schema_migrate(db, errmsg, errlen);
        }
    } else {
        int have = 0;
        if (user_version(db, &have) || have < 1) {
            set_err(errmsg, errlen, "%s is not a heapstore database", path);
            err = HS_EVERSION;
        } else if (have > hs_schema_version()) {
            set_err(errmsg, errlen, "database schema version %d is newer than this build (%d)",
                    have, hs_schema_version());
            err = HS_EVERSION;
        }
    }
    if (err) {
        sqlite3_close_v2(db);
        return err;
    }
    *out = db;
    return 0;
}

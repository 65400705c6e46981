/* hs_schema: opening a database and applying the embedded migrations. */
#include "hs_schema.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "hs_error.h"
#include "hs_evrecode.h"
#include "hs_maps.h"
#include "hs_snaps.h"
#include "hs_symcache.h"
#include "hs_tree.h"
#include "hs_tstats.h"

static void set_err(char *buf, size_t len, const char *fmt, ...);

/* Migration 9: the runs' summary columns, added when missing (a file taken
 * back to an older version number by hand keeps them, and SQLite has no ADD
 * COLUMN IF NOT EXISTS), then computed for every run that has ended, with
 * the text the writer and the readers use (hs_schema.h). */
static int run_summaries(sqlite3 *db, char *errmsg, size_t errlen)
{
    static const char *const cols[][2] = {{"rss_peak_bytes", "INTEGER"},
                                          {"leak_bytes_per_s", "REAL"}};
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++) {
        char sql[200];
        sqlite3_stmt *st;
        int have = 0;
        if (sqlite3_prepare_v2(db, "SELECT COUNT(*) FROM pragma_table_info('runs') WHERE name = ?1",
                               -1, &st, NULL) != SQLITE_OK)
            goto fail;
        sqlite3_bind_text(st, 1, cols[i][0], -1, SQLITE_STATIC);
        if (sqlite3_step(st) == SQLITE_ROW) have = sqlite3_column_int(st, 0);
        sqlite3_finalize(st);
        snprintf(sql, sizeof sql, "ALTER TABLE runs ADD COLUMN %s %s", cols[i][0], cols[i][1]);
        if (!have && sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK) goto fail;
    }
    if (sqlite3_exec(db,
                     "UPDATE runs SET rss_peak_bytes = " HS_SCHEMA_RSS_PEAK_SQL(
                         "runs.id") ", leak_bytes_per_s = " HS_SCHEMA_LEAK_SQL("runs.id",
                                                                               "runs.granularity_"
                                                                               "ns") " WHERE state "
                                                                                     "<> 'open'",
                     NULL, NULL, NULL) == SQLITE_OK)
        return 0;
fail:
    set_err(errmsg, errlen, "the runs' summaries: %s", sqlite3_errmsg(db));
    return HS_EDB;
}

/* The migrations that move a table's rows into stored blocks, in C after
 * their SQL, and what an error names. */
static const struct {
    int version;
    int (*move)(sqlite3 *db);
    const char *what;
} block_moves[] = {
    {11, hs_tree_migrate, "the stack tree's blocks"},
    {13, hs_maps_migrate, "the runs' id maps"},
    {14, hs_symcache_migrate, "the symbol cache's blocks"},
    {15, hs_snaps_migrate, "the snapshots' blocks"},
};

/* What a migration does beyond its SQL file, in the same transaction: the
 * backfills that SQL cannot do the way the code does them. */
static int after_sql(sqlite3 *db, int version, char *errmsg, size_t errlen)
{
    switch (version) {
    case 9:
        return run_summaries(db, errmsg, errlen);
    case 2:
        return hs_tstats_backfill(db, errmsg, errlen);
    case 6:
        return hs_events_recode(db, errmsg, errlen);
    case 10:
        return hs_events_segment(db, errmsg, errlen);
    }
    for (size_t i = 0; i < sizeof block_moves / sizeof block_moves[0]; i++) {
        if (block_moves[i].version != version) continue;
        int rc = block_moves[i].move(db);
        if (rc)
            set_err(errmsg, errlen, "%s: %s", block_moves[i].what,
                    rc == HS_EDB ? sqlite3_errmsg(db) : hs_strerror(rc));
        return rc;
    }
    return 0;
}

static void set_err(char *buf, size_t len, const char *fmt, ...)
{
    if (!buf || !len) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}

int hs_schema_has_table(sqlite3 *db, const char *name)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db,
                           "SELECT count(*) FROM main.sqlite_schema WHERE type = 'table' AND "
                           "name = ?1",
                           -1, &st, NULL) != SQLITE_OK)
        return HS_EDB;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int(st, 0) > 0 : HS_EDB;
    sqlite3_finalize(st);
    return rc;
}

int hs_schema_step_done(sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    return rc == SQLITE_DONE ? 0 : HS_EDB;
}

int hs_schema_sql_register(sqlite3 *db)
{
    int rc = hs_tree_sql_register(db);
    if (rc == SQLITE_OK) rc = hs_snaps_sql_register(db);
    return rc == SQLITE_OK ? hs_maps_sql_register(db) : rc;
}

static int auto_entry(sqlite3 *db, char **err, const void *api)
{
    (void)err, (void)api;
    return hs_schema_sql_register(db);
}

void hs_schema_sql_auto(void)
{
    sqlite3_auto_extension((void (*)(void))auto_entry);
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

int hs_schema_db_version(sqlite3 *db)
{
    int v = 0;
    return user_version(db, &v) ? 0 : v;
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

int hs_schema_readonly_why(const char *path, char *why, size_t whylen)
{
    /* SQLite follows a link to the file and makes its -wal and -shm there */
    char real[PATH_MAX];
    if (realpath(path, real)) path = real;
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    struct statvfs vfs;
    if (statvfs(access(path, F_OK) == 0 ? path : dir, &vfs) == 0 && (vfs.f_flag & ST_RDONLY)) {
        set_err(why, whylen, "is on a read-only file system");
        return 1;
    }
    if (access(path, F_OK) == 0 && access(path, W_OK) != 0) {
        set_err(why, whylen, "is not writable (%s)", strerror(errno));
        return 1;
    }
    /* SQLite makes PATH-wal and PATH-shm beside the file; existing ones that
     * can be written do without the directory. */
    char wal[4200], shm[4200];
    snprintf(wal, sizeof wal, "%s-wal", path);
    snprintf(shm, sizeof shm, "%s-shm", path);
    if (access(dir, W_OK) != 0 && (access(wal, W_OK) != 0 || access(shm, W_OK) != 0)) {
        set_err(why, whylen, "is in a directory that is not writable (%s)", strerror(errno));
        return 1;
    }
    return 0;
}

/* "file:" URI of path, opened immutable: SQLite then takes no locks and
 * needs no -shm file, which a read-only location cannot hold. */
static char *immutable_uri(const char *path)
{
    sqlite3_str *u = sqlite3_str_new(NULL);
    sqlite3_str_appendall(u, "file:");
    for (const char *p = path; *p; p++) {
        if (*p == '%' || *p == '?' || *p == '#')
            sqlite3_str_appendf(u, "%%%02x", (unsigned char)*p);
        else
            sqlite3_str_appendchar(u, 1, *p);
    }
    sqlite3_str_appendall(u, "?immutable=1");
    return sqlite3_str_finish(u);
}

static int file_size_nonzero(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && st.st_size > 0;
}

/* Opens path read-only and checks that it is heapstore's. */
static int open_readonly(sqlite3 **out, const char *path, char *errmsg, size_t errlen)
{
    sqlite3 *db = NULL;
    int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL);
    int have = 0;
    if (rc == SQLITE_OK) {
        sqlite3_busy_timeout(db, 5000);
        sqlite3_extended_result_codes(db, 1);
        rc = user_version(db, &have) ? sqlite3_errcode(db) : SQLITE_OK;
    }
    if ((rc & 0xff) == SQLITE_CANTOPEN && db) {
        /* A WAL database on a location that cannot be written: no -shm can be
         * made there. Without a -wal everything is in the file: read it as
         * immutable. A -wal without its -shm cannot be read faithfully. */
        char wal[4200], why[256] = "";
        snprintf(wal, sizeof wal, "%s-wal", path);
        if (!file_size_nonzero(wal) && hs_schema_readonly_why(path, why, sizeof why)) {
            char *uri = immutable_uri(path);
            sqlite3_close_v2(db);
            db = NULL;
            rc = uri ? sqlite3_open_v2(uri, &db,
                                       SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX,
                                       NULL)
                     : SQLITE_NOMEM;
            sqlite3_free(uri);
            if (rc == SQLITE_OK) {
                sqlite3_extended_result_codes(db, 1);
                rc = user_version(db, &have) ? sqlite3_errcode(db) : SQLITE_OK;
            }
        } else if (why[0]) {
            set_err(errmsg, errlen,
                    "cannot read %s: it %s and its -wal file cannot be read without its -shm "
                    "file (copy the three files to a writable place)",
                    path, why);
            sqlite3_close_v2(db);
            return HS_EIO;
        }
    }
    if (rc != SQLITE_OK) {
        set_err(errmsg, errlen, "cannot open database %s: %s", path,
                db ? sqlite3_errmsg(db) : "out of memory");
        sqlite3_close_v2(db);
        return (rc & 0xff) == SQLITE_CANTOPEN ? HS_ENOENT : HS_EIO;
    }
    int err = 0;
    if (have < 1) {
        set_err(errmsg, errlen, "%s is not a heapstore database", path);
        err = HS_EVERSION;
    } else if (have > hs_schema_version()) {
        set_err(errmsg, errlen, "database schema version %d is newer than this build (%d)", have,
                hs_schema_version());
        err = HS_EVERSION;
    }
    if (err) {
        sqlite3_close_v2(db);
        return err;
    }
    *out = db;
    return 0;
}

/* 1 when db holds tables or views but no heapstore schema version: someone
 * else's database. */
static int foreign(sqlite3 *db)
{
    sqlite3_stmt *st;
    int n = 0;
    if (sqlite3_prepare_v2(db,
                           "SELECT (SELECT user_version FROM pragma_user_version) = 0 AND "
                           "EXISTS (SELECT 1 FROM sqlite_schema WHERE type IN ('table', 'view'))",
                           -1, &st, NULL) != SQLITE_OK)
        return 0;
    if (sqlite3_step(st) == SQLITE_ROW) n = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    return n;
}

int hs_schema_open(sqlite3 **out, const char *path, int flags, char *errmsg, size_t errlen)
{
    *out = NULL;
    hs_schema_sql_auto(); /* every connection reads traces, snapshots and the id maps */
    if (flags & HS_SCHEMA_READONLY) return open_readonly(out, path, errmsg, errlen);
    sqlite3 *db = NULL;
    char why[256] = "";
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                        NULL) != SQLITE_OK) {
        int ro = hs_schema_readonly_why(path, why, sizeof why);
        set_err(errmsg, errlen, "cannot open database %s: %s%s%s%s", path,
                db ? sqlite3_errmsg(db) : "out of memory", ro ? " (it " : "", ro ? why : "",
                ro ? ")" : "");
        sqlite3_close_v2(db);
        return HS_EIO;
    }
    sqlite3_busy_timeout(db, 5000);
    sqlite3_extended_result_codes(db, 1);
    int err = 0;
    char *msg = NULL;
    /* SQLite opens a write-protected file read-only without a word; on a
     * read-only location even reading may need the fallback above. */
    int ro = sqlite3_db_readonly(db, "main") == 1;
    /* page_size and auto_vacuum only act on a new file (before WAL and
     * tables): 4 KiB pages, since events rows are segments of many frames
     * (schema 10), tens of KiB each, and every table and index of a small run
     * takes a page at least; incremental vacuum, so that the pages an open
     * segment's rewritten row leaves free can be given back when the
     * writer stops (hs_store_free). Files made before keep theirs. */
    if (!ro && sqlite3_exec(db,
                            "PRAGMA page_size=4096; PRAGMA auto_vacuum=INCREMENTAL; "
                            "PRAGMA journal_mode=WAL; "
                            "PRAGMA synchronous=NORMAL;",
                            NULL, NULL, &msg) != SQLITE_OK) {
        int code = sqlite3_errcode(db) & 0xff;
        ro = (code == SQLITE_READONLY || code == SQLITE_CANTOPEN) &&
             hs_schema_readonly_why(path, why, sizeof why);
        if (!ro) {
            set_err(errmsg, errlen, "cannot set up database %s: %s", path, msg);
            err = HS_EIO;
        }
    }
    sqlite3_free(msg);
    if (!err && ro) {
        sqlite3_close_v2(db);
        if (!(flags & HS_SCHEMA_ALLOW_READONLY)) {
            if (!why[0]) hs_schema_readonly_why(path, why, sizeof why);
            set_err(errmsg, errlen, "database %s is read-only: it %s", path,
                    why[0] ? why : "cannot be written");
            return HS_EIO;
        }
        return open_readonly(out, path, errmsg, errlen);
    }
    if (!err && foreign(db)) {
        set_err(errmsg, errlen,
                "%s is not a heapstore database: it holds tables of its own and no heapstore "
                "schema version; refusing to add heapstore's tables to it (use another --db)",
                path);
        err = HS_EVERSION;
    }
    if (!err) err = hs_schema_migrate(db, errmsg, errlen);
    if (err) {
        sqlite3_close_v2(db);
        return err;
    }
    *out = db;
    return 0;
}

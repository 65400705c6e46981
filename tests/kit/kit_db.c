/* kit_db: reading one value from a database (kit_db.h). */
#include "hs_testkit.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#include <cmocka.h>
#include <sqlite3.h>

static int64_t vqh(sqlite3 *h, const char *fmt, va_list ap)
{
    char *sql = sqlite3_vmprintf(fmt, ap);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(h, sql, -1, &st, NULL) != SQLITE_OK) {
        fprintf(stderr, "SQL error: %s in %s\n", sqlite3_errmsg(h), sql);
        fail();
    }
    int rc = sqlite3_step(st);
    int64_t v = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : INT64_MIN;
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
        fprintf(stderr, "SQL error: %s in %s\n", sqlite3_errmsg(h), sql);
        fail();
    }
    sqlite3_finalize(st);
    sqlite3_free(sql);
    return v;
}

static int64_t vq(const char *db, const char *fmt, va_list ap)
{
    sqlite3 *h;
    if (sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        fprintf(stderr, "cannot open %s\n", db);
        fail();
    }
    sqlite3_busy_timeout(h, 10000);
    int64_t v = vqh(h, fmt, ap);
    sqlite3_close(h);
    return v;
}

int64_t tk_qh(sqlite3 *h, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int64_t v = vqh(h, fmt, ap);
    va_end(ap);
    return v;
}

int64_t tk_q(const char *db, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int64_t v = vq(db, fmt, ap);
    va_end(ap);
    return v;
}

int64_t tk_poll(const char *db, int64_t want, int timeout_ms, const char *fmt, ...)
{
    uint64_t deadline = tk_now_ms() + (uint64_t)timeout_ms;
    int64_t v;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        v = tk_file_size(db) ? vq(db, fmt, ap) : INT64_MIN;
        va_end(ap);
        if ((v != INT64_MIN && v >= want) || tk_now_ms() > deadline) return v;
        tk_sleep_ms(20);
    }
}

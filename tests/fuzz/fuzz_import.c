/* Fuzzes the import path (hs_store_import, server/store_import.c): the bytes
 * of a `file://` collector stream, loaded into a real SQLite database through
 * the same hs_store calls the server's writer makes. Beyond "no sanitizer
 * report", the store must keep its promises:
 *  - an import that succeeds leaves its run closed ('ended' with BYE, else
 *    'lost') with as many events stored as the import says it applied;
 *  - importing the same bytes again stores nothing more: every frame is
 *    skipped and the run's counters, rollups and event rows are unchanged;
 *  - after an import that fails, the database still answers.
 * The database lives in /dev/shm when it can (speed) and is recreated every
 * few thousand inputs so that it stays small. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "fuzz.h"
#include "hs_store.h"

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        if (!(x)) {                                                                                \
            fprintf(stderr, "fuzz_import: check failed: %s\n", #x);                                \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#define RESET_EVERY 4000

static hs_store *store;
static sqlite3 *ro; /* a second connection, as the server's readers have */
static char path[256];
static int inputs;

static void db_close(void)
{
    sqlite3_close_v2(ro);
    ro = NULL;
    hs_store_free(store);
    store = NULL;
    char p[300];
    unlink(path);
    snprintf(p, sizeof p, "%s-wal", path);
    unlink(p);
    snprintf(p, sizeof p, "%s-shm", path);
    unlink(p);
}

static void db_open(void)
{
    if (!path[0]) {
        const char *dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(path, sizeof path, "%s/hs-fuzz-import-%d.db", dir, (int)getpid());
        atexit(db_close);
    }
    char err[512];
    hs_store_config cfg = {.granularity_ns = 1000000, .keyframe_every = 4};
    CHECK(hs_store_open(&store, path, &cfg, err, sizeof err) == 0);
    CHECK(sqlite3_open_v2(path, &ro, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
    sqlite3_busy_timeout(ro, 5000);
}

/* The run's row and rollups in one line of text, to compare two moments. */
static void run_state(int64_t run, char *out, size_t len)
{
    static const char sql[] =
        "SELECT state, next_seq, alloc_events, free_events, peak_bytes, live_bytes, live_count,"
        " (SELECT count(*) || '/' || coalesce(sum(length(data)), 0) FROM events WHERE run = ?1),"
        " (SELECT count(*) || '/' || coalesce(sum(bytes), 0) FROM snapshots WHERE run = ?1),"
        " (SELECT count(*) FROM heap_series WHERE run = ?1)"
        " FROM runs WHERE id = ?1";
    sqlite3_stmt *st;
    CHECK(sqlite3_prepare_v2(ro, sql, -1, &st, NULL) == SQLITE_OK);
    sqlite3_bind_int64(st, 1, run);
    out[0] = '\0';
    if (sqlite3_step(st) == SQLITE_ROW) {
        size_t w = 0;
        for (int i = 0; i < sqlite3_column_count(st) && w < len; i++) {
            const char *t = (const char *)sqlite3_column_text(st, i);
            w += (size_t)snprintf(out + w, len - w, "%s|", t ? t : "NULL");
        }
    }
    sqlite3_finalize(st);
}

static int64_t q_int(const char *sql, int64_t arg)
{
    sqlite3_stmt *st;
    CHECK(sqlite3_prepare_v2(ro, sql, -1, &st, NULL) == SQLITE_OK);
    sqlite3_bind_int64(st, 1, arg);
    CHECK(sqlite3_step(st) == SQLITE_ROW);
    int64_t n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 256 * 1024) return 0;
    if (store && ++inputs % RESET_EVERY == 0) db_close();
    if (!store) db_open();
    hs_import_stats a, b;
    char err[512], before[1024], after[1024];
    int64_t last_run = q_int("SELECT coalesce(max(id), 0) + ?1 FROM runs", 0);
    int rc = hs_store_import(store, data, size, &a, err, sizeof err);
    if (rc) {
        CHECK(err[0]); /* a failure always says why */
        q_int("SELECT count(*) + ?1 FROM runs", 0);
        return 0;
    }
    CHECK(a.run_id > 0 && a.skipped <= a.frames && a.partial_bytes <= size);
    run_state(a.run_id, before, sizeof before);
    CHECK(before[0]);
    if (a.run_id > last_run) {
        /* A new run holds exactly what this import applied, and is closed. */
        CHECK(!strncmp(before, a.bye ? "ended|" : "lost|", a.bye ? 6 : 5));
        CHECK(a.skipped == 0);
        CHECK(q_int("SELECT alloc_events + free_events FROM runs WHERE id = ?1", a.run_id) ==
              (int64_t)a.events);
    }

    rc = hs_store_import(store, data, size, &b, err, sizeof err);
    CHECK(rc == 0);
    CHECK(b.run_id == a.run_id && b.frames == a.frames && b.skipped == b.frames);
    run_state(a.run_id, after, sizeof after);
    if (strcmp(before, after)) {
        fprintf(stderr, "fuzz_import: a second import changed the run:\n  %s\n  %s\n", before,
                after);
        abort();
    }
    return 0;
}

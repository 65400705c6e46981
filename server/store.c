/* hs_store: the database connection, its statements, runs and transactions.
 * Frames are applied in store_frames.c, rollups live in store_rollup.c, the
 * runs' id maps in store_maps.c, the helpers all of them use in store_db.c;
 * they share store_int.h. The layers point one way: store.c ->
 * store_frames.c -> store_rollup.c and store_maps.c -> store_db.c. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "hs_error.h"
#include "hs_text.h"
#include "hs_schema.h"
#include "hs_snap.h"
#include "store_int.h"

static const char *const stmt_sql[ST_COUNT] = {
    [ST_RUN_BY_UUID] = "SELECT id, state, next_seq, granularity_ns, keyframe_every, sample_bytes, "
                       "resume_key FROM runs WHERE uuid = ?1",
    [ST_RUN_INSERT] = "INSERT INTO runs (uuid, parent_uuid, parent_id, program, argv, host, pid, "
                      "ppid, start_unix_ns, sample_bytes, max_depth, rss_interval_ms, "
                      "granularity_ns, keyframe_every, collector_version, next_seq, resume_key) "
                      "VALUES (?1, ?2, (SELECT id FROM runs WHERE uuid = ?2), ?3, ?4, ?5, ?6, ?7, "
                      "?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
    [ST_RUN_CHILDREN] = "UPDATE runs SET parent_id = ?1 WHERE parent_uuid = ?2 AND parent_id IS "
                        "NULL",
    [ST_LABEL] = "INSERT OR REPLACE INTO run_labels (run, key, value) VALUES (?1, ?2, ?3)",
    [ST_RUN_UPDATE] = "UPDATE runs SET next_seq = ?2, alloc_events = ?3, free_events = ?4, "
                      "end_ns = ?5, live_bytes = ?6, live_count = ?7, peak_bytes = ?8, "
                      "peak_count = ?9, peak_t_ns = ?10, total_alloc_bytes = ?11, "
                      /* the exact count (?13) when the run has exact totals; else
                       * the size histogram's (estimated from the samples) once
                       * the collector has sent one */
                      "total_alloc_count = coalesce(?13, (SELECT sum(allocs) FROM size_hist "
                      "WHERE run = ?1), ?12) WHERE id = ?1",
    [ST_RUN_STATE] = "UPDATE runs SET state = ?2, clean_exit = ?3 WHERE id = ?1",
    [ST_RUN_BYE] = "UPDATE runs SET bye_alloc_events = ?2, bye_free_events = ?3, "
                   "collector_peak_bytes = ?4 WHERE id = ?1",
    [ST_RUN_DROP] = "UPDATE runs SET "
                    "dropped_alloc_events = CASE ?2 WHEN 1 THEN ?3 ELSE dropped_alloc_events END, "
                    "dropped_free_events = CASE ?2 WHEN 2 THEN ?3 ELSE dropped_free_events END, "
                    "dropped_alloc_bytes = CASE ?2 WHEN 3 THEN ?3 ELSE dropped_alloc_bytes END, "
                    "dropped_free_bytes = CASE ?2 WHEN 4 THEN ?3 ELSE dropped_free_bytes END, "
                    "stacks_truncated = CASE ?2 WHEN 5 THEN ?3 ELSE stacks_truncated END, "
                    "unwind_failed = CASE ?2 WHEN 6 THEN ?3 ELSE unwind_failed END, "
                    "live_set_full = CASE ?2 WHEN 7 THEN ?3 ELSE live_set_full END, "
                    "python_fallback = CASE ?2 WHEN 8 THEN ?3 ELSE python_fallback END, "
                    "main_end_ns = CASE ?2 WHEN 9 THEN nullif(?3, 0) ELSE main_end_ns END, "
                    "python_small_unseen = CASE ?2 WHEN 10 THEN ?3 ELSE python_small_unseen END "
                    "WHERE id = ?1",
    [ST_MAPPING] = "INSERT OR REPLACE INTO mappings (run, t_ns, start, end, file_offset, "
                   "build_id, path) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    /* by frames_function (012_frame_keys.sql), then the key */
    [ST_FRAME_GET] = "SELECT id FROM frames WHERE function = ?1 AND " HS_SCHEMA_FRAME_AT_SQL
                     " = ?2 AND key = ?3",
    [ST_FRAME_INSERT] = "INSERT INTO frames (function, file, line, module, module_offset, alias) "
                        "VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    [ST_EVENTS] = "INSERT OR REPLACE INTO events (run, seq, t_first_ns, t_last_ns, n_events, "
                  "data) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    [ST_SNAP_DEL_PEAK] = "DELETE FROM snapshot_blocks WHERE run = ?1 AND kind = " HS_SNAP_PEAK_SQL,
    [ST_SERIES] = "INSERT OR REPLACE INTO heap_series (run, bucket, live_bytes, live_count, "
                  "max_bytes, alloc_bytes, free_bytes) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    [ST_PROCESS] = "INSERT OR REPLACE INTO process_samples (run, t_ns, rss_bytes, vsize_bytes) "
                   "VALUES (?1, ?2, ?3, ?4)",
    [ST_SIZES] = "INSERT OR REPLACE INTO size_hist (run, bucket, allocs, bytes) VALUES "
                 "(?1, ?2, ?3, ?4)",
    [ST_MAPS_LOAD] = "SELECT seq, data FROM run_maps WHERE run = ?1 AND kind = ?2 ORDER BY seq",
    [ST_LOAD_EVENTS] = "SELECT seq, data FROM events_all WHERE run = ?1 ORDER BY seq",
    [ST_CLEAR_SNAP] = "DELETE FROM snapshot_blocks WHERE run = ?1",
    [ST_CLEAR_WINDOWS] = "DELETE FROM snapshot_series WHERE run = ?1",
    [ST_CLEAR_SERIES] = "DELETE FROM heap_series WHERE run = ?1",
    [ST_OPEN_RUNS] = "SELECT uuid FROM runs WHERE state = 'open'",
    [ST_RETAIN] = "DELETE FROM events WHERE rowid IN (SELECT e.rowid FROM runs r JOIN events e "
                  "ON e.run = r.id WHERE r.state != 'open' AND e.t_last_ns < ?1 - "
                  "r.start_unix_ns LIMIT ?2)",
    [ST_TSTATS] = "INSERT OR REPLACE INTO trace_stats (run, trace, " HS_TSTATS_COLS ") VALUES "
                  "(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
    [ST_TSTATS_MARK] = "UPDATE runs SET stats_bucket = ?2 WHERE id = ?1",
    [ST_TSTATS_CLEAR] = "DELETE FROM trace_stats WHERE run = ?1",
    /* schema 14: a build's block seq of symbol answers; its last block */
    [ST_SYMCACHE] =
        "INSERT OR REPLACE INTO symbol_blocks (build_id, seq, data) VALUES (?1, ?2, ?3)",
    [ST_SYMCACHE_LAST] = "SELECT seq, data FROM symbol_blocks WHERE build_id = ?1 ORDER BY seq "
                         "DESC LIMIT 1",
    /* schema 008: a bucket's exact high, then an observation's live heap */
    [ST_EXACT_MAX] =
        "INSERT INTO heap_exact (run, bucket, live_bytes, max_bytes, max_t_ns, allocs, "
        "frees) VALUES (?1, ?2, ?3, ?3, ?4, ?5, ?6) ON CONFLICT (run, bucket) DO "
        "UPDATE SET max_t_ns = CASE WHEN excluded.max_bytes > max_bytes THEN "
        "excluded.max_t_ns ELSE max_t_ns END, max_bytes = max(max_bytes, "
        "excluded.max_bytes)",
    [ST_EXACT_OBS] =
        "INSERT INTO heap_exact (run, bucket, live_bytes, max_bytes, max_t_ns, allocs, "
        "frees) VALUES (?1, ?2, ?3, ?3, ?4, ?5, ?6) ON CONFLICT (run, bucket) DO "
        "UPDATE SET live_bytes = excluded.live_bytes, allocs = excluded.allocs, "
        "frees = excluded.frees, max_t_ns = CASE WHEN excluded.max_bytes > "
        "max_bytes THEN excluded.max_t_ns ELSE max_t_ns END, max_bytes = "
        "max(max_bytes, excluded.max_bytes)",
    [ST_RUN_EXACT] = "INSERT OR REPLACE INTO run_exact (run, flags, allocs, frees, alloc_bytes, "
                     "free_bytes, live_bytes, peak_bytes, peak_t_ns, error_bytes, "
                     "est_peak_bytes, est_peak_t_ns) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, "
                     "?10, ?11, ?12)",
    [ST_RUN_EXACT_LOAD] = "SELECT flags, allocs, frees, alloc_bytes, free_bytes, live_bytes, "
                          "peak_bytes, peak_t_ns, error_bytes FROM run_exact WHERE run = ?1",
    [ST_RUN_SUMMARY] = "UPDATE runs SET rss_peak_bytes = " HS_SCHEMA_RSS_PEAK_SQL(
        "?1") ", leak_bytes_per_s = " HS_SCHEMA_LEAK_SQL("?1",
                                                         "runs.granularity_ns") " WHERE id = ?1",
    [ST_TAIL_PUT] = "INSERT OR REPLACE INTO events_tail (run, seq, t_first_ns, t_last_ns, "
                    "n_events, data) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    [ST_TAIL_DEL] = "DELETE FROM events_tail WHERE run = ?1",
    [ST_TAIL_MOVE] = "INSERT OR REPLACE INTO events (run, seq, t_first_ns, t_last_ns, n_events, "
                     "data) SELECT run, seq, t_first_ns, t_last_ns, n_events, data FROM "
                     "events_tail WHERE run = ?1",
};

/* After each commit: how many pages the WAL holds (this replaces SQLite's
 * automatic checkpoint, which uses the same hook). */
static int on_wal_commit(void *data, sqlite3 *db, const char *name, int pages)
{
    hs_store *s = data;
    (void)db;
    (void)name;
    uint64_t n = pages > 0 ? (uint64_t)pages : 0;
    /* Copied whole, the WAL starts over at the next commit unless a reader
     * still reads it: then this commit's pages were appended. */
    if (s->wal_copied) s->wal_stuck = n > s->wal_pages;
    s->wal_copied = 0;
    s->wal_pages = n;
    return SQLITE_OK;
}

/* One writer per database: an exclusive flock() on PATH-lock, held until
 * hs_store_free() (the kernel drops it when the process dies, so a crash
 * leaves nothing to clean up). The file holds the holder's pid, for the
 * message. A location where the file cannot be made cannot be written
 * either: no lock is needed there. */
static int take_lock(hs_store *s, const char *path, char *err, size_t errlen)
{
    char lpath[4200];
    snprintf(lpath, sizeof lpath, "%s-lock", path);
    int fd = open(lpath, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return 0;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int busy = errno == EWOULDBLOCK;
        char pid[32] = "";
        ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
        pid[n > 0 ? n : 0] = 0;
        pid[strcspn(pid, "\n")] = 0;
        close(fd);
        if (!busy) return 0;
        hs__store_seterr(err, errlen,
                         "database %s is in use by another heapstore server or import%s%s%s (it "
                         "holds %s); stop that one first, or use another --db",
                         path, pid[0] ? " (pid " : "", pid, pid[0] ? ")" : "", lpath);
        return HS_EBUSY;
    }
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    if (ftruncate(fd, 0) == 0 && pwrite(fd, pid, (size_t)n, 0) < 0) {
    }
    s->lock_fd = fd;
    return 0;
}

int hs_store_open(hs_store **out, const char *path, const hs_store_config *cfg, char *err,
                  size_t errlen)
{
    *out = NULL;
    hs_store *s = calloc(1, sizeof *s);
    if (!s) return HS_ENOMEM;
    s->lock_fd = -1;
    s->granularity_ns = cfg && cfg->granularity_ns ? cfg->granularity_ns : 1000000000ull;
    s->keyframe_every = cfg && cfg->keyframe_every ? cfg->keyframe_every : 32;
    s->event_quantum_ns = cfg && cfg->event_time_ns ? cfg->event_time_ns : HS_STORE_EVENT_TIME_NS;
    int rc = hs__tree_init(s);
    if (!rc) rc = take_lock(s, path, err, errlen);
    if (rc) goto fail;
    rc = hs_schema_open(&s->db, path, HS_SCHEMA_ALLOW_READONLY, err, errlen);
    if (rc) goto fail;
    if (sqlite3_db_readonly(s->db, "main") == 1) {
        /* Nothing can be written: no statements (an older schema may lack
         * their columns); every write entry point refuses. */
        char why[256] = "";
        hs_schema_readonly_why(path, why, sizeof why);
        s->readonly = 1;
        snprintf(s->ro_why, sizeof s->ro_why, "database %s is read-only: it %s", path,
                 why[0] ? why : "cannot be written");
        *out = s;
        return 0;
    }
    sqlite3_exec(s->db, "PRAGMA journal_size_limit = 67108864", NULL, NULL, NULL);
    sqlite3_stmt *ps;
    s->page_size = 4096;
    if (sqlite3_prepare_v2(s->db, "PRAGMA page_size", -1, &ps, NULL) == SQLITE_OK) {
        if (sqlite3_step(ps) == SQLITE_ROW) s->page_size = (uint32_t)sqlite3_column_int(ps, 0);
        sqlite3_finalize(ps);
    }
    sqlite3_wal_hook(s->db, on_wal_commit, s);
    for (int i = 0; i < ST_COUNT; i++) {
        if (sqlite3_prepare_v3(s->db, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &s->st[i],
                               NULL) != SQLITE_OK) {
            hs__store_seterr(err, errlen, "cannot prepare statement %d: %s", i,
                             sqlite3_errmsg(s->db));
            rc = HS_EDB;
            goto fail;
        }
    }
    if (hs_snaps_wr_open(s->db, &s->snaps)) {
        hs__store_seterr(err, errlen, "cannot prepare the snapshots' writer: %s",
                         sqlite3_errmsg(s->db));
        rc = HS_EDB;
        goto fail;
    }
    if (hs_series_wr_open(s->db, &s->series)) {
        hs__store_seterr(err, errlen, "cannot prepare the windows' writer: %s",
                         sqlite3_errmsg(s->db));
        rc = HS_EDB;
        goto fail;
    }
    *out = s;
    return 0;
fail:
    hs_store_free(s);
    return rc;
}

static void run_free(hs_run *r)
{
    hs_map_free(&r->pcs);
    hs_map_free(&r->stacks);
    hs__maps_free(r);
    hs_map_free(&r->traces);
    free(r->slots);
    free(r->dirty);
    free(r->exlog);
    free(r->win);
    hs_evseg_free(&r->seg);
    free(r);
}

void hs_run_ref(hs_run *r)
{
    r->refs++;
}

void hs_run_unref(hs_run *r)
{
    if (r && --r->refs == 0) run_free(r);
}

int hs_run_released(const hs_run *r)
{
    return r->released;
}

void hs_run_set_holder(hs_run *r, uint64_t holder)
{
    r->holder = holder;
}

uint64_t hs_run_holder(const hs_run *r)
{
    return r->holder;
}

void hs_store_free(hs_store *s)
{
    if (!s) return;
    while (s->runs) {
        hs_run *r = s->runs;
        s->runs = r->next;
        r->released = 1;
        hs_run_unref(r);
    }
    for (int i = 0; i < ST_COUNT; i++) sqlite3_finalize(s->st[i]);
    hs_snaps_wr_free(s->snaps);
    hs_series_wr_free(s->series);
    /* free pages back to the file system (a file with incremental
     * auto_vacuum: hs_schema_open; elsewhere a no-op), at most 8 MiB of
     * them, so that a stop after a big deletion stays quick */
    if (s->db && !s->readonly && sqlite3_get_autocommit(s->db))
        sqlite3_exec(s->db, "PRAGMA incremental_vacuum(2048)", NULL, NULL, NULL);
    sqlite3_close_v2(s->db);
    if (s->lock_fd >= 0) close(s->lock_fd); /* after the database: no write can follow */
    hs__tree_free(s);
    free(s->snaprows);
    free(s->winrows);
    free(s->wintraces);
    free(s->scratch);
    free(s->evcache);
    hs_evdec_free(&s->dec);
    for (int i = 0; i < s->nzpool; i++) hs_evseg_ctx_free(s->zpool[i]);
    free(s);
}

const char *hs_store_readonly(const hs_store *s)
{
    return s->readonly ? s->ro_why : NULL;
}

const char *hs_store_errmsg(hs_store *s)
{
    if (s->readonly) return s->ro_why;
    return s->db ? sqlite3_errmsg(s->db) : "no database";
}

int hs_store_begin(hs_store *s)
{
    s->db_failed = 0;
    if (s->readonly) return HS_EDB;
    if (sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) return HS_EDB;
    s->in_tx = 1;
    return 0;
}

/* The exact totals' columns (schema 008), once the run has sent some. */
static int write_run_exact(hs_store *s, hs_run *r)
{
    const hs_exact *x = &r->ex;
    sqlite3_stmt *st = s->st[ST_RUN_EXACT];
    sqlite3_bind_int64(st, 1, r->id);
    sqlite3_bind_int64(st, 2, (int64_t)(x->flags & 0xff) | (r->ex_on ? 256 : 0));
    sqlite3_bind_int64(st, 3, (int64_t)x->allocs);
    sqlite3_bind_int64(st, 4, (int64_t)x->frees);
    sqlite3_bind_int64(st, 5, (int64_t)x->alloc_bytes);
    sqlite3_bind_int64(st, 6, (int64_t)x->free_bytes);
    sqlite3_bind_int64(st, 7, (int64_t)x->live_bytes);
    sqlite3_bind_int64(st, 8, (int64_t)x->peak_bytes);
    sqlite3_bind_int64(st, 9, (int64_t)x->peak_t_ns);
    sqlite3_bind_int64(st, 10, (int64_t)x->error_bytes);
    sqlite3_bind_int64(st, 11, r->est_peak_bytes);
    sqlite3_bind_int64(st, 12, (int64_t)r->est_peak_t);
    return hs__store_step_done(s, st);
}

/* With exact totals (r->ex_on) the run's live heap, totals and peak are
 * the exact ones; the rollups keep the estimated ones in memory. */
static int write_run_row(hs_store *s, hs_run *r)
{
    const hs_exact *x = &r->ex;
    int ex = r->ex_on;
    int64_t live_count = ex ? (int64_t)(x->allocs - x->frees) : llround(r->live_count);
    sqlite3_stmt *st = s->st[ST_RUN_UPDATE];
    sqlite3_bind_int64(st, 1, r->id);
    sqlite3_bind_int64(st, 2, (int64_t)r->next_seq);
    sqlite3_bind_int64(st, 3, (int64_t)r->alloc_events);
    sqlite3_bind_int64(st, 4, (int64_t)r->free_events);
    sqlite3_bind_int64(st, 5, (int64_t)r->end_ns);
    sqlite3_bind_int64(st, 6, ex ? (int64_t)x->live_bytes : r->live_bytes);
    sqlite3_bind_int64(st, 7, live_count > 0 ? live_count : 0);
    sqlite3_bind_int64(st, 8, r->peak_bytes);
    sqlite3_bind_int64(st, 9, r->peak_count);
    sqlite3_bind_int64(st, 10, (int64_t)r->peak_t);
    sqlite3_bind_int64(st, 11, ex ? (int64_t)x->alloc_bytes : r->total_alloc_bytes);
    sqlite3_bind_int64(st, 12, llround(r->total_alloc_count));
    if (ex) sqlite3_bind_int64(st, 13, (int64_t)x->allocs);
    int rc = hs__store_step_done(s, st);
    if (!rc && r->ex_seen) rc = write_run_exact(s, r);
    if (!rc && r->seg_dirty) rc = hs__store_segment(s, r, 0);
    return rc;
}

int hs_store_commit(hs_store *s)
{
    int rc = 0;
    for (hs_run *r = s->touched; r && !rc; r = r->touch_next)
        if (!r->broken && !r->stub && !(rc = hs__maps_flush(s, r))) rc = write_run_row(s, r);
    if (!rc) rc = hs__tree_flush(s);
    if (!rc && sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) rc = HS_EDB;
    if (rc) {
        hs_store_rollback(s);
        return rc;
    }
    while (s->touched) {
        hs_run *r = s->touched;
        s->touched = r->touch_next;
        r->touched = 0;
        r->touch_next = NULL;
    }
    s->in_tx = 0;
    if (!s->passive_defer) hs_store_wal_passive(s);
    return 0;
}

void hs_store_defer_passive(hs_store *s)
{
    s->passive_defer = 1;
}

void hs_store_wal_passive(hs_store *s)
{
    assert(!s->in_tx);
    if (s->readonly || hs_store_wal_bytes(s) < HS_STORE_WAL_PASSIVE) return;
    int log = 0, done = 0;
    if (sqlite3_wal_checkpoint_v2(s->db, NULL, SQLITE_CHECKPOINT_PASSIVE, &log, &done) ==
        SQLITE_OK) {
        s->wal_pages = log > 0 ? (uint64_t)log : 0;
        s->wal_copied = done >= log;
        if (!s->wal_copied) s->wal_stuck = 1;
    }
}

int hs_store_wal_truncate(hs_store *s, int busy_ms)
{
    int log = 0, done = 0;
    sqlite3_busy_timeout(s->db, busy_ms);
    int rc = sqlite3_wal_checkpoint_v2(s->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, &log, &done);
    sqlite3_busy_timeout(s->db, 5000);
    if (rc == SQLITE_OK) {
        s->wal_pages = 0;
        s->wal_copied = s->wal_stuck = 0;
        return 0;
    }
    return rc == SQLITE_BUSY || rc == SQLITE_LOCKED ? HS_EBUSY : HS_EDB;
}

uint64_t hs_store_wal_bytes(const hs_store *s)
{
    return s->wal_pages * s->page_size;
}

int hs_store_wal_stuck(const hs_store *s)
{
    return s->wal_stuck;
}

void hs_store_rollback(hs_store *s)
{
    /* After SQLITE_FULL or SQLITE_IOERR SQLite may have rolled back by
     * itself; a second ROLLBACK would fail and replace the error message
     * (hs_store_errmsg) that says what went wrong with its own. */
    if (!sqlite3_get_autocommit(s->db)) sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    /* Nodes the transaction wrote are gone, and their ids will be given
     * to other nodes. */
    hs__tree_forget(s);
    while (s->touched) {
        hs_run *r = s->touched;
        s->touched = r->touch_next;
        r->touched = 0;
        r->touch_next = NULL;
        r->broken = 1;
    }
    s->in_tx = 0;
}

uint64_t hs_run_next_seq(const hs_run *r)
{
    return r->next_seq;
}

int hs_run_ended(const hs_run *r)
{
    return r->state != HS_RUN_OPEN;
}

int64_t hs_run_id(const hs_run *r)
{
    return r->id;
}

const uint8_t *hs_run_uuid(const hs_run *r)
{
    return r->uuid;
}

int hs_run_broken(const hs_run *r)
{
    return r->broken;
}

static hs_run *find_run(hs_store *s, const uint8_t uuid[16])
{
    for (hs_run *r = s->runs; r; r = r->next)
        if (!memcmp(r->uuid, uuid, 16)) return r;
    return NULL;
}

static void unlink_run(hs_store *s, hs_run *r)
{
    for (hs_run **pp = &s->runs; *pp; pp = &(*pp)->next)
        if (*pp == r) {
            *pp = r->next;
            break;
        }
    if (r->touched)
        for (hs_run **pp = &s->touched; *pp; pp = &(*pp)->touch_next)
            if (*pp == r) {
                *pp = r->touch_next;
                break;
            }
}

void hs_store_run_release(hs_store *s, hs_run *r)
{
    if (!r || r->released) return;
    unlink_run(s, r);
    r->released = 1;
    hs_run_unref(r);
}

void hs_store_release_uuid(hs_store *s, const uint8_t uuid[16])
{
    hs_run *r = find_run(s, uuid);
    if (r && !r->touched) hs_store_run_release(s, r);
}

/* argv as a JSON array of strings. */
static char *argv_json(const hs_hello *h)
{
    sqlite3_str *js = sqlite3_str_new(NULL);
    sqlite3_str_appendchar(js, 1, '[');
    for (uint32_t i = 0; i < h->argc; i++) {
        if (i) sqlite3_str_appendchar(js, 1, ',');
        sqlite3_str_appendchar(js, 1, '"');
        const unsigned char *p = (const unsigned char *)h->argv[i].ptr;
        for (size_t k = 0; k < h->argv[i].len; k++) {
            unsigned char c = p[k];
            if (c == '"' || c == '\\')
                sqlite3_str_appendf(js, "\\%c", c);
            else if (c < 0x20)
                sqlite3_str_appendf(js, "\\u%04x", c);
            else
                sqlite3_str_appendchar(js, 1, (char)c);
        }
        sqlite3_str_appendchar(js, 1, '"');
    }
    sqlite3_str_appendchar(js, 1, ']');
    return sqlite3_str_finish(js);
}

static int is_zero16(const uint8_t *p)
{
    for (int i = 0; i < 16; i++)
        if (p[i]) return 0;
    return 1;
}

static int insert_run(hs_store *s, const hs_hello *h, int64_t *id)
{
    sqlite3_stmt *st = s->st[ST_RUN_INSERT];
    char *argv = argv_json(h);
    if (!argv) return HS_ENOMEM;
    sqlite3_bind_blob(st, 1, h->run_id, 16, SQLITE_STATIC);
    if (!is_zero16(h->parent_run_id)) sqlite3_bind_blob(st, 2, h->parent_run_id, 16, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, h->program.ptr ? h->program.ptr : "", (int)h->program.len,
                      SQLITE_STATIC);
    sqlite3_bind_text(st, 4, argv, -1, sqlite3_free);
    sqlite3_bind_text(st, 5, h->hostname.ptr ? h->hostname.ptr : "", (int)h->hostname.len,
                      SQLITE_STATIC);
    sqlite3_bind_int64(st, 6, (int64_t)h->pid);
    sqlite3_bind_int64(st, 7, (int64_t)h->ppid);
    sqlite3_bind_int64(st, 8, (int64_t)h->start_unix_ns);
    sqlite3_bind_int64(st, 9, (int64_t)h->sample_bytes);
    sqlite3_bind_int64(st, 10, (int64_t)h->max_depth);
    sqlite3_bind_int64(st, 11, (int64_t)h->rss_interval_ms);
    sqlite3_bind_int64(st, 12, (int64_t)s->granularity_ns);
    sqlite3_bind_int64(st, 13, s->keyframe_every);
    sqlite3_bind_text(st, 14, h->collector_version.ptr ? h->collector_version.ptr : "",
                      (int)h->collector_version.len, SQLITE_STATIC);
    sqlite3_bind_int64(st, 15, (int64_t)h->first_seq);
    if (h->resume_key.len)
        sqlite3_bind_blob(st, 16, h->resume_key.ptr, (int)h->resume_key.len, SQLITE_STATIC);
    int rc = hs__store_step_done(s, st);
    if (rc) return rc;
    *id = sqlite3_last_insert_rowid(s->db);
    st = s->st[ST_RUN_CHILDREN];
    sqlite3_bind_int64(st, 1, *id);
    sqlite3_bind_blob(st, 2, h->run_id, 16, SQLITE_STATIC);
    if ((rc = hs__store_step_done(s, st))) return rc;
    for (uint32_t i = 0; i < h->nlabels; i++) {
        st = s->st[ST_LABEL];
        sqlite3_bind_int64(st, 1, *id);
        sqlite3_bind_text(st, 2, h->labels[i].key.ptr ? h->labels[i].key.ptr : "",
                          (int)h->labels[i].key.len, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, h->labels[i].value.ptr ? h->labels[i].value.ptr : "",
                          (int)h->labels[i].value.len, SQLITE_STATIC);
        if ((rc = hs__store_step_done(s, st))) return rc;
    }
    return 0;
}

static hs_run *run_new(hs_store *s, const uint8_t uuid[16])
{
    hs_run *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    memcpy(r->uuid, uuid, 16);
    r->bucket = -1;
    r->peak_ver = 1;
    r->refs = 1; /* the store's */
    r->next = s->runs;
    s->runs = r;
    return r;
}

/* Loads the run tables of r from the database and, for an open run, rebuilds
 * its rollups by replaying its stored events. */
static int load_run(hs_store *s, hs_run *r, char *err, size_t errlen)
{
    sqlite3_stmt *st;
    int rc = hs__maps_load(s, r), step;
    if (!rc && r->state == HS_RUN_ENDED) r->stub = 1;
    if (rc || r->state == HS_RUN_ENDED) goto out;
    /* The rollups of the bucket in progress were only in memory: rebuild all
     * of them from the events, which are the truth. */
    st = s->st[ST_CLEAR_SNAP];
    sqlite3_bind_int64(st, 1, r->id);
    if ((rc = hs__store_step_done(s, st))) goto out;
    st = s->st[ST_CLEAR_WINDOWS];
    sqlite3_bind_int64(st, 1, r->id);
    if ((rc = hs__store_step_done(s, st))) goto out;
    st = s->st[ST_CLEAR_SERIES];
    sqlite3_bind_int64(st, 1, r->id);
    if ((rc = hs__store_step_done(s, st))) goto out;
    if ((rc = hs__rollup_reset(s, r))) goto out;
    if ((rc = hs__store_exact_load(s, r))) goto out;
    /* The segment the run was adding to is closed: later events start one
     * of their own. */
    st = s->st[ST_TAIL_MOVE];
    sqlite3_bind_int64(st, 1, r->id);
    if ((rc = hs__store_step_done(s, st))) goto out;
    st = s->st[ST_TAIL_DEL];
    sqlite3_bind_int64(st, 1, r->id);
    if ((rc = hs__store_step_done(s, st))) goto out;
    /* A statement of its own: replay writes with the shared ones. */
    sqlite3_stmt *ev;
    if (sqlite3_prepare_v2(s->db, "SELECT seq, data FROM events WHERE run = ?1 ORDER BY seq", -1,
                           &ev, NULL) != SQLITE_OK) {
        rc = HS_EDB;
        goto out;
    }
    sqlite3_bind_int64(ev, 1, r->id);
    while (!rc && (step = sqlite3_step(ev)) == SQLITE_ROW) {
        const uint8_t *p = sqlite3_column_blob(ev, 1);
        size_t n = (size_t)sqlite3_column_bytes(ev, 1);
        rc = hs__store_replay_events(s, r, p ? p : (const uint8_t *)"", n, err, errlen);
    }
    if (!rc && step != SQLITE_DONE) rc = HS_EDB;
    sqlite3_finalize(ev);
    r->nexlog = 0; /* every replayed event precedes the next observation's window */
    r->exlog_full = 0;
out:
    if (rc == HS_EDB)
        hs__store_seterr(err, errlen, "cannot load run %" PRId64 ": %s", r->id,
                         sqlite3_errmsg(s->db));
    return rc;
}

/* Looks uuid up in the database; 0 and *found = 0 when it is not there. */
static int lookup_run(hs_store *s, hs_run *r, int *found)
{
    sqlite3_stmt *st = s->st[ST_RUN_BY_UUID];
    sqlite3_bind_blob(st, 1, r->uuid, 16, SQLITE_STATIC);
    int step = sqlite3_step(st);
    *found = step == SQLITE_ROW;
    if (*found) {
        r->id = sqlite3_column_int64(st, 0);
        const char *state = (const char *)sqlite3_column_text(st, 1);
        r->state = !state || !strcmp(state, "open") ? HS_RUN_OPEN
                   : !strcmp(state, "ended")        ? HS_RUN_ENDED
                                                    : HS_RUN_LOST;
        r->next_seq = (uint64_t)sqlite3_column_int64(st, 2);
        r->g = (uint64_t)sqlite3_column_int64(st, 3);
        r->k = (uint32_t)sqlite3_column_int64(st, 4);
        r->sample_bytes = (uint64_t)sqlite3_column_int64(st, 5);
        size_t kn = (size_t)sqlite3_column_bytes(st, 6);
        const void *k = sqlite3_column_blob(st, 6);
        r->key_len = k && kn <= sizeof r->key ? (uint32_t)kn : 0;
        if (r->key_len) memcpy(r->key, k, r->key_len);
        if (!r->g) r->g = s->granularity_ns;
        if (!r->k) r->k = s->keyframe_every;
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return step == SQLITE_ROW || step == SQLITE_DONE ? 0 : HS_EDB;
}

/* A resumed HELLO continues run r only with the key r was started with.
 * Compared in constant time: the time taken says nothing about the key. */
static int key_refused(const hs_store *s, const hs_run *r, const hs_hello *h, char *err,
                       size_t errlen)
{
    if (s->trust_resume) return 0;
    if (!r->key_len) {
        hs__store_seterr(err, errlen,
                         "run %" PRId64 " cannot be resumed: it was started without a resume key",
                         r->id);
        return HS_EAUTH;
    }
    if (!hs_ct_eq(h->resume_key.ptr, h->resume_key.len, r->key, r->key_len)) {
        hs__store_seterr(err, errlen, "resumed HELLO for run %" PRId64 " refused: %s", r->id,
                         h->resume_key.len ? "wrong resume key" : "no resume key");
        return HS_EAUTH;
    }
    return 0;
}

int hs_store_run_open(hs_store *s, hs_run **out, const hs_hello *h, char *err, size_t errlen)
{
    *out = NULL;
    if (s->readonly) {
        hs__store_seterr(err, errlen, "%s: nothing can be stored", s->ro_why);
        return HS_ENOTSUP;
    }
    hs_run *r = find_run(s, h->run_id);
    if (r && !(h->flags & HS_HELLO_RESUMED)) {
        hs__store_seterr(err, errlen, "run id already in use (HELLO without the resumed flag)");
        return HS_EEXIST;
    }
    int krc;
    if (r && (krc = key_refused(s, r, h, err, errlen))) return krc;
    /* A run lost while in memory was closed at its last bucket (a final
     * group of deltas, a keyframe): going on from there would write that
     * bucket's group again without the rows of the first. It is loaded
     * again instead, its rollups rebuilt from its events, as after a
     * restart. */
    if (r && (r->broken || r->state == HS_RUN_LOST)) {
        hs_store_run_release(s, r);
        r = NULL;
    }
    int rc = 0;
    if (!r) {
        if (!(r = run_new(s, h->run_id))) return HS_ENOMEM;
        int found;
        if ((rc = lookup_run(s, r, &found))) goto fail;
        if (found && !(h->flags & HS_HELLO_RESUMED)) {
            hs__store_seterr(err, errlen, "run id already in use (HELLO without the resumed flag)");
            rc = HS_EEXIST;
            goto fail;
        }
        if (found && (rc = key_refused(s, r, h, err, errlen))) goto fail;
        if (found) {
            if ((rc = load_run(s, r, err, errlen))) goto fail;
        } else {
            r->g = s->granularity_ns;
            r->k = s->keyframe_every;
            r->sample_bytes = h->sample_bytes;
            r->next_seq = h->first_seq;
            r->key_len = h->resume_key.len <= sizeof r->key ? (uint32_t)h->resume_key.len : 0;
            if (r->key_len) memcpy(r->key, h->resume_key.ptr, r->key_len);
            if ((rc = insert_run(s, h, &r->id))) goto fail;
            r->drops_known = UINT32_MAX; /* the columns' defaults: zeros */
        }
    }
    if (r->state == HS_RUN_LOST) {
        /* A late resumption: the run goes on. */
        sqlite3_stmt *st = s->st[ST_RUN_STATE];
        sqlite3_bind_int64(st, 1, r->id);
        sqlite3_bind_text(st, 2, "open", -1, SQLITE_STATIC);
        sqlite3_bind_null(st, 3);
        if ((rc = hs__store_step_done(s, st))) goto fail;
        r->state = HS_RUN_OPEN;
    }
    /* A resumed collector starts at its oldest unacknowledged frame; a gap
     * (frames the server never had) cannot be filled, so the run goes on
     * from there. */
    if (h->first_seq > r->next_seq && r->state == HS_RUN_OPEN) r->next_seq = h->first_seq;
    if (r->state == HS_RUN_OPEN) hs__store_touch(s, r);
    *out = r;
    return 0;
fail:
    if (rc == HS_EDB && err && !err[0])
        hs__store_seterr(err, errlen, "database: %s", sqlite3_errmsg(s->db));
    if (rc == HS_EDB) s->db_failed = 1;
    hs_store_run_release(s, r);
    return rc;
}

int hs_store_open_runs(hs_store *s, void (*fn)(const uint8_t uuid[16], void *data), void *data)
{
    if (s->readonly) return 0; /* they cannot be closed here */
    sqlite3_stmt *st = s->st[ST_OPEN_RUNS];
    int step;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        const void *u = sqlite3_column_blob(st, 0);
        if (u && sqlite3_column_bytes(st, 0) == 16) fn(u, data);
    }
    sqlite3_reset(st);
    return step == SQLITE_DONE ? 0 : HS_EDB;
}

int hs_store_lose_uuid(hs_store *s, const uint8_t uuid[16])
{
    hs_run *r = find_run(s, uuid);
    int rc = 0;
    if (r && !r->broken) {
        if (r->state == HS_RUN_OPEN) rc = hs_store_run_lose(s, r);
        return rc;
    }
    if (r) hs_store_run_release(s, r);
    if (!(r = run_new(s, uuid))) return HS_ENOMEM;
    int found;
    if ((rc = lookup_run(s, r, &found)) == 0 && found && r->state == HS_RUN_OPEN) {
        hs__store_touch(s, r);
        if ((rc = load_run(s, r, NULL, 0)) == 0) rc = hs_store_run_lose(s, r);
    }
    if (rc) s->db_failed = 1;
    /* Its rows are written now; commit writes the runs row first, so the
     * memory can only go after it: the caller releases it by uuid later. */
    return rc;
}

int hs_store_retain(hs_store *s, uint64_t cutoff_unix_ns, int max_rows, int *deleted)
{
    sqlite3_stmt *st = s->st[ST_RETAIN];
    sqlite3_bind_int64(st, 1, (int64_t)cutoff_unix_ns);
    sqlite3_bind_int(st, 2, max_rows);
    int rc = hs__store_step_done(s, st);
    *deleted = rc ? 0 : sqlite3_changes(s->db);
    return rc;
}

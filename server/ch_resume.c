/* ch_resume: a run carried on by another front end, fetched back from
 * ClickHouse into this front end's buffer at a resumed HELLO
 * (hs_chship_resume, hs_chship.h), so that front ends keep no state of
 * their own: any of them can take a run over.
 *
 * The rows written are those hs_store_run_open() reads to load a run
 * (runs row, its pcs and stacks, exact totals) and those it cannot
 * rebuild (events, labels, mappings, process samples, size histogram);
 * the rollups (snapshots, series, summaries) are then rebuilt by the
 * store from the events, as after a restart, so they are the first front
 * end's numbers by construction. Frames and trace nodes come as content
 * ids and get local ids here (by key; nodes by (parent, frame)).
 *
 * Runs on the writer's thread inside its transaction, in a savepoint of
 * its own: a failure leaves the buffer as it was. It blocks the writer for
 * as long as the fetch takes (one query per table, events in pages of
 * RESUME_PAGE rows, trace nodes one query per depth): a resumed HELLO of
 * a run that moved is rare (a front end died or a balancer moved it).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/sha.h>

#include "ch_ship_int.h"
#include "hs_error.h"
#include "hs_log.h"
#include "hs_proto.h"
#include "hs_text.h"
#include "store_int.h"

#define RESUME_PAGE 2000

typedef struct resume {
    hs_chship *s;
    hs_store *store;
    sqlite3 *db; /* the store's connection */
    int64_t id, local;
    hs_map frames, nodes; /* content id -> local id */
    hs_buf ans, q;
    char *err;
    size_t errlen;
} resume;

static int ask(resume *x, hs_tsv *t, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int ask(resume *x, hs_tsv *t, const char *fmt, ...)
{
    va_list ap;
    x->q.n = 0;
    va_start(ap, fmt);
    char tmp[2048];
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    hs_buf_printf(&x->q, "%s", tmp);
    if (x->q.oom) return HS_ENOMEM;
    int rc = hs_ch_query(x->s->rch, x->q.p, NULL, 0, &x->ans, x->err, x->errlen);
    if (!rc) hs_tsv_init(t, &x->ans);
    return rc;
}

/* Binds the fields of TSV row t to st as fmt says and steps it: i an
 * integer, s text, b a blob, n an integer that is NULL when 0, R the local
 * run (no field), F and T a frame's and a node's content id made local. */
static int put_row(resume *x, sqlite3_stmt *st, hs_tsv *t, const char *fmt)
{
    sqlite3_reset(st);
    int k = 1;
    for (const char *f = fmt; *f; f++, k++) {
        size_t n;
        const char *v;
        uint64_t local = 0;
        switch (*f) {
        case 'R':
            sqlite3_bind_int64(st, k, x->local);
            break;
        case 'i':
            sqlite3_bind_int64(st, k, hs_tsv_i64(t, NULL));
            break;
        case 'n': {
            int64_t i = hs_tsv_i64(t, NULL);
            if (i)
                sqlite3_bind_int64(st, k, i);
            else
                sqlite3_bind_null(st, k);
            break;
        }
        case 's':
        case 'b':
            v = hs_tsv_field(t, &n);
            if (*f == 's')
                sqlite3_bind_text(st, k, v ? v : "", v ? (int)n : 0, SQLITE_TRANSIENT);
            else
                sqlite3_bind_blob(st, k, v ? v : "", v ? (int)n : 0, SQLITE_TRANSIENT);
            break;
        case 'F':
        case 'T': {
            int64_t c = hs_tsv_i64(t, NULL);
            if (!hs_map_get(*f == 'F' ? &x->frames : &x->nodes, (uint64_t)c, &local)) {
                snprintf(x->err, x->errlen, "ClickHouse lacks %s %" PRId64 " of run %" PRId64,
                         *f == 'F' ? "frame" : "trace node", c, x->id);
                return HS_EPROTO;
            }
            sqlite3_bind_int64(st, k, (int64_t)local);
            break;
        }
        }
    }
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    return rc == SQLITE_DONE ? 0 : HS_EDB;
}

/* Every row of ClickHouse query chq into the buffer by SQLite insert ins. */
static int copy_rows(resume *x, const char *chq, const char *ins, const char *fmt)
{
    sqlite3_stmt *st;
    hs_tsv t;
    int rc = ask(x, &t, "%s", chq);
    if (rc) return rc;
    if (sqlite3_prepare_v2(x->db, ins, -1, &st, NULL) != SQLITE_OK) return HS_EDB;
    while (!rc && hs_tsv_row(&t)) rc = put_row(x, st, &t, fmt);
    sqlite3_finalize(st);
    return rc;
}

/* ---- the stack tree ------------------------------------------------------ */

/* The local id of the row that statement get finds after ins ran. */
/* The frames of ids (a comma list) into the buffer, by key: a key is its
 * frame's content then its alias (012_frame_keys.sql). */
static int frames_in(resume *x, const char *ids)
{
    hs_tsv t;
    hs_buf q = {0}, odd = {0};
    hs_buf_printf(&q,
                  "SELECT id, key, function, file, line, module, module_offset FROM frames FINAL "
                  "WHERE id IN (%s)",
                  ids);
    int rc = q.oom ? HS_ENOMEM : hs_ch_query(x->s->rch, q.p, NULL, 0, &x->ans, x->err, x->errlen);
    hs_buf_free(&q);
    if (rc) return rc;
    hs_tsv_init(&t, &x->ans);
    while (!rc && hs_tsv_row(&t)) {
        int64_t id = hs_tsv_i64(&t, NULL), local;
        hs_frame_row f = {0};
        size_t n;
        const char *key = hs_tsv_field(&t, &n);
        if (!key || !n) {
            snprintf(x->err, x->errlen, "frame %" PRId64 " has no key in ClickHouse", id);
            rc = HS_EPROTO;
            break;
        }
        f.function.ptr = hs_tsv_field(&t, &f.function.len);
        f.file.ptr = hs_tsv_field(&t, &f.file.len);
        f.line = hs_tsv_i64(&t, NULL);
        f.module.ptr = hs_tsv_field(&t, &f.module.len);
        f.module_offset = hs_tsv_i64(&t, NULL);
        int c = hs__frame_content_key(x->store, &f);
        if (c >= 0 && (size_t)c <= n && !memcmp(key, x->store->key, (size_t)c)) {
            f.alias = (hs_str){key + c, n - (size_t)c};
        } else { /* as the migration keeps a key that does not begin so */
            odd.n = 0;
            hs_buf_printf(&odd, "\x1e%.*s", (int)n, key);
            if (odd.oom) rc = HS_ENOMEM;
            f.alias = (hs_str){odd.p, odd.n};
        }
        if (!rc) rc = hs__frame_intern(x->store, &f, &local);
        if (!rc) rc = hs_map_put(&x->frames, (uint64_t)id, (uint64_t)local);
    }
    hs_buf_free(&odd);
    return rc;
}

typedef struct cnode {
    int64_t id, parent, frame;
    int depth;
} cnode;

static int cmp_depth(const void *a, const void *b)
{
    const cnode *x = a, *y = b;
    return (x->depth > y->depth) - (x->depth < y->depth);
}

/* The run's trace nodes (its stacks' leaves and every ancestor), fetched a
 * level at a time, into *out. */
static int nodes_fetch(resume *x, cnode **out, size_t *n)
{
    hs_tsv t;
    size_t cap = 0;
    hs_map seen = {0};
    int rc = ask(x, &t,
                 "SELECT id, parent, frame, depth FROM traces WHERE id IN (SELECT trace FROM "
                 "run_stacks WHERE run = %" PRId64 ")",
                 x->id);
    while (!rc) {
        hs_buf next = {0};
        while (!rc && hs_tsv_row(&t)) {
            cnode c = {.id = hs_tsv_i64(&t, NULL), .parent = hs_tsv_i64(&t, NULL)};
            c.frame = hs_tsv_i64(&t, NULL);
            c.depth = (int)hs_tsv_i64(&t, NULL);
            uint64_t dummy;
            if (hs_map_get(&seen, (uint64_t)c.id, &dummy)) continue;
            if (*n == cap) {
                cap = cap ? cap * 2 : 256;
                cnode *np = realloc(*out, cap * sizeof *np);
                if (!np) {
                    rc = HS_ENOMEM;
                    break;
                }
                *out = np;
            }
            (*out)[(*n)++] = c;
            rc = hs_map_put(&seen, (uint64_t)c.id, 1);
            if (!rc && c.parent && !hs_map_get(&seen, (uint64_t)c.parent, &dummy))
                hs_buf_printf(&next, "%s%" PRId64, next.n ? "," : "", c.parent);
        }
        if (rc || !next.n || next.oom) {
            if (next.oom) rc = HS_ENOMEM;
            hs_buf_free(&next);
            break;
        }
        x->q.n = 0;
        hs_buf_printf(&x->q, "SELECT id, parent, frame, depth FROM traces WHERE id IN (%s)",
                      next.p);
        hs_buf_free(&next);
        rc = x->q.oom ? HS_ENOMEM
                      : hs_ch_query(x->s->rch, x->q.p, NULL, 0, &x->ans, x->err, x->errlen);
        if (!rc) hs_tsv_init(&t, &x->ans);
    }
    hs_map_free(&seen);
    return rc;
}

/* The run's frames (of its nodes and of its pcs) and nodes into the buffer. */
static int tree_in(resume *x)
{
    cnode *ns = NULL;
    size_t n = 0;
    hs_buf ids = {0};
    hs_tsv t;
    int rc = nodes_fetch(x, &ns, &n);
    for (size_t i = 0; !rc && i < n; i++)
        hs_buf_printf(&ids, "%s%" PRId64, ids.n ? "," : "", ns[i].frame);
    if (!rc) rc = ask(x, &t, "SELECT frame FROM run_pcs WHERE run = %" PRId64, x->id);
    while (!rc && hs_tsv_row(&t))
        hs_buf_printf(&ids, "%s%" PRId64, ids.n ? "," : "", hs_tsv_i64(&t, NULL));
    if (!rc && ids.oom) rc = HS_ENOMEM;
    if (!rc && ids.n) rc = frames_in(x, ids.p);
    hs_buf_free(&ids);
    if (n) qsort(ns, n, sizeof *ns, cmp_depth); /* parents first */
    for (size_t i = 0; !rc && i < n; i++) {
        uint64_t parent = 0, frame = 0;
        if ((ns[i].parent && !hs_map_get(&x->nodes, (uint64_t)ns[i].parent, &parent)) ||
            !hs_map_get(&x->frames, (uint64_t)ns[i].frame, &frame)) {
            snprintf(x->err, x->errlen, "trace node %" PRId64 " of run %" PRId64 " is incomplete",
                     ns[i].id, x->id);
            rc = HS_EPROTO;
            break;
        }
        int64_t local = 0;
        rc = hs__tree_intern(x->store, (int64_t)parent, (int64_t)frame, ns[i].depth, &local);
        if (!rc) rc = hs_map_put(&x->nodes, (uint64_t)ns[i].id, (uint64_t)local);
    }
    free(ns);
    return rc;
}

/* ---- the run's rows ---------------------------------------------------------- */

#define RUN_FROM_CH                                                                                \
    "SELECT unhex(uuid), unhex(parent_uuid), program, argv, host, pid, ppid, start_unix_ns, "      \
    "sample_bytes, max_depth, rss_interval_ms, granularity_ns, keyframe_every, "                   \
    "collector_version, state, clean_exit, end_ns, next_seq, alloc_events, free_events, "          \
    "bye_alloc_events, has_bye_alloc, bye_free_events, has_bye_free, dropped_alloc_events, "       \
    "dropped_free_events, dropped_alloc_bytes, dropped_free_bytes, stacks_truncated, "             \
    "unwind_failed, live_set_full, peak_bytes, peak_count, peak_t_ns, live_bytes, live_count, "    \
    "total_alloc_bytes, total_alloc_count, python_fallback, main_end_ns, python_small_unseen "     \
    "FROM runs FINAL WHERE id = %" PRId64
#define RUN_FMT                                                                                    \
    "bbsssiiiiiiiiss"                                                                              \
    "iiiiiiiiiiiiiiiiiiiiiiiiii"
#define RUN_INSERT                                                                                 \
    "INSERT INTO runs (uuid, parent_uuid, parent_id, program, argv, host, pid, ppid, "             \
    "start_unix_ns, sample_bytes, max_depth, rss_interval_ms, granularity_ns, keyframe_every, "    \
    "collector_version, state, clean_exit, end_ns, next_seq, alloc_events, free_events, "          \
    "bye_alloc_events, bye_free_events, dropped_alloc_events, dropped_free_events, "               \
    "dropped_alloc_bytes, dropped_free_bytes, stacks_truncated, unwind_failed, live_set_full, "    \
    "peak_bytes, peak_count, peak_t_ns, live_bytes, live_count, total_alloc_bytes, "               \
    "total_alloc_count, python_fallback, main_end_ns, python_small_unseen, resume_key) VALUES "    \
    "(?1, nullif(?2, x''), (SELECT id FROM runs WHERE uuid = ?2), ?3, ?4, ?5, ?6, ?7, ?8, ?9, "    \
    "?10, ?11, ?12, ?13, ?14, ?15, nullif(?16, -1), ?17, ?18, ?19, ?20, CASE WHEN ?22 THEN ?21 "   \
    "END, CASE WHEN ?24 THEN ?23 END, ?25, ?26, ?27, ?28, ?29, ?30, ?31, ?32, ?33, ?34, ?35, "     \
    "?36, ?37, ?38, ?39, nullif(?40, 0), ?41, ?42)"

static int run_in(resume *x, const hs_hello *h)
{
    sqlite3_stmt *st;
    hs_tsv t;
    int rc = ask(x, &t, RUN_FROM_CH, x->id);
    if (rc) return rc;
    if (!hs_tsv_row(&t)) {
        snprintf(x->err, x->errlen, "run %" PRId64 " left ClickHouse meanwhile", x->id);
        return HS_EPROTO;
    }
    if (sqlite3_prepare_v2(x->db, RUN_INSERT, -1, &st, NULL)) return HS_EDB;
    sqlite3_bind_blob(st, 42, h->resume_key.ptr, (int)h->resume_key.len, SQLITE_TRANSIENT);
    rc = put_row(x, st, &t, RUN_FMT);
    sqlite3_finalize(st);
    if (rc) return rc;
    x->local = sqlite3_last_insert_rowid(x->db);
    if (sqlite3_prepare_v2(x->db,
                           "UPDATE runs SET parent_id = ?1 WHERE parent_uuid = ?2 AND parent_id "
                           "IS NULL",
                           -1, &st, NULL))
        return HS_EDB;
    sqlite3_bind_int64(st, 1, x->local);
    sqlite3_bind_blob(st, 2, h->run_id, 16, SQLITE_STATIC);
    rc = sqlite3_step(st) == SQLITE_DONE ? 0 : HS_EDB;
    sqlite3_finalize(st);
    return rc;
}

static int events_in(resume *x)
{
    hs_tsv t;
    int rc = ask(x, &t, "SELECT DISTINCT codec FROM events WHERE run = %" PRId64, x->id);
    while (!rc && hs_tsv_row(&t)) {
        int64_t codec = hs_tsv_i64(&t, NULL);
        if (codec != x->s->codec) {
            snprintf(x->err, x->errlen,
                     "run %" PRId64 " has events of storage codec %" PRId64 " (this server: %d)",
                     x->id, codec, x->s->codec);
            rc = HS_ENOTSUP;
        }
    }
    char q[400];
    for (int64_t after = -1, n = RESUME_PAGE; !rc && n == RESUME_PAGE;) {
        snprintf(q, sizeof q,
                 "SELECT seq, t_first_ns, t_last_ns, n_events, data FROM events FINAL WHERE run "
                 "= %" PRId64 " AND seq > %" PRId64 " ORDER BY seq LIMIT %d",
                 x->id, after, RESUME_PAGE);
        rc = copy_rows(x, q,
                       "INSERT OR REPLACE INTO events (run, seq, t_first_ns, t_last_ns, n_events, "
                       "data) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                       "Riiiib");
        sqlite3_stmt *st;
        if (rc || sqlite3_prepare_v2(x->db,
                                     "SELECT count(*), max(seq) FROM events WHERE run = ?1 AND "
                                     "seq > ?2",
                                     -1, &st, NULL))
            return rc ? rc : HS_EDB;
        sqlite3_bind_int64(st, 1, x->local);
        sqlite3_bind_int64(st, 2, after);
        if (sqlite3_step(st) == SQLITE_ROW) {
            n = sqlite3_column_int64(st, 0);
            if (n) after = sqlite3_column_int64(st, 1);
        }
        sqlite3_finalize(st);
    }
    return rc;
}

/* The per-run tables other than events: ClickHouse's query, the buffer's
 * insert, put_row's format. */
static const struct {
    const char *ch, *ins, *fmt;
} tables[] = {
    {"SELECT key, value FROM run_labels FINAL WHERE run = %" PRId64,
     "INSERT OR REPLACE INTO run_labels (run, key, value) VALUES (?1, ?2, ?3)", "Rss"},
    {"SELECT t_ns, toInt64(start), toInt64(end), toInt64(file_offset), build_id, path FROM "
     "mappings FINAL WHERE run = %" PRId64,
     "INSERT OR REPLACE INTO mappings (run, t_ns, start, end, file_offset, build_id, path) "
     "VALUES (?1, ?2, ?3, ?4, ?5, nullif(?6, x''), ?7)",
     "Riiiibs"},
    {"SELECT t_ns, rss_bytes, vsize_bytes FROM process_samples FINAL WHERE run = %" PRId64,
     "INSERT OR REPLACE INTO process_samples (run, t_ns, rss_bytes, vsize_bytes) VALUES (?1, "
     "?2, ?3, ?4)",
     "Riii"},
    {"SELECT bucket, allocs, bytes FROM size_hist FINAL WHERE run = %" PRId64,
     "INSERT OR REPLACE INTO size_hist (run, bucket, allocs, bytes) VALUES (?1, ?2, ?3, ?4)",
     "Riii"},
    {"SELECT flags, allocs, frees, alloc_bytes, free_bytes, live_bytes, peak_bytes, peak_t_ns, "
     "error_bytes, est_peak_bytes, est_peak_t_ns FROM run_exact FINAL WHERE run = %" PRId64,
     "INSERT OR REPLACE INTO run_exact (run, flags, allocs, frees, alloc_bytes, free_bytes, "
     "live_bytes, peak_bytes, peak_t_ns, error_bytes, est_peak_bytes, est_peak_t_ns) VALUES "
     "(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
     "Riiiiiiiiiii"},
    {"SELECT bucket, live_bytes, max_bytes, max_t_ns, allocs, frees FROM heap_exact FINAL "
     "WHERE run = %" PRId64,
     "INSERT OR REPLACE INTO heap_exact (run, bucket, live_bytes, max_bytes, max_t_ns, allocs, "
     "frees) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
     "Riiiiii"},
};

/* The run's pcs and stacks: ClickHouse's query, and whether the value is
 * a frame (else a trace node). */
static const struct {
    const char *ch;
    int frame;
} maps[HS_MAPS_KINDS] = {
    [HS_MAPS_PCS] = {"SELECT toInt64(pc), frame FROM run_pcs FINAL WHERE run = %" PRId64, 1},
    [HS_MAPS_STACKS] =
        {"SELECT toInt64(stack_id), trace FROM run_stacks FINAL WHERE run = %" PRId64, 0},
};

/* The run's pcs and stacks into the buffer's chunks (schema/hs_maps.h),
 * with local frame and node ids. */
static int maps_in(resume *x)
{
    int rc = 0;
    char q[200];
    for (int k = 0; !rc && k < HS_MAPS_KINDS; k++) {
        hs_tsv t;
        hs_maps_entry *e = NULL;
        size_t n = 0, cap = 0;
        snprintf(q, sizeof q, maps[k].ch, x->id);
        rc = ask(x, &t, "%s", q);
        while (!rc && hs_tsv_row(&t)) {
            int64_t key = hs_tsv_i64(&t, NULL), c = hs_tsv_i64(&t, NULL);
            uint64_t local;
            if (!hs_map_get(maps[k].frame ? &x->frames : &x->nodes, (uint64_t)c, &local)) {
                snprintf(x->err, x->errlen, "ClickHouse lacks %s %" PRId64 " of run %" PRId64,
                         maps[k].frame ? "frame" : "trace node", c, x->id);
                rc = HS_EPROTO;
                break;
            }
            rc = hs_maps_push(&e, &n, &cap, (hs_maps_entry){key, (int64_t)local});
        }
        if (!rc && n) rc = hs_maps_append(x->db, x->local, k, e, n);
        free(e);
    }
    return rc;
}

/* Every row of run local in the buffer goes (an older copy of the run). */
static int run_out(sqlite3 *db, int64_t local)
{
    static const char *const t[] = {"events",      "snapshot_blocks", "snapshot_series",
                                    "heap_series", "trace_stats",     "run_labels",
                                    "run_maps",    "mappings",        "process_samples",
                                    "size_hist",   "run_exact",       "heap_exact"};
    char sql[200];
    int rc = 0;
    for (size_t i = 0; !rc && i <= sizeof t / sizeof *t; i++) {
        sqlite3_stmt *st;
        snprintf(sql, sizeof sql, "DELETE FROM %s WHERE %s = ?1",
                 i < sizeof t / sizeof *t ? t[i] : "runs", i < sizeof t / sizeof *t ? "run" : "id");
        if (sqlite3_prepare_v2(db, sql, -1, &st, NULL)) return HS_EDB;
        sqlite3_bind_int64(st, 1, local);
        rc = sqlite3_step(st) == SQLITE_DONE ? 0 : HS_EDB;
        sqlite3_finalize(st);
    }
    return rc;
}

static int fetch_all(resume *x, const hs_hello *h)
{
    int rc = tree_in(x);
    if (!rc) rc = run_in(x, h);
    if (!rc) rc = maps_in(x);
    char q[600];
    for (size_t i = 0; !rc && i < sizeof tables / sizeof *tables; i++) {
        snprintf(q, sizeof q, tables[i].ch, x->id);
        rc = copy_rows(x, q, tables[i].ins, tables[i].fmt);
    }
    if (!rc) rc = events_in(x);
    return rc;
}

/* ---- the decision -------------------------------------------------------------- */

/* What ClickHouse holds of the run: *found, its next_seq and whether the
 * HELLO's key is the run's (by SHA-256). */
static int ch_state(resume *x, const hs_hello *h, int *found, int64_t *next, int *key_ok,
                    int *keyless)
{
    hs_tsv t;
    int rc = ask(x, &t,
                 "SELECT argMax(next_seq, ver), argMax(key_sha, ver) FROM runs WHERE id = "
                 "%" PRId64 " GROUP BY id",
                 x->id);
    *found = !rc && hs_tsv_row(&t);
    if (!*found) return rc;
    *next = hs_tsv_i64(&t, NULL);
    size_t n;
    const char *sha = hs_tsv_field(&t, &n);
    uint8_t d[SHA256_DIGEST_LENGTH];
    char hex[2 * SHA256_DIGEST_LENGTH + 1];
    SHA256((const unsigned char *)(h->resume_key.ptr ? h->resume_key.ptr : ""), h->resume_key.len,
           d);
    for (int i = 0; i < SHA256_DIGEST_LENGTH; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
    *keyless = !sha || !n;
    *key_ok = !*keyless && h->resume_key.len && hs_ct_eq(sha, n, hex, strlen(hex));
    return 0;
}

/* The buffer's copy of the run: its local id and next_seq (0, 0: none). */
static int buffer_state(sqlite3 *db, const uint8_t uuid[16], int64_t *local, int64_t *next)
{
    sqlite3_stmt *st;
    *local = *next = 0;
    if (sqlite3_prepare_v2(db, "SELECT id, next_seq FROM runs WHERE uuid = ?1", -1, &st, NULL))
        return HS_EDB;
    sqlite3_bind_blob(st, 1, uuid, 16, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW) {
        *local = sqlite3_column_int64(st, 0);
        *next = sqlite3_column_int64(st, 1);
    }
    sqlite3_finalize(st);
    return 0;
}

static int in_memory(const hs_store *store, const uint8_t uuid[16])
{
    for (const hs_run *r = store->runs; r; r = r->next)
        if (!memcmp(r->uuid, uuid, 16)) return 1;
    return 0;
}

int hs_chship_resume(hs_chship *s, struct hs_store *store, const struct hs_hello *h, char *err,
                     size_t errlen)
{
    if (!(h->flags & HS_HELLO_RESUMED)) return 0;
    if (!s->rch && hs_ch_open(&s->rch, s->url, err, errlen)) return HS_EINVAL;
    /* on a cluster, IN subqueries over Distributed tables run once, here */
    if (hs_ch_settings(s->rch, "distributed_product_mode=global")) return HS_ENOMEM;
    resume x = {.s = s,
                .store = store,
                .db = store->db,
                .id = hs__chship_run_id(h->run_id, 16),
                .err = err,
                .errlen = errlen};
    int found = 0, key_ok = 0, keyless = 0;
    int64_t ch_next = 0, local, next;
    int rc = buffer_state(x.db, h->run_id, &local, &next);
    if (!rc) rc = ch_state(&x, h, &found, &ch_next, &key_ok, &keyless);
    if (rc && local) rc = 0; /* ClickHouse away: the buffer's copy will do */
    if (rc || !found || (local && next >= ch_next)) goto out;
    if (!key_ok) { /* the store's own rule, said before anything changes */
        snprintf(err, errlen, "resumed HELLO for run %" PRId64 " refused: %s", x.id,
                 keyless ? "it was started without a resume key" : "wrong resume key");
        rc = HS_EAUTH;
        goto out;
    }
    /* an older copy, or a run the buffer no longer has (it left, pruned)
     * whose state the store may still hold: the store forgets it */
    hs_store_release_uuid(store, h->run_id);
    if (in_memory(store, h->run_id)) goto out; /* in use by this transaction */
    /* the writer's new nodes into the database first, so that a rollback
     * to the savepoint leaves the tree the store reads again whole */
    if ((rc = hs__tree_flush(store)) ||
        sqlite3_exec(x.db, "SAVEPOINT chresume", NULL, NULL, NULL)) {
        rc = HS_EDB;
        goto out;
    }
    rc = local ? run_out(x.db, local) : 0;
    if (!rc) rc = fetch_all(&x, h);
    if (!rc) rc = hs__tree_flush(store); /* the nodes it made, before a RELEASE commits */
    if (rc == HS_EDB) snprintf(err, errlen, "buffer: %s", sqlite3_errmsg(x.db));
    if (rc) sqlite3_exec(x.db, "ROLLBACK TO chresume", NULL, NULL, NULL);
    if (rc) hs__tree_forget(store); /* ids it gave are free again */
    sqlite3_exec(x.db, "RELEASE chresume", NULL, NULL, NULL);
    if (!rc)
        hs_log("run %" PRId64 " resumed here: fetched from ClickHouse (next_seq %" PRId64 ", %s)",
               x.id, ch_next, local ? "the buffer's copy was older" : "new to this buffer");
out:
    hs_map_free(&x.frames);
    hs_map_free(&x.nodes);
    hs_buf_free(&x.ans);
    hs_buf_free(&x.q);
    return rc;
}

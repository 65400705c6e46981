/* hs_symd: the symbolizer thread (see hs_symd.h). */
#include "hs_symd.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sqlite3.h>

#include "hs_error.h"
#include "hs_log.h"

typedef struct item {
    struct item *next;
    hs_symd_conn *conn;
    hs_wjob *job;
} item;

struct hs_symd {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    item *head, *tail;
    int stop;
    hs_writer *writer;
    hs_syms *syms;
    uint64_t entries, resolved_ns; /* SYMBOLS entries looked up, time spent */
    sqlite3 *db;                   /* read-only, for symbol_cache; NULL: none */
    sqlite3_stmt *get;
    char *names[2 * HS_SYMS_INLINE_MAX]; /* strings of the last cache answer */
    uint8_t *put;                        /* answers for the writer, the current job's */
    size_t put_len, put_cap;
    int put_failed; /* out of memory: drop this job's answers */
};

/* ---- symbol_cache ------------------------------------------------------ */

static int cache_get(void *data, const uint8_t *bid, size_t blen, uint64_t off, hs_symbol *out,
                     int max)
{
    hs_symd *d = data;
    if (!d->get) return 0;
    sqlite3_bind_blob(d->get, 1, bid, (int)blen, SQLITE_STATIC);
    sqlite3_bind_int64(d->get, 2, (int64_t)off);
    int n = 0;
    while (n < max && sqlite3_step(d->get) == SQLITE_ROW) {
        for (int c = 0; c < 2; c++) {
            free(d->names[2 * n + c]);
            const char *t = (const char *)sqlite3_column_text(d->get, c);
            d->names[2 * n + c] = strdup(t ? t : "");
        }
        if (!d->names[2 * n] || !d->names[2 * n + 1]) {
            n = 0; /* out of memory: a miss */
            break;
        }
        memset(&out[n], 0, sizeof out[n]);
        out[n].function = (hs_str){d->names[2 * n], strlen(d->names[2 * n])};
        out[n].file = (hs_str){d->names[2 * n + 1], strlen(d->names[2 * n + 1])};
        out[n].module = (hs_str){"", 0};
        int64_t line = sqlite3_column_int64(d->get, 2);
        out[n].line = line > 0 ? (uint64_t)line : 0;
        n++;
    }
    sqlite3_reset(d->get);
    return n;
}

static void put_bytes(hs_symd *d, const void *p, size_t n)
{
    if (d->put_failed) return;
    if (d->put_len + n > d->put_cap) {
        size_t cap = d->put_cap ? d->put_cap : 4096;
        while (cap < d->put_len + n) cap *= 2;
        uint8_t *np = realloc(d->put, cap);
        if (!np) {
            d->put_failed = 1;
            return;
        }
        d->put = np;
        d->put_cap = cap;
    }
    memcpy(d->put + d->put_len, p, n);
    d->put_len += n;
}

static void put_varint(hs_symd *d, uint64_t v)
{
    uint8_t b[HS_VARINT_MAX];
    put_bytes(d, b, hs_varint_encode(b, v));
}

static void put_str(hs_symd *d, hs_str s)
{
    put_varint(d, s.len);
    put_bytes(d, s.ptr, s.len);
}

/* The entry format of hs_store_symcache_put. */
static void cache_put(void *data, const uint8_t *bid, size_t blen, uint64_t off,
                      const hs_symbol *fr, int n)
{
    hs_symd *d = data;
    put_str(d, (hs_str){(const char *)bid, blen});
    put_varint(d, off);
    put_varint(d, (uint64_t)n);
    for (int k = 0; k < n; k++) {
        put_str(d, fr[k].function);
        put_str(d, fr[k].file);
        put_varint(d, fr[k].line);
    }
}

static void cache_open(hs_symd *d, const char *db_path)
{
    if (!db_path) return;
    if (sqlite3_open_v2(db_path, &d->db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK ||
        sqlite3_busy_timeout(d->db, 200) != SQLITE_OK ||
        sqlite3_prepare_v3(d->db,
                           "SELECT function, file, line FROM symbol_cache"
                           " WHERE build_id = ?1 AND offset = ?2 ORDER BY k",
                           -1, SQLITE_PREPARE_PERSISTENT, &d->get, NULL) != SQLITE_OK) {
        hs_log("symbols: the database's symbol cache cannot be read (%s): builds are read from "
               "their files",
               d->db ? sqlite3_errmsg(d->db) : "out of memory");
        sqlite3_finalize(d->get);
        d->get = NULL;
    }
    hs_syms_cache c = {.get = cache_get, .put = cache_put, .data = d};
    hs_syms_set_cache(d->syms, &c);
}

int hs_symd_wants(const hs_wjob *j)
{
    if (j->kind != HS_WJOB_FRAMES) return 0;
    for (uint32_t i = 0; i < j->nframes; i++)
        if (j->frames[i].type == HS_FRAME_MAPPINGS || j->frames[i].type == HS_FRAME_SYMBOLS)
            return 1;
    return 0;
}

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The job with its SYMBOLS frames named; j itself when nothing changed (or
 * on failure: the writer then stores the frames as they came). */
static hs_wjob *name_frames(hs_symd *d, hs_symd_conn *c, hs_wjob *j)
{
    hs_wjob *nj = NULL;
    for (uint32_t i = 0; i < j->nframes; i++) {
        const hs_wframe *f = &j->frames[i];
        const uint8_t *p = j->data + f->off;
        uint8_t *named = NULL;
        size_t nlen = 0;
        if (f->type == HS_FRAME_MAPPINGS) hs_syms_stream_mappings(&c->stream, p, f->len);
        if (f->type == HS_FRAME_SYMBOLS) {
            uint64_t n = 0, t0 = mono_ns();
            int rc = hs_syms_rewrite(d->syms, &c->stream, p, f->len, &named, &nlen, &n);
            d->entries += n;
            d->resolved_ns += mono_ns() - t0;
            if (rc < 0 && rc != HS_EPROTO && rc != HS_ERANGE)
                hs_log("symbols: a SYMBOLS frame is stored without names: %s", hs_strerror(rc));
            if (rc == 1 && !nj) { /* the frames before this one, as they were */
                nj = hs_wjob_new(j->kind, j->conn_id, j->conn);
                for (uint32_t k = 0; nj && k < i; k++)
                    if (hs_wjob_add_frame(nj, j->frames[k].seq, j->frames[k].type,
                                          j->data + j->frames[k].off, j->frames[k].len)) {
                        hs_wjob_free(nj);
                        nj = NULL;
                    }
                if (!nj) {
                    free(named);
                    return j;
                }
            }
        }
        if (nj &&
            hs_wjob_add_frame(nj, f->seq, f->type, named ? named : p, named ? nlen : f->len)) {
            free(named);
            hs_wjob_free(nj);
            return j;
        }
        free(named);
    }
    if (nj) {
        nj->charged = j->charged;
        nj->via_symd = j->via_symd;
        hs_wjob_free(j);
        j = nj;
    }
    return j;
}

static void *symd_main(void *arg)
{
    hs_symd *d = arg;
    for (;;) {
        pthread_mutex_lock(&d->mu);
        while (!d->head && !d->stop) pthread_cond_wait(&d->cv, &d->mu);
        item *it = d->head;
        if (it) {
            d->head = it->next;
            if (!d->head) d->tail = NULL;
        }
        pthread_mutex_unlock(&d->mu);
        if (!it) break; /* stopping, and nothing left */
        hs_wjob *j = it->job;
        if (it->conn && hs_symd_wants(j)) j = name_frames(d, it->conn, j);
        /* what was read from files, for symbol_cache (lost if this fails) */
        if (d->put_len && !d->put_failed)
            hs_wjob_add_frame(j, 0, HS_WFRAME_SYMCACHE, d->put, d->put_len);
        d->put_len = 0;
        d->put_failed = 0;
        hs_writer_submit(d->writer, j); /* no touch of it->conn after this */
        free(it);
    }
    return NULL;
}

int hs_symd_start(hs_symd **out, const hs_syms_config *cfg, hs_writer *w, const char *db_path)
{
    hs_symd *d = calloc(1, sizeof *d);
    if (!d) return HS_ENOMEM;
    int rc = hs_syms_new(&d->syms, cfg);
    if (rc) {
        free(d);
        return rc;
    }
    d->writer = w;
    cache_open(d, db_path);
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    if (pthread_create(&d->thread, NULL, symd_main, d)) {
        sqlite3_finalize(d->get);
        sqlite3_close(d->db);
        hs_syms_free(d->syms);
        pthread_mutex_destroy(&d->mu);
        pthread_cond_destroy(&d->cv);
        free(d);
        return HS_ENOMEM;
    }
    *out = d;
    return 0;
}

void hs_symd_submit(hs_symd *d, hs_symd_conn *c, hs_wjob *j)
{
    item *it = malloc(sizeof *it);
    if (!it) { /* out of memory: straight on, unnamed, rather than lost */
        hs_writer_submit(d->writer, j);
        return;
    }
    it->next = NULL;
    it->conn = c;
    it->job = j;
    pthread_mutex_lock(&d->mu);
    if (d->tail)
        d->tail->next = it;
    else
        d->head = it;
    d->tail = it;
    pthread_cond_signal(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

void hs_symd_stop(hs_symd *d)
{
    if (!d) return;
    pthread_mutex_lock(&d->mu);
    d->stop = 1;
    pthread_cond_signal(&d->cv);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->thread, NULL);
    hs_syms_stats st = hs_syms_get_stats(d->syms);
    /* a lookup answered by the database or by a build read already is a
     * cache hit */
    uint64_t hits = st.lookups - st.builds_opened - st.builds_missing;
    if (st.lookups)
        hs_log("symbols: %" PRIu64 " pcs named in %" PRIu64 " ms (%" PRIu64 " builds read, %" PRIu64
               " not found; %" PRIu64 " of %" PRIu64 " lookups cached, %" PRIu64
               " by the database)",
               d->entries, d->resolved_ns / 1000000, st.builds_opened, st.builds_missing, hits,
               st.lookups, st.cache_hits);
    sqlite3_finalize(d->get);
    sqlite3_close(d->db);
    for (size_t i = 0; i < HS_COUNTOF(d->names); i++) free(d->names[i]);
    free(d->put);
    hs_syms_free(d->syms);
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cv);
    free(d);
}

/* hs_symd: the symbolizer thread (see hs_symd.h). */
#include "hs_symd.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "hs_buf.h"
#include "hs_error.h"
#include "hs_lz.h"
#include "hs_log.h"
#include "hs_refill.h"
#include "hs_symcache.h"
#include "hs_text.h"

enum { IT_JOB, IT_UPLOAD, IT_ABORT, IT_REFILLED };

typedef struct hs_symd_item item;
struct hs_symd_item {
    item *next;
    int kind;
    hs_symd_conn *conn;
    hs_wjob *job;
    uint64_t conn_id; /* IT_UPLOAD, IT_ABORT */
    hs_symdata sd;    /* IT_UPLOAD: bid and data point into buf */
    uint8_t buf[];
};

/* A file being received. */
typedef struct upload {
    uint64_t conn_id;
    uint8_t bid[HS_BUILD_ID_MAX];
    uint32_t blen;
    int fd; /* -1: slot free */
    uint64_t got, total, sent, t0_ns;
    char part[4300], dst[4300];
} upload;

#define ASKS_MAX   256
#define RECENT_MAX 256
#define GONE_MAX   64

struct hs_symd {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    item *head, *tail;
    int stop;
    hs_writer *writer;
    hs_syms *syms;
    uint64_t entries, resolved_ns; /* SYMBOLS entries looked up, time spent */
    sqlite3 *db;                   /* read-only, for symbol_blocks; NULL: none */
    hs_symcache_rd *cache;         /* the blocks of the builds asked about; NULL: none */
    hs_buf put;                    /* answers for the writer, the current job's (oom: drop them) */
    /* uploads: asks for the loop (under mu), the files being received and
     * the builds asked for lately (the thread's) */
    char *db_path; /* NULL: no database, nothing asked */
    void (*notify)(void *);
    void *notify_data;
    hs_symd_ask asks[ASKS_MAX];
    size_t nasks;
    size_t queued; /* bytes of IT_UPLOAD items (under mu) */
    upload ups[HS_SYMD_UPLOADS_MAX];
    struct {
        uint8_t bid[HS_BUILD_ID_MAX];
        uint32_t blen;
        time_t at;
    } recent[RECENT_MAX];
    unsigned nrecent;
    uint64_t gone[GONE_MAX]; /* connections closed lately: never asked again */
    unsigned ngone;
    uint8_t *zbuf;        /* a piece decompressed */
    hs_symd_conn *parked; /* connections whose jobs wait for uploads */
    int no_park;          /* after SYNC: nothing waits any more */
    uint64_t uploads_done, uploads_bytes;
    hs_refill *refill; /* NULL: no database to name stored frames in */
    item *refill_item; /* for the REFILL job out: the writer hands it back in it */
};

/* ---- the symbol cache (schema/hs_symcache.h) --------------------------- */

_Static_assert(HS_SYMS_INLINE_MAX == HS_SYMCACHE_FRAMES_MAX, "an answer fits a cache entry");

static int cache_get(void *data, const uint8_t *bid, size_t blen, uint64_t off, hs_symbol *out,
                     int max)
{
    hs_symd *d = data;
    hs_symcache_frame fr[HS_SYMS_INLINE_MAX];
    if (!d->cache) return 0;
    int n = hs_symcache_rd_get(d->cache, bid, blen, off, fr,
                               max < HS_SYMS_INLINE_MAX ? max : HS_SYMS_INLINE_MAX);
    if (n <= 0) return 0; /* an error is a miss: the database is asked again next time */
    for (int k = 0; k < n; k++) {
        memset(&out[k], 0, sizeof out[k]);
        out[k].function = fr[k].function;
        out[k].file = fr[k].file;
        out[k].module = (hs_str){"", 0};
        out[k].line = fr[k].line;
    }
    return n;
}

static void put_bytes(hs_symd *d, const void *p, size_t n)
{
    hs_buf_put(&d->put, p, n);
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

/* The entry format of hs_store_symcache_put; kept in memory too, as the
 * writer will store it. */
static void cache_put(void *data, const uint8_t *bid, size_t blen, uint64_t off,
                      const hs_symbol *fr, int n)
{
    hs_symd *d = data;
    hs_symcache_frame keep[HS_SYMS_INLINE_MAX];
    int fits = n >= 1 && n <= HS_SYMS_INLINE_MAX; /* what the writer takes (hs_store.h) */
    put_str(d, (hs_str){(const char *)bid, blen});
    put_varint(d, off);
    put_varint(d, (uint64_t)n);
    for (int k = 0; k < n; k++) {
        put_str(d, fr[k].function);
        put_str(d, fr[k].file);
        put_varint(d, fr[k].line);
        fits &= fr[k].function.len <= HS_FUNC_MAX && fr[k].file.len <= HS_STR_MAX;
        if (k < HS_SYMS_INLINE_MAX)
            keep[k] = (hs_symcache_frame){fr[k].function, fr[k].file, fr[k].line};
    }
    if (d->cache && fits) hs_symcache_rd_add(d->cache, bid, blen, off, keep, n);
}

static void cache_open(hs_symd *d, const char *db_path)
{
    if (!db_path) return;
    if (sqlite3_open_v2(db_path, &d->db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK ||
        sqlite3_busy_timeout(d->db, 200) != SQLITE_OK ||
        hs_symcache_rd_open(d->db, HS_SYMCACHE_RD_BYTES, &d->cache) != 0) {
        hs_log("symbols: the database's symbol cache cannot be read (%s): builds are read from "
               "their files",
               d->db ? sqlite3_errmsg(d->db) : "out of memory");
    }
    hs_syms_cache c = {.get = cache_get, .put = cache_put, .data = d};
    hs_syms_set_cache(d->syms, &c);
    if (d->cache) hs_refill_new(&d->refill, d->db, d->syms); /* NULL on failure, said */
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

/* The job with its SYMBOLS frames named, a new one (j is left as it is), or
 * j itself when nothing changed (or on failure: the writer then stores the
 * frames as they came). */
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
    }
    return nj ? nj : j;
}

/* ---- uploads ----------------------------------------------------------- */

static void upload_ended(hs_symd *d, uint64_t conn_id, int all);

static void push_ask(hs_symd *d, uint64_t conn_id, const uint8_t *bid, uint32_t blen,
                     const char *close_why)
{
    pthread_mutex_lock(&d->mu);
    if (d->nasks < ASKS_MAX) { /* else dropped: a later run asks again */
        hs_symd_ask *a = &d->asks[d->nasks++];
        memset(a, 0, sizeof *a);
        a->conn_id = conn_id;
        a->blen = blen;
        if (blen) memcpy(a->bid, bid, blen);
        if (close_why) snprintf(a->close_why, sizeof a->close_why, "%s", close_why);
    }
    pthread_mutex_unlock(&d->mu);
    if (d->notify) d->notify(d->notify_data);
}

/* 1 if build bid was asked for within HS_SYMD_ASK_TTL_S; else records it. */
static int asked_lately(hs_symd *d, const uint8_t *bid, uint32_t blen)
{
    time_t now = time(NULL);
    for (unsigned i = 0; i < d->nrecent && i < RECENT_MAX; i++)
        if (d->recent[i].blen == blen && !memcmp(d->recent[i].bid, bid, blen) &&
            now - d->recent[i].at < HS_SYMD_ASK_TTL_S)
            return 1;
    unsigned k = d->nrecent++ % RECENT_MAX;
    memcpy(d->recent[k].bid, bid, blen);
    d->recent[k].blen = blen;
    d->recent[k].at = now;
    return 0;
}

/* Asks for the builds the connection's last frames found no file of. */
static unsigned ask_missed(hs_symd *d, hs_symd_conn *c, uint64_t conn_id)
{
    unsigned n = 0;
    for (unsigned i = 0; i < d->ngone && i < GONE_MAX; i++)
        if (d->gone[i] == conn_id) return 0; /* its last jobs: asking is no use */
    for (size_t i = 0; i < c->stream.n; i++) {
        hs_syms_module *m = &c->stream.mods[i];
        if (!m->missed) continue;
        m->missed = 0;
        if (d->refill) hs_refill_missing(d->refill, m->bid, m->blen, m->path);
        if (!c->can_upload || !d->db_path || asked_lately(d, m->bid, m->blen)) continue;
        push_ask(d, conn_id, m->bid, m->blen, NULL);
        n++;
    }
    return n;
}

static upload *upload_find(hs_symd *d, uint64_t conn_id, const uint8_t *bid, uint32_t blen)
{
    for (int i = 0; i < HS_SYMD_UPLOADS_MAX; i++) {
        upload *u = &d->ups[i];
        if (u->fd >= 0 && u->conn_id == conn_id && u->blen == blen && !memcmp(u->bid, bid, blen))
            return u;
    }
    return NULL;
}

static void upload_drop(upload *u)
{
    if (u->fd < 0) return;
    close(u->fd);
    unlink(u->part);
    u->fd = -1;
}

/* mkdir -p of the folder holding path. */
static int make_dirs(const char *path)
{
    char p[4300];
    snprintf(p, sizeof p, "%s", path);
    for (char *q = p + 1; *q; q++) {
        if (*q != '/') continue;
        *q = 0;
        if (mkdir(p, 0755) && errno != EEXIST) return -1;
        *q = '/';
    }
    return 0;
}

static upload *upload_open(hs_symd *d, uint64_t conn_id, const hs_symdata *sd)
{
    upload *u = NULL;
    for (int i = 0; i < HS_SYMD_UPLOADS_MAX && !u; i++)
        if (d->ups[i].fd < 0) u = &d->ups[i];
    char hex[2 * HS_BUILD_ID_MAX + 1];
    hs_hex(hex, sd->bid, sd->blen);
    if (!u) {
        hs_log("symbols: build %s from conn %" PRIu64 " not received: %d files are being received",
               hex, conn_id, HS_SYMD_UPLOADS_MAX);
        return NULL;
    }
    if (hs_syms_store_file(u->dst, sizeof u->dst, d->db_path, sd->bid, sd->blen) ||
        snprintf(u->part, sizeof u->part, "%s.part%" PRIu64, u->dst, conn_id) >=
            (int)sizeof u->part ||
        make_dirs(u->dst) ||
        (u->fd = open(u->part, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0) {
        hs_log("symbols: build %s from conn %" PRIu64 " not received: cannot write %s: %s", hex,
               conn_id, u->part, strerror(errno));
        u->fd = -1;
        return NULL;
    }
    u->conn_id = conn_id;
    memcpy(u->bid, sd->bid, sd->blen);
    u->blen = sd->blen;
    u->got = u->sent = 0;
    u->total = sd->total;
    u->t0_ns = mono_ns();
    return u;
}

/* The whole file is written: checked and put in place, or deleted. */
static void upload_finish(hs_symd *d, upload *u)
{
    char hex[2 * HS_BUILD_ID_MAX + 1], why[200];
    uint8_t have[HS_BUILD_ID_MAX];
    hs_hex(hex, u->bid, u->blen);
    int fail = close(u->fd);
    u->fd = -1;
    int n = fail ? HS_EIO : hs_syms_file_build_id(u->part, have);
    if (n != (int)u->blen || memcmp(have, u->bid, u->blen) || rename(u->part, u->dst)) {
        unlink(u->part);
        snprintf(why, sizeof why, "SYMDATA: the file sent for build %s %s", hex,
                 n < 0    ? "is not an ELF file"
                 : n == 0 ? "has no build id"
                          : "carries another build id");
        hs_log("symbols: %s (conn %" PRIu64 "); deleted", why, u->conn_id);
        push_ask(d, u->conn_id, u->bid, u->blen, why);
        upload_ended(d, u->conn_id, 1);
        return;
    }
    hs_syms_forget(d->syms, u->bid, u->blen);
    if (d->refill) hs_refill_recheck(d->refill); /* the runs stored before it */
    d->uploads_done++;
    d->uploads_bytes += u->sent;
    hs_log("symbols: build %s received from conn %" PRIu64 ": %" PRIu64 " bytes (%" PRIu64
           " sent) in %.1f ms, stored as %s",
           hex, u->conn_id, u->total, u->sent, (double)(mono_ns() - u->t0_ns) / 1e6, u->dst);
    upload_ended(d, u->conn_id, 0);
}

static void upload_piece(hs_symd *d, uint64_t conn_id, const hs_symdata *sd)
{
    upload *u = upload_find(d, conn_id, sd->bid, sd->blen);
    if (u && (sd->total == 0 || sd->offset == 0)) upload_drop(u);
    if (sd->total == 0) {
        char hex[2 * HS_BUILD_ID_MAX + 1];
        hs_hex(hex, sd->bid, sd->blen);
        hs_log("symbols: conn %" PRIu64 " does not send build %s (no such file there, or "
               "its bound reached)",
               conn_id, hex);
        upload_ended(d, conn_id, 0);
        return;
    }
    if (sd->offset == 0 && !(u = upload_open(d, conn_id, sd))) upload_ended(d, conn_id, 0);
    if (!u || u->got != sd->offset) return; /* after a failure: the rest is dropped */
    const uint8_t *data = (const uint8_t *)sd->data.ptr;
    if (sd->method == HS_SYMDATA_LZ) {
        if (!d->zbuf && !(d->zbuf = malloc(HS_SYMDATA_PIECE))) {
            upload_drop(u);
            upload_ended(d, conn_id, 0);
            return;
        }
        if (hs_lz_decompress(d->zbuf, sd->size, data, sd->data.len)) {
            upload_drop(u);
            push_ask(d, conn_id, sd->bid, sd->blen, "SYMDATA: a piece that does not decompress");
            upload_ended(d, conn_id, 1);
            return;
        }
        data = d->zbuf;
    }
    if (pwrite(u->fd, data, sd->size, (off_t)sd->offset) != (ssize_t)sd->size) {
        hs_log("symbols: cannot write %s: %s", u->part, strerror(errno));
        upload_drop(u);
        upload_ended(d, conn_id, 0);
        return;
    }
    u->got += sd->size;
    u->sent += sd->data.len;
    if (u->got == u->total) upload_finish(d, u);
}

/* The connection is gone: its files not yet whole are deleted, and its
 * last jobs ask for nothing. (A build it left half sent is asked of another
 * connection only HS_SYMD_ASK_TTL_S after: one too big for the processes
 * that name it to send before they end costs one of them in that time,
 * not each.) */
static void upload_abort(hs_symd *d, uint64_t conn_id)
{
    d->gone[d->ngone++ % GONE_MAX] = conn_id;
    for (int i = 0; i < HS_SYMD_UPLOADS_MAX; i++)
        if (d->ups[i].fd >= 0 && d->ups[i].conn_id == conn_id) upload_drop(&d->ups[i]);
    upload_ended(d, conn_id, 1);
}

/* ---- jobs that wait for uploads ------------------------------------------ */

static void item_free(hs_symd *d, item *it)
{
    if (it->kind == IT_UPLOAD) {
        pthread_mutex_lock(&d->mu);
        d->queued -= it->sd.data.len;
        pthread_mutex_unlock(&d->mu);
    }
    free(it);
}

static void submit(hs_symd *d, hs_wjob *j)
{
    /* what was read from files, for symbol_cache (lost if this fails) */
    if (d->put.n && !d->put.oom)
        hs_wjob_add_frame(j, 0, HS_WFRAME_SYMCACHE, (const uint8_t *)d->put.p, d->put.n);
    hs_buf_reset(&d->put);
    hs_writer_submit(d->writer, j);
}

static void park_append(hs_symd_conn *c, item *it)
{
    it->next = NULL;
    if (c->parked_tail)
        c->parked_tail->next = it;
    else
        c->parked = it;
    c->parked_tail = it;
}

static void process_job(hs_symd *d, item *it);

/* Lets c's jobs go on, in order (one of them may stop them again, for
 * another build). */
static void unpark(hs_symd *d, hs_symd_conn *c)
{
    for (hs_symd_conn **pp = &d->parked; *pp; pp = &(*pp)->next_parked)
        if (*pp == c) {
            *pp = c->next_parked;
            break;
        }
    item *list = c->parked;
    c->parked = c->parked_tail = NULL;
    c->next_parked = NULL;
    c->waiting = 0;
    while (list) {
        item *n = list->next;
        process_job(d, list);
        list = n;
    }
}

/* An upload of connection conn_id ended: whole, declined, given up; all:
 * the connection is gone, or misbehaved. */
static void upload_ended(hs_symd *d, uint64_t conn_id, int all)
{
    for (hs_symd_conn *c = d->parked; c; c = c->next_parked) {
        if (c->conn_id != conn_id) continue;
        if (all || c->waiting <= 1)
            unpark(d, c);
        else
            c->waiting--;
        return;
    }
}

/* Lets go the connections whose wait is over (all: every one); returns
 * the earliest end of a wait left, 0 if none. */
static uint64_t unpark_due(hs_symd *d, int all)
{
    for (;;) {
        uint64_t now = mono_ns();
        hs_symd_conn *c = d->parked;
        while (c && !all && c->parked_until_ns > now) c = c->next_parked;
        if (!c) break;
        unpark(d, c);
    }
    uint64_t next = 0;
    for (hs_symd_conn *c = d->parked; c; c = c->next_parked)
        if (!next || c->parked_until_ns < next) next = c->parked_until_ns;
    return next;
}

/* Names a job's frames and passes it on, or holds it (and the connection's
 * later jobs) while the builds it asked for come. */
static void process_job(hs_symd *d, item *it)
{
    hs_wjob *j = it->job;
    hs_symd_conn *c = it->conn;
    if (c && c->parked) {
        park_append(c, it);
        return;
    }
    if (c && hs_symd_wants(j)) {
        hs_wjob *nj = name_frames(d, c, j);
        unsigned asked = ask_missed(d, c, j->conn_id);
        if (asked && !d->no_park) {
            if (nj != j) hs_wjob_free(nj); /* named again when it goes on */
            c->conn_id = j->conn_id;
            c->waiting = asked;
            c->parked_until_ns = mono_ns() + HS_SYMD_WAIT_MS * 1000000ull;
            c->next_parked = d->parked;
            d->parked = c;
            park_append(c, it);
            return;
        }
        if (nj != j) {
            nj->first = j->first; /* a HELLO goes on with its frames */
            j->first = NULL;
            hs_wjob_free(j);
        }
        j = nj;
    }
    if (!c && !d->no_park) { /* SYNC: the server stops; nothing waits any more */
        d->no_park = 1;
        unpark_due(d, 1);
    }
    submit(d, j); /* no touch of c after this */
    item_free(d, it);
}

/* ---- stored frames named late (hs_refill.h) ------------------------------ */

static void enqueue(hs_symd *d, item *it);

/* On the writer thread: the REFILL job is applied; back to the thread, in
 * the item made for it (one job is out at a time; the thread set
 * refill_item before submitting the job and clears it only once the item
 * is back, so both threads only read it meanwhile). */
static void refill_applied(hs_wjob *j, void *data)
{
    hs_symd *d = data;
    item *it = d->refill_item;
    assert(it && it->kind == IT_REFILLED && !it->job);
    it->job = j;
    enqueue(d, it);
}

/* Submits the next REFILL job, if any; returns when to look again (0:
 * only news brings work). None once the server stops (SYNC came): the
 * writer ends after it. */
static uint64_t refill_step(hs_symd *d)
{
    uint64_t due = 0;
    if (!d->refill || d->no_park || d->refill_item) return 0;
    item *it = calloc(1, sizeof *it);
    if (!it) return mono_ns() + HS_REFILL_CHECK_MS * 1000000ull;
    it->kind = IT_REFILLED;
    hs_wjob *j = hs_refill_step(d->refill, mono_ns(), &due);
    if (!j) {
        free(it);
        return due;
    }
    d->refill_item = it;
    j->on_done = refill_applied;
    j->on_done_data = d;
    submit(d, j);
    return due;
}

static uint64_t earliest(uint64_t a, uint64_t b)
{
    return !a ? b : !b ? a : a < b ? a : b;
}

static void *symd_main(void *arg)
{
    hs_symd *d = arg;
    if (d->refill) hs_refill_scan(d->refill);
    uint64_t next_due = refill_step(d);
    for (;;) {
        pthread_mutex_lock(&d->mu);
        while (!d->head && !d->stop) {
            if (!next_due) {
                pthread_cond_wait(&d->cv, &d->mu);
                continue;
            }
            struct timespec ts = {(time_t)(next_due / 1000000000ull),
                                  (long)(next_due % 1000000000ull)};
            if (pthread_cond_timedwait(&d->cv, &d->mu, &ts) == ETIMEDOUT) break;
        }
        item *it = d->head;
        if (it) {
            d->head = it->next;
            if (!d->head) d->tail = NULL;
        }
        int stop = d->stop;
        pthread_mutex_unlock(&d->mu);
        if (!it && stop) { /* stopping, and nothing left */
            d->no_park = 1;
            unpark_due(d, 1);
            break;
        }
        if (it && it->kind == IT_REFILLED) {
            assert(it == d->refill_item);
            d->refill_item = NULL;
            hs_refill_done(d->refill, it->job);
            item_free(d, it);
        } else if (it && it->kind != IT_JOB) {
            if (it->kind == IT_UPLOAD)
                upload_piece(d, it->conn_id, &it->sd);
            else
                upload_abort(d, it->conn_id);
            item_free(d, it);
        } else if (it) {
            process_job(d, it);
        }
        next_due = earliest(unpark_due(d, 0), refill_step(d));
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
    for (int i = 0; i < HS_SYMD_UPLOADS_MAX; i++) d->ups[i].fd = -1;
    if (db_path && !(d->db_path = strdup(db_path))) {
        hs_syms_free(d->syms);
        free(d);
        return HS_ENOMEM;
    }
    cache_open(d, db_path);
    pthread_mutex_init(&d->mu, NULL);
    pthread_condattr_t ca; /* waits end on CLOCK_MONOTONIC, as mono_ns */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&d->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&d->thread, NULL, symd_main, d)) {
        hs_symcache_rd_free(d->cache);
        sqlite3_close(d->db);
        hs_syms_free(d->syms);
        free(d->db_path);
        pthread_mutex_destroy(&d->mu);
        pthread_cond_destroy(&d->cv);
        free(d);
        return HS_ENOMEM;
    }
    *out = d;
    return 0;
}

static void enqueue(hs_symd *d, item *it)
{
    it->next = NULL;
    pthread_mutex_lock(&d->mu);
    if (it->kind == IT_UPLOAD) d->queued += it->sd.data.len;
    if (d->tail)
        d->tail->next = it;
    else
        d->head = it;
    d->tail = it;
    pthread_cond_signal(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

void hs_symd_set_notify(hs_symd *d, void (*fn)(void *data), void *data)
{
    d->notify = fn;
    d->notify_data = data;
}

size_t hs_symd_take_asks(hs_symd *d, hs_symd_ask *out, size_t max)
{
    pthread_mutex_lock(&d->mu);
    size_t n = d->nasks < max ? d->nasks : max;
    memcpy(out, d->asks, n * sizeof *out);
    memmove(d->asks, d->asks + n, (d->nasks - n) * sizeof *out);
    d->nasks -= n;
    pthread_mutex_unlock(&d->mu);
    return n;
}

int hs_symd_upload(hs_symd *d, uint64_t conn_id, const hs_symdata *sd)
{
    item *it = calloc(1, sizeof *it + sd->blen + sd->data.len);
    if (!it) return HS_ENOMEM;
    it->kind = IT_UPLOAD;
    it->conn_id = conn_id;
    it->sd = *sd;
    memcpy(it->buf, sd->bid, sd->blen);
    if (sd->data.len) memcpy(it->buf + sd->blen, sd->data.ptr, sd->data.len);
    it->sd.bid = it->buf;
    it->sd.data.ptr = (const char *)it->buf + sd->blen;
    enqueue(d, it);
    return 0;
}

void hs_symd_upload_abort(hs_symd *d, uint64_t conn_id)
{
    item *it = calloc(1, sizeof *it);
    if (!it) return; /* its .part files stay until the server stops */
    it->kind = IT_ABORT;
    it->conn_id = conn_id;
    enqueue(d, it);
}

size_t hs_symd_upload_queued(hs_symd *d)
{
    pthread_mutex_lock(&d->mu);
    size_t n = d->queued;
    pthread_mutex_unlock(&d->mu);
    return n;
}

void hs_symd_submit(hs_symd *d, hs_symd_conn *c, hs_wjob *j)
{
    item *it = malloc(sizeof *it);
    if (!it) { /* out of memory: straight on, unnamed, rather than lost */
        hs_writer_submit(d->writer, j);
        return;
    }
    it->kind = IT_JOB;
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
    if (d->uploads_done)
        hs_log("symbols: %" PRIu64 " builds received from collectors (%" PRIu64 " bytes sent)",
               d->uploads_done, d->uploads_bytes);
    for (int i = 0; i < HS_SYMD_UPLOADS_MAX; i++) upload_drop(&d->ups[i]);
    hs_refill_free(d->refill);
    free(d->refill_item); /* a job the writer ended without applying */
    free(d->zbuf);
    free(d->db_path);
    hs_symcache_rd_free(d->cache);
    sqlite3_close(d->db);
    hs_buf_free(&d->put);
    hs_syms_free(d->syms);
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cv);
    free(d);
}

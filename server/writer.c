/* hs_writer: the writer thread, its job queue and the runs' grace periods. */
#include "hs_writer.h"

#include <assert.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "hs_clock.h"
#include "hs_error.h"
#include "hs_log.h"
#include "hs_map.h"

/* A connection as the writer knows it. It holds a reference on its run, so
 * the pointer stays valid when the store replaces the run (a broken run
 * resumed by a newer connection); the run's holder tag says which
 * connection feeds it now. */
typedef struct wconn {
    uint64_t id;
    hs_run *run; /* referenced */
    int failed;  /* a frame was refused: later jobs are refused too */
} wconn;

/* A run waiting for a resumed HELLO; once its deadline passes, closing it
 * as lost is retried until it succeeds (a full disk makes it fail), so that
 * no run stays open for the life of the server. Each try reloads the run
 * (replaying its events), so tries back off: 1 s after the first failure,
 * doubling up to HS_GRACE_RETRY_MAX_NS. */
typedef struct grace {
    struct grace *next;
    uint8_t uuid[16];
    uint64_t deadline;
    unsigned failures; /* tries that failed so far */
} grace;

#define HS_GRACE_RETRY_NS     1000000000ull
#define HS_GRACE_RETRY_MAX_NS 8000000000ull

struct hs_writer {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    hs_wjob *q_head, *q_tail;
    hs_wjob *done_head, *done_tail;
    uv_async_t *async;
    hs_store *store;
    hs_writer_config cfg;
    hs_map conns;          /* conn id -> wconn* */
    _Atomic size_t nconns; /* conns.count, for hs_writer_conns() */
    grace *graces;
    uint64_t next_retention;
    int retention_more;
    uint64_t last_job_ns;     /* when the last batch was applied */
    uint64_t next_wal_try;    /* no TRUNCATE checkpoint before this, */
    uint64_t wal_retry_bytes; /* unless it failed and the WAL has grown to this */
    int wal_failing;          /* the last forced one met readers too long */
};

hs_wjob *hs_wjob_new(int kind, uint64_t conn_id, void *conn)
{
    hs_wjob *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->kind = kind;
    j->conn_id = conn_id;
    j->conn = conn;
    return j;
}

void hs_wjob_free(hs_wjob *j)
{
    if (!j) return;
    hs_wjob_free(j->first);
    free(j->frames);
    free(j->data);
    free(j);
}

static int reserve(hs_wjob *j, size_t len)
{
    if (j->len + len <= j->cap) return 0;
    size_t cap = j->cap ? j->cap : 4096;
    while (cap < j->len + len) cap *= 2;
    uint8_t *nd = realloc(j->data, cap);
    if (!nd) return HS_ENOMEM;
    j->data = nd;
    j->cap = cap;
    return 0;
}

int hs_wjob_add_frame(hs_wjob *j, uint64_t seq, uint8_t type, const uint8_t *p, size_t len)
{
    if (j->nframes == j->frames_cap) {
        uint32_t cap = j->frames_cap ? j->frames_cap * 2 : 16;
        hs_wframe *nf = realloc(j->frames, cap * sizeof *nf);
        if (!nf) return HS_ENOMEM;
        j->frames = nf;
        j->frames_cap = cap;
    }
    if (reserve(j, len)) return HS_ENOMEM;
    if (len) memcpy(j->data + j->len, p, len);
    j->frames[j->nframes++] =
        (hs_wframe){.seq = seq, .off = (uint32_t)j->len, .len = (uint32_t)len, .type = type};
    j->len += len;
    return 0;
}

int hs_wjob_set_data(hs_wjob *j, const uint8_t *p, size_t len)
{
    j->len = 0;
    if (reserve(j, len)) return HS_ENOMEM;
    memcpy(j->data, p, len);
    j->len = len;
    return 0;
}

size_t hs_writer_conns(hs_writer *w)
{
    return atomic_load(&w->nconns);
}

void hs_writer_submit(hs_writer *w, hs_wjob *j)
{
    hs_wjob *head = j->first ? j->first : j;
    j->first = NULL;
    head->next = head == j ? NULL : j;
    j->next = NULL;
    assert(!head->first);
    pthread_mutex_lock(&w->mu);
    if (w->q_tail)
        w->q_tail->next = head;
    else
        w->q_head = head;
    w->q_tail = j;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

hs_wjob *hs_writer_take_done(hs_writer *w)
{
    pthread_mutex_lock(&w->mu);
    hs_wjob *j = w->done_head;
    w->done_head = w->done_tail = NULL;
    pthread_mutex_unlock(&w->mu);
    return j;
}

static void post_done(hs_writer *w, hs_wjob *head, hs_wjob *tail)
{
    if (!head) return;
    pthread_mutex_lock(&w->mu);
    if (w->done_tail)
        w->done_tail->next = head;
    else
        w->done_head = head;
    w->done_tail = tail;
    pthread_mutex_unlock(&w->mu);
    uv_async_send(w->async);
}

/* ---- grace periods ----------------------------------------------------- */

static void grace_add(hs_writer *w, const uint8_t uuid[16], uint64_t deadline)
{
    grace *g = calloc(1, sizeof *g);
    if (!g) return; /* the run stays open; the next start gives it a grace period */
    memcpy(g->uuid, uuid, 16);
    g->deadline = deadline;
    g->next = w->graces;
    w->graces = g;
}

static void grace_cancel(hs_writer *w, const uint8_t uuid[16])
{
    for (grace **pp = &w->graces; *pp; pp = &(*pp)->next)
        if (!memcmp((*pp)->uuid, uuid, 16)) {
            grace *g = *pp;
            *pp = g->next;
            free(g);
            return;
        }
}

static void on_open_run(const uint8_t uuid[16], void *data)
{
    hs_writer *w = data;
    grace_add(w, uuid, hs_clock_ns(CLOCK_MONOTONIC) + w->cfg.grace_ns);
}

/* Closes as lost the runs whose grace period is over. */
static void expire_graces(hs_writer *w, uint64_t now)
{
    for (grace **pp = &w->graces; *pp;) {
        grace *g = *pp;
        if (g->deadline > now) {
            pp = &g->next;
            continue;
        }
        int rc = hs_store_begin(w->store);
        if (!rc) rc = hs_store_lose_uuid(w->store, g->uuid);
        if (!rc)
            rc = hs_store_commit(w->store);
        else
            hs_store_rollback(w->store);
        /* the run's memory goes either way: a retry loads it afresh */
        hs_store_release_uuid(w->store, g->uuid);
        if (rc) {
            /* One line for the first failure, then one every 16 tries. */
            if (g->failures % 16 == 0)
                hs_log("run %02x%02x%02x%02x…: cannot close it as lost: %s (%s); retrying",
                       g->uuid[0], g->uuid[1], g->uuid[2], g->uuid[3], hs_strerror(rc),
                       hs_store_errmsg(w->store));
            uint64_t wait = HS_GRACE_RETRY_NS << (g->failures < 3 ? g->failures : 3);
            g->failures++;
            g->deadline = now + (wait < HS_GRACE_RETRY_MAX_NS ? wait : HS_GRACE_RETRY_MAX_NS);
            pp = &g->next;
            continue;
        }
        if (g->failures)
            hs_log("run %02x%02x%02x%02x…: closed as lost after %u failed tries", g->uuid[0],
                   g->uuid[1], g->uuid[2], g->uuid[3], g->failures);
        else
            hs_log("run %02x%02x%02x%02x…: no reconnection within the grace period, closed as "
                   "lost",
                   g->uuid[0], g->uuid[1], g->uuid[2], g->uuid[3]);
        *pp = g->next;
        free(g);
    }
}

/* ---- jobs -------------------------------------------------------------- */

static wconn *conn_get(hs_writer *w, uint64_t id)
{
    uint64_t v;
    return hs_map_get(&w->conns, id, &v) ? (wconn *)(uintptr_t)v : NULL;
}

static void do_hello(hs_writer *w, hs_wjob *j)
{
    hs_hello *h = malloc(sizeof *h);
    if (!h) {
        j->err = HS_ENOMEM;
        return;
    }
    wconn *c = calloc(1, sizeof *c);
    if (!c || hs_map_put(&w->conns, j->conn_id, (uint64_t)(uintptr_t)c)) {
        free(c);
        free(h);
        j->err = HS_ENOMEM;
        return;
    }
    c->id = j->conn_id;
    int rc = hs_hello_decode(h, j->data, j->len);
    hs_run *r = NULL;
    if (rc) {
        snprintf(j->msg, sizeof j->msg, "malformed HELLO: %s", hs_strerror(rc));
    } else if (w->cfg.before_hello && (rc = w->cfg.before_hello(w->cfg.before_hello_data, w->store,
                                                                h, j->msg, sizeof j->msg))) {
        /* refused before the store saw it */
    } else {
        rc = hs_store_run_open(w->store, &r, h, j->msg, sizeof j->msg);
    }
    if (rc) {
        j->err = rc;
        c->failed = 1;
    } else {
        c->run = r;
        hs_run_ref(r);
        hs_run_set_holder(r, j->conn_id);
        grace_cancel(w, h->run_id);
    }
    free(h);
}

static void do_frames(hs_writer *w, hs_wjob *j)
{
    wconn *c = conn_get(w, j->conn_id);
    if (!c || !c->run || c->failed) {
        j->err = HS_EPROTO;
        snprintf(j->msg, sizeof j->msg, "frames of a connection whose run is not open");
        return;
    }
    if (hs_run_released(c->run) || hs_run_holder(c->run) != c->id) {
        c->failed = 1;
        j->err = HS_EBUSY;
        snprintf(j->msg, sizeof j->msg, "the run was resumed by a newer connection");
        return;
    }
    for (uint32_t i = 0; i < j->nframes; i++) {
        const hs_wframe *f = &j->frames[i];
        if (f->type == HS_WFRAME_SYMCACHE) {
            /* a cache: a failure costs a later lookup, not the connection */
            int rc = hs_store_symcache_put(w->store, j->data + f->off, f->len);
            if (rc == HS_EDB) {
                j->err = rc;
                c->failed = 1;
                return;
            }
            continue;
        }
        int rc = hs_store_run_frame(w->store, c->run, f->seq, f->type, j->data + f->off, f->len,
                                    j->msg, sizeof j->msg);
        if (rc) {
            j->err = rc;
            c->failed = 1;
            return;
        }
    }
}

/* Returns the run to release once the transaction is committed, if any,
 * with the connection's reference (the caller drops it). */
static hs_run *do_detach(hs_writer *w, hs_wjob *j, uint64_t now)
{
    wconn *c = conn_get(w, j->conn_id);
    if (!c) return NULL;
    hs_map_del(&w->conns, j->conn_id);
    hs_run *r = c->run, *release = NULL;
    free(c);
    /* A run the store replaced (a broken run resumed by a newer connection
     * first) or that a newer connection feeds is no longer this one's. */
    if (r && !hs_run_released(r) && hs_run_holder(r) == j->conn_id) {
        hs_run_set_holder(r, 0);
        if (hs_run_ended(r) || hs_run_broken(r)) {
            release = r;
            if (hs_run_broken(r) && !hs_run_ended(r))
                grace_add(w, hs_run_uuid(r), now + w->cfg.grace_ns);
        } else {
            grace_add(w, hs_run_uuid(r), now + w->cfg.grace_ns);
        }
    }
    if (!release) hs_run_unref(r);
    return release;
}

/* Applies a list of jobs in one transaction and returns them. */
static void run_jobs(hs_writer *w, hs_wjob *head, uint64_t now)
{
    hs_run *release[64];
    size_t nrelease = 0;
    hs_wjob *tail = NULL;
    /* Read-only, the store refuses every HELLO by itself (with the reason);
     * there is nothing to begin or commit. */
    int ro = hs_store_readonly(w->store) != NULL;
    int rc = ro ? 0 : hs_store_begin(w->store);
    if (rc) hs_log("cannot begin a transaction: %s", hs_store_errmsg(w->store));
    for (hs_wjob *j = head; j; j = j->next) {
        tail = j;
        if (rc) continue;
        switch (j->kind) {
        case HS_WJOB_HELLO:
            do_hello(w, j);
            break;
        case HS_WJOB_FRAMES:
            do_frames(w, j);
            break;
        case HS_WJOB_DETACH: {
            hs_run *r = do_detach(w, j, now);
            if (r && nrelease < HS_COUNTOF(release))
                release[nrelease++] = r;
            else
                hs_run_unref(r); /* stays in memory until the next start */
            break;
        }
        default:
            break;
        }
        if (j->err == HS_EDB) rc = HS_EDB;
    }
    if (ro)
        ;
    else if (!rc)
        rc = hs_store_commit(w->store);
    else
        hs_store_rollback(w->store);
    if (rc) hs_log("transaction failed, its connections are closed: %s", hs_store_errmsg(w->store));
    for (hs_wjob *j = head; j; j = j->next) {
        wconn *c = conn_get(w, j->conn_id);
        if (rc && (j->kind == HS_WJOB_HELLO || j->kind == HS_WJOB_FRAMES)) {
            j->err = HS_EDB;
            snprintf(j->msg, sizeof j->msg, "database error: the frames were not stored");
            if (c) c->failed = 1;
        }
        /* (A failed connection's run may have been replaced.) */
        if (c && c->run && !hs_run_released(c->run) && !hs_run_broken(c->run)) {
            j->next_seq = hs_run_next_seq(c->run);
            j->ended = hs_run_ended(c->run);
        }
    }
    /* A run whose connection detached in this batch may have been taken up
     * again by a resumed HELLO later in the same batch (a collector that
     * reconnects at once): that connection now owns it, and releases it at
     * its own DETACH. */
    for (size_t i = 0; i < nrelease; i++) {
        if (!hs_run_holder(release[i])) hs_store_run_release(w->store, release[i]);
        hs_run_unref(release[i]);
    }
    atomic_store(&w->nconns, w->conns.count);
    post_done(w, head, tail);
}

/* ---- frames named late (server/hs_refill.h) ---------------------------- */

/* Moves the REFILL jobs of *head, in order, to the returned list. */
static hs_wjob *take_refills(hs_wjob **head)
{
    hs_wjob *out = NULL, **tail = &out;
    for (hs_wjob **pp = head; *pp;) {
        hs_wjob *j = *pp;
        if (j->kind != HS_WJOB_REFILL && j->kind != HS_WJOB_GC) {
            pp = &j->next;
            continue;
        }
        *pp = j->next;
        j->next = NULL;
        *tail = j;
        tail = &j->next;
    }
    return out;
}

/* One REFILL job in a transaction of its own, kept short by its sender (a
 * few hundred rows): ingest waits for no more than that. */
static void do_refill(hs_writer *w, hs_wjob *j)
{
    assert(j->kind == HS_WJOB_REFILL && j->on_done);
    int rc = hs_store_readonly(w->store) ? HS_ENOTSUP : hs_store_begin(w->store);
    for (uint32_t i = 0; !rc && i < j->nframes; i++) {
        const hs_wframe *f = &j->frames[i];
        const uint8_t *p = j->data + f->off;
        if (f->type == HS_WFRAME_SYMCACHE)
            rc = hs_store_symcache_put(w->store, p, f->len) == HS_EDB ? HS_EDB : 0;
        else if (f->type == HS_WFRAME_REFILL)
            rc = hs_store_frames_name(w->store, p, f->len, &j->named, &j->renamed);
    }
    if (rc == HS_ENOTSUP)
        ;
    else if (!rc)
        rc = hs_store_commit(w->store);
    else
        hs_store_rollback(w->store);
    if (rc && rc != HS_ENOTSUP) {
        hs_log("naming stored frames failed: %s", hs_store_errmsg(w->store));
        j->named = j->renamed = 0;
    }
    j->err = rc;
    j->on_done(j, j->on_done_data);
}

/* POST /api/gc: hs_store_gc in transactions of its own (store_gc.c: a
 * chunk of runs each, so ingest waits for one chunk at most), then VACUUM. */
static void do_gc(hs_writer *w, hs_wjob *j)
{
    assert(j->kind == HS_WJOB_GC && j->on_done);
    json_error_t je;
    json_t *body = json_loadb((const char *)j->data, j->len, 0, &je), *ans = NULL;
    hs_gc_spec g;
    hs_gc_result r;
    j->err = hs_store_readonly(w->store) ? HS_ENOTSUP : 0;
    if (!j->err) {
        if (!body) snprintf(j->msg, sizeof j->msg, "the body must be JSON: %s", je.text);
        j->err = !body ? HS_EINVAL
                       : hs_gc_spec_json(&g, body, (int64_t)hs_clock_ns(CLOCK_REALTIME), j->msg,
                                         sizeof j->msg);
    }
    json_t *runs = json_array();
    if (!j->err && (j->err = hs_store_gc(w->store, &g, &r, hs_gc_run_json, runs)))
        snprintf(j->msg, sizeof j->msg, "%s", hs_store_errmsg(w->store));
    if (!j->err) {
        ans = hs_gc_result_json(&g, &r, runs);
        hs_log("gc: %s %" PRId64 " runs, database %" PRId64 " -> %" PRId64 " bytes",
               g.dry_run ? "would remove" : "removed", r.runs, r.bytes_before, r.bytes_after);
    } else {
        json_decref(runs);
    }
    char *text = ans ? json_dumps(ans, JSON_COMPACT) : NULL;
    j->len = 0;
    if (text) hs_wjob_set_data(j, (const uint8_t *)text, strlen(text) + 1);
    free(text);
    json_decref(ans);
    json_decref(body);
    j->on_done(j, j->on_done_data);
}

static void retention_step(hs_writer *w, uint64_t now)
{
    uint64_t wall = hs_clock_ns(CLOCK_REALTIME);
    uint64_t cutoff = wall > w->cfg.retain_events_ns ? wall - w->cfg.retain_events_ns : 0;
    int deleted = 0, chunk = 2000;
    int rc = hs_store_begin(w->store);
    if (!rc) rc = hs_store_retain(w->store, cutoff, chunk, &deleted);
    if (!rc)
        rc = hs_store_commit(w->store);
    else
        hs_store_rollback(w->store);
    if (rc) {
        hs_log("retention failed: %s", hs_store_errmsg(w->store));
        deleted = 0;
    } else if (deleted) {
        hs_log("retention: deleted %d events rows", deleted);
    }
    w->retention_more = deleted == chunk;
    if (!w->retention_more) w->next_retention = now + 60ull * 1000000000ull;
}

/* The WAL's bound. PASSIVE checkpoints after commits (hs_store_wal_passive,
 * once the jobs' results are posted)
 * keep it short while readers leave gaps; when overlapping readers keep it
 * from starting over and it passes HS_WAL_LIMIT, a TRUNCATE checkpoint waits
 * up to HS_WAL_TRIES times HS_WAL_WAIT_MS for the readers older than the
 * last commit (ingest waits too: the WAL's growth is held back to the
 * readers' pace). After a
 * try that the readers outlasted, the next comes once the WAL has grown by
 * another quarter of the limit, or a second later. Idle for a second, the
 * writer empties the WAL without waiting. */
#define HS_WAL_LIMIT   (32ull << 20)
#define HS_WAL_WAIT_MS 250
#define HS_WAL_TRIES   4

static void wal_check(hs_writer *w, uint64_t now)
{
    uint64_t wal = hs_store_wal_bytes(w->store);
    int idle = now - w->last_job_ns >= 1000000000ull;
    if (!wal || (!idle && (wal < HS_WAL_LIMIT || !hs_store_wal_stuck(w->store)))) return;
    /* idle: once a second; over the limit: at once, unless the last try
     * failed (then after more growth, or a second) */
    if (now < w->next_wal_try && (idle || (w->wal_failing && wal < w->wal_retry_bytes))) return;
    /* Each try copies what the readers it waited for no longer need, and no
     * commit comes between tries: a few tries outlast readers that overlap. */
    int rc = hs_store_wal_truncate(w->store, idle ? 0 : HS_WAL_WAIT_MS);
    for (int i = 1; i < HS_WAL_TRIES && rc == HS_EBUSY && !idle; i++)
        rc = hs_store_wal_truncate(w->store, HS_WAL_WAIT_MS);
    w->next_wal_try = now + 1000000000ull;
    w->wal_retry_bytes = wal + HS_WAL_LIMIT / 4;
    if (rc && rc != HS_EBUSY)
        hs_log("WAL checkpoint failed: %s", hs_store_errmsg(w->store));
    else if (rc && !idle)
        hs_log("the WAL has grown to %" PRIu64 " MiB: readers held it for more than %d ms",
               wal >> 20, HS_WAL_WAIT_MS * HS_WAL_TRIES);
    if (!idle) w->wal_failing = rc != 0;
}

static void *writer_main(void *arg)
{
    hs_writer *w = arg;
    int stop = 0;
    while (!stop) {
        pthread_mutex_lock(&w->mu);
        if (!w->q_head && !w->retention_more) {
            struct timespec ts = hs_deadline_ms(200);
            pthread_cond_timedwait(&w->cv, &w->mu, &ts);
        }
        hs_wjob *head = w->q_head;
        w->q_head = w->q_tail = NULL;
        pthread_mutex_unlock(&w->mu);
        uint64_t now = hs_clock_ns(CLOCK_MONOTONIC);
        for (hs_wjob *j = head; j; j = j->next)
            if (j->kind == HS_WJOB_STOP) stop = 1;
        hs_wjob *refills = take_refills(&head);
        if (head) {
            run_jobs(w, head, now);
            w->last_job_ns = now;
        }
        while (refills) {
            hs_wjob *j = refills;
            refills = j->next;
            j->next = NULL;
            if (j->kind == HS_WJOB_GC)
                do_gc(w, j);
            else
                do_refill(w, j);
        }
        if (stop) break;
        hs_log_flush(0);
        if (hs_store_readonly(w->store)) continue;
        /* after the loop has its results: no ACK waits for it */
        hs_store_wal_passive(w->store);
        wal_check(w, hs_clock_ns(CLOCK_MONOTONIC));
        expire_graces(w, now);
        if (w->cfg.retain_events_ns && (w->retention_more || now >= w->next_retention))
            retention_step(w, now);
    }
    /* The store stays open: hs_writer_join() empties the WAL once the
     * server's readers are gone. */
    return NULL;
}

int hs_writer_start(hs_writer **out, hs_store *store, const hs_writer_config *cfg,
                    uv_async_t *async)
{
    hs_writer *w = calloc(1, sizeof *w);
    if (!w) return HS_ENOMEM;
    w->store = store;
    hs_store_defer_passive(store); /* hs_store_wal_passive in writer_main */
    w->cfg = *cfg;
    w->async = async;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    const char *ro = hs_store_readonly(store);
    if (ro) hs_log("%s: collectors are refused, queries are answered", ro);
    /* Runs left open by an earlier server get their grace period too. */
    if (hs_store_open_runs(store, on_open_run, w))
        hs_log("cannot list the open runs: %s", hs_store_errmsg(store));
    if (pthread_create(&w->thread, NULL, writer_main, w)) {
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
        free(w);
        return HS_ENOMEM;
    }
    *out = w;
    return 0;
}

/* How long the last checkpoint waits for readers of other processes (a
 * CLI query) to finish what they are reading. */
#define HS_STOP_CHECKPOINT_MS 3000

void hs_writer_join(hs_writer *w)
{
    if (!w) return;
    pthread_join(w->thread, NULL);
    /* A clean stop leaves everything in the database file, so that the file
     * alone is the whole database (people copy the .db without its -wal). */
    if (!hs_store_readonly(w->store)) {
        int rc = hs_store_wal_truncate(w->store, HS_STOP_CHECKPOINT_MS);
        if (rc)
            hs_log("the last checkpoint failed (%s): the runs of the last moments are in %s",
                   rc == HS_EBUSY ? "readers held the database" : hs_store_errmsg(w->store),
                   "the -wal file; keep it with the database");
    }
    hs_store_free(w->store);
    w->store = NULL;
    /* The store is gone; the runs the connections still hold go with their
     * last reference. */
    uint64_t id, v;
    for (size_t pos = 0; hs_map_next(&w->conns, &pos, &id, &v);) {
        wconn *c = (wconn *)(uintptr_t)v;
        if (!c) continue;
        hs_run_unref(c->run);
        free(c);
    }
    hs_map_free(&w->conns);
    while (w->graces) {
        grace *g = w->graces;
        w->graces = g->next;
        free(g);
    }
    hs_wjob *j = hs_writer_take_done(w);
    if (!j)
        j = w->q_head;
    else {
        hs_wjob *t = j;
        while (t->next) t = t->next;
        t->next = w->q_head;
    }
    w->q_head = w->q_tail = NULL;
    while (j) {
        hs_wjob *n = j->next;
        if (j->kind == HS_WJOB_GC && j->on_done) { /* its asker waits: tell it */
            j->err = HS_EBUSY;
            snprintf(j->msg, sizeof j->msg, "the server stopped before the gc ran");
            j->next = NULL;
            j->on_done(j, j->on_done_data);
        } else {
            hs_wjob_free(j);
        }
        j = n;
    }
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
}

/* hs_symd: the symbolizer thread (see hs_symd.h). */
#include "hs_symd.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
};

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
    if (!nj) return j;
    nj->charged = j->charged;
    hs_wjob_free(j);
    return nj;
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
        hs_writer_submit(d->writer, j);
        /* the last touch of the connection (see hs_symd.h) */
        if (it->conn) atomic_fetch_sub(&it->conn->jobs, 1);
        free(it);
    }
    return NULL;
}

int hs_symd_start(hs_symd **out, const hs_syms_config *cfg, hs_writer *w)
{
    hs_symd *d = calloc(1, sizeof *d);
    if (!d) return HS_ENOMEM;
    int rc = hs_syms_new(&d->syms, cfg);
    if (rc) {
        free(d);
        return rc;
    }
    d->writer = w;
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    if (pthread_create(&d->thread, NULL, symd_main, d)) {
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
    if (c) atomic_fetch_add(&c->jobs, 1);
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
    /* a lookup that found its build read already is a cache hit */
    uint64_t hits = st.lookups - st.builds_opened - st.builds_missing;
    if (st.lookups)
        hs_log("symbols: %" PRIu64 " pcs named in %" PRIu64 " ms (%" PRIu64 " builds read, %" PRIu64
               " not found; %" PRIu64 " of %" PRIu64 " lookups from builds read before)",
               d->entries, d->resolved_ns / 1000000, st.builds_opened, st.builds_missing, hits,
               st.lookups);
    hs_syms_free(d->syms);
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cv);
    free(d);
}

/* hs_writer: the one thread of heapstore-server that writes the database.
 *
 * The loop thread hands it jobs (a HELLO, a batch of frames of one
 * connection, the end of a connection); the writer applies every job waiting
 * at once in one transaction through hs_store, commits, fills in each job's
 * result (the run's committed next_seq, or the error that must close the
 * connection) and hands the jobs back: it pushes them on a done list and
 * wakes the loop with uv_async_send. Jobs are taken and returned in order,
 * so the result of a connection's DETACH is the last thing the loop hears
 * about that connection.
 *
 * The writer also owns the runs' lifetimes: a run whose connection ended
 * without BYE is kept for the grace period, waiting for a resumed HELLO,
 * then closed as lost; and it runs retention in small transactions between
 * batches so that deleting never holds ingest up for long. Each connection
 * holds a reference on its run (hs_run_ref), so a run the store replaces
 * under it stays valid and says so (hs_run_released). It runs the WAL
 * checkpoints too (SQLite's automatic ones are off): PASSIVE after commits,
 * TRUNCATE when idle, and TRUNCATE waiting briefly for readers when they
 * keep the WAL past 32 MiB, so the WAL stays bounded under long readers.
 */
#ifndef HS_WRITER_H
#define HS_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "hs_store.h"

enum hs_wjob_kind {
    HS_WJOB_HELLO,  /* data holds the HELLO payload */
    HS_WJOB_FRAMES, /* frames of the connection's run */
    HS_WJOB_DETACH, /* the connection is gone */
    HS_WJOB_SYNC,   /* nothing: its return means every earlier job is committed */
    HS_WJOB_STOP,   /* the writer finishes after this one */
    /* names stored frames (HS_WFRAME_REFILL frames, server/hs_refill.h):
     * applied in a transaction of its own after the jobs queued with it,
     * then handed to on_done (on the writer thread) instead of the loop */
    HS_WJOB_REFILL,
    /* removes runs (POST /api/gc: data holds its JSON body; hs_store_gc):
     * applied as a REFILL is, after the jobs queued with it, and handed to
     * on_done with data replaced by the JSON answer (err: 0, HS_EINVAL with
     * msg, or the store's trouble) */
    HS_WJOB_GC,
};

/* A frame of a FRAMES job that no peer sends (net.c admits only the
 * protocol's types): the symbolizer's answers for the symbol cache
 * (hs_store_symcache_put), without a sequence number. */
#define HS_WFRAME_SYMCACHE 0xf0
/* A frame of a REFILL job: names for frames rows stored unnamed
 * (hs_store_frames_name). */
#define HS_WFRAME_REFILL 0xf1

typedef struct hs_wframe {
    uint64_t seq;
    uint32_t off, len; /* payload at data + off */
    uint8_t type;
} hs_wframe;

typedef struct hs_wjob {
    struct hs_wjob *next;
    /* A HELLO the writer applies just before this job, in the same
     * transaction (the frames that came with it): hs_writer_submit queues
     * it first and clears this; hs_wjob_free frees it while still set. */
    struct hs_wjob *first;
    int kind;
    uint64_t conn_id;
    void *conn; /* the loop's; untouched by the writer */
    hs_wframe *frames;
    uint32_t nframes, frames_cap;
    uint8_t *data;
    size_t len, cap;
    size_t charged; /* what the loop counts in its connection's inflight bytes */
    int via_symd;   /* the loop's: the job went through the symbolizer thread */
    /* results */
    int err;           /* 0 or HS_E*: close the connection */
    char msg[256];     /* why, for the log (and REFUSE) */
    uint64_t next_seq; /* the run's committed next_seq */
    int ended;         /* the run has ended (BYE stored) */
    /* REFILL: called on the writer thread once the job is applied (err set),
     * in place of the loop's done list; it owns j from then on */
    void (*on_done)(struct hs_wjob *j, void *data);
    void *on_done_data;
    uint64_t named, renamed; /* REFILL results: frames named, of them under a key of their own */
} hs_wjob;

typedef struct hs_writer_config {
    uint64_t grace_ns;         /* a run without connection is closed as lost after this */
    uint64_t retain_events_ns; /* 0: keep events forever */
    /* NULL, or called with each decoded HELLO inside the transaction just
     * before hs_store_run_open (a ClickHouse store fetches back a run that
     * another front end carried on: hs_chship_resume); non-zero refuses
     * the HELLO with that code and err. On the writer's thread. */
    int (*before_hello)(void *data, hs_store *store, const hs_hello *h, char *err, size_t errlen);
    void *before_hello_data;
} hs_writer_config;

typedef struct hs_writer hs_writer;

/* Starts the thread; it owns store from now on and frees it when it ends.
 * Results are announced on async (whose data the caller owns). */
int hs_writer_start(hs_writer **out, hs_store *store, const hs_writer_config *cfg,
                    uv_async_t *async);

hs_wjob *hs_wjob_new(int kind, uint64_t conn_id, void *conn);
void hs_wjob_free(hs_wjob *j);
/* Appends a frame to a FRAMES job (copies the payload). */
int hs_wjob_add_frame(hs_wjob *j, uint64_t seq, uint8_t type, const uint8_t *p, size_t len);
/* Sets a HELLO job's payload. */
int hs_wjob_set_data(hs_wjob *j, const uint8_t *p, size_t len);

void hs_writer_submit(hs_writer *w, hs_wjob *j);
/* Takes the list of finished jobs, oldest first (NULL when none). */
hs_wjob *hs_writer_take_done(hs_writer *w);

/* Connections the writer holds state for (HELLO seen, DETACH not yet), as
 * of its last batch: it goes back down as connections end. */
size_t hs_writer_conns(hs_writer *w);

/* Waits for the thread to end (after a STOP job), empties the WAL into the
 * database file (TRUNCATE checkpoint, waiting a few seconds for readers of
 * other processes; call it once the caller's own readers are closed) and
 * frees w and the store. */
void hs_writer_join(hs_writer *w);

#endif

/* ch_ship_int: what the files of the shipper (ch_ship.c: passes; ch_marks.c:
 * its watermarks kept on disk; ch_resume.c: a run fetched back from
 * ClickHouse) share: the shipper's state and the per-run watermarks.
 *
 * Invariants: every map holds what ClickHouse has accepted (or what a pass
 * in flight will send again, content ids being the same whatever the
 * pass); the marks file never holds a watermark ahead of ClickHouse (it is
 * written after a pass landed), so a start from it re-sends at most the
 * last pass's rows.
 */
#ifndef HS_CH_SHIP_INT_H
#define HS_CH_SHIP_INT_H

#include <pthread.h>
#include <stdint.h>

#include <sqlite3.h>

#include "hs_chship.h"
#include "hs_chttp.h"
#include "hs_map.h"

/* What was shipped of one run. */
typedef struct ship_run {
    int64_t local, id; /* runs.id here, its content id there */
    uint16_t day;
    uint64_t sig;                            /* hash of its runs row as last shipped */
    int64_t seq, snap, series, ps, hx, mapt; /* the per-table watermarks */
    uint64_t peak_sig;
    uint64_t tail_sig; /* hash of its open segment (events_tail) as last shipped */
    int64_t npcs, nstacks;
    int64_t stats;     /* the run's stats_bucket when its summaries were last shipped */
    int64_t next_seq;  /* its runs row's next_seq as last shipped */
    int moved;         /* another front end carries the run on: not shipped while so */
    int ours;          /* 1: ClickHouse's row was this front end's when last looked at */
    int ended;         /* its state was not 'open' as last shipped */
    uint64_t pruning;  /* wall ns before which not to ask for its removal again */
    uint64_t quiet_ns; /* wall ns of its last change shipped */
} ship_run;

/* The tables whose rows a pass ships, in this order (runs last: a run
 * that readers find has its rows). */
enum {
    T_FRAMES,
    T_TRACES,
    T_EVENTS,
    T_SNAP,
    T_SERIES,
    T_PS,
    T_SIZES,
    T_RX,
    T_HX,
    T_LABELS,
    T_MAPS,
    T_PCS,
    T_STACKS,
    T_TSTATS,
    T_RUNS,
    T__COUNT
};

enum {
    PR_EVENTS,
    PR_TAIL,
    PR_SNAP,
    PR_PEAK,
    PR_SERIES,
    PR_PS,
    PR_SIZES,
    PR_RX,
    PR_HX,
    PR_LABELS,
    PR_MAPS,
    PR_PCS,
    PR_STACKS,
    PR_TSTATS,
    PR__COUNT
};

/* A local id given its content id during a pass: written to the marks
 * file once the pass has landed. kind 'f' or 't'. */
typedef struct ship_newid {
    char kind;
    int64_t local, content;
} ship_newid;

struct hs_chship {
    sqlite3 *db;
    hs_ch *ch;
    int schema_ok, codec;
    sqlite3_stmt *per[PR__COUNT], *frames, *traces, *runs, *npcs, *nstacks, *peaksig, *tailsig;
    sqlite3_stmt *frame, *nunnamed_st;
    int64_t *unnamed; /* local ids of frames shipped without a name */
    size_t nunnamed, capunnamed;
    int unnamed_dirty;        /* the list changed since the marks file had it */
    hs_map frame_id, node_id; /* local id -> content id (every row shipped so far) */
    hs_map run_idx;           /* local run id -> index in runs */
    ship_run *rs;
    size_t nrs, caprs;
    int64_t wm_frame, wm_trace;
    uint64_t ver;
    hs_buf out[T__COUNT];
    uint64_t nrows[T__COUNT];
    ship_newid *newids; /* this pass's */
    size_t nnewids, capnewids;
    hs_chship_stats stats;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int running, stopping, interval_ms;
    int retain_months;
    hs_map shipped;             /* run content id -> next_seq shipped; under mu */
    void (*notify)(void *data); /* under mu */
    void *notify_data;
    uint64_t retained_at; /* wall ns of the last retention run */
    int64_t ds_after;     /* downsampling: age in s (-1: none), factor, last run */
    int ds_by;
    uint64_t ds_at;
    /* the marks file (ch_marks.c): NULL when it cannot be kept */
    sqlite3 *marks;
    char *marks_path;
    uint64_t front; /* this front end's id (runs.front): a hash of host and buffer path */
    /* pruning: fn(data, local run id) asks the writer to remove the run */
    int (*prune)(void *data, int64_t local); /* under mu */
    void *prune_data;
    int in_prune;    /* under mu: the thread is in prune(); cv says when it is out */
    int64_t keep_ns; /* an ended run leaves the buffer this long after it was shipped */
    /* resumption (ch_resume.c), on the writer's thread only */
    hs_ch *rch;
    char *url;
};

/* ch_base.c: what the shipper's files share, calling none of them. */
/* A run's content id: a hash of its whole uuid (uuids of tests and of some
 * collectors differ in a few bytes only). */
int64_t hs__chship_run_id(const uint8_t *uuid, int n);
/* fn on every server holding rows: on ch itself (sfx "") when the tables
 * are plain, else on each shard of the cluster behind the Distributed
 * tables over its own NAME_local tables (sfx "_local"), reached at the
 * address the store URL's shards=HOST:PORT,… gives it, else at its first
 * replica's host on the URL's port. Nothing is done unless every shard is
 * reached (the error names what and the shard); fn's error stops it. */
int hs__chship_each_shard(hs_ch *ch, const char *what,
                          int (*fn)(hs_ch *shard, const char *sfx, void *arg, char *err,
                                    size_t errlen),
                          void *arg, char *err, size_t errlen);

/* The marks file (ch_marks.c), PATH-chship beside the buffer. open:
 * creates it or reads it back into s (maps, watermarks, runs), unless it
 * belongs to another buffer (then it starts over). save: after a pass that
 * landed, its new ids, runs and watermarks in one transaction. Errors are
 * logged and leave shipping working (the file then goes unused). */
int hs__chmarks_open(hs_chship *s, const char *db_path);
void hs__chmarks_save(hs_chship *s, const size_t *idx, size_t n);
void hs__chmarks_forget(hs_chship *s, int64_t local);
void hs__chmarks_close(hs_chship *s);

#endif

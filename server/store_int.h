/* store_int: what store.c, store_frames.c and store_rollup.c share: the
 * prepared statements, the in-memory run and its rollup slots.
 *
 * A slot is one trace of one run: its live estimated bytes and count, the
 * same at the start of the current bucket (so the bucket's delta is the
 * difference) and at the run's peak. The peak copy is kept lazily: the run
 * has a peak version that grows each time a new peak is reached; a slot
 * whose pk_ver is not the run's current one has not changed since that peak,
 * so its live values are its values at the peak. Before a slot changes, it
 * saves its values as the peak copy when its pk_ver is stale. That makes the
 * live state at the exact instant of the peak cost O(1) per event.
 */
#ifndef HS_STORE_INT_H
#define HS_STORE_INT_H

#include "hs_evcodec.h"
#include "hs_map.h"
#include "hs_maps.h"
#include "hs_store.h"
#include "hs_series.h"
#include "hs_snaps.h"
#include "hs_tree.h"
#include "hs_tstats.h"

enum {
    ST_RUN_BY_UUID,
    ST_RUN_INSERT,
    ST_RUN_CHILDREN,
    ST_LABEL,
    ST_RUN_UPDATE,
    ST_RUN_STATE,
    ST_RUN_BYE,
    ST_RUN_DROP,
    ST_MAPPING,
    ST_FRAME_GET,
    ST_FRAME_INSERT,
    ST_EVENTS,
    ST_SNAP_DEL_PEAK,
    ST_SERIES,
    ST_PROCESS,
    ST_SIZES,
    ST_MAPS_LOAD, /* schema 13: a run's chunks of a map, with their seq */
    ST_LOAD_EVENTS,
    ST_CLEAR_SNAP,
    ST_CLEAR_WINDOWS,
    ST_CLEAR_SERIES,
    ST_OPEN_RUNS,
    ST_RETAIN,
    ST_TSTATS,
    ST_TSTATS_MARK,
    ST_TSTATS_CLEAR,
    ST_SYMCACHE,
    ST_SYMCACHE_LAST,
    ST_EXACT_MAX,
    ST_EXACT_OBS,
    ST_RUN_EXACT,
    ST_RUN_EXACT_LOAD,
    ST_RUN_SUMMARY, /* schema 9: rss_peak_bytes, leak_bytes_per_s at the run's end */
    ST_TAIL_PUT,    /* schema 10: the open segment's row so far */
    ST_TAIL_DEL,
    ST_TAIL_MOVE, /* a run's tail row into events (when the run is loaded again) */
    ST_COUNT
};

enum { HS_RUN_OPEN, HS_RUN_ENDED, HS_RUN_LOST };

/* At most this many decoded EVENTS entries are kept between the two passes
 * (40 bytes each); a bigger frame is decoded twice. */
#define HS_EVCACHE_MAX (64u << 10)

/* Values no collector can send, refused (closing the connection) so that a
 * forged stream cannot store them: a time past 2^62 ns (146 years into a
 * run; near 2^64 it would be stored as a negative end_ns), and frees that
 * take a run's live bytes below -(bytes it ever allocated + HS_FREE_SLACK).
 * Legitimately live bytes dip below zero only by what other threads'
 * batches still carry, or what the collector dropped (a free may follow a
 * dropped allocation): a tebibyte of slack covers any real process. */
#define HS_T_MAX      (1ull << 62)
#define HS_FREE_SLACK (1ll << 40)

/* Hard caps on what one run may define (memory per run is bounded). */
#define HS_RUN_MAX_PCS    (4u << 20)
#define HS_RUN_MAX_STACKS (1u << 20)

/* The stack tree as the writer knows it (store_tree.c). */
typedef struct hs_wtree {
    int loaded;           /* index and open hold what the database has */
    hs_map index;         /* (parent << 32 | frame) -> id, every node */
    hs_tree_node *odd;    /* nodes whose parent or frame does not fit the */
    size_t nodd, odd_cap; /* index's key (none but in a hand-made file) */
    hs_tree_node *open;   /* the last block (HS_TREE_BLOCK_NODES entries) */
    size_t nopen;
    size_t block_max; /* nodes a block takes (HS_TREE_BLOCK_NODES; tests lower it) */
    int dirty;        /* open has nodes trace_blocks has not */
    int64_t next_id;
} hs_wtree;

/* The open chunk of one of a run's id maps (store_maps.c). */
typedef struct hs_wmap {
    hs_maps_entry *open; /* its entries, as they came (repeats settled when written) */
    size_t n, cap;
    int64_t seq; /* its run_maps.seq */
    int dirty;   /* open has entries its row has not */
} hs_wmap;

typedef struct hs_slot {
    int64_t trace;
    int64_t bytes;    /* live estimated bytes */
    double count;     /* live estimated blocks */
    int64_t b0_bytes; /* bytes at the start of the current bucket */
    int64_t b0_count; /* rounded count written as of the start of the bucket */
    int64_t pk_bytes; /* values at the peak, when pk_ver is the run's peak_ver */
    double pk_count;
    uint64_t pk_ver;
    int dirty;      /* changed during the current bucket */
    int ts_dirty;   /* delta rows since its trace_stats row was written */
    hs_tstats ts;   /* its delta rows so far, summed (schema/hs_tstats.h) */
    uint32_t win_n; /* while a window is written: its rows' place (store_rollup.c); else 0 */
} hs_slot;

/* A delta row of the window of buckets being gathered (store_rollup.c). */
typedef struct hs_winrow {
    uint32_t slot, off; /* off: its bucket's place in the window */
    int64_t bytes;
} hs_winrow;

typedef struct hs_wintrace {
    int64_t trace;
    uint32_t slot;
} hs_wintrace;

/* An event applied since the last exact observation (store_rollup.c). */
typedef struct hs_exlog {
    uint32_t slot;
    uint64_t t_ns;
    int64_t bytes; /* signed: a free is negative */
    double count;
} hs_exlog;

#define HS_EXLOG_MAX (1u << 14) /* 512 KiB */

/* A run's open segment of events (schema 10) closes once its compressed part
 * reaches this many bytes: a partial-time read decodes at most about this
 * much beyond what it needs, and a transaction rewrites at most this much
 * of the open segment's row. (It also closes before a frame could take its
 * bytes past HS_EVSEG_RAW_CAP.) */
#define HS_EVSEG_Z_CAP (64u << 10)
/* A commit closes the open segment once its compressed part reaches this
 * many bytes (rather than rewrite its row in events_tail): a sampled run,
 * whose events compress little, writes each event about once, as it did
 * with a row per frame; an every-allocation run, whose segments stay small
 * for millions of events, rewrites a small row. */
#define HS_EVSEG_COMMIT_CLOSE (16u << 10)
/* A run's events not yet compressed are compressed once this many bytes:
 * what an open segment holds in memory stays small however many frames a
 * transaction takes. */
#define HS_EVSEG_PENDING_MAX (128u << 10)
/* Compression contexts of closed segments kept for the next ones. */
#define HS_ZPOOL_MAX 16

struct hs_run {
    hs_run *next;       /* hs_store.runs */
    hs_run *touch_next; /* hs_store.touched */
    int touched, broken;
    int refs;        /* the store's (while in runs) plus hs_run_ref()'s; freed at 0 */
    int released;    /* no longer the store's: replaced or released */
    uint64_t holder; /* the user's tag (hs_run_set_holder); never read by the store */
    int state;       /* HS_RUN_* */
    int stub;        /* loaded as ended: no counters in memory, its row is never rewritten */
    /* The DROPS counters as its row holds them, for the kinds whose bit is
     * set in drops_known (all, with zeros, for a row this store inserted;
     * none for a loaded one): a DROPS frame rewrites only those that moved
     * (the last one repeats every kind, mostly zeros). */
    uint64_t drops_row[HS_DROP_KIND_MAX + 1];
    uint32_t drops_known;
    int64_t id;
    uint8_t uuid[16];
    uint64_t next_seq;
    uint64_t g; /* bucket width, ns */
    uint32_t k; /* keyframe every k buckets */
    uint64_t sample_bytes;

    hs_map pcs;                  /* collector pc -> frames.id */
    hs_map stacks;               /* collector stack id -> slot index */
    hs_map traces;               /* traces.id -> slot index */
    hs_wmap maps[HS_MAPS_KINDS]; /* the open chunks of pcs and stacks */
    hs_slot *slots;
    uint32_t nslots, cap;
    uint32_t *dirty; /* slots changed in the current bucket */
    uint32_t ndirty, dirty_cap;

    int64_t bucket;     /* current bucket, -1 before the first event */
    int64_t ts_rows;    /* delta rows written since the trace_stats rows were */
    int64_t kf_deltas;  /* delta rows written since the last keyframe */
    uint32_t ts_ndirty; /* slots with ts_dirty */
    int64_t live_bytes;
    double live_count;
    int64_t bucket_max, bucket_alloc, bucket_free;
    int64_t peak_bytes, peak_count;
    uint64_t peak_t;
    int64_t peak_bucket;
    uint64_t peak_ver;
    int peak_dirty; /* the peak moved since its rows were written */
    /* The delta rows of the window of r->bucket so far, for snapshot_series
     * (schema/hs_series.h, store_rollup.c); win_over: more than could be
     * gathered, the window is read from snapshot_blocks. */
    hs_winrow *win;
    uint32_t nwin, win_cap;
    int win_over;
    uint64_t alloc_events, free_events;
    int64_t total_alloc_bytes;
    double total_alloc_count;
    uint64_t end_ns; /* time of the last event seen */
    /* Exact heap totals (schema 008, store_rollup.c). With ex_on, peak_*
     * are the exact peak's and the slots' peak copies hold their state at
     * its moment; est_peak_* always follow the sampled series. */
    int ex_seen, ex_on;
    hs_exact ex; /* the latest observation */
    int64_t est_peak_bytes;
    uint64_t est_peak_t;
    hs_exlog *exlog; /* events applied since the last observation */
    uint32_t nexlog, exlog_cap;
    int exlog_full; /* some were not kept: a new peak takes the state as it is */
    /* runs.resume_key: what a resumed HELLO must repeat (none: the run
     * cannot be resumed by a collector) */
    uint8_t key[HS_RESUME_KEY_MAX];
    uint32_t key_len;
    /* The open segment of its events (store_frames.c): the events of frames
     * seg_seq on, its row in events_tail rewritten at each commit while
     * seg_dirty, moved to events when it closes. */
    hs_evseg seg;
    int64_t seg_seq;
    int seg_dirty;
    int seg_tail; /* its row in events_tail exists */
    uint64_t q;   /* its events' time quantum (hs_store_config.event_time_ns) */
};
_Static_assert(HS_DROP_KIND_MAX < 32, "drops_known holds a bit per kind");

struct hs_store {
    sqlite3 *db;
    int lock_fd;      /* PATH-lock, flock()ed for the store's life; -1: none */
    int readonly;     /* the database cannot be written where it lies */
    char ro_why[512]; /* why, for a person, when readonly */
    int trust_resume; /* import: a resumed HELLO needs no key (see hs_store_import) */
    sqlite3_stmt *st[ST_COUNT];
    uint64_t granularity_ns;
    uint32_t keyframe_every;
    hs_run *runs;
    hs_run *touched;
    int in_tx;
    int db_failed;
    uint64_t wal_pages; /* pages in the WAL after the last commit or checkpoint */
    uint32_t page_size;
    int wal_copied;    /* the last PASSIVE checkpoint copied the whole WAL */
    int wal_stuck;     /* readers kept the WAL from being copied or starting over */
    int passive_defer; /* hs_store_defer_passive: commits leave the checkpoint */
    uint32_t *scratch; /* slot of each entry of the EVENTS frame being applied */
    size_t scratch_cap;
    hs_event *evcache;         /* the entries decoded by the validating pass, so that the */
    size_t evcache_cap;        /* applying pass need not decode them again (bounded) */
    hs_evdec dec;              /* decodes events rows replayed into the rollups */
    void *zpool[HS_ZPOOL_MAX]; /* contexts of closed segments (hs_evseg_take_ctx) */
    int nzpool;
    uint64_t event_quantum_ns; /* event times are rounded to multiples of it */
    char key[HS_FUNC_MAX + HS_STR_MAX + 64];
    hs_wtree tree;
    hs_snaps_wr *snaps;    /* the snapshot rows' writer (schema/hs_snaps.h) */
    hs_snap_row *snaprows; /* the rows of the group being written */
    size_t nsnaprows, snaprows_cap;
    hs_series_wr *series;   /* the windows' rows by trace (schema/hs_series.h) */
    hs_series_row *winrows; /* a window's rows being written, by trace */
    size_t winrows_cap;
    hs_wintrace *wintraces; /* the traces of a window being written */
    size_t wintraces_cap;
};

void hs__store_seterr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Steps a statement that returns no rows we need, resets it. */
int hs__store_step_done(hs_store *s, sqlite3_stmt *st);
void hs__store_touch(hs_store *s, hs_run *r);
/* Maps a collector stack id to a trace, making the trace's slot if new
 * (store_maps.c). */
int hs__store_bind_stack(hs_run *r, uint64_t stack_id, int64_t trace);
/* Applies an EVENTS payload to the rollups; with seq >= 0 it is also stored
 * as events row seq. Two passes: nothing changes unless all entries are
 * valid. */
int hs__store_events(hs_store *s, hs_run *r, const uint8_t *p, size_t len, int64_t seq, char *err,
                     size_t errlen);
/* Applies a stored events row (common/hs_evcodec.h) to the rollups, as
 * hs__store_events does a frame; a corrupt row is an error (HS_ECORRUPT). */
int hs__store_replay_events(hs_store *s, hs_run *r, const uint8_t *blob, size_t len, char *err,
                            size_t errlen);
/* Writes run r's open segment of events: with close, or at a commit (close
 * 0) once it is HS_EVSEG_COMMIT_CLOSE bytes, its final blob into events (the
 * segment then starts over empty); else its blob so far into events_tail.
 * Nothing to write: 0. */
int hs__store_segment(hs_store *s, hs_run *r, int close);
/* Writes the rows of the current bucket and moves to bucket nb. */
int hs__rollup_advance(hs_store *s, hs_run *r, int64_t nb);
/* Writes the final rows of a run: its last bucket, a keyframe, the peak. */
int hs__rollup_finish(hs_store *s, hs_run *r);
/* The peak side of an applied event: the sampled series' peak, and for the
 * exact one the peak copy of the slot and the event log. bytes and count
 * are signed (a free is negative); called after the slot changed. */
void hs__rollup_peak_event(hs_run *r, uint32_t idx, const hs_event *e, int64_t bytes, double count);
/* An exact observation (DROPS kinds 32-43) of run r. */
int hs__store_exact(hs_store *s, hs_run *r, const hs_exact *x);
/* Before an open run's events are replayed: its stored exact peak. */
int hs__store_exact_load(hs_store *s, hs_run *r);
/* The stack tree (store_tree.c). hs__tree_intern sets *id to the node
 * (parent, frame), made at depth when new; hs__tree_flush writes the last
 * block when it has new nodes (before each commit); hs__tree_forget drops
 * what the writer knows (after a rollback: read again when next needed). */
int hs__tree_init(hs_store *s);
int hs__tree_intern(hs_store *s, int64_t parent, int64_t frame, int64_t depth, int64_t *id);
int hs__tree_flush(hs_store *s);
void hs__tree_forget(hs_store *s);
void hs__tree_free(hs_store *s);
/* A frame's columns (schema 012: its key is computed from them). alias:
 * empty for nearly every frame; else what follows the content in its key. */
typedef struct hs_frame_row {
    hs_str function, file, module, alias;
    int64_t line, module_offset;
} hs_frame_row;
/* The id of the frame f, found by its key or else inserted (store_frames.c).
 * HS_ETOOBIG: a key longer than the store's buffer. */
int hs__frame_intern(hs_store *s, const hs_frame_row *f, int64_t *id);
/* Writes f's content key (its key without the alias) into s->key; its
 * length, or -1 when it does not fit. */
int hs__frame_content_key(hs_store *s, const hs_frame_row *f);
/* The runs' id maps (store_maps.c). hs__maps_load reads run r's maps into
 * r->pcs and its slots, and their open chunks; hs__maps_put adds an entry
 * (one that changes the map) to r's open chunk of kind; hs__maps_flush
 * writes the open chunks that changed (before each commit). */
int hs__maps_load(hs_store *s, hs_run *r);
int hs__maps_put(hs_store *s, hs_run *r, int kind, int64_t key, int64_t value);
int hs__maps_flush(hs_store *s, hs_run *r);
void hs__maps_free(hs_run *r);
/* Deletes the trace_stats of a run whose rollups are about to be rebuilt. */
int hs__rollup_reset(hs_store *s, hs_run *r);

#endif

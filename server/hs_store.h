/* hs_store: turns the frames of collector streams into rows of a heapstore
 * database (schema/001_init.sql), with the rollups built on the way.
 *
 * It is the storage half of heapstore-server's writer thread and the whole of
 * `heapstore import`: one hs_store owns one read-write SQLite connection with
 * every statement prepared once, and an in-memory state per open run (the
 * run's pc and stack tables, live bytes and count per trace, the current
 * bucket, the peak). Not thread-safe: exactly one thread uses an hs_store.
 *
 * Rows written per run: the runs row (counters and next_seq updated in each
 * transaction that touched the run), one events row per EVENTS frame (its
 * entries in the storage codec, common/hs_evcodec.h), and, whenever a run's
 * events leave a time bucket, that bucket's snapshot deltas and heap_series row, a keyframe every
 * keyframe_every buckets and at the run's end, and the state at the peak.
 * The bucket in progress lives only in memory: after a restart a resumed or
 * lost run is rebuilt by replaying its stored events (hs_store_run_open), so
 * everything acknowledged is in the rollups in the end.
 *
 * Frames carry sequence numbers (docs/protocol.md): a frame below the run's
 * next_seq is already stored and is skipped, so a resend is harmless.
 *
 * Transactions belong to the caller: hs_store_begin(), any number of frames
 * from any runs, hs_store_commit(). A failed commit (or any database error)
 * makes the runs touched in the transaction stale: they are marked broken
 * and rebuilt from the database by their next hs_store_run_open().
 */
#ifndef HS_STORE_H
#define HS_STORE_H

#include <stddef.h>
#include <stdint.h>

#include <sqlite3.h>

#include "hs_proto.h"

typedef struct hs_store hs_store;
typedef struct hs_run hs_run;

typedef struct hs_store_config {
    uint64_t granularity_ns; /* width of a rollup bucket for new runs; 0: 1 s */
    uint32_t keyframe_every; /* a keyframe every K buckets; 0: 32 */
    /* Event times are rounded down to multiples of it as they arrive, once,
     * before the rollups and the stored events see them (so a replay rebuilds
     * what ingest computed); 0: HS_STORE_EVENT_TIME_NS. A value that does not
     * divide a run's bucket width is replaced by their greatest common
     * divisor, so that no event changes bucket. */
    uint64_t event_time_ns;
} hs_store_config;

/* The default time quantum of events: a millisecond, a thousandth of the
 * default bucket, as fine as heaptrack's timestamps or finer. The order of
 * events is kept exactly; only their times are coarse. */
#define HS_STORE_EVENT_TIME_NS 1000000ull

/* Opens (creating and migrating) the database at path. On failure writes a
 * message for a person into err. One store writes a database at a time: the
 * store holds an exclusive lock on PATH-lock for its life, and a second
 * hs_store_open() of the same path, from any process, fails with HS_EBUSY
 * and a message naming the holder's pid (read-only openers, such as the
 * query layer and the CLI, take no lock and are not held up). A database
 * that cannot be written where it lies is opened read-only: see
 * hs_store_readonly(). */
int hs_store_open(hs_store **out, const char *path, const hs_store_config *cfg, char *err,
                  size_t errlen);

/* Releases every in-memory run (their rows stay as they are: open runs
 * remain open in the database) and closes the connection. Accepts NULL. */
void hs_store_free(hs_store *s);

int hs_store_begin(hs_store *s);
/* Writes the runs rows of the runs touched since begin and commits. */
int hs_store_commit(hs_store *s);
/* Rolls back and marks the runs touched since begin broken. */
void hs_store_rollback(hs_store *s);

/* WAL checkpoints are the store's user's (SQLite's automatic ones are off):
 * hs_store_commit() runs a PASSIVE one once the WAL holds
 * HS_STORE_WAL_PASSIVE bytes; it copies what no reader still needs into the
 * database and never waits. Readers that overlap without pause keep the WAL
 * from starting over, so it grows: hs_store_wal_truncate() then waits up to
 * busy_ms for the readers older than the last commit, copies everything and
 * empties the file (HS_EBUSY when the readers outlast busy_ms; readers that
 * start meanwhile read the database file and do not hold it up). Outside a
 * transaction. hs_store_wal_bytes() is the WAL's size as of the last commit
 * or checkpoint; hs_store_wal_stuck() is 1 when readers kept the last
 * PASSIVE checkpoint from copying all of it, or the WAL, copied, from
 * starting over at the next commit (without readers a big WAL is copied and
 * starts over by itself: nothing to force). */
#define HS_STORE_WAL_PASSIVE (16u << 20)
/* After hs_store_defer_passive(), commits leave that PASSIVE checkpoint to
 * hs_store_wal_passive(), which the writer calls once the commit's results
 * are on their way (an ACK need not wait for a checkpoint of 16 MiB).
 * hs_store_wal_passive() runs it if the WAL is that big; outside a
 * transaction. */
void hs_store_defer_passive(hs_store *s);
void hs_store_wal_passive(hs_store *s);
int hs_store_wal_truncate(hs_store *s, int busy_ms);
uint64_t hs_store_wal_bytes(const hs_store *s);
int hs_store_wal_stuck(const hs_store *s);

/* The message of the last database error, for logs. */
const char *hs_store_errmsg(hs_store *s);

/* NULL when the database can be written; else why not, for a person
 * ("database PATH is read-only: it is on a read-only file system"). A
 * read-only store is still opened (the server goes on answering queries),
 * but hs_store_begin() fails and hs_store_run_open() refuses every HELLO
 * with HS_ENOTSUP and that message. */
const char *hs_store_readonly(const hs_store *s);

/* Finds or creates the run named by hello->run_id, inside a transaction.
 * A run known only to the database (a restart happened) is loaded and its
 * rollups rebuilt from its stored events; a run in memory is returned as it
 * is. A run that exists but whose HELLO does not say HS_HELLO_RESUMED is
 * refused with HS_EEXIST (two collectors must not share a run id). A
 * resumed HELLO must carry the resume key the run was started with
 * (runs.resume_key; a run stored without one cannot be resumed): otherwise
 * HS_EAUTH, and nothing about the run changes. A run marked lost is
 * reopened, under the same rule. */
int hs_store_run_open(hs_store *s, hs_run **out, const hs_hello *hello, char *err, size_t errlen);

/* Applies frame number seq of run r (a frame after HELLO). Frames below the
 * run's next_seq are skipped. Returns 0, or a negative code with the reason
 * in err when the frame is malformed or breaks a rule of the protocol (an
 * undefined stack id or pc, a frame after BYE, an unknown type): the frame
 * then left no trace in the run's rollups. HS_EDB means the transaction must
 * be rolled back. */
int hs_store_run_frame(hs_store *s, hs_run *r, uint64_t seq, int type, const uint8_t *payload,
                       size_t len, char *err, size_t errlen);

/* Closes an open run as not ended cleanly (state 'lost'): final keyframe,
 * end time = the last event's. Inside a transaction. */
int hs_store_run_lose(hs_store *s, hs_run *r);

/* Stores what the symbolizer found (symbol_blocks, schema/hs_symcache.h):
 * entries "build_id:str offset n (function:str file:str line)×n" to the end
 * of p, as server/symd.c writes them, added to each build's last block (a
 * new one once it is full; an offset that block has already is skipped).
 * A malformed list stores what came before it and returns HS_EPROTO. */
int hs_store_symcache_put(hs_store *s, const uint8_t *p, size_t len);

/* Names frames rows stored unnamed (key "\x1fmodule\x1foffset"), in place:
 * after a head "build_id:str path:str runs_seen:varint", entries
 * "frame:varint function:str file:str line:varint" to the end of p
 * (server/refill.c). A frame that a run of another build of path (or of
 * none) uses, among the open runs and those after run id runs_seen (stored
 * after the refill looked), stays unnamed: its module and offset name two
 * builds' code. A row keeps its id, so every trace, run and open run
 * that holds it reads the name; its key becomes "function\x1ffile\x1fline",
 * or, when another row holds that key already, that key followed by the
 * old one (unique, and never a key a stream interns). A row named since,
 * or gone, is left alone. Adds to *named the rows named, to *renamed those
 * of them under a key of their own. HS_EPROTO for a malformed list (what
 * came before it stays), HS_EDB. */
int hs_store_frames_name(hs_store *s, const uint8_t *p, size_t len, uint64_t *named,
                         uint64_t *renamed);

/* Forgets a run's in-memory state (rows are untouched). Outside the
 * transaction that last touched it, or after its commit. The memory goes
 * with the last reference (below); r is released from then on. */
void hs_store_run_release(hs_store *s, hs_run *r);

/* Forgets the in-memory state of run uuid, if it has one and it is not
 * touched by the open transaction. */
void hs_store_release_uuid(hs_store *s, const uint8_t uuid[16]);

/* References. A run the store returns is lent: it stays valid only until
 * the store releases or replaces it (a broken run is replaced by its next
 * hs_store_run_open). A user that keeps a run across store calls takes a
 * reference and drops it when done; the memory lives until the store and
 * every reference have let go. A held run that the store has let go of
 * reports hs_run_released() and must not be passed to the store again
 * (its getters still answer). Same thread as the store. */
void hs_run_ref(hs_run *r);
void hs_run_unref(hs_run *r); /* accepts NULL */
int hs_run_released(const hs_run *r);

/* A tag the store keeps for its user and never reads (0 when new): the
 * writer keeps there the id of the connection that feeds the run. */
void hs_run_set_holder(hs_run *r, uint64_t holder);
uint64_t hs_run_holder(const hs_run *r);

uint64_t hs_run_next_seq(const hs_run *r);
const uint8_t *hs_run_uuid(const hs_run *r);
int hs_run_ended(const hs_run *r); /* BYE stored, or closed as lost */
int64_t hs_run_id(const hs_run *r);
int hs_run_broken(const hs_run *r);

/* Calls fn for every run the database holds as 'open' (for the server to
 * give them their grace period after a start). */
int hs_store_open_runs(hs_store *s, void (*fn)(const uint8_t uuid[16], void *data), void *data);

/* Loads the run uuid if needed and closes it as lost, unless it has ended.
 * Inside a transaction. */
int hs_store_lose_uuid(hs_store *s, const uint8_t uuid[16]);

/* Retention: deletes at most max_rows events rows, of runs no longer open,
 * whose last event is older than cutoff_unix_ns (wall clock). Runs,
 * traces and rollups stay. *deleted gets the number of rows removed. Inside
 * a transaction; call repeatedly until it deletes fewer than max_rows. */
int hs_store_retain(hs_store *s, uint64_t cutoff_unix_ns, int max_rows, int *deleted);

/* ---- import ------------------------------------------------------------ */

typedef struct hs_import_stats {
    int64_t run_id;       /* the run the stream was stored as; 0 when none */
    uint64_t frames;      /* frames after HELLO that were applied */
    uint64_t skipped;     /* of those, frames already stored (skipped) */
    uint64_t events;      /* allocation and free events in the applied EVENTS frames */
    int bye;              /* the stream held BYE */
    size_t partial_bytes; /* trailing bytes of a frame cut short, ignored */
} hs_import_stats;

/* Imports one whole collector stream (header, HELLO, frames: the bytes a
 * collector writes with HEAPSTORE_URL=file://PATH) held in buf[0..len) into
 * the database. Call outside a transaction; it commits every few hundred
 * frames. The HELLO counts as a resumption, so importing the same stream
 * twice stores it once. A stream without BYE (its process died) is closed as
 * 'lost'; a frame cut short at the end is ignored (partial_bytes). Any
 * malformed input or protocol violation returns a negative HS_E* code with
 * the reason in err: what was committed before stays, the rest is rolled
 * back. The run's in-memory state is always released before returning, so
 * repeated calls do not accumulate memory. out and err may be NULL. */
int hs_store_import(hs_store *s, const uint8_t *buf, size_t len, hs_import_stats *out, char *err,
                    size_t errlen);

/* The same for the stream in the file at path, read in chunks (memory is
 * bounded by one frame plus 1 MiB, whatever the file's size). */
int hs_store_import_file(hs_store *s, const char *path, hs_import_stats *out, char *err,
                         size_t errlen);

/* ---- removing runs (store_gc.c) ------------------------------------------ */

/* Which runs hs_store_gc removes: every criterion given holds. Open runs
 * are never removed. */
typedef struct hs_gc_spec {
    uint64_t older_than_ns;       /* 0: any age; else started before older_than_cutoff_ns */
    int64_t older_than_cutoff_ns; /* unix ns */
    int64_t keep;                 /* -1: no count rule; else all but the newest keep of each */
    const char *per;              /* keep's groups: NULL or "program", else a label's key */
    int nfilters;                 /* program, host, id or a label's key = value */
    struct {
        const char *key, *value;
    } filters[16];
    int dry_run; /* select and report, remove nothing */
    int vacuum;  /* give the space back to the file system (VACUUM) */
} hs_gc_spec;

typedef struct hs_gc_run {
    int64_t id, start_unix_ns;
    const char *program; /* lent to the callback */
} hs_gc_run;

typedef struct hs_gc_result {
    int64_t runs, rows;                /* runs selected (removed unless dry_run), rows deleted */
    int64_t bytes_before, bytes_after; /* the database's pages, in bytes */
    int vacuumed;
} hs_gc_result;

/* Removes the runs g selects with every row of theirs, in transactions of
 * its own (outside the caller's), oldest first, calling cb for each run
 * selected (NULL: none); then, unless g->dry_run or nothing went, VACUUM
 * when g->vacuum. 0, HS_ENOTSUP (read-only), HS_ENOMEM or HS_EDB. */
int hs_store_gc(hs_store *s, const hs_gc_spec *g, hs_gc_result *out,
                void (*cb)(const hs_gc_run *r, void *data), void *data);

/* POST /api/gc's body (docs/api.md) as a spec (strings lent from j), and
 * its answer: 0 or HS_EINVAL with a sentence in err. hs_gc_run_json is a
 * cb of hs_store_gc appending each run to the JSON array data; the answer
 * takes that array over. */
struct json_t;
int hs_gc_spec_json(hs_gc_spec *g, const struct json_t *j, int64_t now_unix_ns, char *err,
                    size_t len);
struct json_t *hs_gc_result_json(const hs_gc_spec *g, const hs_gc_result *r, struct json_t *runs);
void hs_gc_run_json(const hs_gc_run *r, void *data);

#endif

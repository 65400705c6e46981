/* hs_symd: the server's symbolizer thread, a stage between the loop and the
 * writer for the jobs that carry module tables or pcs to name.
 *
 * The loop hands it the FRAMES jobs holding MAPPINGS or SYMBOLS frames, and
 * every later job of the same connection while one is still here (a
 * connection's jobs keep their order). The thread reads MAPPINGS into the
 * connection's module list, rewrites SYMBOLS frames with names
 * (hs_syms_rewrite: function, file, line, inlined frames), and submits the
 * job to the writer. It owns one hs_syms for the life of the server: every
 * build is read once and then answered from memory for every later run;
 * each answer read from a file also goes to the writer, with the job, for
 * the database's symbol cache (symbol_blocks, schema/hs_symcache.h), which
 * the thread reads before any file: on its own read-only connection, a
 * build's blocks at once the first time it is asked about that build, kept
 * in memory (HS_SYMCACHE_RD_BYTES at most, the builds asked about least
 * lately let go first) with the answers it found since. A build named
 * before a restart is not read again.
 * Only the connection waits while its build is read; the writer and the
 * other connections go on (their jobs without SYMBOLS go straight to the
 * writer).
 * The builds it finds no file for are named later in the runs stored
 * meanwhile (hs_refill.h): the thread looks for them again every second,
 * at once when an upload ends, and at start for those the database holds
 * unnamed frames of, and sends the writer REFILL jobs that name the stored
 * frames in place, one job out at a time.
 *
 * The loop owns each hs_symd_conn (inside its connection); the thread
 * touches it from hs_symd_submit() until it has submitted that job to the
 * writer, and never after. The loop counts the jobs it sent here until the
 * writer returns them, and sends a connection's later jobs here while any
 * is out (so they keep their order); its DETACH, sent after them, returns
 * after them, so the struct outlives the thread's use of it.
 */
#ifndef HS_SYMD_H
#define HS_SYMD_H

#include "hs_symbols.h"
#include "hs_writer.h"

typedef struct hs_symd hs_symd;

struct hs_symd_item;

typedef struct hs_symd_conn {
    hs_syms_stream stream; /* the thread's only */
    int can_upload;        /* set by the loop before its first job: HELLO had HS_HELLO_SYMDATA */
    /* the thread's: its jobs held while it sends builds it was asked for */
    struct hs_symd_item *parked, *parked_tail;
    struct hs_symd_conn *next_parked;
    uint64_t conn_id;
    uint64_t parked_until_ns;
    unsigned waiting; /* builds asked for whose upload has not ended */
} hs_symd_conn;

int hs_symd_start(hs_symd **out, const hs_syms_config *cfg, hs_writer *w, const char *db_path);
/* Queues j (of connection c, NULL for a job of no connection) for the
 * thread, which passes it on to the writer. */
void hs_symd_submit(hs_symd *d, hs_symd_conn *c, hs_wjob *j);
/* 1 if j must go through the thread (it has MAPPINGS or SYMBOLS). */
int hs_symd_wants(const hs_wjob *j);
/* ---- builds collectors send (docs/protocol.md, SYMREQ and SYMDATA) ----
 *
 * When a SYMBOLS frame of a connection that can upload names a build no
 * file is found for, the thread asks the loop to request it (an "ask"; one
 * per build in HS_SYMD_ASK_TTL_S, whichever connection). The loop checks
 * each piece that comes back against what it asked for and queues it here
 * with hs_symd_upload; the thread writes the pieces to a file beside the
 * database's added debug files (hs_syms_store_file, with a ".part" suffix
 * while it grows), checks the whole file's build id, renames it in place
 * and forgets that the build was missing: the connection's later SYMBOLS
 * frames, and every later run of the build, are named from it (then from
 * the symbol cache). A file whose build id is not the one asked for, or a
 * piece that does not decode, is deleted and the connection closed (an ask
 * with close_why set).
 * The job that found the build missing, and the connection's jobs after
 * it, wait in the thread (not the other connections' jobs) until the
 * upload ends or HS_SYMD_WAIT_MS passes, then are named with what there is:
 * a run whose collector sends its build promptly is named whole, the first
 * one included. Its ACKs wait with them (TCP and the collector's buffer
 * hold it back meanwhile). A SYNC job ends every wait. */
#define HS_SYMD_ASK_TTL_S 30
/* How long a connection's jobs wait for the builds it was asked for (their
 * frames are named from them), from the ask; then they go on, unnamed. */
#define HS_SYMD_WAIT_MS     1000
#define HS_SYMD_UPLOADS_MAX 16 /* files being received at once */

typedef struct hs_symd_ask {
    uint64_t conn_id;
    uint8_t bid[HS_BUILD_ID_MAX];
    uint32_t blen;
    char close_why[200]; /* not empty: close the connection, saying this */
} hs_symd_ask;

/* fn(data) is called, from the thread, when asks are waiting. Before the
 * first job. */
void hs_symd_set_notify(hs_symd *d, void (*fn)(void *data), void *data);
/* Moves up to max waiting asks into out; returns how many. */
size_t hs_symd_take_asks(hs_symd *d, hs_symd_ask *out, size_t max);
/* Queues a SYMDATA piece (checked by the caller: asked for, in order, in
 * bounds) of connection conn_id; copies it. 0 or HS_ENOMEM. */
int hs_symd_upload(hs_symd *d, uint64_t conn_id, const hs_symdata *sd);
/* The connection is gone: its files not yet whole are deleted. */
void hs_symd_upload_abort(hs_symd *d, uint64_t conn_id);
/* Bytes of pieces queued and not yet written. */
size_t hs_symd_upload_queued(hs_symd *d);

/* Finishes the queued jobs, ends the thread, logs its figures, frees d. */
void hs_symd_stop(hs_symd *d);

#endif

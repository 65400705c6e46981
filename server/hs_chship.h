/* hs_chship: copies what the writer committed to its SQLite file into a
 * ClickHouse database (schema/clickhouse/001_init.sql), so that
 * `heapstore-server --store clickhouse://…` keeps every part of its ingest
 * (decoding, rollups, resumption) and ClickHouse holds the rows that the
 * queries read; the loop acknowledges frames once they are shipped
 * (hs_chship_shipped).
 *
 * The SQLite file is the front end's write-ahead buffer: a pass opens a
 * read transaction on it (one commit's state), takes what is newer than
 * what it shipped before (frames and trace nodes by id; per run, events by
 * seq, rollups by bucket, samples by time, small tables whole when the run
 * changed), turns local ids into content ids (runs: their uuid; frames: a
 * hash of their key; trace nodes: a hash of (parent, frame)) and sends one
 * RowBinary INSERT per table. Watermarks advance only when every INSERT of
 * the pass succeeded, and are kept in a file beside the buffer
 * (PATH-chship, ch_marks.c) so that a start goes on where the last pass
 * stopped; a failed pass is sent again whole: ClickHouse's
 * ReplacingMergeTree keys make a row sent twice count once. What a pass
 * found is not lost by a ClickHouse outage: it stays in the SQLite file
 * and the next pass sends it.
 *
 * Several front ends share one database. Each ships only the runs it
 * carries: a run whose ClickHouse row names another front end (runs.front)
 * that has come at least as far is left alone from then on. A resumed
 * HELLO for a run this buffer lacks, or holds an older state of, fetches
 * the run back from ClickHouse first (hs_chship_resume), so that the
 * writer rebuilds its rollups from the very events the first front end
 * had. Ended runs leave the buffer once shipped (hs_chship_set_pruner).
 *
 * hs_chship_pass() is one pass on the caller's thread (tests, tools);
 * hs_chship_start() runs passes on a thread of its own every interval_ms
 * and a last one at hs_chship_stop().
 */
#ifndef HS_CHSHIP_H
#define HS_CHSHIP_H

#include <stddef.h>
#include <stdint.h>

typedef struct hs_chship hs_chship;

typedef struct hs_chship_stats {
    uint64_t passes, failed, rows, bytes; /* rows and RowBinary bytes sent */
    uint64_t pruned;                      /* runs removed from the buffer */
} hs_chship_stats;

/* Opens db_path read-only and url (hs_chttp.h); the database and its
 * tables are created (when missing) by the first pass, so that a
 * ClickHouse that is away at the start only delays shipping. 0 or an HS_E
 * code with err filled. */
int hs_chship_new(hs_chship **out, const char *db_path, const char *url, char *err, size_t errlen);
void hs_chship_free(hs_chship *s); /* accepts NULL */

/* One pass: ships everything committed to the SQLite file by now. */
int hs_chship_pass(hs_chship *s, char *err, size_t errlen);
void hs_chship_get_stats(hs_chship *s, hs_chship_stats *out);

/* Retention by partition: drops, from every per-run table, the monthly
 * partitions (by the runs' start) older than months whole months before
 * now; frames and trace nodes (shared by every run) stay. On a cluster
 * (cluster.sql) it drops from this server's NAME_local tables. *dropped
 * gets the partitions dropped. 0 or an HS_E code with err filled. */
int hs_chship_retain(hs_chship *s, int months, int *dropped, char *err, size_t errlen);
/* The thread runs hs_chship_retain() at its start and hourly; 0: never. */
void hs_chship_set_retention(hs_chship *s, int months);

/* Downsampling (ch_downsample.c): in every run, the spans of `factor`
 * buckets wholly older than age_s seconds get their heap_series rows merged
 * into one (the heap at the span's end, its highest heap, its bytes
 * allocated and freed) and their process samples cut to the highest, so
 * that long histories read few rows; a history whose points cover whole
 * spans answers as before, the peak included. On a cluster (Distributed
 * tables) it runs on each shard's _local tables, every shard reached at
 * the store URL's shards=HOST:PORT,… (else at its host on the URL's port),
 * and does nothing unless every shard is reached. *runs gets the runs
 * looked at. 0 or an HS_E code with err filled. The thread runs it at its
 * start and hourly when the store URL has downsample_after=S (and
 * downsample_by=N, 60 by default). */
int hs_chship_downsample(hs_chship *s, int64_t age_s, int factor, int *runs, char *err,
                         size_t errlen);

/* Acknowledgements: the run uuid's next_seq as of the last pass that
 * shipped its runs row (every frame below it is in ClickHouse); 0 when no
 * pass has shipped it yet. Any thread. */
uint64_t hs_chship_shipped(hs_chship *s, const uint8_t uuid[16]);
/* fn(data) is called on the shipper's thread after each pass that shipped
 * something (a run's frames may be acknowledged now). NULL stops the
 * calls: once hs_chship_set_notify(s, NULL, NULL) returns, fn runs no more. */
void hs_chship_set_notify(hs_chship *s, void (*fn)(void *data), void *data);

/* The content id that local id (of a run 'r', trace node 't' or frame
 * 'f') was shipped under; 0 when it has not been shipped. */
int64_t hs_chship_content_id(hs_chship *s, char kind, int64_t local);

/* Ended runs whose rows ClickHouse holds, buffer_keep seconds (a URL
 * option; 60 by default) after their last change, and runs another front
 * end carried on, leave the buffer: fn(data, local run id) removes the run
 * (the writer's hs_store_gc; it never removes an open run) and returns 0
 * once it is gone. Called on the shipper's thread. NULL: runs stay. */
void hs_chship_set_pruner(hs_chship *s, int (*fn)(void *data, int64_t local_run), void *data);

struct hs_store;
struct hs_hello;
/* On the writer's thread, inside its transaction, before hs_store_run_open
 * of a resumed HELLO h: when ClickHouse holds the run further on than the
 * buffer (or the buffer lacks it), the buffer's copy is removed and the
 * run's rows read from ClickHouse are written into the buffer (runs row,
 * labels, mappings, frames and trace nodes it uses, run_pcs, run_stacks,
 * events, process samples, sizes, exact totals); hs_store_run_open then
 * rebuilds its rollups from its events, as after a restart. The resume key
 * travels as its SHA-256 (runs.key_sha): a HELLO whose key does not match
 * it is refused by the store as usual. 0 (also when nothing was to do), or
 * an HS_E code with err filled (ClickHouse away: the HELLO is refused and
 * the collector comes back later). */
int hs_chship_resume(hs_chship *s, struct hs_store *store, const struct hs_hello *h, char *err,
                     size_t errlen);

/* The thread: passes every interval_ms, errors logged (hs_log); stop runs
 * a last pass, joins and frees. */
int hs_chship_start(hs_chship *s, int interval_ms);
void hs_chship_stop(hs_chship *s);

#endif

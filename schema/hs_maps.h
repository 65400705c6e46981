/* hs_maps: the stored form of each run's id maps (schema 13).
 *
 * A run has two maps from the collector's ids to the database's: its pcs
 * (a code address the collector named in SYMBOLS -> frames.id) and its
 * stacks (a stack id of STACKS -> traces.id, the stack's leaf node). A
 * resumed connection goes on using the ids, and queries read a run's
 * events through them. They were a row per entry (run_pcs, run_stacks),
 * mostly SQLite's per-row overhead; since schema 13 they are chunks of up
 * to HS_MAPS_CHUNK entries, one run_maps row each (run, kind, seq, data),
 * in a codec of their own (below), versioned apart from the wire protocol.
 *
 * The entries of a run's map are those of its chunks taken in seq order,
 * a later entry for a key replacing an earlier one (as INSERT OR REPLACE
 * did with the rows). Within a chunk keys are unique and increasing. Only
 * the chunk with the highest seq of a live run changes: the writer
 * rewrites it at each commit until it is full, then starts the next.
 *
 * Blob layout, version 1 (varints LEB128, signed ones zigzag):
 *
 *   u8      version (1)
 *   varint  n, entries (1 to HS_MAPS_CHUNK)
 *   u8      method: 0 columns stored as they are, 1 one zstd frame
 *   varint  len[2], bytes of each column once decompressed
 *   ...     the columns, concatenated (compressed for method 1):
 *             KEY    signed key[0], then n - 1 steps key[i] - key[i-1] (>= 1)
 *             VALUE  n signed value[i] - value[i-1] (value[-1] = 0)
 *
 * Stack ids are mostly consecutive and given in the order their traces
 * were made, so a stacks entry costs about a byte before zstd.
 *
 * For SQL, hs_maps_sql_register() adds the read-only tables
 * `run_pcs (run, pc, frame)` and `run_stacks (run, stack_id, trace)`, as
 * eponymous virtual tables over run_maps giving each run's entries by key;
 * `run = ?` (and a join on run) reads that run's chunks only. A database
 * older than schema 13 has real tables of those names, which SQLite finds
 * first. hs_schema_sql_auto() (schema/hs_schema.h) registers them on
 * every connection the process opens from then on.
 */
#ifndef HS_MAPS_H
#define HS_MAPS_H

#include <stddef.h>
#include <stdint.h>

#include <sqlite3.h>

#include "hs_buf.h"

#define HS_MAPS_CODEC 1
#define HS_MAPS_CHUNK 4096

/* run_maps.kind */
enum { HS_MAPS_PCS = 0, HS_MAPS_STACKS = 1, HS_MAPS_KINDS };

typedef struct hs_maps_entry {
    int64_t key, value;
} hs_maps_entry;

/* ---- codec -------------------------------------------------------------- */

/* Encodes e[0..n) (1 <= n <= HS_MAPS_CHUNK, keys increasing) into out
 * (appended). 0, or HS_ENOMEM. */
int hs_maps_encode(const hs_maps_entry *e, size_t n, hs_buf *out);

/* Decodes a blob into *e (malloc'd; caller frees) and *n. 0, or
 * HS_ECORRUPT for a blob that is malformed or of another version, or
 * HS_ENOMEM. */
int hs_maps_decode(const void *blob, size_t len, hs_maps_entry **e, size_t *n);

/* Sorts e[0..*n) by key, keeping for each key only its last entry in the
 * order given (the one that replaced the others); *n becomes the number
 * kept. 0, or HS_ENOMEM (e as it was). */
int hs_maps_settle(hs_maps_entry *e, size_t *n);

/* Appends x to *e (*n of *cap used; grown by doubling). 0 or HS_ENOMEM
 * (*e as it was). */
int hs_maps_push(hs_maps_entry **e, size_t *n, size_t *cap, hs_maps_entry x);

/* ---- reading ---------------------------------------------------------------- */

/* 1 when db stores the maps in chunks (schema 13 and later), 0 when it has
 * the run_pcs and run_stacks tables, HS_EDB when that cannot be told. */
int hs_maps_in_chunks(sqlite3 *db);

/* A run's chunks of a kind, in order: bind ?1 run, ?2 kind. */
#define HS_MAPS_CHUNKS_SQL "SELECT data FROM run_maps WHERE run = ?1 AND kind = ?2 ORDER BY seq"

/* The map the chunks st yields (column 0, stepped to its end; the caller
 * binds and resets) into *e (malloc'd, NULL when empty) and *n, sorted by
 * key, one entry a key. 0, or HS_EDB / HS_ECORRUPT / HS_ENOMEM. */
int hs_maps_read_chunks(sqlite3_stmt *st, hs_maps_entry **e, size_t *n);

/* Run's map of kind as hs_maps_read_chunks gives it, from the chunks or,
 * before schema 13, the table. Prepares its statement per call. */
int hs_maps_read(sqlite3 *db, int64_t run, int kind, hs_maps_entry **e, size_t *n);

/* ---- writing ------------------------------------------------------------------ */

/* Writes e[0..n) (keys increasing) as chunk seq of run's map of kind,
 * replacing the row it had. 0, HS_ENOMEM or HS_EDB. */
int hs_maps_put_chunk(sqlite3 *db, int64_t run, int kind, int64_t seq, const hs_maps_entry *e,
                      size_t n);

/* Adds e[0..n) (any order; of equal keys the last counts) to run's map of
 * kind, as chunks after those it has. e is sorted in place. 0, or
 * HS_ENOMEM / HS_EDB / HS_ECORRUPT. */
int hs_maps_append(sqlite3 *db, int64_t run, int kind, hs_maps_entry *e, size_t n);

/* Migration 13: moves the rows of run_pcs and run_stacks into chunks and
 * drops the tables, in the caller's transaction. 0, or HS_EDB
 * (sqlite3_errmsg says why), HS_ENOMEM. */
int hs_maps_migrate(sqlite3 *db);

/* ---- SQL ---------------------------------------------------------------------- */

/* Adds the virtual tables run_pcs and run_stacks to db. SQLITE_OK or an
 * SQLite code. (hs_schema_sql_auto() adds them to every connection.) */
int hs_maps_sql_register(sqlite3 *db);

#endif

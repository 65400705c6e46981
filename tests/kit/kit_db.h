/* kit_db: values read from a heapstore database (a SQLite file, opened
 * read-only for each call, so that a running server's writes are seen), and
 * waiting until one holds.
 */
#ifndef HS_KIT_DB_H
#define HS_KIT_DB_H

#include <stdint.h>

typedef struct sqlite3 sqlite3;

/* SQL that puts a database's stack tree back in the table of schema 1 to
 * 10 (with schema 9's index), from the blocks of schema 11: for a test
 * that makes a file of an older schema out of a new one. */
#define TK_TREE_AS_ROWS_SQL                                                                        \
    "CREATE TABLE tk_rows (id INTEGER PRIMARY KEY, parent INTEGER NOT NULL, frame INTEGER NOT "    \
    "NULL, depth INTEGER NOT NULL, UNIQUE (parent, frame)); INSERT INTO tk_rows SELECT id, "       \
    "parent, frame, depth FROM traces; DROP TABLE trace_blocks; ALTER TABLE tk_rows RENAME TO "    \
    "traces; CREATE INDEX traces_frame ON traces(frame);"

/* snapshot_blocks as schema/015_snapshot_blocks.sql makes it, for the
 * tests' own databases. */
#define TK_SNAPSHOT_BLOCKS_SQL                                                                     \
    "CREATE TABLE snapshot_blocks (run INTEGER NOT NULL, kind INTEGER NOT NULL, bucket INTEGER "   \
    "NOT NULL, first INTEGER NOT NULL, last INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY "     \
    "(run, kind, bucket, first)) WITHOUT ROWID"

/* SQL that puts a database's snapshot rows back in the table of schema 1
 * to 14, from the blocks of schema 15 (schema/hs_snaps.h). */
#define TK_SNAPS_AS_ROWS_SQL                                                                       \
    "CREATE TABLE tk_snaps (run INTEGER NOT NULL, kind INTEGER NOT NULL, bucket INTEGER NOT "      \
    "NULL, trace INTEGER NOT NULL, bytes INTEGER NOT NULL, count INTEGER NOT NULL, PRIMARY KEY "   \
    "(run, kind, bucket, trace)) WITHOUT ROWID; INSERT INTO tk_snaps SELECT run, kind, bucket, "   \
    "trace, bytes, count FROM snapshots; DROP TABLE snapshot_blocks; ALTER TABLE tk_snaps RENAME " \
    "TO snapshots;"

/* SQL that puts a database's runs' id maps back in the tables of schema 1
 * to 12, from the chunks of schema 13 (read through the virtual tables of
 * the same names while run_maps is there). */
#define TK_MAPS_AS_ROWS_SQL                                                                        \
    "CREATE TABLE tk_pcs (run INTEGER NOT NULL, pc INTEGER NOT NULL, frame INTEGER NOT NULL, "     \
    "PRIMARY KEY (run, pc)) WITHOUT ROWID; INSERT INTO tk_pcs SELECT run, pc, frame FROM "         \
    "run_pcs; CREATE TABLE tk_stacks (run INTEGER NOT NULL, stack_id INTEGER NOT NULL, trace "     \
    "INTEGER NOT NULL, PRIMARY KEY (run, stack_id)) WITHOUT ROWID; INSERT INTO tk_stacks SELECT "  \
    "run, stack_id, trace FROM run_stacks; DROP TABLE run_maps; ALTER TABLE tk_pcs RENAME TO "     \
    "run_pcs; ALTER TABLE tk_stacks RENAME TO run_stacks;"

/* The first column of the first row of the SQL that fmt formats as
 * sqlite3_mprintf does (%q, %lld, ...; a literal % is %%; so no printf
 * format check), as an integer; INT64_MIN when there is no row. Fails the
 * current test when the database cannot be opened or the statement fails. */
int64_t tk_q(const char *db, const char *fmt, ...);
/* The same on a connection the test holds open. */
int64_t tk_qh(sqlite3 *h, const char *fmt, ...);
/* Polls tk_q until its value is >= want or timeout_ms passes (a database
 * not yet there reads as INT64_MIN); the last value. */
int64_t tk_poll(const char *db, int64_t want, int timeout_ms, const char *fmt, ...);

#endif

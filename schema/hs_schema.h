/* hs_schema: creates and migrates a heapstore database.
 *
 * The schema lives in schema/NNN_name.sql, embedded into the binaries at
 * build time. hs_schema_open() opens (creating if needed) a database file,
 * sets the connection up the way every heapstore connection wants it (WAL,
 * busy timeout, foreign keys off, synchronous=NORMAL) and applies, in one
 * transaction each, the migrations newer than PRAGMA user_version. A
 * migration may have a step in C after its SQL, in the same transaction
 * (version 2 fills trace_stats from the stored delta rows: hs_tstats.h). A
 * database newer than this build is refused with HS_EVERSION rather than
 * misread; one older than this build opened read-only is read as it is
 * (queries/ falls back to what its version has).
 */
#ifndef HS_SCHEMA_H
#define HS_SCHEMA_H

#include <stddef.h>

#include <sqlite3.h>

typedef struct hs_migration {
    int version;
    const char *name;
    const char *sql;
} hs_migration;

extern const hs_migration hs_migrations[];
extern const int hs_migration_count;

#define HS_SCHEMA_READONLY 0x1 /* open read-only; no migration is applied */
/* Open read-write, but a database whose file or directory cannot be written
 * (file mode, read-only mount) is opened read-only instead, as
 * HS_SCHEMA_READONLY does, rather than refused: the caller tells by
 * sqlite3_db_readonly(db, "main") == 1. */
#define HS_SCHEMA_ALLOW_READONLY 0x2

/* Opens path into *out (caller closes with sqlite3_close_v2). On failure
 * *out is NULL and, when errmsg is not NULL, a message for a person is
 * written there (at most errlen bytes).
 *
 * Read-only, a WAL database on a location that cannot be written (no -shm
 * file can be made there) is opened immutable when it has no -wal file left
 * (a clean stop leaves none), so that it can be read at all; with a -wal
 * and its -shm present SQLite reads both read-only; a -wal without its
 * -shm cannot be read faithfully there and is refused with a message.
 *
 * Read-write, a non-empty database that is not heapstore's (user_version 0
 * with tables of its own) is refused: heapstore's tables are never added to
 * someone else's database. */
int hs_schema_open(sqlite3 **out, const char *path, int flags, char *errmsg, size_t errlen);

/* 1 when db's main schema has a table called name, 0 when not, HS_EDB
 * when that cannot be told. */
int hs_schema_has_table(sqlite3 *db, const char *name);

/* Steps a statement that returns no rows, then resets it: 0 or HS_EDB. */
int hs_schema_step_done(sqlite3_stmt *st);

/* The virtual tables that stand where tables were before the data moved
 * into blocks of its own codec: `traces` (schema/hs_tree.h), `snapshots`
 * (schema/hs_snaps.h), `run_pcs` and `run_stacks` (schema/hs_maps.h),
 * added to db. SQLITE_OK or an SQLite
 * code. hs_schema_sql_auto() has every connection the process opens from
 * then on get them (hs_schema_open() calls it). */
int hs_schema_sql_register(sqlite3 *db);
void hs_schema_sql_auto(void);

/* Applies pending migrations on an open connection. */
int hs_schema_migrate(sqlite3 *db, char *errmsg, size_t errlen);

/* 1 when the database at path cannot be written where it lies (a read-only
 * file system, the file not writable, or its directory not writable while
 * SQLite would need to make its -wal and -shm files there), with the reason
 * for a person in why ("is on a read-only file system"); else 0. */
int hs_schema_readonly_why(const char *path, char *why, size_t whylen);

/* The schema version this build writes. */
int hs_schema_version(void);

/* The schema version db is at (PRAGMA user_version); 0 when unreadable. A
 * read-only reader may open a database older than hs_schema_version(). */
int hs_schema_db_version(sqlite3 *db);

/* A run's summaries of schema 9 (009_run_summary.sql says what each is), as
 * SQL expressions over the run whose id is the expression RUN and whose
 * granularity is G: the writer stores them when a run ends, readers compute
 * them for runs stored without them. The same text as the migration's. */
#define HS_SCHEMA_RSS_PEAK_SQL(RUN)                                                                \
    "(SELECT MAX(rss_bytes) FROM process_samples WHERE run = " RUN ")"
#define HS_SCHEMA_LEAK_SQL(RUN, G)                                                                 \
    "(SELECT CASE WHEN m.b < 4 THEN 0.0 ELSE COALESCE((MIN(CASE WHEN h.bucket >= 3 * m.b / 4 "     \
    "THEN h.live_bytes END) - MIN(CASE WHEN h.bucket < m.b / 2 THEN h.live_bytes END)) * 2e9 / "   \
    "(m.b * " G "), 0.0) END FROM (SELECT MAX(bucket) AS b FROM heap_series WHERE run = " RUN      \
    ") m JOIN heap_series h ON h.run = " RUN " AND h.bucket >= m.b / 4)"

/* The second column of frames_function (012_frame_keys.sql), the same text
 * as the index's so that a statement's "= ?" on it uses the index: a
 * frame's line, or its offset when it has no function. */
#define HS_SCHEMA_FRAME_AT_SQL "(CASE WHEN function = '' THEN module_offset ELSE line END)"

#endif

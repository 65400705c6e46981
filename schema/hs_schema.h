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

/* Opens path into *out (caller closes with sqlite3_close_v2). On failure
 * *out is NULL and, when errmsg is not NULL, a message for a person is
 * written there (at most errlen bytes). */
int hs_schema_open(sqlite3 **out, const char *path, int flags, char *errmsg, size_t errlen);

/* Applies pending migrations on an open connection. */
int hs_schema_migrate(sqlite3 *db, char *errmsg, size_t errlen);

/* The schema version this build writes. */
int hs_schema_version(void);

#endif

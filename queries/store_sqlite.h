/* store_sqlite: the SQLite store of hs_qstore.h, private to its two files
 * (store_sqlite.c: the ops over a read-only connection; store_sqlite_sql.c:
 * /api/sql, user SQL in SQLite's dialect with its checked functions).
 *
 * The connection owns its prepared statements, prepared on first use with
 * SQLITE_PREPARE_PERSISTENT and finalized in the store's free; a statement
 * is reset and its bindings cleared when fetched (hs__sqlite_stmt), and
 * every statement is reset when the store goes idle between requests, so
 * that no read transaction stays open.
 */
#ifndef HS_STORE_SQLITE_H
#define HS_STORE_SQLITE_H

#include <sqlite3.h>

#include "hs_qstore.h"
#include "hs_series.h"
#include "hs_snaps.h"
#include "hs_tree.h"

enum hs__stmt_id {
    ST_RUN,
    ST_LABELS,
    ST_KEYFRAME,
    ST_KF_ROWS,
    ST_DELTA_ROWS,
    ST_PEAK_BUCKET,
    ST_PEAK_ROWS,
    ST_FRAME,
    ST_SERIES,
    ST_RSS,
    ST_DELTAS_AFTER,
    ST_TRACE_DELTAS,
    ST_TSTATS_MARK,
    ST_TSTATS_ROWS,
    ST_SIZES,
    ST_LAST_BUCKET,
    ST_RUN_MAP, /* schema 13 on: a run's chunks of a map (schema/hs_maps.h) */
    ST_MAPPINGS,
    ST_RSS_AT,
    ST_EXACT_RUN,    /* schema 8 and later */
    ST_EXACT_SERIES, /* schema 8 and later */
    ST__COUNT
};

typedef struct hs__sqlite {
    hs_qstore base; /* first: the store is its base */
    sqlite3 *db;
    char *path;
    int schema; /* user_version when opened: below 2, no trace_stats */
    int maps;   /* the runs' id maps: 1 in chunks (schema 13), -1 tables, 0 not known yet */
    int snaps;  /* the snapshot rows: 1 in blocks (schema 15), -1 the table, 0 not known yet */
    hs_snaps_rd *snaps_rd; /* their reader, with snaps 1, opened when first needed */
    /* the windows' delta rows by trace (schema 16): 1 when the database has
     * them, -1 not, 0 not known yet; their reader */
    int series;
    hs_series_rd *series_rd;
    sqlite3_stmt *st[ST__COUNT];
    struct hs__sqlfn *sqlfn; /* store_sqlite_sql.c: the checked functions of user SQL */
    hs_tree_rd *tree;        /* the stack tree's nodes, opened when first asked for */
    hs_tree_mem mem;         /* the whole tree, read when a question walks it (trend) */
    char uuid[40];           /* the last run record's uuid, lower case */
} hs__sqlite;

/* The statements' text (their plans are tested, tests/queries). */
extern const char *const hs__sqlite_stmt_sql[ST__COUNT];

/* Returns the statement, reset and with bindings cleared, or NULL (err set). */
sqlite3_stmt *hs__sqlite_stmt(hs__sqlite *q, int id, hs_qerr *err);
/* HS_EDB with the connection's message in err (store_sqlite_base.c). */
int hs__sqlite_err(hs__sqlite *q, hs_qerr *err);

/* The conditions of a runs_find filter key=value (runs aliased r), appended
 * to b; hs__sqlite_bind_kv binds its values from parameter i on and
 * returns the next parameter's index (store_sqlite_base.c). */
struct hs_buf;
void hs__sqlite_where_kv(struct hs_buf *b, const char *key, const char *value);
int hs__sqlite_bind_kv(sqlite3_stmt *st, int i, const char *key, const char *value);
/* runs_summary (store_sqlite_trend.c), and its statement's text for ask
 * (seek: the plan of a small subtree), malloc'd, for the tests of its plan. */
char *hs__sqlite_summary_sql(hs_qstore *s, const hs_qstore_summary_ask *ask, int seek);
int hs__sqlite_runs_summary(hs_qstore *s, const hs_qstore_summary_ask *ask,
                            int (*cb)(const hs_qstore_summary *r, void *data), void *data,
                            hs_qerr *err);

/* /api/sql (store_sqlite_sql.c). */
int hs__view_sql(hs__sqlite *q, const char *body, size_t len, json_t **out, hs_qerr *err);
/* Registers event_rows and the checked SQL functions on q's connection;
 * hs__sql_free releases what they hold. */
int hs__sql_register(hs__sqlite *q);
void hs__sql_free(hs__sqlite *q);

#endif

/* store_sqlite_base: what the files of the SQLite store share and which
 * calls nothing else of the store: a connection's error as an hs_qerr, and
 * the runs filter (key=value conditions on runs aliased r, and their
 * bindings) that runs_find (store_sqlite.c) and runs_summary
 * (store_sqlite_trend.c) both build their statements from. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "hs_error.h"
#include "q_internal.h"
#include "store_sqlite.h"

int hs__sqlite_err(hs__sqlite *q, hs_qerr *err)
{
    return hs__err(err, HS_EDB, "database error: %s", q ? sqlite3_errmsg(q->db) : "no connection");
}

/* Appends the WHERE conditions of a key=value list (runs aliased r) and
 * binds nothing but an id range's bounds: the values are bound in order by
 * hs__sqlite_bind_kv(). */
void hs__sqlite_where_kv(hs_buf *b, const char *key, const char *value)
{
    int64_t lo, hi;
    if (!strcmp(key, "id") && hs_sel_id_range(value, &lo, &hi)) { /* id=A..B */
        hs_buf_printf(b, " AND r.id BETWEEN %" PRId64 " AND %" PRId64, lo, hi);
        return;
    }
    if (!strcmp(key, "program"))
        hs_buf_printf(b, " AND (r.program = ? OR substr(r.program, -length(?) - 1) = '/' || ?)");
    else if (!strcmp(key, "host"))
        hs_buf_printf(b, " AND r.host = ?");
    else if (!strcmp(key, "id"))
        hs_buf_printf(b, " AND r.id = ?");
    else if (!strcmp(key, "pid"))
        hs_buf_printf(b, " AND r.pid = ?");
    else if (!strcmp(key, "state"))
        hs_buf_printf(b, " AND r.state = ?");
    else if (!strcmp(key, "parent"))
        hs_buf_printf(b, " AND r.parent_uuid = (SELECT uuid FROM runs WHERE id = ?)");
    else if (!strcmp(key, "before")) /* keyset paging: the runs listed after run ? */
        hs_buf_printf(b, " AND (r.start_unix_ns, r.id) < (SELECT start_unix_ns, id FROM runs "
                         "WHERE id = ?)");
    else if (!strcmp(key, "root")) /* the run and its descendants, by runs_parent_uuid */
        hs_buf_printf(b, " AND r.id IN (WITH RECURSIVE tree(id, uuid) AS (SELECT id, uuid FROM "
                         "runs WHERE id = ? UNION ALL SELECT c.id, c.uuid FROM runs c JOIN tree "
                         "t ON c.parent_uuid = t.uuid) SELECT id FROM tree)");
    else
        hs_buf_printf(b, " AND EXISTS (SELECT 1 FROM run_labels l WHERE l.run = r.id AND "
                         "l.key = ? AND l.value = ?)");
}

int hs__sqlite_bind_kv(sqlite3_stmt *st, int i, const char *key, const char *value)
{
    if (!strcmp(key, "program")) {
        for (int k = 0; k < 3; k++) sqlite3_bind_text(st, i++, value, -1, SQLITE_TRANSIENT);
    } else if (!strcmp(key, "host") || !strcmp(key, "state")) {
        sqlite3_bind_text(st, i++, value, -1, SQLITE_TRANSIENT);
    } else if (!strcmp(key, "id") && hs_sel_id_range(value, &(int64_t){0}, &(int64_t){0})) {
        /* id=A..B: its bounds are in the statement (where_kv) */
    } else if (!strcmp(key, "id") || !strcmp(key, "pid") || !strcmp(key, "parent") ||
               !strcmp(key, "root") || !strcmp(key, "before")) {
        sqlite3_bind_int64(st, i++, strtoll(value, NULL, 10));
    } else {
        sqlite3_bind_text(st, i++, key, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, i++, value, -1, SQLITE_TRANSIENT);
    }
    return i;
}

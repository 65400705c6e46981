/* sql: read-only SQL for power users (POST /api/sql, `heapstore sql`), and
 * the event_rows(run) table-valued function that expands the events blobs.
 *
 * Read-only by construction, three times over: the connection is opened
 * read-only, an authorizer allows only reads (no writes, ATTACH, PRAGMA
 * changes, transactions or extension loading), and a statement that SQLite
 * does not call read-only is refused. A progress handler ends a statement
 * past its time limit; rows and bytes are capped and the answer says so. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hs_error.h"
#include "hs_proto.h"
#include "q_internal.h"

#define SQL_MAX_LEN      (64 * 1024)
#define SQL_DEFAULT_ROWS 1000
#define SQL_MAX_ROWS     100000
#define SQL_DEFAULT_MS   2000
#define SQL_MAX_MS       30000
#define SQL_MAX_BYTES    (32u << 20)
#define SQL_MAX_VALUE    (16 << 20) /* longest string or blob a query may make */

/* Pragmas that only read; the first group takes a table or index name. */
static const char *const pragmas_named[] = {"table_info", "table_xinfo", "index_list",
                                            "index_info", "index_xinfo", "foreign_key_list"};
static const char *const pragmas_bare[] = {
    "table_list",     "function_list", "module_list", "pragma_list",    "user_version",
    "schema_version", "page_count",    "page_size",   "collation_list", "database_list"};

static const char *const denied_functions[] = {"load_extension", "readfile", "writefile", "edit",
                                               "fts3_tokenizer"};

static int authorize(void *data, int action, const char *a, const char *b, const char *db,
                     const char *trigger)
{
    (void)data;
    (void)db;
    (void)trigger;
    switch (action) {
    case SQLITE_SELECT:
    case SQLITE_READ: /* a run's resume key reads as NULL: only its collector knows it */
        return a && b && !sqlite3_stricmp(a, "runs") && !sqlite3_stricmp(b, "resume_key")
                   ? SQLITE_IGNORE
                   : SQLITE_OK;
    case SQLITE_RECURSIVE:
        return SQLITE_OK;
    case SQLITE_FUNCTION:
        for (size_t i = 0; i < HS_COUNTOF(denied_functions); i++)
            if (b && !sqlite3_stricmp(b, denied_functions[i])) return SQLITE_DENY;
        return SQLITE_OK;
    case SQLITE_PRAGMA:
        for (size_t i = 0; a && i < HS_COUNTOF(pragmas_named); i++)
            if (!sqlite3_stricmp(a, pragmas_named[i])) return SQLITE_OK;
        if (b) return SQLITE_DENY; /* PRAGMA x = value sets something */
        for (size_t i = 0; a && i < HS_COUNTOF(pragmas_bare); i++)
            if (!sqlite3_stricmp(a, pragmas_bare[i])) return SQLITE_OK;
        return SQLITE_DENY;
    default:
        return SQLITE_DENY;
    }
}

typedef struct deadline {
    struct timespec end;
    int hit;
} deadline;

static int progress(void *data)
{
    deadline *d = data;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec > d->end.tv_sec ||
        (now.tv_sec == d->end.tv_sec && now.tv_nsec >= d->end.tv_nsec)) {
        d->hit = 1;
        return 1;
    }
    return 0;
}

static json_t *column_json(sqlite3_stmt *st, int i, size_t *bytes)
{
    switch (sqlite3_column_type(st, i)) {
    case SQLITE_INTEGER:
        *bytes += 8;
        return json_integer(sqlite3_column_int64(st, i));
    case SQLITE_FLOAT:
        *bytes += 8;
        return json_real(sqlite3_column_double(st, i));
    case SQLITE_NULL:
        *bytes += 4;
        return json_null();
    case SQLITE_BLOB: {
        /* blobs as lower-case hex (uuids, build ids, event payloads) */
        const uint8_t *p = sqlite3_column_blob(st, i);
        int n = sqlite3_column_bytes(st, i);
        static const char digits[] = "0123456789abcdef";
        char *hex = malloc((size_t)n * 2 + 1);
        if (!hex) return NULL;
        for (int k = 0; k < n; k++) { /* not snprintf: 16 MiB of it takes seconds */
            hex[2 * k] = digits[p[k] >> 4];
            hex[2 * k + 1] = digits[p[k] & 15];
        }
        hex[2 * n] = '\0';
        *bytes += (size_t)n * 2;
        json_t *j = json_string(hex);
        free(hex);
        return j;
    }
    default: {
        const char *t = (const char *)sqlite3_column_text(st, i);
        int n = sqlite3_column_bytes(st, i);
        *bytes += (size_t)n;
        json_t *j = json_stringn(t ? t : "", (size_t)n);
        return j ? j : json_string("\xef\xbf\xbd"); /* not UTF-8 */
    }
    }
}

int hs__view_sql(hs_q *q, const char *body, size_t len, json_t **out, hs_qerr *err)
{
    if (!body || !len)
        return hs__err(err, 400, "POST /api/sql needs a body {\"sql\": \"SELECT …\"}");
    if (len > SQL_MAX_LEN)
        return hs__err(err, 413, "SQL request larger than %d bytes", SQL_MAX_LEN);
    json_error_t jerr;
    json_t *req = json_loadb(body, len, 0, &jerr);
    if (!json_is_object(req)) {
        json_decref(req);
        return hs__err(err, 400, "the body must be a JSON object {\"sql\": \"SELECT …\"}");
    }
    const char *sql = json_string_value(json_object_get(req, "sql"));
    json_t *jl = json_object_get(req, "limit"), *jt = json_object_get(req, "timeout_ms");
    int64_t limit = json_is_integer(jl) ? json_integer_value(jl) : SQL_DEFAULT_ROWS;
    int64_t ms = json_is_integer(jt) ? json_integer_value(jt) : SQL_DEFAULT_MS;
    int rc = 0;
    sqlite3_stmt *st = NULL;
    json_t *cols = NULL, *rows = NULL;
    deadline dl = {0};
    int old_length = -1;
    if (!sql || !*sql) {
        rc = hs__err(err, 400, "\"sql\" must be a non-empty string");
        goto out;
    }
    if ((jl && !json_is_integer(jl)) || limit < 1 || limit > SQL_MAX_ROWS) {
        rc = hs__err(err, 400, "\"limit\" must be an integer from 1 to %d", SQL_MAX_ROWS);
        goto out;
    }
    if ((jt && !json_is_integer(jt)) || ms < 1 || ms > SQL_MAX_MS) {
        rc = hs__err(err, 400, "\"timeout_ms\" must be an integer from 1 to %d", SQL_MAX_MS);
        goto out;
    }

    /* zeroblob(1e9) or printf('%.*c', 1e9, 'x') would otherwise build (and
     * then hex-encode) one gigantic value before any row cap applies. */
    old_length = sqlite3_limit(q->db, SQLITE_LIMIT_LENGTH, SQL_MAX_VALUE);
    sqlite3_set_authorizer(q->db, authorize, NULL);
    const char *tail = NULL;
    int prc = sqlite3_prepare_v2(q->db, sql, -1, &st, &tail);
    sqlite3_set_authorizer(q->db, NULL, NULL);
    if (prc != SQLITE_OK) {
        const char *m = sqlite3_errmsg(q->db);
        if (prc == SQLITE_AUTH || strstr(m, "not authorized"))
            rc = hs__err(err, 400,
                         "only read-only queries (SELECT, WITH, read-only PRAGMA) are "
                         "allowed: %s",
                         m);
        else
            rc = hs__err(err, 400, "SQL error: %s", m);
        goto out;
    }
    if (!st) {
        rc = hs__err(err, 400, "no SQL statement given");
        goto out;
    }
    while (tail &&
           (*tail == ' ' || *tail == '\n' || *tail == '\t' || *tail == '\r' || *tail == ';'))
        tail++;
    if (tail && *tail) {
        rc = hs__err(err, 400, "one statement at a time, please (extra text: '%.40s')", tail);
        goto out;
    }
    if (!sqlite3_stmt_readonly(st)) {
        rc = hs__err(err, 400, "only read-only queries are allowed");
        goto out;
    }
    int ncol = sqlite3_column_count(st);
    cols = json_array();
    rows = json_array();
    for (int i = 0; i < ncol; i++)
        json_array_append_new(cols, json_string(sqlite3_column_name(st, i)));

    clock_gettime(CLOCK_MONOTONIC, &dl.end);
    dl.end.tv_sec += ms / 1000;
    dl.end.tv_nsec += (ms % 1000) * 1000000;
    if (dl.end.tv_nsec >= 1000000000) {
        dl.end.tv_sec++;
        dl.end.tv_nsec -= 1000000000;
    }
    sqlite3_progress_handler(q->db, 1000, progress, &dl);
    int s, truncated = 0;
    size_t bytes = 0;
    int64_t n = 0;
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        if (n == limit || bytes > SQL_MAX_BYTES) {
            truncated = 1;
            break;
        }
        json_t *row = json_array();
        for (int i = 0; i < ncol && bytes <= SQL_MAX_BYTES; i++)
            json_array_append_new(row, column_json(st, i, &bytes));
        if (bytes > SQL_MAX_BYTES) { /* a row of many large values: not one more */
            json_decref(row);
            truncated = 1;
            break;
        }
        json_array_append_new(rows, row);
        n++;
    }
    sqlite3_progress_handler(q->db, 0, NULL, NULL);
    if (s != SQLITE_ROW && s != SQLITE_DONE) {
        if (dl.hit) {
            rc = hs__err(err, 400,
                         "the query ran longer than its time limit of %" PRId64
                         " ms and was stopped (ask for less, or set timeout_ms up to %d)",
                         ms, SQL_MAX_MS);
            err->code = "timeout";
        } else {
            rc = hs__err(err, 400, "SQL error: %s", sqlite3_errmsg(q->db));
        }
        goto out;
    }
    *out = json_pack("{s:o,s:o,s:b,s:I}", "columns", cols, "rows", rows, "truncated", truncated,
                     "row_count", (json_int_t)n);
    cols = rows = NULL;
    if (!*out) rc = hs__err(err, 500, "out of memory");
out:
    sqlite3_finalize(st);
    if (old_length >= 0) sqlite3_limit(q->db, SQLITE_LIMIT_LENGTH, old_length);
    json_decref(cols);
    json_decref(rows);
    json_decref(req);
    return rc;
}

/* ---- event_rows(run) ----------------------------------------------------------
 *
 * SELECT * FROM event_rows(3): one row per event of run 3, in stream order,
 * with its trace resolved through run_stacks. Columns: seq (the EVENTS
 * frame), t_ns, trace, stack_id, is_free, size, bytes (the sample's
 * estimated bytes, its weight), and the hidden argument run. */

enum { ER_SEQ, ER_T, ER_TRACE, ER_STACK, ER_FREE, ER_SIZE, ER_BYTES, ER_RUN };

typedef struct er_vtab {
    sqlite3_vtab base;
    sqlite3 *db;
} er_vtab;

typedef struct er_cursor {
    sqlite3_vtab_cursor base;
    sqlite3_stmt *frames; /* SELECT seq, data FROM events WHERE run = ? ORDER BY seq */
    hs__map stacks;
    int64_t run, rowid, seq;
    uint8_t *data;
    size_t len;
    hs_batch_it it;
    hs_event ev;
    int eof;
} er_cursor;

static int er_connect(sqlite3 *db, void *aux, int argc, const char *const *argv, sqlite3_vtab **out,
                      char **errmsg)
{
    (void)aux;
    (void)argc;
    (void)argv;
    (void)errmsg;
    int rc = sqlite3_declare_vtab(db, "CREATE TABLE x(seq INTEGER, t_ns INTEGER, trace INTEGER, "
                                      "stack_id INTEGER, is_free INTEGER, size INTEGER, bytes "
                                      "INTEGER, run HIDDEN)");
    if (rc != SQLITE_OK) return rc;
    er_vtab *v = sqlite3_malloc(sizeof *v);
    if (!v) return SQLITE_NOMEM;
    memset(v, 0, sizeof *v);
    v->db = db;
    *out = &v->base;
    return SQLITE_OK;
}

static int er_disconnect(sqlite3_vtab *v)
{
    sqlite3_free(v);
    return SQLITE_OK;
}

static int er_best_index(sqlite3_vtab *v, sqlite3_index_info *info)
{
    (void)v;
    for (int i = 0; i < info->nConstraint; i++) {
        const struct sqlite3_index_constraint *c = &info->aConstraint[i];
        if (c->iColumn == ER_RUN && c->op == SQLITE_INDEX_CONSTRAINT_EQ && c->usable) {
            info->aConstraintUsage[i].argvIndex = 1;
            info->aConstraintUsage[i].omit = 1;
            info->idxNum = 1;
            info->estimatedCost = 1000;
            return SQLITE_OK;
        }
    }
    /* without a run the table would be every event of every run: refuse */
    return SQLITE_CONSTRAINT;
}

static int er_open(sqlite3_vtab *v, sqlite3_vtab_cursor **out)
{
    (void)v;
    er_cursor *c = sqlite3_malloc(sizeof *c);
    if (!c) return SQLITE_NOMEM;
    memset(c, 0, sizeof *c);
    *out = &c->base;
    return SQLITE_OK;
}

static int er_close(sqlite3_vtab_cursor *cur)
{
    er_cursor *c = (er_cursor *)cur;
    sqlite3_finalize(c->frames);
    hs__map_free(&c->stacks);
    free(c->data);
    sqlite3_free(c);
    return SQLITE_OK;
}

/* Loads the next EVENTS frame that has entries; sets eof at the end. */
static int er_next_frame(er_cursor *c)
{
    while (1) {
        int s = sqlite3_step(c->frames);
        if (s == SQLITE_DONE) {
            c->eof = 1;
            return SQLITE_OK;
        }
        if (s != SQLITE_ROW) return s;
        c->seq = sqlite3_column_int64(c->frames, 0);
        size_t n = (size_t)sqlite3_column_bytes(c->frames, 1);
        uint8_t *p = malloc(n ? n : 1);
        if (!p) return SQLITE_NOMEM;
        if (n) memcpy(p, sqlite3_column_blob(c->frames, 1), n);
        free(c->data);
        c->data = p;
        c->len = n;
        if (hs_events_begin(&c->it, c->data, c->len)) continue;
        if (hs_events_next(&c->it, &c->ev) == 1) return SQLITE_OK;
    }
}

static int er_next(sqlite3_vtab_cursor *cur)
{
    er_cursor *c = (er_cursor *)cur;
    c->rowid++;
    if (hs_events_next(&c->it, &c->ev) == 1) return SQLITE_OK;
    return er_next_frame(c);
}

static int er_filter(sqlite3_vtab_cursor *cur, int idx, const char *idxstr, int argc,
                     sqlite3_value **argv)
{
    (void)idxstr;
    er_cursor *c = (er_cursor *)cur;
    er_vtab *v = (er_vtab *)cur->pVtab;
    if (idx != 1 || argc < 1) return SQLITE_CONSTRAINT;
    c->run = sqlite3_value_int64(argv[0]);
    c->eof = 0;
    c->rowid = 0;
    hs__map_free(&c->stacks);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(v->db, "SELECT stack_id, trace FROM run_stacks WHERE run = ?1", -1, &st,
                           NULL) != SQLITE_OK)
        return SQLITE_ERROR;
    sqlite3_bind_int64(st, 1, c->run);
    while (sqlite3_step(st) == SQLITE_ROW)
        hs__map_put(&c->stacks, (uint64_t)sqlite3_column_int64(st, 0),
                    (uint64_t)sqlite3_column_int64(st, 1));
    sqlite3_finalize(st);
    sqlite3_finalize(c->frames);
    c->frames = NULL;
    if (sqlite3_prepare_v2(v->db, "SELECT seq, data FROM events WHERE run = ?1 ORDER BY seq", -1,
                           &c->frames, NULL) != SQLITE_OK)
        return SQLITE_ERROR;
    sqlite3_bind_int64(c->frames, 1, c->run);
    return er_next_frame(c);
}

static int er_eof(sqlite3_vtab_cursor *cur)
{
    return ((er_cursor *)cur)->eof;
}

static int er_column(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int i)
{
    er_cursor *c = (er_cursor *)cur;
    uint64_t trace;
    switch (i) {
    case ER_SEQ:
        sqlite3_result_int64(ctx, c->seq);
        break;
    case ER_T:
        sqlite3_result_int64(ctx, (int64_t)c->ev.t_ns);
        break;
    case ER_TRACE:
        if (hs__map_get(&c->stacks, c->ev.stack_id, &trace))
            sqlite3_result_int64(ctx, (int64_t)trace);
        else
            sqlite3_result_null(ctx);
        break;
    case ER_STACK:
        sqlite3_result_int64(ctx, (int64_t)c->ev.stack_id);
        break;
    case ER_FREE:
        sqlite3_result_int(ctx, c->ev.is_free);
        break;
    case ER_SIZE:
        sqlite3_result_int64(ctx, (int64_t)c->ev.size);
        break;
    case ER_BYTES:
        sqlite3_result_int64(ctx, (int64_t)c->ev.weight);
        break;
    default:
        sqlite3_result_int64(ctx, c->run);
        break;
    }
    return SQLITE_OK;
}

static int er_rowid(sqlite3_vtab_cursor *cur, sqlite_int64 *out)
{
    *out = ((er_cursor *)cur)->rowid;
    return SQLITE_OK;
}

static const sqlite3_module event_rows_module = {
    .iVersion = 0,
    .xCreate = NULL, /* eponymous-only: exists in every schema, cannot be created */
    .xConnect = er_connect,
    .xBestIndex = er_best_index,
    .xDisconnect = er_disconnect,
    .xDestroy = er_disconnect,
    .xOpen = er_open,
    .xClose = er_close,
    .xFilter = er_filter,
    .xNext = er_next,
    .xEof = er_eof,
    .xColumn = er_column,
    .xRowid = er_rowid,
};

int hs__sql_register(hs_q *q);

int hs__sql_register(hs_q *q)
{
    if (sqlite3_create_module(q->db, "event_rows", &event_rows_module, NULL) != SQLITE_OK)
        return HS_EDB;
    /* Connect the eponymous table now: its constructor declares a schema,
     * which the authorizer of user queries would refuse. */
    sqlite3_stmt *st = NULL;
    sqlite3_prepare_v2(q->db, "SELECT 1 FROM event_rows(0) LIMIT 0", -1, &st, NULL);
    sqlite3_finalize(st);
    return 0;
}

/* store_sqlite_sql: read-only SQL for power users (POST /api/sql, `heapstore sql`), in
 * SQLite's dialect and so part of the SQLite store (store_sqlite.h), and
 * the event_rows(run) table-valued function that expands the events blobs.
 *
 * Read-only by construction, three times over: the connection is opened
 * read-only, an authorizer allows only reads (no writes, ATTACH, PRAGMA
 * changes, transactions or extension loading), and a statement that SQLite
 * does not call read-only is refused. A progress handler ends a statement
 * past its time limit; rows and bytes are capped and the answer says so. */
#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hs_error.h"
#include "hs_evcodec.h"
#include "hs_maps.h"
#include "hs_proto.h"
#include "hs_schema.h"
#include "q_internal.h"
#include "store_sqlite.h"

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

/* Gives the checked functions the running user query's deadline (or none). */
static void fn_arm(hs__sqlite *q, deadline *dl);

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

/* A request's body: {"sql": "…", "limit": N, "timeout_ms": N}. */
typedef struct sql_req {
    json_t *json;
    const char *sql;
    int64_t limit, ms;
} sql_req;

static int sql_request(sql_req *r, const char *body, size_t len, hs_qerr *err)
{
    memset(r, 0, sizeof *r);
    if (!body || !len)
        return hs__err(err, HS_EINVAL, "POST /api/sql needs a body {\"sql\": \"SELECT …\"}");
    if (len > SQL_MAX_LEN)
        return hs__err(err, HS_ETOOBIG, "SQL request larger than %d bytes", SQL_MAX_LEN);
    json_error_t jerr;
    r->json = json_loadb(body, len, 0, &jerr);
    if (!json_is_object(r->json))
        return hs__err(err, HS_EINVAL, "the body must be a JSON object {\"sql\": \"SELECT …\"}");
    r->sql = json_string_value(json_object_get(r->json, "sql"));
    json_t *jl = json_object_get(r->json, "limit"), *jt = json_object_get(r->json, "timeout_ms");
    r->limit = json_is_integer(jl) ? json_integer_value(jl) : SQL_DEFAULT_ROWS;
    r->ms = json_is_integer(jt) ? json_integer_value(jt) : SQL_DEFAULT_MS;
    if (!r->sql || !*r->sql) return hs__err(err, HS_EINVAL, "\"sql\" must be a non-empty string");
    if ((jl && !json_is_integer(jl)) || r->limit < 1 || r->limit > SQL_MAX_ROWS)
        return hs__err(err, HS_EINVAL, "\"limit\" must be an integer from 1 to %d", SQL_MAX_ROWS);
    if ((jt && !json_is_integer(jt)) || r->ms < 1 || r->ms > SQL_MAX_MS)
        return hs__err(err, HS_EINVAL, "\"timeout_ms\" must be an integer from 1 to %d",
                       SQL_MAX_MS);
    return 0;
}

/* sql prepared under the authorizer, one read-only statement, into *st. */
static int sql_prepare(hs__sqlite *q, const char *sql, sqlite3_stmt **st, hs_qerr *err)
{
    sqlite3_set_authorizer(q->db, authorize, NULL);
    const char *tail = NULL;
    int prc = sqlite3_prepare_v2(q->db, sql, -1, st, &tail);
    sqlite3_set_authorizer(q->db, NULL, NULL);
    if (prc != SQLITE_OK) {
        const char *m = sqlite3_errmsg(q->db);
        if (prc == SQLITE_AUTH || strstr(m, "not authorized"))
            return hs__err(err, HS_EINVAL,
                           "only read-only queries (SELECT, WITH, read-only PRAGMA) are "
                           "allowed: %s",
                           m);
        return hs__err(err, HS_EINVAL, "SQL error: %s", m);
    }
    if (!*st) return hs__err(err, HS_EINVAL, "no SQL statement given");
    while (tail &&
           (*tail == ' ' || *tail == '\n' || *tail == '\t' || *tail == '\r' || *tail == ';'))
        tail++;
    if (tail && *tail)
        return hs__err(err, HS_EINVAL, "one statement at a time, please (extra text: '%.40s')",
                       tail);
    if (!sqlite3_stmt_readonly(*st))
        return hs__err(err, HS_EINVAL, "only read-only queries are allowed");
    return 0;
}

/* st's rows into rows, at most r->limit of them and about SQL_MAX_BYTES,
 * within r->ms; *n rows, *truncated when more were left. */
static int sql_rows(hs__sqlite *q, sqlite3_stmt *st, const sql_req *r, json_t *rows, int64_t *n,
                    int *truncated, hs_qerr *err)
{
    deadline dl = {0};
    clock_gettime(CLOCK_MONOTONIC, &dl.end);
    dl.end.tv_sec += r->ms / 1000;
    dl.end.tv_nsec += (r->ms % 1000) * 1000000;
    if (dl.end.tv_nsec >= 1000000000) {
        dl.end.tv_sec++;
        dl.end.tv_nsec -= 1000000000;
    }
    sqlite3_progress_handler(q->db, 100, progress, &dl);
    fn_arm(q, &dl);
    int s, ncol = sqlite3_column_count(st);
    size_t bytes = 0;
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        if (*n == r->limit || bytes > SQL_MAX_BYTES) {
            *truncated = 1;
            break;
        }
        json_t *row = json_array();
        for (int i = 0; i < ncol && bytes <= SQL_MAX_BYTES; i++)
            json_array_append_new(row, column_json(st, i, &bytes));
        if (bytes > SQL_MAX_BYTES) { /* a row of many large values: not one more */
            json_decref(row);
            *truncated = 1;
            break;
        }
        json_array_append_new(rows, row);
        (*n)++;
    }
    sqlite3_progress_handler(q->db, 0, NULL, NULL);
    fn_arm(q, NULL);
    if (s == SQLITE_ROW || s == SQLITE_DONE) return 0;
    if (dl.hit)
        return hs__err(err, HS_ETIMEOUT,
                       "the query ran longer than its time limit of %" PRId64
                       " ms and was stopped (ask for less, or set timeout_ms up to %d)",
                       r->ms, SQL_MAX_MS);
    return hs__err(err, HS_EINVAL, "SQL error: %s", sqlite3_errmsg(q->db));
}

int hs__view_sql(hs__sqlite *q, const char *body, size_t len, json_t **out, hs_qerr *err)
{
    sql_req r;
    sqlite3_stmt *st = NULL;
    json_t *cols = NULL, *rows = NULL;
    int old_length = -1, truncated = 0;
    int64_t n = 0;
    int rc = sql_request(&r, body, len, err);
    if (rc) goto out;
    /* zeroblob(1e9) or printf('%.*c', 1e9, 'x') would otherwise build (and
     * then hex-encode) one gigantic value before any row cap applies. */
    old_length = sqlite3_limit(q->db, SQLITE_LIMIT_LENGTH, SQL_MAX_VALUE);
    if ((rc = sql_prepare(q, r.sql, &st, err))) goto out;
    int ncol = sqlite3_column_count(st);
    cols = json_array();
    rows = json_array();
    for (int i = 0; i < ncol; i++)
        json_array_append_new(cols, json_string(sqlite3_column_name(st, i)));
    if ((rc = sql_rows(q, st, &r, rows, &n, &truncated, err))) goto out;
    *out = json_pack("{s:o,s:o,s:b,s:I}", "columns", cols, "rows", rows, "truncated", truncated,
                     "row_count", (json_int_t)n);
    cols = rows = NULL;
    if (!*out) rc = hs__err(err, HS_ENOMEM, "out of memory");
out:
    sqlite3_finalize(st);
    if (old_length >= 0) sqlite3_limit(q->db, SQLITE_LIMIT_LENGTH, old_length);
    json_decref(cols);
    json_decref(rows);
    json_decref(r.json);
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
    int schema; /* the database's: says how its events rows are encoded */
    uint8_t *data;
    size_t len;
    hs_evdec dec;
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
    hs_evdec_free(&c->dec);
    free(c->data);
    sqlite3_free(c);
    return SQLITE_OK;
}

/* A stored events row that cannot be decoded (common/hs_evcodec.h). */
static int er_corrupt(er_cursor *c, int rc)
{
    sqlite3_vtab *v = c->base.pVtab;
    sqlite3_free(v->zErrMsg);
    v->zErrMsg = sqlite3_mprintf("event_rows: events row seq %lld of run %lld: %s",
                                 (long long)c->seq, (long long)c->run, hs_strerror(rc));
    return rc == HS_ENOMEM ? SQLITE_NOMEM : SQLITE_CORRUPT;
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
        int rc = hs_evdec_open_row(&c->dec, c->schema, c->data, c->len);
        if (!rc && (rc = hs_evdec_next(&c->dec, &c->ev)) == 1) return SQLITE_OK;
        if (rc) return er_corrupt(c, rc);
    }
}

static int er_next(sqlite3_vtab_cursor *cur)
{
    er_cursor *c = (er_cursor *)cur;
    c->rowid++;
    int rc = hs_evdec_next(&c->dec, &c->ev);
    if (rc == 1) return SQLITE_OK;
    if (rc) return er_corrupt(c, rc);
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
    c->schema = hs_schema_db_version(v->db);
    c->eof = 0;
    c->rowid = 0;
    hs__map_free(&c->stacks);
    hs_maps_entry *e;
    size_t n;
    int rc = hs_maps_read(v->db, c->run, HS_MAPS_STACKS, &e, &n);
    if (rc) return rc == HS_ENOMEM ? SQLITE_NOMEM : SQLITE_ERROR;
    for (size_t i = 0; i < n; i++)
        hs__map_put(&c->stacks, (uint64_t)e[i].key, (uint64_t)e[i].value);
    free(e);
    sqlite3_finalize(c->frames);
    c->frames = NULL;
    char sql[96];
    snprintf(sql, sizeof sql, "SELECT seq, data FROM %s WHERE run = ?1 ORDER BY seq",
             hs_evcodec_events_table(hs_schema_db_version(v->db)));
    if (sqlite3_prepare_v2(v->db, sql, -1, &c->frames, NULL) != SQLITE_OK) return SQLITE_ERROR;
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

/* ---- checked functions --------------------------------------------------------
 *
 * The progress handler runs only between VM instructions, and one call of a
 * built-in function is one instruction, so a single call can outrun any time
 * limit: SQLite 3.40's printf repeats '%.*c' byte by byte (2^31 times for
 * printf('%.*c', 2147483647, 'x'), 9 s, and only then finds the result too
 * long), and instr, replace, LIKE, GLOB and trim with a character set compare
 * in O(n * m) (instr of a 1 MB string and a 100 kB needle: 1.3 s; LIKE
 * '%aaa…b' on 1 MB: minutes). On the connections of queries/ those names are
 * replaced by checked versions. Each first checks the time limit of the user
 * query running (none for queries/' own statements), then refuses arguments
 * whose cost would pass the length limit or FN_MAX_COST comparisons, then
 * computes the answer itself (instr and replace, in linear time with memmem)
 * or asks the built-in of the same name on a private in-memory connection
 * with the same length limit. A row of many calls is stopped at the first
 * call past the deadline. */

#define FN_MAX_ARGS 127         /* SQLITE_MAX_FUNCTION_ARG */
#define FN_MAX_COST 100000000.0 /* byte comparisons one call may cost: about 0.1 s */

enum {
    FN_PRINTF,
    FN_FORMAT,
    FN_LIKE,
    FN_GLOB,
    FN_TRIM,
    FN_LTRIM,
    FN_RTRIM,
    FN_UPPER,
    FN_LOWER,
    FN_QUOTE,
    FN_CHAR,
    FN_ZEROBLOB,
    FN_RANDOMBLOB,
    FN_INSTR,
    FN_REPLACE,
    FN__COUNT
};

static const struct {
    const char *name;
    int nargs[2]; /* argument counts to register (0: none); -1 any */
    int flags;
} fn_defs[FN__COUNT] = {
    [FN_PRINTF] = {"printf", {-1, 0}, SQLITE_DETERMINISTIC},
    [FN_FORMAT] = {"format", {-1, 0}, SQLITE_DETERMINISTIC},
    [FN_LIKE] = {"like", {2, 3}, SQLITE_DETERMINISTIC},
    [FN_GLOB] = {"glob", {2, 0}, SQLITE_DETERMINISTIC},
    [FN_TRIM] = {"trim", {1, 2}, SQLITE_DETERMINISTIC},
    [FN_LTRIM] = {"ltrim", {1, 2}, SQLITE_DETERMINISTIC},
    [FN_RTRIM] = {"rtrim", {1, 2}, SQLITE_DETERMINISTIC},
    [FN_UPPER] = {"upper", {1, 0}, SQLITE_DETERMINISTIC},
    [FN_LOWER] = {"lower", {1, 0}, SQLITE_DETERMINISTIC},
    [FN_QUOTE] = {"quote", {1, 0}, SQLITE_DETERMINISTIC},
    [FN_CHAR] = {"char", {-1, 0}, SQLITE_DETERMINISTIC},
    [FN_ZEROBLOB] = {"zeroblob", {1, 0}, SQLITE_DETERMINISTIC},
    [FN_RANDOMBLOB] = {"randomblob", {1, 0}, 0},
    [FN_INSTR] = {"instr", {2, 0}, SQLITE_DETERMINISTIC},
    [FN_REPLACE] = {"replace", {3, 0}, SQLITE_DETERMINISTIC},
};

typedef struct fn_ctx {
    struct hs__sqlfn *x;
    int id;
} fn_ctx;

struct hs__sqlfn {
    sqlite3 *db;           /* the connection of queries/ (borrowed) */
    sqlite3 *ref;          /* the built-ins, opened on first use */
    deadline *dl;          /* the running user query's, or NULL */
    fn_ctx ctx[FN__COUNT]; /* user data of each registration */
    sqlite3_stmt **st;     /* [id * (FN_MAX_ARGS + 1) + nargs]: SELECT name(?1, …) */
};

static int deadline_passed(deadline *d)
{
    return d && (d->hit || progress(d));
}

/* The built-in of fn with argv, on the private connection. */
static void fn_builtin(sqlite3_context *ctx, struct hs__sqlfn *x, int id, int argc,
                       sqlite3_value **argv)
{
    assert(argc >= 0 && argc <= FN_MAX_ARGS);
    if (!x->ref) {
        if (sqlite3_open_v2(":memory:", &x->ref, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                            NULL) != SQLITE_OK) {
            sqlite3_close(x->ref);
            x->ref = NULL;
            sqlite3_result_error_nomem(ctx);
            return;
        }
    }
    /* the same longest value as the caller's (user SQL lowers it) */
    sqlite3_limit(x->ref, SQLITE_LIMIT_LENGTH, sqlite3_limit(x->db, SQLITE_LIMIT_LENGTH, -1));
    sqlite3_stmt **slot = &x->st[id * (FN_MAX_ARGS + 1) + argc];
    if (!*slot) {
        char sql[16 + 32 + 6 * FN_MAX_ARGS];
        int n = snprintf(sql, sizeof sql, "SELECT %s(", fn_defs[id].name);
        for (int i = 0; i < argc; i++)
            n += snprintf(sql + n, sizeof sql - (size_t)n, "%s?%d", i ? "," : "", i + 1);
        snprintf(sql + n, sizeof sql - (size_t)n, ")");
        if (sqlite3_prepare_v3(x->ref, sql, -1, SQLITE_PREPARE_PERSISTENT, slot, NULL) !=
            SQLITE_OK) {
            sqlite3_result_error(ctx, sqlite3_errmsg(x->ref), -1);
            return;
        }
    }
    sqlite3_stmt *st = *slot;
    for (int i = 0; i < argc; i++) sqlite3_bind_value(st, i + 1, argv[i]);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        sqlite3_result_value(ctx, sqlite3_column_value(st, 0));
    else if (sqlite3_errcode(x->ref) == SQLITE_TOOBIG)
        sqlite3_result_error_toobig(ctx);
    else
        sqlite3_result_error(ctx, sqlite3_errmsg(x->ref), -1);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st); /* let go of large arguments now */
}

/* printf's widths and precisions, '*' taken from the arguments as SQLite
 * takes them: NULL, or why the call is refused. A width pads with spaces
 * and a precision repeats %c or pads numbers with zeros, so either past the
 * length limit asks for more than can be answered. */
static const char *printf_check(int argc, sqlite3_value **argv, int64_t limit)
{
    const char *f = argc > 0 ? (const char *)sqlite3_value_text(argv[0]) : NULL;
    int a = 1;
    for (; f && *f; f++) {
        if (*f != '%') continue;
        f++;
        while (*f && strchr("-+ #!0,", *f)) f++;
        int64_t width = 0, prec = 0;
        if (*f == '*') {
            width = a < argc ? sqlite3_value_int64(argv[a++]) : 0;
            width = width < 0 ? (width == INT64_MIN ? INT64_MAX : -width) : width;
            f++;
        } else {
            for (; *f >= '0' && *f <= '9'; f++)
                width = width > limit ? width : width * 10 + (*f - '0');
        }
        if (*f == '.') {
            f++;
            if (*f == '*') {
                prec = a < argc ? sqlite3_value_int64(argv[a++]) : 0;
                prec = prec < 0 ? (prec == INT64_MIN ? INT64_MAX : -prec) : prec;
                f++;
            } else {
                for (; *f >= '0' && *f <= '9'; f++)
                    prec = prec > limit ? prec : prec * 10 + (*f - '0');
            }
        }
        while (*f == 'l') f++;
        if (!*f) break;
        int64_t unit = 1; /* bytes one repetition adds */
        if (*f == 'c' && a < argc) {
            const unsigned char *c = sqlite3_value_text(argv[a]);
            if (c && *c >= 0xc0) unit = *c >= 0xf0 ? 4 : *c >= 0xe0 ? 3 : 2;
        }
        if (width > limit) return "printf: a field width longer than the longest string allowed";
        if (strchr("cdiuxXoefEgG", *f) && prec > limit / unit)
            return "printf: a precision longer than the longest string allowed";
        if (*f != '%' && *f != 'n') a++;
    }
    return NULL;
}

static int has_any(const unsigned char *s, int n, const char *set)
{
    for (int i = 0; i < n; i++)
        if (strchr(set, s[i])) return 1;
    return 0;
}

/* The first nn bytes of h equal to n, or NULL, in time linear in how far it
 * is. memmem over growing windows rather than over the whole rest: a
 * sanitizer's memmem checks its whole range on every call, which would make
 * replace (a call per match) quadratic. */
static const unsigned char *find(const unsigned char *h, size_t nh, const unsigned char *n,
                                 size_t nn)
{
    if (nn == 1) return memchr(h, n[0], nh);
    size_t w = nn + 64;
    for (size_t at = 0; at + nn <= nh;) {
        size_t len = nh - at < w ? nh - at : w;
        const unsigned char *m = memmem(h + at, len, n, nn);
        if (m || len == nh - at) return m;
        at += len - nn + 1;
        w *= 2;
    }
    return NULL;
}

/* instr(X, Y) as SQLite answers it (characters for text, bytes for two blobs),
 * in linear time. */
static void fn_instr(sqlite3_context *ctx, sqlite3_value **argv)
{
    int th = sqlite3_value_type(argv[0]), tn = sqlite3_value_type(argv[1]);
    if (th == SQLITE_NULL || tn == SQLITE_NULL) return;
    int text = !(th == SQLITE_BLOB && tn == SQLITE_BLOB);
    const unsigned char *h = text ? sqlite3_value_text(argv[0]) : sqlite3_value_blob(argv[0]);
    size_t nh = (size_t)sqlite3_value_bytes(argv[0]);
    const unsigned char *n = text ? sqlite3_value_text(argv[1]) : sqlite3_value_blob(argv[1]);
    size_t nn = (size_t)sqlite3_value_bytes(argv[1]);
    if ((!h && nh) || (!n && nn)) {
        sqlite3_result_error_nomem(ctx);
        return;
    }
    if (!nn) {
        sqlite3_result_int(ctx, 1);
        return;
    }
    size_t from = 0;
    const unsigned char *m = NULL;
    while (from + nn <= nh && (m = find(h + from, nh - from, n, nn))) {
        if (!text || (*m & 0xc0) != 0x80) break; /* a match starts a character */
        from = (size_t)(m - h) + 1;
        m = NULL;
    }
    if (!m) {
        sqlite3_result_int(ctx, 0);
        return;
    }
    int64_t pos = 1;
    for (const unsigned char *p = h; p < m; p++) pos += !text || (*p & 0xc0) != 0x80;
    sqlite3_result_int64(ctx, pos);
}

/* replace(X, Y, Z) as SQLite answers it, in linear time. */
static void fn_replace(sqlite3_context *ctx, sqlite3_value **argv)
{
    const unsigned char *s = sqlite3_value_text(argv[0]);
    if (!s) return;
    size_t ns = (size_t)sqlite3_value_bytes(argv[0]);
    const unsigned char *pat = sqlite3_value_text(argv[1]);
    if (!pat) return;
    if (!pat[0]) {
        sqlite3_result_value(ctx, argv[0]);
        return;
    }
    size_t np = (size_t)sqlite3_value_bytes(argv[1]);
    const unsigned char *rep = sqlite3_value_text(argv[2]);
    if (!rep) return;
    size_t nr = (size_t)sqlite3_value_bytes(argv[2]);
    s = sqlite3_value_text(argv[0]); /* the conversions above may have moved it */
    pat = sqlite3_value_text(argv[1]);
    size_t limit = (size_t)sqlite3_limit(sqlite3_context_db_handle(ctx), SQLITE_LIMIT_LENGTH, -1);
    hs_buf b = {0};
    size_t at = 0;
    const unsigned char *m;
    while (at < ns && (m = find(s + at, ns - at, pat, np))) {
        hs_buf_put(&b, s + at, (size_t)(m - s) - at);
        hs_buf_put(&b, rep, nr);
        at = (size_t)(m - s) + np;
        if (b.n > limit) break;
    }
    if (at < ns && b.n <= limit) hs_buf_put(&b, s + at, ns - at);
    if (b.oom) {
        free(b.p);
        sqlite3_result_error_nomem(ctx);
    } else if (b.n > limit) {
        free(b.p);
        sqlite3_result_error_toobig(ctx);
    } else {
        sqlite3_result_text64(ctx, b.p ? b.p : "", b.n, b.p ? free : SQLITE_TRANSIENT, SQLITE_UTF8);
    }
}

static void fn_call(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    fn_ctx *c = sqlite3_user_data(ctx);
    struct hs__sqlfn *x = c->x;
    if (deadline_passed(x->dl)) {
        sqlite3_result_error(ctx, "the query ran past its time limit", -1);
        return;
    }
    if (argc > FN_MAX_ARGS) {
        sqlite3_result_error(ctx, "too many arguments", -1);
        return;
    }
    int64_t limit = sqlite3_limit(x->db, SQLITE_LIMIT_LENGTH, -1);
    const char *why = NULL;
    double cost = 0;
    switch (c->id) {
    case FN_PRINTF:
    case FN_FORMAT:
        why = printf_check(argc, argv, limit);
        break;
    case FN_LIKE:
    case FN_GLOB: /* (pattern, string): each wildcard may rescan the string */
        if (has_any(sqlite3_value_text(argv[0]), sqlite3_value_bytes(argv[0]),
                    c->id == FN_LIKE ? "%_" : "*?["))
            cost = (double)sqlite3_value_bytes(argv[0]) * (double)sqlite3_value_bytes(argv[1]);
        if (cost > FN_MAX_COST)
            why = "LIKE or GLOB: pattern and string too long together (their lengths multiplied "
                  "pass 1e8); shorten one";
        break;
    case FN_TRIM:
    case FN_LTRIM:
    case FN_RTRIM: /* each character trimmed is looked for in the set */
        if (argc == 2)
            cost = (double)sqlite3_value_bytes(argv[0]) * (double)sqlite3_value_bytes(argv[1]);
        if (cost > FN_MAX_COST)
            why = "trim: string and character set too long together (their lengths multiplied "
                  "pass 1e8); shorten one";
        break;
    case FN_INSTR:
        fn_instr(ctx, argv);
        return;
    case FN_REPLACE:
        fn_replace(ctx, argv);
        return;
    }
    if (why) {
        sqlite3_result_error(ctx, why, -1);
        return;
    }
    fn_builtin(ctx, x, c->id, argc, argv);
}

static void fn_arm(hs__sqlite *q, deadline *dl)
{
    if (q->sqlfn) q->sqlfn->dl = dl;
}

void hs__sql_free(hs__sqlite *q)
{
    struct hs__sqlfn *x = q->sqlfn;
    if (!x) return;
    for (size_t i = 0; x->st && i < (size_t)FN__COUNT * (FN_MAX_ARGS + 1); i++)
        sqlite3_finalize(x->st[i]);
    free(x->st);
    sqlite3_close_v2(x->ref);
    free(x);
    q->sqlfn = NULL;
}

int hs__sql_register(hs__sqlite *q)
{
    if (sqlite3_create_module(q->db, "event_rows", &event_rows_module, NULL) != SQLITE_OK)
        return HS_EDB;
    /* Connect the eponymous tables now (event_rows, and traces, snapshots,
     * run_pcs and run_stacks: schema/hs_schema.h): a constructor declares a
     * schema, which the authorizer of user queries would refuse. */
    static const char *const connect[] = {
        "SELECT 1 FROM event_rows(0) LIMIT 0", "SELECT 1 FROM traces LIMIT 0",
        "SELECT 1 FROM snapshots LIMIT 0", "SELECT 1 FROM run_pcs LIMIT 0",
        "SELECT 1 FROM run_stacks LIMIT 0"};
    for (size_t i = 0; i < sizeof connect / sizeof connect[0]; i++) {
        sqlite3_stmt *st = NULL;
        sqlite3_prepare_v2(q->db, connect[i], -1, &st, NULL);
        sqlite3_finalize(st);
    }

    struct hs__sqlfn *x = calloc(1, sizeof *x);
    if (!x || !(x->st = calloc((size_t)FN__COUNT * (FN_MAX_ARGS + 1), sizeof *x->st))) {
        free(x);
        return HS_ENOMEM;
    }
    x->db = q->db;
    q->sqlfn = x;
    for (int id = 0; id < FN__COUNT; id++) {
        x->ctx[id] = (fn_ctx){x, id};
        for (int k = 0; k < 2; k++) {
            int n = fn_defs[id].nargs[k];
            if (!n) continue;
            if (sqlite3_create_function_v2(q->db, fn_defs[id].name, n,
                                           SQLITE_UTF8 | fn_defs[id].flags, &x->ctx[id], fn_call,
                                           NULL, NULL, NULL) != SQLITE_OK)
                return HS_EDB;
        }
    }
    return 0;
}

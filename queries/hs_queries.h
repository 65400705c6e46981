/* hs_queries: the JSON API of heapstore's questions, over the typed core.
 *
 * Everything people ask about stored runs (runs, history, top, flame, diff,
 * leaks, sizes, exports, read-only SQL) is answered by queries/, over a
 * store (hs_qstore.h; SQLite's, read-only); hs_core.h is the typed core,
 * and this header its JSON adapter: hs_api_handle() takes a request of docs/api.md (method,
 * "/api/…?query", body) and answers JSON or a file with an HTTP status. The
 * server's HTTP layer (server/http.c) calls it; the CLI calls the core in
 * its direct mode, and the adapter's JSON encoders for --json, so both give
 * the same answers.
 *
 * Every answer is bounded whatever the data (nodes, rows, frames per stack,
 * bytes; docs/api.md says how, and each answer says what it left out), and
 * so is what a request holds: about 200 MB at most, the caches dropping back
 * to a few MB between requests.
 *
 * An hs_q owns its store (one connection with its prepared statements) and
 * caches of the immutable stacks (frames, traces); it is used by one thread
 * at a time. The selector parsers (RUN, T, RUN@T) are pure functions and
 * may be called from anywhere.
 */
#ifndef HS_QUERIES_H
#define HS_QUERIES_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "hs_core.h"

/* ---- the API -------------------------------------------------------------- */

typedef struct hs_api_reply {
    int status;               /* HTTP status */
    const char *content_type; /* static string */
    json_t *json;             /* the answer (or the error body) when not NULL */
    char *body;               /* else a file: malloc'd bytes */
    size_t len;
    const char *filename; /* suggested file name of a file answer, static; may be NULL */
} hs_api_reply;

/* Answers one request of docs/api.md. target is the path with its query
 * string ("/api/runs/latest/top?at=peak"). Always fills out (an error is a
 * JSON error body with a 4xx/5xx status); free it with hs_api_reply_clear().
 * q may be NULL when the database could not be opened (then only
 * /api/health answers). */
void hs_api_handle(hs_q *q, const char *method, const char *target, const char *body,
                   size_t body_len, hs_api_reply *out);
void hs_api_reply_clear(hs_api_reply *r);

/* POST /api/sql without the route: body is the request's JSON ({"sql": …,
 * "limit": …, "timeout_ms": …}), *out the answer's (columns and rows, in
 * the store's own terms: no typed result stands between). 0, or an HS_E
 * code in err. What the CLI's direct mode calls. */
int hs_api_sql(hs_q *q, const char *body, size_t len, json_t **out, hs_qerr *err);

/* The error body of docs/api.md for err, with out->status set: the one
 * place where an HS_E code becomes an HTTP status and an API error code. */
void hs_api_error(hs_api_reply *out, const hs_qerr *err);

/* The JSON of docs/api.md for a typed result (a new reference, NULL when
 * out of memory): what /api/runs answers, */
json_t *hs_api_runs_json(const hs_runs_result *r);
/* … /api/runs/RUN (r holds one run) … */
json_t *hs_api_run_json(const hs_runs_result *r);
/* … /api/runs/RUN/history … */
json_t *hs_api_history_json(const hs_history_result *r);
/* … /api/runs/RUN/top … */
json_t *hs_api_top_json(const hs_top_result *r);
/* … /api/runs/RUN/leaks … */
json_t *hs_api_leaks_json(const hs_leaks_result *r);
/* … /api/runs/RUN/sizes … */
json_t *hs_api_sizes_json(const hs_sizes_result *r);
/* … /api/runs/RUN/flame … */
json_t *hs_api_flame_json(const hs_flame_result *r);
/* … and /api/diff (not format=collapsed). */
json_t *hs_api_diff_json(const hs_diff_result *r);
/* … /api/diff when a side names several runs, and /api/check. */
json_t *hs_api_gdiff_json(const hs_gdiff_result *r);
json_t *hs_api_check_json(const hs_check_result *r);
/* /api/trend. */
json_t *hs_api_trend_json(const hs_trend_result *r);

#endif

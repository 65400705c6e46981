/* hs_queries: the one implementation of heapstore's questions.
 *
 * Everything people ask about stored runs (runs, history, top, flame, diff,
 * leaks, sizes, exports, read-only SQL) is answered here, over a read-only
 * SQLite connection, as jansson values or as files. The HTTP API
 * (server/http.c) and the CLI's direct mode both call hs_api_handle() with
 * the same request (method, "/api/…?query", body), so the two cannot give
 * different answers; the CLI's HTTP mode sends that request to a server.
 *
 * Every answer is bounded whatever the data (nodes, rows, frames per stack,
 * bytes; docs/api.md says how, and each answer says what it left out), and
 * so is what a request holds: about 200 MB at most, the caches dropping back
 * to a few MB between requests.
 *
 * An hs_q owns one connection, its prepared statements and caches of the
 * immutable tables (frames, traces); it is used by one thread at a time. The
 * selector parsers (RUN, T, RUN@T) are pure functions and may be called from
 * anywhere.
 */
#ifndef HS_QUERIES_H
#define HS_QUERIES_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

typedef struct hs_q hs_q;

/* An error for a person, with the HTTP status and the API's error code. */
typedef struct hs_qerr {
    int status;       /* 400, 401, 404, 408, 413, 500 … */
    const char *code; /* "bad_request", "not_found", "timeout", "too_large", … */
    char msg[512];
} hs_qerr;

/* Opens db_path read-only. Returns 0 or an HS_E code with err filled. */
int hs_q_open(hs_q **out, const char *db_path, hs_qerr *err);
void hs_q_free(hs_q *q);

/* ---- selectors (pure) ---------------------------------------------------- */

#define HS_SEL_MAX_KV 16

enum hs_run_sel_kind {
    HS_RUNSEL_ID,     /* digits: a run id (or, if no such id, a uuid prefix) */
    HS_RUNSEL_UUID,   /* hex: a unique prefix of a run's uuid */
    HS_RUNSEL_LATEST, /* "latest" */
    HS_RUNSEL_MATCH,  /* key=value[,key=value…][,latest]: the newest match */
};

typedef struct hs_run_sel {
    int kind;
    int64_t id;
    char hex[33];
    int nkv;
    struct {
        char key[64];
        char value[256];
    } kv[HS_SEL_MAX_KV];
} hs_run_sel;

/* END is the end of the program's main code where the run knows it (a
 * Python program: before its interpreter's teardown), else the process's
 * end; EXIT is always the process's end. */
enum hs_t_sel_kind { HS_TSEL_SECONDS, HS_TSEL_PEAK, HS_TSEL_END, HS_TSEL_EXIT };

typedef struct hs_t_sel {
    int kind;
    int64_t ns; /* HS_TSEL_SECONDS: nanoseconds from the run's start */
} hs_t_sel;

/* Each returns 0 or HS_EINVAL with a sentence in err (errlen bytes). */
int hs_sel_parse_run(hs_run_sel *out, const char *s, char *err, size_t errlen);
int hs_sel_parse_t(hs_t_sel *out, const char *s, char *err, size_t errlen);
/* "RUN@T"; T defaults to def (e.g. "end") when there is no '@'. */
int hs_sel_parse_at(hs_run_sel *run, hs_t_sel *t, const char *s, const char *def, char *err,
                    size_t errlen);

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

/* The error body of docs/api.md for err, with out->status set. */
void hs_api_error(hs_api_reply *out, const hs_qerr *err);

#endif

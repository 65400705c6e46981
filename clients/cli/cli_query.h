/* cli_query: what the query commands of the CLI share.
 *
 * Option parsing (--json, --db PATH and each command's value options), the
 * two ways to an answer (direct: the typed core of queries/ on the database
 * file, hs_cli_open; or the server named by HEAPSTORE_URL over HTTP,
 * hs_cli_call, whose JSON cli_decode.c turns into the same typed result, so
 * one renderer prints both), and the human rendering helpers (tables, byte
 * sizes, the sampling footer every answer carries). heapstore sql, whose
 * answer is the store's own (SQLite's rows, not a typed result), gives its
 * request's JSON body to hs_api_sql in direct mode and to the server in
 * HTTP mode. No command reaches an API route in direct mode.
 */
#ifndef HS_CLI_QUERY_H
#define HS_CLI_QUERY_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "hs_queries.h"

typedef struct hs_cli_args {
    const char *cmd; /* the command's name, for messages */
    const char *db;  /* --db PATH */
    int json;        /* --json */
    int all;         /* --all (a flag, for commands whose opts list "all") */
    const char *pos[8];
    int npos;
    const char *at, *by, *limit, *top, *format, *out_file, *min_share, *trace, *timeout_ms;
    const char *program, *host, *sample;
    const char *site, *wrappers; /* --site user|alloc|leaf, --wrappers LIST (site.c) */
    const char *labels[32];
    int nlabels;
    char **rest; /* after "--" (heapstore run) */
    int nrest;
} hs_cli_args;

/* Parses argv (argv[0] is the command). opts lists the value options the
 * command takes, e.g. "at,by,limit". Prints usage on --help (returns -1:
 * exit 0) or on a mistake (returns 2); returns 0 when the caller goes on. */
int hs_cli_parse(hs_cli_args *a, int argc, char **argv, const char *opts, const char *usage);

/* 1 when the CLI answers from a database file through the typed core
 * (--db, or no HEAPSTORE_URL), 0 when it asks the server at HEAPSTORE_URL. */
int hs_cli_direct(const hs_cli_args *a);
/* Opens the database of direct mode (--db, else the default file): 0, or
 * the exit code after saying why on stderr. */
int hs_cli_open(const hs_cli_args *a, hs_q **out);
/* Prints "heapstore CMD: message" for err; returns 1 (the exit code). */
int hs_cli_fail(const hs_cli_args *a, const hs_qerr *err);

/* One request to the server at HEAPSTORE_URL (HTTP mode only: direct mode
 * calls the core). On success returns 0 and fills out (JSON in out->json, or,
 * when file is set, the raw answer in out->body). On failure prints
 * "heapstore CMD: message" to stderr and returns 1 (the exit code). */
int hs_cli_call(const hs_cli_args *a, const char *method, const char *target, const char *body,
                size_t body_len, int file, hs_api_reply *out);

/* HTTP mode of a command on the typed core: GET target from the server;
 * with --json prints the answer as it is and sets *out NULL, else sets
 * *out to the answer (the caller decodes it, cli_decode.h). 0, or the exit
 * code after the error was printed. */
int hs_cli_get_json(const hs_cli_args *a, const char *target, json_t **out);
/* Prints j (a result's JSON, taken over; NULL: out of memory) as --json
 * does; 0 or the exit code. */
int hs_cli_print_own_json(const hs_cli_args *a, json_t *j);
/* Prints "heapstore CMD: out of memory"; returns 1. */
int hs_cli_oom(const hs_cli_args *a);

/* The help lines of --site and --wrappers (a string literal). */
#define HS_CLI_SITE_HELP                                                                           \
    "  --site MODE     what names a stack: user (default: the innermost Python line, or the\n"     \
    "                  first frame outside allocators, wrappers and the C++ standard\n"            \
    "                  library), alloc (standard library containers count as sites), leaf\n"       \
    "                  (the frame that called the allocator)\n"                                    \
    "  --wrappers LIST more allocation wrappers to look through, comma-separated (a trailing\n"    \
    "                  '*' matches a prefix); adds to HEAPSTORE_ALLOC_WRAPPERS"

/* Appends "&site=…&wrappers=…" (or "?…" when target has no query) for the
 * --site and --wrappers options given. */
void hs_cli_site_params(const hs_cli_args *a, char *target, size_t len);

/* Appends s percent-encoded (for a path segment or a query value) to dst. */
void hs_cli_pct(char *dst, size_t len, const char *s);

/* For commands about one RUN: checks there is exactly one positional
 * argument (else prints usage, returns 2) and writes "/api/runs/<RUN>"
 * percent-encoded into target. */
int hs_cli_run_target(const hs_cli_args *a, const char *usage, char *target, size_t len);

/* "fn (file.c:12)": the function named by member fnkey of row and the base
 * name of its file and line (just the function when there is no file). */
void hs_cli_site(char *buf, size_t len, const json_t *row, const char *fnkey);

/* "1.50 MiB"-style sizes into buf (at least 32 bytes). */
const char *hs_cli_bytes(int64_t b, char *buf);
const char *hs_cli_secs(int64_t ns, char *buf);

/* A decoded result's hold on the JSON its strings live in (taken over:
 * the result's _clear releases it). */
hs_qheld hs_cli_held(json_t *j);

/* The line every human answer ends with: sampling and dropped counts. */
void hs_cli_sampling(const hs_run_sampling *sampling);
/* Prints JSON (the --json output). */
void hs_cli_print_json(const json_t *j);

/* A text table: columns sized to their content, numbers right-aligned. */
typedef struct hs_table {
    int ncol;
    const char *hdr[12];
    int right[12];
    char **cells;
    int nrows, cap;
} hs_table;
void hs_table_init(hs_table *t, int ncol, const char *const *hdr, const int *right);
void hs_table_row(hs_table *t, ...);                       /* ncol strings */
void hs_table_rowv(hs_table *t, const char *const *cells); /* ncol strings */
void hs_table_print(hs_table *t);
void hs_table_free(hs_table *t);

/* Integer member of an object (0 when absent). */
int64_t hs_json_int(const json_t *o, const char *key);
const char *hs_json_str(const json_t *o, const char *key);

#endif

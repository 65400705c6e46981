/* hs_core: the typed query core of heapstore.
 *
 * C functions that take typed parameters and return typed results, so that
 * the JSON API (api.c, over HTTP in server/http.c) and the CLI's tables are
 * adapters over one answer. This header holds what every adapter shares:
 * the one error type of the query layer (an HS_E code and a sentence; the
 * HTTP status is the API adapter's business), every default defined once,
 * the grouping of a moment's state (one enum), the selectors (RUN, T,
 * RUN@T: pure parsers), the one frame label, and the typed questions with
 * their results.
 *
 * Ownership: a result is filled by its hs_core_* call and released with its
 * _clear function. Strings in a result are lent: they live in the hs_q's
 * caches (or, for a result decoded from JSON, in the JSON it was decoded
 * from) and stay valid until the next call on the same hs_q; copy what must
 * outlive that. An hs_q is used by one thread at a time.
 */
#ifndef HS_CORE_H
#define HS_CORE_H

#include <stddef.h>
#include <stdint.h>

typedef struct hs_q hs_q;

/* ---- the one error type -------------------------------------------------- */

/* An error for a person: code is a negative HS_E code (hs_error.h): EINVAL
 * a bad parameter, ENOENT no such run, ETOOBIG a request past a bound,
 * ETIMEOUT a query stopped at its time limit, ENOMEM, EDB and ECORRUPT the
 * server's trouble. */
typedef struct hs_qerr {
    int code;
    char msg[512];
} hs_qerr;

/* Opens db_path read-only. Returns 0 or an HS_E code with err filled. */
int hs_q_open(hs_q **out, const char *db_path, hs_qerr *err);
void hs_q_free(hs_q *q);

/* ---- defaults, each defined once ------------------------------------------ */

/* The API's documented defaults (docs/api.md). */
#define HS_RUNS_LIMIT  100 /* runs listed */
#define HS_TOP_LIMIT   50  /* top's rows */
#define HS_LEAKS_LIMIT 20  /* leaks: rows of each list */
#define HS_DIFF_LIMIT  100 /* diff's rows */
#define HS_TOP_AT      "peak"
#define HS_FLAME_AT    "peak"
#define HS_EXPORT_AT   "peak"
#define HS_DIFF_AT     "end" /* RUN without @T in a diff */
/* The CLI's tables show fewer rows (its documented choice, in its help). */
#define HS_CLI_TOP_LIMIT   20
#define HS_CLI_LEAKS_LIMIT 10
#define HS_CLI_DIFF_LIMIT  20

/* Frames per stack in an answer's stacks (max_frames=), and the deepest
 * stack read. */
#define HS_STACK_FRAMES 64
#define HS_MAX_DEPTH    1024

/* ---- grouping ------------------------------------------------------------- */

/* What a row of a moment's state (top, diff) stands for: a stack's site
 * (site.c), a function (every function of a stack counts it once in its
 * total, the site's function in its self), or the whole stack. */
typedef enum hs_group { HS_GROUP_SITE, HS_GROUP_FUNCTION, HS_GROUP_STACK } hs_group;

/* "site", "function", "stack" -> *out; -1 for anything else. */
int hs_group_parse(const char *s, hs_group *out);
const char *hs_group_name(hs_group g);

/* ---- frame labels --------------------------------------------------------- */

/* "name (file.c:12)": the base name of file and the line, or just name when
 * there is no file. Writes at most len bytes (NUL included); returns the
 * length it wanted, as snprintf does. The one label of a frame, for the
 * answers (history's names) and the CLI's tables alike. */
int hs_frame_label(char *buf, size_t len, const char *name, const char *file, int64_t line);

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

/* Each returns 0 or HS_EINVAL with a sentence in err. */
int hs_sel_parse_run(hs_run_sel *out, const char *s, hs_qerr *err);
int hs_sel_parse_t(hs_t_sel *out, const char *s, hs_qerr *err);
/* "RUN@T"; T defaults to def (e.g. "end") when there is no '@'. */
int hs_sel_parse_at(hs_run_sel *run, hs_t_sel *t, const char *s, const char *def, hs_qerr *err);

/* ---- sites ---------------------------------------------------------------- */

/* What names a stack (site.c): user (the default), alloc or leaf, and more
 * allocation wrappers to look through (comma-separated, lent; added to
 * HEAPSTORE_ALLOC_WRAPPERS). */
enum hs_site_mode { HS_SITE_USER, HS_SITE_ALLOC, HS_SITE_LEAF };
typedef struct hs_site_rules {
    int mode;
    const char *wrappers; /* NULL: none */
} hs_site_rules;

/* site= and wrappers= (either may be NULL) -> out. 0 or HS_EINVAL. */
int hs_site_rules_parse(hs_site_rules *out, const char *site, const char *wrappers, hs_qerr *err);

#endif

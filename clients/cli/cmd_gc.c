/* heapstore gc: removes runs by age, by count per program or label, or by
 * selector, and gives the space back. Both modes send the same request
 * (POST /api/gc's JSON body, docs/api.md): direct mode applies it to the
 * database file with the writer's own code (hs_store_gc, which takes the
 * file's write lock, so it refuses while a server holds the file), HTTP
 * mode asks the server at HEAPSTORE_URL, whose writer thread applies it
 * between ingest batches. One renderer prints the answer of both. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli_query.h"
#include "hs_cli.h"
#include "hs_error.h"
#include "hs_paths.h"
#include "hs_queries.h"
#include "hs_store.h"
#include "hs_text.h"

static const char usage[] =
    "gc [SELECTOR] [--older-than AGE] [--keep N [--per program|LABEL]] [--dry-run]\n"
    "    [--no-vacuum] [--json] [--db PATH]\n"
    "  Removes the runs every given rule selects, with all their rows: SELECTOR\n"
    "  (key=value[,…]: program, host, id or a label; 'all' for every run), started\n"
    "  more than AGE ago (30d, 12h, 90m, 45s), or all but the newest N of each\n"
    "  program (or of each value of LABEL). Open runs are never removed. --dry-run\n"
    "  lists what would go. Then VACUUM gives the space back (--no-vacuum keeps the\n"
    "  pages for new runs). With HEAPSTORE_URL set the server does it (its write\n"
    "  token in HEAPSTORE_TOKEN).";

typedef struct gc_opts {
    const char *older, *keep, *per;
    int dry_run, no_vacuum;
} gc_opts;

/* Takes this command's options out of argv; 0 or 2. */
static int take_opts(int *argc, char **argv, gc_opts *o)
{
    int n = 1;
    for (int i = 1; i < *argc; i++) {
        const char *a = argv[i];
        const char **dst = !strcmp(a, "--older-than") ? &o->older
                           : !strcmp(a, "--keep")     ? &o->keep
                           : !strcmp(a, "--per")      ? &o->per
                                                      : NULL;
        if (!strcmp(a, "--dry-run")) {
            o->dry_run = 1;
        } else if (!strcmp(a, "--no-vacuum")) {
            o->no_vacuum = 1;
        } else if (!dst) {
            argv[n++] = argv[i];
        } else if (i + 1 >= *argc) {
            fprintf(stderr, "heapstore gc: %s needs a value\nusage: heapstore %s\n", a, usage);
            return 2;
        } else {
            *dst = argv[++i];
        }
    }
    *argc = n;
    return 0;
}

/* "30d", or a duration of hs_parse_duration, in ns; 0 or -1. */
static int parse_age(const char *s, uint64_t *out)
{
    size_t n = strlen(s);
    if (n > 1 && s[n - 1] == 'd') {
        char *end;
        double d = strtod(s, &end);
        if (end != s + n - 1 || !(d > 0 && d < 36500)) return -1;
        *out = (uint64_t)(d * 86400e9);
        return 0;
    }
    return hs_parse_duration(s, out) || !*out ? -1 : 0;
}

/* The request body from the options; NULL after saying why (*code set). */
static json_t *gc_body(const hs_cli_args *a, const gc_opts *o, int *code)
{
    json_t *b = json_object(), *f = json_object();
    *code = 2;
    if (a->npos == 1 && !strcmp(a->pos[0], "all")) {
        json_object_set_new(b, "all", json_true());
    } else if (a->npos == 1) {
        hs_run_sel sel;
        hs_qerr err;
        if (hs_sel_parse_run(&sel, a->pos[0], &err) || sel.kind != HS_RUNSEL_MATCH) {
            fprintf(stderr, "heapstore gc: SELECTOR must be key=value[,…] or 'all'\n");
            goto fail;
        }
        for (int i = 0; i < sel.nkv; i++)
            json_object_set_new(f, sel.kv[i].key, json_string(sel.kv[i].value));
    }
    json_object_set(b, "filters", f);
    uint64_t age;
    if (o->older && parse_age(o->older, &age)) {
        fprintf(stderr, "heapstore gc: bad --older-than '%s' (e.g. 30d, 12h, 90m)\n", o->older);
        goto fail;
    }
    if (o->older) json_object_set_new(b, "older_than_ns", json_integer((json_int_t)age));
    char *end = NULL;
    long long keep = o->keep ? strtoll(o->keep, &end, 10) : -1;
    if (o->keep && (!*o->keep || *end || keep < 0)) {
        fprintf(stderr, "heapstore gc: --keep must be an integer >= 0\n");
        goto fail;
    }
    if (o->keep) json_object_set_new(b, "keep", json_integer(keep));
    if (o->per) json_object_set_new(b, "per", json_string(o->per));
    json_object_set_new(b, "dry_run", json_boolean(o->dry_run));
    json_object_set_new(b, "vacuum", json_boolean(!o->no_vacuum));
    json_decref(f);
    return b;
fail:
    json_decref(f);
    json_decref(b);
    return NULL;
}

static void print_gc(const json_t *j)
{
    int dry = json_is_true(json_object_get(j, "dry_run"));
    const json_t *runs = json_object_get(j, "runs");
    size_t i;
    json_t *r;
    json_array_foreach(runs, i, r)
    {
        time_t st = (time_t)(hs_json_int(r, "start_unix_ms") / 1000);
        struct tm tm;
        char when[32];
        localtime_r(&st, &tm);
        strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
        printf("%s run %" PRId64 "  %s  %s\n", dry ? "would remove" : "removed",
               hs_json_int(r, "id"), when, hs_json_str(r, "program"));
    }
    char b1[32], b2[32];
    if (dry)
        printf("%zu run%s would be removed (dry run: nothing changed); database %s\n",
               json_array_size(runs), json_array_size(runs) == 1 ? "" : "s",
               hs_cli_bytes(hs_json_int(j, "db_bytes_before"), b1));
    else
        printf("removed %" PRId64 " run%s (%" PRId64 " rows); database %s -> %s (%s)\n",
               hs_json_int(j, "runs_removed"), hs_json_int(j, "runs_removed") == 1 ? "" : "s",
               hs_json_int(j, "rows_deleted"), hs_cli_bytes(hs_json_int(j, "db_bytes_before"), b1),
               hs_cli_bytes(hs_json_int(j, "db_bytes_after"), b2), hs_json_str(j, "space"));
}

static int gc_direct(const hs_cli_args *a, json_t *body, json_t **out)
{
    char path[4096], err[512];
    const char *db = a->db;
    if (!db && hs_default_db_path(path, sizeof path) == 0) db = path;
    if (!db) return fprintf(stderr, "heapstore gc: no database; use --db\n"), 1;
    if (access(db, F_OK)) /* opening a store would make one: nothing to remove */
        return fprintf(stderr, "heapstore gc: no database at %s\n", db), 1;
    hs_gc_spec g;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t now_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
    if (hs_gc_spec_json(&g, body, now_ns, err, sizeof err))
        return fprintf(stderr, "heapstore gc: %s\n", err), 2;
    hs_store *s;
    hs_store_config cfg = {0};
    int rc = hs_store_open(&s, db, &cfg, err, sizeof err);
    if (rc) {
        fprintf(stderr, "heapstore gc: %s\n", err);
        if (rc == HS_EBUSY)
            fprintf(stderr, "  (a server holds the database: set HEAPSTORE_URL to ask it)\n");
        return 1;
    }
    hs_gc_result r;
    json_t *runs = json_array();
    rc = hs_store_gc(s, &g, &r, hs_gc_run_json, runs);
    if (rc) {
        fprintf(stderr, "heapstore gc: %s\n",
                rc == HS_ENOTSUP ? "the database is read-only" : hs_store_errmsg(s));
        json_decref(runs);
    } else {
        *out = hs_gc_result_json(&g, &r, runs);
    }
    hs_store_free(s);
    return rc ? 1 : 0;
}

int hs_cmd_gc(int argc, char **argv)
{
    hs_cli_args a;
    gc_opts o = {0};
    int rc = take_opts(&argc, argv, &o);
    if (rc) return rc;
    if ((rc = hs_cli_parse(&a, argc, argv, "", usage))) return rc < 0 ? 0 : rc;
    if (a.npos > 1) {
        fprintf(stderr, "heapstore gc: at most one SELECTOR\nusage: heapstore %s\n", usage);
        return 2;
    }
    json_t *body = gc_body(&a, &o, &rc), *ans = NULL;
    if (!body) return rc;
    if (hs_cli_direct(&a)) {
        rc = gc_direct(&a, body, &ans);
    } else {
        char *text = json_dumps(body, JSON_COMPACT);
        hs_api_reply rep;
        rc = text ? hs_cli_call(&a, "POST", "/api/gc", text, strlen(text), 0, &rep) : 1;
        free(text);
        if (!rc) ans = json_incref(rep.json), hs_api_reply_clear(&rep);
    }
    json_decref(body);
    if (!rc && ans) {
        if (a.json)
            hs_cli_print_json(ans);
        else
            print_gc(ans);
    }
    json_decref(ans);
    return rc;
}

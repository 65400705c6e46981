/* ties: the order of rows that tie, checked on the quiet fixture in any
 * store (ties.h). */
#include "ties.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

/* The first n names the answer lists, in order: site1, site10, site11 …
 * after site0 (1000 bytes, live at the end) where it leads. */
static const char *const want[] = {"site0", "site1", "site10", "site11", "site12"};

/* A row's function: its name up to " (file:line)". */
static void fn_of(const json_t *row, char *out, size_t len)
{
    const char *n = json_string_value(json_object_get(row, "name"));
    snprintf(out, len, "%s", n ? n : "");
    char *sp = strchr(out, ' ');
    if (sp) *sp = '\0';
}

/* 0 when rows (a JSON array) starts with want[0 ..] (n names). */
static int check_rows(const char *what, const json_t *rows, size_t n)
{
    int bad = json_array_size(rows) < n;
    char got[5][64] = {{0}};
    for (size_t i = 0; !bad && i < n; i++) {
        fn_of(json_array_get(rows, i), got[i], sizeof got[i]);
        bad = strcmp(got[i], want[i]) != 0;
    }
    if (bad)
        fprintf(stderr, "%s: rows %s %s %s %s, wanted %s %s %s %s\n", what, got[0], got[1], got[2],
                got[3], want[0], want[1], want[2], want[3]);
    return bad;
}

static json_t *ask(hs_q *q, const char *target, hs_api_reply *r)
{
    memset(r, 0, sizeof *r);
    hs_api_handle(q, "GET", target, NULL, 0, r);
    if (r->status != 200) fprintf(stderr, "%s: status %d\n", target, r->status);
    return r->status == 200 ? r->json : NULL;
}

/* The collapsed export's first lines: "site0 1000", "site1 100", … */
static int check_collapsed(hs_q *q, const char *run)
{
    char t[200], lines[256] = "";
    snprintf(t, sizeof t, "/api/runs/%s/export?format=collapsed", run);
    hs_api_reply r;
    ask(q, t, &r);
    snprintf(lines, sizeof lines, "%.*s", (int)(r.body ? r.len : 0), r.body ? r.body : "");
    hs_api_reply_clear(&r);
    const char *w = "site0 1000\nsite1 100\nsite10 100\nsite11 100\n";
    int bad = strncmp(lines, w, strlen(w)) != 0;
    if (bad) fprintf(stderr, "collapsed: %.60s\n", lines);
    return bad;
}

int fx_ties_check(hs_q *q)
{
    hs_api_reply r;
    char run[32], t[200];
    json_t *j = ask(q, "/api/runs", &r);
    snprintf(run, sizeof run, "%lld",
             (long long)json_integer_value(
                 json_object_get(json_array_get(json_object_get(j, "runs"), 0), "id")));
    hs_api_reply_clear(&r);
    static const struct {
        const char *query, *rows;
    } asks[] = {
        {"top?at=end&by=site&limit=5", "rows"},     {"top?at=end&by=stack&limit=5", "rows"},
        {"top?at=end&by=function&limit=5", "rows"}, {"top?at=0.05&by=site&limit=4", "rows"},
        {"leaks?limit=5", "live_at_end"},           {"history?top=5", "series"},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof asks / sizeof *asks; i++) {
        snprintf(t, sizeof t, "/api/runs/%s/%s", run, asks[i].query);
        j = ask(q, t, &r);
        bad += !j || check_rows(t, json_object_get(j, asks[i].rows), 4);
        hs_api_reply_clear(&r);
    }
    snprintf(t, sizeof t, "/api/runs/%s/flame?at=end", run);
    j = ask(q, t, &r);
    bad += !j || check_rows(t, json_object_get(json_object_get(j, "root"), "children"), 4);
    hs_api_reply_clear(&r);
    return bad + check_collapsed(q, run);
}

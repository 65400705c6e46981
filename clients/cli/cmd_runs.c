/* heapstore runs: the stored runs, newest first. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli_query.h"
#include "hs_cli.h"

static const char usage[] =
    "runs [--label k=v]… [--program P] [--host H] [--limit N] [--json] [--db PATH]";

int hs_cmd_runs(int argc, char **argv)
{
    hs_cli_args a;
    int rc = hs_cli_parse(&a, argc, argv, "label,program,host,limit", usage);
    if (rc) return rc < 0 ? 0 : rc;
    char def_limit[24];
    snprintf(def_limit, sizeof def_limit, "%d", HS_RUNS_LIMIT);
    if (a.npos) {
        fprintf(stderr, "heapstore runs: unexpected argument '%s'\nusage: heapstore %s\n", a.pos[0],
                usage);
        return 2;
    }
    char target[4096] = "/api/runs?limit=";
    hs_cli_pct(target, sizeof target, a.limit ? a.limit : def_limit);
    if (a.program) {
        strcat(target, "&program=");
        hs_cli_pct(target, sizeof target, a.program);
    }
    if (a.host) {
        strcat(target, "&host=");
        hs_cli_pct(target, sizeof target, a.host);
    }
    for (int i = 0; i < a.nlabels; i++) {
        strncat(target, "&label=", sizeof target - strlen(target) - 1);
        hs_cli_pct(target, sizeof target, a.labels[i]);
    }
    hs_api_reply r;
    if ((rc = hs_cli_call(&a, "GET", target, NULL, 0, 0, &r))) return rc;
    json_t *runs = json_object_get(r.json, "runs");
    if (a.json) {
        hs_cli_print_json(r.json);
        hs_api_reply_clear(&r);
        return 0;
    }
    if (!json_array_size(runs)) {
        printf("no runs stored yet (profile a program with: heapstore run -- PROGRAM ARGS…)\n");
        hs_api_reply_clear(&r);
        return 0;
    }
    static const char *const hdr[] = {"ID",       "STARTED",  "PROGRAM", "HOST",
                                      "DURATION", "PEAK",     "AT END",  "EVENTS",
                                      "DROPPED",  "SAMPLING", "STATE",   "LABELS"};
    static const int right[] = {1, 0, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0};
    hs_table t;
    hs_table_init(&t, 12, hdr, right);
    size_t i;
    json_t *run;
    json_array_foreach(runs, i, run)
    {
        char id[24], started[32], dur[32], peak[32], end[32], events[32], dropped[32], state[32],
            sampling[48], labels[512] = "";
        snprintf(id, sizeof id, "%" PRId64, hs_json_int(run, "id"));
        time_t st = (time_t)(hs_json_int(run, "start_unix_ms") / 1000);
        struct tm tm;
        localtime_r(&st, &tm);
        strftime(started, sizeof started, "%Y-%m-%d %H:%M:%S", &tm);
        hs_cli_secs(hs_json_int(run, "duration_ns"), dur);
        hs_cli_bytes(hs_json_int(run, "peak_bytes"), peak);
        hs_cli_bytes(hs_json_int(run, "end_bytes"), end);
        snprintf(events, sizeof events, "%" PRId64,
                 hs_json_int(run, "alloc_events") + hs_json_int(run, "free_events"));
        json_t *d = json_object_get(json_object_get(run, "sampling"), "dropped");
        snprintf(dropped, sizeof dropped, "%" PRId64,
                 hs_json_int(d, "alloc_events") + hs_json_int(d, "free_events"));
        int64_t sb = hs_json_int(json_object_get(run, "sampling"), "sample_bytes");
        char per[32];
        if (sb == 1)
            snprintf(sampling, sizeof sampling, "every alloc");
        else
            snprintf(sampling, sizeof sampling, "1 per %s", hs_cli_bytes(sb, per));
        const char *s = hs_json_str(run, "state");
        json_t *clean = json_object_get(run, "clean_exit");
        snprintf(state, sizeof state, "%s%s", s,
                 !strcmp(s, "ended") && json_is_false(clean) ? " (no exit)" : "");
        const char *k;
        json_t *v;
        json_object_foreach(json_object_get(run, "labels"), k, v)
        {
            size_t n = strlen(labels);
            snprintf(labels + n, sizeof labels - n, "%s%s=%s", n ? "," : "", k,
                     json_string_value(v));
        }
        const char *prog = hs_json_str(run, "program");
        const char *base = strrchr(prog, '/');
        hs_table_row(&t, id, started, base ? base + 1 : prog, hs_json_str(run, "host"), dur, peak,
                     end, events, dropped, sampling, state, labels);
    }
    hs_table_print(&t);
    hs_table_free(&t);
    hs_api_reply_clear(&r);
    return 0;
}

/* heapstore export: the state at a moment as a file other tools open.
 * Direct mode asks the typed core (hs_core_export). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli_query.h"
#include "hs_cli.h"
#include "hs_queries.h"

static const char usage[] =
    "export RUN [--at T] --format pprof|speedscope|collapsed|dot [-o FILE|-] [--db PATH]\n"
    "  pprof: gzipped profile.proto (go tool pprof -top FILE); speedscope: JSON for\n"
    "  speedscope.app; collapsed: flamegraph.pl input; dot: Graphviz (dot -Tsvg)";

/* The options as the API's parameters, in the order it checks them. */
static int export_params(const hs_cli_args *a, hs_q *q, const char *format, hs_export_params *p,
                         hs_qerr *err)
{
    hs_export_params_init(p);
    int rc = hs_sel_parse_run(&p->run, a->pos[0], err);
    if (rc) return rc;
    rc = hs_export_param(p, "format", format, err);
    if (!rc) rc = hs_export_param(p, "at", a->at ? a->at : HS_EXPORT_AT, err);
    return rc ? hs_run_check(q, &p->run, err, rc) : 0;
}

/* Direct: the core's file on the database file, as the reply of an API
 * call would hold it. 0, or the exit code after saying why. */
static int export_direct(const hs_cli_args *a, const char *format, hs_api_reply *out)
{
    hs_q *q;
    hs_qerr err = {0};
    hs_export_params p;
    hs_export_result r;
    memset(out, 0, sizeof *out);
    int rc = hs_cli_open(a, &q);
    if (rc) return rc;
    if (!(rc = export_params(a, q, format, &p, &err))) rc = hs_core_export(q, &p, &r, &err);
    hs_q_free(q);
    if (rc) return hs_cli_fail(a, &err);
    out->status = 200;
    out->body = r.body;
    out->len = r.len;
    return 0;
}

int hs_cmd_export(int argc, char **argv)
{
    hs_cli_args a;
    int rc = hs_cli_parse(&a, argc, argv, "at,format,output", usage);
    if (rc) return rc < 0 ? 0 : rc;
    const char *format = a.format ? a.format : "pprof";
    char target[4096];
    if ((rc = hs_cli_run_target(&a, usage, target, sizeof target))) return rc;
    hs_api_reply r;
    if (hs_cli_direct(&a)) {
        if ((rc = export_direct(&a, format, &r))) return rc;
    } else {
        strcat(target, "/export?at=");
        hs_cli_pct(target, sizeof target, a.at ? a.at : HS_EXPORT_AT);
        strcat(target, "&format=");
        hs_cli_pct(target, sizeof target, format);
        if ((rc = hs_cli_call(&a, "GET", target, NULL, 0, 1, &r))) return rc;
    }
    const char *path = a.out_file;
    if (!path) {
        static const struct {
            const char *format, *file;
        } names[] = {{"pprof", "heap.pb.gz"},
                     {"speedscope", "heap.speedscope.json"},
                     {"collapsed", "heap.folded"},
                     {"dot", "heap.dot"}};
        path = "heap.out";
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
            if (!strcmp(format, names[i].format)) path = names[i].file;
    }
    int to_stdout = !strcmp(path, "-");
    FILE *f = to_stdout ? stdout : fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "heapstore export: cannot write %s: %s\n", path, strerror(errno));
        hs_api_reply_clear(&r);
        return 1;
    }
    size_t w = fwrite(r.body, 1, r.len, f);
    int bad = w != r.len || (to_stdout ? fflush(f) : fclose(f)) != 0;
    if (bad) {
        fprintf(stderr, "heapstore export: cannot write %s: %s\n", path, strerror(errno));
        hs_api_reply_clear(&r);
        return 1;
    }
    if (!to_stdout) fprintf(stderr, "wrote %s (%s, %zu bytes)\n", path, format, r.len);
    hs_api_reply_clear(&r);
    return 0;
}

/* heapstore export: the state at a moment as a file other tools open. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli_query.h"
#include "hs_cli.h"

static const char usage[] =
    "export RUN [--at T] --format pprof|speedscope|collapsed|dot [-o FILE|-] [--db PATH]\n"
    "  pprof: gzipped profile.proto (go tool pprof -top FILE); speedscope: JSON for\n"
    "  speedscope.app; collapsed: flamegraph.pl input; dot: Graphviz (dot -Tsvg)";

int hs_cmd_export(int argc, char **argv)
{
    hs_cli_args a;
    int rc = hs_cli_parse(&a, argc, argv, "at,format,output", usage);
    if (rc) return rc < 0 ? 0 : rc;
    const char *format = a.format ? a.format : "pprof";
    char target[4096];
    if ((rc = hs_cli_run_target(&a, usage, target, sizeof target))) return rc;
    strcat(target, "/export?at=");
    hs_cli_pct(target, sizeof target, a.at ? a.at : "peak");
    strcat(target, "&format=");
    hs_cli_pct(target, sizeof target, format);
    hs_api_reply r;
    if ((rc = hs_cli_call(&a, "GET", target, NULL, 0, 1, &r))) return rc;
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

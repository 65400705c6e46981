/* heapstore sizes: the allocation size histogram and a sample rate to use. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli_query.h"
#include "hs_cli.h"

static const char usage[] = "sizes RUN [--json] [--db PATH]";

int hs_cmd_sizes(int argc, char **argv)
{
    hs_cli_args a;
    int rc = hs_cli_parse(&a, argc, argv, "", usage);
    if (rc) return rc < 0 ? 0 : rc;
    char target[4096];
    if ((rc = hs_cli_run_target(&a, usage, target, sizeof target))) return rc;
    strcat(target, "/sizes");
    hs_api_reply r;
    if ((rc = hs_cli_call(&a, "GET", target, NULL, 0, 0, &r))) return rc;
    if (a.json) {
        hs_cli_print_json(r.json);
        hs_api_reply_clear(&r);
        return 0;
    }
    const json_t *j = r.json, *run = json_object_get(j, "run");
    char b1[32], b2[32], b3[32];
    printf("run %" PRId64 " (%s): %" PRId64 " allocations, %s requested (all of them, sampled or "
           "not)\n",
           hs_json_int(run, "id"), hs_json_str(run, "program"), hs_json_int(j, "total_allocs"),
           hs_cli_bytes(hs_json_int(j, "total_bytes"), b1));
    int64_t max = 1;
    size_t i;
    json_t *b;
    json_array_foreach(json_object_get(j, "buckets"), i, b) if (hs_json_int(b, "allocs") > max)
        max = hs_json_int(b, "allocs");
    static const char *const hdr[] = {"SIZE FROM", "TO", "ALLOCS", "BYTES", ""};
    static const int right[] = {1, 1, 1, 1, 0};
    hs_table t;
    hs_table_init(&t, 5, hdr, right);
    json_array_foreach(json_object_get(j, "buckets"), i, b)
    {
        char n[24], bar[64];
        snprintf(n, sizeof n, "%" PRId64, hs_json_int(b, "allocs"));
        int w = (int)(40.0 * (double)hs_json_int(b, "allocs") / (double)max);
        memset(bar, '#', (size_t)w);
        bar[w] = '\0';
        hs_table_row(&t, hs_cli_bytes(hs_json_int(b, "lo"), b1),
                     hs_cli_bytes(hs_json_int(b, "hi"), b2), n,
                     hs_cli_bytes(hs_json_int(b, "bytes"), b3), bar);
    }
    hs_table_print(&t);
    hs_table_free(&t);
    printf("suggested HEAPSTORE_SAMPLE_BYTES=%" PRId64 ": %s\n",
           hs_json_int(j, "suggested_sample_bytes"), hs_json_str(j, "reason"));
    hs_cli_sampling(json_object_get(j, "sampling"));
    hs_api_reply_clear(&r);
    return 0;
}

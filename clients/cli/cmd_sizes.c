/* heapstore sizes: the allocation size histogram and a sample rate to use.
 * Direct mode asks the typed core (hs_core_sizes); HTTP mode decodes the
 * server's JSON into the same result; one renderer prints both. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli_decode.h"
#include "cli_query.h"
#include "hs_cli.h"
#include "hs_queries.h"

static const char usage[] = "sizes RUN [--json] [--db PATH]";

static void print_sizes(const hs_sizes_result *r)
{
    char b1[32], b2[32], b3[32];
    printf("run %" PRId64 " (%s): %" PRId64 " allocations, %s requested (all of them, sampled or "
           "not)\n",
           r->run.id, r->run.program, r->total_allocs, hs_cli_bytes(r->total_bytes, b1));
    int64_t max = 1;
    for (size_t i = 0; i < r->nbuckets; i++)
        if (r->buckets[i].allocs > max) max = r->buckets[i].allocs;
    static const char *const hdr[] = {"SIZE FROM", "TO", "ALLOCS", "BYTES", ""};
    static const int right[] = {1, 1, 1, 1, 0};
    hs_table t;
    hs_table_init(&t, 5, hdr, right);
    for (size_t i = 0; i < r->nbuckets; i++) {
        const hs_qsize_bucket *b = &r->buckets[i];
        char n[24], bar[64];
        snprintf(n, sizeof n, "%" PRId64, b->allocs);
        int w = (int)(40.0 * (double)b->allocs / (double)max);
        memset(bar, '#', (size_t)w);
        bar[w] = '\0';
        hs_table_row(&t, hs_cli_bytes(b->lo, b1), hs_cli_bytes(b->hi, b2), n,
                     hs_cli_bytes(b->bytes, b3), bar);
    }
    hs_table_print(&t);
    hs_table_free(&t);
    printf("suggested HEAPSTORE_SAMPLE_BYTES=%" PRId64 ": %s\n", r->suggested_sample_bytes,
           r->reason);
    hs_cli_sampling(&r->run.record.sampling);
}

static int sizes_direct(const hs_cli_args *a)
{
    hs_q *q;
    hs_run_sel sel;
    hs_sizes_result r;
    hs_qerr err;
    int rc = hs_cli_open(a, &q);
    if (rc) return rc;
    if ((rc = hs_sel_parse_run(&sel, a->pos[0], &err)) || (rc = hs_core_sizes(q, &sel, &r, &err))) {
        hs_q_free(q);
        return hs_cli_fail(a, &err);
    }
    if (a->json)
        rc = hs_cli_print_own_json(a, hs_api_sizes_json(&r));
    else
        print_sizes(&r);
    hs_sizes_result_clear(&r);
    hs_q_free(q);
    return rc;
}

static int sizes_http(const hs_cli_args *a, char *target, size_t len)
{
    strncat(target, "/sizes", len - strlen(target) - 1);
    json_t *j;
    hs_sizes_result r;
    int rc = hs_cli_get_json(a, target, &j);
    if (rc || !j) return rc;
    if (hs_cli_sizes_decode(&r, j)) return hs_cli_oom(a); /* takes j over */
    print_sizes(&r);
    hs_sizes_result_clear(&r);
    return 0;
}

int hs_cmd_sizes(int argc, char **argv)
{
    hs_cli_args a;
    int rc = hs_cli_parse(&a, argc, argv, "", usage);
    if (rc) return rc < 0 ? 0 : rc;
    char target[4096];
    if ((rc = hs_cli_run_target(&a, usage, target, sizeof target))) return rc;
    return hs_cli_direct(&a) ? sizes_direct(&a) : sizes_http(&a, target, sizeof target);
}

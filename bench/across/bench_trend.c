/* hs-bench-trend: the typed core's trend (hs_core_trend: the store's one
 * question and the grouping) and its JSON (/api/trend's encoding), timed
 * apart, in one process on a database file: what a trend costs before any
 * output. Prints "core MS json MS rows N": the medians of REPEAT answers
 * after one.
 *
 *   hs-bench-trend DB REPEAT [KEY=VALUE…]     (KEY: runs, by, function, site,
 *                                              at, metric, limit, as the API's)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hs_queries.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: hs-bench-trend DB REPEAT [KEY=VALUE…]\n");
        return 2;
    }
    int repeat = atoi(argv[2]);
    if (repeat < 1 || repeat > 1000) return 2;
    hs_trend_params p;
    hs_qerr err;
    hs_trend_params_init(&p);
    for (int i = 3; i < argc; i++) {
        char *eq = strchr(argv[i], '=');
        if (!eq) return 2;
        *eq = '\0';
        if (hs_trend_param(&p, argv[i], eq + 1, &err)) {
            fprintf(stderr, "hs-bench-trend: %s\n", err.msg);
            return 2;
        }
    }
    hs_q *q;
    if (hs_q_open(&q, argv[1], &err)) {
        fprintf(stderr, "hs-bench-trend: %s\n", err.msg);
        return 1;
    }
    double *core = calloc((size_t)repeat, sizeof *core), *js = calloc((size_t)repeat, sizeof *js);
    size_t rows = 0;
    for (int i = -1; core && js && i < repeat; i++) {
        hs_trend_result r;
        double a = now_ms();
        if (hs_core_trend(q, &p, &r, &err)) {
            fprintf(stderr, "hs-bench-trend: %s\n", err.msg);
            return 1;
        }
        double b = now_ms();
        json_t *j = hs_api_trend_json(&r);
        char *text = json_dumps(j, JSON_COMPACT);
        double c = now_ms();
        rows = r.nrows;
        free(text);
        json_decref(j);
        hs_trend_result_clear(&r);
        if (i >= 0) core[i] = b - a, js[i] = c - b;
    }
    qsort(core, (size_t)repeat, sizeof *core, cmp_d);
    qsort(js, (size_t)repeat, sizeof *js, cmp_d);
    printf("core %.1f json %.1f rows %zu\n", core[repeat / 2], js[repeat / 2], rows);
    free(core);
    free(js);
    hs_q_free(q);
    return 0;
}

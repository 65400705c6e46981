/* hs-bench-trend: the typed core's trend (hs_core_trend: the store's one
 * question and the grouping) and the whole API answer (hs_api_handle of GET
 * /api/trend: the core and the JSON text), in one process on a database
 * file: what a trend costs before any network. Prints "core MS api MS rows
 * N bytes B": the medians of REPEAT answers after one.
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
    char target[2048] = "/api/trend";
    for (int i = 3; i < argc; i++) {
        strncat(target, i == 3 ? "?" : "&", sizeof target - strlen(target) - 1);
        strncat(target, argv[i], sizeof target - strlen(target) - 1);
        strncat(target, "=", sizeof target - strlen(target) - 1);
        strncat(target, argv[i] + strlen(argv[i]) + 1, sizeof target - strlen(target) - 1);
    }
    double *core = calloc((size_t)repeat, sizeof *core), *api = calloc((size_t)repeat, sizeof *api);
    size_t rows = 0, bytes = 0;
    for (int i = -1; core && api && i < repeat; i++) {
        hs_trend_result r;
        double a = now_ms();
        if (hs_core_trend(q, &p, &r, &err)) {
            fprintf(stderr, "hs-bench-trend: %s\n", err.msg);
            return 1;
        }
        double b = now_ms();
        rows = r.nrows;
        hs_trend_result_clear(&r);
        hs_api_reply rep;
        double c = now_ms();
        hs_api_handle(q, "GET", target, NULL, 0, &rep);
        double d = now_ms();
        if (rep.status != 200) {
            fprintf(stderr, "hs-bench-trend: %s answered %d\n", target, rep.status);
            return 1;
        }
        bytes = rep.len;
        hs_api_reply_clear(&rep);
        if (i >= 0) core[i] = b - a, api[i] = d - c;
    }
    qsort(core, (size_t)repeat, sizeof *core, cmp_d);
    qsort(api, (size_t)repeat, sizeof *api, cmp_d);
    printf("core %.1f api %.1f rows %zu bytes %zu\n", core[repeat / 2], api[repeat / 2], rows,
           bytes);
    free(core);
    free(api);
    hs_q_free(q);
    return 0;
}

/* test_bounds: what one API request may cost the server, whatever the data.
 *
 * A crafted run (issue 12, item 3): 1,000 live stacks, each 1,024 frames
 * deep, every frame distinct (1,024,000 functions, about 30 MB streamed).
 * Its flame graph once answered 158 MB and took the server from 23 MB to
 * 3.0 GB of RSS (6.6 GB for two at once, 6.4 GB held after); top by stack
 * with limit=1000 answered 72 MB at 1.27 GB. The run is streamed to the real
 * server through its ingest; a fresh server on the same database then
 * answers each question, alone and two at once, while the test reads the
 * server's VmRSS and VmHWM (its peak, reset through clear_refs before each
 * step). Every answer must be bounded, say what it left out, and move the
 * server's RSS by less than 256 MB. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "fixture.h"
#include "hs_testkit.h"

#define NSTACKS      1000
#define DEPTH        1024
#define RSS_BOUND    (256ll << 20)
#define ANSWER_BOUND (16u << 20) /* what a bounded JSON answer stays under */

static char db[512];
static tk_server srv;

/* Streams the crafted run and waits for the ACK of its BYE. */
static int stream_run(int port)
{
    tk_buf b = {0};
    uint8_t id[16] = {0xde, 0xe9};
    tk_header(&b);
    tk_hello(&b, id, 0, 0, NULL);
    size_t start = b.len;
    const uint32_t nsym = NSTACKS * DEPTH, chunk = 65536;
    for (uint32_t base = 0; base < nsym; base += chunk)
        tk_symbols(&b, base, nsym - base < chunk ? nsym - base : chunk, 0);
    uint64_t *pcs = malloc(DEPTH * sizeof *pcs);
    tk_event *ev = malloc(NSTACKS * sizeof *ev);
    for (uint64_t s = 0; s < NSTACKS; s++) {
        for (uint64_t k = 0; k < DEPTH; k++) pcs[k] = s * DEPTH + k + 1; /* leaf first */
        tk_stack(&b, s + 1, pcs, DEPTH);
        /* sizes differ, so that the largest stacks are well defined */
        ev[s] = (tk_event){.t = 1000 + s, .stack = s + 1, .size = 1000 + s, .weight = 1000 + s};
    }
    tk_events(&b, ev, NSTACKS);
    tk_bye(&b, 1000000000ull, NSTACKS, 0);
    free(pcs);
    free(ev);
    size_t *offs;
    size_t nframes = tk_frame_offsets(&b, start, &offs);
    free(offs);
    fprintf(stderr, "streaming %zu bytes in %zu frames\n", b.len, nframes);
    int fd = tk_connect(port), rc = -1;
    uint64_t got = 0;
    if (fd >= 0 && !tk_send(fd, b.p, b.len) && !tk_wait_ack(fd, nframes, &got, NULL, 0, 240000))
        rc = got == nframes ? 0 : -1;
    if (fd >= 0) close(fd);
    tk_buf_free(&b);
    return rc;
}

/* Run 2: one stack whose live bytes change in each of 25,000 buckets of
 * 10 ms (a point each in history), and an RSS sample each 10 ms. */
#define LONG_BUCKETS 25000
static int stream_long_run(int port)
{
    tk_buf b = {0};
    uint8_t id[16] = {0x10, 0x96};
    tk_header(&b);
    tk_hello(&b, id, 0, 0, NULL);
    size_t start = b.len;
    tk_symbols(&b, 0, 2, 0);
    uint64_t pcs[2] = {1, 2};
    tk_stack(&b, 1, pcs, 2);
    tk_event *ev = malloc(LONG_BUCKETS * sizeof *ev);
    for (uint64_t i = 0; i < LONG_BUCKETS; i++)
        ev[i] = (tk_event){.t = i * 10000000ull + 5000000ull,
                           .stack = 1,
                           .size = 100 + i % 7,
                           .weight = 100 + i % 7};
    for (size_t i = 0; i < LONG_BUCKETS; i += 5000) tk_events(&b, ev + i, 5000);
    free(ev);
    tk_bye(&b, LONG_BUCKETS * 10000000ull, LONG_BUCKETS, 0);
    size_t *offs;
    size_t nframes = tk_frame_offsets(&b, start, &offs);
    free(offs);
    int fd = tk_connect(port), rc = -1;
    uint64_t got = 0;
    if (fd >= 0 && !tk_send(fd, b.p, b.len) && !tk_wait_ack(fd, nframes, &got, NULL, 0, 120000))
        rc = got == nframes ? 0 : -1;
    if (fd >= 0) close(fd);
    tk_buf_free(&b);
    return rc;
}

static int setup(void **state)
{
    (void)state;
    fx_tmp_path(db, sizeof db, "bounds.db");
    const char *const args[] = {"--granularity", "10ms", NULL};
    if (tk_server_start(&srv, db, 0, args)) return -1;
    int rc = stream_run(srv.port);
    if (!rc) rc = stream_long_run(srv.port);
    tk_server_stop(&srv, SIGTERM);
    if (rc) {
        fprintf(stderr, "the crafted run was not stored\n");
        return -1;
    }
    /* a fresh server: its RSS is that of a server that has ingested nothing */
    return tk_server_start(&srv, db, 0, NULL);
}

static int teardown(void **state)
{
    (void)state;
    tk_server_stop(&srv, SIGTERM);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -f '%s' '%s'-*", db, db);
    return system(cmd) == 0 ? 0 : -1;
}

/* ---- the server's memory ------------------------------------------------------ */

static long long status_kb(const char *key)
{
    char p[64], line[256];
    snprintf(p, sizeof p, "/proc/%d/status", (int)srv.pid);
    FILE *f = fopen(p, "r");
    assert_non_null(f);
    long long v = -1;
    size_t kl = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, kl) && line[kl] == ':') v = atoll(line + kl + 1);
    fclose(f);
    assert_true(v >= 0);
    return v * 1024;
}

/* Resets the server's VmHWM to its current RSS; returns that RSS. */
static long long rss_mark(void)
{
    char p[64];
    snprintf(p, sizeof p, "/proc/%d/clear_refs", (int)srv.pid);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs("5", f);
    fclose(f);
    return status_kb("VmRSS");
}

/* ---- requests ------------------------------------------------------------------ */

typedef struct answer {
    const char *target;
    int status;
    size_t len; /* of the body */
    char *body;
    json_t *json;
} answer;

static void *fetch(void *data)
{
    answer *a = data;
    char req[1024];
    snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", a->target);
    char *text = tk_exchange(srv.port, req, strlen(req), 120000);
    a->status = text ? tk_http_status(text) : -1;
    const char *body = text ? tk_http_body(text) : NULL;
    if (body) {
        a->len = strlen(body);
        a->body = strdup(body);
        a->json = json_loads(body, 0, NULL);
    }
    free(text);
    return NULL;
}

static void answer_free(answer *a)
{
    free(a->body);
    json_decref(a->json);
}

/* Requests each target at once (one thread each) and checks the server's
 * peak and held RSS against the bound. */
static void fetch_all(answer *a, int n, const char *what)
{
    long long before = rss_mark();
    pthread_t th[4];
    assert_true(n <= 4);
    for (int i = 0; i < n; i++) pthread_create(&th[i], NULL, fetch, &a[i]);
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
    long long peak = status_kb("VmHWM"), after = status_kb("VmRSS");
    fprintf(stderr, "%s: RSS %.1f MB before, peak %.1f MB, %.1f MB after; answers", what,
            before / 1048576.0, peak / 1048576.0, after / 1048576.0);
    for (int i = 0; i < n; i++) fprintf(stderr, " %zu B", a[i].len);
    fprintf(stderr, "\n");
    for (int i = 0; i < n; i++) assert_int_equal(a[i].status, 200);
    assert_true(peak - before < RSS_BOUND);
    assert_true(after - before < RSS_BOUND);
}

static json_t *jget(json_t *j, const char *k)
{
    json_t *v = json_object_get(j, k);
    assert_non_null(v);
    return v;
}

static void check_flame(const answer *a)
{
    assert_non_null(a->json);
    assert_true(a->len < ANSWER_BOUND);
    json_t *cut = jget(a->json, "truncated");
    assert_true(json_is_object(cut));
    /* the stacks are deeper than the flame graph draws, and there are more
     * nodes than it holds */
    assert_int_equal(json_integer_value(jget(cut, "depth")), 256);
    assert_true(json_integer_value(jget(cut, "nodes")) > 0);
    assert_true(json_integer_value(jget(cut, "nodes_shown")) <= 5000);
    json_t *root = jget(a->json, "root");
    assert_int_equal(json_integer_value(jget(root, "bytes")),
                     NSTACKS * 1000 + NSTACKS * (NSTACKS - 1) / 2);
    assert_true(json_array_size(jget(root, "children")) > 0);
}

static void check_top(const answer *a)
{
    assert_non_null(a->json);
    assert_true(a->len < ANSWER_BOUND);
    json_t *rows = jget(a->json, "rows");
    assert_int_equal(json_integer_value(jget(a->json, "rows_total")), NSTACKS);
    assert_true(json_array_size(rows) > 0);
    /* the largest stack first, its frames cut to the default 64, leaf first */
    json_t *r0 = json_array_get(rows, 0);
    assert_int_equal(json_integer_value(jget(r0, "total_bytes")), 1000 + NSTACKS - 1);
    assert_int_equal(json_array_size(jget(r0, "stack")), 64);
    assert_int_equal(json_integer_value(jget(r0, "stack_depth")), DEPTH);
    json_t *cut = jget(a->json, "truncated");
    assert_true(json_is_object(cut));
    assert_int_equal(json_integer_value(jget(cut, "max_frames")), 64);
}

static void test_flame_alone(void **state)
{
    (void)state;
    answer a = {.target = "/api/runs/1/flame"};
    fetch_all(&a, 1, "flame");
    check_flame(&a);
    answer_free(&a);
}

static void test_top_by_stack_alone(void **state)
{
    (void)state;
    answer a = {.target = "/api/runs/1/top?by=stack&limit=1000"};
    fetch_all(&a, 1, "top by stack");
    check_top(&a);
    answer_free(&a);
}

static void test_two_at_once(void **state)
{
    (void)state;
    answer f[2] = {{.target = "/api/runs/1/flame"}, {.target = "/api/runs/1/flame"}};
    fetch_all(f, 2, "two flames at once");
    check_flame(&f[0]);
    check_flame(&f[1]);
    answer_free(&f[0]);
    answer_free(&f[1]);
    answer t[2] = {{.target = "/api/runs/1/top?by=stack&limit=1000"},
                   {.target = "/api/runs/1/top?by=stack&limit=1000"}};
    fetch_all(t, 2, "two tops by stack at once");
    check_top(&t[0]);
    check_top(&t[1]);
    answer_free(&t[0]);
    answer_free(&t[1]);
}

/* The other views over the same stacks: by function (a million distinct
 * functions), leaks, diff by stack and by function, and each export. */
static void test_other_views(void **state)
{
    (void)state;
    static const char *const targets[] = {
        "/api/runs/1/top?by=function&limit=1000",
        "/api/runs/1/top?by=site&limit=1000",
        "/api/runs/1/leaks?limit=1000",
        "/api/diff?a=1@0&b=1@end&by=stack&limit=1000",
        "/api/diff?a=1@0&b=1@end&by=function&limit=1000",
        "/api/runs/1/history?top=100",
    };
    for (size_t i = 0; i < sizeof targets / sizeof *targets; i++) {
        answer a = {.target = targets[i]};
        fetch_all(&a, 1, targets[i]);
        assert_non_null(a.json);
        assert_true(a.len < ANSWER_BOUND);
        answer_free(&a);
    }
}

/* A run of 25,000 buckets: history's points are merged to at most 10,000,
 * and the answer says so (each point then stands for 3 buckets). */
static void test_history_points(void **state)
{
    (void)state;
    answer a = {.target = "/api/runs/2/history?top=1"};
    fetch_all(&a, 1, "history of 25,000 buckets");
    assert_non_null(a.json);
    json_t *pts = jget(a.json, "points");
    assert_true(json_array_size(pts) <= 10000);
    assert_true(json_array_size(pts) >= 8000);
    json_t *cut = jget(a.json, "truncated");
    assert_int_equal(json_integer_value(jget(cut, "buckets_per_point")), 3);
    assert_int_equal(json_integer_value(jget(a.json, "granularity_ns")), 30000000);
    /* the heap ends at the sum of every allocation, and the merged points
     * keep the highest value of their buckets */
    json_t *lastp = json_array_get(pts, json_array_size(pts) - 1);
    int64_t total = 0;
    for (int64_t i = 0; i < LONG_BUCKETS; i++) total += 100 + i % 7;
    assert_int_equal(json_integer_value(jget(lastp, "heap_bytes")), total);
    assert_int_equal(json_integer_value(jget(lastp, "heap_max_bytes")), total);
    json_t *series = json_array_get(jget(a.json, "series"), 0);
    assert_true(json_array_size(jget(series, "points")) <= 10000);
    answer_free(&a);
}

static void test_exports(void **state)
{
    (void)state;
    static const struct {
        const char *target, *says; /* says: what the file tells of the cut */
        size_t max_len;
    } cases[] = {
        /* stacks keep their 64 innermost frames, marked in collapsed lines */
        {"/api/runs/1/export?format=collapsed", "[truncated];fn64;fn63;", 4u << 20},
        {"/api/runs/1/export?format=pprof", NULL, 4u << 20},
        {"/api/runs/1/export?format=speedscope", "stacks cut to their 64 innermost frames",
         ANSWER_BOUND},
        /* Graphviz gets the 2,000 functions of most bytes */
        {"/api/runs/1/export?format=dot", "functions of less than", 2u << 20},
        {"/api/runs/1/flame?format=collapsed", "[truncated];", 4u << 20},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        answer a = {.target = cases[i].target};
        fetch_all(&a, 1, cases[i].target);
        assert_true(a.len < cases[i].max_len);
        if (cases[i].says) assert_non_null(strstr(a.body, cases[i].says));
        answer_free(&a);
    }
    answer two[2] = {{.target = "/api/runs/1/export?format=pprof"},
                     {.target = "/api/runs/1/export?format=speedscope"}};
    fetch_all(two, 2, "pprof and speedscope at once");
    answer_free(&two[0]);
    answer_free(&two[1]);
    answer pp[2] = {{.target = "/api/runs/1/export?format=pprof"},
                    {.target = "/api/runs/1/export?format=pprof"}};
    fetch_all(pp, 2, "two pprofs at once");
    answer_free(&pp[0]);
    answer_free(&pp[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flame_alone),    cmocka_unit_test(test_top_by_stack_alone),
        cmocka_unit_test(test_two_at_once),    cmocka_unit_test(test_other_views),
        cmocka_unit_test(test_history_points), cmocka_unit_test(test_exports),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

/* test_gdiff: groups of runs (queries/gdiff.c) and the CI gate (check.c)
 * on real runs: wl_versions (gdiff/wl_versions.c) under the real collector
 * at the default rate (one sample per 512 KiB; blocks of 4 KiB and 256 B,
 * so every estimate is noisy), stored by a real server, asked through the
 * CLI in both its modes and through the HTTP API.
 *
 * Three groups of RUNS runs each: version=1 (steady_a 8 MiB, grow_b 8 MiB,
 * steady_c 4 MiB, all live to the end), version=1b (the same program
 * again: differences are noise only) and version=2 (grow_b 24 MiB: a
 * regression of 16 MiB planted in one function).
 *
 * - The group diff calls grow_b grown by 16 MiB (within 4 of its standard
 *   errors, which must be below 4 MiB) and steady_a and steady_c not;
 *   between version=1 and version=1b it calls nothing grown or shrunk. The
 *   sampling error it reports per run is the estimator's, sqrt(B·S) for
 *   blocks much smaller than S, within 25 %.
 * - check --baseline fails (exit 1) on version=2 naming grow_b, and passes
 *   (exit 0) on version=1b; budgets fail and pass as the figures say; the
 *   JUnit file is well-formed XML with the failure naming grow_b; the
 *   answer is the same from the database file and from the server.
 * - A run without exact totals, streamed with known samples (200 blocks of
 *   4 KiB at 512 KiB: peak V = 200 w, se = sqrt(200 w (w - 4096))), has
 *   that error in check, and its budget passes at V + 4 se, warns (exit
 *   0) at V and fails at V - 4 se.
 * - version=3 allocates 16 MiB more through a helper (grow_d calls
 *   pool_get, the blocks' site): check names pool_get and, as its caller,
 *   grow_d.
 * - Two single runs still get the two-run diff; bad input gets a 400. */
#include <math.h>
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

#define RUNS    5
#define MIB     1048576.0
#define DEFAULT 524288.0

static char db[512], cli[512], url[64], wl[512], junit[600];
static tk_server srv;

static const char *const env[] = {url,
                                  "HEAPSTORE_SAMPLE_BYTES=", "HEAPSTORE_ALLOC_WRAPPERS=", NULL};

static void run_version(const char *version, const char *b_kib, const char *d_kib)
{
    char lab[64];
    snprintf(lab, sizeof lab, "version=%s", version);
    const char *argv[] = {cli,   "run",  "--label", lab, "--",  wl,  "8192",
                          b_kib, "4096", "10",      "5", d_kib, NULL};
    tk_out o;
    assert_int_equal(tk_run(&o, argv, env, TK_PRELOAD_NONE, 0), 0);
    if (o.code) fprintf(stderr, "heapstore run: %s\n%s\n", o.out, o.err);
    assert_int_equal(o.code, 0);
    tk_out_free(&o);
}

static int setup(void **state)
{
    (void)state;
    fx_tmp_path(db, sizeof db, "gdiff.db");
    snprintf(junit, sizeof junit, "%s.junit.xml", db);
    snprintf(cli, sizeof cli, "%s", tk_build_path("bin/heapstore"));
    const char *b = getenv("HS_BUILD_DIR");
    snprintf(wl, sizeof wl, "%s/tests/wl_versions", b ? b : ".");
    if (tk_server_start(&srv, db, 0, (const char *const[]){"--granularity", "10ms", NULL}))
        return -1;
    snprintf(url, sizeof url, "HEAPSTORE_URL=tcp://127.0.0.1:%d", srv.port);
    for (int i = 0; i < RUNS; i++) {
        run_version("1", "8192", "0");
        run_version("1b", "8192", "0");
        run_version("2", "24576", "0");
        run_version("3", "8192", "16384");
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tk_server_stop(&srv, SIGTERM);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -f '%s'*", db);
    return system(cmd) == 0 ? 0 : -1;
}

/* Runs the CLI (argv after "heapstore"); its exit code in *code, its
 * stdout as JSON when json, else NULL (stdout into out when given). */
static json_t *cli_run(const char *const *args, const char *const *e, int *code, char **out)
{
    const char *argv[24] = {cli};
    int n = 1;
    while (args[n - 1]) argv[n] = args[n - 1], n++;
    argv[n] = NULL;
    tk_out o;
    assert_int_equal(tk_run(&o, argv, e, TK_PRELOAD_NONE, 0), 0);
    *code = o.code;
    json_t *j = o.out[0] == '{' ? json_loads(o.out, 0, NULL) : NULL;
    if (out) *out = strdup(o.out);
    if (o.code > 1) fprintf(stderr, "heapstore: %s\n", o.err);
    tk_out_free(&o);
    return j;
}

static double jnum(const json_t *o, const char *path)
{
    char buf[128];
    snprintf(buf, sizeof buf, "%s", path);
    const json_t *v = o;
    for (char *k = strtok(buf, "."); k && v; k = strtok(NULL, ".")) v = json_object_get(v, k);
    assert_non_null(v);
    return json_number_value(v);
}

static const json_t *row_named(const json_t *j, const char *name)
{
    size_t i;
    const json_t *r;
    json_array_foreach(
        json_object_get(j, "rows"), i,
        r) if (!strcmp(json_string_value(json_object_get(r, "name")), name)) return r;
    return NULL;
}

static const char *verdict(const json_t *row)
{
    return json_string_value(json_object_get(row, "verdict"));
}

static json_t *gdiff(const char *a, const char *b, const char *by)
{
    int code;
    json_t *j = cli_run((const char *const[]){"diff", a, b, "--by", by, "--at", "peak", "--limit",
                                              "1000", "--json", NULL},
                        env, &code, NULL);
    assert_int_equal(code, 0);
    assert_non_null(j);
    assert_true(json_is_true(json_object_get(j, "group")));
    assert_int_equal(json_array_size(json_object_get(json_object_get(j, "a"), "runs")), RUNS);
    assert_int_equal(json_array_size(json_object_get(json_object_get(j, "b"), "runs")), RUNS);
    return j;
}

static void test_planted(void **state)
{
    (void)state;
    static const char *const bys[] = {"function", "site"};
    for (int k = 0; k < 2; k++) {
        json_t *j = gdiff("version=1", "version=2", bys[k]);
        const json_t *g = row_named(j, "grow_b");
        assert_non_null(g);
        double d = jnum(g, "delta_bytes"), se = jnum(g, "se_bytes");
        fprintf(stderr, "by %s: grow_b %+.2f MiB (se %.2f MiB) %s\n", bys[k], d / MIB, se / MIB,
                verdict(g));
        assert_string_equal(verdict(g), "grew");
        /* ranked first: by function, by what it allocated itself (its callers
         * grew as much inclusive, and allocated nothing) */
        assert_string_equal(json_string_value(json_object_get(
                                json_array_get(json_object_get(j, "rows"), 0), "name")),
                            "grow_b");
        assert_true(se > 0 && se < 4 * MIB);
        assert_true(fabs(d - 16 * MIB) <= 4 * se);
        for (int s = 0; s < 2; s++) {
            const json_t *r = row_named(j, s ? "steady_c" : "steady_a");
            assert_non_null(r);
            assert_true(!strcmp(verdict(r), "noise") || !strcmp(verdict(r), "same"));
        }
        /* the sampling error of one run's steady_a is sqrt(8 MiB · S) */
        double n = RUNS, want = sqrt(8 * MIB * DEFAULT) / sqrt(n);
        const json_t *sa = row_named(j, "steady_a");
        double got = jnum(sa, "a.sampling_se_bytes");
        fprintf(stderr, "steady_a sampling se %.0f, estimator's %.0f\n", got, want);
        assert_true(fabs(got / want - 1) < 0.25);
        json_decref(j);
    }
}

/* The table the CLI prints: the same from the server and from the file,
 * grow_b's row called grown. */
static void test_table(void **state)
{
    (void)state;
    int c1, c2;
    char *o1, *o2;
    cli_run((const char *const[]){"diff", "version=1", "version=2", "--by", "site", "--at", "peak",
                                  NULL},
            env, &c1, &o1);
    cli_run((const char *const[]){"diff", "version=1", "version=2", "--by", "site", "--at", "peak",
                                  "--db", db, NULL},
            env, &c2, &o2);
    assert_int_equal(c1, 0);
    assert_int_equal(c2, 0);
    assert_string_equal(o1, o2);
    const char *line = strstr(o1, "grow_b (wl_versions.c:");
    assert_non_null(line);
    while (line > o1 && line[-1] != '\n') line--;
    assert_non_null(strstr(line, " grew "));
    assert_non_null(strstr(o1, "a: version=1 at peak: 5 run(s)"));
    free(o1);
    free(o2);
}

static void test_noise(void **state)
{
    (void)state;
    static const char *const bys[] = {"function", "site", "stack"};
    for (int k = 0; k < 3; k++) {
        json_t *j = gdiff("version=1", "version=1b", bys[k]);
        size_t i, changed = 0;
        const json_t *r;
        json_array_foreach(json_object_get(j, "rows"), i, r)
        {
            const char *v = verdict(r);
            if (!strcmp(v, "grew") || !strcmp(v, "shrank")) {
                fprintf(stderr, "by %s: %s %s\n", bys[k],
                        json_string_value(json_object_get(r, "name")), v);
                changed++;
            }
        }
        assert_true(json_array_size(json_object_get(j, "rows")) >= 3);
        assert_int_equal(changed, 0);
        json_decref(j);
    }
}

/* check in both modes: the same JSON; the exit code. */
static json_t *check(const char *const *args, int want)
{
    const char *a1[20], *a2[22];
    int n = 0;
    for (; args[n]; n++) a1[n] = a2[n] = args[n];
    a1[n] = "--json", a1[n + 1] = NULL;
    a2[n] = "--json", a2[n + 1] = "--db", a2[n + 2] = db, a2[n + 3] = NULL;
    int c1, c2;
    json_t *j1 = cli_run(a1, env, &c1, NULL), *j2 = cli_run(a2, env, &c2, NULL);
    assert_int_equal(c1, want);
    assert_int_equal(c2, want);
    assert_non_null(j1);
    assert_non_null(j2);
    assert_true(json_equal(j1, j2));
    json_decref(j2);
    return j1;
}

static const json_t *item(const json_t *j, const char *name)
{
    size_t i;
    const json_t *it;
    json_array_foreach(
        json_object_get(j, "checks"), i,
        it) if (!strcmp(json_string_value(json_object_get(it, "name")), name)) return it;
    fail_msg("no check %s", name);
    return NULL;
}

static const char *status(const json_t *j, const char *name)
{
    return json_string_value(json_object_get(item(j, name), "status"));
}

static void test_check_baseline(void **state)
{
    (void)state;
    json_t *j = check((const char *const[]){"check", "version=2", "--baseline", "version=1",
                                            "--tolerance", "5%", NULL},
                      1);
    const json_t *it = item(j, "baseline");
    assert_string_equal(status(j, "baseline"), "fail");
    const json_t *w0 = json_array_get(json_object_get(it, "where"), 0);
    assert_string_equal(json_string_value(json_object_get(w0, "name")), "grow_b");
    assert_true(strstr(json_string_value(json_object_get(w0, "file")), "wl_versions.c"));
    assert_true(jnum(w0, "share") > 0.5);
    json_decref(j);
    j = check((const char *const[]){"check", "version=1b", "--baseline", "version=1", "--tolerance",
                                    "5%", NULL},
              0);
    assert_string_equal(status(j, "baseline"), "pass");
    json_decref(j);
    /* the human table names the function and where it is */
    int code;
    char *out;
    cli_run((const char *const[]){"check", "version=2", "--baseline", "version=1", NULL}, env,
            &code, &out);
    assert_int_equal(code, 1);
    assert_non_null(strstr(out, "grow_b (wl_versions.c:"));
    free(out);
}

/* A growth through a helper: the site is the helper, and check names the
 * function that called it. */
static void test_check_helper(void **state)
{
    (void)state;
    json_t *j =
        check((const char *const[]){"check", "version=3", "--baseline", "version=1", NULL}, 1);
    const json_t *w0 = json_array_get(json_object_get(item(j, "baseline"), "where"), 0);
    assert_string_equal(json_string_value(json_object_get(w0, "name")), "pool_get");
    const char *via = json_string_value(json_object_get(w0, "via"));
    assert_non_null(via);
    assert_true(!strncmp(via, "grow_d", 6));
    json_decref(j);
}

static void test_check_budgets(void **state)
{
    (void)state;
    json_t *j =
        check((const char *const[]){"check", "version=1", "--max-peak", "30MiB", "--max-end",
                                    "10MiB", "--max-leak-rate", "100GiB/s", NULL},
              1);
    assert_string_equal(status(j, "max_peak"), "pass");
    assert_string_equal(status(j, "max_end"), "fail");
    assert_string_equal(status(j, "max_leak_rate"), "pass");
    assert_true(fabs(jnum(item(j, "max_peak"), "value") - 20 * MIB) < 0.5 * MIB);
    json_decref(j);
    j = check((const char *const[]){"check", "version=2", "--max-peak", "30MiB", NULL}, 1);
    assert_string_equal(status(j, "max_peak"), "fail");
    const json_t *w0 = json_array_get(json_object_get(item(j, "max_peak"), "where"), 0);
    assert_string_equal(json_string_value(json_object_get(w0, "name")), "grow_b");
    json_decref(j);
    j = check((const char *const[]){"check", "version=1", "--max-leak-rate", "1MiB/s", NULL}, 1);
    assert_string_equal(status(j, "max_leak_rate"), "fail");
    json_decref(j);
    j = check((const char *const[]){"check", "version=1b,latest", "--max-peak", "64MiB",
                                    "--max-end", "64MiB", NULL},
              0);
    assert_int_equal(json_array_size(json_object_get(j, "runs")), 1);
    json_decref(j);
}

/* A whole file, malloc'd (NULL when it cannot be read). */
static char *file_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *t = calloc(1, 1 << 20);
    if (t) t[fread(t, 1, (1 << 20) - 1, f)] = '\0';
    fclose(f);
    return t;
}

/* check's table and JUnit file: the same bytes from the server (its JSON
 * decoded) and from the file (the core's result), a failing baseline and
 * a passing budget both named. */
static void test_check_table(void **state)
{
    (void)state;
    char j1[640], j2[640];
    snprintf(j1, sizeof j1, "%s.http.xml", db);
    snprintf(j2, sizeof j2, "%s.direct.xml", db);
    int c1, c2;
    char *o1, *o2;
    json_decref(cli_run((const char *const[]){"check", "version=2", "--baseline", "version=1",
                                              "--max-peak", "1GiB", "--junit", j1, NULL},
                        env, &c1, &o1));
    json_decref(
        cli_run((const char *const[]){"check", "version=2", "--baseline", "version=1", "--max-peak",
                                      "1GiB", "--junit", j2, "--db", db, NULL},
                env, &c2, &o2));
    assert_int_equal(c1, 1);
    assert_int_equal(c2, 1);
    assert_string_equal(o1, o2);
    assert_non_null(strstr(o1, "  fail  version=2 at peak"));
    assert_non_null(strstr(o1, "  pass  "));
    assert_non_null(strstr(o1, "grow_b (wl_versions.c:"));
    char *x1 = file_text(j1), *x2 = file_text(j2);
    assert_non_null(x1);
    assert_non_null(x2);
    assert_string_equal(x1, x2);
    assert_non_null(strstr(x1, "<failure type=\"baseline\""));
    free(x1);
    free(x2);
    free(o1);
    free(o2);
    unlink(j1);
    unlink(j2);
}

/* The JUnit file, read by Python's XML parser: its counts, and the
 * failure's message. */
static void test_junit(void **state)
{
    (void)state;
    int code;
    unlink(junit);
    json_decref(cli_run((const char *const[]){"check", "version=2", "--baseline", "version=1",
                                              "--max-peak", "64MiB", "--junit", junit, NULL},
                        env, &code, NULL));
    assert_int_equal(code, 1);
    const char *py = "import sys, xml.etree.ElementTree as E\n"
                     "r = E.parse(sys.argv[1]).getroot()\n"
                     "cases = r.findall('.//testcase')\n"
                     "fails = [c.find('failure') for c in cases if c.find('failure') is not None]\n"
                     "print(len(cases), len(fails), r.get('failures'))\n"
                     "print(fails[0].get('message'))\n";
    const char *argv[] = {"/usr/bin/python3", "-c", py, junit, NULL};
    tk_out o;
    assert_int_equal(tk_run(&o, argv, NULL, TK_PRELOAD_NONE, 0), 0);
    if (o.code) fprintf(stderr, "python3: %s\n", o.err);
    assert_int_equal(o.code, 0);
    int nc = 0, nf = 0, attr = 0;
    assert_int_equal(sscanf(o.out, "%d %d %d", &nc, &nf, &attr), 3);
    assert_int_equal(nc, 2);
    assert_int_equal(nf, 1);
    assert_int_equal(attr, 1);
    assert_non_null(strstr(o.out, "grow_b"));
    tk_out_free(&o);
    /* no answer (no such runs): exit 2, and a report with the error */
    json_decref(cli_run(
        (const char *const[]){"check", "version=9", "--max-peak", "1MiB", "--junit", junit, NULL},
        env, &code, NULL));
    assert_int_equal(code, 2);
    const char *py2 = "import sys, xml.etree.ElementTree as E\n"
                      "r = E.parse(sys.argv[1]).getroot()\n"
                      "print(len(r.findall('.//testcase/error')))\n";
    const char *argv2[] = {"/usr/bin/python3", "-c", py2, junit, NULL};
    assert_int_equal(tk_run(&o, argv2, NULL, TK_PRELOAD_NONE, 0), 0);
    assert_int_equal(o.code, 0);
    assert_int_equal(atoi(o.out), 1);
    tk_out_free(&o);
}

/* A run sampled at DEFAULT without exact totals: NBLOCK blocks of BLOCK
 * bytes on one stack, kept; label env=test (tk_hello's). */
#define NBLOCK 200
#define BLOCK  4096
static double block_weight(void)
{
    return round(BLOCK / -expm1(-BLOCK / DEFAULT));
}

static void stream_sampled(void)
{
    tk_buf b = {0};
    uint8_t id[16] = {0x5a, 0x3b, 0x1e};
    tk_header(&b);
    tk_hello_sampled(&b, id, (uint64_t)DEFAULT);
    size_t start = b.len;
    tk_symbols(&b, 0, 2, 0);
    uint64_t pcs[2] = {1, 2};
    tk_stack(&b, 1, pcs, 2);
    tk_event ev[NBLOCK];
    for (int i = 0; i < NBLOCK; i++)
        ev[i] = (tk_event){.t = 1000000ull + (uint64_t)i * 2000000ull,
                           .stack = 1,
                           .size = BLOCK,
                           .weight = (uint64_t)block_weight()};
    tk_events(&b, ev, NBLOCK);
    tk_bye(&b, 1000000000ull, NBLOCK, 0);
    size_t *offs;
    size_t nframes = tk_frame_offsets(&b, start, &offs);
    free(offs);
    int fd = tk_connect(srv.port);
    uint64_t got = 0;
    assert_true(fd >= 0);
    assert_int_equal(tk_send(fd, b.p, b.len), 0);
    assert_int_equal(tk_wait_ack(fd, nframes, &got, NULL, 0, 60000), 0);
    close(fd);
    tk_buf_free(&b);
}

static void test_check_sampled(void **state)
{
    (void)state;
    stream_sampled();
    double w = block_weight(), v = NBLOCK * w, se = sqrt(NBLOCK * w * (w - BLOCK));
    static const struct {
        double k; /* the budget: V + k se */
        int code;
        const char *status;
    } cases[] = {{4, 0, "pass"}, {0, 0, "warn"}, {-4, 1, "fail"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char limit[32];
        snprintf(limit, sizeof limit, "%.0f", v + cases[i].k * se);
        /* the run is still open until the server has its BYE: wait for it */
        json_t *j = check((const char *const[]){"check", "env=test", "--max-peak", limit, NULL},
                          cases[i].code);
        const json_t *it = item(j, "max_peak");
        fprintf(stderr, "budget V%+.0f se: value %.0f se %.0f (want %.0f, %.0f) %s\n", cases[i].k,
                jnum(it, "value"), jnum(it, "se"), v, se, status(j, "max_peak"));
        assert_true(fabs(jnum(it, "value") - v) <= 1);
        assert_true(fabs(jnum(it, "se") / se - 1) < 1e-3);
        assert_false(json_is_true(json_object_get(it, "exact")));
        assert_string_equal(status(j, "max_peak"), cases[i].status);
        json_decref(j);
    }
}

static char *http_get(const char *target, int *status)
{
    char req[2048];
    snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", target);
    char *ans = tk_exchange(srv.port, req, strlen(req), 10000);
    assert_non_null(ans);
    *status = tk_http_status(ans);
    return ans;
}

static void test_api(void **state)
{
    (void)state;
    int st;
    /* two runs: the two-run answer, as before */
    char *ans = http_get("/api/diff?a=version=1,latest&b=version=2,latest&by=function", &st);
    assert_int_equal(st, 200);
    json_t *j = json_loads(tk_http_body(ans), 0, NULL);
    assert_non_null(j);
    assert_null(json_object_get(j, "group"));
    assert_non_null(json_object_get(json_object_get(j, "a"), "run"));
    json_decref(j);
    free(ans);
    /* an id range is a group */
    ans = http_get("/api/diff?a=id=1..6&b=id=7..15&by=site", &st);
    assert_int_equal(st, 200);
    j = json_loads(tk_http_body(ans), 0, NULL);
    assert_true(json_is_true(json_object_get(j, "group")));
    assert_int_equal(json_array_size(json_object_get(json_object_get(j, "b"), "runs")), 9);
    json_decref(j);
    free(ans);
    static const char *const bad[] = {
        "/api/diff?a=id=6..1&b=version=2",
        "/api/diff?a=version=1&b=version=2&format=collapsed",
        "/api/check?run=version=2",
        "/api/check?run=version=2&max_peak=lots",
        "/api/check?run=version=2&baseline=version=1&tolerance=x",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ans = http_get(bad[i], &st);
        assert_int_equal(st, 400);
        j = json_loads(tk_http_body(ans), 0, NULL);
        assert_non_null(json_object_get(json_object_get(j, "error"), "message"));
        json_decref(j);
        free(ans);
    }
    ans = http_get("/api/check?run=version=9&max_peak=1", &st);
    assert_int_equal(st, 404);
    free(ans);
    int code;
    json_decref(cli_run((const char *const[]){"check", "version=2", "--max-peak", "lots", NULL},
                        env, &code, NULL));
    assert_int_equal(code, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_planted),       cmocka_unit_test(test_table),
        cmocka_unit_test(test_noise),         cmocka_unit_test(test_check_baseline),
        cmocka_unit_test(test_check_budgets), cmocka_unit_test(test_junit),
        cmocka_unit_test(test_check_sampled), cmocka_unit_test(test_check_helper),
        cmocka_unit_test(test_check_table),   cmocka_unit_test(test_api),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

/* The shapes Python programs take, on Debian's python3 (3.11), under the
 * real collector sending to a real server: threads, asyncio coroutines,
 * generators, allocations made by C code that Python called (zlib, json's
 * C accelerator, sqlite3), `python3 -m module`, `python3 -c`, and child
 * processes (multiprocessing with fork and with spawn, subprocess, os.fork
 * children leaving through os._exit), which must be runs of their own linked
 * to their parent's.
 *
 * Each workload (wl_shape_*.py) allocates objects of sizes used nowhere else,
 * above pymalloc's 512-byte limit, on lines marked "# LINE name". What is
 * checked is what the stored stacks hold, read back with `heapstore sql`
 * over traces, frames and event_rows: the bytes allocated by every stack
 * that holds a given sequence of frames (innermost first), so the checks do
 * not depend on which frame of a stack names its site. At every allocation
 * (--sample 1) the bytes are within a stated tolerance of the known answer;
 * at the default rate, within a bound computed from the sampler's variance.
 */
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "hs_testkit.h"

#define PYTHON "/usr/bin/python3"

static tk_server srv;
static char dir[600], db[700];

/* ---- the scripts ---------------------------------------------------------- */

static const char *script(const char *name)
{
    static char buf[4][600];
    static int k;
    char *b = buf[k++ % 4];
    snprintf(b, sizeof buf[0], "%s", tk_source_path(name));
    return b;
}

/* The line of path marked "# LINE name". */
static int line_of(const char *path, const char *name)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char buf[512], mark[128];
    snprintf(mark, sizeof mark, "# LINE %s\n", name);
    int line = 0, found = 0;
    while (!found && fgets(buf, sizeof buf, f)) {
        line++;
        const char *p = strstr(buf, mark);
        found = p && strlen(p) == strlen(mark);
    }
    fclose(f);
    if (!found) fprintf(stderr, "no '# LINE %s' in %s\n", name, path);
    assert_true(found);
    return line;
}

/* Runs python3 under the collector, sending to the server; argv[0] is
 * PYTHON. Fails unless it exits 0. Returns its stdout (owned by r). */
static const char *run_python(tk_out *r, const char *const *argv, const char *sample,
                              const char *extra)
{
    if (access(PYTHON, X_OK) != 0) {
        fprintf(stderr, "no %s (install Debian's python3)\n", PYTHON);
        fail();
    }
    const char *env[] = {tk_env("HEAPSTORE_URL=tcp://127.0.0.1:%d", srv.port),
                         /* generous: what is checked is delivery, not speed */
                         "HEAPSTORE_EXIT_FLUSH_MS=30000", "PYTHONHASHSEED=0",
                         "PYTHONDONTWRITEBYTECODE=1",
                         /* The shapes are about stacks, and their known
                          * answers are blocks over 512 bytes. Small objects
                          * (test_pymem's subject) would add their headers to
                          * every answer and millions of rows to every query:
                          * an explicit PYTHONMALLOC keeps them unwrapped. */
                         "PYTHONMALLOC=pymalloc", sample, extra, NULL};
    tk_run(r, argv, env, TK_PRELOAD_COLLECTOR, 120);
    tk_expect_ok(r);
    return r->out;
}

/* ---- the runs' rows (SQLite directly) -------------------------------------- */

/* The run of process pid, once it and `children` runs whose parent it is
 * have ended (each collector waited for the ACK of its BYE; the server may
 * still be settling them). */
static int64_t ended_run(int pid, int children)
{
    int64_t run = 0;
    uint64_t deadline = tk_now_ms() + 60000;
    for (;;) {
        run = tk_q(db, "SELECT coalesce(max(id), 0) FROM runs WHERE pid = %d AND parent_id IS NULL",
                   pid);
        int64_t ended = tk_q(db, "SELECT count(*) FROM runs WHERE id = %lld AND state = 'ended'",
                             (long long)run);
        int64_t kids = tk_q(db,
                            "SELECT count(*) FROM runs WHERE parent_id = %lld AND state = "
                            "'ended'",
                            (long long)run);
        if ((run > 0 && ended == 1 && kids >= children) || tk_now_ms() > deadline) break;
        usleep(50000);
    }
    assert_true(run > 0);
    return run;
}

/* The run ended by BYE with CLEAN, every event its collector counted
 * stored, none dropped, no sample without its Python frames. */
static int run_complete(int64_t run)
{
    return tk_q(db,
                "SELECT state = 'ended' AND clean_exit = 1 AND alloc_events = bye_alloc_events "
                "AND free_events = bye_free_events AND dropped_alloc_events = 0 AND "
                "dropped_free_events = 0 AND python_fallback = 0 FROM runs WHERE id = %lld",
                (long long)run) == 1;
}

/* ---- stacks, read back with heapstore sql ----------------------------------- */

typedef struct frame {
    const char *fn, *file, *module; /* borrow stacks.text */
    long line;
    int depth;
} frame;

typedef struct tstack {
    uint64_t n, bytes, weight; /* allocations, their requested bytes, their estimate */
    size_t nf;
    frame *f; /* innermost (the allocator) first */
} tstack;

typedef struct stacks {
    tstack *s;
    size_t n;
    char *text;
} stacks;

static int by_depth_desc(const void *a, const void *b)
{
    return ((const frame *)b)->depth - ((const frame *)a)->depth;
}

/* Every stack of run that allocated and holds at least one frame matching
 * the SQL condition `filter` (over frames f), with the allocations it made;
 * with sub, also those of them that hold a frame matching `subfilter`, in
 * sub (their frames' text borrowed from out's: free sub first). One query
 * for both: on a run at every allocation it takes seconds, under ASan ~10. */
static void load_stacks_sub(stacks *out, stacks *sub, int64_t run, const char *filter,
                            const char *subfilter)
{
    char sql[4096];
    snprintf(sql, sizeof sql,
             "WITH RECURSIVE sums AS (SELECT trace, count(*) AS n, sum(size) AS b, sum(bytes) "
             "AS w FROM event_rows(%lld) WHERE is_free = 0 GROUP BY trace), up(trace, node) AS "
             "(SELECT trace, trace FROM sums UNION ALL SELECT up.trace, t.parent FROM up JOIN "
             "traces t ON t.id = up.node WHERE t.parent != 0), fr AS (SELECT up.trace AS trace, "
             "group_concat(t.depth || '@' || f.function || '@' || f.file || '@' || f.line || '@' "
             "|| f.module, '|') AS s, max(%s) AS keep, coalesce(max(%s), 0) AS sub FROM up JOIN "
             "traces t ON t.id = up.node JOIN frames f ON f.id = t.frame GROUP BY up.trace) "
             "SELECT 'row ' || n || ' ' || b || ' ' || w || ' ' || sub || ' ' || s AS x FROM "
             "sums JOIN fr USING (trace) WHERE keep",
             (long long)run, filter, subfilter ? subfilter : "1");
    const char *argv[] = {tk_build_path("bin/heapstore"),
                          "sql",
                          "--db",
                          db,
                          "--limit",
                          "100000",
                          "--timeout-ms",
                          "30000",
                          sql,
                          NULL};
    tk_out r;
    tk_run(&r, argv, NULL, TK_PRELOAD_NONE, 120);
    tk_expect_ok(&r);
    assert_null(strstr(r.out, "more were cut off")); /* every stack, or the sums are wrong */
    out->text = r.out;
    r.out = NULL;
    tk_out_free(&r);
    out->s = NULL;
    out->n = 0;
    if (sub) *sub = (stacks){0};
    size_t cap = 0, subcap = 0;
    for (char *line = strtok(out->text, "\n"); line; line = strtok(NULL, "\n")) {
        if (strncmp(line, "row ", 4)) continue;
        tstack t = {0};
        int off = 0, in_sub = 0;
        assert_int_equal(
            sscanf(line, "row %lu %lu %lu %d %n", &t.n, &t.bytes, &t.weight, &in_sub, &off), 4);
        char *p = line + off;
        size_t fcap = 0;
        while (p && *p) {
            char *next = strchr(p, '|');
            if (next) *next++ = 0;
            char *fld[5];
            for (int k = 0; k < 5; k++) {
                fld[k] = p;
                char *at = k < 4 ? strchr(p, '@') : NULL;
                if (k < 4) assert_non_null(at);
                if (at) *at = 0, p = at + 1;
            }
            if (t.nf == fcap) t.f = realloc(t.f, (fcap = fcap ? 2 * fcap : 64) * sizeof *t.f);
            t.f[t.nf++] = (frame){.depth = atoi(fld[0]),
                                  .fn = fld[1],
                                  .file = fld[2],
                                  .line = atol(fld[3]),
                                  .module = fld[4]};
            p = next;
        }
        qsort(t.f, t.nf, sizeof *t.f, by_depth_desc);
        if (out->n == cap) out->s = realloc(out->s, (cap = cap ? 2 * cap : 256) * sizeof *out->s);
        out->s[out->n++] = t;
        if (!sub || !in_sub) continue;
        tstack c = t;
        c.f = malloc((t.nf ? t.nf : 1) * sizeof *c.f);
        assert_non_null(c.f);
        memcpy(c.f, t.f, t.nf * sizeof *c.f);
        if (sub->n == subcap)
            sub->s = realloc(sub->s, (subcap = subcap ? 2 * subcap : 256) * sizeof *sub->s);
        sub->s[sub->n++] = c;
    }
}

static void load_stacks(stacks *out, int64_t run, const char *filter)
{
    load_stacks_sub(out, NULL, run, filter, NULL);
}

static void free_stacks(stacks *st)
{
    for (size_t i = 0; i < st->n; i++) free(st->s[i].f);
    free(st->s);
    free(st->text);
}

/* One frame to look for: a function (NULL: any), whose file ends with file
 * (NULL: any), at line (0: any), in a module whose path holds module
 * (NULL: any). */
typedef struct pat {
    const char *fn, *file;
    long line;
    const char *module;
} pat;

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

static int frame_is(const frame *f, const pat *p)
{
    return (!p->fn || !strcmp(f->fn, p->fn)) && (!p->file || ends_with(f->file, p->file)) &&
           (!p->line || f->line == p->line) && (!p->module || strstr(f->module, p->module));
}

/* 1 if stack t holds frames matching pats[0], pats[1], … in that order,
 * innermost first (other frames may stand between them). */
static int holds(const tstack *t, const pat *pats, size_t npats)
{
    size_t k = 0;
    for (size_t i = 0; i < t->nf && k < npats; i++) k += frame_is(&t->f[i], &pats[k]);
    return k == npats;
}

typedef struct total {
    uint64_t n, bytes, weight;
    int stacks;
} total;

/* What the stacks holding pats (in order) allocated. */
static total sum_of(const stacks *st, const pat *pats, size_t npats)
{
    total r = {0};
    for (size_t i = 0; i < st->n; i++)
        if (holds(&st->s[i], pats, npats)) {
            r.n += st->s[i].n;
            r.bytes += st->s[i].bytes;
            r.weight += st->s[i].weight;
            r.stacks++;
        }
    return r;
}

#define SUM(st, ...)                                                                               \
    sum_of((st), (const pat[]){__VA_ARGS__}, sizeof((const pat[]){__VA_ARGS__}) / sizeof(pat))

/* Bytes of what stacks holding pats allocated, within [lo, hi]. */
static void expect_range(const char *what, total t, double lo, double hi)
{
    fprintf(stderr, "  %-40s %10lu bytes in %5lu allocations, %3d stacks (want %.0f .. %.0f)\n",
            what, (unsigned long)t.bytes, (unsigned long)t.n, t.stacks, lo, hi);
    assert_true(t.stacks > 0);
    assert_true((double)t.bytes >= lo);
    assert_true((double)t.bytes <= hi);
}

/* n objects of size bytes made by CPython (malloc sees size + 1 for a
 * bytearray), within 1% above (the object headers and the list that keeps
 * them, once pymalloc's objects are counted too) and never below. */
static void expect_objects(const char *what, total t, unsigned long n, unsigned long size)
{
    double want = (double)n * (double)(size + 1);
    expect_range(what, t, want, want * 1.01);
}

/* ---- threads, coroutines, generators: one run of wl_shape_flow.py ------------ */

typedef struct flow {
    int pid;
    unsigned long n, a, b, c, rate_n, fetch_n, fetch, inner_n, inner, gen_n, gen, gx;
} flow;

static void parse_flow(flow *f, const char *out)
{
    assert_int_equal(sscanf(out, "flow %d %lu %lu %lu %lu %lu %lu %lu %lu %lu %lu %lu %lu", &f->pid,
                            &f->n, &f->a, &f->b, &f->c, &f->rate_n, &f->fetch_n, &f->fetch,
                            &f->inner_n, &f->inner, &f->gen_n, &f->gen, &f->gx),
                     13);
}

static int64_t flow_run;
static flow flow_out;
static stacks flow_stacks, flow_all;

/* wl_shape_flow.py exact, at every allocation, once for the tests that read
 * it: the stacks through its functions, and (flow_all) every stack through
 * the file, <module> included. */
static const stacks *flow_exact(void)
{
    if (flow_run) return &flow_stacks;
    const char *argv[] = {PYTHON, script("tests/collector/wl_shape_flow.py"), "exact", NULL};
    tk_out r;
    parse_flow(&flow_out, run_python(&r, argv, "HEAPSTORE_SAMPLE_BYTES=1", NULL));
    tk_out_free(&r);
    flow_run = ended_run(flow_out.pid, 0);
    assert_true(run_complete(flow_run));
    load_stacks_sub(&flow_all, &flow_stacks, flow_run, "f.file LIKE '%/wl_shape_flow.py'",
                    "f.file LIKE '%/wl_shape_flow.py' AND f.function != '<module>'");
    return &flow_stacks;
}

#define FLOW      "wl_shape_flow.py"
#define FLOW_PATH script("tests/collector/" FLOW)

/* Each thread's allocations carry that thread's own Python stack: its
 * function, the worker that called it, threading's bootstrap, and nothing
 * of the main thread's stack (<module>) or of the other threads'. */
static void test_threads(void **state)
{
    (void)state;
    const stacks *st = flow_exact();
    const flow *f = &flow_out;
    static const char *const fns[] = {"thread_a", "thread_b", "thread_c"};
    unsigned long sizes[] = {f->a, f->b, f->c};
    pat worker = {"worker", FLOW, line_of(FLOW_PATH, "worker"), NULL};
    pat boot = {"Thread._bootstrap", "threading.py", 0, NULL};
    for (int k = 0; k < 3; k++) {
        pat fn = {fns[k], FLOW, line_of(FLOW_PATH, fns[k]), NULL};
        expect_objects(fns[k], SUM(st, fn, worker, boot), f->n, sizes[k]);
        /* Nothing of another thread's or of the main thread's stack. */
        pat mod = {"<module>", NULL, 0, NULL};
        for (int j = 0; j < 3; j++) {
            pat other = {fns[j], NULL, 0, NULL};
            if (j != k) assert_int_equal(SUM(st, fn, other).stacks, 0);
            assert_int_equal(SUM(st, other, mod).stacks, 0);
        }
    }
}

/* A coroutine's allocations show the coroutine's function, resumed by the
 * event loop under the line that called asyncio.run; a coroutine awaited
 * by another shows both, the awaited one innermost. */
static void test_coroutines(void **state)
{
    (void)state;
    const stacks *st = flow_exact();
    const flow *f = &flow_out;
    pat fetch = {"fetch", FLOW, line_of(FLOW_PATH, "fetch"), NULL};
    pat inner = {"inner", FLOW, line_of(FLOW_PATH, "inner"), NULL};
    pat outer = {"outer", FLOW, line_of(FLOW_PATH, "outer"), NULL};
    pat loop = {"BaseEventLoop.run_until_complete", "base_events.py", 0, NULL};
    pat arun = {"<module>", FLOW, line_of(FLOW_PATH, "arun"), NULL};
    expect_objects("fetch (coroutine)", SUM(st, fetch, loop, arun), f->fetch_n, f->fetch);
    expect_objects("inner (awaited by outer)", SUM(st, inner, outer, loop, arun), f->inner_n,
                   f->inner);
}

/* A generator's allocations show the generator's function under the line
 * that resumed it: produce, inside relay's `yield from`, inside consume's
 * for loop; a generator expression under the line that holds it. */
static void test_generators(void **state)
{
    (void)state;
    const stacks *st = flow_exact();
    const flow *f = &flow_out;
    pat produce = {"produce", FLOW, line_of(FLOW_PATH, "produce"), NULL};
    pat relay = {"relay", FLOW, line_of(FLOW_PATH, "relay"), NULL};
    pat consume = {"consume", FLOW, line_of(FLOW_PATH, "consume"), NULL};
    expect_objects("produce (yield from, for)", SUM(st, produce, relay, consume), f->gen_n, f->gen);
    long gl = line_of(FLOW_PATH, "genexpr");
    pat gx = {"<genexpr>", FLOW, gl, NULL};
    pat mod = {"<module>", FLOW, gl, NULL};
    expect_objects("<genexpr>", SUM(&flow_all, gx, mod), f->gen_n, f->gx);
}

/* At the default sampling rate (512 KiB), each thread's estimated bytes
 * are within 5 standard deviations of what it allocated. With sampling by
 * exponential byte intervals of mean m, each allocation of s bytes is
 * sampled on its own with p = 1 - exp(-s/m) and weighs s/p, so n of them
 * estimate n*s with variance n*s^2*(1-p)/p (about 6% of the answer here
 * for one thread: the bound is near 30%, for the three together near 17%). */
static void test_default_rate(void **state)
{
    (void)state;
    const char *argv[] = {PYTHON, script("tests/collector/wl_shape_flow.py"), "rate", NULL};
    tk_out r;
    flow f;
    /* An empty HEAPSTORE_SAMPLE_BYTES= would be a bad value: pass none. */
    parse_flow(&f, run_python(&r, argv, NULL, NULL));
    tk_out_free(&r);
    int64_t run = ended_run(f.pid, 0);
    assert_true(run_complete(run));
    const double m = 524288;
    assert_int_equal(tk_q(db, "SELECT sample_bytes FROM runs WHERE id = %lld", (long long)run),
                     (int64_t)m);
    stacks st;
    load_stacks(&st, run, "f.function LIKE 'thread__' AND f.file LIKE '%/wl_shape_flow.py'");
    static const char *const fns[] = {"thread_a", "thread_b", "thread_c"};
    unsigned long sizes[] = {f.a, f.b, f.c};
    pat boot = {"Thread._bootstrap", "threading.py", 0, NULL};
    double all_est = 0, all_true = 0, all_var = 0;
    for (int k = 0; k < 3; k++) {
        pat fn = {fns[k], FLOW, line_of(FLOW_PATH, fns[k]), NULL};
        total t = SUM(&st, fn, boot);
        double s = (double)sizes[k] + 1, p = 1 - exp(-s / m);
        double truth = (double)f.rate_n * s, var = (double)f.rate_n * s * s * (1 - p) / p;
        fprintf(stderr,
                "  %s: %lu samples (expected %.0f), estimate %lu of %.0f (%+.1f%%, bound "
                "%.1f%%)\n",
                fns[k], (unsigned long)t.n, f.rate_n * p, (unsigned long)t.weight, truth,
                100 * ((double)t.weight / truth - 1), 100 * 5 * sqrt(var) / truth);
        assert_true(fabs((double)t.weight - truth) <= 5 * sqrt(var));
        all_est += (double)t.weight;
        all_true += truth;
        all_var += var;
    }
    assert_true(fabs(all_est - all_true) <= 5 * sqrt(all_var));
    free_stacks(&st);
}

/* ---- C extensions ----------------------------------------------------------- */

#define CEXT      "wl_shape_cext.py"
#define CEXT_PATH script("tests/collector/" CEXT)

/* Allocations made inside zlib, json's C accelerator and sqlite3 show the
 * Python line that called them, above the C library's own frames. */
static void test_c_extensions(void **state)
{
    (void)state;
    const char *argv[] = {PYTHON, CEXT_PATH, NULL};
    tk_out r;
    int pid = 0;
    unsigned long k = 0, raw = 0, comp = 0, json_len = 0, strings = 0, blob = 0;
    assert_int_equal(sscanf(run_python(&r, argv, "HEAPSTORE_SAMPLE_BYTES=1", NULL),
                            "cext %d %lu %lu %lu %lu %lu %lu", &pid, &k, &raw, &comp, &json_len,
                            &strings, &blob),
                     7);
    tk_out_free(&r);
    int64_t run = ended_run(pid, 0);
    assert_true(run_complete(run));
    stacks st;
    load_stacks(&st, run,
                "(f.file LIKE '%/wl_shape_cext.py' AND f.function != '<module>') OR f.module "
                "LIKE '%/libz.so%' OR f.module LIKE '%/libsqlite3.so%'");
    const double kd = (double)k;

    /* zlib (zconf.h): deflate needs (1 << (windowBits + 2)) + (1 << (memLevel
     * + 9)) bytes, 256 KiB at the defaults, inflate 1 << windowBits (32 KiB),
     * each plus its state (under 8 KiB); every byte libz allocated is under
     * one of the two lines. */
    pat libz = {NULL, NULL, 0, "/libz.so"};
    pat compress = {"squeeze", CEXT, line_of(CEXT_PATH, "compress"), NULL};
    pat decompress = {"squeeze", CEXT, line_of(CEXT_PATH, "decompress"), NULL};
    total deflate = SUM(&st, libz, compress), inflate = SUM(&st, libz, decompress);
    expect_range("libz under zlib.compress's line", deflate, kd * 262144, kd * (262144 + 8192));
    expect_range("libz under zlib.decompress's line", inflate, kd * 32768, kd * (32768 + 8192));
    assert_int_equal(SUM(&st, libz).bytes, deflate.bytes + inflate.bytes);
    /* The output, built in blocks and joined (CPython's blocks output
     * buffer): at least once, at most three times its size. */
    expect_range("zlib.decompress's line", SUM(&st, decompress), kd * raw, 3 * kd * raw);

    /* json: the C encoder (_json) builds the text under dumps's line: its
     * pieces, then the text joined (at least once, at most three times its
     * length, ASCII); the C scanner makes the STRINGS characters of the
     * document's strings (plus their headers, under 1%) under loads's. */
    pat cjson = {NULL, NULL, 0, "/_json.cpython"};
    pat dumps = {"encode", CEXT, line_of(CEXT_PATH, "dumps"), NULL};
    pat loads = {"decode", CEXT, line_of(CEXT_PATH, "loads"), NULL};
    expect_range("_json under json.dumps's line", SUM(&st, cjson, dumps), (double)json_len,
                 3.0 * (double)json_len);
    expect_range("_json under json.loads's line", SUM(&st, cjson, loads), (double)strings,
                 1.01 * (double)strings);

    /* sqlite3: randomblob(BLOB) is BLOB bytes that libsqlite3 allocates
     * (plus its 8-byte header, rounded to 8; the statement adds a little,
     * under 64 KiB a query), which _sqlite3 copies into a bytes object (33
     * bytes of header). Everything libsqlite3 allocated is under query(),
     * which opens the connection, runs the queries and closes it, or under
     * the line that imported sqlite3 (the library's initialization). */
    pat libsqlite = {NULL, NULL, 0, "/libsqlite3.so"};
    pat csqlite = {NULL, NULL, 0, "/_sqlite3.cpython"};
    pat line = {"query", CEXT, line_of(CEXT_PATH, "sqlite"), NULL};
    pat fn = {"query", CEXT, 0, NULL};
    total in_lib = SUM(&st, libsqlite, line), copies = SUM(&st, csqlite, line);
    expect_range("libsqlite3 under the query's line", in_lib, kd * (double)blob,
                 kd * ((double)blob + 16 + 65536));
    copies.bytes -= in_lib.bytes; /* _sqlite3's own, not through libsqlite3 */
    expect_range("_sqlite3 (copies) under the query's line", copies, kd * (double)(blob + 33),
                 kd * ((double)(blob + 33) + 65536));
    pat import = {"<module>", CEXT, line_of(CEXT_PATH, "import_sqlite"), NULL};
    assert_int_equal(SUM(&st, libsqlite).bytes,
                     SUM(&st, libsqlite, fn).bytes + SUM(&st, libsqlite, import).bytes);
    free_stacks(&st);
}

/* ---- how python3 is started ------------------------------------------------- */

/* python3 -m wl_shape_mod: the module's own functions and lines, under
 * runpy's. */
static void test_dash_m(void **state)
{
    (void)state;
    const char *argv[] = {PYTHON, "-m", "wl_shape_mod", NULL};
    char pp[700];
    snprintf(pp, sizeof pp, "PYTHONPATH=%s", tk_source_path("tests/collector"));
    tk_out r;
    int pid = 0;
    unsigned long n = 0, size = 0;
    assert_int_equal(sscanf(run_python(&r, argv, "HEAPSTORE_SAMPLE_BYTES=1", pp), "mod %d %lu %lu",
                            &pid, &n, &size),
                     3);
    tk_out_free(&r);
    int64_t run = ended_run(pid, 0);
    assert_true(run_complete(run));
    stacks st;
    load_stacks(&st, run, "f.function = 'fill_mod'");
    const char *path = script("tests/collector/wl_shape_mod.py");
    pat fill = {"fill_mod", "/wl_shape_mod.py", line_of(path, "fill_mod"), NULL};
    pat call = {"<module>", "/wl_shape_mod.py", line_of(path, "mod_call"), NULL};
    /* runpy is frozen in 3.11: its file reads "<frozen runpy>". */
    pat runpy = {"_run_module_as_main", NULL, 0, NULL};
    expect_objects("fill_mod (python3 -m)", SUM(&st, fill, call, runpy), n, size);
    free_stacks(&st);
}

/* python3 -c CODE: the code's functions and lines, in file "<string>". */
static void test_dash_c(void **state)
{
    (void)state;
    const char *code = "import os\n"
                       "def fill_c(n):\n"
                       "    return [bytearray(90011) for _ in range(n)]\n"
                       "kept = fill_c(9)\n"
                       "print('dashc', os.getpid(), flush=True)\n";
    const char *argv[] = {PYTHON, "-c", code, NULL};
    tk_out r;
    int pid = 0;
    assert_int_equal(
        sscanf(run_python(&r, argv, "HEAPSTORE_SAMPLE_BYTES=1", NULL), "dashc %d", &pid), 1);
    tk_out_free(&r);
    int64_t run = ended_run(pid, 0);
    assert_true(run_complete(run));
    stacks st;
    load_stacks(&st, run, "f.function = 'fill_c'");
    /* 3.11 runs a list comprehension as a function of its own. */
    pat comp = {"fill_c.<locals>.<listcomp>", "<string>", 3, NULL};
    pat fill = {"fill_c", "<string>", 3, NULL};
    pat mod = {"<module>", "<string>", 4, NULL};
    expect_objects("fill_c (python3 -c)", SUM(&st, comp, fill, mod), 9, 90011);
    free_stacks(&st);
}

/* ---- child processes -------------------------------------------------------- */

#define PROCS      "wl_shape_procs.py"
#define PROCS_PATH script("tests/collector/" PROCS)

/* multiprocessing with fork and with spawn, a subprocess python3, and
 * os.fork children leaving through os._exit: each is a run of its own whose
 * parent is the script's run, ended clean with everything it counted
 * stored, and holds its own allocations under its own function. (spawn also
 * starts multiprocessing's resource tracker: one more child run.) */
static void test_children(void **state)
{
    (void)state;
    const char *argv[] = {PYTHON, PROCS_PATH, NULL};
    tk_out r;
    int pid = 0;
    unsigned long n, nf, sf, ns, ss, sc, nx, sx, failed;
    assert_int_equal(sscanf(run_python(&r, argv, "HEAPSTORE_SAMPLE_BYTES=1", NULL),
                            "procs %d %lu %lu %lu %lu %lu %lu %lu %lu %lu", &pid, &n, &nf, &sf, &ns,
                            &ss, &sc, &nx, &sx, &failed),
                     10);
    tk_out_free(&r);
    assert_int_equal(failed, 0);
    const int want_children = (int)(nf + ns + 1 + nx + 1);
    int64_t run = ended_run(pid, want_children);
    assert_true(run_complete(run));
    assert_int_equal(tk_q(db, "SELECT count(*) FROM runs WHERE parent_id = %lld", (long long)run),
                     want_children);

    static const struct {
        const char *fn, *mark;
        pat outer; /* a frame the child's stack must hold above fn */
    } kinds[] = {
        {"work_fork",
         "work_fork",
         {"BaseProcess._bootstrap", "multiprocessing/process.py", 0, NULL}},
        {"work_spawn", "work_spawn", {"spawn_main", "multiprocessing/spawn.py", 0, NULL}},
        {"work_child", "work_child", {"<module>", PROCS, 0, NULL}},
        {"work_exit", "work_exit", {"forked", PROCS, 0, NULL}},
    };
    unsigned long want[] = {nf, ns, 1, nx}, size[] = {sf, ss, sc, sx};
    int got[4] = {0}, tracker = 0;
    int64_t lo = tk_q(db, "SELECT min(id) FROM runs WHERE parent_id = %lld", (long long)run);
    int64_t hi = tk_q(db, "SELECT max(id) FROM runs WHERE parent_id = %lld", (long long)run);
    for (int64_t child = lo; child <= hi; child++) {
        if (tk_q(db, "SELECT count(*) FROM runs WHERE id = %lld AND parent_id = %lld",
                 (long long)child, (long long)run) != 1)
            continue;
        if (!run_complete(child)) fprintf(stderr, "child run %lld incomplete\n", (long long)child);
        assert_true(run_complete(child));
        stacks st;
        load_stacks(&st, child, "f.function LIKE 'work\\_%' ESCAPE '\\'");
        int kind = -1;
        for (int k = 0; k < 4; k++) {
            pat fn = {kinds[k].fn, PROCS, line_of(PROCS_PATH, kinds[k].mark), NULL};
            if (!SUM(&st, fn).stacks) continue;
            assert_int_equal(kind, -1); /* one kind a child */
            kind = k;
            char what[80];
            snprintf(what, sizeof what, "run %lld: %s", (long long)child, kinds[k].fn);
            expect_objects(what, SUM(&st, fn, kinds[k].outer), n, size[k]);
            got[k]++;
        }
        if (kind < 0) tracker++;
        free_stacks(&st);
    }
    fprintf(stderr, "children: fork %d, spawn %d, subprocess %d, os._exit %d, other %d\n", got[0],
            got[1], got[2], got[3], tracker);
    for (int k = 0; k < 4; k++) assert_int_equal(got[k], (int)want[k]);
    assert_int_equal(tracker, 1);
}

static int setup(void **state)
{
    (void)state;
    tk_tmpdir(dir, sizeof dir, "pyshapes");
    snprintf(db, sizeof db, "%s/hs.db", dir);
    return tk_server_start(&srv, db, 0, NULL);
}

static int teardown(void **state)
{
    (void)state;
    if (flow_run) {
        free_stacks(&flow_stacks); /* borrows flow_all's text */
        free_stacks(&flow_all);
    }
    return tk_server_stop(&srv, SIGTERM) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads),      cmocka_unit_test(test_coroutines),
        cmocka_unit_test(test_generators),   cmocka_unit_test(test_default_rate),
        cmocka_unit_test(test_c_extensions), cmocka_unit_test(test_dash_m),
        cmocka_unit_test(test_dash_c),       cmocka_unit_test(test_children),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

/* Integration tests of the collector: real C, C++ and python3 programs run
 * under the real libheapstore.so with file:// output (and a loopback server
 * stand-in for tcp://), and the stream they leave is decoded with the shared
 * decoder and compared with what the programs say they did. */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "hs_error.h"
#include "hs_proto.h"
#include "hs_testkit.h"
#include "hsp_model.h"

typedef struct site {
    char name[128];
    int line;
    unsigned long allocs, bytes, frees, freed;
} site;

/* Reads the "site NAME LINE ALLOCS BYTES FREES FREED" lines of a workload.
 * NAME may contain spaces (C++), so the numbers are taken from the end. */
static int parse_sites(const char *out, site *s, int max)
{
    int n = 0;
    const char *p = out;
    while (p && *p && n < max) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        char line[512];
        if (len < sizeof line && !strncmp(p, "site ", 5)) {
            memcpy(line, p, len);
            line[len] = 0;
            char *f[6];
            char *end = line + len;
            for (int i = 5; i >= 1; i--) {
                while (end > line && end[-1] != ' ') end--;
                f[i] = end;
                if (end > line) *--end = 0;
            }
            size_t nl = strlen(line + 5);
            if (nl >= sizeof s[n].name) nl = sizeof s[n].name - 1;
            memcpy(s[n].name, line + 5, nl);
            s[n].name[nl] = 0;
            s[n].line = atoi(f[1]);
            s[n].allocs = strtoul(f[2], NULL, 10);
            s[n].bytes = strtoul(f[3], NULL, 10);
            s[n].frees = strtoul(f[4], NULL, 10);
            s[n].freed = strtoul(f[5], NULL, 10);
            n++;
        }
        p = eol ? eol + 1 : NULL;
    }
    return n;
}

/* The size histogram is estimated from the samples (hs_sender.c): in each
 * power-of-two bucket, the bytes and the count of the sites whose blocks
 * fall in it, within the same 5% as the sites' own estimates (each bucket
 * holds at least one site, all of whose allocations it counts), plus what
 * the program allocates besides its sites (stdio's buffer: a few KiB). */
static void check_sizes(const hsp_model *m, const site *s, int n)
{
    uint64_t bytes[HS_SIZE_BUCKETS] = {0}, count[HS_SIZE_BUCKETS] = {0};
    for (int i = 0; i < n; i++) {
        unsigned b = hs_size_bucket_of(s[i].bytes / s[i].allocs);
        bytes[b] += s[i].bytes;
        count[b] += s[i].allocs;
    }
    const double extra = 64 << 10;
    for (int b = 0; b < HS_SIZE_BUCKETS; b++) {
        double est_b = (double)m->sizes_b[b], est_n = (double)m->sizes_n[b];
        if (!bytes[b]) {
            assert_true(est_b <= extra);
            continue;
        }
        fprintf(stderr, "sizes [%llu, %llu): bytes %llu est %.0f, count %llu est %.0f\n", 1ull << b,
                2ull << b, (unsigned long long)bytes[b], est_b, (unsigned long long)count[b],
                est_n);
        assert_true(fabs(est_b - (double)bytes[b]) <= 0.05 * (double)bytes[b] + extra);
        assert_true(fabs(est_n - (double)count[b]) <= 0.05 * (double)count[b] + extra / 16);
    }
}

typedef struct agg {
    uint64_t allocs, alloc_bytes, alloc_weight, frees, free_bytes, free_weight;
    int exact, stacks, line_ok, file_ok;
} agg;

/* Sums every stack whose frame `frame` (or, with frame < 0, any of the first
 * three frames) is the function name; checks that frame's line. */
static agg aggregate(const hsp_model *m, const char *fn, int line, const char *file_suffix)
{
    agg a = {.exact = 1, .line_ok = 1, .file_ok = 1};
    for (size_t i = 0; i < m->nstacks; i++) {
        const hsp_stack *s = &m->stacks[i];
        int at = -1;
        for (uint32_t k = 0; k < s->depth && k < 3; k++)
            if (!strcmp(hsp_frame_fn(m, s, k), fn)) {
                at = (int)k;
                break;
            }
        if (at < 0) continue;
        /* A stack whose site is a caller further up (frame > 0) only counts
         * when everything below it belongs to the allocator (C++ new). */
        if (at > 0 && !strstr(hsp_frame_fn(m, s, 0), "operator new")) continue;
        const hsp_sym *y = hsp_sym_of(m, s->pcs[at]);
        if (line && y->line != (uint64_t)line) a.line_ok = 0;
        size_t fl = strlen(y->file), sl = strlen(file_suffix);
        if (fl < sl || strcmp(y->file + fl - sl, file_suffix)) a.file_ok = 0;
        a.stacks++;
        a.allocs += s->allocs;
        a.alloc_bytes += s->alloc_bytes;
        a.alloc_weight += s->alloc_weight;
        a.frees += s->frees;
        a.free_bytes += s->free_bytes;
        a.free_weight += s->free_weight;
        a.exact &= s->exact_weights;
    }
    return a;
}

static const char *tmpfile_path(const char *name)
{
    static char buf[8][512];
    static int k;
    char *b = buf[k++ % 8];
    snprintf(b, sizeof buf[0], "%s/%s", tk_scratch_dir(), name);
    return b;
}

static void load_ok(hsp_model *m, const char *path, uint64_t watch)
{
    assert_int_equal(hsp_load(m, path, watch), 0);
    if (m->error[0]) fprintf(stderr, "%s: %s\n", path, m->error);
    assert_string_equal(m->error, "");
    assert_true(m->has_hello);
    assert_true(m->has_bye);
    assert_true(m->bye.flags & HS_BYE_CLEAN);
}

/* ---- C workload, every allocation recorded ---- */

static void test_sites_exact(void **state)
{
    (void)state;
    const char *out = tmpfile_path("exact.hsp");
    const char *argv[] = {tk_build_path("tests/wl_sites"), "10", NULL};
    const char *env[] = {"HEAPSTORE_SAMPLE_BYTES=1", tk_env("HEAPSTORE_URL=file://%s", out),
                         "HEAPSTORE_LABELS=test=exact,suite=collector", NULL};
    tk_out r;
    tk_run(&r, argv, env, 1, 120);
    tk_expect_ok(&r);
    site s[32];
    int n = parse_sites(r.out, s, 32);
    assert_int_equal(n, 12);
    hsp_model m;
    load_ok(&m, out, 0);
    assert_int_equal(m.hello.sample_bytes, 1);
    assert_int_equal(m.hello.nlabels, 2);
    assert_true(m.hello.labels[0].key.len == 4 && !memcmp(m.hello.labels[0].key.ptr, "test", 4));
    for (int k = 1; k <= HS_DROP_KIND_MAX; k++)
        if (k != HS_DROP_STACKS_TRUNCATED && m.drops[k])
            fprintf(stderr, "drops of kind %d: %llu\n%s", k, (unsigned long long)m.drops[k], r.err);
    for (int k = 1; k <= HS_DROP_KIND_MAX; k++)
        if (k != HS_DROP_STACKS_TRUNCATED) assert_int_equal(m.drops[k], 0);
    for (int i = 0; i < n; i++) {
        agg a = aggregate(&m, s[i].name, s[i].line, "wl_sites.c");
        if (a.allocs != s[i].allocs || a.alloc_bytes != s[i].bytes || a.frees != s[i].frees ||
            a.free_bytes != s[i].freed || !a.line_ok)
            fprintf(stderr,
                    "%s: allocs %lu/%lu bytes %lu/%lu frees %lu/%lu freed %lu/%lu line_ok %d\n",
                    s[i].name, (unsigned long)a.allocs, s[i].allocs, (unsigned long)a.alloc_bytes,
                    s[i].bytes, (unsigned long)a.frees, s[i].frees, (unsigned long)a.free_bytes,
                    s[i].freed, a.line_ok);
        assert_int_equal(a.allocs, s[i].allocs);
        assert_int_equal(a.alloc_bytes, s[i].bytes);
        assert_int_equal(a.frees, s[i].frees);
        assert_int_equal(a.free_bytes, s[i].freed);
        assert_true(a.exact);          /* weight == size at rate 1 */
        assert_true(a.line_ok);        /* the allocation call's line */
        assert_true(a.file_ok);        /* ... in wl_sites.c */
        assert_int_equal(a.stacks, 1); /* one loop, one stack */
        assert_true(a.alloc_weight == a.alloc_bytes && a.free_weight == a.free_bytes);
    }
    /* At every allocation the size histogram is exact: every sample in its
     * bucket, with its own size. */
    uint64_t hist = 0;
    for (int b = 0; b < 64; b++) hist += m.sizes_n[b];
    assert_int_equal(hist, m.alloc_events);
    check_sizes(&m, s, n);
    assert_true(m.process_samples >= 1);
    assert_true(m.mapping_frames >= 1);
    hsp_free(&m);
    tk_out_free(&r);
}

/* ---- C workload, sampled ---- */

/* Relative standard deviation of a site's estimate: blocks of size s, total
 * bytes T, mean interval u: sqrt((u/T) * x/(e^x - 1)) with x = s/u. */
static double rel_sd(double size, double total, double mean)
{
    double x = size / mean;
    return sqrt((mean / total) * (x / expm1(x)));
}

/* Each site's estimated allocated bytes, and its estimated leaked bytes
 * (allocated minus freed weights) when it leaks at least 100x the interval,
 * within 5% of the truth; a site that frees everything must be estimated at
 * exactly 0 live. Returns the number of sites checked. */
static int check_sampled(const hsp_model *m, const site *s, int n, double mean, const char *file)
{
    int checked = 0;
    for (int i = 0; i < n; i++) {
        agg a = aggregate(m, s[i].name, s[i].line, file);
        double size = (double)s[i].bytes / (double)s[i].allocs;
        double est = (double)a.alloc_weight, truth = (double)s[i].bytes;
        double live_est = (double)a.alloc_weight - (double)a.free_weight;
        double live = (double)(s[i].bytes - s[i].freed);
        fprintf(
            stderr,
            "%-34s allocated %10.0f est %10.0f (%+.2f%%, sd %.2f%%)  leaked %10.0f est %10.0f\n",
            s[i].name, truth, est, 100 * (est - truth) / truth, 100 * rel_sd(size, truth, mean),
            live, live_est);
        assert_true(a.line_ok);
        assert_true(a.file_ok);
        /* Every site here carries at least 100x the interval, and the
         * workloads are sized so that 5% is at least three standard
         * deviations of the estimate (rel_sd). */
        assert_true(truth >= 100 * mean);
        assert_true(rel_sd(size, truth, mean) <= 0.05 / 3);
        assert_true(fabs(est - truth) <= 0.05 * truth);
        if (live >= 100 * mean) {
            assert_true(rel_sd(size, live, mean) <= 0.05 / 3);
            assert_true(fabs(live_est - live) <= 0.05 * live);
        } else {
            /* Nothing leaked: every sampled block's free was seen. */
            assert_true(live == 0);
            assert_true(live_est == 0);
        }
        checked++;
    }
    return checked;
}

static void test_sites_sampled(void **state)
{
    (void)state;
    const double mean = 1024;
    const char *out = tmpfile_path("sampled.hsp");
    const char *argv[] = {tk_build_path("tests/wl_sites"), "1", NULL};
    const char *env[] = {"HEAPSTORE_SAMPLE_BYTES=1024", "HEAPSTORE_SEED=20261123",
                         tk_env("HEAPSTORE_URL=file://%s", out), NULL};
    tk_out r;
    tk_run(&r, argv, env, 1, 300);
    tk_expect_ok(&r);
    site s[32];
    int n = parse_sites(r.out, s, 32);
    assert_int_equal(n, 12);
    hsp_model m;
    load_ok(&m, out, 0);
    assert_int_equal(m.hello.sample_bytes, 1024);
    assert_int_equal(check_sampled(&m, s, n, mean, "wl_sites.c"), 12);
    check_sizes(&m, s, n);
    hsp_free(&m);
    tk_out_free(&r);
}

/* The default interval (512 KiB, no HEAPSTORE_SAMPLE_BYTES) on sites of
 * blocks large enough to carry 100x it within seconds. */
static void test_sites_default_rate(void **state)
{
    (void)state;
    const char *out = tmpfile_path("default.hsp");
    const char *argv[] = {tk_build_path("tests/wl_sites"), "1", "big", NULL};
    const char *env[] = {"HEAPSTORE_SEED=11", tk_env("HEAPSTORE_URL=file://%s", out), NULL};
    tk_out r;
    tk_run(&r, argv, env, 1, 300);
    tk_expect_ok(&r);
    site s[4];
    int n = parse_sites(r.out, s, 4);
    assert_int_equal(n, 2);
    hsp_model m;
    load_ok(&m, out, 0);
    assert_int_equal(m.hello.sample_bytes, 524288);
    assert_int_equal(check_sampled(&m, s, n, 524288, "wl_sites.c"), 2);
    hsp_free(&m);
    tk_out_free(&r);
}

/* ---- C++ ---- */

static void test_cxx_exact(void **state)
{
    (void)state;
    const char *out = tmpfile_path("cxx.hsp");
    const char *argv[] = {tk_build_path("tests/wl_cxx"), "4", NULL};
    const char *env[] = {"HEAPSTORE_SAMPLE_BYTES=1", tk_env("HEAPSTORE_URL=file://%s", out), NULL};
    tk_out r;
    tk_run(&r, argv, env, 1, 120);
    tk_expect_ok(&r);
    site s[8];
    int n = parse_sites(r.out, s, 8);
    assert_int_equal(n, 3);
    hsp_model m;
    load_ok(&m, out, 0);
    for (int i = 0; i < n; i++) {
        agg a = aggregate(&m, s[i].name, s[i].line, "wl_cxx.cpp");
        if (a.allocs != s[i].allocs || !a.line_ok)
            fprintf(stderr, "%s: allocs %lu/%lu frees %lu/%lu stacks %d line_ok %d\n", s[i].name,
                    (unsigned long)a.allocs, s[i].allocs, (unsigned long)a.frees, s[i].frees,
                    a.stacks, a.line_ok);
        assert_int_equal(a.stacks, 1);
        assert_int_equal(a.allocs, s[i].allocs);
        assert_int_equal(a.alloc_bytes, s[i].bytes);
        assert_int_equal(a.frees, s[i].frees);
        assert_int_equal(a.free_bytes, s[i].freed);
        assert_true(a.line_ok);
        assert_true(a.file_ok);
    }
    hsp_free(&m);
    tk_out_free(&r);
}

static void test_cxx_sampled(void **state)
{
    (void)state;
    const char *out = tmpfile_path("cxx-sampled.hsp");
    const char *argv[] = {tk_build_path("tests/wl_cxx"), "1", "10", NULL};
    const char *env[] = {"HEAPSTORE_SAMPLE_BYTES=1024", "HEAPSTORE_SEED=99",
                         tk_env("HEAPSTORE_URL=file://%s", out), NULL};
    tk_out r;
    tk_run(&r, argv, env, 1, 300);
    tk_expect_ok(&r);
    site s[8];
    int n = parse_sites(r.out, s, 8);
    assert_int_equal(n, 3);
    hsp_model m;
    load_ok(&m, out, 0);
    assert_int_equal(check_sampled(&m, s, n, 1024, "wl_cxx.cpp"), 3);
    hsp_free(&m);
    tk_out_free(&r);
}

/* ---- python3 ---- */

static void test_python(void **state)
{
    (void)state;
    const char *out = tmpfile_path("py.hsp");
    const char *out2 = tmpfile_path("py-sampled.hsp");
    const char *script = tk_source_path("tests/collector/wl_py.py");
    /* The interpreter itself, not a wrapper script that execs it (an exec'd
     * program is a new run, written to PATH.<pid>). */
    const char *py = access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
    const char *argv[] = {py, script, "300", NULL};
    const char *env[] = {"HEAPSTORE_SAMPLE_BYTES=1", tk_env("HEAPSTORE_URL=file://%s", out), NULL};
    tk_out r;
    tk_run(&r, argv, env, 1, 120);
    tk_expect_ok(&r);
    unsigned long n = 0, size = 0, dropped = 0;
    assert_int_equal(sscanf(r.out, "py %lu %lu %lu", &n, &size, &dropped), 3);
    hsp_model m;
    load_ok(&m, out, size + 1);
    /* Every bytearray: n kept to the end, `dropped` freed at once; the
     * interpreter frees the kept ones too while it finalizes. */
    assert_int_equal(m.watch_allocs, n + dropped);
    assert_true(m.watch_frees >= dropped && m.watch_frees <= m.watch_allocs);
    assert_true(m.watch_alloc_weight == m.watch_allocs * (size + 1));
    /* The interpreter's bytecode loop gives way to the script's own frames
     * (test_python.c checks them in detail); every native pc has its module
     * and offset, every Python one its file and line. */
    int script_frames = 0;
    for (size_t i = 0; i < m.nsyms; i++) {
        if (m.syms[i].module[0] == 0) {
            assert_true(m.syms[i].file[0] != 0 && m.syms[i].line > 0);
            script_frames += strstr(m.syms[i].file, "wl_py.py") != NULL;
        }
    }
    assert_true(script_frames > 0);
    hsp_free(&m);
    tk_out_free(&r);

    /* Sampled: the bytes of the bytearrays within 5%. */
    const char *argv2[] = {py, script, "1000", NULL};
    const char *env2[] = {"HEAPSTORE_SAMPLE_BYTES=32768", "HEAPSTORE_SEED=7",
                          tk_env("HEAPSTORE_URL=file://%s", out2), NULL};
    tk_run(&r, argv2, env2, 1, 120);
    tk_expect_ok(&r);
    assert_int_equal(sscanf(r.out, "py %lu %lu %lu", &n, &size, &dropped), 3);
    load_ok(&m, out2, size + 1);
    double truth = (double)(n + dropped) * (double)(size + 1);
    double est = (double)m.watch_alloc_weight;
    fprintf(stderr, "python bytearrays %.0f bytes, estimated %.0f (%+.2f%%)\n", truth, est,
            100 * (est - truth) / truth);
    assert_true(fabs(est - truth) <= 0.05 * truth);
    hsp_free(&m);
    tk_out_free(&r);
}

/* ---- our unwinder against libunwind ---- */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* 1 if a frame of s is in the module named prog (a basename) or is a
 * Python frame: a stack of the program's own, not one of a runtime's
 * threads before their start routine (the sanitizer runtime allocates on
 * the collector's sender thread before the thread is the collector's, and
 * whether those few blocks are sampled depends on timing). */
static int programs_stack(const hsp_model *m, const hsp_stack *s, const char *prog)
{
    for (uint32_t k = 0; k < s->depth; k++) {
        const hsp_sym *y = hsp_sym_of(m, s->pcs[k]);
        if (!y) continue;
        const char *mod = strrchr(y->module, '/');
        if (!y->module[0] || !strcmp(mod ? mod + 1 : y->module, prog)) return 1;
    }
    return 0;
}

/* Every stack of the program (prog: its module's basename) that allocated,
 * as "ALLOCS BYTES|module+offset;..." (the same code in both runs whatever
 * the address layout), sorted; *allocs: their allocations. */
static char **stack_lines(const hsp_model *m, size_t *n_out, uint64_t *allocs, const char *prog)
{
    char **v = calloc(m->nstacks + 1, sizeof *v);
    size_t n = 0;
    *allocs = 0;
    for (size_t i = 0; i < m->nstacks; i++) {
        const hsp_stack *s = &m->stacks[i];
        if (!s->allocs || !programs_stack(m, s, prog)) continue;
        *allocs += s->allocs;
        size_t cap = 64 + (size_t)s->depth * 300, len = 0;
        char *b = malloc(cap);
        len += (size_t)snprintf(b, cap, "%lu %lu|", (unsigned long)s->allocs,
                                (unsigned long)s->alloc_bytes);
        for (uint32_t k = 0; k < s->depth; k++) {
            const hsp_sym *y = hsp_sym_of(m, s->pcs[k]);
            const char *mod = y && y->module ? strrchr(y->module, '/') : NULL;
            if (y && !y->module[0]) /* a Python frame */
                len += (size_t)snprintf(b + len, cap - len, "%.80s@%lu;", y->function,
                                        (unsigned long)y->line);
            else
                len += (size_t)snprintf(b + len, cap - len, "%s+%lx;", mod ? mod + 1 : "?",
                                        y ? (unsigned long)y->module_offset : 0ul);
        }
        v[n++] = b;
    }
    qsort(v, n, sizeof *v, cmp_str);
    *n_out = n;
    return v;
}

/* One deterministic program at rate 1 under HEAPSTORE_UNWIND=first and
 * =libunwind: no stack is lost (no unwind_failed; with "own", ours walks
 * every stack itself, none handed to libunwind) and both record the same
 * stacks with the same counts. */
static void unwinders_agree_with(const char *name, const char *const *argv, const char *first)
{
    hsp_model m[2];
    const char *mode[2] = {first, "libunwind"};
    for (int k = 0; k < 2; k++) {
        const char *out = tmpfile_path(tk_env("unw-%s-%s.hsp", name, mode[k]));
        /* PYTHONMALLOC set: the collector leaves pymalloc unwrapped, so
         * Python's small objects, whose number varies from run to run with
         * addresses (id-keyed sets and dicts), are not compared. */
        const char *env[] = {"HEAPSTORE_SAMPLE_BYTES=1",
                             tk_env("HEAPSTORE_UNWIND=%s", mode[k]),
                             tk_env("HEAPSTORE_URL=file://%s", out),
                             "PYTHONHASHSEED=0",
                             "PYTHONMALLOC=pymalloc",
                             NULL};
        tk_out r;
        tk_run(&r, argv, env, 1, 120);
        tk_expect_ok(&r);
        tk_out_free(&r);
        load_ok(&m[k], out, 0);
        assert_int_equal(m[k].drops[HS_DROP_UNWIND_FAILED], 0);
    }
    size_t n0, n1;
    char real[PATH_MAX];
    if (!realpath(argv[0], real)) snprintf(real, sizeof real, "%s", argv[0]);
    const char *prog = strrchr(real, '/') ? strrchr(real, '/') + 1 : real;
    uint64_t all0, all1;
    char **a = stack_lines(&m[0], &n0, &all0, prog), **b = stack_lines(&m[1], &n1, &all1, prog);
    size_t diff = n0 > n1 ? n0 - n1 : n1 - n0;
    for (size_t i = 0; i < n0 && i < n1; i++) {
        if (strcmp(a[i], b[i]) == 0) continue;
        if (diff++ < 3)
            fprintf(stderr, "%s: %s %s\n%s: libunwind %s\n", name, first, a[i], name, b[i]);
    }
    fprintf(stderr, "%s: %zu stacks (%s), %zu (libunwind), %zu differ; %lu allocations\n", name, n0,
            first, n1, diff, (unsigned long)all0);
    assert_true(n0 > 0);
    assert_int_equal(diff, 0);
    assert_int_equal(all0, all1);
    /* What is left out is a few blocks of a runtime's, not the program's. */
    assert_true(m[0].alloc_events - all0 <= 16 && m[1].alloc_events - all1 <= 16);
    for (size_t i = 0; i < n0; i++) free(a[i]);
    for (size_t i = 0; i < n1; i++) free(b[i]);
    free(a);
    free(b);
    hsp_free(&m[0]);
    hsp_free(&m[1]);
}

static void unwinders_agree(const char *name, const char *const *argv)
{
    unwinders_agree_with(name, argv, "own");
}

static void test_unwinders_agree(void **state)
{
    (void)state;
    const char *sites[] = {tk_build_path("tests/wl_sites"), "3", NULL};
    unwinders_agree("sites", sites);
    const char *cxx[] = {tk_build_path("tests/wl_cxx"), "4", NULL};
    unwinders_agree("cxx", cxx);
    const char *py = access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
    const char *pyv[] = {py, tk_source_path("tests/collector/wl_py.py"), "300", NULL};
    unwinders_agree("python", pyv);
}

/* ---- heapstore dump ---- */

/* `heapstore dump` of the stream file out cut in the middle, and with a
 * corrupt frame type right after HELLO: what decoded, then the offset,
 * exit 1. */
static void dump_damaged(const char *cli, const char *out)
{
    tk_out r;
    FILE *f = fopen(out, "rb");
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)len);
    assert_int_equal(fread(buf, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    const char *cut = tmpfile_path("cut.hsp");
    f = fopen(cut, "wb");
    fwrite(buf, 1, (size_t)len / 2, f);
    fclose(f);
    const char *d3[] = {cli, "dump", cut, NULL};
    tk_run(&r, d3, NULL, 0, 60);
    assert_true(r.exited && r.status == 1);
    assert_non_null(strstr(r.err, "truncated frame at byte offset "));
    assert_non_null(strstr(r.out, " HELLO "));
    assert_non_null(strstr(r.out, "totals:"));
    tk_out_free(&r);

    /* A corrupt frame type right after HELLO. */
    hsp_model m;
    load_ok(&m, out, 0);
    size_t hello_end = 9 + 1 + 4 + 0;
    {
        hs_frame fr;
        long k = hs_frame_split((const uint8_t *)buf + 9, (size_t)len - 9, &fr);
        assert_true(k > 0);
        hello_end = 9 + (size_t)k;
    }
    hsp_free(&m);
    buf[hello_end] = 0x7e;
    const char *bad = tmpfile_path("bad.hsp");
    f = fopen(bad, "wb");
    fwrite(buf, 1, (size_t)len, f);
    fclose(f);
    const char *d4[] = {cli, "dump", bad, "--json", NULL};
    tk_run(&r, d4, NULL, 0, 60);
    assert_true(r.exited && r.status == 1);
    char want[64];
    snprintf(want, sizeof want, "byte offset %zu", hello_end);
    assert_non_null(strstr(r.err, want));
    assert_non_null(strstr(r.out, "\"type\":\"HELLO\""));
    tk_out_free(&r);
    free(buf);
}

static void test_dump(void **state)
{
    (void)state;
    const char *out = tmpfile_path("dump.hsp");
    const char *argv[] = {tk_build_path("tests/wl_sites"), "100", NULL};
    const char *env[] = {"HEAPSTORE_SAMPLE_BYTES=1", tk_env("HEAPSTORE_URL=file://%s", out), NULL};
    tk_out r;
    tk_run(&r, argv, env, 1, 120);
    tk_expect_ok(&r);
    tk_out_free(&r);

    const char *cli = tk_build_path("bin/heapstore");
    const char *d1[] = {cli, "dump", out, NULL};
    tk_run(&r, d1, NULL, 0, 60);
    tk_expect_ok(&r);
    assert_non_null(strstr(r.out, " HELLO "));
    assert_non_null(strstr(r.out, "function=\"site_small\""));
    const char *last = strstr(r.out, "\ntotals:");
    assert_non_null(last);
    assert_non_null(strstr(last, "BYE=1"));
    tk_out_free(&r);

    const char *d2[] = {cli, "dump", out, "--json", NULL};
    tk_run(&r, d2, NULL, 0, 60);
    tk_expect_ok(&r);
    int lines = 0;
    for (const char *p = r.out; *p; p = strchr(p, '\n') + 1) {
        assert_true(*p == '{');
        lines++;
        if (!strchr(p, '\n')) break;
    }
    assert_true(lines > 5);
    assert_non_null(strstr(r.out, "{\"totals\":{\"HELLO\":{\"frames\":1"));
    assert_non_null(strstr(r.out, "\"type\":\"EVENTS\""));
    tk_out_free(&r);

    dump_damaged(cli, out);
}

/* ---- source lines and separate debug files (HEAPSTORE_LINES) ---- */

/* The symbol of the innermost frame named fn, or NULL. */
static const hsp_sym *site_sym(const hsp_model *m, const char *fn)
{
    for (size_t i = 0; i < m->nstacks; i++)
        if (m->stacks[i].depth && !strcmp(hsp_frame_fn(m, &m->stacks[i], 0), fn))
            return hsp_sym_of(m, m->stacks[i].pcs[0]);
    return NULL;
}

/* libwl_split.so keeps its DWARF in a separate compressed file (found
 * through .gnu_debuglink). The collector sends modules and offsets only
 * (HEAPSTORE_LINES, which chose what it read, changes nothing now); names
 * and lines come from the server's reading of the files, the separate
 * compressed one included. Counts are exact. */
static void test_lines_policy(void **state)
{
    (void)state;
    static const struct {
        const char *env;
        int split_line, main_line;
    } cases[] = {
        {"HEAPSTORE_LINES=auto", 1, 1},
        {"HEAPSTORE_LINES=none", 1, 1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const char *out = tmpfile_path("lines.hsp");
        unlink(out);
        const char *argv[] = {tk_build_path("tests/wl_split"), "50", NULL};
        const char *env[] = {"HEAPSTORE_SAMPLE_BYTES=1", tk_env("HEAPSTORE_URL=file://%s", out),
                             cases[c].env, NULL};
        tk_out r;
        tk_run(&r, argv, env, 1, 120);
        tk_expect_ok(&r);
        site s[4];
        assert_int_equal(parse_sites(r.out, s, 4), 2);
        hsp_model m;
        load_ok(&m, out, 0);
        assert_int_equal(m.native_named, 0); /* nothing named in the process */
        for (int i = 0; i < 2; i++) {
            int want_line = i == 0 ? cases[c].split_line : cases[c].main_line;
            const char *file = i == 0 ? "wl_split_lib.c" : "wl_split.c";
            agg a = aggregate(&m, s[i].name, want_line ? s[i].line : 0, want_line ? file : "");
            const hsp_sym *y = site_sym(&m, s[i].name);
            fprintf(stderr, "%s: %s at %s:%llu, %llu allocations\n", cases[c].env, s[i].name,
                    y ? y->file : "?", y ? (unsigned long long)y->line : 0ull,
                    (unsigned long long)a.allocs);
            assert_non_null(y); /* the name resolved (for split_site: from the debug file) */
            assert_int_equal(a.allocs, s[i].allocs);
            assert_int_equal(a.alloc_bytes, s[i].bytes);
            assert_true(a.line_ok && a.file_ok);
            if (!want_line) {
                assert_int_equal(y->line, 0);
                assert_string_equal(y->file, "");
            }
        }
        hsp_free(&m);
        tk_out_free(&r);
    }
}

/* Functions inlined at a pc (DWARF's inlined subroutines) are frames of
 * their own, each under a synthetic pc (0xfe << 56 | k << 48 | pc) that the
 * reader of the stream (server, import, dump: server/hs_symbols.h) defines
 * and puts before the pc in the stack: grab at its malloc line, fill at
 * the line that calls grab, holder at the line that calls fill. The
 * collector sends none of them. */
static void test_inlined_frames(void **state)
{
    (void)state;
    for (int lines = 1; lines >= 1; lines--) {
        const char *out = tmpfile_path("inline.hsp");
        unlink(out);
        const char *argv[] = {tk_build_path("tests/wl_inline"), NULL};
        const char *env[] = {"HEAPSTORE_SAMPLE_BYTES=1", tk_env("HEAPSTORE_URL=file://%s", out),
                             lines ? "HEAPSTORE_LINES=auto" : "HEAPSTORE_LINES=none", NULL};
        tk_out r;
        tk_run(&r, argv, env, 1, 120);
        tk_expect_ok(&r);
        char fn[3][32];
        int line[3];
        const char *p = r.out;
        for (int i = 0; i < 3; i++) {
            assert_non_null(p = strstr(p, "inline "));
            assert_int_equal(sscanf(p, "inline %31s %d", fn[i], &line[i]), 2);
            p++;
        }
        hsp_model m;
        load_ok(&m, out, 0);
        uint64_t found = 0, synthetic = 0;
        for (size_t i = 0; i < m.nstacks; i++) {
            const hsp_stack *st = &m.stacks[i];
            for (uint32_t k = 0; k < st->depth; k++) synthetic += (st->pcs[k] >> 56) == 0xfe;
            for (uint32_t k = 0; k + 2 < st->depth; k++) {
                if (strcmp(hsp_frame_fn(&m, st, k), "grab")) continue;
                int ok = 1;
                for (int j = 0; j < 3; j++) {
                    const hsp_sym *y = hsp_sym_of(&m, st->pcs[k + (uint32_t)j]);
                    const char *f = y ? y->file : "";
                    size_t fl = strlen(f);
                    ok &= y && !strcmp(y->function, fn[j]) && (int)y->line == line[j] && fl >= 11 &&
                          !strcmp(f + fl - 11, "wl_inline.c");
                    /* the inlined ones synthetic, the holder the real pc */
                    ok &= ((st->pcs[k + (uint32_t)j] >> 56) == 0xfe) == (j < 2);
                }
                if (ok) found += st->allocs;
            }
        }
        fprintf(stderr,
                "HEAPSTORE_LINES=%s: %llu allocations under grab <- fill <- holder, %llu "
                "synthetic pcs in stacks\n",
                lines ? "auto" : "none", (unsigned long long)found, (unsigned long long)synthetic);
        assert_int_equal(found, 64);
        assert_int_equal(m.native_named, 0);
        hsp_free(&m);
        tk_out_free(&r);
    }
}

/* What the collector maps into a process (a real `cat /proc/self/maps`
 * under it): with HEAPSTORE_DISABLE=1, HEAPSTORE_UNWIND=own, or the default
 * unwinder on stacks ours walks, neither libunwind nor the liblzma it needs
 * (loaded only for a stack that needs it: test_unwinder_on_demand); never
 * libm; with HEAPSTORE_UNWIND=libunwind, libunwind. */
static void test_libraries_mapped(void **state)
{
    (void)state;
    const char *out = tmpfile_path("maps.hsp");
    const char *url = tk_env("HEAPSTORE_URL=file://%s", out);
    struct {
        const char *env[3];
        int unwind_expected;
    } c[] = {
        {{"HEAPSTORE_DISABLE=1", NULL}, 0},
        {{url, "HEAPSTORE_UNWIND=own", NULL}, 0},
        {{url, NULL}, 0},
        {{url, "HEAPSTORE_UNWIND=libunwind", NULL}, 1},
    };
    const char *argv[] = {"/bin/cat", "/proc/self/maps", NULL};
    for (size_t k = 0; k < HS_COUNTOF(c); k++) {
        tk_out r;
        tk_run(&r, argv, c[k].env, 1, 60);
        tk_expect_ok(&r);
        assert_non_null(strstr(r.out, "libheapstore.so"));
        int unw = strstr(r.out, "/libunwind.so") != NULL;
        /* (A sanitized tree preloads the sanitizer's runtime, which maps
         * libm itself.) */
        int libm = strstr(r.out, "/libm.so") && !strstr(r.out, "/libasan.so");
        int lzma = strstr(r.out, "/liblzma.so") != NULL;
        if (unw != c[k].unwind_expected || libm || (!c[k].unwind_expected && lzma))
            fprintf(stderr, "case %zu (%s):\n%s", k, c[k].env[0], r.out);
        assert_int_equal(unw, c[k].unwind_expected);
        assert_false(libm);
        if (!c[k].unwind_expected) assert_false(lzma);
        tk_out_free(&r);
    }
}

/* Debug information is looked up on this machine only. With DEBUGINFOD_URLS
 * naming a listening server, a library whose separate debug file is missing
 * (a copy of libwl_split.so without its .debug) makes no connection, where
 * libdwfl's standard search would ask the server. */
static void test_no_debuginfod(void **state)
{
    (void)state;
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(lfd, 16), 0);
    socklen_t al = sizeof a;
    getsockname(lfd, (struct sockaddr *)&a, &al);

    const char *dir = tmpfile_path("nodebug");
    mkdir(dir, 0755);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s/'", tk_build_path("tests/libwl_split.so"), dir);
    assert_int_equal(system(cmd), 0);

    const char *out = tmpfile_path("nodebug.hsp");
    const char *argv[] = {tk_build_path("tests/wl_split"), "20", NULL};
    const char *env[] = {"HEAPSTORE_SAMPLE_BYTES=1",
                         tk_env("HEAPSTORE_URL=file://%s", out),
                         tk_env("LD_LIBRARY_PATH=%s", dir),
                         tk_env("DEBUGINFOD_URLS=http://127.0.0.1:%d", ntohs(a.sin_port)),
                         "DEBUGINFOD_TIMEOUT=5",
                         "HEAPSTORE_LINES=all",
                         NULL};
    tk_out r;
    tk_run(&r, argv, env, 1, 120);
    tk_expect_ok(&r);
    hsp_model m;
    load_ok(&m, out, 0);
    /* The copy was the one loaded, and its frames were symbolized (to
     * nothing: its only symbol table is the dynamic one). */
    int copy_seen = 0;
    for (size_t i = 0; i < m.nsyms; i++)
        copy_seen |= strncmp(m.syms[i].module, dir, strlen(dir)) == 0;
    assert_true(copy_seen);
    int c = accept(lfd, NULL, NULL);
    if (c >= 0) fprintf(stderr, "the collector connected to DEBUGINFOD_URLS\n");
    assert_true(c < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
    close(lfd);
    hsp_free(&m);
    tk_out_free(&r);
}

/* ---- life of a process ---- */

static void test_underscore_exit(void **state)
{
    (void)state;
    const char *out = tmpfile_path("uexit.hsp");
    const char *argv[] = {tk_build_path("tests/wl_sites"), "100", "_exit", NULL};
    const char *env[] = {"HEAPSTORE_SAMPLE_BYTES=1", tk_env("HEAPSTORE_URL=file://%s", out), NULL};
    tk_out r;
    tk_run(&r, argv, env, 1, 60);
    tk_expect_ok(&r);
    /* _exit runs no exit handlers, but the collector ends the run as exit
     * does: every site complete, then BYE. */
    site s[32];
    int n = parse_sites(r.out, s, 32);
    assert_int_equal(n, 12);
    hsp_model m;
    load_ok(&m, out, 0);
    assert_int_equal(m.bye.flags, HS_BYE_CLEAN);
    for (int i = 0; i < n; i++) {
        agg a = aggregate(&m, s[i].name, s[i].line, "wl_sites.c");
        assert_int_equal(a.allocs, s[i].allocs);
        assert_int_equal(a.alloc_bytes, s[i].bytes);
        assert_int_equal(a.frees, s[i].frees);
    }
    hsp_free(&m);
    tk_out_free(&r);
}

/* Allocations at stacks whose innermost frame is fn. */
static agg fn_counts(const hsp_model *m, const char *fn)
{
    return aggregate(m, fn, 0, "");
}

/* exec: the run before it ends complete (delivered, BYE with CLEAN|EXEC),
 * even though exec runs no exit handlers; an exec that fails leaves the
 * process going on unrecorded, and says so; the new image is a new run whose
 * parent is the run before exec; a destructor that allocates after the
 * collector's exit flush is harmless. */
static void test_exec(void **state)
{
    (void)state;
    const char *out = tmpfile_path("exec.hsp");
    const char *argv[] = {tk_build_path("tests/wl_life"), "exec", "500", NULL};
    const char *env[] = {"HEAPSTORE_SAMPLE_BYTES=1", tk_env("HEAPSTORE_URL=file://%s", out), NULL};
    tk_out r;
    tk_run(&r, argv, env, 1, 120);
    tk_expect_ok(&r);
    int pid = 0;
    unsigned long n = 0;
    assert_int_equal(sscanf(r.out, "after %d %lu", &pid, &n), 2);
    assert_int_equal(n, 500);
    assert_non_null(strstr(r.err, "heapstore: exec failed after the run ended"));
    hsp_model before, after;
    load_ok(&before, out, 0);
    assert_int_equal(before.bye.flags, HS_BYE_CLEAN | HS_BYE_EXEC);
    agg b = fn_counts(&before, "life_before");
    assert_int_equal(b.allocs, 500);
    assert_int_equal(b.alloc_bytes, 500 * 100);
    /* After exec: PATH.<pid>, linked to the first run, complete. */
    load_ok(&after, tk_env("%s.%d", out, pid), 0);
    assert_memory_equal(after.hello.parent_run_id, before.hello.run_id, 16);
    assert_memory_not_equal(after.hello.run_id, before.hello.run_id, 16);
    assert_int_equal(after.bye.flags, HS_BYE_CLEAN);
    agg a = fn_counts(&after, "life_after");
    assert_int_equal(a.allocs, 500);
    assert_int_equal(a.alloc_bytes, 500 * 200);
    assert_int_equal(fn_counts(&after, "life_before").allocs, 0);
    hsp_free(&before);
    hsp_free(&after);
    tk_out_free(&r);
}

/* malloc_usable_size stays truthful for sampled blocks; free_sized (glibc
 * 2.36 lacks it, the collector provides it) is a free the stream sees. */
static void test_usable_free_sized(void **state)
{
    (void)state;
    const char *out = tmpfile_path("usable.hsp");
    const char *argv[] = {tk_build_path("tests/wl_life"), "usable", "3000", NULL};
    const char *env[] = {"HEAPSTORE_SAMPLE_BYTES=1", tk_env("HEAPSTORE_URL=file://%s", out), NULL};
    tk_out r;
    tk_run(&r, argv, env, 1, 120);
    tk_expect_ok(&r);
    unsigned long n = 0;
    int sized = -1;
    assert_int_equal(sscanf(r.out, "usable %lu %d", &n, &sized), 2);
    assert_int_equal(n, 3000);
    assert_int_equal(sized, 1);
    hsp_model m;
    load_ok(&m, out, 0);
    agg a = fn_counts(&m, "life_usable");
    assert_int_equal(a.allocs, 3000);
    assert_int_equal(a.frees, 3000);
    assert_int_equal(a.free_bytes, a.alloc_bytes);
    hsp_free(&m);
    tk_out_free(&r);
}

/* Signal handlers that allocate, aimed at threads that are inside the
 * collector most of the time (rate 1). On an allocator that tolerates it
 * (tests/libwl_alloc.so), nothing hangs or crashes, the threads' own events
 * are all there, and the handler's allocations are recorded except those
 * that interrupted the collector itself (forwarded unrecorded: it cannot
 * unwind from inside its unwinder). */
static void test_signal_handlers(void **state)
{
    (void)state;
    const char *out = tmpfile_path("signal.hsp");
    const char *argv[] = {tk_build_path("tests/wl_life"), "signal", "2", NULL};
    const char *env[] = {"HEAPSTORE_SAMPLE_BYTES=1", tk_env("HEAPSTORE_URL=file://%s", out), NULL};
    tk_out r;
    tk_run(&r, argv, env, TK_PRELOAD_TEST_ALLOCATOR, 120);
    tk_expect_ok(&r);
    unsigned long ca = 0, cf = 0, ha = 0;
    assert_int_equal(sscanf(r.out, "signal %lu %lu %lu", &ca, &cf, &ha), 3);
    hsp_model m;
    load_ok(&m, out, 0);
    agg c = fn_counts(&m, "life_churn"), h = fn_counts(&m, "life_signal");
    fprintf(stderr, "churn %lu/%lu recorded %lu/%lu; handler %lu recorded %lu/%lu; drops %lu\n", ca,
            cf, (unsigned long)c.allocs, (unsigned long)c.frees, ha, (unsigned long)h.allocs,
            (unsigned long)h.frees, (unsigned long)m.drops[HS_DROP_FREE_EVENTS]);
    /* The main thread signals every millisecond for 2 s: about 1,800
     * handler allocations. A thread that waits for libunwind at every
     * handler's sample (200 ms each, while it holds the allocator's lock the
     * sender's dlopen needs) made 27 to 42 in 3 runs of 25; 300 leaves a
     * loaded machine six times the room. */
    assert_true(ca > 1000 && ha > 300);
    assert_int_equal(c.allocs, ca);
    /* A churn free that a handler interrupted cannot be lost, but a handler's
     * free may find the live set's shard locked by the thread it interrupted:
     * then it is dropped and counted. */
    assert_int_equal(c.frees, cf);
    assert_true(h.allocs >= 1 && h.allocs <= ha);
    assert_true(h.frees + m.drops[HS_DROP_FREE_EVENTS] >= h.allocs);
    hsp_free(&m);
    tk_out_free(&r);
}

/* Stacks our own unwinder cannot walk (allocations in a signal handler, at
 * rate 1): with the default unwinder, libunwind is mapped only once the
 * first of them comes (not before), the sampling thread waits for the
 * sender to load it, and every one is recorded, with the stacks
 * HEAPSTORE_UNWIND=libunwind records; with HEAPSTORE_UNWIND=own they are
 * lost and counted (so the workload does need libunwind). */
static void test_unwinder_on_demand(void **state)
{
    (void)state;
    const int n = 20;
    const char *argv[] = {tk_build_path("tests/wl_sigalloc"), "20", NULL};
    const char *mode[2] = {"fast", "own"};
    for (int k = 0; k < 2; k++) {
        const char *out = tmpfile_path(tk_env("sigalloc-%s.hsp", mode[k]));
        const char *env[] = {"HEAPSTORE_SAMPLE_BYTES=1", tk_env("HEAPSTORE_URL=file://%s", out),
                             tk_env("HEAPSTORE_UNWIND=%s", mode[k]), NULL};
        tk_out r;
        tk_run(&r, argv, env, 1, 120);
        tk_expect_ok(&r);
        int handled = -1, before = -1, after = -1;
        assert_int_equal(sscanf(r.out, "sigalloc %d %d %d", &handled, &before, &after), 3);
        assert_int_equal(handled, n);
        assert_int_equal(before, 0);
        assert_int_equal(after, k == 0);
        hsp_model m;
        load_ok(&m, out, 0);
        agg h = fn_counts(&m, "on_signal");
        fprintf(stderr, "%s: handler allocations recorded %lu of %d, unwind_failed %lu\n", mode[k],
                (unsigned long)h.allocs, n, (unsigned long)m.drops[HS_DROP_UNWIND_FAILED]);
        if (k == 0) {
            assert_int_equal(h.allocs, n);
            assert_int_equal(m.drops[HS_DROP_UNWIND_FAILED], 0);
        } else {
            assert_int_equal(h.allocs, 0);
            assert_int_equal(m.drops[HS_DROP_UNWIND_FAILED], n);
        }
        hsp_free(&m);
        tk_out_free(&r);
    }
    unwinders_agree_with("sigalloc", argv, "fast");
}

/* ---- a stuck sender ---- */

/* The output is a FIFO nobody reads: the sender blocks for good opening it.
 * The program's ring fills; its thread waits once (3 s without progress),
 * then drops every later event at once instead of waiting again per event,
 * and exits after the exit flush bound, saying nothing was delivered. */
static void test_stuck_sender(void **state)
{
    (void)state;
    const char *fifo = tmpfile_path("stuck.fifo");
    unlink(fifo);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    const char *argv[] = {tk_build_path("tests/wl_sites"), "10", NULL};
    const char *env[] = {"HEAPSTORE_SAMPLE_BYTES=1", tk_env("HEAPSTORE_URL=file://%s", fifo),
                         "HEAPSTORE_EXIT_FLUSH_MS=1000", NULL};
    tk_out r;
    tk_run(&r, argv, env, 1, 120);
    fprintf(stderr, "stuck sender: %.1fs\n%.500s", r.seconds, r.err);
    tk_expect_ok(&r);
    assert_non_null(strstr(r.err, "not delivered"));
    unlink(fifo);
    tk_out_free(&r);
}

/* ---- server down ---- */

static int closed_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bind(fd, (struct sockaddr *)&a, sizeof a);
    socklen_t l = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &l);
    close(fd);
    return ntohs(a.sin_port);
}

static void test_server_down(void **state)
{
    (void)state;
    const char *argv[] = {tk_build_path("tests/wl_sites"), "4", NULL};
    const char *file_env[] = {"HEAPSTORE_SAMPLE_BYTES=1",
                              tk_env("HEAPSTORE_URL=file://%s", tmpfile_path("up.hsp")), NULL};
    tk_out base;
    tk_run(&base, argv, file_env, 1, 120);
    tk_expect_ok(&base);

    /* A flush allowance far beyond the run's timeout: the program must see
     * that nobody listens and not wait for it at exit. */
    const char *env[] = {"HEAPSTORE_SAMPLE_BYTES=1", "HEAPSTORE_BUFFER_MB=1",
                         "HEAPSTORE_EXIT_FLUSH_MS=3600000",
                         tk_env("HEAPSTORE_URL=tcp://127.0.0.1:%d", closed_port()), NULL};
    tk_out r;
    tk_run(&r, argv, env, 1, 120);
    tk_expect_ok(&r);
    /* Speed is the benchmark's business; the times are shown, not judged. */
    fprintf(stderr, "file run %.2fs, server-down run %.2fs\nstderr: %s", base.seconds, r.seconds,
            r.err);
    unsigned long a = 0, f = 0;
    const char *p = strstr(r.err, "dropped ");
    assert_non_null(p);
    assert_int_equal(sscanf(p, "dropped %lu alloc and %lu free events", &a, &f), 2);
    assert_true(a > 0);
    assert_non_null(strstr(r.err, "connection refused"));
    tk_out_free(&r);
    tk_out_free(&base);
}

/* A server that accepts the connection (the kernel does, from the backlog)
 * and never reads: HEAPSTORE_BUFFER_MB bounds what the collector keeps, the
 * rest is dropped and counted, and the program exits normally. The workload
 * churns (a million events, a handful of blocks live at once), so that the
 * two runs' memory differs by the queue alone: with many blocks live, the
 * live set's tables (which double, all shards at about the same count)
 * made two runs of one program peak up to 7 MiB apart. */
static void test_buffer_bound(void **state)
{
    (void)state;
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    int small = 4096;
    setsockopt(lfd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t l = sizeof a;
    getsockname(lfd, (struct sockaddr *)&a, &l);
    assert_int_equal(listen(lfd, 4), 0);
    const char *argv[] = {tk_build_path("tests/wl_sites"), "1", "churn", NULL};
    const char *file_env[] = {"HEAPSTORE_SAMPLE_BYTES=1",
                              tk_env("HEAPSTORE_URL=file://%s", tmpfile_path("bound.hsp")), NULL};
    tk_out base, r;
    tk_run(&base, argv, file_env, 1, 300);
    tk_expect_ok(&base);
    const char *env[] = {"HEAPSTORE_SAMPLE_BYTES=1", "HEAPSTORE_BUFFER_MB=1",
                         "HEAPSTORE_EXIT_FLUSH_MS=200",
                         tk_env("HEAPSTORE_URL=tcp://127.0.0.1:%d", ntohs(a.sin_port)), NULL};
    tk_run(&r, argv, env, 1, 300);
    close(lfd);
    tk_expect_ok(&r);
    const char *hb = strstr(base.out, "hwm "), *hr = strstr(r.out, "hwm ");
    assert_non_null(hb);
    assert_non_null(hr);
    long base_kb = atol(hb + 4), stalled_kb = atol(hr + 4);
    fprintf(stderr, "file run peak RSS %ld KiB, stalled server %ld KiB\n%s", base_kb, stalled_kb,
            r.err);
    unsigned long da = 0, df = 0;
    const char *p = strstr(r.err, "dropped ");
    assert_non_null(p);
    assert_int_equal(sscanf(p, "dropped %lu alloc and %lu free events", &da, &df), 2);
    assert_true(da > 0 && df > 0);
    /* The stream (several MiB, see bound.hsp) did not pile up in memory:
     * 1 MiB of queue plus slack. */
    struct stat sb;
    assert_int_equal(stat(tmpfile_path("bound.hsp"), &sb), 0);
    assert_true(sb.st_size > 5 << 20); /* else this check could not fail */
    assert_true(base_kb > 0 && stalled_kb <= base_kb + 4096);
    tk_out_free(&r);
    tk_out_free(&base);
}

/* ---- tcp: acknowledgements and resuming ---- */

typedef struct fake_server {
    int lfd, port;
    int drop_after; /* close the first connection after this many frames */
    int connections, resumed_ok, bye, refused_seq_gap;
    uint8_t run_id[16], resume_key[16]; /* the first HELLO's */
    uint64_t next_seq;                  /* committed so far */
    uint64_t alloc_events, free_events, frames;
    hs_bye byev;
} fake_server;

/* A HELLO: the first one's run id and resume key are kept; a resumption
 * must repeat them from a sequence number already committed. */
static void fake_hello(fake_server *s, const hs_frame *f, uint64_t *seq)
{
    static hs_hello h;
    hs_hello_decode(&h, f->payload, f->len);
    /* a resumption repeats the run's random resume key */
    if (s->connections == 1 && h.resume_key.len == 16) {
        memcpy(s->run_id, h.run_id, 16);
        memcpy(s->resume_key, h.resume_key.ptr, 16);
    } else if ((h.flags & HS_HELLO_RESUMED) && !memcmp(h.run_id, s->run_id, 16) &&
               h.first_seq <= s->next_seq && h.resume_key.len == 16 &&
               !memcmp(h.resume_key.ptr, s->resume_key, 16))
        s->resumed_ok = 1;
    *seq = h.first_seq;
    if (s->connections == 1) s->next_seq = *seq;
    if (getenv("HS_TEST_VERBOSE"))
        fprintf(stderr, "conn %d hello first_seq %lu flags %lu committed %lu\n", s->connections,
                (unsigned long)h.first_seq, (unsigned long)h.flags, (unsigned long)s->next_seq);
}

/* Frame this_seq committed: counted (its events, a BYE). */
static void fake_commit(fake_server *s, const hs_frame *f, uint64_t this_seq)
{
    if (getenv("HS_TEST_VERBOSE"))
        fprintf(stderr, "conn %d frame %lu type %d\n", s->connections, (unsigned long)this_seq,
                f->type);
    s->next_seq = this_seq + 1;
    s->frames++;
    if (f->type == HS_FRAME_EVENTS) {
        hs_batch_it it;
        hs_event e;
        hs_events_begin(&it, f->payload, f->len);
        while (hs_events_next(&it, &e) == 1) {
            if (e.is_free)
                s->free_events++;
            else
                s->alloc_events++;
        }
    }
    if (f->type == HS_FRAME_BYE) {
        hs_bye_decode(&s->byev, f->payload, f->len);
        s->bye = 1;
    }
}

/* Sends the ACK of what is committed; 0 or -1. */
static int fake_ack(int fd, const fake_server *s)
{
    uint8_t ack[16];
    hs_wr wr;
    hs_wr_init(&wr, ack, sizeof ack);
    size_t pos = hs_frame_begin(&wr, HS_FRAME_ACK);
    hs_wr_varint(&wr, s->next_seq);
    hs_frame_end(&wr, pos);
    return send(fd, ack, hs_wr_len(&wr), MSG_NOSIGNAL) < 0 ? -1 : 0;
}

static void *fake_server_main(void *arg)
{
    fake_server *s = arg;
    static uint8_t buf[32 << 20];
    while (!s->bye) {
        int fd = accept(s->lfd, NULL, NULL);
        if (fd < 0) break;
        s->connections++;
        size_t len = 0, off = 0;
        int header = 0, frames_here = 0;
        uint64_t seq = 0;
        for (;;) {
            ssize_t n = recv(fd, buf + len, sizeof buf - len, 0);
            if (n <= 0) break;
            len += (size_t)n;
            if (!header) {
                uint32_t v;
                int h = hs_header_parse(buf, len, &v);
                if (h == 0) continue;
                if (h < 0) break;
                off = (size_t)h;
                header = 1;
            }
            int close_now = 0;
            for (;;) {
                hs_frame f;
                long k = hs_frame_split(buf + off, len - off, &f);
                if (k <= 0) break;
                off += (size_t)k;
                if (f.type == HS_FRAME_HELLO) {
                    fake_hello(s, &f, &seq);
                    continue;
                }
                uint64_t this_seq = seq++;
                frames_here++;
                if (this_seq < s->next_seq) continue; /* already committed */
                if (this_seq > s->next_seq) s->refused_seq_gap = 1;
                fake_commit(s, &f, this_seq);
                if (s->connections == 1 && frames_here >= s->drop_after) {
                    close_now = 1; /* a crash between commit and ACK */
                    break;
                }
            }
            memmove(buf, buf + off, len - off);
            len -= off;
            off = 0;
            if (close_now || fake_ack(fd, s) || s->bye) break;
        }
        close(fd);
    }
    return NULL;
}

static void test_tcp_resume(void **state)
{
    (void)state;
    fake_server s = {.drop_after = 5};
    s.lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(s.lfd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t l = sizeof a;
    getsockname(s.lfd, (struct sockaddr *)&a, &l);
    listen(s.lfd, 4);
    s.port = ntohs(a.sin_port);
    pthread_t th;
    pthread_create(&th, NULL, fake_server_main, &s);

    const char *argv[] = {tk_build_path("tests/wl_sites"), "10", NULL};
    const char *env[] = {"HEAPSTORE_SAMPLE_BYTES=1", "HEAPSTORE_EXIT_FLUSH_MS=10000",
                         tk_env("HEAPSTORE_URL=tcp://127.0.0.1:%d", s.port), NULL};
    tk_out r;
    tk_run(&r, argv, env, 1, 120);
    tk_expect_ok(&r);
    shutdown(s.lfd, SHUT_RDWR);
    close(s.lfd);
    pthread_join(th, NULL);
    fprintf(stderr, "connections %d frames %lu events %lu/%lu bye %d (%.2fs)\n%s", s.connections,
            (unsigned long)s.frames, (unsigned long)s.alloc_events, (unsigned long)s.free_events,
            s.bye, r.seconds, r.err);
    assert_true(s.connections >= 2);
    assert_true(s.resumed_ok);
    assert_false(s.refused_seq_gap);
    assert_true(s.bye);
    assert_int_equal(s.alloc_events, s.byev.alloc_events);
    assert_int_equal(s.free_events, s.byev.free_events);
    assert_true(s.alloc_events > 100000 / 10);
    /* Everything delivered: nothing reported on stderr. */
    assert_null(strstr(r.err, "heapstore:"));
    tk_out_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sites_exact),        cmocka_unit_test(test_sites_sampled),
        cmocka_unit_test(test_sites_default_rate), cmocka_unit_test(test_cxx_exact),
        cmocka_unit_test(test_cxx_sampled),        cmocka_unit_test(test_python),
        cmocka_unit_test(test_unwinders_agree),    cmocka_unit_test(test_dump),
        cmocka_unit_test(test_lines_policy),       cmocka_unit_test(test_inlined_frames),
        cmocka_unit_test(test_no_debuginfod),      cmocka_unit_test(test_libraries_mapped),
        cmocka_unit_test(test_underscore_exit),    cmocka_unit_test(test_exec),
        cmocka_unit_test(test_usable_free_sized),  cmocka_unit_test(test_signal_handlers),
        cmocka_unit_test(test_unwinder_on_demand), cmocka_unit_test(test_stuck_sender),
        cmocka_unit_test(test_server_down),        cmocka_unit_test(test_buffer_bound),
        cmocka_unit_test(test_tcp_resume),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

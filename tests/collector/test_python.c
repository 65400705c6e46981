/* Python frames in the collector's stacks: real interpreters run
 * tests/collector/wl_pyframes.py under the real libheapstore.so at every
 * allocation (HEAPSTORE_SAMPLE_BYTES=1) with file:// output, and the stream
 * is decoded with the shared decoder. The script's functions allocate
 * bytearrays of sizes used nowhere else; each must be found under its own
 * function, file and line, with its bytes, in Debian's python3 (3.11,
 * libpython inside the executable) and in every CPython 3.8-3.13 that pyenv
 * holds on this machine (libpython3.X.so). Versions without a known layout
 * (3.6, 3.7) keep native stacks and count python_fallback. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <setjmp.h>

#include <cmocka.h>

#include "hs_proto.h"
#include "hs_testkit.h"
#include "hsp_model.h"

#define PY_PC_TAG 0xff00000000000000ull /* collector/hs_python.h */

static int is_py(uint64_t pc)
{
    return (pc & PY_PC_TAG) == PY_PC_TAG;
}

static const char *script(void)
{
    return tk_source_path("tests/collector/wl_pyframes.py");
}

/* The line of the script marked "# LINE name". */
static int script_line(const char *name)
{
    FILE *f = fopen(script(), "r");
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
    assert_true(found);
    return line;
}

typedef struct pyrun {
    hsp_model m;
    unsigned long big_n, big, churn_n, churn, deep, depth, threads_n, thread;
    unsigned long gen_n, gen, cb_n, cb, named;
    double seconds;
} pyrun;

static void run_script_env(pyrun *p, const char *python, const char *tag, const char *extra)
{
    static char out[600], url[700];
    snprintf(out, sizeof out, "%s/pyframes-%s.hsp", tk_scratch_dir(), tag);
    snprintf(url, sizeof url, "HEAPSTORE_URL=file://%s", out);
    unlink(out);
    const char *argv[] = {python, script(), NULL};
    /* Frames are the subject here, on blocks the script makes: an explicit
     * PYTHONMALLOC keeps Python's small objects (test_pymem's subject, each
     * a sample at this rate) out; the finalization test below keeps them. */
    const char *env[] = {"HEAPSTORE_SAMPLE_BYTES=1", url,   "PYTHONHASHSEED=0",
                         "PYTHONMALLOC=pymalloc",    extra, NULL};
    tk_out r;
    tk_run(&r, argv, env, 1, 300);
    if (!r.exited || r.status != 0 || !tk_clean(&r))
        fprintf(stderr, "%s failed (exited=%d status=%d)\n%.4000s\n", python, r.exited, r.status,
                r.err);
    assert_true(r.exited);
    assert_int_equal(r.status, 0);
    assert_true(tk_clean(&r));
    assert_int_equal(sscanf(r.out, "pyframes %lu %lu %lu %lu %lu %lu %lu %lu %lu %lu %lu %lu %lu",
                            &p->big_n, &p->big, &p->churn_n, &p->churn, &p->deep, &p->depth,
                            &p->threads_n, &p->thread, &p->gen_n, &p->gen, &p->cb_n, &p->cb,
                            &p->named),
                     13);
    p->seconds = r.seconds;
    tk_out_free(&r);
    assert_int_equal(hsp_load(&p->m, out, 0), 0);
    if (p->m.error[0]) fprintf(stderr, "%s: %s\n", out, p->m.error);
    assert_string_equal(p->m.error, "");
    assert_true(p->m.has_bye);
}

static void run_script(pyrun *p, const char *python, const char *tag)
{
    run_script_env(p, python, tag, NULL);
}

/* Index of the innermost Python frame of s, or -1. */
static int innermost_py(const hsp_stack *s)
{
    for (uint32_t k = 0; k < s->depth; k++)
        if (is_py(s->pcs[k])) return (int)k;
    return -1;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

typedef struct fn_sum {
    uint64_t bytes, allocs;
    int stacks, where_ok; /* every such stack's frame had the script's file and line */
    const hsp_stack *one;
} fn_sum;

/* Bytes allocated by stacks whose innermost Python frame is fn. */
static fn_sum by_function(const hsp_model *m, const char *fn, int line)
{
    fn_sum r = {.where_ok = 1};
    for (size_t i = 0; i < m->nstacks; i++) {
        const hsp_stack *s = &m->stacks[i];
        int k = innermost_py(s);
        /* Python's small objects (pymalloc's, 512 bytes or less) that the
         * function makes on its other lines are not what is measured. */
        if (k < 0 || !s->allocs || s->alloc_bytes <= 512 * s->allocs) continue;
        const hsp_sym *y = hsp_sym_of(m, s->pcs[k]);
        if (!y || strcmp(y->function, fn)) continue;
        if (!ends_with(y->file, "wl_pyframes.py") || (int)y->line != line) r.where_ok = 0;
        r.bytes += s->alloc_bytes;
        r.allocs += s->allocs;
        r.stacks++;
        r.one = s;
    }
    return r;
}

/* The known bytes of one function, within 1% above (the list that keeps
 * them grows on the same line) and never below. */
static void expect_bytes(const hsp_model *m, const char *version, const char *fn, const char *mark,
                         unsigned long n, unsigned long size)
{
    fn_sum f = by_function(m, fn, script_line(mark));
    double want = (double)n * (double)(size + 1);
    fprintf(stderr, "  %s %-9s %10lu bytes in %lu allocations (want %.0f), %d stacks%s\n", version,
            fn, (unsigned long)f.bytes, (unsigned long)f.allocs, want, f.stacks,
            f.where_ok ? "" : ", WRONG file or line");
    assert_true(f.stacks > 0);
    assert_true(f.where_ok);
    assert_true((double)f.bytes >= want);
    assert_true((double)f.bytes <= want * 1.01);
}

static const char *frame_fn(const hsp_model *m, uint64_t pc)
{
    const hsp_sym *y = hsp_sym_of(m, pc);
    return y ? y->function : "";
}

/* In fn's stack, the next Python frame is main at the line marked
 * caller_mark, with native frames (the C code that called back) between. */
static void expect_caller(const hsp_model *m, const char *fn, const char *caller_mark)
{
    const hsp_stack *s = by_function(m, fn, script_line(fn)).one;
    assert_non_null(s);
    int k = innermost_py(s), native = 0;
    assert_true(k >= 0);
    uint32_t j = (uint32_t)k + 1;
    for (; j < s->depth && !is_py(s->pcs[j]); j++) native++;
    assert_true(j < s->depth);
    const hsp_sym *y = hsp_sym_of(m, s->pcs[j]);
    assert_string_equal(y->function, "main");
    assert_int_equal(y->line, script_line(caller_mark));
    assert_true(native >= 1);
}

/* Everything the script says, checked in one run of one interpreter. */
static void check_frames(const pyrun *p, const char *version)
{
    const hsp_model *m = &p->m;
    expect_bytes(m, version, "leak_big", "leak_big", p->big_n, p->big);
    expect_bytes(m, version, "churn", "churn", p->churn_n, p->churn);
    expect_bytes(m, version, "worker", "worker", p->threads_n, p->thread);
    expect_bytes(m, version, "deep", "deep", 1, p->deep);

    const hsp_stack *big = by_function(m, "leak_big", script_line("leak_big")).one;
    int saw_grow = 0, saw_main = 0, saw_module = 0;
    for (uint32_t k = 0; k < big->depth; k++) {
        if (!is_py(big->pcs[k])) continue;
        const char *f = frame_fn(m, big->pcs[k]);
        /* From 3.11 the qualified name; before, the code's name. */
        saw_grow |= !strcmp(f, "Holder.grow") || !strcmp(f, "grow");
        saw_main |= !strcmp(f, "main");
        saw_module |= !strcmp(f, "<module>");
    }
    assert_true(saw_grow && saw_main && saw_module);
    /* The allocator's native frames stay below the Python line. */
    assert_false(is_py(big->pcs[0]));

    /* 200 recursive Python frames, none cut, the script's top level last. */
    const hsp_stack *d = by_function(m, "deep", script_line("deep")).one;
    uint32_t ndeep = 0, last_py = 0;
    for (uint32_t k = 0; k < d->depth; k++) {
        if (!is_py(d->pcs[k])) continue;
        last_py = k;
        if (!strcmp(frame_fn(m, d->pcs[k]), "deep")) ndeep++;
    }
    fprintf(stderr, "  %s deep: %u frames of deep() in a stack of %u\n", version, ndeep, d->depth);
    assert_int_equal(ndeep, p->depth);
    assert_string_equal(frame_fn(m, d->pcs[last_py]), "<module>");

    /* A thread's Python stack starts in threading's bootstrap. */
    const hsp_stack *w = by_function(m, "worker", script_line("worker")).one;
    int boot = 0;
    for (uint32_t k = 0; k < w->depth; k++)
        if (is_py(w->pcs[k])) {
            const hsp_sym *y = hsp_sym_of(m, w->pcs[k]);
            boot |= ends_with(y->file, "threading.py") && strstr(y->function, "_bootstrap");
        }
    assert_true(boot);

    /* Python called back from C (a generator resumed by list(), a function
     * called by map()): each Python frame stands where its own evaluation
     * loop was, so the C frames in between stay between them. */
    expect_bytes(m, version, "gen", "gen", p->gen_n, p->gen);
    expect_bytes(m, version, "via_c", "via_c", p->cb_n, p->cb);
    expect_caller(m, "gen", "main_gen");
    expect_caller(m, "via_c", "main_map");
    /* A name outside ASCII (Latin-1 and Greek: two bytes a character in the
     * interpreter) arrives as UTF-8. */
    expect_bytes(m, version,
                 "gr\xc3\xb6\xc3\x9f"
                 "e_\xce\xbb",
                 "named", 1, p->named);
    assert_int_equal(m->drops[HS_DROP_PYTHON_FALLBACK], 0);
}

/* Runs the heapstore CLI (not profiled); its output stays in r. */
static void cli(tk_out *r, const char *const *argv)
{
    tk_run(r, argv, NULL, 0, 120);
    if (!r->exited || r->status != 0)
        fprintf(stderr, "%s %s failed:\n%s%s\n", argv[0], argv[1], r->out, r->err);
    assert_true(r->exited);
    assert_int_equal(r->status, 0);
}

static void test_debian_python3(void **state)
{
    (void)state;
    if (access("/usr/bin/python3", X_OK) != 0) {
        fprintf(stderr, "no /usr/bin/python3 (install Debian's python3)\n");
        fail();
    }
    pyrun p;
    run_script(&p, "/usr/bin/python3", "debian");
    check_frames(&p, "debian");
    hsp_free(&p.m);

    /* HEAPSTORE_DEPTH bounds native frames only: at 8, the 200 recursive
     * Python frames are all there, with at most 8 native ones. */
    run_script_env(&p, "/usr/bin/python3", "debian-depth8", "HEAPSTORE_DEPTH=8");
    const hsp_stack *d = by_function(&p.m, "deep", script_line("deep")).one;
    assert_non_null(d);
    uint32_t ndeep = 0, native = 0;
    for (uint32_t k = 0; k < d->depth; k++) {
        if (!is_py(d->pcs[k]))
            native++;
        else
            ndeep += !strcmp(frame_fn(&p.m, d->pcs[k]), "deep");
    }
    fprintf(stderr, "HEAPSTORE_DEPTH=8: %u frames of deep(), %u native frames\n", ndeep, native);
    assert_int_equal(ndeep, p.depth);
    assert_true(native >= 1 && native <= 8);
    assert_true(p.m.drops[HS_DROP_STACKS_TRUNCATED] > 0);
    hsp_free(&p.m);

    /* Stored by the server's own code (import), a stack reads as the script
     * does; a second run of the script brings no new frame. */
    char db[600], hsp[600], hsp2[600], want[128];
    snprintf(db, sizeof db, "%s/pyframes.db", tk_scratch_dir());
    snprintf(hsp, sizeof hsp, "%s/pyframes-debian.hsp", tk_scratch_dir());
    snprintf(hsp2, sizeof hsp2, "%s/pyframes-debian2.hsp", tk_scratch_dir());
    unlink(db);
    run_script(&p, "/usr/bin/python3", "debian2");
    hsp_free(&p.m);
    const char *bin = tk_build_path("bin/heapstore");
    tk_out r;
    const char *imp[] = {bin, "import", "--db", db, hsp, NULL};
    cli(&r, imp);
    tk_out_free(&r);
    const char *imp2[] = {bin, "import", "--db", db, hsp2, NULL};
    cli(&r, imp2);
    tk_out_free(&r);
    const char *same[] = {
        bin,
        "sql",
        "--db",
        db,
        "SELECT 'shared ' || count(DISTINCT p.frame) || ' ' || "
        "count(DISTINCT CASE WHEN p.frame IN (SELECT frame FROM run_pcs WHERE run = 1) "
        "THEN p.frame END) AS x FROM run_pcs p JOIN frames f ON f.id = p.frame "
        "WHERE p.run = 2 AND f.module = '' AND f.file LIKE '%wl_pyframes.py'",
        NULL};
    cli(&r, same);
    unsigned long frames = 0, known = 0;
    const char *q = strstr(r.out, "shared ");
    assert_non_null(q);
    assert_int_equal(sscanf(q, "shared %lu %lu", &frames, &known), 2);
    fprintf(stderr, "second run: %lu frames of the script, %lu of them the first run's\n", frames,
            known);
    assert_true(frames >= 6);
    assert_int_equal(known, frames);
    tk_out_free(&r);
    const char *top[] = {bin, "top", "1", "--by", "stack", "--limit", "1", "--db", db, NULL};
    cli(&r, top);
    snprintf(want, sizeof want, "leak_big (wl_pyframes.py:%d)", script_line("leak_big"));
    assert_non_null(strstr(r.out, want));
    assert_non_null(strstr(r.out, "Holder.grow (wl_pyframes.py:"));
    assert_non_null(strstr(r.out, "<module> (wl_pyframes.py:"));
    tk_out_free(&r);
}

/* heapstore run against a real server: the summary says how many samples
 * kept native frames only. */
static void expect_fallback_said(const char *python, const char *version)
{
    char db[600];
    snprintf(db, sizeof db, "%s/fallback-%s.db", tk_scratch_dir(), version);
    unlink(db);
    const char *argv[] = {tk_build_path("bin/heapstore"),
                          "run",
                          "--sample",
                          "1",
                          "--db",
                          db,
                          "--",
                          python,
                          script(),
                          NULL};
    tk_out r;
    tk_run(&r, argv, NULL, 0, 300);
    assert_true(r.exited);
    assert_int_equal(r.status, 0);
    const char *line = strstr(r.err, "  python ");
    if (!line) fprintf(stderr, "%s\n", r.err);
    assert_non_null(line);
    unsigned long n = 0;
    assert_int_equal(sscanf(line, "  python %lu samples", &n), 1);
    fprintf(stderr, "%s: heapstore run says %lu samples lack their Python frames\n", version, n);
    assert_true(n > 0);
    tk_out_free(&r);
}

static void pyenv_one(const char *py, const char *version, unsigned minor, void *ctx)
{
    (void)ctx;
    pyrun p;
    run_script(&p, py, version);
    uint64_t npy = 0;
    for (size_t i = 0; i < p.m.nsyms; i++) npy += is_py(p.m.syms[i].pc);
    fprintf(stderr, "%s: %lu Python frames, python_fallback %lu, truncated %lu (%.2fs)\n", version,
            (unsigned long)npy, (unsigned long)p.m.drops[HS_DROP_PYTHON_FALLBACK],
            (unsigned long)p.m.drops[HS_DROP_STACKS_TRUNCATED], p.seconds);
    if (minor >= 8 && minor <= 13) {
        check_frames(&p, version);
    } else {
        assert_int_equal(npy, 0);
        assert_true(p.m.drops[HS_DROP_PYTHON_FALLBACK] > 0);
        expect_fallback_said(py, version);
    }
    hsp_free(&p.m);
}

/* Every pyenv CPython 3 present: 3.8-3.13 as Debian's; older ones fall back
 * to native stacks and say so. */
static void test_pyenv_versions(void **state)
{
    (void)state;
    tk_pyenv(0, 99, pyenv_one, NULL);
}

/* Threads that come and go, and daemon threads allocating in Python code
 * while the interpreter finalizes under them: every run exits cleanly and
 * leaves a well-formed stream, several times over, on Debian's python3 and
 * on the pyenv versions of each frame layout present. */
static void test_finalization(void **state)
{
    (void)state;
    const char *root = getenv("PYENV_ROOT");
    char pys[4][600];
    snprintf(pys[0], sizeof pys[0], "/usr/bin/python3");
    snprintf(pys[1], sizeof pys[1], "%s/versions/3.8.18/bin/python3.8",
             root ? root : "/root/.pyenv");
    snprintf(pys[2], sizeof pys[2], "%s/versions/3.12.1/bin/python3.12",
             root ? root : "/root/.pyenv");
    snprintf(pys[3], sizeof pys[3], "%s/versions/3.13.0/bin/python3.13",
             root ? root : "/root/.pyenv");
    for (size_t k = 0; k < sizeof pys / sizeof pys[0]; k++) {
        if (access(pys[k], X_OK) != 0) continue;
        for (int round = 0; round < 5; round++) {
            char out[600], url[700];
            snprintf(out, sizeof out, "%s/pyexit-%zu-%d.hsp", tk_scratch_dir(), k, round);
            snprintf(url, sizeof url, "HEAPSTORE_URL=file://%s", out);
            /* -S: no site packages (a pyenv's .pth files import about 100
             * modules, every small object of which is a sample here) */
            const char *argv[] = {pys[k], "-S", tk_source_path("tests/collector/wl_pyexit.py"),
                                  "20", NULL};
            /* Every 4 KiB on average: the daemon threads' loops are still
             * sampled all the time through teardown, without a stream of
             * every small object they make for as long as they run. */
            const char *env[] = {"HEAPSTORE_SAMPLE_BYTES=4096", url, NULL};
            tk_out r;
            tk_run(&r, argv, env, 1, 120);
            if (!r.exited || r.status != 0 || !tk_clean(&r))
                fprintf(stderr, "%s round %d: exited=%d status=%d\n%.4000s\n", pys[k], round,
                        r.exited, r.status, r.err);
            assert_true(r.exited);
            assert_int_equal(r.status, 0);
            assert_true(tk_clean(&r));
            assert_non_null(strstr(r.out, "pyexit 20"));
            tk_out_free(&r);
            hsp_model m;
            assert_int_equal(hsp_load(&m, out, 0), 0);
            assert_string_equal(m.error, "");
            assert_true(m.has_bye);
            if (round == 0) {
                uint64_t npy = 0;
                for (size_t i = 0; i < m.nsyms; i++) npy += is_py(m.syms[i].pc);
                fprintf(stderr, "%s: %lu Python frames, python_fallback %lu\n", pys[k],
                        (unsigned long)npy, (unsigned long)m.drops[HS_DROP_PYTHON_FALLBACK]);
                assert_true(npy > 0);
            }
            hsp_free(&m);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_debian_python3),
        cmocka_unit_test(test_pyenv_versions),
        cmocka_unit_test(test_finalization),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

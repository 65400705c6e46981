/* Runs stored while their build could not be found are named once it can
 * be (server/hs_refill.h): the real server on loopback reading no local
 * files and asking no collector (--no-local-symbols --no-symbol-uploads),
 * the real collector preloaded into hs-example, and the real CLI asking the
 * server over HTTP.
 *
 * - A run stored unnamed shows module+offset; `heapstore symbols add` of
 *   the program's debug file while the server runs names it within a
 *   bounded wait, in top and flame, through the same pooled query
 *   connections that answered before.
 * - The names exist already, from a rebuild of the same source (another
 *   build id, named when stored): the old run's frames are named too, each
 *   under a key of its own, and the other run's frames are untouched.
 * - Debug files added while the server is stopped name the runs stored
 *   before, at the next start.
 * - Hand-made streams: frames of one build named in several bounded jobs,
 *   but not those a run of another build of the same path uses. */
#include <elf.h>
#include <limits.h>
#include <link.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "hs_proto.h"
#include "hs_testkit.h"

#define FILL_WAIT_MS 15000 /* a refill is looked for every second */

/* prog (a file of bin/) under the collector, sending to port. */
static int run_prog(const char *prog, int port)
{
    char path[600];
    snprintf(path, sizeof path, "bin/%s", prog);
    const char *argv[] = {tk_build_path(path), "--rounds", "3", "--round-ms", "5", NULL};
    const char *env[] = {tk_env("HEAPSTORE_URL=tcp://127.0.0.1:%d", port),
                         "HEAPSTORE_EXIT_FLUSH_MS=20000",
                         "ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0", NULL};
    tk_out r;
    if (tk_run(&r, argv, env, TK_PRELOAD_COLLECTOR, 0)) return -1;
    int rc = r.code;
    if (rc) fprintf(stderr, "%s exited with %d:\n%s%s", prog, rc, r.out, r.err);
    tk_out_free(&r);
    return rc;
}

/* `heapstore ARGS` asking the server at port, into out. Returns its exit
 * status. */
static int cli(char *out, size_t len, int port, const char *args)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "HEAPSTORE_URL=http://127.0.0.1:%d '%s/bin/heapstore' %s 2>&1", port,
             tk_build_dir(), args);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t n = fread(out, 1, len - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Frames of module prog used by run r's stacks that have no name. */
static int64_t unnamed(const char *db, const char *prog, int64_t r)
{
    char sql[600];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM frames WHERE module LIKE '%%/%s' AND function = '' "
             "AND id IN (SELECT t.frame FROM traces t JOIN run_stacks rs ON rs.trace = t.id "
             "WHERE rs.run = %lld)",
             prog, (long long)r);
    return tk_q(db, "%s", sql);
}

/* `heapstore symbols add` of prog's debug info (objcopy --only-keep-debug). */
static void symbols_add(const char *dir, const char *db, const char *prog)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "objcopy --only-keep-debug '%s/bin/%s' '%s/%s.debug' && "
             "'%s/bin/heapstore' symbols add --db '%s' '%s/%s.debug' > /dev/null",
             tk_build_dir(), prog, dir, prog, tk_build_dir(), db, dir, prog);
    assert_int_equal(system(cmd), 0);
}

/* Waits until run r's top at port names build_index with its file. */
static int wait_named(int port, int64_t r)
{
    char out[16384], args[64];
    snprintf(args, sizeof args, "top %lld --limit 10", (long long)r);
    for (uint64_t t0 = tk_now_ms(); tk_now_ms() - t0 < FILL_WAIT_MS; usleep(100 * 1000))
        if (!cli(out, sizeof out, port, args) && strstr(out, "build_index (hs_example.c:"))
            return 0;
    fprintf(stderr, "run %lld not named in %d ms:\n%s\n", (long long)r, FILL_WAIT_MS, out);
    return -1;
}

static const char *const no_files[] = {"--no-local-symbols", "--no-symbol-uploads", NULL};

static void start_unnamed_run(tk_server *srv, const char *dir, char *db, size_t dblen)
{
    snprintf(db, dblen, "%s/h.db", dir);
    assert_int_equal(tk_server_start(srv, db, 0, no_files), 0);
    assert_int_equal(run_prog("hs-example", srv->port), 0);
    assert_true(unnamed(db, "hs-example", 1) > 0);
}

static void test_fill_after_add(void **state)
{
    (void)state;
    char dir[512], db[600], out[16384];
    tk_tmpdir(dir, sizeof dir, "symfill-add");
    tk_server srv;
    start_unnamed_run(&srv, dir, db, sizeof db);
    /* asked through the server: its pooled connections read the frames */
    assert_int_equal(cli(out, sizeof out, srv.port, "top 1 --limit 10"), 0);
    assert_non_null(strstr(out, "hs-example+0x"));
    assert_null(strstr(out, "build_index"));
    symbols_add(dir, db, "hs-example");
    assert_int_equal(wait_named(srv.port, 1), 0);
    assert_int_equal(cli(out, sizeof out, srv.port, "top 1 --limit 10"), 0);
    assert_null(strstr(out, "hs-example+0x"));
    assert_int_equal(cli(out, sizeof out, srv.port, "flame 1"), 0);
    assert_non_null(strstr(out, ";main;build_index "));
    assert_null(strstr(out, "hs-example+0x"));
    assert_int_equal(unnamed(db, "hs-example", 1), 0);
    /* file and line, and the plain content key (no other row held it) */
    assert_true(tk_q(db, "SELECT count(*) FROM frames WHERE function = 'build_index' AND file "
                         "LIKE '%%/hs_example.c' AND line > 0 AND key = function || char(31) || "
                         "file || char(31) || line") == 1);
    /* a later run of the build is named when stored, onto the same frame */
    assert_int_equal(run_prog("hs-example", srv.port), 0);
    assert_int_equal(unnamed(db, "hs-example", 2), 0);
    assert_int_equal(tk_q(db, "SELECT count(*) FROM frames WHERE function = 'build_index'"), 1);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
    assert_true(tk_log_contains(&srv, "stored frames named"));
}

/* The names are there already, from hs-example-rebuilt (the same source
 * under another build id, named when stored since its debug file was added
 * first): the old run's frames are named under keys of their own. */
static void test_fill_names_exist(void **state)
{
    (void)state;
    char dir[512], db[600], out[16384];
    tk_tmpdir(dir, sizeof dir, "symfill-exist");
    tk_server srv;
    start_unnamed_run(&srv, dir, db, sizeof db);
    symbols_add(dir, db, "hs-example-rebuilt");
    assert_int_equal(run_prog("hs-example-rebuilt", srv.port), 0);
    assert_int_equal(unnamed(db, "hs-example-rebuilt", 2), 0);
    int64_t plain = tk_q(db, "SELECT count(*) FROM frames WHERE function = 'build_index'");
    assert_int_equal(plain, 1);
    assert_true(unnamed(db, "hs-example", 1) > 0); /* its build is still missing */
    symbols_add(dir, db, "hs-example");
    assert_int_equal(wait_named(srv.port, 1), 0);
    assert_int_equal(unnamed(db, "hs-example", 1), 0);
    /* two rows of one content: the newer named under "content key, old key" */
    assert_int_equal(tk_q(db, "SELECT count(*) FROM frames WHERE function = 'build_index'"), 2);
    assert_int_equal(tk_q(db, "SELECT count(*) FROM frames WHERE function = 'build_index' AND "
                              "key = function || char(31) || file || char(31) || line || "
                              "char(31) || module || char(31) || module_offset"),
                     1);
    assert_int_equal(tk_q(db, "SELECT count(*) FROM frames WHERE function = 'build_index' AND "
                              "key = function || char(31) || file || char(31) || line AND "
                              "module LIKE '%%/hs-example-rebuilt'"),
                     1);
    /* the other run reads as it did */
    assert_int_equal(cli(out, sizeof out, srv.port, "top 2 --limit 10"), 0);
    assert_non_null(strstr(out, "build_index (hs_example.c:"));
    assert_int_equal(cli(out, sizeof out, srv.port, "flame 1"), 0);
    assert_non_null(strstr(out, ";main;build_index "));
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
    assert_true(tk_log_contains(&srv, "under a key of their own"));
}

/* ---- hand-made streams: many frames, a path two builds share ----------- */

#define S4(k)  v[k]++, v[k + 1]++, v[k + 2]++, v[k + 3]++;
#define S16(k) S4(k) S4(k) S4(k) S4(k)
#define S64(k) S16(k) S16(k) S16(k) S16(k)

/* A function of a few KB: every offset in its first NPCS bytes is its. */
void fill_big_function(volatile int *v);
__attribute__((noinline)) void fill_big_function(volatile int *v)
{
    S64(0) S64(4) S64(8) S64(12)
}

#define NPCS   700 /* more than HS_REFILL_BATCH: several REFILL jobs */
#define SHARED 10  /* the first offsets, also used by a run of another build */

static char exe[PATH_MAX];
static uint64_t load_bias;
static uint8_t self_bid[64];
static uint32_t self_blen;

static hs_str str(const char *s)
{
    return (hs_str){s, strlen(s)};
}

/* A run of this executable under build id bid: its MAPPINGS, then the
 * first n offsets of fill_big_function unnamed, then BYE. */
static void send_offsets(int port, uint8_t seed, const uint8_t *bid, uint32_t blen, int n)
{
    uint64_t base = (uint64_t)(uintptr_t)fill_big_function - load_bias;
    tk_buf b = {0};
    uint8_t run_id[16];
    memset(run_id, seed, sizeof run_id);
    tk_header(&b);
    tk_hello(&b, run_id, 1, 0, NULL);
    hs_wr wr = tk_buf_wr(&b, 200000);
    size_t pos = hs_frame_begin(&wr, HS_FRAME_MAPPINGS);
    hs_wr_varint(&wr, 0);
    hs_mapping m = {.start = load_bias + 0x1000,
                    .end = load_bias + 0x10000000,
                    .file_offset = 0x1000,
                    .build_id = bid,
                    .build_id_len = blen,
                    .path = str(exe)};
    hs_mapping_put(&wr, &m);
    hs_frame_end(&wr, pos);
    pos = hs_frame_begin(&wr, HS_FRAME_SYMBOLS);
    for (int i = 0; i < n; i++) {
        hs_symbol sy = {.pc = load_bias + base + 1 + (uint64_t)i,
                        .function = str(""),
                        .file = str(""),
                        .module = str(exe),
                        .module_offset = base + 1 + (uint64_t)i};
        hs_symbol_put(&wr, &sy);
    }
    hs_frame_end(&wr, pos);
    tk_buf_commit(&b, &wr);
    tk_bye(&b, 10000, 0, 0);
    int fd = tk_connect(port);
    assert_true(fd >= 0);
    assert_int_equal(tk_send(fd, b.p, b.len), 0);
    uint64_t got = 0;
    assert_int_equal(tk_wait_ack(fd, 4, &got, NULL, 0, 30000), 0); /* 3 frames after HELLO */
    close(fd);
    tk_buf_free(&b);
}

/* NPCS frames of one build, named in several jobs; the SHARED of them that
 * a run of another build of the same path uses stay unnamed (module and
 * offset name two builds' code there). */
static void test_fill_batches_shared_path(void **state)
{
    (void)state;
    char dir[512], db[600], cmd[16384];
    tk_tmpdir(dir, sizeof dir, "symfill-batches");
    snprintf(db, sizeof db, "%s/h.db", dir);
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    assert_true(len > 0);
    exe[len] = 0;
    size_t sblen;
    tk_self_build_id(self_bid, sizeof self_bid, &sblen, &load_bias);
    self_blen = (uint32_t)sblen;
    assert_true(self_blen >= 8);
    tk_server srv;
    assert_int_equal(tk_server_start(&srv, db, 0, no_files), 0);
    uint8_t other[20];
    memset(other, 0x5e, sizeof other);
    send_offsets(srv.port, 1, self_bid, self_blen, NPCS);
    send_offsets(srv.port, 2, other, sizeof other, SHARED);
    char like[PATH_MAX + 200];
    snprintf(like, sizeof like,
             "SELECT count(*) FROM frames WHERE module = '%s' AND function = 'fill_big_function'",
             exe);
    assert_int_equal(tk_q(db, "%s", like), 0);
    snprintf(cmd, sizeof cmd,
             "objcopy --only-keep-debug '%s' '%s/self.debug' && '%s/bin/heapstore' symbols add "
             "--db '%s' '%s/self.debug' > /dev/null",
             exe, dir, tk_build_dir(), db, dir);
    assert_int_equal(system(cmd), 0);
    uint64_t t0 = tk_now_ms();
    while (tk_q(db, "%s", like) < NPCS - SHARED && tk_now_ms() - t0 < FILL_WAIT_MS) usleep(100000);
    assert_int_equal(tk_q(db, "%s", like), NPCS - SHARED);
    snprintf(like, sizeof like, "SELECT count(*) FROM frames WHERE module = '%s' AND function = ''",
             exe);
    assert_int_equal(tk_q(db, "%s", like), SHARED);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
    assert_true(tk_log_contains(&srv, "stored frames named"));
    assert_true(tk_log_contains(&srv, "stay unnamed"));
}

/* Added while the server is stopped: named at the next start. */
static void test_fill_at_start(void **state)
{
    (void)state;
    char dir[512], db[600];
    tk_tmpdir(dir, sizeof dir, "symfill-start");
    tk_server srv;
    start_unnamed_run(&srv, dir, db, sizeof db);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
    symbols_add(dir, db, "hs-example");
    assert_true(unnamed(db, "hs-example", 1) > 0);
    assert_int_equal(tk_server_start(&srv, db, 0, no_files), 0);
    assert_int_equal(wait_named(srv.port, 1), 0);
    assert_int_equal(unnamed(db, "hs-example", 1), 0);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fill_after_add),
        cmocka_unit_test(test_fill_names_exist),
        cmocka_unit_test(test_fill_at_start),
        cmocka_unit_test(test_fill_batches_shared_path),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

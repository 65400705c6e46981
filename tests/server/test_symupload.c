/* Symbol uploads (docs/protocol.md, SYMREQ and SYMDATA): a server that
 * reads no local files (--no-local-symbols, as on another machine) asks
 * collectors for the builds it lacks.
 *
 * With the real collector and hs-example: the first run's frames come out
 * named through the upload, a second run of the same build is named without
 * a new one, and so is a run after a restart; a collector with uploads off
 * (no HELLO flag) is never asked; HEAPSTORE_SYMBOL_UPLOAD_MAX crossed makes
 * it decline a build. With hand-made frames on a raw socket: a valid upload
 * of this test's own executable, stored and used (stored and compressed
 * pieces), an old collector never asked, and malformed or oversized uploads
 * each closing only their connection while another run goes on, and an
 * upload that ends after the run was stored unnamed naming it in place. */
#include <elf.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "hs_lz.h"
#include "hs_testkit.h"

/* How many times text is in the server's log. */
static int log_count(const tk_server *s, const char *text)
{
    FILE *f = fopen(s->log, "r");
    char line[8192];
    int n = 0;
    while (f && fgets(line, sizeof line, f))
        if (strstr(line, text)) n++;
    if (f) fclose(f);
    return n;
}

/* The build ids of the log's "asked for build ID" lines, in order (at most
 * max, each up to 127 characters); returns how many. */
static int log_asked(const tk_server *s, char ids[][128], int max)
{
    FILE *f = fopen(s->log, "r");
    char line[8192];
    int n = 0;
    while (f && n < max && fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "asked for build ");
        if (p && sscanf(p, "asked for build %127s", ids[n]) == 1) n++;
    }
    if (f) fclose(f);
    return n;
}

/* ---- the real collector ------------------------------------------------ */

/* hs-example under the collector, sending to port; extra environment as
 * NAME=VALUE (or NULL). Returns its exit status. */
static int run_example(int port, const char *extra_env)
{
    const char *argv[] = {
        tk_build_path("bin/hs-example"), "--rounds", "3", "--round-ms", "5", NULL};
    const char *env[] = {tk_env("HEAPSTORE_URL=tcp://127.0.0.1:%d", port),
                         "HEAPSTORE_EXIT_FLUSH_MS=20000",
                         "ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0", extra_env, NULL};
    tk_out r;
    if (tk_run(&r, argv, env, TK_PRELOAD_COLLECTOR, 0)) return -1;
    int rc = r.code;
    if (rc) fprintf(stderr, "hs-example exited with %d:\n%s%s", rc, r.out, r.err);
    tk_out_free(&r);
    return rc;
}

/* Native frames of hs-example (its module) in run r without a name. */
static int64_t unnamed_example_frames(const char *db, int64_t r)
{
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM frames WHERE module LIKE '%%/hs-example' AND function = '' "
             "AND id IN (SELECT t.frame FROM traces t JOIN run_stacks rs ON rs.trace = t.id "
             "WHERE rs.run = %lld)",
             (long long)r);
    return tk_q(db, "%s", sql);
}

static int64_t example_frames(const char *db)
{
    return tk_q(db, "SELECT count(*) FROM frames WHERE module LIKE '%%/hs-example'");
}

/* Counts are read from the log once the server has stopped: hs_log says a
 * repeat within 10 s once, then "[repeated N times …]" at the end. */
static void test_real_upload(void **state)
{
    (void)state;
    char dir[512], db[600];
    tk_tmpdir(dir, sizeof dir, "symup-real");
    snprintf(db, sizeof db, "%s/h.db", dir);
    tk_server srv;
    const char *args[] = {"--no-local-symbols", NULL};
    assert_int_equal(tk_server_start(&srv, db, 0, args), 0);
    assert_int_equal(run_example(srv.port, NULL), 0);
    assert_true(example_frames(db) > 0);
    assert_int_equal(unnamed_example_frames(db, 1), 0); /* the first run, named whole */
    /* the same build again: named from what was sent */
    assert_int_equal(run_example(srv.port, NULL), 0);
    assert_int_equal(unnamed_example_frames(db, 2), 0);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
    /* each build asked for once (hs-example, libc), and received */
    int asked = log_count(&srv, "asked for build");
    assert_true(asked >= 1);
    assert_int_equal(log_count(&srv, "received from conn"), asked);
    assert_int_equal(log_count(&srv, "[repeated"), 0);
    /* a restart: the cache and the stored files still serve, no build
     * asked again (a module the third run alone samples from may be asked
     * for the first time: at the default rate which allocations are
     * sampled varies, and in the sanitized tree the runtime's own frames
     * come and go with them) */
    assert_int_equal(tk_server_start(&srv, db, 0, args), 0);
    assert_int_equal(run_example(srv.port, NULL), 0);
    assert_int_equal(unnamed_example_frames(db, 3), 0);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
    char ids[64][128];
    int n = log_asked(&srv, ids, 64); /* the log is appended to */
    assert_int_equal(n >= asked, 1);
    for (int i = asked; i < n; i++)
        for (int k = 0; k < asked; k++)
            if (!strcmp(ids[i], ids[k])) fail_msg("build %s asked for again", ids[i]);
}

/* Uploads off: no HELLO flag, never asked, frames left as module+offset. */
static void test_real_upload_off(void **state)
{
    (void)state;
    char dir[512], db[600];
    tk_tmpdir(dir, sizeof dir, "symup-off");
    snprintf(db, sizeof db, "%s/h.db", dir);
    tk_server srv;
    const char *args[] = {"--no-local-symbols", NULL};
    assert_int_equal(tk_server_start(&srv, db, 0, args), 0);
    assert_int_equal(run_example(srv.port, "HEAPSTORE_SYMBOL_UPLOAD_MAX=0"), 0);
    assert_true(unnamed_example_frames(db, 1) > 0);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
    assert_int_equal(log_count(&srv, "asked for build"), 0);
}

/* A budget smaller than one build: that build is declined, the run goes on. */
static void test_real_upload_budget(void **state)
{
    (void)state;
    char dir[512], db[600];
    tk_tmpdir(dir, sizeof dir, "symup-budget");
    snprintf(db, sizeof db, "%s/h.db", dir);
    tk_server srv;
    const char *args[] = {"--no-local-symbols", NULL};
    assert_int_equal(tk_server_start(&srv, db, 0, args), 0);
    assert_int_equal(run_example(srv.port, "HEAPSTORE_SYMBOL_UPLOAD_MAX=1000"), 0);
    assert_true(unnamed_example_frames(db, 1) > 0);
    assert_int_equal(tk_q(db, "SELECT count(*) FROM runs WHERE state = 'ended'"), 1);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
    assert_true(log_count(&srv, "asked for build") >= 1);
    assert_int_equal(log_count(&srv, "received from conn"), 0);
    assert_true(log_count(&srv, "does not send build") >= 1);
}

/* ---- hand-made streams --------------------------------------------------- */

static char exe[PATH_MAX];
static uint8_t self_bid[64];
static size_t self_blen;
static uint64_t load_bias;

__attribute__((noinline)) static int upload_marker(int x)
{
    return x * 3 + 1;
}

static hs_str str(const char *s)
{
    return (hs_str){s, strlen(s)};
}

/* Header, HELLO (flags), MAPPINGS naming build (bid, blen) at a path this
 * server cannot read, and SYMBOLS with one unnamed pc in it at offset off
 * (frames 1 and 2). */
static void stream_start(tk_buf *b, uint8_t seed, uint64_t flags, const uint8_t *bid, uint32_t blen,
                         uint64_t off)
{
    uint8_t run_id[16];
    memset(run_id, seed, sizeof run_id);
    run_id[15] = (uint8_t)getpid();
    tk_header(b);
    tk_hello(b, run_id, 1, flags, NULL);
    hs_wr wr = tk_buf_wr(b, 512);
    size_t pos = hs_frame_begin(&wr, HS_FRAME_MAPPINGS);
    hs_wr_varint(&wr, 1);
    hs_mapping m = {.start = 0x10000,
                    .end = 0x10000 + (64u << 20),
                    .build_id = bid,
                    .build_id_len = blen,
                    .path = str("/nonexistent/upload-test")};
    hs_mapping_put(&wr, &m);
    hs_frame_end(&wr, pos);
    pos = hs_frame_begin(&wr, HS_FRAME_SYMBOLS);
    hs_symbol s = {.pc = 0x10000 + off,
                   .function = str(""),
                   .file = str(""),
                   .module = str("/nonexistent/upload-test"),
                   .module_offset = off};
    hs_symbol_put(&wr, &s);
    hs_frame_end(&wr, pos);
    tk_buf_commit(b, &wr);
}

/* A SYMREQ for (bid, blen) arrives on fd. */
static void expect_symreq(int fd, const uint8_t *bid, uint32_t blen)
{
    uint8_t p[128];
    size_t n = 0;
    assert_int_equal(tk_read_frame(fd, HS_FRAME_SYMREQ, p, sizeof p, &n, 10000), 0);
    const uint8_t *got;
    uint32_t glen;
    assert_int_equal(hs_symreq_decode(&got, &glen, p, n), 0);
    assert_int_equal(glen, blen);
    assert_memory_equal(got, bid, blen);
}

static void put_symdata(tk_buf *b, const uint8_t *bid, uint32_t blen, int method, uint64_t off,
                        uint64_t total, const uint8_t *data, uint32_t size, uint32_t *table)
{
    hs_symdata d = {.bid = bid, .blen = blen, .offset = off, .total = total, .size = size};
    hs_wr wr = tk_buf_wr(b, HS_LZ_BOUND(size) + 256);
    size_t pos = hs_frame_begin(&wr, HS_FRAME_SYMDATA);
    if (method == HS_SYMDATA_LZ) {
        uint8_t *z = malloc(HS_LZ_BOUND(size));
        size_t zlen = hs_lz_compress(z, HS_LZ_BOUND(size), data, size, table);
        assert_true(zlen > 0);
        d.method = HS_SYMDATA_LZ;
        hs_symdata_head(&wr, &d);
        hs_wr_str(&wr, (const char *)z, zlen);
        free(z);
    } else {
        hs_symdata_head(&wr, &d);
        hs_wr_str(&wr, (const char *)data, size);
    }
    hs_frame_end(&wr, pos);
    tk_buf_commit(b, &wr);
}

static uint8_t *read_all(const char *path, size_t *n)
{
    struct stat st;
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0 && fstat(fd, &st) == 0);
    uint8_t *p = malloc((size_t)st.st_size);
    assert_int_equal(read(fd, p, (size_t)st.st_size), st.st_size);
    close(fd);
    *n = (size_t)st.st_size;
    return p;
}

/* This executable, sent whole in pieces of `piece` bytes by a hand-made
 * collector: stored, checked, and the pc named. */
static void upload_self(int port, const char *db, uint8_t seed, int method, uint32_t piece,
                        int64_t run)
{
    uint64_t off = (uint64_t)(uintptr_t)upload_marker - load_bias + 1;
    tk_buf b = {0};
    stream_start(&b, seed, HS_HELLO_SYMDATA, self_bid, (uint32_t)self_blen, off);
    int fd = tk_connect(port);
    assert_true(fd >= 0);
    assert_int_equal(tk_send(fd, b.p, b.len), 0);
    expect_symreq(fd, self_bid, (uint32_t)self_blen);
    size_t n;
    uint8_t *file = read_all(exe, &n);
    uint32_t *table = malloc(HS_LZ_TABLE * sizeof *table);
    b.len = 0;
    for (size_t at = 0; at < n; at += piece) {
        uint32_t k = (uint32_t)(n - at < piece ? n - at : piece);
        put_symdata(&b, self_bid, (uint32_t)self_blen, method, at, n, file + at, k, table);
    }
    tk_bye(&b, 1000, 0, 0);
    assert_int_equal(tk_send(fd, b.p, b.len), 0);
    uint64_t got = 0;
    assert_int_equal(tk_wait_ack(fd, 4, &got, NULL, 0, 20000), 0);
    close(fd);
    free(file);
    free(table);
    tk_buf_free(&b);
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM frames WHERE function = 'upload_marker' AND module_offset = "
             "%llu",
             (unsigned long long)off);
    assert_int_equal(tk_q(db, "%s", sql), 1);
    (void)run;
}

static void test_raw_upload(void **state)
{
    (void)state;
    char dir[512], db[600];
    tk_tmpdir(dir, sizeof dir, "symup-raw");
    snprintf(db, sizeof db, "%s/h.db", dir);
    tk_server srv;
    const char *args[] = {"--no-local-symbols", NULL};
    assert_int_equal(tk_server_start(&srv, db, 0, args), 0);
    upload_self(srv.port, db, 0x31, HS_SYMDATA_LZ, 100000, 1);
    assert_int_equal(log_count(&srv, "received from conn"), 1);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
    /* stored pieces, at the cap of a piece, into a fresh database */
    snprintf(db, sizeof db, "%s/h2.db", dir);
    assert_int_equal(tk_server_start(&srv, db, 0, args), 0);
    upload_self(srv.port, db, 0x32, HS_SYMDATA_RAW, HS_SYMDATA_PIECE, 1);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
}

/* An upload that ends after the run's jobs stopped waiting for it (1 s):
 * the pc is stored unnamed, then named in place once the file is whole. */
static void test_raw_upload_late(void **state)
{
    (void)state;
    char dir[512], db[600], sql[256];
    tk_tmpdir(dir, sizeof dir, "symup-late");
    snprintf(db, sizeof db, "%s/h.db", dir);
    tk_server srv;
    const char *args[] = {"--no-local-symbols", NULL};
    assert_int_equal(tk_server_start(&srv, db, 0, args), 0);
    uint64_t off = (uint64_t)(uintptr_t)upload_marker - load_bias + 1;
    tk_buf b = {0};
    stream_start(&b, 0x41, HS_HELLO_SYMDATA, self_bid, (uint32_t)self_blen, off);
    int fd = tk_connect(srv.port);
    assert_true(fd >= 0);
    assert_int_equal(tk_send(fd, b.p, b.len), 0);
    expect_symreq(fd, self_bid, (uint32_t)self_blen);
    uint8_t ack[64];
    size_t n;
    assert_int_equal(tk_read_frame(fd, HS_FRAME_ACK, ack, sizeof ack, &n, 10000), 0);
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM frames WHERE function = '' AND module_offset = %llu",
             (unsigned long long)off);
    assert_int_equal(tk_q(db, "%s", sql), 1); /* stored as module+offset */
    uint8_t *file = read_all(exe, &n);
    uint32_t *table = malloc(HS_LZ_TABLE * sizeof *table);
    b.len = 0;
    for (size_t at = 0; at < n; at += 100000) {
        uint32_t k = (uint32_t)(n - at < 100000 ? n - at : 100000);
        put_symdata(&b, self_bid, (uint32_t)self_blen, HS_SYMDATA_LZ, at, n, file + at, k, table);
    }
    tk_bye(&b, 1000, 0, 0);
    assert_int_equal(tk_send(fd, b.p, b.len), 0);
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM frames WHERE function = 'upload_marker' AND module_offset = "
             "%llu",
             (unsigned long long)off);
    uint64_t t0 = tk_now_ms();
    while (tk_q(db, "%s", sql) != 1 && tk_now_ms() - t0 < 15000) usleep(50000);
    assert_int_equal(tk_q(db, "%s", sql), 1);
    close(fd);
    free(file);
    free(table);
    tk_buf_free(&b);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
    assert_int_equal(log_count(&srv, "received from conn"), 1);
    assert_int_equal(log_count(&srv, "stored frames named"), 1);
}

/* One run on a raw socket (HELLO flags given) naming a build this server
 * lacks: 0 if no SYMREQ came before its frames' ACK (it would come first). */
static int asked_once(int port, uint8_t seed, uint64_t flags, uint8_t tag)
{
    uint8_t fake[20] = {0xee, tag, (uint8_t)getpid()};
    tk_buf b = {0};
    stream_start(&b, seed, flags, fake, sizeof fake, 0x20);
    tk_bye(&b, 1000, 0, 0);
    int fd = tk_connect(port);
    assert_true(fd >= 0);
    assert_int_equal(tk_send(fd, b.p, b.len), 0);
    uint8_t p[64];
    size_t n;
    int asked = tk_read_frame(fd, HS_FRAME_SYMREQ, p, sizeof p, &n, 3000) == 0;
    close(fd);
    tk_buf_free(&b);
    return asked;
}

/* A collector without the HELLO flag is never asked (nor one with it by a
 * server started with --no-symbol-uploads); the runs end cleanly. */
static void test_raw_not_asked(void **state)
{
    (void)state;
    char dir[512], db[600];
    tk_tmpdir(dir, sizeof dir, "symup-old");
    snprintf(db, sizeof db, "%s/h.db", dir);
    tk_server srv;
    const char *args[] = {"--no-local-symbols", NULL};
    assert_int_equal(tk_server_start(&srv, db, 0, args), 0);
    assert_int_equal(asked_once(srv.port, 0x41, 0, 1), 0);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
    const char *off[] = {"--no-local-symbols", "--no-symbol-uploads", NULL};
    assert_int_equal(tk_server_start(&srv, db, 0, off), 0);
    assert_int_equal(asked_once(srv.port, 0x42, HS_HELLO_SYMDATA, 2), 0);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
    assert_int_equal(log_count(&srv, "asked for build"), 0);
    assert_int_equal(tk_q(db, "SELECT count(*) FROM runs WHERE state = 'ended'"), 2);
    /* and the same run with the flag, to a server that asks: asked */
    assert_int_equal(tk_server_start(&srv, db, 0, args), 0);
    assert_int_equal(asked_once(srv.port, 0x43, HS_HELLO_SYMDATA, 3), 1);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
}

/* Malformed or oversized uploads: each closes its own connection, with a
 * line in the log; another connection's run is untouched. */
enum { BAD_NOT_ASKED, BAD_TOO_BIG, BAD_LZ, BAD_ORDER, BAD_NOT_ELF, BAD_TRAILING, BAD_PIECE };
static const struct {
    int kind;
    const char *log;
} bad_cases[] = {
    {BAD_NOT_ASKED, "SYMDATA for a build it was not asked for"},
    {BAD_TOO_BIG, "over the 536870912 a build may send"},
    {BAD_LZ, "a piece that does not decompress"},
    {BAD_ORDER, "SYMDATA out of order"},
    {BAD_NOT_ELF, "is not an ELF file"},
    {BAD_TRAILING, "malformed SYMDATA"},
    {BAD_PIECE, "malformed SYMDATA"},
};

static void send_bad(int port, int i)
{
    uint8_t bid[20] = {0xbd, (uint8_t)i, (uint8_t)getpid()};
    tk_buf b = {0};
    stream_start(&b, (uint8_t)(0x50 + i), HS_HELLO_SYMDATA, bid, sizeof bid, 0x40);
    int fd = tk_connect(port);
    assert_true(fd >= 0);
    assert_int_equal(tk_send(fd, b.p, b.len), 0);
    expect_symreq(fd, bid, sizeof bid);
    b.len = 0;
    static uint8_t junk[2u << 20];
    memset(junk, 'x', sizeof junk);
    uint8_t other[20] = {0xbe};
    switch (bad_cases[i].kind) {
    case BAD_NOT_ASKED:
        put_symdata(&b, other, sizeof other, HS_SYMDATA_RAW, 0, 10, junk, 10, NULL);
        break;
    case BAD_TOO_BIG:
        put_symdata(&b, bid, sizeof bid, HS_SYMDATA_RAW, 0, 1ull << 30, junk, 10, NULL);
        break;
    case BAD_LZ: {
        hs_symdata d = {.bid = bid, .blen = sizeof bid, .method = 1, .total = 100, .size = 100};
        hs_wr wr = tk_buf_wr(&b, 256);
        size_t pos = hs_frame_begin(&wr, HS_FRAME_SYMDATA);
        hs_symdata_head(&wr, &d);
        hs_wr_str(&wr, "\xf0\x05xyz", 5); /* 15 + 5 literals promised, 3 there */
        hs_frame_end(&wr, pos);
        tk_buf_commit(&b, &wr);
        break;
    }
    case BAD_ORDER:
        put_symdata(&b, bid, sizeof bid, HS_SYMDATA_RAW, 0, 100, junk, 10, NULL);
        put_symdata(&b, bid, sizeof bid, HS_SYMDATA_RAW, 20, 100, junk, 10, NULL);
        break;
    case BAD_NOT_ELF:
        put_symdata(&b, bid, sizeof bid, HS_SYMDATA_RAW, 0, 4096, junk, 4096, NULL);
        break;
    case BAD_TRAILING: {
        hs_symdata d = {.bid = bid, .blen = sizeof bid, .total = 4, .size = 4};
        hs_wr wr = tk_buf_wr(&b, 256);
        size_t pos = hs_frame_begin(&wr, HS_FRAME_SYMDATA);
        hs_symdata_head(&wr, &d);
        hs_wr_str(&wr, "abcd", 4);
        hs_wr_u8(&wr, 0);
        hs_frame_end(&wr, pos);
        tk_buf_commit(&b, &wr);
        break;
    }
    case BAD_PIECE: /* a piece one byte over HS_SYMDATA_PIECE */
        put_symdata(&b, bid, sizeof bid, HS_SYMDATA_RAW, 0, 4u << 20, junk, HS_SYMDATA_PIECE + 1,
                    NULL);
        break;
    }
    assert_int_equal(tk_send(fd, b.p, b.len), 0);
    assert_int_equal(tk_wait_closed(fd, 10000), 1);
    close(fd);
    tk_buf_free(&b);
}

static void test_raw_bad_uploads(void **state)
{
    (void)state;
    char dir[512], db[600];
    tk_tmpdir(dir, sizeof dir, "symup-bad");
    snprintf(db, sizeof db, "%s/h.db", dir);
    tk_server srv;
    const char *args[] = {"--no-local-symbols", NULL};
    assert_int_equal(tk_server_start(&srv, db, 0, args), 0);
    /* a run that stays open on a connection of its own through it all */
    static const uint8_t fake[20] = {0xee, 0x07};
    tk_buf b = {0};
    stream_start(&b, 0x61, 0, fake, sizeof fake, 0x20);
    int keep = tk_connect(srv.port);
    assert_true(keep >= 0);
    assert_int_equal(tk_send(keep, b.p, b.len), 0);
    uint64_t got = 0;
    assert_int_equal(tk_wait_ack(keep, 3, &got, NULL, 0, 10000), 0);
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        send_bad(srv.port, (int)i);
        assert_true(log_count(&srv, bad_cases[i].log) >= 1);
    }
    /* nothing lost: no file left behind, the other run ends cleanly */
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "test -z \"$(find '%s.symbols' -type f 2>/dev/null)\"", db);
    uint64_t deadline = tk_now_ms() + 5000; /* the thread deletes them soon after the close */
    while (system(cmd) != 0 && tk_now_ms() < deadline) usleep(20000);
    assert_int_equal(system(cmd), 0);
    b.len = 0;
    tk_event ev = {.t = 500, .stack = 1, .size = 8, .weight = 8};
    uint64_t pcs[1] = {0x10020};
    tk_stack(&b, 1, pcs, 1);
    tk_events(&b, &ev, 1);
    tk_bye(&b, 1000, 1, 0);
    assert_int_equal(tk_send(keep, b.p, b.len), 0);
    assert_int_equal(tk_wait_ack(keep, 6, &got, NULL, 0, 10000), 0);
    close(keep);
    tk_buf_free(&b);
    assert_int_equal(tk_q(db, "SELECT count(*) FROM runs WHERE state = 'ended'"), 1);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
}

/* A connection that closes in the middle of an upload: the next one that
 * names the build within HS_SYMD_ASK_TTL_S is not asked, and its frames do
 * not wait (its ACK comes at once). */
static void test_raw_upload_cut(void **state)
{
    (void)state;
    char dir[512], db[600];
    tk_tmpdir(dir, sizeof dir, "symup-cut");
    snprintf(db, sizeof db, "%s/h.db", dir);
    tk_server srv;
    const char *args[] = {"--no-local-symbols", NULL};
    assert_int_equal(tk_server_start(&srv, db, 0, args), 0);
    static const uint8_t bid[20] = {0xab, 0xcd};
    static const uint8_t half[100];
    tk_buf b = {0};
    stream_start(&b, 0x71, HS_HELLO_SYMDATA, bid, sizeof bid, 0x30);
    int fd = tk_connect(srv.port);
    assert_true(fd >= 0);
    assert_int_equal(tk_send(fd, b.p, b.len), 0);
    expect_symreq(fd, bid, sizeof bid);
    b.len = 0;
    put_symdata(&b, bid, sizeof bid, HS_SYMDATA_RAW, 0, 200, half, 100, NULL);
    assert_int_equal(tk_send(fd, b.p, b.len), 0);
    close(fd);
    b.len = 0;
    stream_start(&b, 0x72, HS_HELLO_SYMDATA, bid, sizeof bid, 0x30);
    fd = tk_connect(srv.port);
    assert_true(fd >= 0);
    uint64_t t0 = tk_now_ms(), got = 0;
    assert_int_equal(tk_send(fd, b.p, b.len), 0);
    assert_int_equal(tk_wait_ack(fd, 3, &got, NULL, 0, 10000), 0);
    assert_true(tk_now_ms() - t0 < 900); /* not held for the 1 s wait */
    close(fd);
    tk_buf_free(&b);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
    assert_int_equal(log_count(&srv, "asked for build"), 1);
    assert_int_equal(log_count(&srv, "received from conn"), 0);
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "test -z \"$(find '%s.symbols' -type f 2>/dev/null)\"", db);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return 1;
    exe[n] = 0;
    tk_self_build_id(self_bid, sizeof self_bid, &self_blen, &load_bias);
    if (self_blen < 8) return 1;
    (void)upload_marker(1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_raw_upload),      cmocka_unit_test(test_raw_not_asked),
        cmocka_unit_test(test_raw_bad_uploads), cmocka_unit_test(test_real_upload),
        cmocka_unit_test(test_real_upload_off), cmocka_unit_test(test_real_upload_budget),
        cmocka_unit_test(test_raw_upload_cut),  cmocka_unit_test(test_raw_upload_late),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The server names frames itself: a stream whose SYMBOLS carry only module
 * and offset (as collectors send them) is stored with function, file and
 * line resolved from the module's file, C++ names demangled and inlined
 * functions as frames of their own; a build the server cannot find keeps
 * module+offset; --symbol-path finds a copy by build id when the path the
 * collector named is not to be read; a build is read once for every run.
 *
 * The pcs are this test's own call sites (return addresses taken with
 * __builtin_return_address), so the expected names and lines are known. */
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
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "hs_symbols.h"
#include "hs_testkit.h"

/* ---- known call sites -------------------------------------------------- */

uint64_t sym_ret_addr(void);
__attribute__((noinline)) uint64_t sym_ret_addr(void)
{
    return (uint64_t)__builtin_return_address(0);
}

uint64_t sym_cxx_site(int *line); /* sym_sites_cxx.cpp */

static int c_line, inl_line, outer_line, cxx_line;

__attribute__((noinline)) static uint64_t sym_c_site(void)
{
    c_line = __LINE__ + 1;
    uint64_t pc = sym_ret_addr();
    return pc;
}

static inline __attribute__((always_inline)) uint64_t sym_inl_site(void)
{
    inl_line = __LINE__ + 1;
    uint64_t pc = sym_ret_addr();
    return pc;
}

__attribute__((noinline)) static uint64_t sym_outer_site(void)
{
    outer_line = __LINE__ + 1;
    uint64_t pc = sym_inl_site();
    return pc;
}

/* ---- this executable as a module --------------------------------------- */

static char exe[PATH_MAX];
static uint8_t bid[64];
static size_t blen;
static uint64_t load_bias;

static void self_init(void)
{
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    assert_true(n > 0);
    exe[n] = 0;
    tk_self_build_id(bid, sizeof bid, &blen, &load_bias);
    assert_true(blen >= 8);
}

static hs_str str(const char *s)
{
    return (hs_str){s, strlen(s)};
}

/* One run: MAPPINGS (this executable), SYMBOLS without names for the three
 * sites, a stack of each, an allocation on each, BYE. */
static void send_run_maps(int port, uint8_t seed, int with_maps)
{
    uint64_t pcs[3] = {sym_c_site(), sym_outer_site(), sym_cxx_site(&cxx_line)};
    tk_buf b = {0};
    uint8_t run_id[16];
    memset(run_id, seed, sizeof run_id);
    tk_header(&b);
    tk_hello(&b, run_id, 1, 0, NULL);
    hs_wr wr = tk_buf_wr(&b, 8192);
    size_t pos = hs_frame_begin(&wr, HS_FRAME_MAPPINGS);
    hs_wr_varint(&wr, with_maps ? 0 : 1);
    hs_mapping m = {.start = load_bias + 0x1000,
                    .end = load_bias + 0x100000,
                    .file_offset = 0x1000,
                    .build_id = bid,
                    .build_id_len = (uint32_t)blen,
                    .path = str(exe)};
    if (with_maps) hs_mapping_put(&wr, &m);
    hs_frame_end(&wr, pos);
    pos = hs_frame_begin(&wr, HS_FRAME_SYMBOLS);
    for (int i = 0; i < 3; i++) {
        hs_symbol s = {.pc = pcs[i],
                       .function = str(""),
                       .file = str(""),
                       .module = str(exe),
                       .module_offset = pcs[i] - load_bias};
        hs_symbol_put(&wr, &s);
    }
    hs_frame_end(&wr, pos);
    tk_buf_commit(&b, &wr);
    tk_event ev[3];
    for (uint64_t i = 0; i < 3; i++) {
        tk_stack(&b, i + 1, &pcs[i], 1);
        ev[i] = (tk_event){.t = 1000 * (i + 1), .stack = i + 1, .size = 64, .weight = 64};
    }
    tk_events(&b, ev, 3);
    tk_bye(&b, 10000, 3, 0);
    int fd = tk_connect(port);
    assert_true(fd >= 0);
    assert_int_equal(tk_send(fd, b.p, b.len), 0);
    uint64_t got = 0;
    assert_int_equal(tk_wait_ack(fd, 8, &got, NULL, 0, 30000), 0); /* 7 frames after HELLO */
    close(fd);
    tk_buf_free(&b);
}

static void send_run(int port, uint8_t seed)
{
    send_run_maps(port, seed, 1);
}

/* "function|file basename|line" of the frames of stack id's trace in the
 * last run, innermost first, joined by " < ". */
static void trace_text(sqlite3 *db, int stack, char *out, size_t len)
{
    sqlite3_stmt *st;
    const char *sql = "WITH RECURSIVE up(id, parent, frame, d) AS ("
                      " SELECT t.id, t.parent, t.frame, 0 FROM traces t JOIN run_stacks rs"
                      "  ON rs.trace = t.id WHERE rs.run = (SELECT max(id) FROM runs)"
                      "  AND rs.stack_id = ?1"
                      " UNION ALL SELECT t.id, t.parent, t.frame, up.d + 1 FROM traces t"
                      "  JOIN up ON t.id = up.parent)"
                      " SELECT f.function, f.file, f.line, f.module_offset FROM up"
                      " JOIN frames f ON f.id = up.frame ORDER BY up.d";
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    sqlite3_bind_int(st, 1, stack);
    size_t n = 0;
    out[0] = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *fn = (const char *)sqlite3_column_text(st, 0);
        const char *file = (const char *)sqlite3_column_text(st, 1);
        const char *slash = strrchr(file, '/');
        if (fn[0])
            n += (size_t)snprintf(out + n, len - n, "%s%s|%s|%d", n ? " < " : "", fn,
                                  slash ? slash + 1 : file, sqlite3_column_int(st, 2));
        else
            n += (size_t)snprintf(out + n, len - n, "%s+0x%llx", n ? " < " : "",
                                  (unsigned long long)sqlite3_column_int64(st, 3));
        assert_true(n < len);
    }
    sqlite3_finalize(st);
}

static void check_named(const char *db_path)
{
    sqlite3 *db;
    assert_int_equal(sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    char got[1024], want[1024];
    trace_text(db, 1, got, sizeof got);
    snprintf(want, sizeof want, "sym_c_site|test_symbols.c|%d", c_line);
    assert_string_equal(got, want);
    trace_text(db, 2, got, sizeof got);
    snprintf(want, sizeof want, "sym_inl_site|test_symbols.c|%d < sym_outer_site|test_symbols.c|%d",
             inl_line, outer_line);
    assert_string_equal(got, want);
    trace_text(db, 3, got, sizeof got);
    snprintf(want, sizeof want, "hs_t::Widget<long>::grow(int*)|sym_sites_cxx.cpp|%d", cxx_line);
    assert_string_equal(got, want);
    sqlite3_close(db);
}

static void test_named_once_per_build(void **state)
{
    (void)state;
    char dir[512], db[600];
    tk_tmpdir(dir, sizeof dir, "symbols");
    snprintf(db, sizeof db, "%s/h.db", dir);
    tk_server srv;
    assert_int_equal(tk_server_start(&srv, db, 0, NULL), 0);
    send_run(srv.port, 1);
    check_named(db);
    send_run(srv.port, 2); /* a second run of the same build */
    check_named(db);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
    /* 6 pcs named, the build read once for both runs */
    assert_true(tk_log_contains(&srv, "symbols: 6 pcs named"));
    assert_true(tk_log_contains(&srv, "(1 builds read, 0 not found;"));
}

/* The answers are kept in the database (symbol_cache): a server started
 * again on it names the same build's frames without reading its file. */
static void test_cache_survives_restart(void **state)
{
    (void)state;
    char dir[512], db[600];
    tk_tmpdir(dir, sizeof dir, "symbols-restart");
    snprintf(db, sizeof db, "%s/h.db", dir);
    tk_server srv;
    assert_int_equal(tk_server_start(&srv, db, 0, NULL), 0);
    send_run(srv.port, 6);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
    assert_true(tk_log_contains(&srv, "(1 builds read, 0 not found;"));
    assert_int_equal(tk_server_start(&srv, db, 0, NULL), 0);
    send_run(srv.port, 7);
    check_named(db);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
    assert_true(tk_log_contains(&srv, "(0 builds read, 0 not found; 3 of 3 lookups cached, 3 by "
                                      "the database)"));
}

/* A collector from before (it named frames itself) sent a pc's inlined
 * frames under their synthetic pcs, in SYMBOLS and in the stack: the
 * server stores that stack as sent, not expanded a second time. */
static void test_old_collector_inlined(void **state)
{
    (void)state;
    char dir[512], db[600];
    tk_tmpdir(dir, sizeof dir, "symbols-old");
    snprintf(db, sizeof db, "%s/h.db", dir);
    tk_server srv;
    assert_int_equal(tk_server_start(&srv, db, 0, NULL), 0);
    const uint64_t pc = 0x401234, inl = hs_inl_pc(pc, 0);
    tk_buf b = {0};
    uint8_t run_id[16];
    memset(run_id, 9, sizeof run_id);
    tk_header(&b);
    tk_hello(&b, run_id, 1, 0, NULL);
    hs_wr wr = tk_buf_wr(&b, 4096);
    size_t pos = hs_frame_begin(&wr, HS_FRAME_SYMBOLS);
    hs_symbol in = {.pc = inl,
                    .function = str("inner"),
                    .file = str("a.c"),
                    .line = 7,
                    .module = str("/old/prog"),
                    .module_offset = 0x1234};
    hs_symbol out = in;
    out.pc = pc;
    out.function = str("outer");
    out.line = 20;
    hs_symbol_put(&wr, &in);
    hs_symbol_put(&wr, &out);
    hs_frame_end(&wr, pos);
    tk_buf_commit(&b, &wr);
    const uint64_t pcs[2] = {inl, pc};
    tk_stack(&b, 1, pcs, 2);
    tk_event ev = {.t = 1000, .stack = 1, .size = 64, .weight = 64};
    tk_events(&b, &ev, 1);
    tk_bye(&b, 2000, 1, 0);
    int fd = tk_connect(srv.port);
    assert_true(fd >= 0);
    assert_int_equal(tk_send(fd, b.p, b.len), 0);
    uint64_t got = 0;
    assert_int_equal(tk_wait_ack(fd, 5, &got, NULL, 0, 30000), 0);
    close(fd);
    tk_buf_free(&b);
    sqlite3 *sdb;
    assert_int_equal(sqlite3_open_v2(db, &sdb, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    char text[256];
    trace_text(sdb, 1, text, sizeof text);
    assert_string_equal(text, "inner|a.c|7 < outer|a.c|20");
    sqlite3_close(sdb);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
}

/* A stream whose MAPPINGS do not name the module (taken up in the middle,
 * after a server restart): named from the file at the module's path. */
static void test_no_mappings(void **state)
{
    (void)state;
    char dir[512], db[600];
    tk_tmpdir(dir, sizeof dir, "symbols-nomaps");
    snprintf(db, sizeof db, "%s/h.db", dir);
    tk_server srv;
    assert_int_equal(tk_server_start(&srv, db, 0, NULL), 0);
    send_run_maps(srv.port, 8, 0);
    check_named(db);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
}

static void test_build_not_found(void **state)
{
    (void)state;
    char dir[512], db[600];
    tk_tmpdir(dir, sizeof dir, "symbols-none");
    snprintf(db, sizeof db, "%s/h.db", dir);
    tk_server srv;
    const char *args[] = {"--no-local-symbols", NULL};
    assert_int_equal(tk_server_start(&srv, db, 0, args), 0);
    send_run(srv.port, 3);
    sqlite3 *sdb;
    assert_int_equal(sqlite3_open_v2(db, &sdb, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    char got[256], want[256];
    trace_text(sdb, 1, got, sizeof got);
    snprintf(want, sizeof want, "+0x%llx", (unsigned long long)(sym_c_site() - load_bias));
    assert_string_equal(got, want); /* module + offset, nothing invented */
    sqlite3_close(sdb);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
    assert_true(tk_log_contains(&srv, "(0 builds read, 1 not found;"));
}

static void test_symbol_path(void **state)
{
    (void)state;
    char dir[512], db[600], lib[600], cmd[8192];
    tk_tmpdir(dir, sizeof dir, "symbols-path");
    snprintf(db, sizeof db, "%s/h.db", dir);
    snprintf(lib, sizeof lib, "%s/files", dir);
    /* a copy under its file name elsewhere: found by name, checked by build id */
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s' '%s/'", lib, exe, lib);
    assert_int_equal(system(cmd), 0);
    tk_server srv;
    const char *args[] = {"--no-local-symbols", "--symbol-path", lib, NULL};
    assert_int_equal(tk_server_start(&srv, db, 0, args), 0);
    send_run(srv.port, 4);
    check_named(db);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
}

/* A stripped build's debug file kept aside, added with `heapstore symbols
 * add`: a server that reads no local files names the frames from it. */
static void test_symbols_add(void **state)
{
    (void)state;
    char dir[512], db[600], dbg[600], cmd[8192];
    tk_tmpdir(dir, sizeof dir, "symbols-add");
    snprintf(db, sizeof db, "%s/h.db", dir);
    snprintf(dbg, sizeof dbg, "%s/self.debug", dir);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && objcopy --only-keep-debug '%s' '%s'", dir, exe,
             dbg);
    assert_int_equal(system(cmd), 0);
    const char *build = getenv("HS_BUILD_DIR");
    snprintf(cmd, sizeof cmd, "'%s/bin/heapstore' symbols add --db '%s' '%s' > '%s/add.out'",
             build ? build : "build", db, dbg, dir);
    assert_int_equal(system(cmd), 0);
    /* not an ELF file: refused, with a reason, exit 1 */
    snprintf(cmd, sizeof cmd, "'%s/bin/heapstore' symbols add --db '%s' '%s' 2>/dev/null",
             build ? build : "build", db, db);
    assert_int_not_equal(system(cmd), 0);
    tk_server srv;
    const char *args[] = {"--no-local-symbols", NULL};
    assert_int_equal(tk_server_start(&srv, db, 0, args), 0);
    send_run(srv.port, 5);
    check_named(db);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
}

/* A peer naming ever new builds cannot grow the symbolizer past its cap:
 * 300 unknown build ids, 256 kept; a known one found again after them. */
static void test_builds_capped(void **state)
{
    (void)state;
    hs_syms *s;
    assert_int_equal(hs_syms_new(&s, NULL), 0);
    hs_symbol out[HS_SYMS_INLINE_MAX];
    for (uint32_t i = 0; i < 300; i++) {
        uint8_t fake[20] = {0xee};
        memcpy(fake + 1, &i, sizeof i);
        assert_int_equal(hs_syms_lookup(s, fake, sizeof fake, "/nonexistent/lib.so", 16, out, 4),
                         0);
    }
    hs_syms_stats st = hs_syms_get_stats(s);
    assert_int_equal(st.builds_missing, 300);
    assert_int_equal(st.builds_kept, 256);
    uint64_t pc = sym_c_site();
    assert_int_equal(hs_syms_lookup(s, bid, blen, exe, pc - load_bias, out, 4), 1);
    assert_int_equal(strncmp(out[0].function.ptr, "sym_c_site", out[0].function.len), 0);
    hs_syms_free(s);
}

int main(void)
{
    self_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_named_once_per_build), cmocka_unit_test(test_cache_survives_restart),
        cmocka_unit_test(test_build_not_found),      cmocka_unit_test(test_symbol_path),
        cmocka_unit_test(test_symbols_add),          cmocka_unit_test(test_builds_capped),
        cmocka_unit_test(test_no_mappings),          cmocka_unit_test(test_old_collector_inlined),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

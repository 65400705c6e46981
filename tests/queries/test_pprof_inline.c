/* test_pprof_inline: pprof files name inlined functions as profile.proto
 * means them. tests/collector/wl_inline.c allocates from grab, inlined into
 * fill, inlined into holder; run by `heapstore run --sample 1` into a fresh
 * database and exported with `heapstore export --format pprof`, the file is
 * read by `go tool pprof` (skipped where go is missing):
 *
 * - `-raw`: grab, fill and holder are the lines of one location, innermost
 *   first, at an address inside wl_inline's mapping (and no location has an
 *   address outside every mapping but Python's, which have none);
 * - `-traces`: the stack reads grab (inline), fill (inline), holder, main. */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "fixture.h"
#include "hs_testkit.h"

static char db[512], pb[512], cli[512], wl[512];

static char *run_ok(const char *const *argv)
{
    tk_out o;
    assert_int_equal(
        tk_run(&o, argv, (const char *const[]){"HEAPSTORE_URL=", NULL}, TK_PRELOAD_NONE, 0), 0);
    if (o.code) fprintf(stderr, "%s: %s\n%s\n", argv[1], o.out, o.err);
    assert_int_equal(o.code, 0);
    free(o.err);
    return o.out;
}

static int setup(void **state)
{
    (void)state;
    fx_tmp_path(db, sizeof db, "inline.db");
    fx_tmp_path(pb, sizeof pb, "inline.pb.gz");
    snprintf(cli, sizeof cli, "%s", tk_build_path("bin/heapstore"));
    const char *b = getenv("HS_BUILD_DIR");
    snprintf(wl, sizeof wl, "%s/tests/wl_inline", b ? b : ".");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -f '%s'* '%s'", db, pb);
    return system(cmd) == 0 ? 0 : -1;
}

typedef struct mapping {
    uint64_t lo, hi;
} mapping;

/* -raw's mappings: "ID: 0xLO/0xHI/0xOFF PATH …", by id (1 up). */
static int read_mappings(const char *raw, mapping *m, int max)
{
    const char *p = strstr(raw, "\nMappings\n");
    assert_non_null(p);
    int n = 0;
    for (p += 10; *p && n < max; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : p + strlen(p)) {
        int id;
        uint64_t lo, hi;
        if (sscanf(p, "%d: 0x%" SCNx64 "/0x%" SCNx64, &id, &lo, &hi) != 3) break;
        assert_int_equal(id, n + 1);
        m[n++] = (mapping){lo, hi};
    }
    return n;
}

static void test_inline_locations(void **state)
{
    (void)state;
    if (system("go version >/dev/null 2>&1")) {
        fprintf(stderr, "no go: skipped\n");
        skip();
    }
    free(run_ok((const char *const[]){cli, "run", "--sample", "1", "--db", db, "--", wl, NULL}));
    free(run_ok((const char *const[]){cli, "export", "latest", "--db", db, "--format", "pprof",
                                      "-o", pb, NULL}));
    char *raw =
        run_ok((const char *const[]){"/usr/bin/env", "go", "tool", "pprof", "-raw", pb, NULL});
    mapping maps[256];
    int nmaps = read_mappings(raw, maps, 256);
    assert_true(nmaps > 0);
    /* every location: "  ID: 0xADDR M=MID FUNCTION FILE:LINE s=0", its
     * inlined lines under it, indented further */
    const char *p = strstr(raw, "\nLocations\n"), *end = strstr(raw, "\nMappings\n");
    assert_non_null(p);
    int found = 0;
    for (p += 11; p < end; p = strchr(p, '\n') + 1) {
        int id, mid;
        uint64_t addr;
        char fn[256];
        if (sscanf(p, " %d: 0x%" SCNx64 " M=%d %255s", &id, &addr, &mid, fn) != 4) continue;
        /* native frames sit in their mapping; Python's frames have none */
        if (mid) assert_true(mid <= nmaps && addr >= maps[mid - 1].lo && addr < maps[mid - 1].hi);
        if (strcmp(fn, "grab")) continue;
        found++;
        char f2[256], f3[256];
        const char *l2 = strchr(p, '\n') + 1, *l3 = strchr(l2, '\n') + 1;
        assert_int_equal(sscanf(l2, " %255s", f2), 1);
        assert_int_equal(sscanf(l3, " %255s", f3), 1);
        assert_string_equal(f2, "fill");
        assert_string_equal(f3, "holder");
        assert_true(mid > 0);
    }
    assert_int_equal(found, 1);
    free(raw);

    char *tr =
        run_ok((const char *const[]){"/usr/bin/env", "go", "tool", "pprof", "-traces", pb, NULL});
    const char *g = strstr(tr, "grab (inline)");
    if (!g) fprintf(stderr, "%s\n", tr);
    assert_non_null(g);
    char f[4][64];
    assert_int_equal(sscanf(g, "grab (inline) %63s (inline) %63s %63s", f[0], f[1], f[2]), 3);
    assert_string_equal(f[0], "fill");
    assert_string_equal(f[1], "holder");
    assert_string_equal(f[2], "main");
    free(tr);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_inline_locations),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

/* test_symcache: the stored symbol cache (schema/hs_symcache.c). Blocks of
 * inlined chains, shared and empty strings, offsets near 0 and 2^64 and
 * lines past 2^32 come back as they went in; every truncation of a block and
 * a changed byte in its header are refused, not misread, and leave the
 * block decoded into as it was. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hs_error.h"
#include "hs_symcache.h"

static hs_str S(const char *s)
{
    return (hs_str){s, strlen(s)};
}

/* Entry i of a made-up build: 1 to 4 frames from a few files and names,
 * sometimes no function at all; offsets step by varying amounts. */
static uint64_t offset_of(size_t i)
{
    return 0x1000 + i * 24 + (i % 7) * 3;
}

static int frames_of(size_t i, hs_symcache_frame *fr, char names[4][64])
{
    static const char *const files[] = {"/tmp/build-x/Modules/_bisectmodule.c",
                                        "/tmp/build-x/Objects/listobject.c",
                                        "/tmp/build-x/Include/internal/pycore_list.h", ""};
    int n = 1 + (int)(i % 4);
    for (int k = 0; k < n; k++) {
        snprintf(names[k], 64, "fn_%zu", (i * 7 + (size_t)k) % 300);
        fr[k].function = i % 11 == 0 && k == n - 1 ? S("") : S(names[k]);
        fr[k].file = S(files[(i + (size_t)k) % 4]);
        fr[k].line = (i % 13 == 0) ? (1ull << 40) + i : 10 + i % 2000;
    }
    return n;
}

static void fill(hs_symcache_block *b, size_t n, size_t from)
{
    for (size_t i = from; i < from + n; i++) {
        hs_symcache_frame fr[4];
        char names[4][64];
        int k = frames_of(i, fr, names);
        assert_int_equal(hs_symcache_add(b, offset_of(i), fr, k), 1);
        assert_int_equal(hs_symcache_add(b, offset_of(i), fr, k), 0); /* once an offset */
    }
}

static void check_entry(const hs_symcache_block *b, size_t i)
{
    hs_symcache_frame want[4], got[HS_SYMCACHE_FRAMES_MAX];
    char names[4][64];
    int n = frames_of(i, want, names);
    assert_int_equal(hs_symcache_get(b, offset_of(i), got, HS_SYMCACHE_FRAMES_MAX), n);
    for (int k = 0; k < n; k++) {
        assert_int_equal(got[k].function.len, want[k].function.len);
        assert_memory_equal(got[k].function.ptr, want[k].function.ptr, want[k].function.len);
        assert_int_equal(got[k].file.len, want[k].file.len);
        assert_memory_equal(got[k].file.ptr, want[k].file.ptr, want[k].file.len);
        assert_int_equal(got[k].line, want[k].line);
    }
}

static void test_codec_roundtrip(void **state)
{
    (void)state;
    hs_symcache_block a = {0}, b = {0};
    fill(&a, HS_SYMCACHE_BLOCK_ENTRIES, 0);
    hs_buf blob = {0};
    assert_int_equal(hs_symcache_encode(&a, &blob), 0);
    /* strings once a block, zstd over it: a few bytes an entry */
    assert_true(blob.n < HS_SYMCACHE_BLOCK_ENTRIES * 4);
    assert_int_equal(hs_symcache_decode(&b, blob.p, blob.n), 0);
    assert_int_equal(b.n, a.n);
    for (size_t i = 0; i < HS_SYMCACHE_BLOCK_ENTRIES; i++) check_entry(&b, i);
    hs_symcache_frame fr[1];
    assert_int_equal(hs_symcache_get(&b, offset_of(0) + 1, fr, 1), 0);
    assert_int_equal(hs_symcache_get(&b, offset_of(3), fr, 1), 1); /* at most max */

    /* every truncation is refused and leaves what was decoded into alone */
    hs_symcache_block c = {0};
    fill(&c, 5, 1000000);
    for (size_t cut = 0; cut < blob.n; cut += 1 + cut / 8) {
        assert_int_equal(hs_symcache_decode(&c, blob.p, cut), HS_ECORRUPT);
        assert_int_equal(c.n, 5);
    }
    /* a header that promises another version or counts */
    for (size_t at = 0; at < 4; at++) {
        blob.p[at] ^= 1;
        assert_int_equal(hs_symcache_decode(&c, blob.p, blob.n), HS_ECORRUPT);
        blob.p[at] ^= 1;
    }
    assert_int_equal(c.n, 5);
    for (size_t i = 1000000; i < 1000005; i++) check_entry(&c, i);
    /* decoded into a block with entries: those are kept, the rest added */
    assert_int_equal(hs_symcache_decode(&c, blob.p, blob.n), 0);
    assert_int_equal(c.n, 5 + HS_SYMCACHE_BLOCK_ENTRIES);
    check_entry(&c, 17);
    check_entry(&c, 1000004);
    hs_buf_free(&blob);
    hs_symcache_free(&a);
    hs_symcache_free(&b);
    hs_symcache_free(&c);
}

/* Offsets at the ends of the range, one frame, strings at their bounds. */
static void test_codec_edges(void **state)
{
    (void)state;
    static char fn[HS_FUNC_MAX], file[HS_STR_MAX];
    memset(fn, 'f', sizeof fn);
    memset(file, '/', sizeof file);
    hs_symcache_frame big = {{fn, sizeof fn}, {file, sizeof file}, UINT64_MAX};
    hs_symcache_frame none = {S(""), S(""), 0};
    hs_symcache_block a = {0}, b = {0};
    assert_int_equal(hs_symcache_add(&a, UINT64_MAX, &big, 1), 1);
    assert_int_equal(hs_symcache_add(&a, 0, &none, 1), 1);
    hs_symcache_frame chain[HS_SYMCACHE_FRAMES_MAX];
    for (int k = 0; k < HS_SYMCACHE_FRAMES_MAX; k++) chain[k] = big;
    assert_int_equal(hs_symcache_add(&a, 1, chain, HS_SYMCACHE_FRAMES_MAX), 1);
    assert_int_equal(hs_symcache_entry_bytes(chain, HS_SYMCACHE_FRAMES_MAX),
                     HS_SYMCACHE_FRAMES_MAX * (sizeof fn + sizeof file));
    assert_int_equal(hs_symcache_str_bytes(&a), sizeof fn + sizeof file); /* kept once */
    hs_buf blob = {0};
    assert_int_equal(hs_symcache_encode(&a, &blob), 0);
    assert_int_equal(hs_symcache_decode(&b, blob.p, blob.n), 0);
    hs_symcache_frame got[HS_SYMCACHE_FRAMES_MAX];
    assert_int_equal(hs_symcache_get(&b, UINT64_MAX, got, 4), 1);
    assert_int_equal(got[0].function.len, sizeof fn);
    assert_int_equal(got[0].file.len, sizeof file);
    assert_true(got[0].line == UINT64_MAX);
    assert_int_equal(hs_symcache_get(&b, 0, got, 4), 1);
    assert_int_equal(got[0].function.len + got[0].file.len + got[0].line, 0);
    assert_int_equal(hs_symcache_get(&b, 1, got, HS_SYMCACHE_FRAMES_MAX), HS_SYMCACHE_FRAMES_MAX);
    /* offsets are given back in the order added; stored by offset */
    assert_true(hs_symcache_offset_at(&b, 0) == 0 && hs_symcache_offset_at(&b, 2) == UINT64_MAX);
    hs_buf_free(&blob);
    /* stored as they are when zstd does not pay: one entry of short strings */
    hs_symcache_clear(&a);
    hs_symcache_clear(&b);
    hs_symcache_frame one = {S("f"), S("a.c"), 3};
    assert_int_equal(hs_symcache_add(&a, 9, &one, 1), 1);
    assert_int_equal(hs_symcache_encode(&a, &blob), 0);
    assert_int_equal(hs_symcache_decode(&b, blob.p, blob.n), 0);
    assert_int_equal(hs_symcache_get(&b, 9, got, 1), 1);
    assert_int_equal(got[0].line, 3);
    hs_buf_free(&blob);
    /* not a block */
    assert_int_equal(hs_symcache_decode(&b, "", 0), HS_ECORRUPT);
    assert_int_equal(hs_symcache_decode(&b, "\x02\x01\x01\x01\x00", 5), HS_ECORRUPT);
    hs_symcache_free(&a);
    hs_symcache_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec_roundtrip),
        cmocka_unit_test(test_codec_edges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Unit tests of common/hs_evcodec, the storage codec of events: round trips
 * of known batches (extreme values, equal times, a time quantum, batches
 * that do and do not compress), the same bytes for the same events, rows of
 * a database from before the codec, and corrupt blobs (every truncation,
 * every flipped byte, forged headers), which must give an error and never a
 * read out of bounds (the sanitizer build checks that). Segments (codec
 * version 2): every blob taken while a segment grows (its zstd part only
 * flushed, the last bytes uncompressed) and its final blob give back every
 * event so far, in order, with times that go back between frames; a
 * repetitive run compresses to a known bound; corrupt segments fail. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hs_error.h"
#include "hs_evcodec.h"
#include "hs_proto.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Encodes n events with quantum q; returns a malloc'd copy of the blob. */
static uint8_t *encode(const hs_event *ev, size_t n, uint64_t q, size_t *len)
{
    hs_evenc enc = {0};
    hs_evenc_begin(&enc, q);
    for (size_t i = 0; i < n; i++) hs_evenc_add(&enc, &ev[i]);
    const uint8_t *out;
    assert_int_equal(hs_evenc_finish(&enc, &out, len), 0);
    uint8_t *copy = malloc(*len);
    assert_non_null(copy);
    memcpy(copy, out, *len);
    hs_evenc_free(&enc);
    return copy;
}

/* Decodes blob and checks it gives ev back (times rounded down to
 * multiples of q), twice (rewind). */

static void check_round_trip(const hs_event *ev, size_t n, uint64_t q)
{
    size_t len;
    uint8_t *blob = encode(ev, n, q, &len);
    hs_evdec dec = {0};
    assert_int_equal(hs_evdec_open(&dec, blob, len), 0);
    assert_int_equal(hs_evdec_count(&dec), n);
    for (int pass = 0; pass < 2; pass++) {
        hs_event e;
        for (size_t i = 0; i < n; i++) {
            assert_int_equal(hs_evdec_next(&dec, &e), 1);
            uint64_t t = ev[i].t_ns / q * q;
            assert_int_equal(e.t_ns, t);
            assert_int_equal(e.stack_id, ev[i].stack_id);
            assert_int_equal(e.is_free, ev[i].is_free);
            assert_int_equal(e.size, ev[i].size);
            assert_int_equal(e.weight, ev[i].weight);
        }
        assert_int_equal(hs_evdec_next(&dec, &e), 0);
        assert_int_equal(hs_evdec_next(&dec, &e), 0);
        hs_evdec_rewind(&dec);
    }
    hs_evdec_free(&dec);
    free(blob);
}

static void test_round_trip_table(void **state)
{
    (void)state;
    static const hs_event one[] = {{5, 1, 0, 48, 48}};
    static const hs_event zero_time[] = {{0, 1, 0, 0, 0}, {0, 1, 1, 0, 0}};
    static const hs_event extremes[] = {
        {0, 1, 0, 1, 1},
        {UINT64_MAX >> 1, UINT64_MAX >> 1, 1, UINT64_MAX >> 1, UINT64_MAX >> 1},
        {UINT64_MAX, UINT64_MAX >> 1, 0, UINT64_MAX, UINT64_MAX},
        {UINT64_MAX, 1, 1, 0, UINT64_MAX},
    };
    static const hs_event sampled[] = {
        {1000, 3, 0, 24, 524312},
        {1000, 3, 0, 24, 524312},
        {2500, 7, 1, 4096, 530000},
        {9999, 2, 0, 1 << 20, 1 << 20},
    };
    static const struct {
        const hs_event *ev;
        size_t n;
        uint64_t q;
    } cases[] = {
        {one, HS_COUNTOF(one), 1},
        {zero_time, HS_COUNTOF(zero_time), 1},
        {extremes, HS_COUNTOF(extremes), 1},
        {sampled, HS_COUNTOF(sampled), 1},
        {sampled, HS_COUNTOF(sampled), 1000},
        {extremes, HS_COUNTOF(extremes), 7},
    };
    for (size_t i = 0; i < HS_COUNTOF(cases); i++)
        check_round_trip(cases[i].ev, cases[i].n, cases[i].q);
}

/* A long every-allocation-like batch (a few stacks and sizes, small time
 * steps: it compresses) and a batch of random values (it does not: the
 * columns are stored as they are), both far past the buffers' first size. */
static hs_event *make_batch(size_t n, int random)
{
    hs_event *ev = calloc(n, sizeof *ev);
    assert_non_null(ev);
    uint64_t t = 123456789;
    for (size_t i = 0; i < n; i++) {
        uint64_t r = next_rand();
        t += random ? r >> 40 : 200 + r % 64;
        ev[i].t_ns = t;
        ev[i].stack_id = random ? (next_rand() >> 1) | 1 : 1 + r % 8;
        ev[i].is_free = (int)(r >> 63);
        ev[i].size = random ? next_rand() >> 8 : 16u << (r % 5);
        ev[i].weight = ev[i].size + (random ? next_rand() >> 8 : 0);
    }
    return ev;
}

static void test_round_trip_large(void **state)
{
    (void)state;
    const size_t n = 200000;
    for (int random = 0; random < 2; random++) {
        hs_event *ev = make_batch(n, random);
        check_round_trip(ev, n, 1);
        check_round_trip(ev, n, 1000);
        size_t len;
        uint8_t *blob = encode(ev, n, 1, &len);
        if (!random) assert_true(len < n * 3); /* compressed: the columns take 5 bytes an event */
        if (random) assert_true(len < n * 40 + 64); /* stored: never much above the columns */
        free(blob);
        free(ev);
    }
}

/* The same events give the same bytes, whatever the encoder held before. */
static void test_deterministic(void **state)
{
    (void)state;
    hs_event *big = make_batch(5000, 1), *small = make_batch(300, 0);
    size_t la, lb;
    uint8_t *a = encode(small, 300, 1, &la);
    hs_evenc enc = {0};
    const uint8_t *out;
    size_t len;
    for (int round = 0; round < 2; round++) {
        hs_evenc_begin(&enc, 1);
        const hs_event *ev = round ? small : big;
        size_t n = round ? 300 : 5000;
        for (size_t i = 0; i < n; i++) hs_evenc_add(&enc, &ev[i]);
        assert_int_equal(hs_evenc_finish(&enc, &out, &len), 0);
    }
    lb = len;
    assert_int_equal(la, lb);
    assert_memory_equal(a, out, la);
    hs_evenc_begin(&enc, 1); /* nothing added */
    assert_int_equal(hs_evenc_finish(&enc, &out, &len), HS_EINVAL);
    hs_evenc_free(&enc);
    hs_evenc_free(NULL);
    free(a);
    free(big);
    free(small);
}

/* Decodes whatever p holds to the end; returns the first error or 0, and
 * the number of events it gave. */
static int drain(hs_evdec *dec, const uint8_t *p, size_t len, size_t *n)
{
    *n = 0;
    int rc = hs_evdec_open(dec, p, len);
    if (rc) return rc;
    hs_event e;
    while ((rc = hs_evdec_next(dec, &e)) == 1) {
        assert_true(e.stack_id > 0);
        assert_true(e.weight >= e.size);
        (*n)++;
    }
    return rc;
}

static void test_corrupt_every_byte(void **state)
{
    (void)state;
    for (int random = 0; random < 2; random++) {
        const size_t n = 64;
        hs_event *ev = make_batch(n, random);
        size_t len;
        uint8_t *blob = encode(ev, n, 1, &len);
        hs_evdec dec = {0};
        size_t got;
        /* every truncation: an error, never an event more than encoded */
        for (size_t cut = 0; cut < len; cut++) {
            uint8_t *p = malloc(cut ? cut : 1); /* exact size: ASan sees overreads */
            memcpy(p, blob, cut);
            int rc = drain(&dec, p, cut, &got);
            assert_true(rc == HS_ECORRUPT);
            assert_true(got <= n);
            free(p);
        }
        /* every byte flipped: an error or a batch that still decodes whole */
        for (size_t i = 0; i < len; i++) {
            for (unsigned bit = 0; bit < 8; bit += 3) {
                uint8_t *p = malloc(len);
                memcpy(p, blob, len);
                p[i] ^= (uint8_t)(1u << bit);
                int rc = drain(&dec, p, len, &got);
                assert_true(rc == 0 || rc == HS_ECORRUPT || rc == HS_EVERSION);
                free(p);
            }
        }
        /* trailing bytes after a valid blob */
        uint8_t *p = malloc(len + 1);
        memcpy(p, blob, len);
        p[len] = 0;
        assert_int_equal(drain(&dec, p, len + 1, &got), HS_ECORRUPT);
        free(p);
        hs_evdec_free(&dec);
        free(blob);
        free(ev);
    }
}

/* Forged headers: each field at a value the decoder must refuse. */
static void test_corrupt_headers(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        size_t len;
        int rc;
    } cases[] = {
        {"", 0, HS_ECORRUPT},
        {"\x00", 1, HS_ECORRUPT},                                 /* version 0 */
        {"\x03\x01\x00\x01\x00\x00\x01\x01\x01", 9, HS_EVERSION}, /* a later codec */
        {"\x01", 1, HS_ECORRUPT},
        /* n = 0 */
        {"\x01\x00\x00\x01\x00\x00\x00\x00\x00", 9, HS_ECORRUPT},
        /* q = 0 */
        {"\x01\x01\x00\x00\x00\x00\x01\x01\x01\x02\x01\x01", 12, HS_ECORRUPT},
        /* n = 2 with one value a column */
        {"\x01\x02\x00\x01\x00\x01\x01\x01\x01\x01\x02\x01\x01", 13, HS_ECORRUPT},
        /* an unknown method */
        {"\x01\x01\x00\x01\x07\x00\x01\x01\x01\x02\x01\x01", 12, HS_ECORRUPT},
        /* column lengths past the limit */
        {"\x01\x01\x00\x01\x00\x00\xff\xff\xff\xff\x0f\x01\x01\x02\x01\x01", 16, HS_ECORRUPT},
        /* stored columns longer than the bytes present */
        {"\x01\x01\x00\x01\x00\x00\x01\x01\x05\x02\x01", 11, HS_ECORRUPT},
        /* a compressed body that is not a zstd frame */
        {"\x01\x01\x00\x01\x01\x00\x01\x01\x01\xde\xad\xbe\xef", 13, HS_ECORRUPT},
    };
    hs_evdec dec = {0};
    for (size_t i = 0; i < HS_COUNTOF(cases); i++) {
        uint8_t *p = malloc(cases[i].len ? cases[i].len : 1);
        memcpy(p, cases[i].in, cases[i].len);
        size_t got;
        assert_int_equal(drain(&dec, p, cases[i].len, &got), cases[i].rc);
        free(p);
    }
    /* a stored blob of one event with stack id 0 (head 0 or 1) */
    static const uint8_t head0[] = {1, 1, 0, 1, 0, 0, 1, 1, 1, 1, 5, 0};
    size_t got;
    assert_int_equal(drain(&dec, head0, sizeof head0, &got), HS_ECORRUPT);
    static const uint8_t good[] = {1, 1, 0, 1, 0, 0, 1, 1, 1, 2, 5, 0};
    assert_int_equal(drain(&dec, good, sizeof good, &got), 0);
    assert_int_equal(got, 1);
    assert_string_equal(hs_strerror(HS_ECORRUPT), "stored data is corrupt");
    hs_evdec_free(&dec);
}

/* Rows of a database from before schema 6 are EVENTS payloads; the same
 * events come back. */
static void test_wire_rows(void **state)
{
    (void)state;
    hs_event *ev = make_batch(500, 0);
    static uint8_t buf[64 << 10];
    hs_wr wr;
    hs_wr_init(&wr, buf, sizeof buf);
    hs_wr_varint(&wr, ev[0].t_ns);
    for (size_t i = 0; i < 500; i++)
        hs_event_put(&wr, i ? ev[i].t_ns - ev[i - 1].t_ns : 0, ev[i].stack_id, ev[i].is_free,
                     ev[i].size, ev[i].weight);
    assert_int_equal(wr.err, 0);
    hs_evdec dec = {0};
    assert_int_equal(hs_evdec_open_row(&dec, HS_EVCODEC_SCHEMA - 1, buf, hs_wr_len(&wr)), 0);
    for (int pass = 0; pass < 2; pass++) {
        hs_event e;
        for (size_t i = 0; i < 500; i++) {
            assert_int_equal(hs_evdec_next(&dec, &e), 1);
            assert_int_equal(e.t_ns, ev[i].t_ns);
            assert_int_equal(e.stack_id, ev[i].stack_id);
            assert_int_equal(e.weight, ev[i].weight);
        }
        assert_int_equal(hs_evdec_next(&dec, &e), 0);
        hs_evdec_rewind(&dec);
    }
    /* a truncated payload is corrupt; the codec's rows are read as such */
    hs_event e;
    assert_int_equal(hs_evdec_open_row(&dec, 4, buf, hs_wr_len(&wr) - 1), 0);
    int rc;
    while ((rc = hs_evdec_next(&dec, &e)) == 1) {
    }
    assert_int_equal(rc, HS_ECORRUPT);
    size_t len;
    uint8_t *blob = encode(ev, 500, 1, &len);
    assert_int_equal(hs_evdec_open_row(&dec, HS_EVCODEC_SCHEMA, blob, len), 0);
    assert_int_equal(hs_evdec_count(&dec), 500);
    free(blob);
    hs_evdec_free(&dec);
    free(ev);
}

/* Checks that blob (len) decodes to ev[0..n) exactly, times rounded to q. */
static void check_blob(const uint8_t *blob, size_t len, const hs_event *ev, size_t n, uint64_t q)
{
    hs_evdec dec = {0};
    assert_int_equal(hs_evdec_open(&dec, blob, len), 0);
    assert_int_equal(hs_evdec_count(&dec), n);
    hs_event e;
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(hs_evdec_next(&dec, &e), 1);
        assert_int_equal(e.t_ns, ev[i].t_ns / q * q);
        assert_int_equal(e.stack_id, ev[i].stack_id);
        assert_int_equal(e.is_free, ev[i].is_free);
        assert_int_equal(e.size, ev[i].size);
        assert_int_equal(e.weight, ev[i].weight);
    }
    assert_int_equal(hs_evdec_next(&dec, &e), 0);
    hs_evdec_free(&dec);
}

/* Frames of random sizes whose times go back at each frame (threads
 * overlap), a blob after each frame, then the final one. */
static void test_segment_round_trip(void **state)
{
    (void)state;
    enum { N = 60000 };
    hs_event *ev = calloc(N, sizeof *ev);
    assert_non_null(ev);
    uint64_t t = 5000000;
    for (size_t i = 0; i < N; i++) {
        if (i % 700 == 0) t -= next_rand() % 3000000; /* a frame that starts earlier */
        t += next_rand() % 20000;
        uint64_t size = next_rand() % 3 ? next_rand() % 200 : next_rand();
        size >>= 4 + next_rand() % 40; /* weight below 2^61, as the writer takes */
        ev[i] = (hs_event){t, 1 + next_rand() % 300, (int)(next_rand() & 1), size,
                           size + (next_rand() % 4 ? 0 : next_rand() >> 4)};
    }
    for (uint64_t q = 1; q <= 1000000; q *= 1000) {
        hs_evseg seg = {0};
        hs_evseg_begin(&seg, q);
        size_t done = 0;
        while (done < N) {
            size_t k = 1 + next_rand() % 3000;
            if (k > N - done) k = N - done;
            for (size_t i = 0; i < k; i++) hs_evseg_add(&seg, &ev[done + i]);
            done += k;
            const uint8_t *blob;
            size_t len;
            assert_int_equal(hs_evseg_blob(&seg, done == N, &blob, &len), 0);
            assert_int_equal(blob[0], HS_EVCODEC_SEG_VERSION);
            check_blob(blob, len, ev, done, q);
        }
        hs_evseg_free(&seg);
    }
    free(ev);
}

/* An every-allocation run's repetitive pattern (a loop that allocates and
 * frees the same blocks, a millisecond quantum): a few hundredths of a byte
 * an event, where a blob per frame of 500 events costs tens of bytes. */
static void test_segment_repetitive(void **state)
{
    (void)state;
    enum { N = 400000 };
    hs_evseg seg = {0};
    hs_evseg_begin(&seg, 1000000);
    hs_event *ev = calloc(N, sizeof *ev);
    assert_non_null(ev);
    for (size_t i = 0; i < N; i++) {
        static const uint64_t sizes[] = {24, 100, 24, 100, 4096, 4096, 17};
        size_t j = i % 7;
        ev[i] = (hs_event){1000 * i, 1 + j % 4, j == 2 || j == 3 || j == 5, sizes[j], sizes[j]};
        hs_evseg_add(&seg, &ev[i]);
    }
    const uint8_t *blob;
    size_t len;
    assert_int_equal(hs_evseg_blob(&seg, 1, &blob, &len), 0);
    assert_true(len < N / 50);
    check_blob(blob, len, ev, N, 1000000);
    /* the segment's times: the first and last, rounded */
    assert_int_equal(seg.t_first, 0);
    assert_int_equal(seg.t_last, 1000 * (N - 1) / 1000000 * 1000000);
    hs_evseg_free(&seg);
    free(ev);
}

/* A dense segment compressed in many small chunks (a blob at each of many
 * commits), repacked as one chunk: the same events, a fraction of the bytes. */
static void test_segment_repack(void **state)
{
    (void)state;
    enum { N = 200000 };
    hs_event *ev = calloc(N, sizeof *ev);
    assert_non_null(ev);
    for (size_t i = 0; i < N; i++) {
        size_t j = i % 5;
        ev[i] = (hs_event){3000 * i, 1 + j % 3, j >= 3, 16 << j % 3, 16 << j % 3};
    }
    size_t lens[2];
    for (int repack = 0; repack < 2; repack++) {
        hs_evseg seg = {0};
        hs_evdec dec = {0};
        hs_evseg_begin(&seg, 1000);
        const uint8_t *blob;
        for (size_t i = 0; i < N; i++) {
            hs_evseg_add(&seg, &ev[i]);
            if (i % 3000 == 2999) assert_int_equal(hs_evseg_flush(&seg), 0);
        }
        assert_true(hs_evseg_dense(&seg));
        if (repack) assert_int_equal(hs_evseg_repack(&seg, &dec), 0);
        assert_int_equal(hs_evseg_blob(&seg, 1, &blob, &lens[repack]), 0);
        check_blob(blob, lens[repack], ev, N, 1000);
        hs_evseg_free(&seg);
        hs_evdec_free(&dec);
    }
    assert_true(lens[1] * 3 < lens[0]);
    free(ev);
}

/* Every truncation and every flipped byte of an open and of a closed
 * segment's blob: an error or events, never a read out of bounds. The
 * segment is 1,000 events (each of its parts, a few KB): the checks are
 * quadratic in its length, and 3,000 took 16 s under ASan for the same
 * parts. */
static void test_segment_corrupt(void **state)
{
    (void)state;
    hs_evseg seg = {0};
    hs_evseg_begin(&seg, 1);
    hs_event e = {0};
    for (int i = 0; i < 1000; i++) {
        e = (hs_event){e.t_ns + next_rand() % 100, 1 + next_rand() % 5, 0, next_rand() % 90, 0};
        e.weight = e.size;
        hs_evseg_add(&seg, &e);
    }
    for (int final = 0; final < 2; final++) {
        const uint8_t *blob;
        size_t len;
        if (final) {
            hs_evseg_add(&seg, &e);
            assert_int_equal(hs_evseg_blob(&seg, 1, &blob, &len), 0);
        } else {
            assert_int_equal(hs_evseg_blob(&seg, 0, &blob, &len), 0);
        }
        uint8_t *p = malloc(len);
        hs_evdec dec = {0};
        for (size_t cut = 0; cut < len; cut++) {
            memcpy(p, blob, cut);
            size_t got;
            assert_true(drain(&dec, p, cut, &got) < 0);
        }
        for (size_t i = 0; i < len; i++) {
            memcpy(p, blob, len);
            p[i] ^= (uint8_t)(1 + next_rand() % 255);
            size_t got;
            int rc = drain(&dec, p, len, &got);
            assert_true(rc == 0 || rc == HS_ECORRUPT || rc == HS_EVERSION);
        }
        hs_evdec_free(&dec);
        free(p);
    }
    hs_evseg_free(&seg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_table),   cmocka_unit_test(test_round_trip_large),
        cmocka_unit_test(test_deterministic),      cmocka_unit_test(test_corrupt_every_byte),
        cmocka_unit_test(test_corrupt_headers),    cmocka_unit_test(test_wire_rows),
        cmocka_unit_test(test_segment_round_trip), cmocka_unit_test(test_segment_repetitive),
        cmocka_unit_test(test_segment_corrupt),    cmocka_unit_test(test_segment_repack),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

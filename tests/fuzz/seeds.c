/* Writes the seed corpus of fuzz_stream into the folder named by argv[1]: a
 * well-formed stream with every frame type, and variants cut or damaged at
 * interesting places. Run by hand when the protocol changes:
 *   build/tests/hs_fuzz_seeds tests/fuzz/corpus/fuzz_stream */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "hs_proto.h"

static uint8_t buf[1 << 16];

static void put(const char *dir, const char *name, const uint8_t *p, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n) perror(path);
    if (f) fclose(f);
}

enum variant {
    WELL_FORMED,
    /* stack 1 is defined again, differently, after events used it, and the
     * stream ends without BYE (a regression input: a re-import replays the
     * stored events, which must give the rollups the first import wrote) */
    REDEFINE,
    /* events whose weights add up past 2^63 (a regression input: the store's
     * byte totals overflowed, undefined behaviour in C) */
    HUGE_WEIGHTS,
};

/* The HELLO of every seed. */
static void seed_hello(hs_wr *wr)
{
    static hs_hello h;
    memset(h.run_id, 0xab, 16);
    h.pid = 42;
    h.sample_bytes = 1;
    h.max_depth = 64;
    h.rss_interval_ms = 100;
    h.program = (hs_str){"/bin/prog", 9};
    h.argc = 1;
    h.argv[0] = (hs_str){"prog", 4};
    h.hostname = (hs_str){"host", 4};
    h.nlabels = 1;
    h.labels[0] = (hs_label){{"v", 1}, {"1", 1}};
    size_t pos = hs_frame_begin(wr, HS_FRAME_HELLO);
    hs_hello_encode(wr, &h);
    hs_frame_end(wr, pos);
}

/* The frames after the events: PROCESS, SIZES, DROPS and BYE. */
static void seed_end(hs_wr *wr)
{
    size_t pos = hs_frame_begin(wr, HS_FRAME_PROCESS);
    hs_wr_varint(wr, 5000);
    hs_wr_varint(wr, 1 << 20);
    hs_wr_varint(wr, 1 << 24);
    hs_frame_end(wr, pos);

    pos = hs_frame_begin(wr, HS_FRAME_SIZES);
    hs_wr_varint(wr, 6);
    hs_wr_varint(wr, 1);
    hs_wr_varint(wr, 100);
    hs_frame_end(wr, pos);

    pos = hs_frame_begin(wr, HS_FRAME_DROPS);
    hs_wr_varint(wr, HS_DROP_ALLOC_EVENTS);
    hs_wr_varint(wr, 3);
    hs_frame_end(wr, pos);

    pos = hs_frame_begin(wr, HS_FRAME_BYE);
    hs_bye b = {9000, HS_BYE_CLEAN, 2, 1, 65536};
    hs_bye_encode(wr, &b);
    hs_frame_end(wr, pos);
}

static size_t well_formed(enum variant v)
{
    int redefine = v == REDEFINE;
    hs_wr wr;
    hs_wr_init(&wr, buf, sizeof buf);
    hs_header_encode(&wr);
    seed_hello(&wr);

    size_t pos = hs_frame_begin(&wr, HS_FRAME_MAPPINGS);
    hs_wr_varint(&wr, 0);
    hs_mapping m = {0x400000, 0x500000,        0, (const uint8_t *)"\x01\x02\x03\x04",
                    4,        {"/bin/prog", 9}};
    hs_mapping_put(&wr, &m);
    hs_frame_end(&wr, pos);

    pos = hs_frame_begin(&wr, HS_FRAME_SYMBOLS);
    hs_symbol s1 = {0x401000, {"leak", 4}, {"a.c", 3}, 10, {"/bin/prog", 9}, 0x1000};
    hs_symbol s2 = {0x402000, {"main", 4}, {"a.c", 3}, 20, {"/bin/prog", 9}, 0x2000};
    hs_symbol_put(&wr, &s1);
    hs_symbol_put(&wr, &s2);
    hs_frame_end(&wr, pos);

    pos = hs_frame_begin(&wr, HS_FRAME_STACKS);
    uint64_t pcs[2] = {0x401000, 0x402000};
    hs_stack_put(&wr, 1, pcs, 2);
    hs_stack_put(&wr, 2, pcs + 1, 1);
    hs_frame_end(&wr, pos);

    pos = hs_frame_begin(&wr, HS_FRAME_EVENTS);
    hs_wr_varint(&wr, 1000);
    hs_event_put(&wr, 0, 1, 0, 100, 100);
    hs_event_put(&wr, 10, 2, 0, 4096, 4096);
    hs_event_put(&wr, 10, 2, 1, 4096, 4096);
    if (v == HUGE_WEIGHTS) {
        /* each under the store's bound on one weight (2^61) */
        for (int i = 0; i < 5; i++) hs_event_put(&wr, 10, 1, 0, 1, INT64_MAX / 4);
        hs_event_put(&wr, 10, 1, 1, 1, INT64_MAX / 4);
    }
    hs_frame_end(&wr, pos);

    if (redefine) {
        pos = hs_frame_begin(&wr, HS_FRAME_STACKS);
        hs_stack_put(&wr, 1, pcs + 1, 1);
        hs_frame_end(&wr, pos);
        return hs_wr_len(&wr);
    }

    seed_end(&wr);
    return hs_wr_len(&wr);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: hs_fuzz_seeds DIR\n");
        return 2;
    }
    size_t n = well_formed(REDEFINE);
    put(argv[1], "regress-stack-redefined.hsp", buf, n);
    n = well_formed(HUGE_WEIGHTS);
    put(argv[1], "regress-huge-weights.hsp", buf, n);
    n = well_formed(WELL_FORMED);
    put(argv[1], "well-formed.hsp", buf, n);
    put(argv[1], "header-only.hsp", buf, HS_MAGIC_LEN + 1);
    put(argv[1], "cut-mid-frame.hsp", buf, n / 2);
    static uint8_t bad[1 << 16];
    memcpy(bad, buf, n);
    bad[HS_MAGIC_LEN + 1] = 0x7f; /* unknown frame type in place of HELLO */
    put(argv[1], "unknown-type.hsp", bad, n);
    memcpy(bad, buf, n);
    memset(bad + HS_MAGIC_LEN + 2, 0xff, 4); /* a length varint that never ends */
    put(argv[1], "bad-length.hsp", bad, n);
    return 0;
}

/* Fuzzes the stream decoder (common/hs_proto) the way a reader uses it:
 * header, then frames split off one by one, each decoded to its last entry.
 * SYMDATA pieces are decompressed too. Nothing may read out of bounds, loop
 * forever or trip a sanitizer, whatever the bytes. */
#include <string.h>

#include "fuzz.h"
#include "hs_error.h"
#include "hs_lz.h"
#include "hs_proto.h"

/* The frames of entries read through a batch iterator, to the last. */
static void decode_batch(const hs_frame *f)
{
    static hs_stack stack;
    hs_batch_it it;
    int rc = 0;
    switch (f->type) {
    case HS_FRAME_MAPPINGS: {
        hs_mapping m;
        if (hs_mappings_begin(&it, f->payload, f->len) == 0)
            while ((rc = hs_mappings_next(&it, &m)) == 1) {
            }
        break;
    }
    case HS_FRAME_SYMBOLS: {
        hs_symbol s;
        hs_symbols_begin(&it, f->payload, f->len);
        while ((rc = hs_symbols_next(&it, &s)) == 1) {
        }
        break;
    }
    case HS_FRAME_STACKS:
        hs_stacks_begin(&it, f->payload, f->len);
        while ((rc = hs_stacks_next(&it, &stack)) == 1) {
        }
        break;
    case HS_FRAME_EVENTS: {
        hs_event e;
        if (hs_events_begin(&it, f->payload, f->len) == 0)
            while ((rc = hs_events_next(&it, &e)) == 1) {
            }
        break;
    }
    case HS_FRAME_PROCESS: {
        hs_process_sample s;
        hs_process_begin(&it, f->payload, f->len);
        while ((rc = hs_process_next(&it, &s)) == 1) {
        }
        break;
    }
    case HS_FRAME_SIZES: {
        hs_size_bucket b;
        hs_sizes_begin(&it, f->payload, f->len);
        while ((rc = hs_sizes_next(&it, &b)) == 1) {
        }
        break;
    }
    case HS_FRAME_DROPS: {
        hs_drop d;
        hs_drops_begin(&it, f->payload, f->len);
        while ((rc = hs_drops_next(&it, &d)) == 1) {
        }
        break;
    }
    }
    (void)rc;
}

static void decode_frame(const hs_frame *f)
{
    static hs_hello hello;
    switch (f->type) {
    case HS_FRAME_HELLO:
        hs_hello_decode(&hello, f->payload, f->len);
        break;
    case HS_FRAME_BYE: {
        hs_bye b;
        hs_bye_decode(&b, f->payload, f->len);
        break;
    }
    case HS_FRAME_ACK: {
        uint64_t n;
        hs_ack_decode(&n, f->payload, f->len);
        break;
    }
    case HS_FRAME_REFUSE: {
        hs_str s;
        hs_refuse_decode(&s, f->payload, f->len);
        break;
    }
    case HS_FRAME_SYMREQ: {
        const uint8_t *bid;
        uint32_t blen;
        hs_symreq_decode(&bid, &blen, f->payload, f->len);
        break;
    }
    case HS_FRAME_SYMDATA: { /* as the server's symbolizer thread reads a piece */
        static uint8_t piece[HS_SYMDATA_PIECE];
        hs_symdata d;
        if (hs_symdata_decode(&d, f->payload, f->len) == 0 && d.method == HS_SYMDATA_LZ)
            hs_lz_decompress(piece, d.size, (const uint8_t *)d.data.ptr, d.data.len);
        break;
    }
    default:
        decode_batch(f);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint32_t version;
    int n = hs_header_parse(data, size, &version);
    if (n <= 0) return 0;
    size_t off = (size_t)n;
    for (;;) {
        hs_frame f;
        long k = hs_frame_split(data + off, size - off, &f);
        if (k <= 0) break;
        decode_frame(&f);
        off += (size_t)k;
    }
    return 0;
}

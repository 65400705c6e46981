/* The collector's .eh_frame reader (hs__unwind_parse in collector/hs_unwind.c):
 * a code address and an object's unwind tables in, a frame-stepping rule out.
 * The tables come from the program's own objects, which a bug in a compiler,
 * a linker or a packer can damage, and the reader runs inside the profiled
 * program: it must never read outside the segment or loop.
 *
 * Input: int64 pc relative to .eh_frame_hdr, uint32 offset of .eh_frame_hdr
 * in the segment (clamped to its length), then the segment. The segment is
 * copied to a buffer of its exact size so that ASan sees a read on either
 * side of it. Corpus: seeds cut from real objects by tests/fuzz/cfa_seeds.py,
 * found-NN (inputs the fuzzer found, chosen so that with the seeds they reach
 * every line of the reader) and regress-* (what it once broke). */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "hs_unwind.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int64_t pc_off;
    uint32_t hdr_off;
    if (size < sizeof pc_off + sizeof hdr_off) return 0;
    memcpy(&pc_off, data, sizeof pc_off);
    memcpy(&hdr_off, data + sizeof pc_off, sizeof hdr_off);
    size_t len = size - sizeof pc_off - sizeof hdr_off;
    uint8_t *seg = malloc(len ? len : 1);
    if (!seg) return 0;
    memcpy(seg, data + sizeof pc_off + sizeof hdr_off, len);
    const uint8_t *hdr = seg + (hdr_off < len ? hdr_off : len);

    hs_unw_rule r;
    int kind = hs__unwind_parse(&r, hdr, seg, seg + len, (uintptr_t)hdr + (uintptr_t)pc_off);
    /* What the walk relies on, checked in every build (the parser's own
     * asserts are off in release builds). */
    if (kind != r.kind) abort();
    if (kind == HS_UNW_STEP) {
        if (r.cfa_off <= 0 || r.cfa_off >= 1 << 24 || r.cfa_rbp > 1) abort();
        if (r.ra_off % 8 || r.ra_off < -1024 || r.ra_off > 1016) abort();
        if (r.bp_how > HS_UNW_BP_LOST) abort();
        if (r.bp_how == HS_UNW_BP_SAVED && (r.bp_off % 8 || r.bp_off < -1024 || r.bp_off > 1016))
            abort();
    } else if (kind != HS_UNW_END && kind != HS_UNW_FALLBACK) {
        abort();
    }
    free(seg);
    return 0;
}

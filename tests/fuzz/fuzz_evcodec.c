/* Fuzzes the storage codec of events (common/hs_evcodec.c) from both ends:
 * the input as a stored blob must decode or be refused with HS_ECORRUPT or
 * HS_EVERSION, never be read past; a blob that decodes must encode back
 * into one that decodes to the same events (a frame's blob into a frame's,
 * times never going back; a segment's into a segment's, in any time order).
 * The input is also read as a row of a database from before the codec (an
 * EVENTS payload). */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "hs_error.h"
#include "hs_evcodec.h"

static hs_evdec dec, dec2;
static hs_evenc enc;
static hs_evseg seg;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *p = malloc(size ? size : 1); /* exact size: overreads are seen */
    if (!p) return 0;
    memcpy(p, data, size);
    for (int schema = HS_EVCODEC_SCHEMA - 1; schema <= HS_EVCODEC_SCHEMA; schema++) {
        int rc = hs_evdec_open_row(&dec, schema, p, size);
        if (rc) {
            if (rc != HS_ECORRUPT && rc != HS_EVERSION && rc != HS_ENOMEM) abort();
            continue;
        }
        hs_event e;
        uint64_t n = 0, last = 0;
        int segment = dec.seg;
        hs_evenc_begin(&enc, 1);
        hs_evseg_begin(&seg, 1);
        while ((rc = hs_evdec_next(&dec, &e)) == 1) {
            if (e.stack_id == 0 || e.weight < e.size || (n && e.t_ns < last && !segment)) abort();
            last = e.t_ns;
            if (segment)
                hs_evseg_add(&seg, &e);
            else
                hs_evenc_add(&enc, &e);
            n++;
        }
        if (rc != 0 && rc != HS_ECORRUPT) abort();
        if (rc || !n) continue;
        const uint8_t *blob;
        size_t len;
        if (segment ? hs_evseg_blob(&seg, 1, &blob, &len) : hs_evenc_finish(&enc, &blob, &len))
            abort();
        hs_event a, b;
        if (hs_evdec_open(&dec2, blob, len)) abort();
        hs_evdec_rewind(&dec);
        while ((rc = hs_evdec_next(&dec, &a)) == 1) {
            if (hs_evdec_next(&dec2, &b) != 1 || a.t_ns != b.t_ns || a.stack_id != b.stack_id ||
                a.is_free != b.is_free || a.size != b.size || a.weight != b.weight)
                abort();
        }
        if (hs_evdec_next(&dec2, &b) != 0) abort();
    }
    free(p);
    return 0;
}

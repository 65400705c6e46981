/* Fuzzes the stored snapshot rows' codec (schema/hs_snaps.c): the input as
 * a block must decode or be refused with HS_ECORRUPT, never be read past;
 * a block that decodes has increasing traces, its header tells its row
 * count, and it encodes back into one that decodes to the same rows. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "hs_error.h"
#include "hs_snaps.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *p = malloc(size ? size : 1); /* exact size: overreads are seen */
    if (!p) return 0;
    memcpy(p, data, size);
    static hs_snap_row a[HS_SNAPS_BLOCK_ROWS], b[HS_SNAPS_BLOCK_ROWS];
    size_t na = 0, nb = 0;
    int rc = hs_snaps_decode(p, size, a, &na, NULL);
    if (rc) {
        if (rc != HS_ECORRUPT && rc != HS_ENOMEM) abort();
    } else {
        if (na < 1 || na > HS_SNAPS_BLOCK_ROWS || hs_snaps_count(p, size) != na) abort();
        for (size_t i = 1; i < na; i++)
            if (a[i].trace <= a[i - 1].trace) abort();
        hs_buf out = {0};
        if (!hs_snaps_encode(a, na, &out, NULL)) {
            if (hs_snaps_decode(out.p, out.n, b, &nb, NULL) || nb != na ||
                memcmp(a, b, na * sizeof *a))
                abort();
        }
        hs_buf_free(&out);
    }
    free(p);
    return 0;
}

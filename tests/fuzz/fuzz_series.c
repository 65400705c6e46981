/* Fuzzes the windows' rows by trace (schema/hs_series.c): the input as a
 * block of window 64 must decode or be refused with HS_ECORRUPT, never be
 * read past; a block that decodes has increasing traces, each trace's
 * buckets increasing within the window, and encodes back into one that
 * decodes to the same rows. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "hs_error.h"
#include "hs_series.h"

#define WINDOW 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *p = malloc(size ? size : 1); /* exact size: overreads are seen */
    if (!p) return 0;
    memcpy(p, data, size);
    static hs_series_row a[HS_SERIES_BLOCK_ROWS], b[HS_SERIES_BLOCK_ROWS];
    size_t na = 0, nb = 0;
    int rc = hs_series_decode(p, size, WINDOW, a, &na, NULL);
    if (rc) {
        if (rc != HS_ECORRUPT && rc != HS_ENOMEM) abort();
    } else {
        if (na < 1 || na > HS_SERIES_BLOCK_ROWS) abort();
        for (size_t i = 0; i < na; i++) {
            if (a[i].bucket < WINDOW || a[i].bucket >= WINDOW + HS_SERIES_WINDOW) abort();
            if (i && (a[i].trace < a[i - 1].trace ||
                      (a[i].trace == a[i - 1].trace && a[i].bucket <= a[i - 1].bucket)))
                abort();
        }
        hs_buf out = {0};
        if (!hs_series_encode(a, na, WINDOW, &out, NULL)) {
            if (hs_series_decode(out.p, out.n, WINDOW, b, &nb, NULL) || nb != na ||
                memcmp(a, b, na * sizeof *a))
                abort();
        }
        hs_buf_free(&out);
    }
    free(p);
    return 0;
}

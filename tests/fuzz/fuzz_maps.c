/* Fuzzes the stored id maps' codec (schema/hs_maps.c): the input as a
 * chunk must decode or be refused with HS_ECORRUPT, never be read past; a
 * chunk that decodes has increasing keys and encodes back into one that
 * decodes to the same entries; settling its entries keeps them as they
 * are. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "hs_error.h"
#include "hs_maps.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *p = malloc(size ? size : 1); /* exact size: overreads are seen */
    if (!p) return 0;
    memcpy(p, data, size);
    hs_maps_entry *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    int rc = hs_maps_decode(p, size, &a, &na);
    if (rc) {
        if (rc != HS_ECORRUPT && rc != HS_ENOMEM) abort();
    } else {
        if (na < 1 || na > HS_MAPS_CHUNK) abort();
        for (size_t i = 1; i < na; i++)
            if (a[i].key <= a[i - 1].key) abort();
        size_t ns = na;
        if (hs_maps_settle(a, &ns) == 0 && ns != na) abort();
        hs_buf out = {0};
        if (!hs_maps_encode(a, na, &out)) {
            if (hs_maps_decode(out.p, out.n, &b, &nb) || nb != na || memcmp(a, b, na * sizeof *a))
                abort();
        }
        hs_buf_free(&out);
    }
    free(a);
    free(b);
    free(p);
    return 0;
}

/* Fuzzes the stored symbol cache's codec (schema/hs_symcache.c): the input
 * as a block must decode or be refused with HS_ECORRUPT, never be read past
 * nor leave anything in the block it was decoded into; a block that
 * decodes holds 1 to HS_SYMCACHE_BLOCK_ENTRIES distinct offsets and encodes
 * back into one that decodes to the same entries. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "hs_error.h"
#include "hs_symcache.h"

static int same_frames(const hs_symcache_frame *x, const hs_symcache_frame *y, int n)
{
    for (int k = 0; k < n; k++)
        if (x[k].line != y[k].line || x[k].function.len != y[k].function.len ||
            x[k].file.len != y[k].file.len ||
            memcmp(x[k].function.ptr, y[k].function.ptr, x[k].function.len) ||
            memcmp(x[k].file.ptr, y[k].file.ptr, x[k].file.len))
            return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *p = malloc(size ? size : 1); /* exact size: overreads are seen */
    if (!p) return 0;
    memcpy(p, data, size);
    hs_symcache_block a = {0}, b = {0};
    int rc = hs_symcache_decode(&a, p, size);
    if (rc) {
        if ((rc != HS_ECORRUPT && rc != HS_ENOMEM) || a.n) abort();
    } else {
        if (a.n < 1 || a.n > HS_SYMCACHE_BLOCK_ENTRIES) abort();
        hs_buf out = {0};
        if (!hs_symcache_encode(&a, &out)) {
            if (hs_symcache_decode(&b, out.p, out.n) || b.n != a.n) abort();
            for (size_t i = 0; i < a.n; i++) {
                hs_symcache_frame x[HS_SYMCACHE_FRAMES_MAX], y[HS_SYMCACHE_FRAMES_MAX];
                uint64_t off = hs_symcache_offset_at(&a, i);
                int nx = hs_symcache_get(&a, off, x, HS_SYMCACHE_FRAMES_MAX);
                int ny = hs_symcache_get(&b, off, y, HS_SYMCACHE_FRAMES_MAX);
                if (nx < 1 || nx != ny || !same_frames(x, y, nx)) abort();
            }
        }
        hs_buf_free(&out);
    }
    hs_symcache_free(&a);
    hs_symcache_free(&b);
    free(p);
    return 0;
}

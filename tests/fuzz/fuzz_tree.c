/* Fuzzes the stored stack tree's codec (schema/hs_tree.c): the input as a
 * block must decode or be refused with HS_ECORRUPT, never be read past; a
 * block that decodes has increasing ids and encodes back into one that
 * decodes to the same nodes. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "hs_error.h"
#include "hs_tree.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *p = malloc(size ? size : 1); /* exact size: overreads are seen */
    if (!p) return 0;
    memcpy(p, data, size);
    hs_tree_node *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    int rc = hs_tree_decode(p, size, &a, &na);
    if (rc) {
        if (rc != HS_ECORRUPT && rc != HS_ENOMEM) abort();
    } else {
        if (na < 1 || na > HS_TREE_BLOCK_NODES) abort();
        for (size_t i = 1; i < na; i++)
            if (a[i].id <= a[i - 1].id) abort();
        hs_buf out = {0};
        if (!hs_tree_encode(a, na, &out)) {
            if (hs_tree_decode(out.p, out.n, &b, &nb) || nb != na || memcmp(a, b, na * sizeof *a))
                abort();
        }
        hs_buf_free(&out);
    }
    free(a);
    free(b);
    free(p);
    return 0;
}

/* hs_buf: a growable byte buffer (see hs_buf.h). */
#include "hs_buf.h"

#include <assert.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void hs_buf_put(hs_buf *b, const void *data, size_t n)
{
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t ncap = b->cap ? b->cap : 4096;
        while (ncap < b->n + n + 1) ncap *= 2;
        char *np = realloc(b->p, ncap);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np;
        b->cap = ncap;
    }
    if (n) memcpy(b->p + b->n, data, n);
    b->n += n;
    b->p[b->n] = '\0';
    assert(b->n < b->cap);
}

void hs_buf_printf(hs_buf *b, const char *fmt, ...)
{
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) {
        hs_buf_put(b, tmp, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->oom = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    hs_buf_put(b, big, (size_t)n);
    free(big);
}

void hs_buf_reset(hs_buf *b)
{
    b->n = 0;
    b->oom = 0;
    if (b->p) b->p[0] = '\0';
}

void hs_buf_free(hs_buf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

int hs_array_room(void **p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *g = c <= SIZE_MAX / size ? realloc(*p, c * size) : NULL;
    if (!g) return -1;
    *p = g;
    *cap = c;
    return 0;
}

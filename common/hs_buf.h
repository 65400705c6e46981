/* hs_buf: a growable byte buffer for text and binary payloads.
 *
 * Appends never fail loudly: when memory runs out the buffer sets oom, keeps
 * what it had and ignores every later append, so a writer appends freely and
 * checks oom once at the end. The bytes are kept NUL-terminated (the NUL not
 * counted in n), so a text buffer's p is a C string. A zeroed hs_buf is
 * empty and ready; hs_buf_free releases it and leaves it zeroed.
 */
#ifndef HS_BUF_H
#define HS_BUF_H

#include <stddef.h>

typedef struct hs_buf {
    char *p;
    size_t n, cap;
    int oom;
} hs_buf;

void hs_buf_put(hs_buf *b, const void *data, size_t n);
void hs_buf_printf(hs_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Empties the buffer (keeping its memory) and clears oom. */
void hs_buf_reset(hs_buf *b);
void hs_buf_free(hs_buf *b);

/* An array of items of size each at *p with room for *cap of them, grown
 * (doubling, from 16) to room for need: 0, or -1 out of memory (*p and
 * *cap then as they were). */
int hs_array_room(void **p, size_t *cap, size_t need, size_t size);

#endif

/* qbase: the small foundations every file of queries/ uses, the store's
 * included, and which call nothing else of queries/: the string -> index
 * map, the growable buffer and the error filler (q_internal.h). */
#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "q_internal.h"

/* ---- string map ----------------------------------------------------------- */

size_t hs__smap_intern(hs__smap *m, const char *key, size_t len, size_t next, int *added)
{
    const char *stored;
    return hs__smap_put(m, key, len, next, added, &stored);
}

size_t hs__smap_put(hs__smap *m, const char *key, size_t len, size_t next, int *added,
                    const char **stored)
{
    *added = 0;
    if ((m->n + 1) * 4 > m->cap * 3) {
        size_t ncap = m->cap ? m->cap * 2 : 256;
        char **nk = calloc(ncap, sizeof *nk);
        uint64_t *nh = malloc(ncap * sizeof *nh);
        size_t *nv = malloc(ncap * sizeof *nv);
        if (!nk || !nh || !nv) {
            free(nk);
            free(nh);
            free(nv);
            return (size_t)-1;
        }
        for (size_t i = 0; i < m->cap; i++) {
            if (!m->keys[i]) continue;
            size_t j = m->hashes[i] & (ncap - 1);
            while (nk[j]) j = (j + 1) & (ncap - 1);
            nk[j] = m->keys[i];
            nh[j] = m->hashes[i];
            nv[j] = m->vals[i];
        }
        free(m->keys);
        free(m->hashes);
        free(m->vals);
        m->keys = nk;
        m->hashes = nh;
        m->vals = nv;
        m->cap = ncap;
    }
    uint64_t h = hs_map_hash(key, len);
    size_t i = h & (m->cap - 1);
    while (m->keys[i]) {
        if (m->hashes[i] == h && !strncmp(m->keys[i], key, len) && m->keys[i][len] == '\0') {
            *stored = m->keys[i];
            return m->vals[i];
        }
        i = (i + 1) & (m->cap - 1);
    }
    char *k = (char *)key;
    if (!m->borrow) {
        if (!(k = malloc(len + 1))) return (size_t)-1;
        memcpy(k, key, len);
        k[len] = '\0';
    }
    assert(k[len] == '\0');
    m->keys[i] = k;
    m->hashes[i] = h;
    m->vals[i] = next;
    m->n++;
    *added = 1;
    *stored = k;
    return next;
}

void hs__smap_free(hs__smap *m)
{
    for (size_t i = 0; i < m->cap && !m->borrow; i++) free(m->keys[i]);
    free(m->keys);
    free(m->hashes);
    free(m->vals);
    *m = (hs__smap){.borrow = m->borrow};
}

/* ---- errors --------------------------------------------------------------- */

int hs__err(hs_qerr *err, int code, const char *fmt, ...)
{
    assert(code < 0);
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return code;
}

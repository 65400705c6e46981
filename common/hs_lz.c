/* hs_lz: compressor and decoder of the SYMDATA format (see hs_lz.h). */
#include "hs_lz.h"

#include <string.h>

#include "hs_error.h"
#include "hs_wire.h"

#define MIN_MATCH  4
#define WINDOW     65535u
#define TAIL_BYTES 8 /* the last bytes are always literals */

static uint32_t read32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static uint32_t hash4(uint32_t v)
{
    return (v * 2654435761u) >> 16; /* 16 bits: HS_LZ_TABLE entries */
}

/* Writes one sequence: lit literals, then (when mlen) a match. 0 or -1 when
 * cap is short. */
static int put_seq(uint8_t **o, const uint8_t *end, const uint8_t *lit, size_t nlit, size_t off,
                   size_t mlen)
{
    uint8_t *p = *o;
    size_t m = mlen ? mlen - MIN_MATCH : 0;
    if ((size_t)(end - p) < 1 + 2 * HS_VARINT_MAX + 2 + nlit) return -1;
    *p++ = (uint8_t)((nlit < 15 ? nlit : 15) << 4 | (m < 15 ? m : 15));
    if (nlit >= 15) p += hs_varint_encode(p, nlit - 15);
    memcpy(p, lit, nlit);
    p += nlit;
    if (mlen) {
        *p++ = (uint8_t)(off & 0xff);
        *p++ = (uint8_t)(off >> 8);
        if (m >= 15) p += hs_varint_encode(p, m - 15);
    }
    *o = p;
    return 0;
}

size_t hs_lz_compress(uint8_t *out, size_t cap, const uint8_t *in, size_t n, uint32_t *table)
{
    uint8_t *o = out, *end = out + cap;
    size_t anchor = 0, i = 0;
    memset(table, 0, HS_LZ_TABLE * sizeof *table); /* 0: empty; else position + 1 */
    while (n > TAIL_BYTES && i < n - TAIL_BYTES) {
        uint32_t v = read32(in + i), h = hash4(v);
        size_t cand = table[h];
        table[h] = (uint32_t)(i + 1);
        if (!cand || i + 1 - cand > WINDOW || read32(in + cand - 1) != v) {
            i++;
            continue;
        }
        size_t from = cand - 1, len = MIN_MATCH;
        while (i + len < n - TAIL_BYTES && in[from + len] == in[i + len]) len++;
        if (put_seq(&o, end, in + anchor, i - anchor, i - from, len)) return 0;
        i += len;
        anchor = i;
    }
    if (put_seq(&o, end, in + anchor, n - anchor, 0, 0)) return 0;
    return (size_t)(o - out);
}

/* The count of a nibble plus its varint when the nibble is 15; -1 when
 * malformed. */
static int64_t get_count(const uint8_t **p, const uint8_t *end, unsigned nib)
{
    if (nib < 15) return nib;
    uint64_t more;
    int k = hs_varint_decode(*p, end, &more);
    if (k <= 0 || more > (1ull << 40)) return -1;
    *p += k;
    return (int64_t)(15 + more);
}

int hs_lz_decompress(uint8_t *out, size_t size, const uint8_t *in, size_t n)
{
    const uint8_t *p = in, *end = in + n;
    size_t w = 0;
    while (p < end) {
        unsigned tok = *p++;
        int64_t nlit = get_count(&p, end, tok >> 4);
        if (nlit < 0 || (uint64_t)nlit > (uint64_t)(end - p) || (uint64_t)nlit > size - w)
            return HS_EPROTO;
        memcpy(out + w, p, (size_t)nlit);
        p += nlit;
        w += (size_t)nlit;
        if (p == end) break; /* the last sequence: literals only */
        if (end - p < 2) return HS_EPROTO;
        size_t off = (size_t)p[0] | (size_t)p[1] << 8;
        p += 2;
        int64_t m = get_count(&p, end, tok & 15);
        if (m < 0 || off == 0 || off > w || (uint64_t)m + MIN_MATCH > size - w) return HS_EPROTO;
        for (size_t k = 0; k < (size_t)m + MIN_MATCH; k++, w++) out[w] = out[w - off];
    }
    return w == size ? 0 : HS_EPROTO;
}

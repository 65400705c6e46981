/* hs_wire: varints, strings and the bounded reader and writer (see hs_wire.h). */
#include "hs_wire.h"

#include <string.h>

#include "hs_error.h"

size_t hs_varint_encode(uint8_t *dst, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        dst[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    dst[n++] = (uint8_t)v;
    return n;
}

size_t hs_varint_size(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

int hs_varint_decode(const uint8_t *p, const uint8_t *end, uint64_t *out)
{
    uint64_t v = 0;
    for (int i = 0; i < HS_VARINT_MAX; i++) {
        if (p + i >= end) return 0;
        uint8_t b = p[i];
        /* The tenth byte may only carry the 64th bit. */
        if (i == HS_VARINT_MAX - 1 && b > 1) return -1;
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *out = v;
            return i + 1;
        }
    }
    return -1;
}

void hs_rd_init(hs_rd *rd, const void *buf, size_t len)
{
    rd->start = rd->p = buf;
    rd->end = rd->p + len;
    rd->err = 0;
}

static void rd_fail(hs_rd *rd, int err)
{
    if (!rd->err) rd->err = err;
    rd->p = rd->end;
}

uint64_t hs_rd_varint(hs_rd *rd)
{
    uint64_t v = 0;
    if (rd->err) return 0;
    if (rd->p < rd->end && *rd->p < 0x80) return *rd->p++; /* most values: one byte */
    int n = hs_varint_decode(rd->p, rd->end, &v);
    if (n <= 0) {
        rd_fail(rd, n == 0 ? HS_ETRUNC : HS_EPROTO);
        return 0;
    }
    rd->p += n;
    return v;
}

uint64_t hs_rd_varint_max(hs_rd *rd, uint64_t max)
{
    uint64_t v = hs_rd_varint(rd);
    if (v > max) {
        rd_fail(rd, HS_ERANGE);
        return 0;
    }
    return v;
}

uint8_t hs_rd_u8(hs_rd *rd)
{
    if (rd->err) return 0;
    if (rd->p >= rd->end) {
        rd_fail(rd, HS_ETRUNC);
        return 0;
    }
    return *rd->p++;
}

const uint8_t *hs_rd_bytes(hs_rd *rd, size_t n)
{
    if (rd->err) return NULL;
    if (n > hs_rd_left(rd)) {
        rd_fail(rd, HS_ETRUNC);
        return NULL;
    }
    const uint8_t *p = rd->p;
    rd->p += n;
    return p;
}

hs_str hs_rd_str(hs_rd *rd, size_t max_len)
{
    hs_str s = {"", 0};
    uint64_t n = hs_rd_varint(rd);
    if (rd->err) return s;
    if (n > max_len) {
        rd_fail(rd, HS_ETOOBIG);
        return s;
    }
    const uint8_t *p = hs_rd_bytes(rd, (size_t)n);
    if (p) {
        s.ptr = (const char *)p;
        s.len = (size_t)n;
    }
    return s;
}

void hs_wr_init(hs_wr *wr, void *buf, size_t cap)
{
    wr->start = wr->p = buf;
    wr->end = wr->p + cap;
    wr->err = 0;
}

static int wr_room(hs_wr *wr, size_t n)
{
    if (wr->err) return 0;
    if ((size_t)(wr->end - wr->p) < n) {
        wr->err = HS_ETOOBIG;
        return 0;
    }
    return 1;
}

void hs_wr_varint(hs_wr *wr, uint64_t v)
{
    if ((size_t)(wr->end - wr->p) >= HS_VARINT_MAX) {
        if (!wr->err) wr->p += hs_varint_encode(wr->p, v);
        return;
    }
    if (wr_room(wr, hs_varint_size(v))) wr->p += hs_varint_encode(wr->p, v);
}

void hs_wr_u8(hs_wr *wr, uint8_t v)
{
    if (wr_room(wr, 1)) *wr->p++ = v;
}

void hs_wr_bytes(hs_wr *wr, const void *p, size_t n)
{
    if (n && wr_room(wr, n)) {
        memcpy(wr->p, p, n);
        wr->p += n;
    }
}

void hs_wr_str(hs_wr *wr, const char *s, size_t n)
{
    hs_wr_varint(wr, n);
    hs_wr_bytes(wr, s, n);
}

void hs_wr_cstr(hs_wr *wr, const char *s)
{
    hs_wr_str(wr, s, s ? strlen(s) : 0);
}

/* hs_wire: the byte-level primitives of the heapstore stream.
 *
 * Unsigned LEB128 varints (at most 10 bytes, no overflow past 64 bits),
 * zigzag for signed values, length-prefixed strings and byte strings. The
 * reader (hs_rd) is a cursor over borrowed memory that never reads past its
 * end: the first failure sticks in rd->err and every later read returns zero,
 * so a decoder can read a whole record and check the error once. The writer
 * (hs_wr) writes into a caller-provided buffer and never allocates, so the
 * collector can use it inside its allocation hooks; an overflow sticks in
 * wr->err in the same way.
 */
#ifndef HS_WIRE_H
#define HS_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define HS_VARINT_MAX 10

typedef struct hs_rd {
    const uint8_t *p;
    const uint8_t *end;
    const uint8_t *start; /* for offsets in error messages */
    int err;              /* 0, or the first HS_E* code met */
} hs_rd;

/* A borrowed string: points into the buffer being read; not NUL-terminated. */
typedef struct hs_str {
    const char *ptr;
    size_t len;
} hs_str;

typedef struct hs_wr {
    uint8_t *p;
    uint8_t *end;
    uint8_t *start;
    int err; /* 0, or HS_ETOOBIG once a write did not fit */
} hs_wr;

static inline uint64_t hs_zigzag(int64_t v)
{
    return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

static inline int64_t hs_unzigzag(uint64_t v)
{
    return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

/* Encodes v at dst (room for HS_VARINT_MAX bytes); returns bytes written. */
size_t hs_varint_encode(uint8_t *dst, uint64_t v);

/* Bytes hs_varint_encode would write for v. */
size_t hs_varint_size(uint64_t v);

/* Decodes one varint from [p, end). Returns bytes consumed (> 0), 0 if the
 * input ends inside the varint (HS_EAGAIN territory for a stream), or -1 when
 * it is longer than 10 bytes or overflows 64 bits. */
int hs_varint_decode(const uint8_t *p, const uint8_t *end, uint64_t *out);

void hs_rd_init(hs_rd *rd, const void *buf, size_t len);
uint64_t hs_rd_varint(hs_rd *rd);
uint8_t hs_rd_u8(hs_rd *rd);
/* A varint that must be <= max, else HS_ERANGE. */
uint64_t hs_rd_varint_max(hs_rd *rd, uint64_t max);
/* A length-prefixed string of at most max_len bytes (else HS_ETOOBIG). */
hs_str hs_rd_str(hs_rd *rd, size_t max_len);
/* Exactly n raw bytes; NULL on error. */
const uint8_t *hs_rd_bytes(hs_rd *rd, size_t n);
static inline size_t hs_rd_left(const hs_rd *rd)
{
    return (size_t)(rd->end - rd->p);
}
static inline size_t hs_rd_offset(const hs_rd *rd)
{
    return (size_t)(rd->p - rd->start);
}

void hs_wr_init(hs_wr *wr, void *buf, size_t cap);
void hs_wr_varint(hs_wr *wr, uint64_t v);
void hs_wr_u8(hs_wr *wr, uint8_t v);
void hs_wr_bytes(hs_wr *wr, const void *p, size_t n);
/* Length-prefixed; s may be NULL for the empty string. */
void hs_wr_str(hs_wr *wr, const char *s, size_t n);
void hs_wr_cstr(hs_wr *wr, const char *s);
static inline size_t hs_wr_len(const hs_wr *wr)
{
    return (size_t)(wr->p - wr->start);
}

#endif

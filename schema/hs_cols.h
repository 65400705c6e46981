/* hs_cols: columns of varints packed into one stored body, under zstd when
 * that makes it smaller: the part the stored blocks' codecs share
 * (schema/hs_tree.h, schema/hs_snaps.h). Each codec writes its own header
 * (version, count, ...) and then this:
 *
 *   u8      method: 0 the columns as they are, 1 one zstd frame of them
 *           (written when it is at most two thirds of their size: below
 *           that, decompressing a block costs readers more than the bytes
 *           saved are worth)
 *   varint  len[k], bytes of each column uncompressed
 *   ...     the columns end to end (compressed for method 1), to the end
 *           of the blob
 *
 * A codec that changes what it puts in the columns changes its own
 * version; this layout is part of every such version.
 */
#ifndef HS_COLS_H
#define HS_COLS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "hs_buf.h"
#include "hs_wire.h"

#define HS_COLS_MAX 8

/* What a reader or writer of many blocks keeps between them: zstd
 * contexts and the buffer blocks are decompressed into. Zeroed, it is
 * ready. */
typedef struct hs_cols_ctx {
    struct ZSTD_DCtx_s *z;
    struct ZSTD_CCtx_s *cz;
    uint8_t *buf;
    size_t cap;
} hs_cols_ctx;
void hs_cols_ctx_free(hs_cols_ctx *c);

/* ---- writing ------------------------------------------------------------ */

typedef struct hs_cols {
    uint8_t *col[HS_COLS_MAX];
    size_t len[HS_COLS_MAX];
    int k;
    uint8_t *mem;
} hs_cols;

/* Room for up to n varints in each of k columns; or cap[i] bytes for
 * column i. 0 or HS_ENOMEM. */
int hs_cols_init(hs_cols *c, int k, size_t n);
int hs_cols_init_cap(hs_cols *c, int k, const size_t *cap);

static inline void hs_cols_put(hs_cols *c, int col, uint64_t v)
{
    c->len[col] += hs_varint_encode(c->col[col] + c->len[col], v);
}

/* n bytes as they are (a column of strings, say). */
static inline void hs_cols_put_bytes(hs_cols *c, int col, const void *p, size_t n)
{
    memcpy(c->col[col] + c->len[col], p, n);
    c->len[col] += n;
}

/* Appends the method, the lengths and the columns to out, compressed at
 * zstd level when that saves a third (with ctx's compression context,
 * when ctx is not NULL). 0 or HS_ENOMEM. */
int hs_cols_write(hs_cols *c, int level, hs_buf *out, hs_cols_ctx *ctx);
void hs_cols_free(hs_cols *c);

/* How many of up to most items a block takes, at least 1, to come to
 * about limit bytes: cum[i] the columns' bytes of the items before item i
 * (cum[0] the first's start), ratio what the writer's last block came to
 * against its columns (0: none yet, taken as 1). A writer that packs rows
 * into blocks of a size then compresses most blocks once. */
static inline size_t hs_cols_fit(const size_t *cum, size_t most, double ratio, size_t limit)
{
    double r = ratio > 0 ? ratio : 1, room = (double)limit * 0.9;
    size_t m = 1;
    while (m < most && (double)(cum[m + 1] - cum[0]) * r <= room) m++;
    return m;
}

/* ---- reading ------------------------------------------------------------ */

typedef struct hs_cols_rd {
    hs_rd col[HS_COLS_MAX];
    int k;
    uint8_t *buf; /* the decompressed columns, when they were and no ctx was given */
} hs_cols_rd;

/* Reads the rest of rd as k columns of at most max_each bytes each; with
 * ctx (may be NULL), decompressed into its buffer, which the columns then
 * borrow until its next use. 0, or HS_ECORRUPT (a malformed body),
 * HS_ENOMEM. */
int hs_cols_open(hs_rd *rd, int k, uint64_t max_each, hs_cols_rd *out, hs_cols_ctx *ctx);
/* The same with a bound of its own for each column (max[i] bytes). */
int hs_cols_open_max(hs_rd *rd, int k, const uint64_t *max, hs_cols_rd *out, hs_cols_ctx *ctx);
/* The next varint of a column, decoded inline when it is whole and under
 * 9 bytes (every value a column holds but the largest), else by
 * hs_rd_varint (which tells the errors). */
static inline uint64_t hs_cols_get(hs_rd *col)
{
    const uint8_t *p = col->p;
    if (!col->err && col->end - p >= 9) {
        uint64_t v = 0;
        for (int s = 0; s < 63; s += 7) {
            uint8_t b = *p++;
            v |= (uint64_t)(b & 0x7f) << s;
            if (b < 0x80) {
                col->p = p;
                return v;
            }
        }
    }
    return hs_rd_varint(col);
}

/* 0 when every column was read to its end without error, else
 * HS_ECORRUPT. */
int hs_cols_done(const hs_cols_rd *c);
void hs_cols_rd_free(hs_cols_rd *c);

#endif

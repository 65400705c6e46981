/* hs_cols: varint columns packed and compressed (see hs_cols.h). */
#include "hs_cols.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "hs_error.h"

enum { METHOD_STORED = 0, METHOD_ZSTD = 1 };

int hs_cols_init_cap(hs_cols *c, int k, const size_t *cap)
{
    assert(k >= 1 && k <= HS_COLS_MAX);
    memset(c, 0, sizeof *c);
    c->k = k;
    size_t total = 0;
    for (int i = 0; i < k; i++) total += cap[i];
    if (!(c->mem = malloc(total ? total : 1))) return HS_ENOMEM;
    for (size_t i = 0, at = 0; i < (size_t)k; at += cap[i], i++) c->col[i] = c->mem + at;
    return 0;
}

int hs_cols_init(hs_cols *c, int k, size_t n)
{
    assert(k >= 1 && k <= HS_COLS_MAX);
    size_t cap[HS_COLS_MAX];
    for (int i = 0; i < k; i++) cap[i] = (n ? n : 1) * HS_VARINT_MAX;
    return hs_cols_init_cap(c, k, cap);
}

void hs_cols_free(hs_cols *c)
{
    free(c->mem);
    c->mem = NULL;
}

int hs_cols_write(hs_cols *c, int level, hs_buf *out, hs_cols_ctx *ctx)
{
    size_t raw = 0;
    /* the columns end to end at the start of mem (each moves down) */
    for (int i = 0; i < c->k; i++) {
        memmove(c->mem + raw, c->col[i], c->len[i]);
        c->col[i] = c->mem + raw;
        raw += c->len[i];
    }
    uint8_t hdr[1 + HS_VARINT_MAX * HS_COLS_MAX];
    hs_wr wr;
    hs_wr_init(&wr, hdr, sizeof hdr);
    hs_wr_u8(&wr, METHOD_ZSTD);
    for (int i = 0; i < c->k; i++) hs_wr_varint(&wr, c->len[i]);
    assert(!wr.err);
    size_t bound = ZSTD_compressBound(raw);
    uint8_t *z = malloc(bound);
    if (ctx && !ctx->cz) ctx->cz = ZSTD_createCCtx();
    size_t zn = !z               ? 0
                : ctx && ctx->cz ? ZSTD_compressCCtx(ctx->cz, z, bound, c->mem, raw, level)
                                 : ZSTD_compress(z, bound, c->mem, raw, level);
    int rc = 0;
    if (!z || ZSTD_isError(zn)) {
        rc = HS_ENOMEM;
    } else if (zn > raw / 3 * 2) { /* too little saved: the columns as they are */
        hdr[0] = METHOD_STORED;
        hs_buf_put(out, hdr, hs_wr_len(&wr));
        hs_buf_put(out, c->mem, raw);
    } else {
        hs_buf_put(out, hdr, hs_wr_len(&wr));
        hs_buf_put(out, z, zn);
    }
    free(z);
    return rc ? rc : out->oom ? HS_ENOMEM : 0;
}

void hs_cols_ctx_free(hs_cols_ctx *c)
{
    ZSTD_freeDCtx(c->z);
    ZSTD_freeCCtx(c->cz);
    free(c->buf);
    memset(c, 0, sizeof *c);
}

/* Decompresses body into buf (raw bytes): 0 or HS_ECORRUPT. */
static int unzstd(ZSTD_DCtx *z, uint8_t *buf, size_t raw, const uint8_t *body, size_t left)
{
    size_t got =
        z ? ZSTD_decompressDCtx(z, buf, raw, body, left) : ZSTD_decompress(buf, raw, body, left);
    return ZSTD_isError(got) || got != raw ? HS_ECORRUPT : 0;
}

int hs_cols_open(hs_rd *rd, int k, uint64_t max_each, hs_cols_rd *out, hs_cols_ctx *ctx)
{
    assert(k >= 1 && k <= HS_COLS_MAX);
    uint64_t max[HS_COLS_MAX];
    for (int i = 0; i < k; i++) max[i] = max_each;
    return hs_cols_open_max(rd, k, max, out, ctx);
}

int hs_cols_open_max(hs_rd *rd, int k, const uint64_t *max, hs_cols_rd *out, hs_cols_ctx *ctx)
{
    assert(k >= 1 && k <= HS_COLS_MAX);
    memset(out, 0, sizeof *out);
    out->k = k;
    uint8_t method = hs_rd_u8(rd);
    size_t len[HS_COLS_MAX], raw = 0;
    for (int i = 0; i < k; i++) {
        len[i] = (size_t)hs_rd_varint_max(rd, max[i]);
        raw += len[i];
    }
    if (rd->err || method > METHOD_ZSTD) return HS_ECORRUPT;
    const uint8_t *body = rd->p;
    size_t left = hs_rd_left(rd);
    /* a frame that says it holds another size is refused before any room
     * is made for it */
    if (method == METHOD_ZSTD && ZSTD_getFrameContentSize(body, left) != raw) return HS_ECORRUPT;
    if (method == METHOD_ZSTD && ctx) {
        if (!ctx->z && !(ctx->z = ZSTD_createDCtx())) return HS_ENOMEM;
        if (hs_array_room((void **)&ctx->buf, &ctx->cap, raw, 1)) return HS_ENOMEM;
        if (unzstd(ctx->z, ctx->buf, raw, body, left)) return HS_ECORRUPT;
        body = ctx->buf;
    } else if (method == METHOD_ZSTD) {
        if (!(out->buf = malloc(raw ? raw : 1))) return HS_ENOMEM;
        if (unzstd(NULL, out->buf, raw, body, left)) {
            hs_cols_rd_free(out);
            return HS_ECORRUPT;
        }
        body = out->buf;
    } else if (left != raw) {
        return HS_ECORRUPT;
    }
    size_t off = 0;
    for (int i = 0; i < k; i++) {
        hs_rd_init(&out->col[i], body + off, len[i]);
        off += len[i];
    }
    return 0;
}

int hs_cols_done(const hs_cols_rd *c)
{
    for (int i = 0; i < c->k; i++)
        if (c->col[i].err || hs_rd_left(&c->col[i])) return HS_ECORRUPT;
    return 0;
}

void hs_cols_rd_free(hs_cols_rd *c)
{
    free(c->buf);
    c->buf = NULL;
}

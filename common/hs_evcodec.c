/* hs_evcodec: the storage codec of events (see hs_evcodec.h).
 *
 * Blob layout, version 1 (all varints LEB128):
 *
 *   u8      version (1)
 *   varint  n, events in the blob (>= 1)
 *   varint  t0, time of the first event, ns
 *   varint  q, time quantum, ns (>= 1)
 *   u8      method: 0 columns stored as they are, 1 one zstd frame
 *   varint  len[4], bytes of each column once decompressed
 *   ...     the columns, concatenated in HS_EVCOL_* order (compressed for 1)
 *
 * Times are rounded down to a multiple of q (so that a q dividing a bucket
 * width keeps every time in its bucket): t0 is the first one, and column DT
 * holds n - 1 steps k[i] - k[i-1], where k[i] = (t[i] - t0) / q, so the
 * decoded time of event i is t0 + k[i] * q: exact for q = 1. HEAD, SIZE and
 * EXTRA hold n values each.
 *
 * Version 2, a segment of many frames' events in chunks: see hs_evcodec.h
 * (hs_evseg) and docs/protocol.md.
 */
#include "hs_evcodec.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>
#include <zstd_errors.h>

#include "hs_error.h"

/* zstd level 1: the columns' entropy is in the time steps, which no level
 * finds a pattern in; higher levels cost the writer more for a few per cent. */
#define EVCODEC_LEVEL 1

enum { METHOD_STORED = 0, METHOD_ZSTD = 1 };

/* ---- encoder ------------------------------------------------------------ */

/* Events every column has room for (HS_VARINT_MAX bytes each), so that
 * adding one writes without a check per value. */
static size_t col_room(const hs_evenc *enc)
{
    size_t room = SIZE_MAX;
    for (int c = 0; c < HS_EVCOL_COUNT; c++) {
        size_t r = (enc->cap[c] - enc->len[c]) / HS_VARINT_MAX;
        if (r < room) room = r;
    }
    return room;
}

static int col_grow(hs_evenc *enc)
{
    for (int c = 0; c < HS_EVCOL_COUNT; c++) {
        if (enc->cap[c] - enc->len[c] >= 64 * HS_VARINT_MAX) continue;
        size_t ncap = enc->cap[c] ? enc->cap[c] * 2 : 4096;
        uint8_t *np = realloc(enc->col[c], ncap);
        if (!np) return HS_ENOMEM;
        enc->col[c] = np;
        enc->cap[c] = ncap;
    }
    enc->room = col_room(enc);
    return 0;
}

static inline void col_put(hs_evenc *enc, int c, uint64_t v)
{
    uint8_t *p = enc->col[c] + enc->len[c], *p0 = p;
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    enc->len[c] += (size_t)(p - p0);
}

void hs_evenc_begin(hs_evenc *enc, uint64_t q)
{
    assert(q >= 1);
    for (int c = 0; c < HS_EVCOL_COUNT; c++) enc->len[c] = 0;
    enc->n = enc->t0 = enc->k = 0;
    enc->q = q;
    enc->oom = 0;
    enc->room = col_room(enc);
}

void hs_evenc_add(hs_evenc *enc, const hs_event *e)
{
    assert(e->weight >= e->size);
    if (!enc->room && (enc->oom || col_grow(enc))) {
        enc->oom = 1;
        return;
    }
    enc->room--;
    uint64_t t = enc->q == 1 ? e->t_ns : e->t_ns - e->t_ns % enc->q;
    if (enc->n == 0) {
        enc->t0 = t;
    } else {
        assert(t >= enc->t0);
        uint64_t d = t - enc->t0, k = enc->q == 1 ? d : d / enc->q;
        assert(k >= enc->k);
        col_put(enc, HS_EVCOL_DT, k - enc->k);
        enc->k = k;
    }
    col_put(enc, HS_EVCOL_HEAD, e->stack_id << 1 | (uint64_t)(e->is_free != 0));
    col_put(enc, HS_EVCOL_SIZE, e->size);
    col_put(enc, HS_EVCOL_EXTRA, e->weight - e->size);
    enc->n++;
}

static int out_reserve(hs_evenc *enc, size_t need)
{
    if (need <= enc->out_cap) return 0;
    uint8_t *np = realloc(enc->out, need);
    if (!np) return HS_ENOMEM;
    enc->out = np;
    enc->out_cap = need;
    return 0;
}

/* Compresses the columns (raw bytes) after the header's hdr bytes; 1 when
 * the result is no smaller than the columns themselves (store them). */
static int compress_cols(hs_evenc *enc, size_t hdr, size_t raw, size_t *outlen)
{
    if (!enc->z && !(enc->z = ZSTD_createCCtx())) return HS_ENOMEM;
    if (raw > enc->cat_cap) {
        uint8_t *np = realloc(enc->cat, raw);
        if (!np) return HS_ENOMEM;
        enc->cat = np;
        enc->cat_cap = raw;
    }
    size_t off = 0;
    for (int c = 0; c < HS_EVCOL_COUNT; c++) {
        if (enc->len[c]) memcpy(enc->cat + off, enc->col[c], enc->len[c]);
        off += enc->len[c];
    }
    size_t bound = ZSTD_compressBound(raw);
    if (out_reserve(enc, hdr + bound)) return HS_ENOMEM;
    size_t n = ZSTD_compressCCtx(enc->z, enc->out + hdr, bound, enc->cat, raw, EVCODEC_LEVEL);
    if (ZSTD_isError(n)) return HS_ENOMEM;
    *outlen = n;
    return n >= raw;
}

int hs_evenc_finish(hs_evenc *enc, const uint8_t **out, size_t *len)
{
    if (enc->oom) return HS_ENOMEM;
    if (enc->n == 0) return HS_EINVAL;
    uint8_t hdr[2 + HS_VARINT_MAX * (3 + HS_EVCOL_COUNT)];
    hs_wr wr;
    hs_wr_init(&wr, hdr, sizeof hdr);
    hs_wr_u8(&wr, HS_EVCODEC_VERSION);
    hs_wr_varint(&wr, enc->n);
    hs_wr_varint(&wr, enc->t0);
    hs_wr_varint(&wr, enc->q);
    uint8_t *method = wr.p;
    hs_wr_u8(&wr, METHOD_ZSTD);
    size_t raw = 0;
    for (int c = 0; c < HS_EVCOL_COUNT; c++) {
        hs_wr_varint(&wr, enc->len[c]);
        raw += enc->len[c];
    }
    assert(!wr.err);
    size_t h = hs_wr_len(&wr), body = 0;
    int rc = compress_cols(enc, h, raw, &body);
    if (rc < 0) return rc;
    if (rc == 1) { /* incompressible: store the columns */
        *method = METHOD_STORED;
        memcpy(enc->out + h, enc->cat, raw); /* out holds the bound, at least raw */
        body = raw;
    }
    memcpy(enc->out, hdr, h);
    *out = enc->out;
    *len = h + body;
    return 0;
}

void hs_evenc_free(hs_evenc *enc)
{
    if (!enc) return;
    for (int c = 0; c < HS_EVCOL_COUNT; c++) free(enc->col[c]);
    free(enc->out);
    free(enc->cat);
    ZSTD_freeCCtx(enc->z);
    memset(enc, 0, sizeof *enc);
}

/* ---- segment encoder (version 2) ----------------------------------------- */

/* The zstd window of a segment's stream: long enough for the patterns of a
 * program's allocations to repeat within it, small enough that an open run
 * costs the writer well under a MiB. */
#define EVSEG_WINDOW_LOG 18
/* A blob compresses what was added since the last one when it is at least
 * this long; shorter, it goes uncompressed after the zstd part (a flush of
 * a few events would cost more than it saves). A segment that compresses
 * more than EVSEG_DENSE times waits for EVSEG_FLUSH_DENSE bytes: its chunks'
 * block headers and tables would outweigh its events. */
#define EVSEG_FLUSH_MIN   (16u << 10)
#define EVSEG_FLUSH_DENSE (64u << 10)
#define EVSEG_DENSE       16
/* A chunk's header: its events and its four column lengths. */
#define EVSEG_CHUNK_HDR_MAX (5 * HS_VARINT_MAX)

void hs_evseg_begin(hs_evseg *seg, uint64_t q)
{
    assert(q >= 1);
    for (int c = 0; c < HS_EVCOL_COUNT; c++) seg->len[c] = 0;
    seg->pn = 0;
    seg->z_len = 0;
    seg->zraw = seg->n = seg->t0 = seg->t_first = seg->t_last = 0;
    seg->k = 0;
    seg->q = q;
    seg->oom = seg->ended = 0;
    if (seg->cs) ZSTD_CCtx_reset(seg->cs, ZSTD_reset_session_and_parameters);
}

static inline uint8_t *put_varint(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

static inline void seg_put(hs_evseg *seg, int c, uint64_t v)
{
    seg->len[c] = (size_t)(put_varint(seg->col[c] + seg->len[c], v) - seg->col[c]);
}

/* Room for one more value in every column; 0 or HS_ENOMEM. */
static int seg_room(hs_evseg *seg)
{
    for (int c = 0; c < HS_EVCOL_COUNT; c++) {
        if (seg->cap[c] - seg->len[c] >= HS_VARINT_MAX) continue;
        size_t ncap = seg->cap[c] ? seg->cap[c] * 2 : 16u << 10;
        uint8_t *np = realloc(seg->col[c], ncap);
        if (!np) return HS_ENOMEM;
        seg->col[c] = np;
        seg->cap[c] = ncap;
    }
    return 0;
}

void hs_evseg_add(hs_evseg *seg, const hs_event *e)
{
    assert(e->weight >= e->size && !seg->ended);
    if (seg->oom || seg_room(seg)) {
        seg->oom = 1;
        return;
    }
    uint64_t t = e->t_ns - e->t_ns % seg->q;
    if (seg->n == 0) seg->t0 = seg->t_first = seg->t_last = t;
    if (t < seg->t_first) seg->t_first = t;
    if (t > seg->t_last) seg->t_last = t;
    /* frames from different threads may overlap in time: signed steps */
    int64_t k =
        t >= seg->t0 ? (int64_t)((t - seg->t0) / seg->q) : -(int64_t)((seg->t0 - t) / seg->q);
    /* mod 2^64, as the decoder adds it back */
    int64_t dk = (int64_t)((uint64_t)k - (uint64_t)seg->k);
    seg_put(seg, HS_EVCOL_DT, (uint64_t)dk << 1 ^ (uint64_t)(dk >> 63));
    seg_put(seg, HS_EVCOL_HEAD, e->stack_id << 1 | (uint64_t)(e->is_free != 0));
    seg_put(seg, HS_EVCOL_SIZE, e->size);
    seg_put(seg, HS_EVCOL_EXTRA, e->weight - e->size);
    seg->k = k;
    seg->n++;
    seg->pn++;
}

/* The header of the chunk of the pending events: their number and the
 * lengths of their columns; its length. */
static size_t chunk_header(const hs_evseg *seg, uint8_t *hdr)
{
    uint8_t *p = put_varint(hdr, seg->pn);
    for (int c = 0; c < HS_EVCOL_COUNT; c++) p = put_varint(p, seg->len[c]);
    return (size_t)(p - hdr);
}

uint64_t hs_evseg_raw(const hs_evseg *seg)
{
    uint64_t r = seg->zraw + EVSEG_CHUNK_HDR_MAX;
    for (int c = 0; c < HS_EVCOL_COUNT; c++) r += seg->len[c];
    return r;
}

/* Feeds in to the stream with directive end, output into z. */
static int seg_feed(hs_evseg *seg, const void *p, size_t len, ZSTD_EndDirective end)
{
    ZSTD_inBuffer in = {p, len, 0};
    for (;;) {
        size_t need = seg->z_len + ZSTD_compressBound(in.size - in.pos) + 64;
        if (need > seg->z_cap) {
            size_t ncap = seg->z_cap ? seg->z_cap : 16u << 10;
            while (ncap < need) ncap *= 2;
            uint8_t *np = realloc(seg->z, ncap);
            if (!np) return HS_ENOMEM;
            seg->z = np;
            seg->z_cap = ncap;
        }
        ZSTD_outBuffer out = {seg->z, seg->z_cap, seg->z_len};
        size_t left = ZSTD_compressStream2(seg->cs, &out, &in, end);
        if (ZSTD_isError(left)) return HS_ENOMEM;
        seg->z_len = out.pos;
        if (end == ZSTD_e_continue ? in.pos == in.size : left == 0) break;
    }
    seg->zraw += len;
    return 0;
}

/* Compresses the pending events, one chunk, each column a block of its own
 * (its own entropy tables; matches still reach into earlier chunks); with
 * final, the frame is ended after it. */
static int seg_compress(hs_evseg *seg, int final)
{
    if (!seg->cs && !(seg->cs = ZSTD_createCCtx())) return HS_ENOMEM;
    if (seg->zraw == 0 && seg->z_len == 0) {
        ZSTD_CCtx_setParameter(seg->cs, ZSTD_c_compressionLevel, EVCODEC_LEVEL);
        ZSTD_CCtx_setParameter(seg->cs, ZSTD_c_windowLog, EVSEG_WINDOW_LOG);
        ZSTD_CCtx_setParameter(seg->cs, ZSTD_c_checksumFlag, 0);
        ZSTD_CCtx_setParameter(seg->cs, ZSTD_c_contentSizeFlag, 0);
    }
    int rc = 0;
    if (seg->pn) {
        uint8_t hdr[EVSEG_CHUNK_HDR_MAX];
        rc = seg_feed(seg, hdr, chunk_header(seg, hdr), ZSTD_e_continue);
        for (int c = 0; c < HS_EVCOL_COUNT && !rc; c++)
            rc = seg_feed(seg, seg->col[c], seg->len[c],
                          final && c == HS_EVCOL_COUNT - 1 ? ZSTD_e_end : ZSTD_e_flush);
    } else if (final) {
        rc = seg_feed(seg, NULL, 0, ZSTD_e_end);
    }
    if (rc) return rc;
    for (int c = 0; c < HS_EVCOL_COUNT; c++) seg->len[c] = 0;
    seg->pn = 0;
    seg->ended = final;
    return 0;
}

int hs_evseg_flush(hs_evseg *seg)
{
    if (seg->oom) return HS_ENOMEM;
    if (!seg->pn || seg->ended) return 0;
    int rc = seg_compress(seg, 0);
    if (rc) seg->oom = 1;
    return rc;
}

int hs_evseg_blob(hs_evseg *seg, int final, const uint8_t **out, size_t *len)
{
    if (seg->oom) return HS_ENOMEM;
    if (seg->n == 0) return HS_EINVAL;
    size_t pending = hs_evseg_pending(seg);
    /* final: end the stream once (an ended one takes nothing more) */
    size_t min =
        seg->zraw > EVSEG_DENSE * (uint64_t)seg->z_len ? EVSEG_FLUSH_DENSE : EVSEG_FLUSH_MIN;
    if (final ? !seg->ended : pending >= min) {
        int rc = seg_compress(seg, final);
        if (rc) {
            seg->oom = 1;
            return rc;
        }
        pending = 0;
    }
    uint8_t hdr[1 + 5 * HS_VARINT_MAX], chdr[EVSEG_CHUNK_HDR_MAX];
    hs_wr wr;
    hs_wr_init(&wr, hdr, sizeof hdr);
    hs_wr_u8(&wr, HS_EVCODEC_SEG_VERSION);
    hs_wr_varint(&wr, seg->n);
    hs_wr_varint(&wr, seg->t0);
    hs_wr_varint(&wr, seg->q);
    hs_wr_varint(&wr, seg->zraw);
    hs_wr_varint(&wr, seg->z_len);
    assert(!wr.err);
    size_t h = hs_wr_len(&wr), ch = seg->pn ? chunk_header(seg, chdr) : 0;
    size_t total = h + seg->z_len + ch + pending;
    if (total > seg->out_cap) {
        uint8_t *np = realloc(seg->out, total);
        if (!np) return HS_ENOMEM;
        seg->out = np;
        seg->out_cap = total;
    }
    uint8_t *p = seg->out;
    memcpy(p, hdr, h);
    p += h;
    if (seg->z_len) memcpy(p, seg->z, seg->z_len);
    p += seg->z_len;
    if (ch) memcpy(p, chdr, ch);
    p += ch;
    for (int c = 0; c < HS_EVCOL_COUNT && seg->pn; c++) {
        if (seg->len[c]) memcpy(p, seg->col[c], seg->len[c]);
        p += seg->len[c];
    }
    assert((size_t)(p - seg->out) == total);
    *out = seg->out;
    *len = total;
    return 0;
}

int hs_evseg_dense(const hs_evseg *seg)
{
    return seg->z_len && seg->zraw > EVSEG_DENSE * (uint64_t)seg->z_len;
}

int hs_evseg_repack(hs_evseg *seg, hs_evdec *dec)
{
    assert(!seg->ended);
    const uint8_t *blob;
    size_t len;
    int rc = hs_evseg_blob(seg, 0, &blob, &len);
    if (rc) return rc;
    uint8_t *copy = malloc(len);
    if (!copy) return HS_ENOMEM;
    memcpy(copy, blob, len);
    uint64_t n = seg->n, q = seg->q;
    if ((rc = hs_evdec_open(dec, copy, len)) == 0) {
        hs_evseg_begin(seg, q);
        hs_event e;
        while ((rc = hs_evdec_next(dec, &e)) == 1) hs_evseg_add(seg, &e);
        if (rc == 0 && (seg->oom || seg->n != n)) rc = HS_ENOMEM;
    }
    free(copy);
    return rc;
}

void hs_evseg_shrink(hs_evseg *seg, size_t keep)
{
    for (int c = 0; c < HS_EVCOL_COUNT; c++) {
        if (seg->cap[c] <= keep || seg->len[c]) continue;
        free(seg->col[c]);
        seg->col[c] = NULL;
        seg->cap[c] = 0;
    }
    if (seg->z_cap > keep && !seg->z_len) {
        free(seg->z);
        seg->z = NULL;
        seg->z_cap = 0;
    }
    if (seg->out_cap > keep) {
        free(seg->out);
        seg->out = NULL;
        seg->out_cap = 0;
    }
}

void hs_evseg_free(hs_evseg *seg)
{
    if (!seg) return;
    for (int c = 0; c < HS_EVCOL_COUNT; c++) free(seg->col[c]);
    free(seg->z);
    free(seg->out);
    ZSTD_freeCCtx(seg->cs);
    memset(seg, 0, sizeof *seg);
}

void *hs_evseg_take_ctx(hs_evseg *seg)
{
    void *ctx = seg->cs;
    seg->cs = NULL;
    return ctx;
}

void hs_evseg_give_ctx(hs_evseg *seg, void *ctx)
{
    assert(!seg->cs && seg->zraw == 0 && seg->z_len == 0);
    seg->cs = ctx;
    if (ctx) ZSTD_CCtx_reset(ctx, ZSTD_reset_session_and_parameters);
}

void hs_evseg_ctx_free(void *ctx)
{
    ZSTD_freeCCtx(ctx);
}

/* ---- decoder ------------------------------------------------------------ */

static int buf_reserve(hs_evdec *dec, size_t need);

static int decompress_cols(hs_evdec *dec, const uint8_t *p, size_t len, size_t raw)
{
    if (buf_reserve(dec, raw)) return HS_ENOMEM;
    if (!dec->z && !(dec->z = ZSTD_createDCtx())) return HS_ENOMEM;
    /* exactly raw bytes out of whole frames, nothing after them; the output
     * is bounded by raw whatever a frame claims */
    size_t n = ZSTD_decompressDCtx(dec->z, dec->buf, raw, p, len);
    if (ZSTD_isError(n))
        return ZSTD_getErrorCode(n) == ZSTD_error_memory_allocation ? HS_ENOMEM : HS_ECORRUPT;
    if (n != raw) return HS_ECORRUPT;
    dec->cols = dec->buf;
    return 0;
}

static int buf_reserve(hs_evdec *dec, size_t need)
{
    if (need <= dec->buf_cap) return 0;
    uint8_t *nb = realloc(dec->buf, need);
    if (!nb) return HS_ENOMEM;
    dec->buf = nb;
    dec->buf_cap = need;
    return 0;
}

/* The zstd part of a segment: exactly zraw bytes out of exactly its zlen
 * bytes in, a frame that is ended or only flushed. */
static int seg_inflate(hs_evdec *dec, const uint8_t *z, size_t zlen, size_t zraw)
{
    if (!dec->z && !(dec->z = ZSTD_createDCtx())) return HS_ENOMEM;
    ZSTD_DCtx_reset(dec->z, ZSTD_reset_session_only);
    ZSTD_inBuffer in = {z, zlen, 0};
    ZSTD_outBuffer out = {dec->buf, zraw, 0};
    while (in.pos < in.size) {
        size_t before = in.pos + out.pos;
        size_t r = ZSTD_decompressStream(dec->z, &out, &in);
        if (ZSTD_isError(r))
            return ZSTD_getErrorCode(r) == ZSTD_error_memory_allocation ? HS_ENOMEM : HS_ECORRUPT;
        if (r == 0 && in.pos < in.size) return HS_ECORRUPT; /* bytes after the frame */
        if (in.pos + out.pos == before) return HS_ECORRUPT; /* no progress: output full */
    }
    return out.pos == zraw ? 0 : HS_ECORRUPT;
}

static int open_seg(hs_evdec *dec, hs_rd *rd, const uint8_t *p)
{
    uint64_t n = hs_rd_varint(rd);
    uint64_t t0 = hs_rd_varint(rd);
    uint64_t q = hs_rd_varint(rd);
    uint64_t zraw = hs_rd_varint_max(rd, HS_EVCODEC_SEG_RAW_MAX);
    if (t0 > INT64_MAX || q > INT64_MAX) return HS_ECORRUPT;
    uint64_t zlen = hs_rd_varint_max(rd, HS_EVCODEC_SEG_RAW_MAX);
    if (rd->err || n == 0 || q == 0 || zlen > hs_rd_left(rd)) return HS_ECORRUPT;
    const uint8_t *z = p + hs_rd_offset(rd);
    size_t tail = hs_rd_left(rd) - (size_t)zlen;
    /* an event takes four bytes at least (and a chunk's header five) */
    if (tail > HS_EVCODEC_SEG_RAW_MAX - zraw || n > (zraw + tail) / 4) return HS_ECORRUPT;
    size_t raw = (size_t)zraw + tail;
    int rc = buf_reserve(dec, raw ? raw : 1);
    if (rc) return rc;
    if (zraw && (rc = seg_inflate(dec, z, (size_t)zlen, (size_t)zraw))) return rc;
    if (!zraw && zlen) return HS_ECORRUPT;
    if (tail) memcpy(dec->buf + zraw, z + zlen, tail);
    dec->cols = dec->buf;
    dec->raw = raw;
    dec->seg = 1;
    dec->n = n;
    dec->t0 = t0;
    dec->q = q;
    hs_evdec_rewind(dec);
    return 0;
}

int hs_evdec_open(hs_evdec *dec, const uint8_t *p, size_t len)
{
    hs_rd rd;
    hs_rd_init(&rd, p, len);
    dec->n = dec->left = 0;
    dec->wire1 = dec->seg = 0;
    uint8_t version = hs_rd_u8(&rd);
    if (rd.err) return HS_ECORRUPT;
    if (version == HS_EVCODEC_SEG_VERSION) return open_seg(dec, &rd, p);
    if (version != HS_EVCODEC_VERSION) return version ? HS_EVERSION : HS_ECORRUPT;
    uint64_t n = hs_rd_varint(&rd);
    uint64_t t0 = hs_rd_varint(&rd);
    uint64_t q = hs_rd_varint(&rd);
    uint8_t method = hs_rd_u8(&rd);
    uint64_t raw = 0, lens[HS_EVCOL_COUNT];
    for (int c = 0; c < HS_EVCOL_COUNT; c++) {
        lens[c] = hs_rd_varint_max(&rd, HS_EVCODEC_RAW_MAX);
        raw += lens[c];
    }
    /* every event has a head, a size and an extra of at least a byte each */
    if (rd.err || n == 0 || q == 0 || raw > HS_EVCODEC_RAW_MAX || n > lens[HS_EVCOL_HEAD] ||
        n > lens[HS_EVCOL_SIZE] || n > lens[HS_EVCOL_EXTRA] || n - 1 > lens[HS_EVCOL_DT])
        return HS_ECORRUPT;
    const uint8_t *body = p + hs_rd_offset(&rd);
    size_t blen = hs_rd_left(&rd);
    if (method == METHOD_STORED) {
        if (blen != raw) return HS_ECORRUPT;
        dec->cols = body;
    } else if (method == METHOD_ZSTD) {
        int rc = decompress_cols(dec, body, blen, (size_t)raw);
        if (rc) return rc;
    } else {
        return HS_ECORRUPT;
    }
    for (int c = 0; c < HS_EVCOL_COUNT; c++) dec->lens[c] = (size_t)lens[c];
    dec->n = n;
    dec->t0 = t0;
    dec->q = q;
    hs_evdec_rewind(dec);
    return 0;
}

int hs_evdec_open_row(hs_evdec *dec, int schema, const uint8_t *p, size_t len)
{
    if (schema >= HS_EVCODEC_SCHEMA) return hs_evdec_open(dec, p, len);
    dec->wire1 = 1;
    dec->seg = 0;
    dec->wp = p;
    dec->wlen = len;
    dec->n = len / 4; /* an entry takes 4 bytes at least */
    return hs_events_begin(&dec->it, p, len) ? HS_ECORRUPT : 0;
}

void hs_evdec_rewind(hs_evdec *dec)
{
    if (dec->wire1) {
        hs_events_begin(&dec->it, dec->wp, dec->wlen);
        return;
    }
    if (dec->seg) {
        hs_rd_init(&dec->rows, dec->cols, dec->raw);
        dec->left = dec->n;
        dec->cleft = 0;
        dec->sk = 0;
        return;
    }
    size_t off = 0;
    for (int c = 0; c < HS_EVCOL_COUNT; c++) {
        hs_rd_init(&dec->col[c], dec->cols + off, dec->lens[c]);
        off += dec->lens[c];
    }
    dec->left = dec->n;
    dec->k = 0;
}

/* The next chunk of a segment: its header, then its columns' readers. */
static int next_chunk(hs_evdec *dec)
{
    uint64_t cn = hs_rd_varint(&dec->rows), lens[HS_EVCOL_COUNT];
    for (int c = 0; c < HS_EVCOL_COUNT; c++) lens[c] = hs_rd_varint(&dec->rows);
    if (dec->rows.err || cn == 0 || cn > dec->left) return HS_ECORRUPT;
    for (int c = 0; c < HS_EVCOL_COUNT; c++) {
        /* a value takes a byte at least */
        if (lens[c] > hs_rd_left(&dec->rows) || lens[c] < cn) return HS_ECORRUPT;
        hs_rd_init(&dec->col[c], hs_rd_bytes(&dec->rows, (size_t)lens[c]), (size_t)lens[c]);
    }
    dec->cleft = cn;
    return 0;
}

/* The next event of a segment, from its chunk's columns. */
static int next_seg(hs_evdec *dec, hs_event *out)
{
    if (!dec->left) return hs_rd_left(&dec->rows) || dec->cleft ? HS_ECORRUPT : 0;
    if (!dec->cleft && next_chunk(dec)) return HS_ECORRUPT;
    uint64_t zz = hs_rd_varint(&dec->col[HS_EVCOL_DT]);
    uint64_t head = hs_rd_varint(&dec->col[HS_EVCOL_HEAD]);
    uint64_t size = hs_rd_varint(&dec->col[HS_EVCOL_SIZE]);
    uint64_t extra = hs_rd_varint(&dec->col[HS_EVCOL_EXTRA]);
    int64_t dk = (int64_t)(zz >> 1) ^ -(int64_t)(zz & 1), k, d, t;
    for (int c = 0; c < HS_EVCOL_COUNT; c++)
        if (dec->col[c].err) return HS_ECORRUPT;
    k = (int64_t)((uint64_t)dec->sk + (uint64_t)dk); /* mod 2^64, as the encoder took it */
    if (__builtin_mul_overflow(k, (int64_t)dec->q, &d) ||
        __builtin_add_overflow((int64_t)dec->t0, d, &t) || t < 0 || extra > UINT64_MAX - size ||
        head >> 1 == 0)
        return HS_ECORRUPT;
    dec->sk = k;
    out->t_ns = (uint64_t)t;
    out->stack_id = head >> 1;
    out->is_free = (int)(head & 1);
    out->size = size;
    out->weight = size + extra;
    dec->left--;
    if (--dec->cleft == 0)
        for (int c = 0; c < HS_EVCOL_COUNT; c++)
            if (hs_rd_left(&dec->col[c])) return HS_ECORRUPT; /* bytes no event used */
    return 1;
}

int hs_evdec_next(hs_evdec *dec, hs_event *out)
{
    if (dec->wire1) {
        int rc = hs_events_next(&dec->it, out);
        return rc < 0 ? HS_ECORRUPT : rc;
    }
    if (dec->seg) return next_seg(dec, out);
    if (!dec->left) {
        for (int c = 0; c < HS_EVCOL_COUNT; c++)
            if (hs_rd_left(&dec->col[c])) return HS_ECORRUPT; /* bytes no event used */
        return 0;
    }
    if (dec->left != dec->n) {
        uint64_t dk = hs_rd_varint(&dec->col[HS_EVCOL_DT]);
        if (dk > UINT64_MAX - dec->k) return HS_ECORRUPT;
        dec->k += dk;
    }
    uint64_t head = hs_rd_varint(&dec->col[HS_EVCOL_HEAD]);
    uint64_t size = hs_rd_varint(&dec->col[HS_EVCOL_SIZE]);
    uint64_t extra = hs_rd_varint(&dec->col[HS_EVCOL_EXTRA]);
    for (int c = 0; c < HS_EVCOL_COUNT; c++)
        if (dec->col[c].err) return HS_ECORRUPT;
    if ((dec->k && dec->k > (UINT64_MAX - dec->t0) / dec->q) || extra > UINT64_MAX - size ||
        head >> 1 == 0)
        return HS_ECORRUPT;
    out->t_ns = dec->t0 + dec->k * dec->q;
    out->stack_id = head >> 1;
    out->is_free = (int)(head & 1);
    out->size = size;
    out->weight = size + extra;
    dec->left--;
    return 1;
}

void hs_evdec_free(hs_evdec *dec)
{
    if (!dec) return;
    free(dec->buf);
    ZSTD_freeDCtx(dec->z);
    memset(dec, 0, sizeof *dec);
}

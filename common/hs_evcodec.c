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

/* ---- decoder ------------------------------------------------------------ */

static int decompress_cols(hs_evdec *dec, const uint8_t *p, size_t len, size_t raw)
{
    if (raw > dec->buf_cap) {
        uint8_t *nb = realloc(dec->buf, raw);
        if (!nb) return HS_ENOMEM;
        dec->buf = nb;
        dec->buf_cap = raw;
    }
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

int hs_evdec_open(hs_evdec *dec, const uint8_t *p, size_t len)
{
    hs_rd rd;
    hs_rd_init(&rd, p, len);
    dec->n = dec->left = 0;
    dec->wire1 = 0;
    uint8_t version = hs_rd_u8(&rd);
    if (rd.err) return HS_ECORRUPT;
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
    size_t off = 0;
    for (int c = 0; c < HS_EVCOL_COUNT; c++) {
        hs_rd_init(&dec->col[c], dec->cols + off, dec->lens[c]);
        off += dec->lens[c];
    }
    dec->left = dec->n;
    dec->k = 0;
}

int hs_evdec_next(hs_evdec *dec, hs_event *out)
{
    if (dec->wire1) {
        int rc = hs_events_next(&dec->it, out);
        return rc < 0 ? HS_ECORRUPT : rc;
    }
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

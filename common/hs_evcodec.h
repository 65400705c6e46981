/* hs_evcodec: the storage codec of events (the `data` blob of an events row),
 * versioned apart from the wire protocol (docs/protocol.md, "Stored events").
 *
 * The server's writer encodes each EVENTS frame it applies into one blob; the
 * readers (the rollup replay of a resumed run, exports, the event_rows SQL
 * table) decode blobs with the iterator below and never see the wire format,
 * so the protocol can change without touching stored runs, and stored runs
 * can change codec (HS_EVCODEC_VERSION) without touching the protocol.
 *
 * A blob is a small header and four columns, one value per event, each a run
 * of LEB128 varints: the time step (in units of the blob's time quantum),
 * the head (stack_id << 1 | is_free), the requested size and the weight's
 * excess over the size. The columns are compressed together (one zstd
 * frame), which turns the repetitive stack, size and weight columns of an
 * every-allocation run into a few bits an event; time steps carry the real
 * information.
 *
 * Decoding is a pure function of (bytes, len) up to one buffer the iterator
 * owns: every length is checked against HS_EVCODEC_RAW_MAX and against the
 * bytes present, so a corrupt or hostile blob yields HS_ECORRUPT (or
 * HS_EVERSION for a codec this build does not know), never a read out of
 * bounds. Neither side is thread-safe; use one encoder or iterator per
 * thread.
 */
#ifndef HS_EVCODEC_H
#define HS_EVCODEC_H

#include <stddef.h>
#include <stdint.h>

#include "hs_proto.h"

#define HS_EVCODEC_VERSION 1
/* Bytes of a blob's columns once decompressed: an EVENTS frame's payload never
 * exceeds HS_FRAME_MAX, and its columns take no more than its entries. */
#define HS_EVCODEC_RAW_MAX HS_FRAME_MAX

enum { HS_EVCOL_DT, HS_EVCOL_HEAD, HS_EVCOL_SIZE, HS_EVCOL_EXTRA, HS_EVCOL_COUNT };

typedef struct hs_evenc {
    uint8_t *col[HS_EVCOL_COUNT];
    size_t len[HS_EVCOL_COUNT], cap[HS_EVCOL_COUNT];
    uint8_t *cat; /* the columns end to end, compressor input */
    size_t cat_cap;
    uint8_t *out; /* the last blob finished; lent until the next begin */
    size_t out_cap;
    void *z;     /* ZSTD_CCtx, kept between blobs */
    size_t room; /* events every column has room for */
    uint64_t n, t0, q, k;
    int oom;
} hs_evenc;

/* Starts a blob whose times are rounded down to multiples of q ns (q = 1:
 * exact). enc must be zeroed before its first use. */
void hs_evenc_begin(hs_evenc *enc, uint64_t q);
/* Appends one event; times must not decrease within a blob. */
void hs_evenc_add(hs_evenc *enc, const hs_event *e);
/* Ends the blob: *out (lent, valid until the next begin or free) and *len.
 * HS_ENOMEM when memory ran out, HS_EINVAL for a blob without events. */
int hs_evenc_finish(hs_evenc *enc, const uint8_t **out, size_t *len);
void hs_evenc_free(hs_evenc *enc);

typedef struct hs_evdec {
    hs_rd col[HS_EVCOL_COUNT];
    const uint8_t *cols; /* the columns: into the blob, or buf when decompressed */
    size_t lens[HS_EVCOL_COUNT];
    uint8_t *buf;
    size_t buf_cap;
    void *z; /* ZSTD_DCtx, kept between blobs */
    uint64_t n, left, t0, q, k;
    int wire1; /* the open row is a protocol version 1 EVENTS payload */
    hs_batch_it it;
    const uint8_t *wp;
    size_t wlen;
} hs_evdec;

/* Reads the header of blob p (borrowed until the next open) and
 * decompresses its columns. 0, or HS_ECORRUPT / HS_EVERSION / HS_ENOMEM. dec must be zeroed
 * before its first use. */
int hs_evdec_open(hs_evdec *dec, const uint8_t *p, size_t len);
/* The first schema version (schema/006_event_codec.sql) whose events rows
 * are in this codec; below it they are protocol version 1 EVENTS payloads. */
#define HS_EVCODEC_SCHEMA 6
/* Opens a row of a database at schema version `schema`: the codec from
 * HS_EVCODEC_SCHEMA on, else the EVENTS payload such a database held (a
 * read-only reader may see a database no writer has migrated yet). */
int hs_evdec_open_row(hs_evdec *dec, int schema, const uint8_t *p, size_t len);
/* The next event: 1, 0 after the last (when every column was used up
 * exactly), or HS_ECORRUPT. */
int hs_evdec_next(hs_evdec *dec, hs_event *out);
/* Back to the first event of the open blob. */
void hs_evdec_rewind(hs_evdec *dec);
/* Events in the open blob (from its header); for an EVENTS payload, a
 * bound (its bytes / 4). */
static inline uint64_t hs_evdec_count(const hs_evdec *dec)
{
    return dec->n;
}
void hs_evdec_free(hs_evdec *dec);

#endif

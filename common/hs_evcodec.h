/* hs_evcodec: the storage codec of events (the `data` blob of an events row),
 * versioned apart from the wire protocol (docs/protocol.md, "What is
 * stored").
 *
 * The server's writer adds the events of each EVENTS frame it applies to
 * its run's open segment (hs_evseg, version 2), stored as one blob once it
 * closes; the readers (the rollup replay of a resumed run, exports, the
 * event_rows SQL table) decode blobs with the iterator below and never see
 * the wire format, so the protocol can change without touching stored runs,
 * and stored runs can change codec without touching the protocol.
 *
 * Both versions keep four columns, one value per event, each a run of LEB128
 * varints: the time step (in units of the blob's time quantum), the head
 * (stack_id << 1 | is_free), the requested size and the weight's excess over
 * the size, compressed by zstd, which turns the repetitive stack, size and
 * weight columns of an every-allocation run into a few bits an event.
 * Version 1 (hs_evenc) holds one frame's events; version 2 many frames',
 * compressed by one stream whose window reaches across them.
 *
 * Decoding is a pure function of (bytes, len) up to one buffer the iterator
 * owns: every length is checked against HS_EVCODEC_RAW_MAX (a segment's
 * against HS_EVCODEC_SEG_RAW_MAX) and against the bytes present, so a
 * corrupt or hostile blob yields HS_ECORRUPT (or HS_EVERSION for a codec
 * this build does not know), never a read out of bounds. Neither side is
 * thread-safe; use one encoder or iterator per thread.
 */
#ifndef HS_EVCODEC_H
#define HS_EVCODEC_H

#include <stddef.h>
#include <stdint.h>

#include "hs_proto.h"

typedef struct hs_evdec hs_evdec;

/* Version 1: one blob per EVENTS frame, four columns (hs_evenc, below; what
 * schema 6 to 9 wrote, still read). Version 2: one blob per segment of a
 * run's events, many frames long (hs_evseg, below; what the writer writes
 * from schema 10 on). hs_evdec reads both. */
#define HS_EVCODEC_VERSION     1
#define HS_EVCODEC_SEG_VERSION 2
/* Bytes of a blob's columns once decompressed: an EVENTS frame's payload never
 * exceeds HS_FRAME_MAX, and its columns take no more than its entries. */
#define HS_EVCODEC_RAW_MAX HS_FRAME_MAX
/* The same for a segment: the writer closes a segment before a frame could
 * take it past HS_EVSEG_RAW_CAP, and a frame's events take no more than twice
 * its payload. */
#define HS_EVSEG_RAW_CAP       (4u << 20)
#define HS_EVCODEC_SEG_RAW_MAX (HS_EVSEG_RAW_CAP + 2 * HS_FRAME_MAX + 64)

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

/* A segment (version 2): the events of many frames of one run, in their
 * order of arrival, in chunks: each chunk the events added between two
 * compressions, as four columns like version 1's (the time step from the
 * previous event of the segment, from t0 for the first, in quanta and
 * zigzag-signed, since frames of different threads may overlap in time;
 * the head; the size; the weight's excess). The chunks are compressed as
 * they come by one zstd stream whose window spans many of them, each column
 * a block of its own, so a pattern of allocations and frees that repeats
 * across frames costs a few bytes per repetition; the events added since
 * the last compression follow the zstd part as one uncompressed chunk.
 *
 *   u8      version (2)
 *   varint  n, events (>= 1)
 *   varint  t0, time of the first event, ns (a multiple of q)
 *   varint  q, time quantum, ns (>= 1)
 *   varint  zraw, bytes the zstd part decompresses to
 *   varint  zlen, bytes of the zstd part
 *   ...     the zstd part (one frame, ended in a closed segment's blob, only
 *           flushed in an open one's), then the last chunk uncompressed
 *   chunk:  varint events (>= 1), varint len[4], the four columns
 *
 * A segment stays in memory while it is open (its zstd stream, the events
 * not yet compressed); hs_evseg_blob gives its blob as of now, as often as
 * wanted, each one a valid blob of every event added so far. */
typedef struct hs_evseg {
    uint8_t *col[HS_EVCOL_COUNT]; /* the pending chunk's columns */
    size_t len[HS_EVCOL_COUNT], cap[HS_EVCOL_COUNT];
    uint64_t pn; /* its events */
    uint8_t *z;  /* the zstd part so far */
    size_t z_len, z_cap;
    uint64_t zraw; /* bytes compressed into z */
    uint8_t *out;  /* the last blob given; lent until the next call */
    size_t out_cap;
    void *cs; /* ZSTD_CCtx of the open segment's stream */
    uint64_t n, t0, q;
    int64_t k;                /* the last event's time, in quanta from t0 */
    uint64_t t_first, t_last; /* the lowest and highest time added */
    int oom, ended;
} hs_evseg;

/* Starts a segment whose times are rounded down to multiples of q ns (the
 * writer passes times already rounded). seg must be zeroed before its first
 * use; begin may follow any state (it drops what was there). */
void hs_evseg_begin(hs_evseg *seg, uint64_t q);
/* Appends one event (times in any order; t_first and t_last follow). */
void hs_evseg_add(hs_evseg *seg, const hs_event *e);
/* The segment's blob as of now (*out lent until the next call on seg). With
 * final, the stream is ended and nothing may be added after. HS_ENOMEM,
 * HS_EINVAL for a segment without events. */
int hs_evseg_blob(hs_evseg *seg, int final, const uint8_t **out, size_t *len);
/* Compresses the events added since the last compression now (what a blob
 * does once they are 16 KiB), so that they need not stay in memory: for a
 * writer that adds many frames between two blobs. 0 or HS_ENOMEM. */
int hs_evseg_flush(hs_evseg *seg);
/* Bytes of the events added since the last compression. */
static inline size_t hs_evseg_pending(const hs_evseg *seg)
{
    size_t n = 0;
    for (int c = 0; c < HS_EVCOL_COUNT; c++) n += seg->len[c];
    return n;
}
/* Bytes the segment's events take uncompressed (a bound), and compressed
 * so far. */
uint64_t hs_evseg_raw(const hs_evseg *seg);
static inline size_t hs_evseg_zlen(const hs_evseg *seg)
{
    return seg->z_len;
}
void hs_evseg_free(hs_evseg *seg);
/* 1 when the segment compresses more than 16 times (an every-allocation
 * run's repetitions): its chunks, cut by the writer's commits, cost more in
 * block headers and tables than its events do. */
int hs_evseg_dense(const hs_evseg *seg);
/* Compresses the segment again as one chunk: its events, decoded with dec,
 * added anew (same events, times and order), not yet compressed; the next
 * blob (final) compresses them together. Before the final blob only. 0,
 * HS_ENOMEM. Holds the segment's events uncompressed for a moment. */
int hs_evseg_repack(hs_evseg *seg, hs_evdec *dec);
/* Frees the segment's buffers bigger than keep bytes that hold nothing. */
void hs_evseg_shrink(hs_evseg *seg, size_t keep);
/* A closed segment's compression context, taken out of it (NULL if none),
 * for another segment to use (hs_evseg_give) rather than allocate its own;
 * hs_evseg_ctx_free frees one nobody takes. */
void *hs_evseg_take_ctx(hs_evseg *seg);
void hs_evseg_give_ctx(hs_evseg *seg, void *ctx);
void hs_evseg_ctx_free(void *ctx);

struct hs_evdec {
    hs_rd col[HS_EVCOL_COUNT];
    const uint8_t *cols; /* the columns: into the blob, or buf when decompressed */
    size_t lens[HS_EVCOL_COUNT];
    uint8_t *buf;
    size_t buf_cap;
    void *z; /* ZSTD_DCtx, kept between blobs */
    uint64_t n, left, t0, q, k;
    int wire1; /* the open row is a protocol version 1 EVENTS payload */
    int seg;   /* the open row is a segment (version 2): events in rows, not columns */
    hs_rd rows;
    size_t raw;
    int64_t sk;     /* segment: the last event's time, in quanta from t0 */
    uint64_t cleft; /* segment: events left in the current chunk */
    hs_batch_it it;
    const uint8_t *wp;
    size_t wlen;
};

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
/* The first schema version (schema/010_event_segments.sql) whose open runs
 * keep their last segment in events_tail; every event of a run is then in
 * the view events_all (events before it). */
#define HS_EVSEG_SCHEMA 10
static inline const char *hs_evcodec_events_table(int schema)
{
    return schema >= HS_EVSEG_SCHEMA ? "events_all" : "events";
}
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

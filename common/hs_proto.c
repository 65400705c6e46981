/* hs_proto: frame splitting, decoders and encoders of protocol version 1.
 * The byte layout of each frame is documented in docs/protocol.md; keep the
 * two in step. */
#include "hs_proto.h"

#include <string.h>

#include "hs_error.h"

const uint8_t hs_magic[HS_MAGIC_LEN] = {0x89, 'H', 'S', 'P', '\r', '\n', 0x1a, '\n'};

const char *hs_frame_name(int type)
{
    switch (type) {
    case HS_FRAME_HELLO:
        return "HELLO";
    case HS_FRAME_MAPPINGS:
        return "MAPPINGS";
    case HS_FRAME_SYMBOLS:
        return "SYMBOLS";
    case HS_FRAME_STACKS:
        return "STACKS";
    case HS_FRAME_EVENTS:
        return "EVENTS";
    case HS_FRAME_PROCESS:
        return "PROCESS";
    case HS_FRAME_SIZES:
        return "SIZES";
    case HS_FRAME_DROPS:
        return "DROPS";
    case HS_FRAME_BYE:
        return "BYE";
    case HS_FRAME_ACK:
        return "ACK";
    case HS_FRAME_REFUSE:
        return "REFUSE";
    case HS_FRAME_SYMDATA:
        return "SYMDATA";
    case HS_FRAME_SYMREQ:
        return "SYMREQ";
    }
    return NULL;
}

const char *hs_drop_name(int kind)
{
    switch (kind) {
    case HS_DROP_ALLOC_EVENTS:
        return "alloc_events";
    case HS_DROP_FREE_EVENTS:
        return "free_events";
    case HS_DROP_ALLOC_BYTES:
        return "alloc_bytes";
    case HS_DROP_FREE_BYTES:
        return "free_bytes";
    case HS_DROP_STACKS_TRUNCATED:
        return "stacks_truncated";
    case HS_DROP_UNWIND_FAILED:
        return "unwind_failed";
    case HS_DROP_LIVE_SET_FULL:
        return "live_set_full";
    case HS_DROP_PYTHON_FALLBACK:
        return "python_fallback";
    case HS_DROP_MAIN_END_NS:
        return "main_end_ns";
    case HS_DROP_PYTHON_SMALL_UNSEEN:
        return "python_small_unseen";
    }
    static const char *const exact[] = {
        "exact_t_ns",        "exact_live_bytes", "exact_max_bytes",   "exact_max_t_ns",
        "exact_peak_bytes",  "exact_peak_t_ns",  "exact_allocs",      "exact_frees",
        "exact_alloc_bytes", "exact_free_bytes", "exact_error_bytes", "exact_flags",
    };
    _Static_assert(sizeof exact / sizeof *exact == HS_EXACT_KIND_LAST - HS_EXACT_KIND_FIRST + 1,
                   "a name for every exact kind");
    if (kind >= HS_EXACT_KIND_FIRST && kind <= HS_EXACT_KIND_LAST)
        return exact[kind - HS_EXACT_KIND_FIRST];
    return NULL;
}

/* The fields of hs_exact in kind order. */
static uint64_t *exact_field(hs_exact *x, uint32_t kind)
{
    uint64_t *f[] = {&x->t_ns,        &x->live_bytes, &x->max_bytes,   &x->max_t_ns,
                     &x->peak_bytes,  &x->peak_t_ns,  &x->allocs,      &x->frees,
                     &x->alloc_bytes, &x->free_bytes, &x->error_bytes, &x->flags};
    if (kind < HS_EXACT_KIND_FIRST || kind > HS_EXACT_KIND_LAST) return NULL;
    return f[kind - HS_EXACT_KIND_FIRST];
}

void hs_exact_put(hs_wr *wr, const hs_exact *x)
{
    hs_exact c = *x;
    for (uint32_t k = HS_EXACT_KIND_FIRST; k <= HS_EXACT_KIND_LAST; k++) {
        hs_wr_varint(wr, k);
        hs_wr_varint(wr, *exact_field(&c, k));
    }
}

int hs_exact_take(hs_exact *x, const hs_drop *d)
{
    uint64_t *f = exact_field(x, d->kind);
    if (!f) return 0;
    *f = d->value;
    return 1;
}

int hs_header_parse(const uint8_t *buf, size_t len, uint32_t *version)
{
    size_t n = len < HS_MAGIC_LEN ? len : HS_MAGIC_LEN;
    if (memcmp(buf, hs_magic, n) != 0) return HS_EPROTO;
    if (len < HS_MAGIC_LEN) return 0;
    uint64_t v;
    int k = hs_varint_decode(buf + HS_MAGIC_LEN, buf + len, &v);
    if (k == 0) return 0;
    if (k < 0) return HS_EPROTO;
    if (v != HS_PROTO_VERSION) return HS_EVERSION;
    *version = (uint32_t)v;
    return HS_MAGIC_LEN + k;
}

long hs_frame_split(const uint8_t *buf, size_t len, hs_frame *out)
{
    if (len < 2) return 0;
    uint64_t n;
    int k = hs_varint_decode(buf + 1, buf + len, &n);
    if (k == 0) return len >= HS_FRAME_HDR_MAX ? HS_EPROTO : 0;
    if (k < 0 || k > 4) return HS_EPROTO;
    if (n > HS_FRAME_MAX) return HS_ETOOBIG;
    size_t total = 1 + (size_t)k + (size_t)n;
    if (len < total) return 0;
    out->type = buf[0];
    out->len = (uint32_t)n;
    out->payload = buf + 1 + k;
    return (long)total;
}

/* The end of a decoded record: an error from the reader, else an error if
 * bytes remain. */
static int rd_finish(hs_rd *rd)
{
    if (rd->err) return rd->err;
    return hs_rd_left(rd) ? HS_EPROTO : 0;
}

static void rd_id16(hs_rd *rd, uint8_t out[16])
{
    const uint8_t *p = hs_rd_bytes(rd, 16);
    if (p) memcpy(out, p, 16);
}

int hs_hello_decode(hs_hello *h, const uint8_t *p, size_t len)
{
    hs_rd rd;
    hs_rd_init(&rd, p, len);
    memset(h, 0, sizeof *h);
    rd_id16(&rd, h->run_id);
    h->first_seq = hs_rd_varint(&rd);
    h->flags = hs_rd_varint(&rd);
    h->pid = hs_rd_varint(&rd);
    h->ppid = hs_rd_varint(&rd);
    rd_id16(&rd, h->parent_run_id);
    h->start_unix_ns = hs_rd_varint(&rd);
    h->sample_bytes = hs_rd_varint(&rd);
    h->max_depth = hs_rd_varint_max(&rd, HS_STACK_MAX_DEPTH);
    h->rss_interval_ms = hs_rd_varint(&rd);
    h->program = hs_rd_str(&rd, HS_STR_MAX);
    h->argc = (uint32_t)hs_rd_varint_max(&rd, HS_HELLO_MAX_ARGS);
    for (uint32_t i = 0; i < h->argc && !rd.err; i++) h->argv[i] = hs_rd_str(&rd, HS_STR_MAX);
    h->hostname = hs_rd_str(&rd, HS_STR_MAX);
    h->nlabels = (uint32_t)hs_rd_varint_max(&rd, HS_HELLO_MAX_LABELS);
    for (uint32_t i = 0; i < h->nlabels && !rd.err; i++) {
        h->labels[i].key = hs_rd_str(&rd, HS_STR_MAX);
        h->labels[i].value = hs_rd_str(&rd, HS_STR_MAX);
    }
    h->token = hs_rd_str(&rd, HS_STR_MAX);
    h->collector_version = hs_rd_str(&rd, HS_STR_MAX);
    /* Collectors before the resume key end here. */
    if (!rd.err && hs_rd_left(&rd)) h->resume_key = hs_rd_str(&rd, HS_RESUME_KEY_MAX);
    if (!rd.err && h->sample_bytes == 0) return HS_ERANGE;
    return rd_finish(&rd);
}

void hs_hello_encode(hs_wr *wr, const hs_hello *h)
{
    hs_wr_bytes(wr, h->run_id, 16);
    hs_wr_varint(wr, h->first_seq);
    hs_wr_varint(wr, h->flags);
    hs_wr_varint(wr, h->pid);
    hs_wr_varint(wr, h->ppid);
    hs_wr_bytes(wr, h->parent_run_id, 16);
    hs_wr_varint(wr, h->start_unix_ns);
    hs_wr_varint(wr, h->sample_bytes);
    hs_wr_varint(wr, h->max_depth);
    hs_wr_varint(wr, h->rss_interval_ms);
    hs_wr_str(wr, h->program.ptr, h->program.len);
    hs_wr_varint(wr, h->argc);
    for (uint32_t i = 0; i < h->argc; i++) hs_wr_str(wr, h->argv[i].ptr, h->argv[i].len);
    hs_wr_str(wr, h->hostname.ptr, h->hostname.len);
    hs_wr_varint(wr, h->nlabels);
    for (uint32_t i = 0; i < h->nlabels; i++) {
        hs_wr_str(wr, h->labels[i].key.ptr, h->labels[i].key.len);
        hs_wr_str(wr, h->labels[i].value.ptr, h->labels[i].value.len);
    }
    hs_wr_str(wr, h->token.ptr, h->token.len);
    hs_wr_str(wr, h->collector_version.ptr, h->collector_version.len);
    if (h->resume_key.len) hs_wr_str(wr, h->resume_key.ptr, h->resume_key.len);
}

static int batch_begin(hs_batch_it *it, const uint8_t *p, size_t len)
{
    memset(it, 0, sizeof *it);
    hs_rd_init(&it->rd, p, len);
    return 0;
}

/* 1 if another entry follows, 0 at a clean end, or the reader's error. */
static int batch_more(hs_batch_it *it)
{
    if (it->rd.err) return it->rd.err;
    return hs_rd_left(&it->rd) ? 1 : 0;
}

int hs_mappings_begin(hs_batch_it *it, const uint8_t *p, size_t len)
{
    batch_begin(it, p, len);
    it->t = hs_rd_varint(&it->rd);
    return it->rd.err;
}

int hs_mappings_next(hs_batch_it *it, hs_mapping *m)
{
    int more = batch_more(it);
    if (more <= 0) return more;
    hs_rd *rd = &it->rd;
    m->start = hs_rd_varint(rd);
    m->end = hs_rd_varint(rd);
    m->file_offset = hs_rd_varint(rd);
    m->build_id_len = (uint32_t)hs_rd_varint_max(rd, HS_BUILD_ID_MAX);
    m->build_id = hs_rd_bytes(rd, m->build_id_len);
    m->path = hs_rd_str(rd, HS_STR_MAX);
    if (rd->err) return rd->err;
    return m->end > m->start ? 1 : HS_ERANGE;
}

int hs_symbols_begin(hs_batch_it *it, const uint8_t *p, size_t len)
{
    return batch_begin(it, p, len);
}

int hs_symbols_next(hs_batch_it *it, hs_symbol *s)
{
    int more = batch_more(it);
    if (more <= 0) return more;
    hs_rd *rd = &it->rd;
    s->pc = hs_rd_varint(rd);
    s->function = hs_rd_str(rd, HS_FUNC_MAX);
    s->file = hs_rd_str(rd, HS_STR_MAX);
    s->line = hs_rd_varint_max(rd, UINT32_MAX);
    s->module = hs_rd_str(rd, HS_STR_MAX);
    s->module_offset = hs_rd_varint(rd);
    return rd->err ? rd->err : 1;
}

int hs_stacks_begin(hs_batch_it *it, const uint8_t *p, size_t len)
{
    return batch_begin(it, p, len);
}

int hs_stacks_next(hs_batch_it *it, hs_stack *s)
{
    int more = batch_more(it);
    if (more <= 0) return more;
    hs_rd *rd = &it->rd;
    s->id = hs_rd_varint(rd);
    s->depth = (uint32_t)hs_rd_varint_max(rd, HS_STACK_MAX_DEPTH);
    for (uint32_t i = 0; i < s->depth && !rd->err; i++) s->pcs[i] = hs_rd_varint(rd);
    if (rd->err) return rd->err;
    return (s->id > 0 && s->depth > 0) ? 1 : HS_ERANGE;
}

int hs_events_begin(hs_batch_it *it, const uint8_t *p, size_t len)
{
    batch_begin(it, p, len);
    it->t = hs_rd_varint(&it->rd);
    return it->rd.err;
}

int hs_events_next(hs_batch_it *it, hs_event *e)
{
    int more = batch_more(it);
    if (more <= 0) return more;
    hs_rd *rd = &it->rd;
    uint64_t dt = hs_rd_varint(rd);
    uint64_t head = hs_rd_varint(rd);
    e->size = hs_rd_varint(rd);
    uint64_t extra = hs_rd_varint(rd);
    if (rd->err) return rd->err;
    if (dt > UINT64_MAX - it->t || extra > UINT64_MAX - e->size) return HS_ERANGE;
    it->t += dt;
    it->aux++;
    e->t_ns = it->t;
    e->stack_id = head >> 1;
    e->is_free = (int)(head & 1);
    e->weight = e->size + extra;
    return e->stack_id > 0 ? 1 : HS_ERANGE;
}

int hs_process_begin(hs_batch_it *it, const uint8_t *p, size_t len)
{
    return batch_begin(it, p, len);
}

int hs_process_next(hs_batch_it *it, hs_process_sample *s)
{
    int more = batch_more(it);
    if (more <= 0) return more;
    s->t_ns = hs_rd_varint(&it->rd);
    s->rss_bytes = hs_rd_varint(&it->rd);
    s->vsize_bytes = hs_rd_varint(&it->rd);
    return it->rd.err ? it->rd.err : 1;
}

int hs_sizes_begin(hs_batch_it *it, const uint8_t *p, size_t len)
{
    return batch_begin(it, p, len);
}

int hs_sizes_next(hs_batch_it *it, hs_size_bucket *b)
{
    int more = batch_more(it);
    if (more <= 0) return more;
    b->bucket = (uint32_t)hs_rd_varint_max(&it->rd, HS_SIZE_BUCKETS - 1);
    b->allocs = hs_rd_varint(&it->rd);
    b->bytes = hs_rd_varint(&it->rd);
    return it->rd.err ? it->rd.err : 1;
}

int hs_drops_begin(hs_batch_it *it, const uint8_t *p, size_t len)
{
    return batch_begin(it, p, len);
}

int hs_drops_next(hs_batch_it *it, hs_drop *d)
{
    int more = batch_more(it);
    if (more <= 0) return more;
    d->kind = (uint32_t)hs_rd_varint_max(&it->rd, UINT32_MAX);
    d->value = hs_rd_varint(&it->rd);
    return it->rd.err ? it->rd.err : 1;
}

int hs_bye_decode(hs_bye *b, const uint8_t *p, size_t len)
{
    hs_rd rd;
    hs_rd_init(&rd, p, len);
    b->t_end_ns = hs_rd_varint(&rd);
    b->flags = hs_rd_varint(&rd);
    b->alloc_events = hs_rd_varint(&rd);
    b->free_events = hs_rd_varint(&rd);
    b->collector_peak_bytes = hs_rd_varint(&rd);
    return rd_finish(&rd);
}

void hs_bye_encode(hs_wr *wr, const hs_bye *b)
{
    hs_wr_varint(wr, b->t_end_ns);
    hs_wr_varint(wr, b->flags);
    hs_wr_varint(wr, b->alloc_events);
    hs_wr_varint(wr, b->free_events);
    hs_wr_varint(wr, b->collector_peak_bytes);
}

int hs_ack_decode(uint64_t *next_seq, const uint8_t *p, size_t len)
{
    hs_rd rd;
    hs_rd_init(&rd, p, len);
    *next_seq = hs_rd_varint(&rd);
    return rd_finish(&rd);
}

int hs_symreq_decode(const uint8_t **bid, uint32_t *blen, const uint8_t *p, size_t len)
{
    hs_rd rd;
    hs_rd_init(&rd, p, len);
    *blen = (uint32_t)hs_rd_varint_max(&rd, HS_BUILD_ID_MAX);
    *bid = hs_rd_bytes(&rd, *blen);
    if (!rd.err && *blen == 0) return HS_ERANGE;
    return rd_finish(&rd);
}

void hs_symreq_encode(hs_wr *wr, const uint8_t *bid, uint32_t blen)
{
    hs_wr_str(wr, (const char *)bid, blen);
}

int hs_symdata_decode(hs_symdata *d, const uint8_t *p, size_t len)
{
    hs_rd rd;
    hs_rd_init(&rd, p, len);
    memset(d, 0, sizeof *d);
    d->blen = (uint32_t)hs_rd_varint_max(&rd, HS_BUILD_ID_MAX);
    d->bid = hs_rd_bytes(&rd, d->blen);
    d->method = (uint32_t)hs_rd_varint_max(&rd, HS_SYMDATA_LZ);
    d->offset = hs_rd_varint(&rd);
    d->total = hs_rd_varint(&rd);
    d->size = (uint32_t)hs_rd_varint_max(&rd, HS_SYMDATA_PIECE);
    d->data = hs_rd_str(&rd, HS_SYMDATA_PIECE + HS_SYMDATA_PIECE / 16 + 64);
    int rc = rd_finish(&rd);
    if (rc) return rc;
    if (d->blen == 0) return HS_ERANGE;
    if (d->total == 0) return d->offset || d->size || d->data.len ? HS_ERANGE : 0;
    if (d->size == 0 || d->offset > d->total || d->size > d->total - d->offset) return HS_ERANGE;
    if (d->method == HS_SYMDATA_RAW && d->data.len != d->size) return HS_ERANGE;
    return 0;
}

void hs_symdata_head(hs_wr *wr, const hs_symdata *d)
{
    hs_wr_str(wr, (const char *)d->bid, d->blen);
    hs_wr_varint(wr, d->method);
    hs_wr_varint(wr, d->offset);
    hs_wr_varint(wr, d->total);
    hs_wr_varint(wr, d->size);
}

int hs_refuse_decode(hs_str *reason, const uint8_t *p, size_t len)
{
    hs_rd rd;
    hs_rd_init(&rd, p, len);
    *reason = hs_rd_str(&rd, HS_STR_MAX);
    return rd_finish(&rd);
}

void hs_header_encode(hs_wr *wr)
{
    hs_wr_bytes(wr, hs_magic, HS_MAGIC_LEN);
    hs_wr_varint(wr, HS_PROTO_VERSION);
}

size_t hs_frame_begin(hs_wr *wr, uint8_t type)
{
    hs_wr_u8(wr, type);
    size_t pos = hs_wr_len(wr);
    static const uint8_t zero_len[4] = {0x80, 0x80, 0x80, 0x00};
    hs_wr_bytes(wr, zero_len, 4);
    return pos;
}

void hs_frame_end(hs_wr *wr, size_t pos)
{
    if (wr->err) return;
    size_t n = hs_wr_len(wr) - pos - 4;
    if (n > HS_FRAME_MAX) {
        wr->err = HS_ETOOBIG;
        return;
    }
    uint8_t *q = wr->start + pos;
    q[0] = (uint8_t)(0x80 | (n & 0x7f));
    q[1] = (uint8_t)(0x80 | ((n >> 7) & 0x7f));
    q[2] = (uint8_t)(0x80 | ((n >> 14) & 0x7f));
    q[3] = (uint8_t)((n >> 21) & 0x7f);
}

void hs_mapping_put(hs_wr *wr, const hs_mapping *m)
{
    hs_wr_varint(wr, m->start);
    hs_wr_varint(wr, m->end);
    hs_wr_varint(wr, m->file_offset);
    hs_wr_str(wr, (const char *)m->build_id, m->build_id_len);
    hs_wr_str(wr, m->path.ptr, m->path.len);
}

void hs_symbol_put(hs_wr *wr, const hs_symbol *s)
{
    hs_wr_varint(wr, s->pc);
    hs_wr_str(wr, s->function.ptr, s->function.len);
    hs_wr_str(wr, s->file.ptr, s->file.len);
    hs_wr_varint(wr, s->line);
    hs_wr_str(wr, s->module.ptr, s->module.len);
    hs_wr_varint(wr, s->module_offset);
}

void hs_stack_put(hs_wr *wr, uint64_t id, const uint64_t *pcs, uint32_t depth)
{
    hs_wr_varint(wr, id);
    hs_wr_varint(wr, depth);
    for (uint32_t i = 0; i < depth; i++) hs_wr_varint(wr, pcs[i]);
}

void hs_event_put(hs_wr *wr, uint64_t dt_ns, uint64_t stack_id, int is_free, uint64_t size,
                  uint64_t weight)
{
    hs_wr_varint(wr, dt_ns);
    hs_wr_varint(wr, stack_id << 1 | (is_free ? 1u : 0u));
    hs_wr_varint(wr, size);
    hs_wr_varint(wr, weight > size ? weight - size : 0);
}

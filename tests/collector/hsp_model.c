/* hsp_model: reading a stream file back for the tests (see hsp_model.h). */
#include "hsp_model.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hs_error.h"
#include "hs_symbols.h"

/* Frames are named here as the server names them (server/hs_symbols.h):
 * the collector sends modules and offsets only. One hs_syms for the test
 * process: each build is read once. */
static hs_syms *syms;
static hs_syms_stream stream;

static void fail(hsp_model *m, const char *fmt, ...)
{
    if (m->error[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->error, sizeof m->error, fmt, ap);
    va_end(ap);
}

static char *dup_str(hs_str s)
{
    char *p = malloc(s.len + 1);
    memcpy(p, s.ptr, s.len);
    p[s.len] = 0;
    return p;
}

static int sym_cmp(const void *a, const void *b)
{
    uint64_t x = ((const hsp_sym *)a)->pc, y = ((const hsp_sym *)b)->pc;
    return x < y ? -1 : x > y;
}

const hsp_sym *hsp_sym_of(const hsp_model *m, uint64_t pc)
{
    hsp_sym key = {.pc = pc};
    return bsearch(&key, m->syms, m->nsyms, sizeof key, sym_cmp);
}

const char *hsp_frame_fn(const hsp_model *m, const hsp_stack *s, uint32_t i)
{
    if (!s || i >= s->depth) return "";
    const hsp_sym *y = hsp_sym_of(m, s->pcs[i]);
    return y ? y->function : "";
}

/* Symbols arrive in batches; the array stays sorted for lookups. */
static size_t sym_cap;

static void sym_add(hsp_model *m, const hs_symbol *s)
{
    if (m->nsyms == sym_cap) {
        sym_cap = sym_cap ? sym_cap * 2 : 1024;
        m->syms = realloc(m->syms, sym_cap * sizeof *m->syms);
    }
    size_t lo = 0, hi = m->nsyms;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (m->syms[mid].pc < s->pc)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < m->nsyms && m->syms[lo].pc == s->pc) {
        fail(m, "pc %llx defined twice", (unsigned long long)s->pc);
        return;
    }
    memmove(&m->syms[lo + 1], &m->syms[lo], (m->nsyms - lo) * sizeof *m->syms);
    m->nsyms++;
    hsp_sym *y = &m->syms[lo];
    y->pc = s->pc;
    y->function = dup_str(s->function);
    y->file = dup_str(s->file);
    y->module = dup_str(s->module);
    y->module_offset = s->module_offset;
    y->line = s->line;
}

/* SYMBOLS: counted as sent, then named as the server names them. */
static int frame_symbols(hsp_model *m, const hs_frame *f)
{
    hs_batch_it it;
    int rc;
    hs_symbol s;
    if (!(rc = hs_symbols_begin(&it, f->payload, f->len)))
        while ((rc = hs_symbols_next(&it, &s)) == 1)
            m->native_named += s.function.len && s.module.len;
    if (rc) return rc;
    uint8_t *named = NULL;
    size_t nlen = 0;
    uint64_t n = 0;
    if (!syms && hs_syms_new(&syms, NULL)) abort();
    int w = hs_syms_rewrite(syms, &stream, f->payload, f->len, &named, &nlen, &n);
    const uint8_t *p = w == 1 ? named : f->payload;
    size_t len = w == 1 ? nlen : f->len;
    if (!(rc = hs_symbols_begin(&it, p, len)))
        while ((rc = hs_symbols_next(&it, &s)) == 1) sym_add(m, &s);
    free(named);
    return rc;
}

/* A stack as the server reads it: each pc preceded by its inlined frames. */
static void stack_add(hsp_model *m, const hs_stack *s)
{
    if (s->id != m->nstacks + 1) fail(m, "stack id %llu out of order", (unsigned long long)s->id);
    m->stacks = realloc(m->stacks, (m->nstacks + 1) * sizeof *m->stacks);
    hsp_stack *t = &m->stacks[m->nstacks++];
    memset(t, 0, sizeof *t);
    t->id = s->id;
    t->exact_weights = 1;
    /* each pc preceded by its inlined frames, as the server reads them */
    t->pcs = malloc(HS_STACK_MAX_DEPTH * sizeof(uint64_t));
    uint32_t nf = 0;
    for (uint32_t i = 0; i < s->depth && nf < HS_STACK_MAX_DEPTH; i++) {
        if (hs_inl_pc_ok(s->pcs[i]) && !(i > 0 && hs_inl_pc_of(s->pcs[i - 1], s->pcs[i])))
            for (int k = 0; k < HS_SYMS_INLINE_MAX && nf < HS_STACK_MAX_DEPTH - 1 &&
                            hsp_sym_of(m, hs_inl_pc(s->pcs[i], k));
                 k++)
                t->pcs[nf++] = hs_inl_pc(s->pcs[i], k);
        t->pcs[nf++] = s->pcs[i];
        if (!hsp_sym_of(m, s->pcs[i]))
            fail(m, "stack %llu uses undefined pc %llx", (unsigned long long)s->id,
                 (unsigned long long)s->pcs[i]);
    }
    t->depth = nf;
}

/* An event counted against its stack (and the watched size). */
static void event_add(hsp_model *m, const hs_event *e)
{
    if (e->stack_id > m->nstacks) {
        fail(m, "event uses undefined stack %llu", (unsigned long long)e->stack_id);
        return;
    }
    hsp_stack *t = &m->stacks[e->stack_id - 1];
    if (m->watch_size && e->size == m->watch_size) {
        if (e->is_free) {
            m->watch_frees++;
            m->watch_free_weight += e->weight;
        } else {
            m->watch_allocs++;
            m->watch_alloc_weight += e->weight;
        }
    }
    if (e->weight != e->size) t->exact_weights = 0;
    if (e->is_free) {
        t->frees++;
        t->free_bytes += e->size;
        t->free_weight += e->weight;
        m->free_events++;
    } else {
        t->allocs++;
        t->alloc_bytes += e->size;
        t->alloc_weight += e->weight;
        m->alloc_events++;
    }
}

static void frame(hsp_model *m, const hs_frame *f, size_t off)
{
    hs_batch_it it;
    int rc = 0;
    switch (f->type) {
    case HS_FRAME_HELLO:
        rc = hs_hello_decode(&m->hello, f->payload, f->len);
        m->has_hello = 1;
        break;
    case HS_FRAME_MAPPINGS: {
        hs_mapping x;
        m->mapping_frames++;
        hs_syms_stream_mappings(&stream, f->payload, f->len);
        if (!(rc = hs_mappings_begin(&it, f->payload, f->len)))
            while ((rc = hs_mappings_next(&it, &x)) == 1) {
            }
        break;
    }
    case HS_FRAME_SYMBOLS:
        rc = frame_symbols(m, f);
        break;
    case HS_FRAME_STACKS: {
        static hs_stack s;
        if (!(rc = hs_stacks_begin(&it, f->payload, f->len)))
            while ((rc = hs_stacks_next(&it, &s)) == 1) stack_add(m, &s);
        break;
    }
    case HS_FRAME_EVENTS: {
        hs_event e;
        m->events_frames++;
        if (!(rc = hs_events_begin(&it, f->payload, f->len)))
            while ((rc = hs_events_next(&it, &e)) == 1) event_add(m, &e);
        break;
    }
    case HS_FRAME_PROCESS: {
        hs_process_sample s;
        if (!(rc = hs_process_begin(&it, f->payload, f->len)))
            while ((rc = hs_process_next(&it, &s)) == 1) {
                m->process_samples++;
                if (s.rss_bytes > m->max_rss) m->max_rss = s.rss_bytes;
            }
        break;
    }
    case HS_FRAME_SIZES: {
        hs_size_bucket b;
        memset(m->sizes_n, 0, sizeof m->sizes_n);
        memset(m->sizes_b, 0, sizeof m->sizes_b);
        if (!(rc = hs_sizes_begin(&it, f->payload, f->len)))
            while ((rc = hs_sizes_next(&it, &b)) == 1) {
                m->sizes_n[b.bucket] = b.allocs;
                m->sizes_b[b.bucket] = b.bytes;
            }
        break;
    }
    case HS_FRAME_DROPS: {
        hs_drop d;
        if (!(rc = hs_drops_begin(&it, f->payload, f->len)))
            while ((rc = hs_drops_next(&it, &d)) == 1)
                if (d.kind <= HS_DROP_KIND_MAX) m->drops[d.kind] = d.value;
        break;
    }
    case HS_FRAME_BYE:
        rc = hs_bye_decode(&m->bye, f->payload, f->len);
        m->has_bye = 1;
        break;
    default:
        rc = HS_EPROTO;
    }
    if (rc < 0) fail(m, "%s in frame type %d at offset %zu", hs_strerror(rc), f->type, off);
}

int hsp_load(hsp_model *m, const char *path, uint64_t watch_size)
{
    memset(m, 0, sizeof *m);
    hs_syms_stream_free(&stream); /* a new stream: its own modules */
    m->watch_size = watch_size;
    sym_cap = 0;
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        fail(m, "cannot open %s", path);
        return -1;
    }
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    m->buf = malloc(n > 0 ? (size_t)n : 1);
    m->len = fread(m->buf, 1, n > 0 ? (size_t)n : 0, fp);
    fclose(fp);
    uint32_t v;
    int h = hs_header_parse(m->buf, m->len, &v);
    if (h <= 0) {
        fail(m, "bad header (%d)", h);
        return 0;
    }
    size_t off = (size_t)h;
    uint64_t seq = 0;
    while (off < m->len && !m->error[0]) {
        hs_frame f;
        long k = hs_frame_split(m->buf + off, m->len - off, &f);
        if (k <= 0) {
            fail(m, "bad frame at offset %zu (%ld)", off, k);
            break;
        }
        if (m->has_bye) fail(m, "frame after BYE at offset %zu", off);
        if (off == (size_t)h && f.type != HS_FRAME_HELLO) fail(m, "no HELLO first");
        frame(m, &f, off);
        if (f.type == HS_FRAME_HELLO)
            seq = m->hello.first_seq;
        else
            seq++;
        m->frames++;
        off += (size_t)k;
    }
    (void)seq;
    if (!m->error[0] && m->has_bye) {
        if (m->bye.alloc_events != m->alloc_events || m->bye.free_events != m->free_events)
            fail(m, "BYE counts %llu/%llu, stream holds %llu/%llu",
                 (unsigned long long)m->bye.alloc_events, (unsigned long long)m->bye.free_events,
                 (unsigned long long)m->alloc_events, (unsigned long long)m->free_events);
    }
    return 0;
}

void hsp_free(hsp_model *m)
{
    for (size_t i = 0; i < m->nsyms; i++) {
        free(m->syms[i].function);
        free(m->syms[i].file);
        free(m->syms[i].module);
    }
    for (size_t i = 0; i < m->nstacks; i++) free(m->stacks[i].pcs);
    free(m->syms);
    free(m->stacks);
    free(m->buf);
    memset(m, 0, sizeof *m);
}

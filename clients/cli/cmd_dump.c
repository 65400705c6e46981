/* heapstore dump: prints every frame of a stream file (.hsp), as text or as
 * one JSON object per line, then a line of totals per frame type. A corrupt
 * or truncated file prints what decoded cleanly, then an error naming the
 * byte offset, and exits 1. Uses the shared decoder in common/hs_proto.
 * Collectors send native frames as module and offset; dump names them on
 * this machine as the server would (server/hs_symbols.h: function, file,
 * line, inlined frames under their synthetic pcs) unless --raw. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hs_cli.h"
#include "hs_error.h"
#include "hs_proto.h"
#include "hs_symbols.h"

typedef struct dump {
    hs_syms *syms;         /* NULL with --raw */
    hs_syms_stream stream; /* the modules of the last MAPPINGS */
    FILE *out;
    int json;
    uint64_t seq; /* of the next frame after HELLO */
    int seen_hello;
    uint64_t count[256];
    uint64_t entries[256];
} dump;

static void put_str(dump *d, hs_str s)
{
    if (!d->json) {
        fprintf(d->out, "\"%.*s\"", (int)s.len, s.ptr);
        return;
    }
    fputc('"', d->out);
    for (size_t i = 0; i < s.len; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c == '"' || c == '\\')
            fprintf(d->out, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", d->out);
        else if (c == '\t')
            fputs("\\t", d->out);
        else if (c < 0x20 || c == 0x7f)
            fprintf(d->out, "\\u%04x", c);
        else
            fputc(c, d->out);
    }
    fputc('"', d->out);
}

static void put_hex(dump *d, const uint8_t *p, size_t n)
{
    fputc('"', d->out);
    for (size_t i = 0; i < n; i++) fprintf(d->out, "%02x", p[i]);
    fputc('"', d->out);
}

/* Field helpers: JSON  "k":v  or text  k=v. */
static void key(dump *d, const char *k, int *first)
{
    if (d->json)
        fprintf(d->out, "%s\"%s\":", *first ? "" : ",", k);
    else
        fprintf(d->out, " %s=", k);
    *first = 0;
}

static void kv_u64(dump *d, const char *k, uint64_t v, int *first)
{
    key(d, k, first);
    fprintf(d->out, "%" PRIu64, v);
}

static void kv_str(dump *d, const char *k, hs_str s, int *first)
{
    key(d, k, first);
    put_str(d, s);
}

static void kv_hex(dump *d, const char *k, const uint8_t *p, size_t n, int *first)
{
    key(d, k, first);
    put_hex(d, p, n);
}

/* Opens an entry of a batch: JSON {...} in an array, text an indented line. */
static void entry_open(dump *d, int *first_entry, int *first)
{
    if (d->json)
        fprintf(d->out, "%s{", *first_entry ? "" : ",");
    else
        fprintf(d->out, "\n   ");
    *first_entry = 0;
    *first = 1;
}

static void entry_close(dump *d)
{
    if (d->json) fputc('}', d->out);
}

static int dump_hello(dump *d, const hs_frame *f, int *first)
{
    static hs_hello h;
    int rc = hs_hello_decode(&h, f->payload, f->len);
    if (rc) return rc;
    d->seq = h.first_seq;
    d->seen_hello = 1;
    kv_hex(d, "run_id", h.run_id, 16, first);
    kv_u64(d, "first_seq", h.first_seq, first);
    kv_u64(d, "flags", h.flags, first);
    kv_u64(d, "pid", h.pid, first);
    kv_u64(d, "ppid", h.ppid, first);
    kv_hex(d, "parent_run_id", h.parent_run_id, 16, first);
    kv_u64(d, "start_unix_ns", h.start_unix_ns, first);
    kv_u64(d, "sample_bytes", h.sample_bytes, first);
    kv_u64(d, "max_depth", h.max_depth, first);
    kv_u64(d, "rss_interval_ms", h.rss_interval_ms, first);
    kv_str(d, "program", h.program, first);
    key(d, "argv", first);
    fputc('[', d->out);
    for (uint32_t i = 0; i < h.argc; i++) {
        if (i) fputc(',', d->out);
        put_str(d, h.argv[i]);
    }
    fputc(']', d->out);
    kv_str(d, "hostname", h.hostname, first);
    key(d, "labels", first);
    fputc(d->json ? '{' : '[', d->out);
    for (uint32_t i = 0; i < h.nlabels; i++) {
        if (i) fputc(',', d->out);
        put_str(d, h.labels[i].key);
        fputc(d->json ? ':' : '=', d->out);
        put_str(d, h.labels[i].value);
    }
    fputc(d->json ? '}' : ']', d->out);
    kv_str(d, "token", h.token, first);
    kv_str(d, "collector_version", h.collector_version, first);
    return 0;
}

/* The next entry of a batch, printed: 1, 0 after the last, or an error. */
typedef int (*entry_fn)(dump *d, hs_batch_it *it, int *fe);

static int entry_mapping(dump *d, hs_batch_it *it, int *fe)
{
    hs_mapping m;
    int rc, ef;
    if ((rc = hs_mappings_next(it, &m)) != 1) return rc;
    entry_open(d, fe, &ef);
    kv_u64(d, "start", m.start, &ef);
    kv_u64(d, "end", m.end, &ef);
    kv_u64(d, "file_offset", m.file_offset, &ef);
    kv_hex(d, "build_id", m.build_id, m.build_id_len, &ef);
    kv_str(d, "path", m.path, &ef);
    return 1;
}

static int entry_symbol(dump *d, hs_batch_it *it, int *fe)
{
    hs_symbol s;
    int rc, ef;
    if ((rc = hs_symbols_next(it, &s)) != 1) return rc;
    entry_open(d, fe, &ef);
    kv_u64(d, "pc", s.pc, &ef);
    kv_str(d, "function", s.function, &ef);
    kv_str(d, "file", s.file, &ef);
    kv_u64(d, "line", s.line, &ef);
    kv_str(d, "module", s.module, &ef);
    kv_u64(d, "module_offset", s.module_offset, &ef);
    return 1;
}

static int entry_stack(dump *d, hs_batch_it *it, int *fe)
{
    static hs_stack st; /* large: not on the stack */
    int rc, ef;
    if ((rc = hs_stacks_next(it, &st)) != 1) return rc;
    entry_open(d, fe, &ef);
    kv_u64(d, "id", st.id, &ef);
    key(d, "pcs", &ef);
    fputc('[', d->out);
    for (uint32_t i = 0; i < st.depth; i++) fprintf(d->out, "%s%" PRIu64, i ? "," : "", st.pcs[i]);
    fputc(']', d->out);
    return 1;
}

static int entry_event(dump *d, hs_batch_it *it, int *fe)
{
    hs_event e;
    int rc, ef;
    if ((rc = hs_events_next(it, &e)) != 1) return rc;
    entry_open(d, fe, &ef);
    kv_u64(d, "t", e.t_ns, &ef);
    kv_u64(d, "stack", e.stack_id, &ef);
    key(d, "free", &ef);
    fputs(e.is_free ? "true" : "false", d->out);
    kv_u64(d, "size", e.size, &ef);
    kv_u64(d, "weight", e.weight, &ef);
    return 1;
}

static int entry_process(dump *d, hs_batch_it *it, int *fe)
{
    hs_process_sample s;
    int rc, ef;
    if ((rc = hs_process_next(it, &s)) != 1) return rc;
    entry_open(d, fe, &ef);
    kv_u64(d, "t", s.t_ns, &ef);
    kv_u64(d, "rss", s.rss_bytes, &ef);
    kv_u64(d, "vsize", s.vsize_bytes, &ef);
    return 1;
}

static int entry_size(dump *d, hs_batch_it *it, int *fe)
{
    hs_size_bucket b;
    int rc, ef;
    if ((rc = hs_sizes_next(it, &b)) != 1) return rc;
    entry_open(d, fe, &ef);
    kv_u64(d, "bucket", b.bucket, &ef);
    kv_u64(d, "allocs", b.allocs, &ef);
    kv_u64(d, "bytes", b.bytes, &ef);
    return 1;
}

static int entry_drop(dump *d, hs_batch_it *it, int *fe)
{
    hs_drop x;
    int rc, ef;
    if ((rc = hs_drops_next(it, &x)) != 1) return rc;
    entry_open(d, fe, &ef);
    const char *name = hs_drop_name((int)x.kind);
    key(d, "kind", &ef);
    if (name)
        fprintf(d->out, "\"%s\"", name);
    else
        fprintf(d->out, "%" PRIu32, x.kind);
    kv_u64(d, "value", x.value, &ef);
    return 1;
}

/* Starts the batch of f: its iterator, its list's name and entry printer,
 * and the fields before the list (none for a frame of no list: its header
 * alone is shown). */
static int batch_begin(dump *d, const hs_frame *f, hs_batch_it *it, int *first, const char **list,
                       entry_fn *next)
{
    int rc = 0;
    switch (f->type) {
    case HS_FRAME_MAPPINGS:
        if (!(rc = hs_mappings_begin(it, f->payload, f->len))) kv_u64(d, "t", it->t, first);
        *list = "mappings", *next = entry_mapping;
        break;
    case HS_FRAME_EVENTS:
        if (!(rc = hs_events_begin(it, f->payload, f->len))) kv_u64(d, "t0", it->t, first);
        *list = "events", *next = entry_event;
        break;
    case HS_FRAME_SYMBOLS:
        rc = hs_symbols_begin(it, f->payload, f->len);
        *list = "symbols", *next = entry_symbol;
        break;
    case HS_FRAME_STACKS:
        rc = hs_stacks_begin(it, f->payload, f->len);
        *list = "stacks", *next = entry_stack;
        break;
    case HS_FRAME_PROCESS:
        rc = hs_process_begin(it, f->payload, f->len);
        *list = "samples", *next = entry_process;
        break;
    case HS_FRAME_SIZES:
        rc = hs_sizes_begin(it, f->payload, f->len);
        *list = "buckets", *next = entry_size;
        break;
    case HS_FRAME_DROPS:
        rc = hs_drops_begin(it, f->payload, f->len);
        *list = "drops", *next = entry_drop;
        break;
    }
    return rc;
}

/* Each batch: begin, then entries until 0 or an error. */
static int dump_batch(dump *d, const hs_frame *f, int *first, uint64_t *n_entries)
{
    hs_batch_it it;
    const char *list = NULL;
    entry_fn next = NULL;
    int rc = batch_begin(d, f, &it, first, &list, &next), fe = 1;
    if (rc || !next) return rc;
    assert(list);
    if (d->json) {
        key(d, list, first);
        fputc('[', d->out);
    }
    while ((rc = next(d, &it, &fe)) == 1) {
        entry_close(d);
        (*n_entries)++;
    }
    if (d->json) fputc(']', d->out);
    return rc;
}

static int dump_frame(dump *d, const hs_frame *f, uint64_t offset)
{
    const char *name = hs_frame_name(f->type);
    if (!name) return HS_EPROTO;
    int first = 1;
    uint64_t n = 0;
    if (d->json) {
        fprintf(d->out, "{\"offset\":%" PRIu64 ",\"type\":\"%s\",\"len\":%" PRIu32, offset, name,
                f->len);
        first = 0;
    } else {
        fprintf(d->out, "@%" PRIu64 " %s len=%" PRIu32, offset, name, f->len);
    }
    int numbered = f->type != HS_FRAME_HELLO && f->type < HS_FRAME_ACK && d->seen_hello;
    if (numbered) kv_u64(d, "seq", d->seq, &first);
    int rc = 0;
    uint8_t *named = NULL;
    hs_frame nf = *f;
    if (d->syms && f->type == HS_FRAME_MAPPINGS)
        hs_syms_stream_mappings(&d->stream, f->payload, f->len);
    if (d->syms && f->type == HS_FRAME_SYMBOLS) {
        size_t nlen;
        uint64_t looked;
        if (hs_syms_rewrite(d->syms, &d->stream, f->payload, f->len, &named, &nlen, &looked) == 1) {
            nf.payload = named;
            nf.len = (uint32_t)nlen;
            f = &nf;
        }
    }
    switch (f->type) {
    case HS_FRAME_HELLO:
        rc = dump_hello(d, f, &first);
        break;
    case HS_FRAME_BYE: {
        hs_bye b;
        if ((rc = hs_bye_decode(&b, f->payload, f->len))) break;
        kv_u64(d, "t_end", b.t_end_ns, &first);
        kv_u64(d, "flags", b.flags, &first);
        kv_u64(d, "alloc_events", b.alloc_events, &first);
        kv_u64(d, "free_events", b.free_events, &first);
        kv_u64(d, "collector_peak_bytes", b.collector_peak_bytes, &first);
        break;
    }
    case HS_FRAME_ACK: {
        uint64_t next;
        if ((rc = hs_ack_decode(&next, f->payload, f->len))) break;
        kv_u64(d, "next_seq", next, &first);
        break;
    }
    case HS_FRAME_REFUSE: {
        hs_str why;
        if ((rc = hs_refuse_decode(&why, f->payload, f->len))) break;
        kv_str(d, "reason", why, &first);
        break;
    }
    default:
        rc = dump_batch(d, f, &first, &n);
        break;
    }
    if (d->json)
        fputs("}\n", d->out);
    else
        fputc('\n', d->out);
    free(named);
    if (rc < 0) return rc;
    if (numbered) d->seq++;
    d->count[f->type]++;
    d->entries[f->type] += n;
    return 0;
}

static void totals(dump *d, uint64_t bytes)
{
    int first = 1;
    if (d->json)
        fprintf(d->out, "{\"totals\":{");
    else
        fprintf(d->out, "totals:");
    for (int t = 0; t < 256; t++) {
        if (!d->count[t]) continue;
        if (d->json)
            fprintf(d->out, "%s\"%s\":{\"frames\":%" PRIu64 ",\"entries\":%" PRIu64 "}",
                    first ? "" : ",", hs_frame_name(t), d->count[t], d->entries[t]);
        else
            fprintf(d->out, " %s=%" PRIu64 "(%" PRIu64 ")", hs_frame_name(t), d->count[t],
                    d->entries[t]);
        first = 0;
    }
    if (d->json)
        fprintf(d->out, "},\"bytes\":%" PRIu64 "}\n", bytes);
    else
        fprintf(d->out, " bytes=%" PRIu64 "\n", bytes);
}

/* The options into d, *path and *raw: -1 to go on, else the exit status. */
static int dump_args(int argc, char **argv, dump *d, const char **path, int *raw)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            d->json = 1;
        else if (!strcmp(argv[i], "--raw"))
            *raw = 1;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: heapstore dump FILE.hsp [--json] [--raw]\n"
                   "Prints every frame of a collector stream file, then totals per frame type\n"
                   "(frames and entries). Exits 1 at the first corrupt byte, naming its offset.\n"
                   "Native frames are named from the files on this machine (inlined functions\n"
                   "as entries of their own); --raw prints them as sent (module and offset).\n");
            return 0;
        } else if (!*path)
            *path = argv[i];
        else {
            fprintf(stderr, "heapstore dump: unexpected argument '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!*path) {
        fprintf(stderr, "usage: heapstore dump FILE.hsp [--json]\n");
        return 2;
    }
    return -1;
}

/* Every frame of the stream in buf; *off where it stopped. 0, or 1 at the
 * first corrupt byte (said on stderr). */
static int dump_stream(dump *d, const uint8_t *buf, size_t len, const char *path, size_t *off)
{
    uint32_t version = 0;
    int h = hs_header_parse(buf, len, &version);
    *off = 0;
    if (h <= 0) {
        fprintf(stderr, "heapstore dump: %s: %s at byte offset 0\n", path,
                h == 0 ? "truncated stream header" : hs_strerror(h));
        return 1;
    }
    *off = (size_t)h;
    while (*off < len) {
        hs_frame f;
        long n = hs_frame_split(buf + *off, len - *off, &f);
        if (n <= 0) {
            fflush(d->out);
            fprintf(stderr, "heapstore dump: %s: %s at byte offset %zu\n", path,
                    n == 0 ? "truncated frame" : hs_strerror((int)n), *off);
            return 1;
        }
        int rc = dump_frame(d, &f, *off);
        if (rc) {
            fflush(d->out);
            fprintf(stderr, "heapstore dump: %s: %s in the %s frame at byte offset %zu\n", path,
                    hs_strerror(rc), hs_frame_name(f.type) ? hs_frame_name(f.type) : "unknown",
                    *off);
            return 1;
        }
        *off += (size_t)n;
    }
    return 0;
}

int hs_cmd_dump(int argc, char **argv)
{
    dump d = {.out = stdout};
    const char *path = NULL;
    int raw = 0;
    int status = dump_args(argc, argv, &d, &path, &raw);
    if (status >= 0) return status;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        fprintf(stderr, "heapstore dump: %s: %s\n", path, strerror(errno));
        if (fd >= 0) close(fd);
        return 1;
    }
    size_t len = (size_t)st.st_size, off = 0;
    const uint8_t *buf = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    close(fd);
    if (len && buf == MAP_FAILED) {
        fprintf(stderr, "heapstore dump: %s: %s\n", path, strerror(errno));
        return 1;
    }
    if (!raw && hs_syms_new(&d.syms, NULL)) d.syms = NULL; /* out of memory: as sent */
    status = dump_stream(&d, buf, len, path, &off);
    totals(&d, off);
    if (len) munmap((void *)buf, len);
    hs_syms_stream_free(&d.stream);
    hs_syms_free(d.syms);
    return status;
}

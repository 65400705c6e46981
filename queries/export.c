/* export: files other tools open, for the state of a run at a moment,
 * written from the core's stacks (stacks.c: the live stacks with their
 * frames, and for pprof the allocations up to the moment).
 *
 * collapsed: "outer;…;leaf BYTES" lines (flamegraph.pl, inferno, speedscope).
 * pprof: gzipped profile.proto, encoded here by hand (the format is a handful
 *   of messages), with sample types alloc_objects, alloc_space,
 *   inuse_objects, inuse_space (inuse_space last: pprof's default view). The
 *   alloc_* values count allocations made up to the moment, from the raw
 *   events; the inuse_* values are the live state.
 * speedscope: its JSON file format, one sampled profile weighted in bytes.
 * dot: a Graphviz call graph of functions weighted by inclusive live bytes.
 */
#include <assert.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "hs_error.h"
#include "hs_inlpc.h"
#include "q_internal.h"

/* ---- protobuf encoding ---------------------------------------------------- */

static void pb_varint(hs_buf *b, uint64_t v)
{
    uint8_t tmp[10];
    int n = 0;
    do {
        tmp[n] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v) tmp[n] |= 0x80;
        n++;
    } while (v);
    hs_buf_put(b, tmp, (size_t)n);
}

static void pb_int(hs_buf *b, int field, int64_t v) /* wire type 0; zero is omitted */
{
    if (!v) return;
    pb_varint(b, (uint64_t)field << 3);
    pb_varint(b, (uint64_t)v);
}

static void pb_bytes(hs_buf *b, int field, const void *p, size_t n) /* wire type 2 */
{
    pb_varint(b, (uint64_t)field << 3 | 2);
    pb_varint(b, n);
    hs_buf_put(b, p, n);
}

static int file_reply(hs_export_result *out, hs_buf *b, const char *ctype, const char *name,
                      hs_qerr *err)
{
    if (b->oom) {
        free(b->p);
        return hs__err(err, HS_ENOMEM, "out of memory");
    }
    if (!b->p) hs_buf_put(b, "", 0);
    out->content_type = ctype;
    out->body = b->p;
    out->len = b->n;
    out->filename = name;
    return 0;
}

/* What the numbers rest on, for the formats that carry a note: the sampling
 * interval and what the collector dropped. */
static void sampling_note(char *buf, size_t len, const hs__run *run, const hs_stacks_result *x)
{
    const int64_t *d = run->rec.sampling.dropped;
    int n = snprintf(
        buf, len, "sample_bytes %" PRId64 ", dropped %" PRId64 " alloc and %" PRId64 " free events",
        run->sample_bytes, d[HS_RUNDROP_ALLOC_EVENTS], d[HS_RUNDROP_FREE_EVENTS]);
    if (n > 0 && (size_t)n < len && x->cut)
        n += snprintf(buf + n, len - (size_t)n, "; %zu stacks cut to their %d innermost frames",
                      x->cut, HS_STACKS_FRAMES);
    if (n > 0 && (size_t)n < len && x->omitted)
        snprintf(buf + n, len - (size_t)n,
                 "; %zu smallest stacks (%" PRId64 " bytes) left out of this export", x->omitted,
                 x->omitted_bytes);
}

/* ---- collapsed ------------------------------------------------------------ */

/* min_bytes: lines (merged stacks) below it are left out. */
static int export_collapsed(const hs_stacks_result *x, int64_t min_bytes, hs_export_result *out,
                            hs_qerr *err)
{
    hs__smap lines = {0};
    int64_t *sums = NULL;
    const char **names = NULL; /* the lines in the order met: the stacks' */
    size_t n = 0, cap = 0;
    hs_buf key = {0}, b = {0};
    int rc = HS_EDB;
    for (size_t i = 0; i < x->nrows; i++) {
        hs_stack_row *t = &x->rows[i];
        if (t->bytes <= 0 || !t->depth) continue;
        key.n = 0;
        if (t->cut) hs_buf_put(&key, "[truncated];", 12);
        for (int j = t->depth - 1; j >= 0; j--) {
            const hs_sframe *f = hs_stacks_frame(x, t->frames[j]);
            hs__collapsed_put(&key, f->name);
            if (j) hs_buf_put(&key, ";", 1);
        }
        if (key.oom) goto oom;
        int added;
        const char *stored;
        size_t ix = hs__smap_put(&lines, key.p, key.n, n, &added, &stored);
        if (ix == (size_t)-1) goto oom;
        if (added) {
            if (n == cap) {
                cap = cap ? cap * 2 : 256;
                int64_t *np = realloc(sums, cap * sizeof *np);
                if (np) sums = np;
                const char **nn = realloc(names, cap * sizeof *nn);
                if (nn) names = nn;
                if (!np || !nn) goto oom;
            }
            names[n] = stored;
            sums[n++] = 0;
        }
        sums[ix] += t->bytes;
    }
    for (size_t i = 0; i < n; i++)
        if (sums[i] >= min_bytes) hs_buf_printf(&b, "%s %" PRId64 "\n", names[i], sums[i]);
    /* stacks the export left out, as one line, so that the total is right
     * and the graph shows they are missing */
    if (x->omitted && x->omitted_bytes >= min_bytes)
        hs_buf_printf(&b, "[%zu_smallest_stacks_left_out] %" PRId64 "\n", x->omitted,
                      x->omitted_bytes);
    rc = file_reply(out, &b, "text/plain; charset=utf-8", "heap.folded", err);
    b.p = NULL;
    goto out;
oom:
    rc = hs__err(err, HS_ENOMEM, "out of memory");
out:
    free(b.p);
    free(key.p);
    free(sums);
    free(names);
    hs__smap_free(&lines);
    return rc;
}

/* ---- pprof ---------------------------------------------------------------- */

typedef struct pstr {
    hs__smap idx;
    hs_buf table; /* encoded string_table entries (field 6) */
    size_t n;
} pstr;

static int64_t pstr_id(pstr *s, const char *str)
{
    int added;
    size_t i = hs__smap_intern(&s->idx, str, strlen(str), s->n, &added);
    if (i == (size_t)-1) {
        s->table.oom = 1;
        return 0;
    }
    if (added) {
        pb_bytes(&s->table, 6, str, strlen(str));
        s->n++;
    }
    return (int64_t)i;
}

static void value_type(hs_buf *b, int field, pstr *s, const char *type, const char *unit)
{
    hs_buf m = {0};
    pb_int(&m, 1, pstr_id(s, type));
    pb_int(&m, 2, pstr_id(s, unit));
    pb_bytes(b, field, m.p ? m.p : "", m.n);
    if (m.oom) b->oom = 1;
    free(m.p);
}

typedef struct pmap {
    uint64_t start, end, offset;
    char *path, *build_id;
} pmap;

static int gzip_buf(const hs_buf *in, hs_buf *out)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) return -1;
    size_t cap = deflateBound(&z, in->n) + 64;
    out->p = malloc(cap);
    if (!out->p) {
        deflateEnd(&z);
        return -1;
    }
    z.next_in = (Bytef *)in->p;
    z.avail_in = (uInt)in->n;
    z.next_out = (Bytef *)out->p;
    z.avail_out = (uInt)cap;
    int rc = deflate(&z, Z_FINISH);
    out->n = cap - z.avail_out;
    out->cap = cap;
    deflateEnd(&z);
    return rc == Z_STREAM_END ? 0 : -1;
}

/* The run's mappings (build ids as hex) and the first address seen for
 * each frame. */
typedef struct maps_walk {
    pmap *maps;
    size_t n, cap;
    hs__map *pcs;
    hs_qerr *err;
} maps_walk;

static int map_row(const hs_qstore_mapping *m, void *data)
{
    maps_walk *w = data;
    if (w->n == w->cap) {
        w->cap = w->cap ? w->cap * 2 : 16;
        pmap *np = realloc(w->maps, w->cap * sizeof *np);
        if (!np) return hs__err(w->err, HS_ENOMEM, "out of memory");
        w->maps = np;
    }
    pmap *pm = &w->maps[w->n++];
    pm->start = m->start;
    pm->end = m->end;
    pm->offset = m->offset;
    const uint8_t *bid = m->build_id;
    pm->build_id = calloc(m->build_id_len * 2 + 1, 1);
    for (size_t i = 0; pm->build_id && i < m->build_id_len; i++)
        snprintf(pm->build_id + 2 * i, 3, "%02x", bid[i]);
    pm->path = strdup(m->path ? m->path : "");
    if (!pm->build_id || !pm->path) return hs__err(w->err, HS_ENOMEM, "out of memory");
    return 0;
}

static int pc_row(uint64_t pc, int64_t frame, void *data)
{
    maps_walk *w = data;
    uint64_t v;
    if (!hs__map_get(w->pcs, (uint64_t)frame, &v) && hs__map_put(w->pcs, (uint64_t)frame, pc))
        return hs__err(w->err, HS_ENOMEM, "out of memory");
    return 0;
}

static int pprof_maps(hs_q *q, const hs__run *run, pmap **maps, size_t *nmaps, hs__map *pcs,
                      hs_qerr *err)
{
    maps_walk w = {.pcs = pcs, .err = err};
    int rc = q->store->ops->mappings(q->store, run->id, map_row, &w, err);
    *maps = w.maps; /* the caller frees them, also on failure */
    *nmaps = w.n;
    if (!rc) rc = q->store->ops->pcs(q->store, run->id, pc_row, &w, err);
    return rc;
}

/* What a pprof file is built from: its string table, the Location and
 * Function messages so far (each address one location, each name and file
 * one function), and the run's mappings and frame addresses. */
typedef struct pprof {
    const hs_stacks_result *x;
    pstr s;
    hs_buf m;          /* a message being encoded */
    hs_buf locs, fns;  /* encoded Location (field 4) and Function (field 5) messages */
    hs__map pcs;       /* frame id -> a pc that stands for it */
    hs__smap loc_keys; /* "id,id,…" of a location's frames -> location id */
    hs__smap fn_keys;  /* name \x1f file -> function id */
    pmap *maps;
    size_t nmaps;
    uint64_t next_loc, next_fn;
    hs_qerr *err;
} pprof;

/* The pc that stands for frame (0 when none): for a function inlined
 * somewhere, the pc it is inlined at, with *inlined set. */
static uint64_t frame_pc(const pprof *pp, int64_t frame, int *inlined)
{
    uint64_t pc;
    if (!hs__map_get(&pp->pcs, (uint64_t)frame, &pc)) pc = 0;
    *inlined = hs_inl_pc_is(pc);
    return *inlined ? pc & HS_INL_PC_MASK : pc;
}

/* How many frames from frames[0] (leaf first, n > 0) share one address:
 * the functions inlined at one pc and the frame that holds them (its pc, or
 * its module and offset, are theirs); else 1. */
static int loc_span(const pprof *pp, const int64_t *frames, int n)
{
    int inl;
    uint64_t base = frame_pc(pp, frames[0], &inl), pc;
    if (!inl) return 1;
    int k = 1;
    while (k < n && (pc = frame_pc(pp, frames[k], &inl), inl && pc == base)) k++;
    if (k == n) return k;
    if ((pc = frame_pc(pp, frames[k], &inl)), inl) return k;
    if (pc == base) return k + 1;
    const hs_sframe *a = hs_stacks_frame(pp->x, frames[k - 1]);
    const hs_sframe *b = hs_stacks_frame(pp->x, frames[k]);
    return b->module_offset == a->module_offset && !strcmp(b->module, a->module) ? k + 1 : k;
}

/* The function of f (by name and file), its message added when new. */
static size_t pprof_function(pprof *pp, const hs_sframe *f)
{
    char fk[1024];
    snprintf(fk, sizeof fk, "%s\x1f%s", f->name, f->file);
    int added;
    size_t fi = hs__smap_intern(&pp->fn_keys, fk, strlen(fk), pp->next_fn, &added);
    if (fi == (size_t)-1) {
        pp->fns.oom = 1;
        return 0;
    }
    if (added) {
        pp->next_fn++;
        pp->m.n = 0;
        pb_int(&pp->m, 1, (int64_t)fi);
        pb_int(&pp->m, 2, pstr_id(&pp->s, f->name));
        pb_int(&pp->m, 3, pstr_id(&pp->s, f->name));
        pb_int(&pp->m, 4, pstr_id(&pp->s, f->file));
        pb_bytes(&pp->fns, 5, pp->m.p ? pp->m.p : "", pp->m.n);
    }
    return fi;
}

/* frame's address and mapping (0 when none holds it): its pc, else its
 * module's start plus its offset. */
static void pprof_addr(const pprof *pp, int64_t frame, uint64_t *addr, uint64_t *mid)
{
    const hs_sframe *f = hs_stacks_frame(pp->x, frame);
    int inl;
    *addr = frame_pc(pp, frame, &inl);
    *mid = 0;
    for (size_t mi = 0; mi < pp->nmaps; mi++) {
        const pmap *pm = &pp->maps[mi];
        if ((*addr && *addr >= pm->start && *addr < pm->end) ||
            (!*addr && f->module[0] && !strcmp(f->module, pm->path))) {
            *mid = mi + 1;
            if (!*addr) *addr = pm->start + (uint64_t)f->module_offset;
            return;
        }
    }
}

/* The location of frames[0..n) (one address, see loc_span) into *lid, its
 * message added when new: one Line per frame, the inlined functions first
 * and the function holding them last (profile.proto's Location.line), at
 * the holder's address within its mapping. 0 or an HS_E code. */
static int pprof_location(pprof *pp, const int64_t *frames, int n, uint64_t *lid)
{
    char key[512];
    size_t len = 0;
    for (int k = 0; k < n && len < sizeof key; k++)
        len += (size_t)snprintf(key + len, sizeof key - len, "%" PRId64 ",", frames[k]);
    if (len >= sizeof key) len = sizeof key - 1;
    int added;
    size_t id = hs__smap_intern(&pp->loc_keys, key, len, pp->next_loc, &added);
    if (id == (size_t)-1) return hs__err(pp->err, HS_ENOMEM, "out of memory");
    *lid = id;
    if (!added) return 0;
    pp->next_loc++;
    hs_buf lines = {0}, line = {0};
    for (int k = 0; k < n; k++) {
        const hs_sframe *f = hs_stacks_frame(pp->x, frames[k]);
        line.n = 0;
        pb_int(&line, 1, (int64_t)pprof_function(pp, f));
        pb_int(&line, 2, f->line);
        pb_bytes(&lines, 4, line.p ? line.p : "", line.n);
    }
    uint64_t addr, mid;
    pprof_addr(pp, frames[n - 1], &addr, &mid);
    pp->m.n = 0;
    pb_int(&pp->m, 1, (int64_t)id);
    pb_int(&pp->m, 2, (int64_t)mid);
    pb_int(&pp->m, 3, (int64_t)addr);
    hs_buf_put(&pp->m, lines.p ? lines.p : "", lines.n);
    if (lines.oom || line.oom) pp->m.oom = 1;
    free(lines.p);
    free(line.p);
    pb_bytes(&pp->locs, 4, pp->m.p ? pp->m.p : "", pp->m.n);
    return 0;
}

/* t's Sample message (its locations, leaf first, and the four values). */
static int pprof_sample(pprof *pp, hs_buf *body, const hs_stack_row *t)
{
    hs_buf ids = {0}, vals = {0};
    for (int k = 0; k < t->depth;) {
        int n = loc_span(pp, t->frames + k, t->depth - k);
        uint64_t lid = 0;
        int rc = pprof_location(pp, t->frames + k, n, &lid);
        if (rc) {
            free(ids.p);
            return rc;
        }
        pb_varint(&ids, lid);
        k += n;
    }
    pb_varint(&vals, (uint64_t)llround(t->alloc_objects));
    pb_varint(&vals, (uint64_t)llround(t->alloc_space));
    pb_varint(&vals, (uint64_t)(t->count > 0 ? t->count : 0));
    pb_varint(&vals, (uint64_t)(t->bytes > 0 ? t->bytes : 0));
    pp->m.n = 0;
    pb_bytes(&pp->m, 1, ids.p ? ids.p : "", ids.n);
    pb_bytes(&pp->m, 2, vals.p, vals.n);
    if (ids.oom || vals.oom) pp->m.oom = 1;
    free(ids.p);
    free(vals.p);
    pb_bytes(body, 2, pp->m.p ? pp->m.p : "", pp->m.n);
    return 0;
}

/* The Mapping messages (field 3), then the locations and functions. */
static void pprof_mappings(pprof *pp, hs_buf *body)
{
    for (size_t mi = 0; mi < pp->nmaps; mi++) {
        const pmap *pm = &pp->maps[mi];
        pp->m.n = 0;
        pb_int(&pp->m, 1, (int64_t)(mi + 1));
        pb_int(&pp->m, 2, (int64_t)pm->start);
        pb_int(&pp->m, 3, (int64_t)pm->end);
        pb_int(&pp->m, 4, (int64_t)pm->offset);
        pb_int(&pp->m, 5, pstr_id(&pp->s, pm->path));
        pb_int(&pp->m, 6, pstr_id(&pp->s, pm->build_id));
        pb_int(&pp->m, 7, 1);
        pb_int(&pp->m, 8, 1);
        pb_int(&pp->m, 9, 1);
        pb_bytes(body, 3, pp->m.p ? pp->m.p : "", pp->m.n);
    }
    hs_buf_put(body, pp->locs.p ? pp->locs.p : "", pp->locs.n);
    hs_buf_put(body, pp->fns.p ? pp->fns.p : "", pp->fns.n);
    if (pp->locs.oom || pp->fns.oom) body->oom = 1;
}

/* The profile's time, period, comments and default view, then the string
 * table (every string is interned by now). */
static void pprof_trailer(pprof *pp, hs_buf *body, const hs__run *run, const hs__at *at,
                          const hs_stacks_result *x)
{
    int64_t start_ns = run->rec.start_unix_ms * 1000000;
    int64_t c1 = pstr_id(&pp->s, "heapstore: estimated live heap, sum of sampling weights");
    char comment[768], note[512];
    sampling_note(note, sizeof note, run, x);
    snprintf(comment, sizeof comment, "run %" PRId64 " at %.3f s, %s", run->id, at->at_ns / 1e9,
             note);
    int64_t c2 = pstr_id(&pp->s, comment);
    int64_t dflt = pstr_id(&pp->s, "inuse_space");
    pb_int(body, 9, start_ns + at->at_ns);
    pb_int(body, 10, at->at_ns);
    value_type(body, 11, &pp->s, "space", "bytes");
    pb_int(body, 12, run->sample_bytes);
    pb_int(body, 13, c1);
    pb_int(body, 13, c2);
    pb_int(body, 14, dflt);
    hs_buf_put(body, pp->s.table.p, pp->s.table.n);
}

static void pprof_free(pprof *pp)
{
    for (size_t i = 0; i < pp->nmaps; i++) {
        free(pp->maps[i].path);
        free(pp->maps[i].build_id);
    }
    free(pp->maps);
    free(pp->m.p);
    free(pp->locs.p);
    free(pp->fns.p);
    free(pp->s.table.p);
    hs__smap_free(&pp->s.idx);
    hs__smap_free(&pp->fn_keys);
    hs__smap_free(&pp->loc_keys);
    hs__map_free(&pp->pcs);
}

static int export_pprof(hs_q *q, const hs__run *run, const hs__at *at, const hs_stacks_result *x,
                        hs_export_result *out, hs_qerr *err)
{
    pprof pp = {.x = x, .next_loc = 1, .next_fn = 1, .err = err};
    hs_buf body = {0}, gz = {0};
    pstr_id(&pp.s, "");
    int rc = pprof_maps(q, run, &pp.maps, &pp.nmaps, &pp.pcs, err);
    if (rc) goto out;
    /* header */
    value_type(&body, 1, &pp.s, "alloc_objects", "count");
    value_type(&body, 1, &pp.s, "alloc_space", "bytes");
    value_type(&body, 1, &pp.s, "inuse_objects", "count");
    value_type(&body, 1, &pp.s, "inuse_space", "bytes");
    /* samples, locations and functions */
    for (size_t i = 0; !rc && i < x->nrows; i++) {
        const hs_stack_row *t = &x->rows[i];
        if (t->depth && (t->bytes > 0 || t->alloc_space > 0)) rc = pprof_sample(&pp, &body, t);
    }
    if (rc) goto out;
    pprof_mappings(&pp, &body);
    pprof_trailer(&pp, &body, run, at, x);
    if (body.oom || pp.s.table.oom || pp.m.oom || gzip_buf(&body, &gz)) {
        rc = hs__err(err, HS_ENOMEM, "out of memory");
        goto out;
    }
    rc = file_reply(out, &gz, "application/octet-stream", "heap.pb.gz", err);
    gz.p = NULL;
out:
    free(gz.p);
    free(body.p);
    pprof_free(&pp);
    return rc;
}

/* ---- speedscope ------------------------------------------------------------- */

/* s as a JSON string: quotes, backslashes and control characters escaped
 * (the text of the frames table is UTF-8 already). */
static void json_str(hs_buf *b, const char *s)
{
    hs_buf_put(b, "\"", 1);
    for (const char *r = s; *r; r++) {
        unsigned char c = (unsigned char)*r;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            hs_buf_put(b, e, 2);
        } else if (c < 0x20) {
            hs_buf_printf(b, "\\u%04x", c);
        } else {
            hs_buf_put(b, r, 1);
        }
    }
    hs_buf_put(b, "\"", 1);
}

/* Written as text in three passes over the stacks (frames, samples,
 * weights), not built as a JSON tree and then dumped: the file is the only
 * copy. */
static int export_speedscope(const hs__run *run, const hs__at *at, const hs_stacks_result *x,
                             hs_export_result *out, hs_qerr *err)
{
    hs_buf b = {0};
    hs__map fidx = {0};
    size_t nf = 0;
    int64_t total = 0;
    int rc = HS_EDB;
    hs_buf_printf(&b, "{\"$schema\":\"https://www.speedscope.app/file-format-schema.json\","
                      "\"shared\":{\"frames\":[");
    for (size_t i = 0; i < x->nrows; i++) {
        hs_stack_row *t = &x->rows[i];
        if (t->bytes <= 0 || !t->depth) continue;
        total += t->bytes;
        for (int j = t->depth - 1; j >= 0; j--) {
            uint64_t fi;
            if (hs__map_get(&fidx, (uint64_t)t->frames[j], &fi)) continue;
            const hs_sframe *f = hs_stacks_frame(x, t->frames[j]);
            hs_buf_printf(&b, "%s{\"name\":", nf ? "," : "");
            json_str(&b, f->name);
            if (f->file[0]) {
                hs_buf_put(&b, ",\"file\":", 8);
                json_str(&b, f->file);
                hs_buf_printf(&b, ",\"line\":%" PRId64, f->line);
            }
            hs_buf_put(&b, "}", 1);
            if (hs__map_put(&fidx, (uint64_t)t->frames[j], nf++)) goto oom;
        }
    }
    const char *prog = run->rec.program;
    char name[1536], note[512];
    sampling_note(note, sizeof note, run, x);
    snprintf(name, sizeof name, "%s (run %" PRId64 ") live heap at %.3f s (%s)", prog ? prog : "?",
             run->id, at->at_ns / 1e9, note);
    hs_buf_printf(&b, "]},\"profiles\":[{\"type\":\"sampled\",\"name\":");
    json_str(&b, name);
    hs_buf_printf(&b, ",\"unit\":\"bytes\",\"startValue\":0,\"endValue\":%" PRId64 ",\"samples\":[",
                  total);
    int first = 1;
    for (size_t i = 0; i < x->nrows; i++) {
        hs_stack_row *t = &x->rows[i];
        if (t->bytes <= 0 || !t->depth) continue;
        hs_buf_put(&b, first ? "[" : ",[", first ? 1 : 2);
        first = 0;
        for (int j = t->depth - 1; j >= 0; j--) { /* root first */
            uint64_t fi = 0;
            hs__map_get(&fidx, (uint64_t)t->frames[j], &fi);
            hs_buf_printf(&b, "%s%" PRIu64, j == t->depth - 1 ? "" : ",", fi);
        }
        hs_buf_put(&b, "]", 1);
    }
    hs_buf_put(&b, "],\"weights\":[", 13);
    first = 1;
    for (size_t i = 0; i < x->nrows; i++) {
        hs_stack_row *t = &x->rows[i];
        if (t->bytes <= 0 || !t->depth) continue;
        hs_buf_printf(&b, "%s%" PRId64, first ? "" : ",", t->bytes);
        first = 0;
    }
    hs_buf_put(&b, "]}],\"name\":", 11);
    json_str(&b, name);
    hs_buf_printf(&b,
                  ",\"activeProfileIndex\":0,\"exporter\":\"heapstore " HEAPSTORE_VERSION "\"}");
    rc = file_reply(out, &b, "application/json", "heap.speedscope.json", err);
    b.p = NULL;
    goto out;
oom:
    rc = hs__err(err, HS_ENOMEM, "out of memory");
out:
    free(b.p);
    hs__map_free(&fidx);
    return rc;
}

/* ---- dot ------------------------------------------------------------------ */

#define DOT_NODES 2000

static void dot_escape(hs_buf *b, const char *s)
{
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') hs_buf_put(b, "\\", 1);
        hs_buf_put(b, s, 1);
    }
}

/* The call graph: functions (inclusive and self bytes) and caller ->
 * callee edges, each named by its index in the string maps. */
typedef struct dgraph {
    hs__smap fn, edges;
    struct dn {
        const char *name;
        int64_t incl, self;
        size_t seen;
    } * nodes;
    int64_t *ew;
    size_t nn, cn, ne, ce;
} dgraph;

static void dgraph_free(dgraph *g)
{
    free(g->nodes);
    free(g->ew);
    hs__smap_free(&g->fn);
    hs__smap_free(&g->edges);
}

/* The node of f (trace i's frame), counted once per trace; its index, or
 * (size_t)-1 when out of memory. */
static size_t dgraph_node(dgraph *g, const hs_sframe *f, size_t i, const hs_stack_row *t, int leaf)
{
    int added;
    size_t k = hs__smap_intern(&g->fn, f->name, strlen(f->name), g->nn, &added);
    if (k == (size_t)-1) return k;
    if (added) {
        if (g->nn == g->cn) {
            g->cn = g->cn ? g->cn * 2 : 256;
            void *np = realloc(g->nodes, g->cn * sizeof *g->nodes);
            if (!np) return (size_t)-1;
            g->nodes = np;
        }
        g->nodes[g->nn++] = (struct dn){f->name, 0, 0, (size_t)-1};
    }
    if (g->nodes[k].seen != i) {
        g->nodes[k].seen = i;
        g->nodes[k].incl += t->bytes;
    }
    if (leaf) g->nodes[k].self += t->bytes;
    return k;
}

/* Adds bytes to the edge prev -> k. 0, or -1 when out of memory. */
static int dgraph_edge(dgraph *g, size_t prev, size_t k, int64_t bytes)
{
    char ek[64];
    int added, en = snprintf(ek, sizeof ek, "%zu>%zu", prev, k);
    size_t e = hs__smap_intern(&g->edges, ek, (size_t)en, g->ne, &added);
    if (e == (size_t)-1) return -1;
    if (added) {
        if (g->ne == g->ce) {
            g->ce = g->ce ? g->ce * 2 : 256;
            int64_t *np = realloc(g->ew, g->ce * sizeof *np);
            if (!np) return -1;
            g->ew = np;
        }
        g->ew[g->ne++] = 0;
    }
    g->ew[e] += bytes;
    return 0;
}

static int dgraph_build(const hs_stacks_result *x, dgraph *g, hs_qerr *err)
{
    for (size_t i = 0; i < x->nrows; i++) {
        const hs_stack_row *t = &x->rows[i];
        if (t->bytes <= 0) continue;
        size_t prev = (size_t)-1;
        for (int j = t->depth - 1; j >= 0; j--) {
            const hs_sframe *f = hs_stacks_frame(x, t->frames[j]);
            size_t k = dgraph_node(g, f, i, t, j == 0);
            if (k == (size_t)-1 ||
                (prev != (size_t)-1 && prev != k && dgraph_edge(g, prev, k, t->bytes)))
                return hs__err(err, HS_ENOMEM, "out of memory");
            prev = k;
        }
    }
    return 0;
}

/* The graph as DOT, its nodes of at least min_incl bytes and the edges
 * between them. */
static void dgraph_write(const dgraph *g, hs_buf *b, int64_t min_incl, int64_t total)
{
    double tot = total > 0 ? (double)total : 1;
    for (size_t i = 0; i < g->nn; i++) {
        const struct dn *n = &g->nodes[i];
        if (n->incl < min_incl) continue;
        hs_buf_printf(b, "  n%zu [label=\"", i);
        dot_escape(b, n->name);
        hs_buf_printf(
            b, "\\nself %" PRId64 " B (%.1f%%)\\ntotal %" PRId64 " B (%.1f%%)\", fontsize=%d];\n",
            n->self, 100.0 * (double)n->self / tot, n->incl, 100.0 * (double)n->incl / tot,
            8 + (int)(16.0 * (double)n->self / tot));
    }
    for (size_t i = 0; i < g->edges.cap; i++) {
        if (!g->edges.keys[i]) continue;
        size_t a, c;
        if (sscanf(g->edges.keys[i], "%zu>%zu", &a, &c) != 2) continue;
        if (g->nodes[a].incl < min_incl || g->nodes[c].incl < min_incl) continue;
        int64_t w = g->ew[g->edges.vals[i]];
        hs_buf_printf(b, "  n%zu -> n%zu [label=\"%" PRId64 " B\", penwidth=%.2f];\n", a, c, w,
                      1.0 + 4.0 * (double)w / tot);
    }
}

static int export_dot(const hs__run *run, const hs__at *at, const hs_stacks_result *x,
                      hs_export_result *out, hs_qerr *err)
{
    dgraph g = {0};
    hs_buf b = {0};
    int rc = dgraph_build(x, &g, err);
    if (rc) goto out;
    /* Graphviz lays out a few thousand nodes, not a hundred thousand: the
     * DOT_NODES functions of most inclusive bytes, and the edges between them */
    int64_t min_incl = INT64_MIN;
    size_t dropped = 0;
    if (g.nn > DOT_NODES) {
        int64_t *w = malloc(g.nn * sizeof *w);
        if (!w) {
            rc = hs__err(err, HS_ENOMEM, "out of memory");
            goto out;
        }
        for (size_t i = 0; i < g.nn; i++) w[i] = g.nodes[i].incl;
        min_incl = hs__kth_largest(w, g.nn, DOT_NODES);
        free(w);
        for (size_t i = 0; i < g.nn; i++) dropped += g.nodes[i].incl < min_incl;
    }
    char note[512], more[128] = "";
    sampling_note(note, sizeof note, run, x);
    if (dropped)
        snprintf(more, sizeof more, "; %zu functions of less than %" PRId64 " bytes left out",
                 dropped, min_incl);
    hs_buf_printf(&b,
                  "digraph heap {\n  label=\"run %" PRId64 ": live heap at %.3f s, %" PRId64
                  " bytes (%s%s)\";\n  node [shape=box];\n",
                  run->id, at->at_ns / 1e9, x->total_bytes, note, more);
    dgraph_write(&g, &b, min_incl, x->total_bytes);
    hs_buf_printf(&b, "}\n");
    rc = file_reply(out, &b, "text/vnd.graphviz", "heap.dot", err);
    b.p = NULL;
out:
    free(b.p);
    dgraph_free(&g);
    return rc;
}

static const char *const export_names[] = {
    [HS_EXPORT_COLLAPSED] = "collapsed",
    [HS_EXPORT_PPROF] = "pprof",
    [HS_EXPORT_SPEEDSCOPE] = "speedscope",
    [HS_EXPORT_DOT] = "dot",
};

void hs_export_params_init(hs_export_params *p)
{
    memset(p, 0, sizeof *p);
    p->at.kind = HS_TSEL_PEAK;
    p->format = HS_EXPORT_PPROF;
}

int hs_export_param(hs_export_params *p, const char *key, const char *value, hs_qerr *err)
{
    if (!strcmp(key, "at")) return hs_sel_parse_t(&p->at, value, err);
    if (!strcmp(key, "format")) {
        for (size_t i = 0; i < HS_COUNTOF(export_names); i++)
            if (!strcmp(value, export_names[i])) {
                p->format = (int)i;
                return 0;
            }
        return hs__err(err, HS_EINVAL,
                       "format must be pprof, speedscope, collapsed or dot (not '%s')", value);
    }
    if (strcmp(key, "min_share")) return 0;
    char *end;
    p->min_share = strtod(value, &end);
    if (!*value || *end || !(p->min_share >= 0 && p->min_share <= 1))
        return hs__err(err, HS_EINVAL, "min_share must be a number from 0 to 1 (not '%s')", value);
    p->has_min_share = 1;
    return 0;
}

/* The file of format for the state at at. */
static int export_state(hs_q *q, const hs__run *run, const hs__at *at, const hs_export_params *p,
                        hs_export_result *out, hs_qerr *err)
{
    hs__state s;
    int rc = hs__state_at(q, run, at, &s, err);
    if (rc) return rc;
    hs_stacks_result x;
    rc = hs__stacks_build(q, run, at, &s, p->format == HS_EXPORT_PPROF, &x, err);
    if (!rc) {
        switch (p->format) {
        case HS_EXPORT_COLLAPSED:
            rc = export_collapsed(&x, (int64_t)(p->min_share * (double)x.total_bytes), out, err);
            break;
        case HS_EXPORT_PPROF:
            rc = export_pprof(q, run, at, &x, out, err);
            break;
        case HS_EXPORT_SPEEDSCOPE:
            rc = export_speedscope(run, at, &x, out, err);
            break;
        default:
            rc = export_dot(run, at, &x, out, err);
            break;
        }
    }
    hs_stacks_result_clear(&x);
    hs__state_clear(&s);
    return rc;
}

int hs_core_export(hs_q *q, const hs_export_params *p, hs_export_result *out, hs_qerr *err)
{
    memset(out, 0, sizeof *out);
    assert(p->format >= 0 && (size_t)p->format < HS_COUNTOF(export_names));
    hs__run run = {0};
    hs__at at;
    int rc = hs__run_resolve(q, &p->run, &run, err);
    if (!rc && p->has_min_share && p->format != HS_EXPORT_COLLAPSED)
        rc = hs__err(err, HS_EINVAL,
                     "min_share applies to the flame graph and collapsed stacks, not to %s",
                     export_names[p->format]);
    if (!rc) rc = hs__at_resolve(q, &run, &p->at, &at, err);
    if (!rc) rc = export_state(q, &run, &at, p, out, err);
    hs__run_clear(&run);
    return rc;
}

void hs_export_result_clear(hs_export_result *r)
{
    free(r->body);
    memset(r, 0, sizeof *r);
}

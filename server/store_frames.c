/* store_frames: one function per frame type, turning a decoded frame into
 * rows and rollup changes. Every entry is checked against the protocol's
 * rules before it is used; see hs_store_run_frame() for what an error
 * leaves behind. */
#include <assert.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hs_error.h"
#include "hs_snap.h"
#include "hs_symbols.h"
#include "hs_symcache.h"
#include "store_int.h"

static void bind_str(sqlite3_stmt *st, int i, hs_str s)
{
    sqlite3_bind_text(st, i, s.ptr ? s.ptr : "", (int)s.len, SQLITE_STATIC);
}

/* ---- MAPPINGS ---------------------------------------------------------- */

static int frame_mappings(hs_store *s, hs_run *r, const uint8_t *p, size_t len, char *err,
                          size_t errlen)
{
    hs_batch_it it;
    hs_mapping m;
    int rc = hs_mappings_begin(&it, p, len), more;
    if (rc) goto bad;
    if (it.t > HS_T_MAX) {
        hs__store_seterr(err, errlen, "MAPPINGS time %" PRIu64 " ns is past any run's length",
                         it.t);
        return HS_ERANGE;
    }
    while ((more = hs_mappings_next(&it, &m)) == 1) {
        sqlite3_stmt *st = s->st[ST_MAPPING];
        sqlite3_bind_int64(st, 1, r->id);
        sqlite3_bind_int64(st, 2, (int64_t)it.t);
        sqlite3_bind_int64(st, 3, (int64_t)m.start);
        sqlite3_bind_int64(st, 4, (int64_t)m.end);
        sqlite3_bind_int64(st, 5, (int64_t)m.file_offset);
        if (m.build_id_len)
            sqlite3_bind_blob(st, 6, m.build_id, (int)m.build_id_len, SQLITE_STATIC);
        bind_str(st, 7, m.path);
        if ((rc = hs__store_step_done(s, st))) return rc;
    }
    if (more == 0) return 0;
    rc = more;
bad:
    hs__store_seterr(err, errlen, "malformed MAPPINGS frame: %s", hs_strerror(rc));
    return rc;
}

/* ---- SYMBOLS ----------------------------------------------------------- */

int hs__frame_content_key(hs_store *s, const hs_frame_row *f)
{
    /* the text of frames.key's expression (012_frame_keys.sql), less alias */
    int n;
    if (f->function.len)
        n = snprintf(s->key, sizeof s->key, "%.*s\x1f%.*s\x1f%" PRId64, (int)f->function.len,
                     f->function.ptr, (int)f->file.len, f->file.ptr ? f->file.ptr : "", f->line);
    else
        n = snprintf(s->key, sizeof s->key, "\x1f%.*s\x1f%" PRId64, (int)f->module.len,
                     f->module.ptr ? f->module.ptr : "", f->module_offset);
    return n < 0 || (size_t)n >= sizeof s->key ? -1 : n;
}

/* The id of the frame whose key is s->key (n bytes) among those of f's
 * function and line (or offset): 1 found, 0 none, HS_EDB. */
static int frame_find(hs_store *s, const hs_frame_row *f, int n, int64_t *out)
{
    sqlite3_stmt *st = s->st[ST_FRAME_GET];
    bind_str(st, 1, f->function);
    sqlite3_bind_int64(st, 2, f->function.len ? f->line : f->module_offset);
    sqlite3_bind_text(st, 3, s->key, n, SQLITE_STATIC);
    int step = sqlite3_step(st);
    if (step == SQLITE_ROW) *out = sqlite3_column_int64(st, 0);
    sqlite3_reset(st);
    if (step == SQLITE_ROW) return 1;
    if (step == SQLITE_DONE) return 0;
    s->db_failed = 1;
    return HS_EDB;
}

int hs__frame_intern(hs_store *s, const hs_frame_row *f, int64_t *out)
{
    int n = hs__frame_content_key(s, f);
    if (n < 0 || (size_t)n + f->alias.len >= sizeof s->key) return HS_ETOOBIG;
    if (f->alias.len) memcpy(s->key + n, f->alias.ptr, f->alias.len);
    n += (int)f->alias.len;
    int found = frame_find(s, f, n, out);
    if (found) return found < 0 ? found : 0;
    sqlite3_stmt *st = s->st[ST_FRAME_INSERT];
    bind_str(st, 1, f->function);
    bind_str(st, 2, f->file);
    sqlite3_bind_int64(st, 3, f->line);
    bind_str(st, 4, f->module);
    sqlite3_bind_int64(st, 5, f->module_offset);
    if (f->alias.len)
        bind_str(st, 6, f->alias);
    else
        sqlite3_bind_null(st, 6);
    int rc = hs__store_step_done(s, st);
    if (!rc) *out = sqlite3_last_insert_rowid(s->db);
    return rc;
}

/* The frame id of a symbolized location, interned by its content. */
static int intern_frame(hs_store *s, const hs_symbol *sym, int64_t *out)
{
    hs_frame_row f = {.function = sym->function,
                      .file = sym->file,
                      .module = sym->module,
                      .line = (int64_t)sym->line,
                      .module_offset = (int64_t)sym->module_offset};
    return hs__frame_intern(s, &f, out);
}

static int frame_symbols(hs_store *s, hs_run *r, const uint8_t *p, size_t len, char *err,
                         size_t errlen)
{
    hs_batch_it it;
    hs_symbol sym;
    int rc = hs_symbols_begin(&it, p, len), more;
    if (rc) goto bad;
    while ((more = hs_symbols_next(&it, &sym)) == 1) {
        int64_t frame;
        if (r->pcs.count >= HS_RUN_MAX_PCS) {
            hs__store_seterr(err, errlen, "more than %u pcs defined", HS_RUN_MAX_PCS);
            return HS_ETOOBIG;
        }
        if ((rc = intern_frame(s, &sym, &frame))) return rc;
        uint64_t had;
        if (hs_map_get(&r->pcs, sym.pc, &had) && had == (uint64_t)frame) continue; /* as it was */
        if ((rc = hs_map_put(&r->pcs, sym.pc, (uint64_t)frame))) return rc;
        if ((rc = hs__maps_put(s, r, HS_MAPS_PCS, (int64_t)sym.pc, frame))) return rc;
    }
    if (more == 0) return 0;
    rc = more;
bad:
    hs__store_seterr(err, errlen, "malformed SYMBOLS frame: %s", hs_strerror(rc));
    return rc;
}

/* ---- the symbolizer's answers ----------------------------------------- */

/* The last block of a build one hs_store_symcache_put adds to
 * (schema/hs_symcache.h). */
typedef struct symc_open {
    hs_str bid; /* points into the payload */
    int64_t seq;
    int dirty; /* b has entries its row has not */
    hs_symcache_block b;
} symc_open;

/* Builds one put keeps open; a put that names more writes the one it opened
 * first and reads the next build's block in its place. */
#define SYMC_OPEN_MAX 8

_Static_assert(HS_SYMS_INLINE_MAX == HS_SYMCACHE_FRAMES_MAX, "an answer fits a block's entry");

static int symc_write(hs_store *s, symc_open *o)
{
    if (!o->dirty) return 0;
    hs_buf data = {0};
    int rc = hs_symcache_encode(&o->b, &data);
    if (!rc) {
        sqlite3_stmt *st = s->st[ST_SYMCACHE];
        sqlite3_bind_blob(st, 1, o->bid.ptr, (int)o->bid.len, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, o->seq);
        sqlite3_bind_blob(st, 3, data.p, (int)data.n, SQLITE_STATIC);
        rc = hs__store_step_done(s, st);
    }
    hs_buf_free(&data);
    o->dirty = 0;
    return rc;
}

/* Reads build bid's last block into o (none: an empty block 0). A block
 * that does not decode stays as it is, and the answers go to the next. */
static int symc_load(hs_store *s, symc_open *o, hs_str bid)
{
    o->bid = bid;
    o->seq = 0;
    o->dirty = 0;
    hs_symcache_clear(&o->b);
    sqlite3_stmt *st = s->st[ST_SYMCACHE_LAST];
    sqlite3_bind_blob(st, 1, bid.ptr, (int)bid.len, SQLITE_STATIC);
    int step = sqlite3_step(st), rc = 0;
    if (step == SQLITE_ROW) {
        o->seq = sqlite3_column_int64(st, 0);
        rc = hs_symcache_decode(&o->b, sqlite3_column_blob(st, 1),
                                (size_t)sqlite3_column_bytes(st, 1));
        if (rc == HS_ECORRUPT) {
            o->seq++;
            rc = 0;
        }
    } else if (step != SQLITE_DONE) {
        s->db_failed = 1;
        rc = HS_EDB;
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return rc;
}

int hs_store_symcache_put(hs_store *s, const uint8_t *p, size_t len)
{
    symc_open open[SYMC_OPEN_MAX];
    memset(open, 0, sizeof open);
    size_t nopen = 0, next = 0; /* next: the slot a build past SYMC_OPEN_MAX takes */
    int rc = 0;
    hs_rd rd;
    hs_rd_init(&rd, p, len);
    while (hs_rd_left(&rd) && !rd.err && !rc) {
        hs_symcache_frame fr[HS_SYMS_INLINE_MAX];
        hs_str bid = hs_rd_str(&rd, HS_BUILD_ID_MAX);
        uint64_t off = hs_rd_varint(&rd), n = hs_rd_varint_max(&rd, HS_SYMS_INLINE_MAX);
        for (uint64_t k = 0; k < n && !rd.err; k++) {
            fr[k].function = hs_rd_str(&rd, HS_FUNC_MAX);
            fr[k].file = hs_rd_str(&rd, HS_STR_MAX);
            fr[k].line = hs_rd_varint(&rd);
        }
        if (rd.err || !bid.len || !n) continue;
        symc_open *o = NULL;
        for (size_t i = 0; i < nopen && !o; i++)
            if (open[i].bid.len == bid.len && !memcmp(open[i].bid.ptr, bid.ptr, bid.len))
                o = &open[i];
        if (!o) {
            o = &open[nopen < SYMC_OPEN_MAX ? nopen++ : next++ % SYMC_OPEN_MAX];
            if ((rc = symc_write(s, o)) || (rc = symc_load(s, o, bid))) break;
        }
        if (hs_symcache_has(&o->b, off)) continue; /* asked twice before it was stored */
        if (o->b.n == HS_SYMCACHE_BLOCK_ENTRIES ||
            hs_symcache_str_bytes(&o->b) + hs_symcache_entry_bytes(fr, (int)n) >
                HS_SYMCACHE_BLOCK_BYTES) { /* full: a new block after it */
            if ((rc = symc_write(s, o))) break;
            hs_symcache_clear(&o->b);
            o->seq++;
        }
        if ((rc = hs_symcache_add(&o->b, off, fr, (int)n)) < 0) break;
        rc = 0;
        o->dirty = 1;
    }
    for (size_t i = 0; i < nopen; i++) {
        if (!rc) rc = symc_write(s, &open[i]);
        hs_symcache_free(&open[i].b);
    }
    return rc ? rc : rd.err ? HS_EPROTO : 0;
}

/* ---- frames named after they were stored --------------------------------- */

/* Names frame id (unnamed, old key okey) under the content key, or under
 * the content key followed by okey (its alias) when another row holds it. */
static int name_frame(hs_store *s, sqlite3_stmt *upd, int64_t id, const char *okey, hs_str fn,
                      hs_str file, uint64_t line, uint64_t *renamed)
{
    hs_frame_row f = {.function = fn, .file = file, .line = (int64_t)line};
    int64_t other;
    int n = hs__frame_content_key(s, &f);
    if (n < 0) return HS_ETOOBIG;
    int taken = frame_find(s, &f, n, &other);
    if (taken < 0) return taken;
    if (taken && (size_t)n + strlen(okey) >= sizeof s->key) return HS_ETOOBIG;
    sqlite3_bind_int64(upd, 1, id);
    if (taken) {
        sqlite3_bind_text(upd, 2, okey, -1, SQLITE_STATIC);
        (*renamed)++;
    } else {
        sqlite3_bind_null(upd, 2);
    }
    bind_str(upd, 3, fn);
    bind_str(upd, 4, file);
    sqlite3_bind_int64(upd, 5, (int64_t)line);
    return hs__store_step_done(s, upd);
}

/* The frames that runs of another build of path use (or of none), among
 * the runs stored after runs_seen and the open ones: their pcs came after
 * the refill read its own list of such frames. */
static int shared_since(hs_store *s, hs_str bid, hs_str path, int64_t runs_seen, hs_map *out)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(s->db,
                           "SELECT DISTINCT p.frame FROM runs r JOIN mappings m ON m.run = r.id"
                           " JOIN run_pcs p ON p.run = r.id WHERE (r.state = 'open' OR r.id > ?3)"
                           " AND m.path = ?1 AND (m.build_id IS NULL OR m.build_id <> ?2)",
                           -1, &st, NULL) != SQLITE_OK)
        return HS_EDB;
    sqlite3_bind_text(st, 1, path.ptr, (int)path.len, SQLITE_STATIC);
    sqlite3_bind_blob(st, 2, bid.ptr, (int)bid.len, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, runs_seen);
    int step, rc = 0;
    while (!rc && (step = sqlite3_step(st)) == SQLITE_ROW)
        rc = hs_map_put(out, (uint64_t)sqlite3_column_int64(st, 0), 1);
    if (!rc && step != SQLITE_DONE) rc = HS_EDB;
    sqlite3_finalize(st);
    return rc;
}

int hs_store_frames_name(hs_store *s, const uint8_t *p, size_t len, uint64_t *named,
                         uint64_t *renamed)
{
    /* Prepared per call: a refill is rare, and a batch names hundreds. */
    sqlite3_stmt *get = NULL, *upd = NULL;
    if (sqlite3_prepare_v2(s->db, "SELECT key FROM frames WHERE id = ?1 AND function = ''", -1,
                           &get, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(s->db,
                           "UPDATE frames SET alias = ?2, function = ?3, file = ?4, line = ?5"
                           " WHERE id = ?1",
                           -1, &upd, NULL) != SQLITE_OK) {
        sqlite3_finalize(get);
        s->db_failed = 1;
        return HS_EDB;
    }
    hs_rd rd;
    hs_rd_init(&rd, p, len);
    hs_str bid = hs_rd_str(&rd, HS_BUILD_ID_MAX), path = hs_rd_str(&rd, HS_STR_MAX);
    uint64_t runs_seen = hs_rd_varint_max(&rd, INT64_MAX);
    hs_map skip = {0};
    int rc = rd.err ? 0 : shared_since(s, bid, path, (int64_t)runs_seen, &skip);
    if (rc == HS_EDB) s->db_failed = 1;
    char okey[HS_STR_MAX + 64];
    while (!rc && hs_rd_left(&rd) && !rd.err) {
        uint64_t id = hs_rd_varint(&rd), v;
        hs_str fn = hs_rd_str(&rd, HS_FUNC_MAX), file = hs_rd_str(&rd, HS_STR_MAX);
        uint64_t line = hs_rd_varint(&rd);
        if (rd.err || !fn.len || id > INT64_MAX) break;
        if (hs_map_get(&skip, id, &v)) continue; /* another build's code too */
        sqlite3_bind_int64(get, 1, (int64_t)id);
        int step = sqlite3_step(get);
        const char *k = step == SQLITE_ROW ? (const char *)sqlite3_column_text(get, 0) : NULL;
        /* only a module+offset key: a row named since is left as it is */
        int ok = k && k[0] == '\x1f' && snprintf(okey, sizeof okey, "%s", k) < (int)sizeof okey;
        sqlite3_reset(get);
        if (step != SQLITE_ROW && step != SQLITE_DONE) {
            s->db_failed = 1;
            rc = HS_EDB;
        } else if (ok && !(rc = name_frame(s, upd, (int64_t)id, okey, fn, file, line, renamed))) {
            (*named)++;
        } else if (rc == HS_ETOOBIG) {
            rc = 0; /* a name too long for a key: the row stays unnamed */
        }
    }
    sqlite3_finalize(get);
    sqlite3_finalize(upd);
    hs_map_free(&skip);
    if (rc) return rc;
    return rd.err || hs_rd_left(&rd) ? HS_EPROTO : 0;
}

/* ---- STACKS ------------------------------------------------------------ */

/* What frame_stacks works with, off the writer thread's stack. prev_*: the
 * frames, root first, and the nodes of the stack interned last; a stack
 * that begins as that one did (most do) takes its nodes without a lookup. */
typedef struct stacks_work {
    hs_stack stk;
    int64_t frames[HS_STACK_MAX_DEPTH]; /* of stk, leaf first */
    int64_t prev_frames[HS_STACK_MAX_DEPTH], prev_nodes[HS_STACK_MAX_DEPTH];
    uint32_t nprev;
} stacks_work;

/* The frames of w->stk into w->frames; *out gets their number. */
static int stack_frames(hs_run *r, stacks_work *w, uint32_t *out, char *err, size_t errlen)
{
    const hs_stack *stk = &w->stk;
    uint32_t nf = 0;
    /* A pc with inlined frames stands for them (defined under
     * hs_inl_pc(pc, k) by SYMBOLS), innermost first, then for itself;
     * collectors that named frames themselves sent them in the stack
     * already. At most HS_STACK_MAX_DEPTH frames: the outermost go. */
    for (uint32_t i = 0; i < stk->depth && nf < HS_STACK_MAX_DEPTH; i++) {
        uint64_t f, pc = stk->pcs[i];
        if (hs_inl_pc_ok(pc) && !(i > 0 && hs_inl_pc_of(stk->pcs[i - 1], pc)))
            for (int k = 0; k < HS_SYMS_INLINE_MAX && nf < HS_STACK_MAX_DEPTH - 1 &&
                            hs_map_get(&r->pcs, hs_inl_pc(pc, k), &f);
                 k++)
                w->frames[nf++] = (int64_t)f;
        if (!hs_map_get(&r->pcs, stk->pcs[i], &f)) {
            hs__store_seterr(err, errlen,
                             "stack %" PRIu64 " uses pc 0x%" PRIx64 " never defined by SYMBOLS",
                             stk->id, stk->pcs[i]);
            return HS_EPROTO;
        }
        w->frames[nf++] = (int64_t)f;
    }
    *out = nf;
    return 0;
}

/* The trace of w->frames (nf of them), root first: the nodes it shares
 * with the previous stack, then one node at a time. */
static int stack_trace(hs_store *s, stacks_work *w, uint32_t nf, int64_t *out)
{
    uint32_t d = 0;
    while (d < nf && d < w->nprev && w->prev_frames[d] == w->frames[nf - 1 - d]) d++;
    int64_t node = d ? w->prev_nodes[d - 1] : 0;
    for (; d < nf; d++) {
        int rc = hs__tree_intern(s, node, w->frames[nf - 1 - d], d + 1, &node);
        if (rc) {
            w->nprev = d;
            return rc;
        }
        w->prev_frames[d] = w->frames[nf - 1 - d];
        w->prev_nodes[d] = node;
    }
    w->nprev = nf;
    *out = node;
    return 0;
}

static int frame_stacks(hs_store *s, hs_run *r, const uint8_t *p, size_t len, char *err,
                        size_t errlen)
{
    hs_batch_it it;
    stacks_work *w = malloc(sizeof *w);
    if (!w) return HS_ENOMEM;
    w->nprev = 0;
    hs_stack *stk = &w->stk;
    int rc = hs_stacks_begin(&it, p, len), more = 0;
    if (rc) goto bad;
    while ((more = hs_stacks_next(&it, stk)) == 1) {
        uint32_t nf;
        int64_t node = 0;
        if ((rc = stack_frames(r, w, &nf, err, errlen))) goto out;
        if ((rc = stack_trace(s, w, nf, &node))) goto out;
        /* An id keeps the stack it was first defined with: events already
         * stored refer to it, and a replay of them must give the same
         * rollups (a collector resends a definition only unchanged). */
        uint64_t had;
        int known = hs_map_get(&r->stacks, stk->id, &had);
        if (known && r->slots[had].trace != node) {
            hs__store_seterr(err, errlen, "stack %" PRIu64 " redefined with a different stack",
                             stk->id);
            rc = HS_EPROTO;
            goto out;
        }
        if (known) continue; /* the same definition again */
        if ((rc = hs__store_bind_stack(r, stk->id, node))) {
            if (rc == HS_ETOOBIG)
                hs__store_seterr(err, errlen, "more than %u distinct stacks", HS_RUN_MAX_STACKS);
            goto out;
        }
        if ((rc = hs__maps_put(s, r, HS_MAPS_STACKS, (int64_t)stk->id, node))) goto out;
    }
    if (more == 0) goto out;
    rc = more;
bad:
    hs__store_seterr(err, errlen, "malformed STACKS frame: %s", hs_strerror(rc));
out:
    free(w);
    return rc;
}

/* ---- EVENTS ------------------------------------------------------------ */

static void apply_event(hs_run *r, uint32_t idx, const hs_event *e)
{
    hs_slot *sl = &r->slots[idx];
    if (sl->pk_ver != r->peak_ver) {
        sl->pk_bytes = sl->bytes;
        sl->pk_count = sl->count;
        sl->pk_ver = r->peak_ver;
    }
    if (!sl->dirty) {
        sl->dirty = 1;
        r->dirty[r->ndirty++] = idx;
    }
    int64_t w = (int64_t)e->weight;
    double c = e->size ? (double)e->weight / (double)e->size : 1.0;
    if (e->is_free) {
        sl->bytes -= w;
        sl->count -= c;
        r->live_bytes -= w;
        r->live_count -= c;
        r->bucket_free += w;
        r->free_events++;
    } else {
        sl->bytes += w;
        sl->count += c;
        r->live_bytes += w;
        r->live_count += c;
        r->bucket_alloc += w;
        r->total_alloc_bytes += w;
        r->total_alloc_count += c;
        r->alloc_events++;
        if (r->live_bytes > r->bucket_max) r->bucket_max = r->live_bytes;
    }
    hs__rollup_peak_event(r, idx, e, e->is_free ? -w : w, e->is_free ? -c : c);
    if (e->t_ns > r->end_ns) r->end_ns = e->t_ns;
}

/* Where the entries of an EVENTS batch come from: a frame off the wire, or
 * a stored blob being replayed (dec, already open). Both can be read twice.
 * A frame's times are rounded down to the run's quantum q as they are read,
 * once, so the rollups and the stored events see the same times (and a
 * replay, reading the stored ones, rebuilds what ingest computed). */
typedef struct ev_src {
    const uint8_t *p;
    size_t len;
    hs_batch_it wire;
    hs_evdec *dec;
    uint64_t q;
} ev_src;

static int src_begin(ev_src *src)
{
    if (!src->dec) return hs_events_begin(&src->wire, src->p, src->len);
    hs_evdec_rewind(src->dec);
    return 0;
}

static int src_next(ev_src *src, hs_event *e)
{
    if (src->dec) return hs_evdec_next(src->dec, e);
    int rc = hs_events_next(&src->wire, e);
    if (rc == 1 && src->q > 1) e->t_ns -= e->t_ns % src->q;
    return rc;
}

/* The message of an entry that cannot be decoded; returns rc. */
static int src_bad(const ev_src *src, const hs_run *r, int rc, char *err, size_t errlen)
{
    if (src->dec)
        hs__store_seterr(err, errlen, "events row of run %" PRId64 " cannot be read: %s", r->id,
                         hs_strerror(rc));
    else
        hs__store_seterr(err, errlen, "malformed EVENTS frame: %s", hs_strerror(rc));
    return rc;
}

static uint64_t gcd_u64(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* The run's time quantum: the store's, or the largest divisor of both it
 * and the bucket width, so that rounding never moves an event's bucket. */
static uint64_t run_quantum(const hs_store *s, hs_run *r)
{
    if (!r->q) r->q = r->g ? gcd_u64(r->g, s->event_quantum_ns) : 1;
    assert(r->q >= 1);
    return r->q;
}

/* Room for nmax + 1 entries in the scratch slot list and, up to its bound,
 * in the cache of decoded entries. */
static int events_room(hs_store *s, size_t nmax)
{
    size_t need = nmax + 1;
    if (need > s->scratch_cap) {
        uint32_t *ns = realloc(s->scratch, need * sizeof *ns);
        if (!ns) return HS_ENOMEM;
        s->scratch = ns;
        s->scratch_cap = need;
    }
    size_t want_cache = need < HS_EVCACHE_MAX ? need : HS_EVCACHE_MAX;
    if (want_cache > s->evcache_cap) {
        hs_event *nc = realloc(s->evcache, want_cache * sizeof *nc);
        if (nc) {
            s->evcache = nc;
            s->evcache_cap = want_cache;
        }
    }
    return 0;
}

/* Whether event n of a batch may be applied to run r, whose byte totals
 * the batch has taken to *live and *total so far (updated). The totals must
 * stay within +-2^61 (2 EiB), so that no sum or difference the store and
 * the queries compute from them can overflow; each weight is below 2^61,
 * so this arithmetic cannot overflow either. */
static int event_check(const hs_event *e, uint32_t n, int64_t *live, int64_t *total, char *err,
                       size_t errlen)
{
    const int64_t lim = INT64_MAX / 4;
    if (e->weight > (uint64_t)lim) {
        hs__store_seterr(err, errlen, "EVENTS entry %u has an absurd weight", n);
        return HS_ERANGE;
    }
    if (e->t_ns > HS_T_MAX) {
        hs__store_seterr(err, errlen,
                         "EVENTS entry %u has time %" PRIu64 " ns, past any run's length", n,
                         e->t_ns);
        return HS_ERANGE;
    }
    *live += e->is_free ? -(int64_t)e->weight : (int64_t)e->weight;
    *total += e->is_free ? 0 : (int64_t)e->weight;
    if (*live > lim || *live < -lim || *total > lim) {
        hs__store_seterr(err, errlen, "EVENTS entry %u takes the run's byte totals past 2^61 bytes",
                         n);
        return HS_ERANGE;
    }
    if (*live < -(*total + HS_FREE_SLACK)) {
        hs__store_seterr(err, errlen,
                         "EVENTS entry %u frees %" PRId64 " bytes more than the run ever "
                         "allocated: frees without their allocations",
                         n, -*live - *total);
        return HS_ERANGE;
    }
    return 0;
}

/* Pass 1 over a batch: every entry valid, its slot in s->scratch, the
 * entries themselves in s->evcache as far as it holds them; *n entries. */
static int events_validate(hs_store *s, hs_run *r, ev_src *src, size_t nmax, uint32_t *n, char *err,
                           size_t errlen)
{
    hs_event e;
    int rc, more;
    if ((rc = events_room(s, nmax))) return rc;
    int64_t live = r->live_bytes, total = r->total_alloc_bytes;
    *n = 0;
    while ((more = src_next(src, &e)) == 1) {
        uint64_t idx;
        assert(*n <= nmax);
        if (!hs_map_get(&r->stacks, e.stack_id, &idx)) {
            hs__store_seterr(err, errlen,
                             "EVENTS entry %u uses stack id %" PRIu64 " never defined by STACKS",
                             *n, e.stack_id);
            return HS_EPROTO;
        }
        if ((rc = event_check(&e, *n, &live, &total, err, errlen))) return rc;
        if (*n < s->evcache_cap) s->evcache[*n] = e;
        s->scratch[(*n)++] = (uint32_t)idx;
    }
    if (more < 0) return src_bad(src, r, more, err, errlen);
    if (r->dirty_cap < r->nslots) { /* a slot is listed once per bucket */
        uint32_t cap = r->nslots + 64;
        uint32_t *nd = realloc(r->dirty, cap * sizeof *nd);
        if (!nd) return HS_ENOMEM;
        r->dirty = nd;
        r->dirty_cap = cap;
    }
    return 0;
}

int hs__store_segment(hs_store *s, hs_run *r, int close)
{
    if (!r->seg.n) return 0;
    const uint8_t *blob;
    size_t len;
    int rc = 0;
    if (!close) rc = hs_evseg_blob(&r->seg, 0, &blob, &len);
    if (!rc && !close && hs_evseg_zlen(&r->seg) >= HS_EVSEG_COMMIT_CLOSE) close = 1;
    /* a dense segment (an every-allocation run) is closed compressed again
     * as one chunk: a small fraction of the bytes its commits' chunks took */
    if (!rc && close && hs_evseg_dense(&r->seg)) rc = hs_evseg_repack(&r->seg, &s->dec);
    if (!rc && close) rc = hs_evseg_blob(&r->seg, 1, &blob, &len);
    if (rc) return rc;
    sqlite3_stmt *st = s->st[close ? ST_EVENTS : ST_TAIL_PUT];
    sqlite3_bind_int64(st, 1, r->id);
    sqlite3_bind_int64(st, 2, r->seg_seq);
    sqlite3_bind_int64(st, 3, (int64_t)r->seg.t_first);
    sqlite3_bind_int64(st, 4, (int64_t)r->seg.t_last);
    sqlite3_bind_int64(st, 5, (int64_t)r->seg.n);
    sqlite3_bind_blob(st, 6, blob, (int)len, SQLITE_STATIC);
    if ((rc = hs__store_step_done(s, st))) return rc;
    r->seg_dirty = 0;
    if (!close) {
        r->seg_tail = 1;
        return 0;
    }
    if (r->seg_tail) {
        st = s->st[ST_TAIL_DEL];
        sqlite3_bind_int64(st, 1, r->id);
        if ((rc = hs__store_step_done(s, st))) return rc;
        r->seg_tail = 0;
    }
    /* the next segment may be long in coming: its context goes to the pool */
    void *ctx = hs_evseg_take_ctx(&r->seg);
    if (ctx && s->nzpool < HS_ZPOOL_MAX)
        s->zpool[s->nzpool++] = ctx;
    else
        hs_evseg_ctx_free(ctx);
    hs_evseg_begin(&r->seg, run_quantum(s, r));
    hs_evseg_shrink(&r->seg, HS_EVSEG_PENDING_MAX * 2);
    return 0;
}

/* The entries of src, at most nmax, applied to the rollups; with seq >= 0
 * (a frame off the wire, len bytes) also added to the run's open segment,
 * which closes when full (schema 10). */
static int apply_events(hs_store *s, hs_run *r, ev_src *src, size_t nmax, int64_t seq, char *err,
                        size_t errlen)
{
    hs_event e;
    uint32_t n = 0;
    int rc = src_begin(src);
    if (rc) return src_bad(src, r, rc, err, errlen);
    if ((rc = events_validate(s, r, src, nmax, &n, err, errlen))) return rc;
    if (seq >= 0 && n > 0) {
        /* a frame may not take the segment past what a reader accepts */
        if (hs_evseg_raw(&r->seg) + 2 * (uint64_t)src->len + 64 > HS_EVSEG_RAW_CAP &&
            (rc = hs__store_segment(s, r, 1)))
            return rc;
        if (!r->seg.n) {
            hs_evseg_begin(&r->seg, run_quantum(s, r));
            if (!r->seg.cs && s->nzpool) hs_evseg_give_ctx(&r->seg, s->zpool[--s->nzpool]);
            r->seg_seq = seq;
        }
        r->seg_dirty = 1;
    }
    /* Pass 2: apply, from the entries decoded above when they all fit. */
    int cached = n <= s->evcache_cap;
    if (!cached) src_begin(src);
    for (uint32_t i = 0; i < n; i++) {
        const hs_event *ep = &e;
        if (cached)
            ep = &s->evcache[i];
        else
            src_next(src, &e);
        if (seq >= 0) hs_evseg_add(&r->seg, ep);
        int64_t b = hs_bucket_of(ep->t_ns, r->g);
        /* Batches from different threads may overlap in time: an event older
         * than the current bucket counts in the current bucket. */
        if (b > r->bucket && (rc = hs__rollup_advance(s, r, b))) return rc;
        apply_event(r, s->scratch[i], ep);
    }
    if (seq < 0 || n == 0) return 0;
    if (hs_evseg_pending(&r->seg) >= HS_EVSEG_PENDING_MAX && (rc = hs_evseg_flush(&r->seg)))
        return rc;
    if (hs_evseg_zlen(&r->seg) >= HS_EVSEG_Z_CAP || hs_evseg_raw(&r->seg) >= HS_EVSEG_RAW_CAP)
        return hs__store_segment(s, r, 1);
    return 0;
}

int hs__store_events(hs_store *s, hs_run *r, const uint8_t *p, size_t len, int64_t seq, char *err,
                     size_t errlen)
{
    /* An entry takes at least 4 bytes on the wire. */
    ev_src src = {.p = p, .len = len, .q = run_quantum(s, r)};
    return apply_events(s, r, &src, len / 4, seq, err, errlen);
}

int hs__store_replay_events(hs_store *s, hs_run *r, const uint8_t *blob, size_t len, char *err,
                            size_t errlen)
{
    int rc = hs_evdec_open(&s->dec, blob, len);
    if (rc) {
        hs__store_seterr(err, errlen, "events row of run %" PRId64 " cannot be read: %s", r->id,
                         hs_strerror(rc));
        return rc;
    }
    ev_src src = {.dec = &s->dec};
    return apply_events(s, r, &src, (size_t)hs_evdec_count(&s->dec), -1, err, errlen);
}

/* ---- PROCESS, SIZES, DROPS --------------------------------------------- */

static int frame_process(hs_store *s, hs_run *r, const uint8_t *p, size_t len, char *err,
                         size_t errlen)
{
    hs_batch_it it;
    hs_process_sample ps;
    int rc = hs_process_begin(&it, p, len), more;
    if (rc) goto bad;
    while ((more = hs_process_next(&it, &ps)) == 1) {
        if (ps.t_ns > HS_T_MAX) {
            hs__store_seterr(err, errlen, "PROCESS time %" PRIu64 " ns is past any run's length",
                             ps.t_ns);
            return HS_ERANGE;
        }
        sqlite3_stmt *st = s->st[ST_PROCESS];
        sqlite3_bind_int64(st, 1, r->id);
        sqlite3_bind_int64(st, 2, (int64_t)ps.t_ns);
        sqlite3_bind_int64(st, 3, (int64_t)ps.rss_bytes);
        sqlite3_bind_int64(st, 4, (int64_t)ps.vsize_bytes);
        if ((rc = hs__store_step_done(s, st))) return rc;
    }
    if (more == 0) return 0;
    rc = more;
bad:
    hs__store_seterr(err, errlen, "malformed PROCESS frame: %s", hs_strerror(rc));
    return rc;
}

static int frame_sizes(hs_store *s, hs_run *r, const uint8_t *p, size_t len, char *err,
                       size_t errlen)
{
    hs_batch_it it;
    hs_size_bucket b;
    int rc = hs_sizes_begin(&it, p, len), more;
    if (rc) goto bad;
    while ((more = hs_sizes_next(&it, &b)) == 1) {
        sqlite3_stmt *st = s->st[ST_SIZES];
        sqlite3_bind_int64(st, 1, r->id);
        sqlite3_bind_int64(st, 2, b.bucket);
        sqlite3_bind_int64(st, 3, (int64_t)b.allocs);
        sqlite3_bind_int64(st, 4, (int64_t)b.bytes);
        if ((rc = hs__store_step_done(s, st))) return rc;
    }
    if (more == 0) return 0;
    rc = more;
bad:
    hs__store_seterr(err, errlen, "malformed SIZES frame: %s", hs_strerror(rc));
    return rc;
}

static int frame_drops(hs_store *s, hs_run *r, const uint8_t *p, size_t len, char *err,
                       size_t errlen)
{
    hs_batch_it it;
    hs_drop d;
    hs_exact x = {0};
    int rc = hs_drops_begin(&it, p, len), more;
    if (rc) goto bad;
    while ((more = hs_drops_next(&it, &d)) == 1) {
        if (hs_exact_take(&x, &d)) continue;
        if (d.kind < 1 || d.kind > HS_DROP_KIND_MAX) continue; /* no column for it yet */
        uint32_t bit = 1u << d.kind;
        if ((r->drops_known & bit) && r->drops_row[d.kind] == d.value) continue;
        sqlite3_stmt *st = s->st[ST_RUN_DROP];
        sqlite3_bind_int64(st, 1, r->id);
        sqlite3_bind_int64(st, 2, d.kind);
        sqlite3_bind_int64(st, 3, (int64_t)d.value);
        if ((rc = hs__store_step_done(s, st))) return rc;
        /* (a rollback marks the run broken: it is loaded again, all unknown) */
        r->drops_row[d.kind] = d.value;
        r->drops_known |= bit;
    }
    if (more == 0) return x.t_ns ? hs__store_exact(s, r, &x) : 0;
    rc = more;
bad:
    hs__store_seterr(err, errlen, "malformed DROPS frame: %s", hs_strerror(rc));
    return rc;
}

/* ---- BYE and the end of a run ------------------------------------------ */

static int end_run(hs_store *s, hs_run *r, int state, int clean)
{
    int rc = hs__store_segment(s, r, 1);
    if (!rc) rc = hs__rollup_finish(s, r);
    if (rc) return rc;
    sqlite3_stmt *st = s->st[ST_RUN_STATE];
    sqlite3_bind_int64(st, 1, r->id);
    sqlite3_bind_text(st, 2, state == HS_RUN_ENDED ? "ended" : "lost", -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 3, clean);
    if ((rc = hs__store_step_done(s, st))) return rc;
    /* the summaries across runs read (schema 9), from the rows just flushed */
    st = s->st[ST_RUN_SUMMARY];
    sqlite3_bind_int64(st, 1, r->id);
    if ((rc = hs__store_step_done(s, st))) return rc;
    r->state = state;
    hs__store_touch(s, r);
    return 0;
}

static int frame_bye(hs_store *s, hs_run *r, const uint8_t *p, size_t len, char *err, size_t errlen)
{
    hs_bye b;
    int rc = hs_bye_decode(&b, p, len);
    if (rc) {
        hs__store_seterr(err, errlen, "malformed BYE frame: %s", hs_strerror(rc));
        return rc;
    }
    if (b.t_end_ns > HS_T_MAX) {
        hs__store_seterr(err, errlen, "BYE time %" PRIu64 " ns is past any run's length",
                         b.t_end_ns);
        return HS_ERANGE;
    }
    sqlite3_stmt *st = s->st[ST_RUN_BYE];
    sqlite3_bind_int64(st, 1, r->id);
    sqlite3_bind_int64(st, 2, (int64_t)b.alloc_events);
    sqlite3_bind_int64(st, 3, (int64_t)b.free_events);
    sqlite3_bind_int64(st, 4, (int64_t)b.collector_peak_bytes);
    if ((rc = hs__store_step_done(s, st))) return rc;
    if (b.t_end_ns > r->end_ns) r->end_ns = b.t_end_ns;
    return end_run(s, r, HS_RUN_ENDED, (b.flags & HS_BYE_CLEAN) ? 1 : 0);
}

int hs_store_run_lose(hs_store *s, hs_run *r)
{
    if (r->state != HS_RUN_OPEN) return 0;
    int rc = end_run(s, r, HS_RUN_LOST, 0);
    if (rc) s->db_failed = 1;
    return rc;
}

int hs_store_run_frame(hs_store *s, hs_run *r, uint64_t seq, int type, const uint8_t *p, size_t len,
                       char *err, size_t errlen)
{
    if (r->broken) {
        hs__store_seterr(err, errlen, "the run's state was lost with a failed transaction");
        return HS_EDB;
    }
    if (seq < r->next_seq) return 0; /* stored before: a resend */
    if (r->state != HS_RUN_OPEN) {
        hs__store_seterr(err, errlen, "%s frame after the run ended",
                         hs_frame_name(type) ? hs_frame_name(type) : "unknown");
        return HS_EPROTO;
    }
    int rc;
    switch (type) {
    case HS_FRAME_MAPPINGS:
        rc = frame_mappings(s, r, p, len, err, errlen);
        break;
    case HS_FRAME_SYMBOLS:
        rc = frame_symbols(s, r, p, len, err, errlen);
        break;
    case HS_FRAME_STACKS:
        rc = frame_stacks(s, r, p, len, err, errlen);
        break;
    case HS_FRAME_EVENTS:
        rc = hs__store_events(s, r, p, len, (int64_t)seq, err, errlen);
        break;
    case HS_FRAME_PROCESS:
        rc = frame_process(s, r, p, len, err, errlen);
        break;
    case HS_FRAME_SIZES:
        rc = frame_sizes(s, r, p, len, err, errlen);
        break;
    case HS_FRAME_DROPS:
        rc = frame_drops(s, r, p, len, err, errlen);
        break;
    case HS_FRAME_BYE:
        rc = frame_bye(s, r, p, len, err, errlen);
        break;
    case HS_FRAME_HELLO:
        hs__store_seterr(err, errlen, "HELLO in the middle of a stream");
        return HS_EPROTO;
    default:
        hs__store_seterr(err, errlen, "unknown frame type 0x%02x", type);
        return HS_EPROTO;
    }
    if (s->db_failed) {
        if (err && !err[0]) hs__store_seterr(err, errlen, "database: %s", sqlite3_errmsg(s->db));
        return HS_EDB;
    }
    if (rc) return rc;
    r->next_seq = seq + 1;
    hs__store_touch(s, r);
    return 0;
}

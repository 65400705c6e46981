/* hs_symcache: the stored form of the server's symbol cache (see
 * hs_symcache.h). */
#include "hs_symcache.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "hs_cols.h"
#include "hs_error.h"
#include "hs_schema.h"

struct hs__symc_ent {
    uint64_t off;
    uint32_t frame; /* its frames are frames[frame, frame + n) */
    uint32_t n;
};

struct hs__symc_fr {
    uint32_t function, file; /* string numbers */
    uint64_t line;
};

enum { COL_SLEN, COL_STR, COL_OFFSET, COL_NFR, COL_FUNC, COL_FILE, COL_LINE, COL_COUNT };

/* zstd level 9: a block is written a few times while it fills, read once
 * a server process, and its bytes are what this format is for. */
#define SYMC_LEVEL 9

/* ---- entries in memory ------------------------------------------------------ */

static hs_str str_of(const hs_symcache_block *b, uint32_t id)
{
    assert(id < b->nstr);
    return (hs_str){b->chars + b->str_at[id], b->str_at[id + 1] - b->str_at[id]};
}

static int grow(void **p, size_t *cap, size_t need, size_t size)
{
    return hs_array_room(p, cap, need, size) ? HS_ENOMEM : 0;
}

/* The number of string s in b, added when b has none equal: 0, or
 * HS_ENOMEM. A string whose hash another string has is added again
 * (unindexed): equal strings are then stored twice, never mixed up. */
static int intern(hs_symcache_block *b, hs_str s, uint32_t *out)
{
    uint64_t h = hs_map_hash(s.ptr, s.len), id;
    if (hs_map_get(&b->by_hash, h, &id)) {
        hs_str t = str_of(b, (uint32_t)id);
        if (t.len == s.len && (!s.len || !memcmp(t.ptr, s.ptr, s.len))) {
            *out = (uint32_t)id;
            return 0;
        }
    }
    assert(b->nchars + s.len < UINT32_MAX && b->nstr + 1 < UINT32_MAX);
    if (grow((void **)&b->chars, &b->chars_cap, b->nchars + s.len + 1, 1) ||
        grow((void **)&b->str_at, &b->str_cap, b->nstr + 2, sizeof *b->str_at))
        return HS_ENOMEM;
    if (!hs_map_get(&b->by_hash, h, &id) && hs_map_put(&b->by_hash, h, b->nstr)) return HS_ENOMEM;
    if (b->nstr == 0) b->str_at[0] = 0;
    if (s.len) memcpy(b->chars + b->nchars, s.ptr, s.len);
    b->nchars += s.len;
    b->str_at[++b->nstr] = (uint32_t)b->nchars;
    *out = (uint32_t)(b->nstr - 1);
    return 0;
}

int hs_symcache_has(const hs_symcache_block *b, uint64_t off)
{
    uint64_t i;
    return hs_map_get(&b->by_off, off, &i);
}

uint64_t hs_symcache_offset_at(const hs_symcache_block *b, size_t i)
{
    assert(i < b->n);
    return b->ents[i].off;
}

/* Undoes the strings added past nstr (an add that failed half way). */
static void strings_back(hs_symcache_block *b, size_t nstr)
{
    for (size_t i = nstr; i < b->nstr; i++) {
        hs_str s = str_of(b, (uint32_t)i);
        uint64_t h = hs_map_hash(s.ptr, s.len), id;
        if (hs_map_get(&b->by_hash, h, &id) && id == i) hs_map_del(&b->by_hash, h);
    }
    if (nstr < b->nstr) {
        b->nchars = b->str_at[nstr];
        b->nstr = nstr;
    }
}

int hs_symcache_add(hs_symcache_block *b, uint64_t off, const hs_symcache_frame *fr, int n)
{
    assert(n >= 1 && n <= HS_SYMCACHE_FRAMES_MAX);
    if (hs_symcache_has(b, off)) return 0;
    if (grow((void **)&b->ents, &b->ents_cap, b->n + 1, sizeof *b->ents) ||
        grow((void **)&b->frames, &b->frames_cap, b->nframes + (size_t)n, sizeof *b->frames))
        return HS_ENOMEM;
    size_t nstr = b->nstr;
    for (int k = 0; k < n; k++) {
        assert(fr[k].function.len <= HS_FUNC_MAX && fr[k].file.len <= HS_STR_MAX);
        struct hs__symc_fr *f = &b->frames[b->nframes + (size_t)k];
        if (intern(b, fr[k].function, &f->function) || intern(b, fr[k].file, &f->file)) {
            strings_back(b, nstr);
            return HS_ENOMEM;
        }
        f->line = fr[k].line;
    }
    if (hs_map_put(&b->by_off, off, b->n)) {
        strings_back(b, nstr);
        return HS_ENOMEM;
    }
    assert(b->nframes + (size_t)n < UINT32_MAX);
    b->ents[b->n++] = (struct hs__symc_ent){off, (uint32_t)b->nframes, (uint32_t)n};
    b->nframes += (size_t)n;
    return 1;
}

int hs_symcache_get(const hs_symcache_block *b, uint64_t off, hs_symcache_frame *out, int max)
{
    uint64_t i;
    if (max < 1 || !hs_map_get(&b->by_off, off, &i)) return 0;
    assert(i < b->n);
    const struct hs__symc_ent *e = &b->ents[i];
    assert(e->off == off && e->n >= 1 && e->frame + e->n <= b->nframes);
    int n = e->n < (uint32_t)max ? (int)e->n : max;
    for (int k = 0; k < n; k++) {
        const struct hs__symc_fr *f = &b->frames[e->frame + (uint32_t)k];
        out[k] = (hs_symcache_frame){str_of(b, f->function), str_of(b, f->file), f->line};
    }
    return n;
}

size_t hs_symcache_entry_bytes(const hs_symcache_frame *fr, int n)
{
    size_t s = 0;
    for (int k = 0; k < n; k++) s += fr[k].function.len + fr[k].file.len;
    return s;
}

size_t hs_symcache_mem(const hs_symcache_block *b)
{
    size_t maps =
        (b->by_off.slots ? b->by_off.mask + 1 : 0) + (b->by_hash.slots ? b->by_hash.mask + 1 : 0);
    return sizeof *b + b->ents_cap * sizeof *b->ents + b->frames_cap * sizeof *b->frames +
           b->str_cap * sizeof *b->str_at + b->chars_cap + maps * sizeof(hs_map_slot);
}

void hs_symcache_clear(hs_symcache_block *b)
{
    b->n = b->nframes = b->nstr = b->nchars = 0;
    hs_map_clear(&b->by_off);
    hs_map_clear(&b->by_hash);
}

void hs_symcache_free(hs_symcache_block *b)
{
    if (!b) return;
    free(b->ents);
    free(b->frames);
    free(b->str_at);
    free(b->chars);
    hs_map_free(&b->by_off);
    hs_map_free(&b->by_hash);
    memset(b, 0, sizeof *b);
}

/* ---- codec -------------------------------------------------------------- */

static int by_offset(const void *a, const void *b)
{
    const struct hs__symc_ent *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* A string number of the block as it is written: strings renumbered in the
 * order the sorted entries first use them. */
static uint32_t renumber(uint32_t *map, uint32_t *next, uint32_t id, uint32_t *order)
{
    if (map[id] == UINT32_MAX) {
        order[*next] = id;
        map[id] = (*next)++;
    }
    return map[id];
}

int hs_symcache_encode(const hs_symcache_block *b, hs_buf *out)
{
    assert(b->n >= 1 && b->n <= HS_SYMCACHE_BLOCK_ENTRIES);
    assert(b->nchars <= HS_SYMCACHE_BLOCK_BYTES);
    size_t n = b->n, nf = b->nframes, ns = b->nstr;
    size_t cap[COL_COUNT] = {
        [COL_SLEN] = ns * HS_VARINT_MAX,  [COL_STR] = b->nchars,
        [COL_OFFSET] = n * HS_VARINT_MAX, [COL_NFR] = n * HS_VARINT_MAX,
        [COL_FUNC] = nf * HS_VARINT_MAX,  [COL_FILE] = nf * HS_VARINT_MAX,
        [COL_LINE] = nf * HS_VARINT_MAX,
    };
    hs_cols cols;
    struct hs__symc_ent *ents = malloc(n * sizeof *ents);
    uint32_t *map = malloc((ns ? ns : 1) * 2 * sizeof *map);
    int rc = HS_ENOMEM;
    if (!ents || !map || hs_cols_init_cap(&cols, COL_COUNT, cap)) goto out;
    memcpy(ents, b->ents, n * sizeof *ents);
    qsort(ents, n, sizeof *ents, by_offset);
    uint32_t *order = map + ns, next = 0;
    memset(map, 0xff, ns * sizeof *map);
    for (size_t i = 0; i < n; i++) {
        const struct hs__symc_ent *e = &ents[i];
        assert(i == 0 || e->off > ents[i - 1].off);
        hs_cols_put(&cols, COL_OFFSET, i ? e->off - ents[i - 1].off : e->off);
        hs_cols_put(&cols, COL_NFR, e->n);
        for (uint32_t k = 0; k < e->n; k++) {
            const struct hs__symc_fr *f = &b->frames[e->frame + k];
            hs_cols_put(&cols, COL_FUNC, renumber(map, &next, f->function, order));
            hs_cols_put(&cols, COL_FILE, renumber(map, &next, f->file, order));
            hs_cols_put(&cols, COL_LINE, f->line);
        }
    }
    for (uint32_t i = 0; i < next; i++) { /* the strings used, in their new order */
        hs_str s = str_of(b, order[i]);
        hs_cols_put(&cols, COL_SLEN, s.len);
        hs_cols_put_bytes(&cols, COL_STR, s.ptr, s.len);
    }
    for (int c = 0; c < COL_COUNT; c++) assert(cols.len[c] <= cap[c]);
    uint8_t hdr[1 + 3 * HS_VARINT_MAX];
    hs_wr wr;
    hs_wr_init(&wr, hdr, sizeof hdr);
    hs_wr_u8(&wr, HS_SYMCACHE_CODEC);
    hs_wr_varint(&wr, n);
    hs_wr_varint(&wr, nf);
    hs_wr_varint(&wr, next);
    assert(!wr.err);
    hs_buf_put(out, hdr, hs_wr_len(&wr));
    rc = hs_cols_write(&cols, SYMC_LEVEL, out, NULL);
    hs_cols_free(&cols);
out:
    free(map);
    free(ents);
    return rc;
}

/* The columns of a blob, and its strings once checked. */
typedef struct cols {
    size_t n, nf, ns;
    const uint8_t *p[COL_COUNT];
    size_t len[COL_COUNT];
    hs_str *strs; /* ns */
} cols;

/* Checks the columns: every count within its bounds, every string number
 * within the table and of a length its use allows, offsets increasing,
 * nothing left over; fills strs. */
static int check_cols(cols *c)
{
    hs_rd rd[COL_COUNT];
    for (int i = 0; i < COL_COUNT; i++) hs_rd_init(&rd[i], c->p[i], c->len[i]);
    size_t chars = 0;
    for (size_t i = 0; i < c->ns; i++) {
        c->strs[i].len = (size_t)hs_rd_varint_max(&rd[COL_SLEN], HS_FUNC_MAX);
        c->strs[i].ptr = (const char *)c->p[COL_STR] + chars;
        chars += c->strs[i].len;
        if (chars > c->len[COL_STR]) return HS_ECORRUPT;
    }
    if (rd[COL_SLEN].err || chars != c->len[COL_STR]) return HS_ECORRUPT;
    size_t frames = 0;
    uint64_t off = 0;
    for (size_t i = 0; i < c->n; i++) {
        uint64_t step = hs_rd_varint(&rd[COL_OFFSET]);
        if (i && (step == 0 || step > UINT64_MAX - off)) return HS_ECORRUPT;
        off += step;
        uint64_t k = hs_rd_varint_max(&rd[COL_NFR], HS_SYMCACHE_FRAMES_MAX);
        if (k == 0) return HS_ECORRUPT;
        frames += (size_t)k;
    }
    if (frames != c->nf) return HS_ECORRUPT;
    for (size_t i = 0; i < c->nf; i++) {
        hs_rd_varint_max(&rd[COL_FUNC], c->ns - 1);
        uint64_t file = hs_rd_varint_max(&rd[COL_FILE], c->ns - 1);
        if (!rd[COL_FILE].err && c->strs[file].len > HS_STR_MAX) return HS_ECORRUPT;
        hs_rd_varint(&rd[COL_LINE]);
    }
    for (int i = 0; i < COL_COUNT; i++)
        if (i != COL_STR && (rd[i].err || hs_rd_left(&rd[i]))) return HS_ECORRUPT;
    return 0;
}

/* Adds checked columns to b: 0 or HS_ENOMEM (the entries added so far
 * stay). */
static int add_cols(hs_symcache_block *b, const cols *c)
{
    hs_rd rd[COL_COUNT];
    for (int i = 0; i < COL_COUNT; i++) hs_rd_init(&rd[i], c->p[i], c->len[i]);
    uint64_t off = 0;
    for (size_t i = 0; i < c->n; i++) {
        off += hs_rd_varint(&rd[COL_OFFSET]);
        int k = (int)hs_rd_varint(&rd[COL_NFR]);
        hs_symcache_frame fr[HS_SYMCACHE_FRAMES_MAX];
        for (int j = 0; j < k; j++) {
            fr[j].function = c->strs[hs_rd_varint(&rd[COL_FUNC])];
            fr[j].file = c->strs[hs_rd_varint(&rd[COL_FILE])];
            fr[j].line = hs_rd_varint(&rd[COL_LINE]);
        }
        if (hs_symcache_add(b, off, fr, k) < 0) return HS_ENOMEM;
    }
    return 0;
}

int hs_symcache_decode(hs_symcache_block *b, const void *blob, size_t blen)
{
    hs_rd rd;
    hs_rd_init(&rd, blob, blen);
    cols c;
    memset(&c, 0, sizeof c);
    if (hs_rd_u8(&rd) != HS_SYMCACHE_CODEC) return HS_ECORRUPT;
    c.n = (size_t)hs_rd_varint_max(&rd, HS_SYMCACHE_BLOCK_ENTRIES);
    c.nf = (size_t)hs_rd_varint_max(&rd, (uint64_t)c.n * HS_SYMCACHE_FRAMES_MAX);
    c.ns = (size_t)hs_rd_varint_max(&rd, 2 * (uint64_t)c.nf);
    const uint64_t most[COL_COUNT] = {
        [COL_SLEN] = c.ns * HS_VARINT_MAX,  [COL_STR] = HS_SYMCACHE_BLOCK_BYTES,
        [COL_OFFSET] = c.n * HS_VARINT_MAX, [COL_NFR] = c.n,
        [COL_FUNC] = c.nf * HS_VARINT_MAX,  [COL_FILE] = c.nf * HS_VARINT_MAX,
        [COL_LINE] = c.nf * HS_VARINT_MAX,
    };
    if (rd.err || c.n == 0 || c.nf < c.n || c.ns == 0) return HS_ECORRUPT;
    hs_cols_rd body;
    int rc = hs_cols_open_max(&rd, COL_COUNT, most, &body, NULL);
    if (rc) return rc;
    for (int i = 0; i < COL_COUNT; i++) {
        c.p[i] = body.col[i].p;
        c.len[i] = hs_rd_left(&body.col[i]);
    }
    rc = (c.strs = malloc(c.ns * sizeof *c.strs)) ? check_cols(&c) : HS_ENOMEM;
    if (!rc) {
        /* b as it was if anything fails: what it had is kept aside */
        size_t n = b->n, nframes = b->nframes, nstr = b->nstr;
        rc = add_cols(b, &c);
        if (rc) {
            for (size_t i = n; i < b->n; i++) hs_map_del(&b->by_off, b->ents[i].off);
            b->n = n;
            b->nframes = nframes;
            strings_back(b, nstr);
        }
    }
    free(c.strs);
    hs_cols_rd_free(&body);
    return rc;
}

/* ---- reading ---------------------------------------------------------------- */

typedef struct rd_build {
    uint8_t bid[HS_BUILD_ID_MAX];
    size_t blen;
    hs_symcache_block b;
    size_t mem;    /* hs_symcache_mem(&b) as counted in the reader's bytes */
    uint64_t used; /* for eviction: the least recently asked about goes */
} rd_build;

struct hs_symcache_rd {
    sqlite3 *db;
    sqlite3_stmt *get; /* the blocks of build ?1 */
    rd_build **builds;
    size_t n, cap;
    size_t bytes, max_bytes; /* the builds' hs_symcache_mem, summed; the bound */
    uint64_t clock;
};

int hs_symcache_rd_open(sqlite3 *db, size_t max_bytes, hs_symcache_rd **out)
{
    *out = NULL;
    hs_symcache_rd *r = calloc(1, sizeof *r);
    if (!r) return HS_ENOMEM;
    r->db = db;
    r->max_bytes = max_bytes;
    if (sqlite3_prepare_v3(db, "SELECT data FROM symbol_blocks WHERE build_id = ?1 ORDER BY seq",
                           -1, SQLITE_PREPARE_PERSISTENT, &r->get, NULL) != SQLITE_OK) {
        free(r);
        return HS_EDB;
    }
    *out = r;
    return 0;
}

static void build_free(rd_build *x)
{
    if (!x) return;
    hs_symcache_free(&x->b);
    free(x);
}

void hs_symcache_rd_free(hs_symcache_rd *r)
{
    if (!r) return;
    for (size_t i = 0; i < r->n; i++) build_free(r->builds[i]);
    free(r->builds);
    sqlite3_finalize(r->get);
    free(r);
}

size_t hs_symcache_rd_builds(const hs_symcache_rd *r, size_t *bytes)
{
    if (bytes) *bytes = r->bytes;
    return r->n;
}

static rd_build *rd_find(hs_symcache_rd *r, const uint8_t *bid, size_t blen)
{
    for (size_t i = 0; i < r->n; i++) {
        rd_build *x = r->builds[i];
        if (x->blen == blen && !memcmp(x->bid, bid, blen)) return x;
    }
    return NULL;
}

/* Counts x's memory again, then lets the builds asked about least lately
 * go, x aside, until the reader is within its bound. */
static void rd_account(hs_symcache_rd *r, rd_build *x)
{
    size_t mem = hs_symcache_mem(&x->b);
    assert(r->bytes >= x->mem);
    r->bytes = r->bytes - x->mem + mem;
    x->mem = mem;
    while (r->bytes > r->max_bytes && r->n > 1) {
        size_t lru = r->n;
        for (size_t i = 0; i < r->n; i++)
            if (r->builds[i] != x && (lru == r->n || r->builds[i]->used < r->builds[lru]->used))
                lru = i;
        assert(lru < r->n);
        assert(r->bytes >= r->builds[lru]->mem);
        r->bytes -= r->builds[lru]->mem;
        build_free(r->builds[lru]);
        r->builds[lru] = r->builds[--r->n];
    }
}

/* Reads build bid's blocks into a new entry of r. */
static int rd_load(hs_symcache_rd *r, const uint8_t *bid, size_t blen, rd_build **out)
{
    if (r->n == r->cap && grow((void **)&r->builds, &r->cap, r->n + 1, sizeof *r->builds))
        return HS_ENOMEM;
    rd_build *x = calloc(1, sizeof *x);
    if (!x) return HS_ENOMEM;
    memcpy(x->bid, bid, blen);
    x->blen = blen;
    sqlite3_bind_blob(r->get, 1, bid, (int)blen, SQLITE_STATIC);
    int step, rc = 0;
    while (!rc && (step = sqlite3_step(r->get)) == SQLITE_ROW) {
        const void *blob = sqlite3_column_blob(r->get, 0);
        rc = hs_symcache_decode(&x->b, blob, (size_t)sqlite3_column_bytes(r->get, 0));
        if (rc == HS_ECORRUPT) rc = 0; /* its offsets are looked up again */
    }
    if (!rc && step != SQLITE_DONE) rc = HS_EDB;
    sqlite3_reset(r->get);
    sqlite3_clear_bindings(r->get);
    if (rc) {
        build_free(x);
        return rc;
    }
    r->builds[r->n++] = x;
    *out = x;
    return 0;
}

int hs_symcache_rd_get(hs_symcache_rd *r, const uint8_t *bid, size_t blen, uint64_t off,
                       hs_symcache_frame *out, int max)
{
    if (!blen || blen > HS_BUILD_ID_MAX) return 0;
    rd_build *x = rd_find(r, bid, blen);
    if (!x) {
        int rc = rd_load(r, bid, blen, &x);
        if (rc) return rc;
        rd_account(r, x);
    }
    x->used = ++r->clock;
    return hs_symcache_get(&x->b, off, out, max);
}

void hs_symcache_rd_add(hs_symcache_rd *r, const uint8_t *bid, size_t blen, uint64_t off,
                        const hs_symcache_frame *fr, int n)
{
    rd_build *x = blen && blen <= HS_BUILD_ID_MAX ? rd_find(r, bid, blen) : NULL;
    /* not held: what the database has of it is not known here; the next
     * question about it reads the database, where the writer puts this */
    if (!x) return;
    if (hs_symcache_add(&x->b, off, fr, n) == 1) rd_account(r, x);
}

/* ---- migration ------------------------------------------------------------ */

typedef struct mig {
    sqlite3 *db;
    sqlite3_stmt *put, *next;
    uint8_t bid[HS_BUILD_ID_MAX];
    size_t blen;
    int64_t seq;
    hs_symcache_block b;
} mig;

static int mig_flush(mig *m)
{
    if (!m->b.n) return 0;
    hs_buf data = {0};
    int rc = hs_symcache_encode(&m->b, &data);
    if (!rc) {
        sqlite3_bind_blob(m->put, 1, m->bid, (int)m->blen, SQLITE_STATIC);
        sqlite3_bind_int64(m->put, 2, m->seq++);
        sqlite3_bind_blob(m->put, 3, data.p, (int)data.n, SQLITE_STATIC);
        if (sqlite3_step(m->put) != SQLITE_DONE) rc = HS_EDB;
        sqlite3_reset(m->put);
    }
    hs_buf_free(&data);
    hs_symcache_clear(&m->b);
    return rc;
}

/* Starts build bid: its blocks go after those it has. */
static int mig_build(mig *m, const void *bid, size_t blen)
{
    int rc = mig_flush(m);
    if (rc) return rc;
    memcpy(m->bid, bid, blen);
    m->blen = blen;
    sqlite3_bind_blob(m->next, 1, bid, (int)blen, SQLITE_STATIC);
    rc = sqlite3_step(m->next) == SQLITE_ROW ? 0 : HS_EDB;
    m->seq = sqlite3_column_int64(m->next, 0);
    sqlite3_reset(m->next);
    return rc;
}

static int mig_entry(mig *m, uint64_t off, const hs_symcache_frame *fr, int n)
{
    int rc = 0;
    if (m->b.n == HS_SYMCACHE_BLOCK_ENTRIES ||
        hs_symcache_str_bytes(&m->b) + hs_symcache_entry_bytes(fr, n) > HS_SYMCACHE_BLOCK_BYTES)
        rc = mig_flush(m);
    return rc ? rc : hs_symcache_add(&m->b, off, fr, n) < 0 ? HS_ENOMEM : 0;
}

static hs_str clip(const unsigned char *s, int len, size_t max)
{
    return (hs_str){s ? (const char *)s : "", len < 0 ? 0 : (size_t)len < max ? (size_t)len : max};
}

int hs_symcache_migrate(sqlite3 *db)
{
    sqlite3_stmt *sel = NULL;
    mig m;
    memset(&m, 0, sizeof m);
    m.db = db;
    /* a frame's strings are copied: a row's are gone at the next step */
    char *keep[2 * HS_SYMCACHE_FRAMES_MAX] = {0};
    hs_symcache_frame fr[HS_SYMCACHE_FRAMES_MAX];
    int n = 0, rc = 0, step = SQLITE_DONE;
    uint64_t off = 0;
    int old = hs_schema_has_table(db, "symbol_cache");
    if (old <= 0) return old; /* none to move (dropped by hand) */
    if (sqlite3_prepare_v2(db,
                           "SELECT build_id, offset, k, function, file, line FROM symbol_cache "
                           "ORDER BY build_id, offset, k",
                           -1, &sel, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db,
                           "INSERT OR REPLACE INTO symbol_blocks (build_id, seq, data) "
                           "VALUES (?1, ?2, ?3)",
                           -1, &m.put, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(
            db, "SELECT coalesce(max(seq) + 1, 0) FROM symbol_blocks WHERE build_id = ?1", -1,
            &m.next, NULL) != SQLITE_OK) {
        rc = HS_EDB;
        goto out;
    }
    while (!rc && (step = sqlite3_step(sel)) == SQLITE_ROW) {
        const void *bid = sqlite3_column_blob(sel, 0);
        size_t blen = (size_t)sqlite3_column_bytes(sel, 0);
        uint64_t o = (uint64_t)sqlite3_column_int64(sel, 1);
        if (!blen || blen > HS_BUILD_ID_MAX) continue; /* none the server wrote */
        int same = blen == m.blen && !memcmp(bid, m.bid, blen);
        if (n && (!same || o != off)) { /* the offset before is whole */
            rc = mig_entry(&m, off, fr, n);
            n = 0;
        }
        if (!rc && !same) rc = mig_build(&m, bid, blen);
        off = o;
        if (rc || n == HS_SYMCACHE_FRAMES_MAX) continue;
        hs_str f = clip(sqlite3_column_text(sel, 3), sqlite3_column_bytes(sel, 3), HS_FUNC_MAX);
        hs_str file = clip(sqlite3_column_text(sel, 4), sqlite3_column_bytes(sel, 4), HS_STR_MAX);
        free(keep[2 * n]);
        free(keep[2 * n + 1]);
        keep[2 * n] = malloc(f.len + 1);
        keep[2 * n + 1] = malloc(file.len + 1);
        if (!keep[2 * n] || !keep[2 * n + 1]) {
            rc = HS_ENOMEM;
            continue;
        }
        memcpy(keep[2 * n], f.ptr, f.len);
        memcpy(keep[2 * n + 1], file.ptr, file.len);
        int64_t line = sqlite3_column_int64(sel, 5);
        fr[n] = (hs_symcache_frame){
            {keep[2 * n], f.len}, {keep[2 * n + 1], file.len}, line > 0 ? (uint64_t)line : 0};
        n++;
    }
    if (!rc && step != SQLITE_DONE) rc = HS_EDB;
    if (!rc && n) rc = mig_entry(&m, off, fr, n);
    if (!rc) rc = mig_flush(&m);
out:
    for (size_t i = 0; i < 2 * HS_SYMCACHE_FRAMES_MAX; i++) free(keep[i]);
    hs_symcache_free(&m.b);
    sqlite3_finalize(sel);
    sqlite3_finalize(m.put);
    sqlite3_finalize(m.next);
    if (!rc && sqlite3_exec(db, "DROP TABLE symbol_cache", NULL, NULL, NULL) != SQLITE_OK)
        rc = HS_EDB;
    return rc;
}

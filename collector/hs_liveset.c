/* hs_liveset: counting filter plus sharded open-addressing table (see hs_liveset.h). */
#include "hs_liveset.h"

#include <assert.h>
#include <string.h>
#include <sys/mman.h>

#include "hs_error.h"
#include "hs_mem.h"

#define NSHARDS   64
#define SHARD_MIN 256
/* Probes of a lock-free lookup before it gives up on a shard that keeps
 * changing under it and lets the caller take the lock. */
#define HAS_TRIES 4

/* Page-aligned, so that a reset can hand its pages back (see below). */
_Atomic uint8_t hs__filter[1u << HS_FILTER_BITS] __attribute__((aligned(4096)));

/* A shard's slots. Readers without the lock load the pointer once, so that
 * a table and its capacity are always seen together. */
typedef struct table {
    uint32_t cap;          /* a power of two */
    struct table *retired; /* tables this shard outgrew (lock holder only) */
    hs_live e[];
} table;

typedef struct shard {
    hs_lock lock;
    _Atomic uint32_t seq; /* odd while the lock holder changes the table */
    uint32_t count;
    table *_Atomic tab; /* NULL before the first insert */
} __attribute__((aligned(64))) shard;

static shard shards[NSHARDS];
static uint64_t shard_max; /* capacity limit per shard */

static inline uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

/* A key's home slot in its shard's table (mask m). Within a filter granule
 * (1 KiB, one shard's) blocks keep their order and spacing, 16 bytes of
 * address to a slot, so that blocks allocated or freed near each other in
 * memory probe neighbouring slots; only the granules are scattered. With a
 * hash of the whole address every insert, lookup and remove of a large set
 * was a cache miss (measured: most of the collector's time at every
 * allocation on a std::map program, issue #14 item 6). Allocators align
 * blocks to 16 bytes and keep them at least 32 apart, so a granule's blocks
 * never share a home slot, and at most half of a granule's slots are
 * homes. */
static inline uint64_t granule_of(uintptr_t addr)
{
    return (uint64_t)addr >> (HS_FILTER_SHIFT + 6); /* the granule, shard bits dropped */
}

/* The granule's share of home(): the hash, computed once per granule where a
 * caller meets many of its blocks in a row. */
static inline uint32_t granule_base(uint64_t g)
{
    return (uint32_t)mix(g) << (HS_FILTER_SHIFT - 4);
}

static inline uint32_t home_in(uint32_t base, uintptr_t addr, uint32_t m)
{
    return (base | ((uint32_t)(addr >> 4) & ((1u << (HS_FILTER_SHIFT - 4)) - 1))) & m;
}

static inline uint32_t home(uintptr_t addr, uint32_t m)
{
    return home_in(granule_base(granule_of(addr)), addr, m);
}

static size_t table_bytes(uint32_t cap)
{
    return sizeof(table) + (size_t)cap * sizeof(hs_live);
}

/* Slots are read by lock-free readers while the lock holder writes them:
 * the key with atomic loads and stores (relaxed; the sequence counter
 * orders them), the rest only ever read under the lock. */
static inline uintptr_t key_of(const hs_live *e)
{
    return __atomic_load_n(&e->addr, __ATOMIC_RELAXED);
}

static inline void slot_set(hs_live *d, const hs_live *e)
{
    d->size = e->size;
    d->stack_id = e->stack_id;
    __atomic_store_n(&d->addr, e->addr, __ATOMIC_RELAXED);
}

static void write_begin(shard *s)
{
    uint32_t q = atomic_load_explicit(&s->seq, memory_order_relaxed);
    assert(!(q & 1));
    atomic_store_explicit(&s->seq, q + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
}

static void write_end(shard *s)
{
    uint32_t q = atomic_load_explicit(&s->seq, memory_order_relaxed);
    assert(q & 1);
    atomic_store_explicit(&s->seq, q + 1, memory_order_release);
}

/* NULL's granule is marked for good (255 is never decremented): free's fast
 * path then needs no test for NULL, as NULL always takes the slow path. */
static void null_mark(void)
{
    atomic_store_explicit(&hs__filter[hs__filter_index(0)], 255, memory_order_relaxed);
}

void hs__liveset_init(uint64_t max_entries)
{
    uint64_t per = max_entries / NSHARDS;
    uint64_t cap = SHARD_MIN;
    while (cap < 2 * per) cap *= 2; /* at most half full: per entries fit */
    shard_max = cap;
    assert(shard_max >= SHARD_MIN && !(shard_max & (shard_max - 1)));
    null_mark();
}

static void filter_inc(uint32_t i)
{
    uint8_t v = atomic_load_explicit(&hs__filter[i], memory_order_relaxed);
    if (v < 255) atomic_store_explicit(&hs__filter[i], (uint8_t)(v + 1), memory_order_relaxed);
}

static void filter_dec(uint32_t i)
{
    uint8_t v = atomic_load_explicit(&hs__filter[i], memory_order_relaxed);
    if (v > 0 && v < 255)
        atomic_store_explicit(&hs__filter[i], (uint8_t)(v - 1), memory_order_relaxed);
}

/* Into a table nobody else sees yet; it has a free slot. */
static void put(table *t, const hs_live *e)
{
    uint32_t m = t->cap - 1;
    for (uint32_t i = home(e->addr, m);; i = (i + 1) & m) {
        if (t->e[i].addr == 0) {
            t->e[i] = *e;
            return;
        }
    }
}

/* Under the lock, outside a write section: the new table is filled before
 * readers can see it, and the old one stays mapped for those still in it. */
static int grow(shard *s)
{
    table *old = atomic_load_explicit(&s->tab, memory_order_relaxed);
    uint32_t ocap = old ? old->cap : 0;
    uint32_t ncap = ocap ? ocap * 2 : SHARD_MIN;
    if (ncap > shard_max) return HS_ENOSPC;
    table *nt = hs_mem_map(table_bytes(ncap));
    if (!nt) return HS_ENOMEM;
    nt->cap = ncap;
    uint32_t n = 0;
    for (uint32_t i = 0; i < ocap; i++)
        if (old->e[i].addr) {
            put(nt, &old->e[i]);
            n++;
        }
    assert(n == s->count);
    (void)n;
    nt->retired = old;
    atomic_store_explicit(&s->tab, nt, memory_order_release);
    return 0;
}

int hs__liveset_insert(uintptr_t addr, uint64_t size, uint64_t stack_id)
{
    assert(addr != 0);
    uint32_t fi = hs__filter_index(addr);
    shard *s = &shards[fi % NSHARDS];
    int err = 0;
    hs_lock_acquire(&s->lock);
    table *t = atomic_load_explicit(&s->tab, memory_order_relaxed);
    if ((!t || (uint64_t)(s->count + 1) * 2 > t->cap) && (err = grow(s))) goto out;
    t = atomic_load_explicit(&s->tab, memory_order_relaxed);
    uint32_t m = t->cap - 1;
    write_begin(s);
    for (uint32_t i = home(addr, m);; i = (i + 1) & m) {
        if (t->e[i].addr == addr) { /* stale entry: its free was never seen */
            t->e[i].size = size;
            t->e[i].stack_id = stack_id;
            break;
        }
        if (t->e[i].addr == 0) {
            slot_set(&t->e[i], &(hs_live){addr, size, stack_id});
            s->count++;
            filter_inc(fi);
            break;
        }
    }
    write_end(s);
out:
    assert(err || (s->tab && (uint64_t)s->count * 2 <= s->tab->cap));
    assert(err || atomic_load_explicit(&hs__filter[fi], memory_order_relaxed) != 0);
    hs_lock_release(&s->lock);
    return err;
}

int hs__liveset_has(uintptr_t addr)
{
    shard *s = &shards[hs__filter_index(addr) % NSHARDS];
    for (int k = 0; k < HAS_TRIES; k++) {
        uint32_t q = atomic_load_explicit(&s->seq, memory_order_acquire);
        if (q & 1) return -1; /* being changed, maybe by the thread we interrupted */
        const table *t = atomic_load_explicit(&s->tab, memory_order_acquire);
        int found = 0;
        if (t) {
            /* At most cap probes: a torn view of a table being changed
             * (which the check below then discards) must still end. */
            uint32_t m = t->cap - 1, i = home(addr, m);
            for (uint32_t n = 0; n <= m; n++, i = (i + 1) & m) {
                uintptr_t a = key_of(&t->e[i]);
                if (a == addr) {
                    found = 1;
                    break;
                }
                if (a == 0) break;
            }
        }
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&s->seq, memory_order_relaxed) == q) return found;
    }
    return -1;
}

int hs__liveset_remove(uintptr_t addr, hs_live *out, int try_only)
{
    uint32_t fi = hs__filter_index(addr);
    shard *s = &shards[fi % NSHARDS];
    if (try_only) {
        if (!hs_lock_try(&s->lock)) return HS_EBUSY;
    } else {
        hs_lock_acquire(&s->lock);
    }
    int found = 0;
    table *t = atomic_load_explicit(&s->tab, memory_order_relaxed);
    if (!t) goto out;
    uint32_t m = t->cap - 1;
    uint32_t i = home(addr, m);
    for (;; i = (i + 1) & m) {
        if (t->e[i].addr == 0) goto out;
        if (t->e[i].addr == addr) break;
    }
    *out = t->e[i];
    found = 1;
    assert(s->count > 0 && atomic_load_explicit(&hs__filter[fi], memory_order_relaxed) != 0);
    write_begin(s);
    filter_dec(fi);
    s->count--;
    /* Backward-shift deletion: pull later members of the probe run into the
     * hole so that lookups never need tombstones. */
    uint64_t last_g = ~(uint64_t)0;
    uint32_t last_base = 0;
    for (uint32_t j = (i + 1) & m;; j = (j + 1) & m) {
        uintptr_t a = t->e[j].addr;
        if (a == 0) break;
        /* home(a, m), the granule's hash kept while the run stays in one
         * granule (neighbouring slots mostly hold neighbouring blocks). */
        uint64_t g = granule_of(a);
        if (g != last_g) {
            last_g = g;
            last_base = granule_base(g);
        }
        uint32_t h = home_in(last_base, a, m);
        assert(h == home(a, m));
        /* Move j into i if home is not cyclically in (i, j]. */
        int in_range = (i <= j) ? (h > i && h <= j) : (h > i || h <= j);
        if (!in_range) {
            slot_set(&t->e[i], &t->e[j]);
            i = j;
        }
    }
    __atomic_store_n(&t->e[i].addr, 0, __ATOMIC_RELAXED);
    write_end(s);
out:
    hs_lock_release(&s->lock);
    return found;
}

void hs__liveset_prefetch(uintptr_t addr)
{
    const shard *s = &shards[hs__filter_index(addr) % NSHARDS];
    const table *t = atomic_load_explicit(&s->tab, memory_order_relaxed);
    if (t) __builtin_prefetch(&t->e[home(addr, t->cap - 1)], 1);
}

void hs__filter_mark(uintptr_t addr)
{
    uint32_t fi = hs__filter_index(addr);
    shard *s = &shards[fi % NSHARDS];
    hs_lock_acquire(&s->lock);
    filter_inc(fi);
    hs_lock_release(&s->lock);
}

void hs__liveset_reset(void)
{
    for (int i = 0; i < NSHARDS; i++) {
        shard *s = &shards[i];
        table *t = atomic_load_explicit(&s->tab, memory_order_relaxed);
        while (t) {
            table *older = t->retired;
            hs_mem_unmap(t, table_bytes(t->cap));
            t = older;
        }
        atomic_store(&s->tab, NULL);
        s->count = 0;
        atomic_store(&s->seq, 0);
        atomic_store(&s->lock.v, 0);
    }
    /* Zero pages again rather than a memset, which in a fork child would
     * copy every page of the array (512 KiB) where the parent wrote a few. */
    if (madvise((void *)hs__filter, sizeof hs__filter, MADV_DONTNEED) != 0)
        memset((void *)hs__filter, 0, sizeof hs__filter);
    null_mark();
}

uint64_t hs__liveset_count(void)
{
    uint64_t n = 0;
    for (int i = 0; i < NSHARDS; i++) n += __atomic_load_n(&shards[i].count, __ATOMIC_RELAXED);
    return n;
}

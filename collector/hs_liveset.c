/* hs_liveset: counting filter plus sharded open-addressing table (see hs_liveset.h). */
#include "hs_liveset.h"

#include <assert.h>
#include <string.h>

#include "hs_error.h"
#include "hs_mem.h"

#define NSHARDS   64
#define SHARD_MIN 256

_Atomic uint8_t hs__filter[1u << HS_FILTER_BITS];

typedef struct shard {
    hs_lock lock;
    uint32_t count;
    uint32_t cap; /* power of two, or 0 before the first insert */
    hs_live *tab;
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

void hs__liveset_init(uint64_t max_entries)
{
    uint64_t per = max_entries / NSHARDS;
    uint64_t cap = SHARD_MIN;
    while (cap < per) cap *= 2;
    shard_max = cap;
    assert(shard_max >= SHARD_MIN && !(shard_max & (shard_max - 1)));
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

/* Inserts without checking capacity; the table has a free slot. */
static void put(shard *s, const hs_live *e)
{
    assert(s->count < s->cap && e->addr);
    uint32_t m = s->cap - 1;
    for (uint32_t i = (uint32_t)mix(e->addr) & m;; i = (i + 1) & m) {
        if (s->tab[i].addr == 0) {
            s->tab[i] = *e;
            s->count++;
            return;
        }
    }
}

static int grow(shard *s)
{
    uint32_t ncap = s->cap ? s->cap * 2 : SHARD_MIN;
    if (ncap > shard_max) return HS_ENOSPC;
    hs_live *nt = hs_mem_map((size_t)ncap * sizeof(hs_live));
    if (!nt) return HS_ENOMEM;
    hs_live *old = s->tab;
    uint32_t ocap = s->cap;
    s->tab = nt;
    s->cap = ncap;
    uint32_t ocount = s->count;
    s->count = 0;
    for (uint32_t i = 0; i < ocap; i++)
        if (old[i].addr) put(s, &old[i]);
    assert(s->count == ocount);
    (void)ocount;
    hs_mem_unmap(old, (size_t)ocap * sizeof(hs_live));
    return 0;
}

int hs__liveset_insert(uintptr_t addr, uint64_t size, uint64_t stack_id)
{
    assert(addr != 0);
    uint32_t fi = hs__filter_index(addr);
    shard *s = &shards[fi % NSHARDS];
    int err = 0;
    hs_lock_acquire(&s->lock);
    if ((uint64_t)(s->count + 1) * 4 > (uint64_t)s->cap * 3 && (err = grow(s))) goto out;
    uint32_t m = s->cap - 1;
    for (uint32_t i = (uint32_t)mix(addr) & m;; i = (i + 1) & m) {
        if (s->tab[i].addr == addr) { /* stale entry: its free was never seen */
            s->tab[i].size = size;
            s->tab[i].stack_id = stack_id;
            goto out;
        }
        if (s->tab[i].addr == 0) {
            s->tab[i] = (hs_live){addr, size, stack_id};
            s->count++;
            filter_inc(fi);
            goto out;
        }
    }
out:
    assert(err || (s->cap && (uint64_t)s->count * 4 <= (uint64_t)s->cap * 3));
    assert(err || atomic_load_explicit(&hs__filter[fi], memory_order_relaxed) != 0);
    hs_lock_release(&s->lock);
    return err;
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
    if (!s->cap) goto out;
    uint32_t m = s->cap - 1;
    uint32_t i = (uint32_t)mix(addr) & m;
    for (;; i = (i + 1) & m) {
        if (s->tab[i].addr == 0) goto out;
        if (s->tab[i].addr == addr) break;
    }
    *out = s->tab[i];
    found = 1;
    assert(s->count > 0 && atomic_load_explicit(&hs__filter[fi], memory_order_relaxed) != 0);
    filter_dec(fi);
    s->count--;
    /* Backward-shift deletion: pull later members of the probe run into the
     * hole so that lookups never need tombstones. */
    for (uint32_t j = (i + 1) & m;; j = (j + 1) & m) {
        if (s->tab[j].addr == 0) break;
        uint32_t home = (uint32_t)mix(s->tab[j].addr) & m;
        /* Move j into i if home is not cyclically in (i, j]. */
        int in_range = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
        if (!in_range) {
            s->tab[i] = s->tab[j];
            i = j;
        }
    }
    s->tab[i].addr = 0;
out:
    hs_lock_release(&s->lock);
    return found;
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
        hs_mem_unmap(s->tab, (size_t)s->cap * sizeof(hs_live));
        s->tab = NULL;
        s->cap = s->count = 0;
        atomic_store(&s->lock.v, 0);
    }
    memset((void *)hs__filter, 0, sizeof hs__filter);
}

uint64_t hs__liveset_count(void)
{
    uint64_t n = 0;
    for (int i = 0; i < NSHARDS; i++) n += __atomic_load_n(&shards[i].count, __ATOMIC_RELAXED);
    return n;
}

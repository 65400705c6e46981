/* hs_liveset: the set of sampled blocks that are still live.
 *
 * free() must tell a sampled block from an unsampled one in a few nanoseconds
 * whatever the number of live samples. A fixed array of 2^17 one-byte
 * counters (a counting filter indexed by the address's page) answers
 * "certainly not sampled" with one load and no lock: a zero counter means no
 * sampled block starts in that page. Only when the counter is non-zero does free
 * take the slow path into the table: 64 shards, each an open-addressing
 * table with linear probing and backward-shift deletion under its own lock,
 * growing by doubling up to HEAPSTORE_LIVE_MAX entries in all. A counter and
 * the shard that owns its index are updated under the same shard lock, so the
 * filter never under-counts; a counter that reaches 255 stays there (the
 * block then simply takes the slow path). Memory comes from hs_mem.
 *
 * Ordering: a block is inserted before malloc returns it and removed before
 * the real free runs, so an address reused by the allocator can never be
 * mistaken for the block that held it before.
 *
 * Invariants (asserted in debug builds, never in hs__liveset_maybe): address
 * 0 is never a key (it marks an empty slot); a shard's table is a power of
 * two at most 3/4 full, so every probe run ends at an empty slot; every live
 * entry's filter counter is non-zero.
 */
#ifndef HS_LIVESET_H
#define HS_LIVESET_H

#include <stdatomic.h>
#include <stdint.h>

#define HS_FILTER_BITS  17
#define HS_FILTER_SHIFT 12

extern _Atomic uint8_t hs__filter[1u << HS_FILTER_BITS];

/* One counter per 4 KiB page of address (modulo 512 MiB), not a hash of the
 * block's address: blocks freed near each other read the same cache line,
 * where a hashed index made nearly every free of a program that touches much
 * memory a cache miss (measured: most of the collector's own time on the
 * benchmark). The price is that a free on the same page as a live sampled
 * block takes the slow path and finds nothing; at the default rate few pages
 * hold a sampled block. */
static inline uint32_t hs__filter_index(uintptr_t a)
{
    return (uint32_t)(a >> HS_FILTER_SHIFT) & ((1u << HS_FILTER_BITS) - 1);
}

/* 0: p is certainly not a sampled block (nor a bootstrap block). */
static inline int hs__liveset_maybe(const void *p)
{
    return atomic_load_explicit(&hs__filter[hs__filter_index((uintptr_t)p)],
                                memory_order_relaxed) != 0;
}

typedef struct hs_live {
    uintptr_t addr;
    uint64_t size;
    uint64_t stack_id;
} hs_live;

void hs__liveset_init(uint64_t max_entries);
/* 0, or HS_ENOSPC when the set is full (the block is then not tracked). */
int hs__liveset_insert(uintptr_t addr, uint64_t size, uint64_t stack_id);
/* 1 and *out filled if addr was live (it is removed), 0 if not, HS_EBUSY when
 * try_only is set and the shard is locked (a signal handler that interrupted
 * the lock holder). */
int hs__liveset_remove(uintptr_t addr, hs_live *out, int try_only);
/* Marks a bootstrap block so that its free takes the slow path. */
void hs__filter_mark(uintptr_t addr);
/* In a fork child: forget every entry (the child is a new run). The caller
 * re-marks bootstrap blocks afterwards. */
void hs__liveset_reset(void);
uint64_t hs__liveset_count(void);

#endif

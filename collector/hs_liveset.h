/* hs_liveset: the set of sampled blocks that are still live.
 *
 * free() must tell a sampled block from an unsampled one in a few nanoseconds
 * whatever the number of live samples, without a lock shared by threads. Two
 * levels answer it:
 *
 * 1. A fixed array of 2^19 one-byte counters (a counting filter indexed by
 *    the address's 1 KiB granule) answers "certainly not sampled" with one
 *    load and a branch: a zero counter means no sampled block starts in that
 *    granule. Nearly every free of an unsampled block stops here.
 * 2. When the counter is non-zero (the block shares its granule with a
 *    sampled one), hs__liveset_has looks the address up in the table with
 *    plain loads under the shard's sequence counter, writing nothing shared:
 *    only a block that is really in the set goes on to the shard's lock.
 *
 * The table: 64 shards, each an open-addressing table with linear probing
 * and backward-shift deletion under its own lock, growing by doubling up to
 * HEAPSTORE_LIVE_MAX entries in all. Every change to a shard's table is made
 * with its sequence counter odd (a seqlock), so a reader that saw the same
 * even value before and after its probe saw a table no writer touched. A
 * table a shard outgrew is kept until the set is reset (a reader may still
 * be probing it); the tables only double, so that costs at most the size of
 * the current ones. A counter and the shard that owns its index are updated
 * under the same shard lock, so the filter never under-counts; a counter
 * that reaches 255 stays there (the block then simply takes level 2).
 * Memory comes from hs_mem.
 *
 * Ordering: a block is inserted before malloc returns it and removed before
 * the real free runs, so an address reused by the allocator can never be
 * mistaken for the block that held it before; and the program's own
 * ordering of a malloc before the free of its block makes the insert visible
 * to the thread that frees it.
 *
 * Invariants (asserted in debug builds, never in hs__liveset_maybe): address
 * 0 is never a key (it marks an empty slot); a shard's table is a power of
 * two at most half full, so every probe run ends at an empty slot; every live
 * entry's filter counter is non-zero; a shard's sequence counter is odd only
 * while its lock holder changes the table.
 */
#ifndef HS_LIVESET_H
#define HS_LIVESET_H

#include <stdatomic.h>
#include <stdint.h>

#define HS_FILTER_BITS  19
#define HS_FILTER_SHIFT 10

extern _Atomic uint8_t hs__filter[1u << HS_FILTER_BITS];

/* One counter per 1 KiB granule of address (modulo 512 MiB), not a hash of
 * the block's address: blocks freed near each other read the same cache
 * line, where a hashed index made nearly every free of a program that
 * touches much memory a cache miss (measured: most of the collector's own
 * time on the benchmark). The price is that a free in the same granule as a
 * live sampled block goes on to hs__liveset_has and finds nothing there. The
 * array is 512 KiB of zero pages until samples write to it: each sampled
 * block makes at most one 4 KiB page of it resident. */
static inline uint32_t hs__filter_index(uintptr_t a)
{
    return (uint32_t)(a >> HS_FILTER_SHIFT) & ((1u << HS_FILTER_BITS) - 1);
}

/* 0: p is certainly not a sampled block (nor a bootstrap block, nor NULL
 * once hs__liveset_init has run). */
static inline int hs__liveset_maybe(const void *p)
{
#if defined(__x86_64__) && defined(__GNUC__)
    /* One compare of the counter in memory with 0 and a branch (an atomic
     * load takes a load, then a test). A byte load is atomic on x86-64, as
     * the relaxed load it stands for. */
    __asm__ goto("cmpb $0, %0\n\tjne %l1"
                 :
                 : "m"(hs__filter[hs__filter_index((uintptr_t)p)])
                 :
                 : maybe);
    return 0;
maybe:
    return 1;
#else
    return atomic_load_explicit(&hs__filter[hs__filter_index((uintptr_t)p)],
                                memory_order_relaxed) != 0;
#endif
}

typedef struct hs_live {
    uintptr_t addr;
    uint64_t size;
    uint64_t stack_id;
} hs_live;

void hs__liveset_init(uint64_t max_entries);
/* 0, or HS_ENOSPC when the set is full (the block is then not tracked). */
int hs__liveset_insert(uintptr_t addr, uint64_t size, uint64_t stack_id);
/* Without taking a lock or writing anything shared: 0 if addr is certainly
 * not in the set, 1 if it is (as of some moment during the call), -1 when
 * the shard is being changed (its lock holder may be the thread this call
 * interrupted): the caller then asks hs__liveset_remove, which knows. */
int hs__liveset_has(uintptr_t addr);
/* 1 and *out filled if addr was live (it is removed), 0 if not, HS_EBUSY when
 * try_only is set and the shard is locked (a signal handler that interrupted
 * the lock holder). */
int hs__liveset_remove(uintptr_t addr, hs_live *out, int try_only);
/* Starts loading the table slot where addr's entry would go, without
 * waiting for it and without a lock (a hint: a table replaced meanwhile only
 * makes it useless). With large sets that slot is a cache miss; a caller
 * with other work before its insert (unwinding the stack) hides it. */
void hs__liveset_prefetch(uintptr_t addr);
/* Marks a bootstrap block so that its free takes the slow path. */
void hs__filter_mark(uintptr_t addr);
/* In a fork child: forget every entry (the child is a new run). The caller
 * re-marks bootstrap blocks afterwards. */
void hs__liveset_reset(void);
uint64_t hs__liveset_count(void);

#endif

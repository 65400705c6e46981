/* hs_mem: the collector's own memory, and its small locks.
 *
 * Everything the collector keeps for itself comes from mmap through
 * hs_mem_map, never from malloc, so it cannot recurse into the hooks and its
 * total is always known: hs_mem_peak() is what BYE reports as the collector's
 * peak memory. hs_arena is a bump allocator over mapped chunks for records
 * that live as long as the run (stack records, symbol strings); it has no
 * lock, its owner serialises access. hs_lock is a spin-then-yield lock that
 * never allocates and that a fork child may simply reset to unlocked (the
 * child re-creates every structure it guards, see hs_hooks.c).
 */
#ifndef HS_MEM_H
#define HS_MEM_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define HS_LIKELY(x)   __builtin_expect(!!(x), 1)
#define HS_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define HS_HIDDEN      __attribute__((visibility("hidden")))

/* Zeroed pages, or NULL when the kernel refuses. len is rounded up to pages. */
void *hs_mem_map(size_t len);
void hs_mem_unmap(void *p, size_t len);
uint64_t hs_mem_current(void);
uint64_t hs_mem_peak(void);

typedef struct hs_arena {
    uint8_t *cur, *end;
    size_t chunk; /* size of the next chunk to map */
} hs_arena;

/* n bytes aligned to 16 from the arena, or NULL when mmap fails. */
void *hs_arena_alloc(hs_arena *a, size_t n);

typedef struct hs_lock {
    atomic_int v;
} hs_lock;

void hs_lock_acquire(hs_lock *l);
int hs_lock_try(hs_lock *l); /* 1 if taken */
static inline void hs_lock_release(hs_lock *l)
{
    atomic_store_explicit(&l->v, 0, memory_order_release);
}

/* sched_yield, declared here so that headers need not pull sched.h. */
void hs__yield(void);

/* Monotonic nanoseconds (vDSO: no system call). */
uint64_t hs_now_ns(void);

#endif

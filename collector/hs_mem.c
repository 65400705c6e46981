/* hs_mem: mmap-backed memory with accounting, the arena and the lock. */
#include "hs_mem.h"

#include <sched.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static atomic_uint_fast64_t mem_current, mem_peak;

static size_t page_round(size_t len)
{
    return (len + 4095) & ~(size_t)4095;
}

void *hs_mem_map(size_t len)
{
    len = page_round(len);
    void *p =
        mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return NULL;
    uint64_t cur = atomic_fetch_add_explicit(&mem_current, len, memory_order_relaxed) + len;
    uint64_t peak = atomic_load_explicit(&mem_peak, memory_order_relaxed);
    while (cur > peak && !atomic_compare_exchange_weak_explicit(
                             &mem_peak, &peak, cur, memory_order_relaxed, memory_order_relaxed)) {
    }
    return p;
}

void hs_mem_unmap(void *p, size_t len)
{
    if (!p) return;
    len = page_round(len);
    munmap(p, len);
    atomic_fetch_sub_explicit(&mem_current, len, memory_order_relaxed);
}

uint64_t hs_mem_current(void)
{
    return atomic_load_explicit(&mem_current, memory_order_relaxed);
}

uint64_t hs_mem_peak(void)
{
    return atomic_load_explicit(&mem_peak, memory_order_relaxed);
}

void *hs_arena_alloc(hs_arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if ((size_t)(a->end - a->cur) < n) {
        size_t c = a->chunk ? a->chunk : 64 * 1024;
        while (c < n) c *= 2;
        uint8_t *p = hs_mem_map(c);
        if (!p) return NULL;
        a->cur = p;
        a->end = p + c;
        if (a->chunk < (1u << 20)) a->chunk = c * 2;
    }
    void *r = a->cur;
    a->cur += n;
    return r;
}

static inline void hs_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

void hs_lock_acquire(hs_lock *l)
{
    for (unsigned spins = 0;; spins++) {
        int z = 0;
        if (atomic_load_explicit(&l->v, memory_order_relaxed) == 0 &&
            atomic_compare_exchange_weak_explicit(&l->v, &z, 1, memory_order_acquire,
                                                  memory_order_relaxed))
            return;
        if (spins > 64)
            sched_yield();
        else
            hs_cpu_relax();
    }
}

int hs_lock_try(hs_lock *l)
{
    int z = 0;
    return atomic_compare_exchange_strong_explicit(&l->v, &z, 1, memory_order_acquire,
                                                   memory_order_relaxed);
}

void hs__yield(void)
{
    sched_yield();
}

uint64_t hs_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

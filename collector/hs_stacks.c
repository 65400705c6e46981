/* hs_stacks: unwinding and the stack intern table (see hs_stacks.h). */
#include "hs_stacks.h"

#include <dlfcn.h>
#define UNW_LOCAL_ONLY
#include <libunwind.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "hs_collector.h"
#include "hs_mem.h"
#include "hs_python.h"
#include "hs_thread.h"
#include "hs_unwind.h"

typedef struct table {
    uint64_t mask;
    _Atomic(hs_stack_rec *) slot[];
} table;

static uintptr_t lo, hi;
static _Atomic(table *) cur_table;
static hs_lock lock;
static uint64_t count, next_id = 1, mem_used;
static hs_arena arena;
static _Atomic(hs_stack_rec *) new_list;

/* libunwind is not a dependency of libheapstore.so, and most processes
 * never need it: our own unwinder walks every stack of ordinary compiled
 * code. Loading it (and the liblzma it needs) cost every process about
 * 120,000 instructions and 15 page faults, a fifth of the collector's cost
 * per process. So it is loaded at the first stack our unwinder cannot walk,
 * by the sender thread (never inside an allocation hook: dlopen takes the
 * loader's lock and allocates), while the sampling thread waits for it, up
 * to HS_UNWINDER_WAIT_NS (hs__stacks_serve_unwinder); with HEAPSTORE_UNWIND=libunwind, from the
 * constructor. unw_bt stays NULL until then, or for good when it cannot be
 * loaded: the stacks our own unwinder cannot walk are then dropped
 * (HS_DROP_UNWIND_FAILED), as are those of a wait that timed out (the
 * sampling thread held the loader's lock, inside the program's dlopen) and
 * of samples taken before the sender started. Only the first wait may run
 * out: the sender's dlopen can itself need a lock that the waiting thread
 * holds (a signal handler that allocates, interrupting the allocator), and
 * with a wait at every such sample, threads sampling from handlers every
 * millisecond stalled for seconds. After one wait has run out, samples that
 * need libunwind are dropped at once until it is loaded. */
typedef int (*hs_backtrace_fn)(void **, int);
typedef int (*hs_policy_fn)(unw_addr_space_t, unw_caching_policy_t);
static _Atomic(hs_backtrace_fn) unw_bt;
/* Per-thread caches are set at the first use (setting them clears a large
 * global cache: 35,000 instructions that most processes never need).
 * policy_state: 0 not yet, 1 being set, 2 set. */
static hs_policy_fn unw_policy;
static unw_addr_space_t *unw_as;
static atomic_int policy_state;
/* LOAD_NONE until a stack needs libunwind, LOAD_WANTED until the sender has
 * tried, then LOAD_DONE (unw_bt set, or NULL for good). Only grows. */
enum { LOAD_NONE, LOAD_WANTED, LOAD_DONE };
static atomic_int load_state;
/* A wait for the load ran out (want_unwinder): no thread waits again. */
static atomic_int wait_expired;

#define HS_UNWINDER_WAIT_NS (200 * 1000000ull)

static hs_backtrace_fn libunwind_ready(void)
{
    hs_backtrace_fn bt = atomic_load_explicit(&unw_bt, memory_order_acquire);
    if (!bt || HS_LIKELY(atomic_load_explicit(&policy_state, memory_order_acquire) == 2)) return bt;
    int z = 0;
    if (atomic_compare_exchange_strong(&policy_state, &z, 1)) {
        if (unw_policy && unw_as) unw_policy(*unw_as, UNW_CACHE_PER_THREAD);
        atomic_store_explicit(&policy_state, 2, memory_order_release);
    }
    while (atomic_load_explicit(&policy_state, memory_order_acquire) != 2) hs__yield();
    return bt;
}

#define HS_STR2(x) #x
#define HS_STR(x)  HS_STR2(x) /* the name a libunwind.h macro stands for */

static void load_unwinder(void)
{
    void *h = dlopen(HS_LIBUNWIND_SONAME, RTLD_LAZY | RTLD_LOCAL);
    if (h) {
        unw_policy = (hs_policy_fn)dlsym(h, HS_STR(unw_set_caching_policy));
        unw_as = (unw_addr_space_t *)dlsym(h, HS_STR(unw_local_addr_space));
        atomic_store_explicit(&unw_bt, (hs_backtrace_fn)dlsym(h, HS_STR(unw_backtrace)),
                              memory_order_release);
    }
    atomic_store_explicit(&load_state, LOAD_DONE, memory_order_release);
}

void hs__stacks_load_unwinder(void)
{
    if (hs__cfg.unwind == HS_UNWIND_LIBUNWIND && atomic_load(&load_state) != LOAD_DONE)
        load_unwinder();
}

void hs__stacks_serve_unwinder(void)
{
    if (HS_UNLIKELY(atomic_load_explicit(&load_state, memory_order_acquire) == LOAD_WANTED))
        load_unwinder();
}

/* In the sampling thread, whose stack our unwinder could not walk: asks the
 * sender for libunwind and waits for it (bounded: see above). */
static hs_backtrace_fn want_unwinder(void)
{
    int st = atomic_load_explicit(&load_state, memory_order_acquire);
    if (st == LOAD_NONE &&
        atomic_compare_exchange_strong(&load_state, &(int){LOAD_NONE}, LOAD_WANTED)) {
        hs__consumer_wake(); /* a round: the sender serves it first */
        hs__consumer_kick();
    }
    uint64_t until = hs_now_ns() + HS_UNWINDER_WAIT_NS;
    while (atomic_load_explicit(&load_state, memory_order_acquire) != LOAD_DONE) {
        if (!hs__consumer_alive() || atomic_load_explicit(&wait_expired, memory_order_relaxed))
            return NULL;
        if (hs_now_ns() > until) {
            atomic_store_explicit(&wait_expired, 1, memory_order_relaxed);
            return NULL;
        }
        nanosleep(&(struct timespec){0, 20000}, NULL);
    }
    return libunwind_ready();
}

void hs__stacks_init(uintptr_t self_lo, uintptr_t self_hi)
{
    lo = self_lo;
    hi = self_hi;
}

uint32_t hs__stack_capture(void **scratch, uint32_t scratch_cap, uint64_t *pcs, uint32_t pcs_cap,
                           int *truncated, hs_stack_bounds *bounds)
{
    *truncated = 0;
    uint32_t max = hs__cfg.depth < pcs_cap ? hs__cfg.depth : pcs_cap;
    /* With an interpreter loaded, every evaluation frame must be seen to
     * place the Python frames: unwind as far as the buffer goes. */
    int py = hs_py_present();
    uint32_t want = py || max + 9 > scratch_cap ? scratch_cap : max + 9;
    int n = -1;
    int lib = hs__cfg.unwind == HS_UNWIND_LIBUNWIND && atomic_load(&unw_bt);
    if (!lib) n = hs__unwind_fast(scratch, (int)want, bounds);
    if (n < 0 && hs__cfg.unwind != HS_UNWIND_OWN) {
        hs_backtrace_fn bt = libunwind_ready();
        if (!bt && atomic_load_explicit(&load_state, memory_order_relaxed) != LOAD_DONE)
            bt = want_unwinder();
        if (bt) n = bt(scratch, (int)want);
    }
    if (n <= 0) return 0;
    int i = 0;
    while (i < n && (uintptr_t)scratch[i] >= lo && (uintptr_t)scratch[i] < hi) i++;
    int end = i;
    while (end < n && scratch[end]) end++;
    /* A full scratch buffer may hide more frames. */
    int full = (uint32_t)n == want && end == n;
    /* Our frames further out: a Python allocator's wrapper (hs_pymem.c)
     * under which pymalloc called malloc. */
    int w = i;
    for (int k = i; k < end; k++)
        if ((uintptr_t)scratch[k] < lo || (uintptr_t)scratch[k] >= hi) scratch[w++] = scratch[k];
    end = w;
    if (py)
        return hs_py_merge(pcs, pcs_cap, scratch + i, (uint32_t)(end - i), max, full, truncated);
    uint32_t d = 0;
    for (; i < end && d < max; i++) pcs[d++] = (uint64_t)(uintptr_t)scratch[i];
    if (i < end || full) *truncated = 1;
    return d;
}

static uint64_t hash_pcs(const uint64_t *pcs, uint32_t depth)
{
    uint64_t h = 0xcbf29ce484222325ull ^ depth;
    for (uint32_t i = 0; i < depth; i++) {
        h ^= pcs[i];
        h *= 0x100000001b3ull;
        h ^= h >> 29;
    }
    return h ? h : 1;
}

static hs_stack_rec *find(table *tb, uint64_t h, const uint64_t *pcs, uint32_t depth,
                          uint64_t *slot_out)
{
    for (uint64_t i = h & tb->mask;; i = (i + 1) & tb->mask) {
        hs_stack_rec *r = atomic_load_explicit(&tb->slot[i], memory_order_acquire);
        if (!r) {
            if (slot_out) *slot_out = i;
            return NULL;
        }
        if (r->hash == h && r->depth == depth && !memcmp(r->pcs, pcs, depth * sizeof *pcs))
            return r;
    }
}

static table *table_new(uint64_t cap)
{
    table *t = hs_mem_map(sizeof(table) + cap * sizeof(void *));
    if (t) t->mask = cap - 1;
    return t;
}

/* Under the lock: double the table. The old one stays mapped, since readers
 * may still be probing it (it is at most as big as all later ones together). */
static table *grow(table *old)
{
    uint64_t cap = old ? (old->mask + 1) * 2 : 4096;
    table *t = table_new(cap);
    if (!t) return NULL;
    if (old) {
        for (uint64_t i = 0; i <= old->mask; i++) {
            hs_stack_rec *r = atomic_load_explicit(&old->slot[i], memory_order_relaxed);
            if (!r) continue;
            uint64_t j = r->hash & t->mask;
            while (atomic_load_explicit(&t->slot[j], memory_order_relaxed)) j = (j + 1) & t->mask;
            atomic_store_explicit(&t->slot[j], r, memory_order_relaxed);
        }
    }
    atomic_store_explicit(&cur_table, t, memory_order_release);
    return t;
}

uint64_t hs__stack_intern(const uint64_t *pcs, uint32_t depth)
{
    uint64_t h = hash_pcs(pcs, depth);
    table *tb = atomic_load_explicit(&cur_table, memory_order_acquire);
    if (tb) {
        hs_stack_rec *r = find(tb, h, pcs, depth, NULL);
        if (r) return r->id;
    }
    uint64_t id = 0;
    hs_lock_acquire(&lock);
    tb = atomic_load_explicit(&cur_table, memory_order_relaxed);
    if (!tb || (count + 1) * 4 > (tb->mask + 1) * 3) {
        table *g = grow(tb);
        if (!g) goto out;
        tb = g;
    }
    uint64_t slot;
    hs_stack_rec *r = find(tb, h, pcs, depth, &slot);
    if (r) {
        id = r->id;
        goto out;
    }
    size_t sz = sizeof(hs_stack_rec) + depth * sizeof(uint64_t);
    if (mem_used + sz > HS_STACKS_MEM_MAX) goto out;
    r = hs_arena_alloc(&arena, sz);
    if (!r) goto out;
    mem_used += sz;
    r->hash = h;
    r->depth = depth;
    r->id = next_id++;
    memcpy(r->pcs, pcs, depth * sizeof *pcs);
    /* A push the sender's exchange can race with, hence the CAS. */
    hs_stack_rec *old = atomic_load_explicit(&new_list, memory_order_relaxed);
    do {
        r->next_new = old;
    } while (!atomic_compare_exchange_weak_explicit(&new_list, &old, r, memory_order_release,
                                                    memory_order_relaxed));
    atomic_store_explicit(&tb->slot[slot], r, memory_order_release);
    count++;
    id = r->id;
out:
    hs_lock_release(&lock);
    return id;
}

hs_stack_rec *hs__stacks_take_new(void)
{
    hs_stack_rec *r = atomic_exchange_explicit(&new_list, NULL, memory_order_acquire);
    hs_stack_rec *rev = NULL;
    while (r) {
        hs_stack_rec *n = r->next_new;
        r->next_new = rev;
        rev = r;
        r = n;
    }
    return rev;
}

void hs__stacks_reset(void)
{
    /* The parent's records and tables stay mapped (copy-on-write, untouched);
     * the child starts a new id space. */
    atomic_store(&cur_table, NULL);
    atomic_store(&new_list, NULL);
    atomic_store(&lock.v, 0);
    memset(&arena, 0, sizeof arena);
    count = 0;
    next_id = 1;
    mem_used = 0;
    hs_py_fork_child();
}

/* hs_thread: per-thread state of the program's threads and the sampler.
 *
 * Each thread has an hs_tls in initial-exec TLS (no allocation, no lock to
 * reach it, safe in signal handlers). Its countdown is the number of bytes
 * left before the next sample: the unsampled path of every hook is one
 * subtraction and one branch on it. A countdown of 0 sends every call to the
 * slow path, which is how a new thread gets initialised and how re-entry is
 * kept out: while a thread runs collector code its guard is non-zero and its
 * countdown is parked at 0, so anything libunwind, libdw or a signal handler
 * allocates meanwhile is forwarded untouched.
 *
 * A thread that has taken a sample owns an hs_ring: a single-producer,
 * single-consumer ring of event records that the sender thread drains. Rings
 * live in a registry (a list under one lock taken only at thread start and
 * exit and by the sender); a ring whose thread has exited is drained and then
 * reused by the next new thread. Memory comes from hs_mem.
 *
 * Invariants (asserted in debug builds, never on the unsampled path): a
 * ring's owner never has more than its cap records unread (head - tail
 * <= cap) and the sender never reads past the owner's head; a ring
 * is handed to a new thread only once its old thread has exited and the
 * sender has read it empty; a thread attaches at most once; guard_leave
 * pairs with a guard_enter; the sampler's generator state is never 0 (a
 * xorshift stuck at 0 would sample at a fixed interval).
 *
 * Exact totals. Every block the real allocator hands out through the hooks,
 * and every free of one, is counted in the thread's hs_tls with the
 * allocator's own size of the block (hs_hooks.c reads it on both sides, so
 * they cancel): cumulative counts and bytes, and ex_pending, the net bytes
 * not yet added to the process's live figure. Only when ex_pending leaves
 * [-HS_EXACT_STEP, HS_EXACT_STEP] does the thread publish it (one atomic add
 * to a shared counter) and, when the figure reaches a new high, record the
 * high and its time under a small spin lock. So the live figure is the true
 * live heap within threads x HS_EXACT_STEP at every moment, and its highest
 * value is the true peak within the same bound, timed when the thread that
 * made it crossed the step. The sender reads the counts of every thread
 * through the ring registry. A thread whose counts nobody reads any more
 * (after its exit destructor, and the sender thread itself) is parked:
 * ex_pending far outside the range, so that each of its calls takes the
 * publishing path, which folds (exited thread) or forgets (sender) it.
 */
#ifndef HS_THREAD_H
#define HS_THREAD_H

#include <assert.h>
#include <stdatomic.h>
#include <stdint.h>

#include "hs_mem.h"
#include "hs_proto.h"
#include "hs_unwind.h"

#define HS_RING_CAP 2048 /* records a ring holds; a power of two */
/* ... when the interval is under HS_RING_DENSE_BELOW bytes: at every
 * allocation a std::map program fills 2048 records in about a millisecond,
 * and the doorbell it then rang twice a millisecond (a write to an eventfd
 * that wakes the sender) cost it 3.4% of its time. */
#define HS_RING_CAP_DENSE   16384
#define HS_RING_DENSE_BELOW 4096
#define HS_EXACT_STEP       ((int64_t)16 << 10) /* bytes a thread's net change may lag */

enum hs_thread_state {
    HS_T_NEW = 0,      /* not yet seen by a slow path */
    HS_T_READY = 1,    /* sampling */
    HS_T_INTERNAL = 2, /* the sender thread: never sampled */
    HS_T_DEAD = 3,     /* after our thread-exit destructor: forward only */
};

/* One event as the program's thread leaves it for the sender. */
typedef struct hs_rec {
    uint64_t t_ns;
    uint64_t head; /* stack_id << 1 | is_free */
    uint64_t size;
    uint64_t weight;
} hs_rec;

struct hs_tls;

typedef struct hs_ring {
    _Atomic uint64_t head; /* written by the owner */
    char pad1[56];
    _Atomic uint64_t tail; /* written by the sender */
    char pad2[56];
    struct hs_ring *next;                   /* registry link (registry lock) */
    _Atomic int live;                       /* 1 while its thread runs */
    struct hs_tls *owner;                   /* for the exact counts; NULL once the thread exited */
    uint64_t snap;                          /* the sender's snapshot of head (sender only) */
    _Atomic int busy;                       /* the owner is inside the loader's lock (unwinding) */
    int stuck;                              /* the owner gave up waiting for room (owner only) */
    uint64_t stuck_tail;                    /* ... when the sender had drained up to here */
    hs_stack_bounds stack;                  /* the owner's stack, for hs_unwind */
    void *scratch[HS_STACK_MAX_DEPTH + 16]; /* the owner's unwinding buffers */
    uint64_t pcs[HS_STACK_MAX_DEPTH];
    uint64_t cap; /* records in recs: the process's ring size, a power of two */
    hs_rec recs[];
} hs_ring;

typedef struct hs_tls {
    uint64_t countdown;
    uint32_t guard;
    uint32_t state; /* enum hs_thread_state */
    uint64_t saved_countdown;
    /* Bumped by every allocation slow path (hs_hooks.c): with countdown, it
     * tells the Python allocator's wrappers that a malloc hook counted the
     * block under them (hs_pymem.h). */
    uint32_t slow_seq;
    uint64_t rng;
    hs_ring *ring;
    int boot; /* this thread is resolving the real allocator */
    /* hs__event_now's last clock read, and the TSC when it was made. */
    uint64_t clock_ns, clock_tsc;
    /* The exact totals (see the opening comment). Owner counters: only the
     * owner writes them, with plain adds (one instruction, `add` to memory,
     * on the fast paths); others read them with hs__own_load. An aligned
     * 64-bit word is written whole, so a reader sees its value before or
     * after an add, never a mix (the same as relaxed atomics, which the
     * compiler would split into a load, an add and a store). */
    uint64_t ex_allocs, ex_frees, ex_alloc_bytes, ex_free_bytes;
    int64_t ex_pending; /* owner only */
} hs_tls;

extern __thread hs_tls hs__tls __attribute__((tls_model("initial-exec")));

static inline void hs__guard_enter(hs_tls *t)
{
    if (t->guard++ == 0) {
        t->saved_countdown = t->countdown;
        t->countdown = 0;
    }
}

static inline void hs__guard_leave(hs_tls *t)
{
    assert(t->guard > 0);
    if (--t->guard == 0) t->countdown = t->saved_countdown;
}

/* An owner counter of another thread (or its owner's, to move it). */
static inline uint64_t hs__own_load(const uint64_t *v)
{
    return __atomic_load_n(v, __ATOMIC_RELAXED);
}

static inline void hs__own_store(uint64_t *v, uint64_t x)
{
    __atomic_store_n(v, x, __ATOMIC_RELAXED);
}

/* ex_pending left [-HS_EXACT_STEP, HS_EXACT_STEP], or the thread is parked. */
void hs__exact_publish(hs_tls *t);

/* A block of size bytes (the allocator's) was handed out / is being freed.
 * Returns non-zero when the thread must now call hs__exact_publish (left to
 * the caller, so that a hook can keep its tail call to the real function):
 * the range check is one unsigned comparison. */
static inline int hs__exact_alloc(hs_tls *t, uint64_t size)
{
    t->ex_allocs += 1;
    t->ex_alloc_bytes += size;
    int64_t p = t->ex_pending + (int64_t)size;
    t->ex_pending = p;
    return HS_UNLIKELY((uint64_t)(p + HS_EXACT_STEP) > 2 * (uint64_t)HS_EXACT_STEP);
}

static inline int hs__exact_free(hs_tls *t, uint64_t size)
{
    t->ex_frees += 1;
    t->ex_free_bytes += size;
    int64_t p = t->ex_pending - (int64_t)size;
    t->ex_pending = p;
    return HS_UNLIKELY((uint64_t)(p + HS_EXACT_STEP) > 2 * (uint64_t)HS_EXACT_STEP);
}

/* How sizes are read: told by the hooks once they know the allocator (and
 * read by the sender), so that neither reaches into the other. */
enum hs_exact_how {
    HS_EXACT_OFF = 0,    /* not counted */
    HS_EXACT_GLIBC = 1,  /* glibc's chunk header */
    HS_EXACT_CALLED = 2, /* the allocator's malloc_usable_size */
};
void hs__exact_set_how(int how);
int hs__exact_how(void);
/* Adds HS_EXACT_F_* flags to every later observation (hs_pymem.c: small
 * objects seen that the totals leave out). */
void hs__exact_flag(unsigned f);
/* The HS_EXACT_F_* flags of an observation: the ones added, and
 * HS_EXACT_F_CALLED when sizes come from malloc_usable_size. */
unsigned hs__exact_flags(void);
/* The sender thread: its own allocations are not counted. */
void hs__exact_park(hs_tls *t);
/* Publishes what t holds back (the thread ending the run). */
void hs__exact_flush(hs_tls *t);
/* The sender's observation (times absolute, as hs_now_ns): the live figure,
 * the highest since the previous call (the window starts again at the live
 * figure), the run's peak, the counts of every thread, and the error bound
 * (threads that have counted so far x HS_EXACT_STEP). */
void hs__exact_read(hs_exact *out, uint64_t now);

/* The time of an event: CLOCK_MONOTONIC in ns, as hs_now_ns. A thread that
 * read the clock less than HS_CLOCK_REUSE TSC cycles ago (a microsecond or
 * two) reuses that reading: at every allocation the clock (a vDSO call that
 * reads the TSC and scales it, slower in a VM) cost ~4% of a C++ program's
 * run, and events are bucketed by the millisecond at best. Readings only
 * move forward, so a thread's events stay in order. */
#define HS_CLOCK_REUSE ((uint64_t)1 << 12)

static inline uint64_t hs__event_now(hs_tls *t)
{
#if defined(__x86_64__)
    uint64_t c = __builtin_ia32_rdtsc();
    if (c - t->clock_tsc < HS_CLOCK_REUSE) return t->clock_ns;
    uint64_t ns = hs_now_ns();
    if (ns > t->clock_ns) t->clock_ns = ns;
    t->clock_tsc = c;
    return t->clock_ns;
#else
    (void)t;
    return hs_now_ns();
#endif
}

/* fork() and the dynamic loader's lock. glibc does not reset the lock that
 * dl_iterate_phdr takes in a fork child, and unwinding takes it on every
 * sample (as does the sender when it looks for new objects): a fork while a
 * thread holds it would leave the child deadlocked. So collector code that
 * may take it marks itself busy, and the fork prepare handler raises
 * hs__fork_pending and waits until nobody is busy (a Dekker handshake: flag,
 * full fence, check). Code that finds a fork pending waits for it first.
 * Nothing may wait for the loader's own lock inside a busy region (dlopen,
 * dlsym, dladdr take it): a program thread holding it, inside a dlopen
 * constructor, may be the one waiting for the fork. */
extern _Atomic int hs__fork_pending;
extern _Atomic int hs__sender_busy;

static inline void hs__busy_enter(_Atomic int *flag)
{
    for (;;) {
        atomic_store_explicit(flag, 1, memory_order_relaxed);
        atomic_thread_fence(memory_order_seq_cst);
        if (HS_LIKELY(!atomic_load_explicit(&hs__fork_pending, memory_order_relaxed))) return;
        atomic_store_explicit(flag, 0, memory_order_release);
        while (atomic_load_explicit(&hs__fork_pending, memory_order_acquire)) hs__yield();
    }
}

static inline void hs__busy_leave(_Atomic int *flag)
{
    atomic_store_explicit(flag, 0, memory_order_release);
}

/* Prepare handler side: raise the flag, wait for every other busy thread.
 * Returns 1 when the calling thread's own flag is set: fork was called from
 * a signal handler that interrupted this thread's unwinding (see fork_child
 * in hs_hooks.c). */
int hs__fork_quiesce(void);
/* Parent after fork: let everyone go on. (The child resets its state.) */
void hs__fork_release(void);

/* Sampler settings; call once before any sampling. */
void hs__sampler_init(uint64_t mean, uint64_t seed);
/* Bytes until the next sample (0 at sample rate 1: every call samples). */
uint64_t hs__sampler_next(hs_tls *t);
/* Estimated bytes a sample of size bytes stands for. */
uint64_t hs__sampler_weight(uint64_t size);

/* Thread life. init creates the pthread key (call from the constructor) and
 * sets the records every ring holds (a power of two, from HS_RING_CAP up). */
int hs__threads_init(uint64_t ring_cap);
/* Gives the calling thread a ring; state becomes READY. Under guard. */
int hs__thread_attach(hs_tls *t);
/* Appends one record; waits a bounded time for room, else drops it and
 * returns HS_ENOSPC (counted by the caller). */
int hs__ring_push(hs_tls *t, const hs_rec *r);

/* The consumer's side: the sender thread, which calls down into the rings;
 * nothing here calls it.
 *
 * Draining. snapshot records every ring's head; then, under the registry
 * lock (held briefly), drain_begin and drain_next hand out each ring's
 * records up to that snapshot, one span at a time, and drain_end frees the
 * room of every span handed out. Taking the snapshot before reading the new
 * stacks guarantees every stack an event refers to has been seen. Rings of
 * exited threads become reusable once empty. Invariant: begin, next and end
 * are called by one thread, in that order, with no other drain between. */
typedef struct hs_ring_span {
    const hs_ring *ring;
    uint64_t tail, head; /* records [tail, head) */
} hs_ring_span;
void hs__rings_snapshot(void);
void hs__rings_drain_begin(void);
/* The next ring with records below its snapshot: 1 with *s, or 0 at the end.
 * The previous span's room is freed. */
int hs__rings_drain_next(hs_ring_span *s);
void hs__rings_drain_end(void);
static inline const hs_rec *hs__span_rec(const hs_ring_span *s, uint64_t i)
{
    assert(i - s->tail < s->head - s->tail);
    return &s->ring->recs[i & (s->ring->cap - 1)];
}

/* The doorbell. The consumer sleeps in hs__consumer_wait; a producer whose
 * ring passes half full, or is full, rings it with hs__consumer_wake (a
 * counted ring: one atomic add, then a system call only while the consumer
 * sleeps; once per cap / 2 records at most, off the sampled path's
 * common case). A full ring waits while the
 * consumer is alive and its heartbeat moves (hs__ring_push). The consumer
 * marks itself alive while it will drain, and beats as it makes progress.
 * Nothing here knows what the consumer does with the records. */
/* Before the consumer starts: its eventfd, made once. 0 or HS_EIO. */
int hs__consumer_open(void);
void hs__consumer_set_alive(int alive);
int hs__consumer_alive(void);
void hs__consumer_beat(void);
/* Producers: ask for a round. */
void hs__consumer_wake(void);
/* Wakes the consumer whether it sleeps or not (the end of the run). */
void hs__consumer_kick(void);
/* Rings so far (wake calls, counted): non-zero once a producer asked. */
uint64_t hs__consumer_rung(void);
/* 1 while the consumer sleeps in hs__consumer_wait. */
int hs__consumer_sleeping(void);
/* The consumer: sleeps until the bell, an event on extra (may be NULL: its
 * revents are set) or timeout_ms. 1 when the bell rang. */
struct pollfd;
int hs__consumer_wait(struct pollfd *extra, int timeout_ms);
/* Fork child: forget the other threads' rings and the parent's consumer
 * (its doorbell is closed: the child's sender opens its own); the caller's
 * thread starts afresh. */
void hs__threads_reset_child(hs_tls *self);
/* Fork child, from hs__threads_reset_child: counts start afresh; the live
 * figure stays (the child holds its parent's blocks) and is the peak so far. */
void hs__exact_reset_child(hs_tls *self, uint64_t now);

#endif

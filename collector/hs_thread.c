/* hs_thread: TLS, sampler draws, rings and their registry (see hs_thread.h). */
#include "hs_thread.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hs_error.h"
#include "hs_sender.h"

__thread hs_tls hs__tls __attribute__((tls_model("initial-exec")));

_Atomic int hs__fork_pending;
_Atomic int hs__sender_busy;

static uint64_t sample_mean = 524288;
static uint64_t seed_base;
static atomic_uint_fast64_t seed_seq;

static hs_lock reg_lock;
static hs_ring *reg_head;
static pthread_key_t exit_key;
static _Atomic uint64_t dead_n[HS_HIST_BUCKETS], dead_b[HS_HIST_BUCKETS];

void hs__sampler_init(uint64_t mean, uint64_t seed)
{
    sample_mean = mean ? mean : 1;
    seed_base = seed;
}

static uint64_t splitmix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static void seed_thread(hs_tls *t)
{
    uint64_t n = atomic_fetch_add(&seed_seq, 1) + 1;
    uint64_t s = seed_base;
    if (!s) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        s = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ ((uint64_t)(uintptr_t)t << 7) ^
            ((uint64_t)getpid() << 40);
    }
    t->rng = splitmix(s ^ splitmix(n));
    if (!t->rng) t->rng = 1;
}

uint64_t hs__sampler_next(hs_tls *t)
{
    if (sample_mean == 1) return 0;
    if (!t->rng) seed_thread(t);
    assert(t->rng != 0);
    /* xorshift64* */
    uint64_t x = t->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    t->rng = x;
    uint64_t r = x * 0x2545F4914F6CDD1Dull;
    double u = (double)((r >> 11) + 1) * 0x1.0p-53; /* (0, 1] */
    double v = -log(u) * (double)sample_mean;
    if (v > 9.0e18) v = 9.0e18;
    return (uint64_t)v + 1;
}

uint64_t hs__sampler_weight(uint64_t size)
{
    if (sample_mean == 1 || size == 0) return size;
    double m = (double)sample_mean;
    double p = -expm1(-(double)size / m); /* probability that a block of this size is sampled */
    assert(p > 0 && p <= 1);
    double w = (double)size / p;
    if (w > 1.8e19) return UINT64_MAX;
    uint64_t r = (uint64_t)(w + 0.5);
    return r < size ? size : r;
}

static void thread_exit(void *arg)
{
    hs_ring *r = arg;
    hs_tls *t = &hs__tls;
    hs__guard_enter(t);
    for (int i = 0; i < HS_HIST_BUCKETS; i++) {
        atomic_fetch_add_explicit(&dead_n[i],
                                  atomic_load_explicit(&t->hist_n[i], memory_order_relaxed),
                                  memory_order_relaxed);
        atomic_fetch_add_explicit(&dead_b[i],
                                  atomic_load_explicit(&t->hist_b[i], memory_order_relaxed),
                                  memory_order_relaxed);
        atomic_store_explicit(&t->hist_n[i], 0, memory_order_relaxed);
        atomic_store_explicit(&t->hist_b[i], 0, memory_order_relaxed);
    }
    if (r && t->ring == r) {
        hs_lock_acquire(&reg_lock);
        r->owner = NULL;
        atomic_store_explicit(&r->live, 0, memory_order_release);
        hs_lock_release(&reg_lock);
        t->ring = NULL;
    }
    t->state = HS_T_DEAD;
    hs__guard_leave(t);
    /* Whatever later destructors allocate is forwarded without sampling. */
    t->countdown = UINT64_MAX;
}

int hs__threads_init(void)
{
    return pthread_key_create(&exit_key, thread_exit) ? HS_ENOMEM : 0;
}

int hs__thread_attach(hs_tls *t)
{
    assert(!t->ring && t->state != HS_T_DEAD && t->state != HS_T_INTERNAL);
    hs_ring *r = NULL;
    hs_lock_acquire(&reg_lock);
    /* Reuse the ring of an exited thread once the sender has emptied it. */
    for (hs_ring *q = reg_head; q; q = q->next) {
        if (!atomic_load_explicit(&q->live, memory_order_acquire) &&
            atomic_load_explicit(&q->tail, memory_order_acquire) ==
                atomic_load_explicit(&q->head, memory_order_relaxed)) {
            r = q;
            break;
        }
    }
    if (r) {
        assert(!r->owner);
        r->owner = t;
        atomic_store_explicit(&r->live, 1, memory_order_release);
    }
    hs_lock_release(&reg_lock);
    if (!r) {
        r = hs_mem_map(sizeof(hs_ring));
        if (!r) return HS_ENOMEM;
        r->owner = t;
        atomic_store(&r->live, 1);
        hs_lock_acquire(&reg_lock);
        r->next = reg_head;
        reg_head = r;
        hs_lock_release(&reg_lock);
    }
    memset(&r->stack, 0, sizeof r->stack); /* a reused ring held another thread's */
    t->ring = r;
    t->state = HS_T_READY;
    pthread_setspecific(exit_key, r);
    return 0;
}

int hs__ring_push(hs_tls *t, const hs_rec *rec)
{
    hs_ring *r = t->ring;
    assert(r && r->owner == t);
    uint64_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
    assert(h - tail <= HS_RING_CAP);
    if (h - tail >= HS_RING_CAP) {
        /* Full: the sender is behind (typically symbolizing a batch of new
         * stacks). Wait while it makes progress, at most 10 s; drop (and
         * count) once it has made none for three seconds (a loaded machine
         * can starve it that long while it opens a module's debug info) or
         * is gone. The program must not stall for long on us, but a short
         * wait beats a hole in the data. Once a wait has failed, later
         * records drop at once until the sender has drained some of this
         * ring: a stuck sender costs the program one wait, not one per
         * event. */
        if (r->stuck && tail == r->stuck_tail) return HS_ENOSPC;
        r->stuck = 0;
        hs__sender_wake();
        uint64_t beat = atomic_load_explicit(&hs__sender_heartbeat, memory_order_relaxed);
        uint64_t start = hs_now_ns(), last = start;
        for (int i = 0;; i++) {
            if (i < 50)
                sched_yield();
            else
                nanosleep(&(struct timespec){0, 100000}, NULL);
            tail = atomic_load_explicit(&r->tail, memory_order_acquire);
            if (h - tail < HS_RING_CAP) break;
            uint64_t now = hs_now_ns();
            uint64_t b = atomic_load_explicit(&hs__sender_heartbeat, memory_order_relaxed);
            if (b != beat) {
                beat = b;
                last = now;
            }
            if (!hs__sender_alive() || now - last > 3000000000ull || now - start > 10000000000ull) {
                r->stuck = 1;
                r->stuck_tail = tail;
                return HS_ENOSPC;
            }
            if ((i & 63) == 63) hs__sender_wake();
        }
    }
    assert(h - tail < HS_RING_CAP);
    r->recs[h & (HS_RING_CAP - 1)] = *rec;
    atomic_store_explicit(&r->head, h + 1, memory_order_release);
    if (h - tail == HS_RING_CAP / 2) hs__sender_wake();
    return 0;
}

void hs__rings_snapshot(void)
{
    hs_lock_acquire(&reg_lock);
    for (hs_ring *r = reg_head; r; r = r->next)
        r->snap = atomic_load_explicit(&r->head, memory_order_acquire);
    hs_lock_release(&reg_lock);
}

void hs__rings_drain(hs_ring_fn fn, void *data)
{
    hs_lock_acquire(&reg_lock);
    for (hs_ring *r = reg_head; r; r = r->next) {
        uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
        uint64_t head = r->snap;
        if (head - tail > HS_RING_CAP) head = tail; /* a ring created after the snapshot */
        assert(atomic_load_explicit(&r->head, memory_order_acquire) - head <= HS_RING_CAP);
        if (head != tail) fn(r, tail, head, data);
        atomic_store_explicit(&r->tail, head, memory_order_release);
    }
    hs_lock_release(&reg_lock);
}

void hs__hist_read(uint64_t n[HS_HIST_BUCKETS], uint64_t b[HS_HIST_BUCKETS])
{
    for (int i = 0; i < HS_HIST_BUCKETS; i++) {
        n[i] = atomic_load_explicit(&dead_n[i], memory_order_relaxed);
        b[i] = atomic_load_explicit(&dead_b[i], memory_order_relaxed);
    }
    hs_lock_acquire(&reg_lock);
    for (hs_ring *r = reg_head; r; r = r->next) {
        hs_tls *t = r->owner;
        if (!t) continue;
        for (int i = 0; i < HS_HIST_BUCKETS; i++) {
            n[i] += atomic_load_explicit(&t->hist_n[i], memory_order_relaxed);
            b[i] += atomic_load_explicit(&t->hist_b[i], memory_order_relaxed);
        }
    }
    hs_lock_release(&reg_lock);
}

int hs__fork_quiesce(void)
{
    atomic_store(&hs__fork_pending, 1);
    /* Rings are never unlinked while the process runs, so the list can be
     * walked without the registry lock (which the sender may hold while it
     * is busy). */
    hs_lock_acquire(&reg_lock);
    hs_ring *head = reg_head;
    hs_lock_release(&reg_lock);
    /* The forking thread's own flag is set only when fork was called from a
     * signal handler that interrupted its unwinding: waiting for it would
     * never end. */
    hs_ring *self = hs__tls.ring;
    for (hs_ring *r = head; r; r = r->next)
        while (r != self && atomic_load_explicit(&r->busy, memory_order_acquire)) sched_yield();
    while (atomic_load_explicit(&hs__sender_busy, memory_order_acquire)) sched_yield();
    return self && atomic_load_explicit(&self->busy, memory_order_relaxed);
}

void hs__fork_release(void)
{
    atomic_store(&hs__fork_pending, 0);
}

void hs__threads_reset_child(hs_tls *self)
{
    atomic_store(&hs__fork_pending, 0);
    atomic_store(&hs__sender_busy, 0);
    hs_ring *r = reg_head;
    while (r) {
        hs_ring *next = r->next;
        hs_mem_unmap(r, sizeof(hs_ring));
        r = next;
    }
    reg_head = NULL;
    atomic_store(&reg_lock.v, 0);
    for (int i = 0; i < HS_HIST_BUCKETS; i++) {
        atomic_store(&dead_n[i], 0);
        atomic_store(&dead_b[i], 0);
        atomic_store(&self->hist_n[i], 0);
        atomic_store(&self->hist_b[i], 0);
    }
    self->ring = NULL;
    self->state = HS_T_NEW;
    self->rng = 0;
    pthread_setspecific(exit_key, NULL);
}

/* hs_thread: TLS, sampler draws, rings and their registry (see hs_thread.h). */
#include "hs_thread.h"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "hs_error.h"

__thread hs_tls hs__tls __attribute__((tls_model("initial-exec")));

_Atomic int hs__fork_pending;
_Atomic int hs__sender_busy;

static uint64_t sample_mean = 524288;
static uint64_t seed_base;
static atomic_uint_fast64_t seed_seq;

static hs_lock reg_lock;
static hs_ring *reg_head;
/* The drain in progress (consumer only): the span handed out last. */
static struct {
    int on;
    hs_ring *at;
} drain;
/* The doorbell (hs_thread.h). fd is written before the consumer starts and
 * closed only in a fork child. */
static struct {
    int fd;
    _Atomic int sleeping, alive;
    _Atomic uint64_t beat, rung;
} bell = {.fd = -1};
static pthread_key_t exit_key;

/* Exact totals (hs_thread.h). live is the one word every publishing thread
 * writes: on a line of its own. The highs are written under lock, a flag
 * taken only by a publish that finds a new high. */
#define PARKED (INT64_MIN / 4)
static struct {
    _Atomic int64_t live;
    char pad[56];
    atomic_int lock;
    _Atomic int64_t win_max; /* highest live since the sender's last read */
    uint64_t win_t;
    int64_t peak;
    uint64_t peak_t;
    /* counts of threads that exited */
    _Atomic uint64_t allocs, frees, alloc_bytes, free_bytes;
    atomic_int rings; /* rings ever made: the most threads counting at once */
} ex;

/* ---- the sampler's two functions of libm, so that the process need not
 * load libm for them (a whole object to map and relocate in every
 * process). Accurate to a few units in the last place, which is far more
 * than a draw or a weight needs. ---- */

#define LN2 0.6931471805599453094

/* 2^k for -1022 <= k <= 1023, from its bits. */
static double pow2(int k)
{
    assert(k >= -1022 && k <= 1023);
    union {
        uint64_t u;
        double d;
    } v = {.u = (uint64_t)(k + 1023) << 52};
    return v.d;
}

/* -log(u) for 0 < u <= 1: u = m 2^e with m in [sqrt(1/2), sqrt(2)), and
 * log(m) = 2 atanh(s), s = (m - 1) / (m + 1), |s| < 0.172. */
static double neg_log(double u)
{
    assert(u > 0 && u <= 1);
    union {
        double d;
        uint64_t u;
    } v = {.d = u};
    int e = (int)((v.u >> 52) & 0x7ff) - 1023;
    v.u = (v.u & ~((uint64_t)0x7ff << 52)) | ((uint64_t)1023 << 52); /* m in [1, 2) */
    double m = v.d;
    if (m > 1.4142135623730951) {
        m *= 0.5;
        e++;
    }
    double s = (m - 1) / (m + 1), s2 = s * s, term = s, sum = 0;
    for (int k = 1; k < 40 && term != 0; k += 2) {
        sum += term / k;
        term *= s2;
    }
    return -((double)e * LN2 + 2 * sum);
}

/* 1 - e^-x for x >= 0 (-expm1(-x)): the series near 0, where 1 - e^-x
 * would lose its digits; e^-x by x = k ln2 + r, |r| <= ln2 / 2, elsewhere. */
static double one_minus_exp_neg(double x)
{
    assert(x >= 0);
    if (x < 0.5) {
        double term = x, sum = 0;
        for (int k = 2; k < 40 && term != 0; k++) {
            sum += term;
            term *= -x / k;
        }
        return sum;
    }
    if (x > 700) return 1;
    int k = (int)(x / LN2 + 0.5);
    double r = x - k * LN2, term = 1, e = 0;
    for (int i = 1; i < 40 && term != 0; i++) {
        e += term;
        term *= -r / i;
    }
    return 1 - e * pow2(-k);
}

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
    double v = neg_log(u) * (double)sample_mean;
    if (v > 9.0e18) v = 9.0e18;
    return (uint64_t)v + 1;
}

uint64_t hs__sampler_weight(uint64_t size)
{
    if (sample_mean == 1 || size == 0) return size;
    double m = (double)sample_mean;
    /* the probability that a block of this size is sampled */
    double p = one_minus_exp_neg((double)size / m);
    assert(p > 0 && p <= 1);
    double w = (double)size / p;
    if (w > 1.8e19) return UINT64_MAX;
    uint64_t r = (uint64_t)(w + 0.5);
    return r < size ? size : r;
}

/* ---- exact totals ---- */

static inline void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void exact_fold_counts(hs_tls *t)
{
    uint64_t *from[] = {&t->ex_allocs, &t->ex_frees, &t->ex_alloc_bytes, &t->ex_free_bytes};
    _Atomic uint64_t *to[] = {&ex.allocs, &ex.frees, &ex.alloc_bytes, &ex.free_bytes};
    for (int i = 0; i < 4; i++) {
        atomic_fetch_add_explicit(to[i], hs__own_load(from[i]), memory_order_relaxed);
        hs__own_store(from[i], 0);
    }
}

/* A new high of the live figure, v at now. The lock is held for a few
 * stores; a signal handler that allocates while its own thread holds it
 * gives up after a bounded wait (that high is then not recorded). */
static void exact_high(int64_t v, uint64_t now)
{
    for (int i = 0; atomic_exchange_explicit(&ex.lock, 1, memory_order_acquire); i++) {
        if (i > 4096) return;
        relax();
    }
    if (v > atomic_load_explicit(&ex.win_max, memory_order_relaxed)) {
        atomic_store_explicit(&ex.win_max, v, memory_order_relaxed);
        ex.win_t = now;
    }
    if (v > ex.peak) {
        ex.peak = v;
        ex.peak_t = now;
    }
    atomic_store_explicit(&ex.lock, 0, memory_order_release);
}

void hs__exact_publish(hs_tls *t)
{
    int64_t d = t->ex_pending;
    if (t->state == HS_T_INTERNAL) { /* the sender: not counted */
        t->ex_pending = PARKED;
        hs__own_store(&t->ex_allocs, 0);
        hs__own_store(&t->ex_frees, 0);
        hs__own_store(&t->ex_alloc_bytes, 0);
        hs__own_store(&t->ex_free_bytes, 0);
        return;
    }
    if (t->state == HS_T_DEAD) { /* exited: nobody reads its counts any more */
        d -= PARKED;
        t->ex_pending = PARKED;
        exact_fold_counts(t);
    } else {
        t->ex_pending = 0;
        /* A thread without a ring (it never sampled: one that only frees)
         * is not in the registry the sender reads counts through. */
        if (!t->ring) exact_fold_counts(t);
    }
    int64_t v = atomic_fetch_add_explicit(&ex.live, d, memory_order_relaxed) + d;
    if (d > 0 && v > atomic_load_explicit(&ex.win_max, memory_order_relaxed))
        exact_high(v, hs__event_now(t));
}

static _Atomic int exact_how;
static _Atomic unsigned exact_flags;

void hs__exact_set_how(int how)
{
    assert(how == HS_EXACT_OFF || how == HS_EXACT_GLIBC || how == HS_EXACT_CALLED);
    atomic_store_explicit(&exact_how, how, memory_order_relaxed);
}

int hs__exact_how(void)
{
    return atomic_load_explicit(&exact_how, memory_order_relaxed);
}

void hs__exact_flag(unsigned f)
{
    assert((f & ~(HS_EXACT_F_CALLED | HS_EXACT_F_NO_SMALL)) == 0);
    atomic_fetch_or_explicit(&exact_flags, f, memory_order_relaxed);
}

unsigned hs__exact_flags(void)
{
    return atomic_load_explicit(&exact_flags, memory_order_relaxed) |
           (hs__exact_how() == HS_EXACT_CALLED ? HS_EXACT_F_CALLED : 0);
}

void hs__exact_park(hs_tls *t)
{
    t->ex_pending = PARKED;
    hs__own_store(&t->ex_allocs, 0);
    hs__own_store(&t->ex_frees, 0);
    hs__own_store(&t->ex_alloc_bytes, 0);
    hs__own_store(&t->ex_free_bytes, 0);
}

void hs__exact_flush(hs_tls *t)
{
    if (t->ex_pending != 0 && t->state != HS_T_INTERNAL && t->state != HS_T_DEAD)
        hs__exact_publish(t);
}

void hs__exact_read(hs_exact *out, uint64_t now)
{
    memset(out, 0, sizeof *out);
    /* The folded counts are read under the registry lock, as a thread's
     * exit moves its counts there and leaves the registry under it: read
     * apart, an exit in between made an observation's counts dip. */
    hs_lock_acquire(&reg_lock);
    out->allocs = atomic_load_explicit(&ex.allocs, memory_order_relaxed);
    out->frees = atomic_load_explicit(&ex.frees, memory_order_relaxed);
    out->alloc_bytes = atomic_load_explicit(&ex.alloc_bytes, memory_order_relaxed);
    out->free_bytes = atomic_load_explicit(&ex.free_bytes, memory_order_relaxed);
    for (hs_ring *r = reg_head; r; r = r->next) {
        hs_tls *t = r->owner;
        if (!t) continue;
        out->allocs += hs__own_load(&t->ex_allocs);
        out->frees += hs__own_load(&t->ex_frees);
        out->alloc_bytes += hs__own_load(&t->ex_alloc_bytes);
        out->free_bytes += hs__own_load(&t->ex_free_bytes);
    }
    hs_lock_release(&reg_lock);
    while (atomic_exchange_explicit(&ex.lock, 1, memory_order_acquire)) relax();
    int64_t live = atomic_load_explicit(&ex.live, memory_order_relaxed);
    int64_t m = atomic_load_explicit(&ex.win_max, memory_order_relaxed);
    uint64_t mt = ex.win_t;
    if (live > m) { /* a high whose record gave up waiting (exact_high) */
        m = live;
        mt = now;
    }
    out->max_bytes = m > 0 ? (uint64_t)m : 0;
    out->max_t_ns = mt;
    out->peak_bytes = ex.peak > 0 ? (uint64_t)ex.peak : 0;
    out->peak_t_ns = ex.peak_t;
    atomic_store_explicit(&ex.win_max, live, memory_order_relaxed);
    ex.win_t = now;
    atomic_store_explicit(&ex.lock, 0, memory_order_release);
    out->t_ns = now;
    out->live_bytes = live > 0 ? (uint64_t)live : 0;
    int n = atomic_load_explicit(&ex.rings, memory_order_relaxed);
    out->error_bytes = (uint64_t)(n > 0 ? n : 1) * (uint64_t)HS_EXACT_STEP;
}

void hs__exact_reset_child(hs_tls *self, uint64_t now)
{
    hs__exact_flush(self);
    hs__exact_park(self);
    self->ex_pending = 0;
    atomic_store(&ex.allocs, 0);
    atomic_store(&ex.frees, 0);
    atomic_store(&ex.alloc_bytes, 0);
    atomic_store(&ex.free_bytes, 0);
    atomic_store(&ex.lock, 0);
    atomic_store(&ex.rings, 0);
    int64_t live = atomic_load(&ex.live);
    atomic_store(&ex.win_max, live);
    ex.win_t = now;
    ex.peak = live;
    ex.peak_t = now;
}

static void thread_exit(void *arg)
{
    hs_ring *r = arg;
    hs_tls *t = &hs__tls;
    hs__guard_enter(t);
    hs__exact_flush(t);
    if (r && t->ring == r) {
        hs_lock_acquire(&reg_lock);
        exact_fold_counts(t); /* under the lock: the sender reads them through r->owner */
        r->owner = NULL;
        atomic_store_explicit(&r->live, 0, memory_order_release);
        hs_lock_release(&reg_lock);
        t->ring = NULL;
    }
    exact_fold_counts(t); /* (a no-op when folded above) */
    t->ex_pending = PARKED;
    t->state = HS_T_DEAD;
    hs__guard_leave(t);
    /* Whatever later destructors allocate is forwarded without sampling. */
    t->countdown = UINT64_MAX;
}

/* Every ring's capacity (hs__threads_init), fixed before the first ring. */
static uint64_t ring_cap = HS_RING_CAP;

static size_t ring_bytes(uint64_t cap)
{
    return sizeof(hs_ring) + cap * sizeof(hs_rec);
}

int hs__threads_init(uint64_t cap)
{
    assert(cap >= HS_RING_CAP && !(cap & (cap - 1)));
    ring_cap = cap;
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
        r = hs_mem_map(ring_bytes(ring_cap));
        if (!r) return HS_ENOMEM;
        r->cap = ring_cap;
        atomic_fetch_add_explicit(&ex.rings, 1, memory_order_relaxed);
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
    assert(h - tail <= r->cap);
    if (h - tail >= r->cap) {
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
        hs__consumer_wake();
        uint64_t beat = atomic_load_explicit(&bell.beat, memory_order_relaxed);
        uint64_t start = hs_now_ns(), last = start;
        for (int i = 0;; i++) {
            if (i < 50)
                sched_yield();
            else
                nanosleep(&(struct timespec){0, 100000}, NULL);
            tail = atomic_load_explicit(&r->tail, memory_order_acquire);
            if (h - tail < r->cap) break;
            uint64_t now = hs_now_ns();
            uint64_t b = atomic_load_explicit(&bell.beat, memory_order_relaxed);
            if (b != beat) {
                beat = b;
                last = now;
            }
            if (!hs__consumer_alive() || now - last > 3000000000ull ||
                now - start > 10000000000ull) {
                r->stuck = 1;
                r->stuck_tail = tail;
                return HS_ENOSPC;
            }
            if ((i & 63) == 63) hs__consumer_wake();
        }
    }
    assert(h - tail < r->cap);
    r->recs[h & (r->cap - 1)] = *rec;
    atomic_store_explicit(&r->head, h + 1, memory_order_release);
    if (h - tail == r->cap / 2) hs__consumer_wake();
    return 0;
}

void hs__rings_snapshot(void)
{
    hs_lock_acquire(&reg_lock);
    for (hs_ring *r = reg_head; r; r = r->next)
        r->snap = atomic_load_explicit(&r->head, memory_order_acquire);
    hs_lock_release(&reg_lock);
}

/* The room of the span handed out last is free again. */
static void drain_release(void)
{
    hs_ring *r = drain.at;
    if (!r) return;
    atomic_store_explicit(&r->tail, r->snap, memory_order_release);
    drain.at = NULL;
}

void hs__rings_drain_begin(void)
{
    assert(!drain.on);
    hs_lock_acquire(&reg_lock);
    drain.on = 1;
    drain.at = NULL;
}

int hs__rings_drain_next(hs_ring_span *s)
{
    assert(drain.on);
    hs_ring *r = drain.at ? drain.at->next : reg_head;
    drain_release();
    for (; r; r = r->next) {
        uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
        uint64_t head = r->snap;
        if (head - tail > r->cap) head = r->snap = tail; /* made after the snapshot */
        assert(atomic_load_explicit(&r->head, memory_order_acquire) - head <= r->cap);
        if (head == tail) continue;
        drain.at = r;
        *s = (hs_ring_span){r, tail, head};
        return 1;
    }
    return 0;
}

void hs__rings_drain_end(void)
{
    assert(drain.on);
    drain_release();
    drain.on = 0;
    hs_lock_release(&reg_lock);
}

/* ---- the doorbell ---- */

int hs__consumer_open(void)
{
    if (bell.fd < 0) bell.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    return bell.fd < 0 ? HS_EIO : 0;
}

void hs__consumer_set_alive(int alive)
{
    assert(!alive || bell.fd >= 0);
    atomic_store(&bell.alive, alive);
}

int hs__consumer_alive(void)
{
    return atomic_load_explicit(&bell.alive, memory_order_relaxed);
}

void hs__consumer_beat(void)
{
    atomic_fetch_add_explicit(&bell.beat, 1, memory_order_relaxed);
}

void hs__consumer_kick(void)
{
    uint64_t one = 1;
    if (bell.fd >= 0 && write(bell.fd, &one, sizeof one) < 0) {
    }
}

void hs__consumer_wake(void)
{
    atomic_fetch_add_explicit(&bell.rung, 1, memory_order_relaxed);
    if (atomic_load_explicit(&bell.sleeping, memory_order_relaxed)) hs__consumer_kick();
}

uint64_t hs__consumer_rung(void)
{
    return atomic_load_explicit(&bell.rung, memory_order_relaxed);
}

int hs__consumer_sleeping(void)
{
    return atomic_load(&bell.sleeping);
}

int hs__consumer_wait(struct pollfd *extra, int timeout_ms)
{
    assert(bell.fd >= 0);
    struct pollfd p[2] = {{bell.fd, POLLIN, 0}, {-1, 0, 0}};
    if (extra) p[1] = *extra;
    atomic_store(&bell.sleeping, 1);
    poll(p, extra ? 2 : 1, timeout_ms);
    atomic_store(&bell.sleeping, 0);
    if (extra) extra->revents = p[1].revents;
    if (!(p[0].revents & POLLIN)) return 0;
    uint64_t v;
    if (read(bell.fd, &v, sizeof v) < 0) {
    }
    return 1;
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
        hs_mem_unmap(r, ring_bytes(r->cap));
        r = next;
    }
    reg_head = NULL;
    atomic_store(&reg_lock.v, 0);
    drain.on = 0;
    drain.at = NULL;
    if (bell.fd >= 0) close(bell.fd);
    bell.fd = -1;
    atomic_store(&bell.sleeping, 0);
    atomic_store(&bell.alive, 0);
    atomic_store(&bell.beat, 0);
    atomic_store(&bell.rung, 0);
    hs__exact_reset_child(self, hs_now_ns());
    self->ring = NULL;
    self->state = HS_T_NEW;
    self->rng = 0;
    pthread_setspecific(exit_key, NULL);
}

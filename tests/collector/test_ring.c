/* Unit tests of the per-thread rings (collector/hs_thread.c): records come
 * out in the order they went in, across wrap-around and with a concurrent
 * drainer; a drain stops at the snapshot; a full ring waits for a sender that
 * makes progress, drops at once (counted by the caller) when the sender is
 * gone, and costs one bounded wait, not one per record, when it is stuck;
 * a thread's records survive its exit, and its ring is reused only once
 * drained; the doorbell wakes a consumer asleep on it. The test plays the
 * consumer (the sender thread) through the rings' own interface. */
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "hs_error.h"
#include "hs_thread.h"

/* What a drain saw: the records' sequence numbers (their size field). */
typedef struct seen {
    uint64_t *seq;
    size_t n, cap;
    int rings; /* rings with records in the last drain */
} seen;

static void collect(const hs_ring_span *sp, seen *s)
{
    s->rings++;
    for (uint64_t i = sp->tail; i != sp->head; i++) {
        const hs_rec *rec = hs__span_rec(sp, i);
        /* The rest of the record travels with its sequence number. */
        if (rec->weight != rec->size * 3 || rec->head != (rec->size << 1 | (rec->size & 1)))
            fail_msg("record %llu torn", (unsigned long long)rec->size);
        if (s->n == s->cap) {
            s->cap = s->cap ? s->cap * 2 : 4096;
            s->seq = realloc(s->seq, s->cap * sizeof *s->seq);
            if (!s->seq) fail();
        }
        s->seq[s->n++] = rec->size;
    }
}

/* Every ring's records up to the snapshot. */
static void drain_snapped(seen *s)
{
    hs_ring_span sp;
    hs__rings_drain_begin();
    while (hs__rings_drain_next(&sp)) collect(&sp, s);
    hs__rings_drain_end();
}

/* A sender round: snapshot, then drain. */
static void drain(seen *s)
{
    s->rings = 0;
    hs__rings_snapshot();
    drain_snapped(s);
    hs__consumer_beat();
}

static void seen_reset(seen *s)
{
    s->n = 0;
    s->rings = 0;
}

static int push(uint64_t seq)
{
    hs_rec r = {seq, seq << 1 | (seq & 1), seq, seq * 3};
    return hs__ring_push(&hs__tls, &r);
}

/* The calling thread's ring, attached on first use. */
static hs_ring *my_ring(void)
{
    if (!hs__tls.ring) assert_int_equal(hs__thread_attach(&hs__tls), 0);
    return hs__tls.ring;
}

static int setup(void **state)
{
    (void)state;
    hs__sampler_init(524288, 1);
    if (hs__consumer_open() != 0) return -1;
    return hs__threads_init(HS_RING_CAP);
}

/* Pushes in batches and drains after each: the sequence comes out whole and
 * in order while the indices wrap around the ring many times. Batch sizes
 * that do and do not divide the capacity, and a full ring's worth. */
static void test_ring_order_wraps(void **state)
{
    (void)state;
    static const struct {
        size_t batch, rounds;
    } cases[] = {
        {1, 5000}, {7, 3000}, {HS_RING_CAP / 2, 20}, {HS_RING_CAP - 1, 11}, {HS_RING_CAP, 9},
    };
    my_ring();
    seen s = {0};
    drain(&s);
    hs__consumer_set_alive(0);
    for (size_t c = 0; c < HS_COUNTOF(cases); c++) {
        seen_reset(&s);
        uint64_t seq = 0;
        for (size_t round = 0; round < cases[c].rounds; round++) {
            for (size_t i = 0; i < cases[c].batch; i++) assert_int_equal(push(seq++), 0);
            drain(&s);
            assert_int_equal(s.rings, 1);
        }
        assert_int_equal(s.n, seq);
        for (size_t i = 0; i < s.n; i++) assert_true(s.seq[i] == i);
    }
    free(s.seq);
}

/* A drain takes what was there at the snapshot, no more; the rest waits for
 * the next round. */
static void test_ring_snapshot_bounds_drain(void **state)
{
    (void)state;
    my_ring();
    seen s = {0};
    drain(&s);
    seen_reset(&s);
    for (uint64_t i = 0; i < 10; i++) assert_int_equal(push(i), 0);
    hs__rings_snapshot();
    for (uint64_t i = 10; i < 15; i++) assert_int_equal(push(i), 0);
    drain_snapped(&s);
    assert_int_equal(s.n, 10);
    drain(&s);
    assert_int_equal(s.n, 15);
    for (size_t i = 0; i < s.n; i++) assert_true(s.seq[i] == i);
    free(s.seq);
}

/* The ring wakes the sender once when it passes half full, not per record. */
static void test_ring_wakes_at_half(void **state)
{
    (void)state;
    my_ring();
    seen s = {0};
    drain(&s);
    uint64_t rung = hs__consumer_rung();
    for (uint64_t i = 0; i < HS_RING_CAP / 2; i++) assert_int_equal(push(i), 0);
    assert_true(hs__consumer_rung() == rung);
    assert_int_equal(push(HS_RING_CAP / 2), 0);
    assert_true(hs__consumer_rung() == rung + 1);
    for (uint64_t i = HS_RING_CAP / 2 + 1; i < HS_RING_CAP; i++) assert_int_equal(push(i), 0);
    assert_true(hs__consumer_rung() == rung + 1);
    drain(&s);
    free(s.seq);
}

/* A consumer asleep on the doorbell (with a socket of its own to watch, as
 * the sender has) is woken when a ring passes half full: its wait ends with
 * the bell well before its timeout of a minute, not by the socket. */
typedef struct sleeper {
    int woken;
    short other;
} sleeper;

static void *sleep_on_bell(void *arg)
{
    sleeper *z = arg;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return NULL;
    struct pollfd other = {sv[0], POLLIN, 0};
    z->woken = hs__consumer_wait(&other, 60000);
    z->other = other.revents;
    close(sv[0]);
    close(sv[1]);
    return NULL;
}

static void test_ring_bell_wakes_sleeper(void **state)
{
    (void)state;
    my_ring();
    seen s = {0};
    drain(&s);
    sleeper z = {-1, -1};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, sleep_on_bell, &z), 0);
    while (!hs__consumer_sleeping()) sched_yield();
    for (uint64_t i = 0; i <= HS_RING_CAP / 2; i++) assert_int_equal(push(i), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(z.woken, 1);
    assert_int_equal(z.other, 0);
    assert_int_equal(hs__consumer_sleeping(), 0);
    drain(&s);
    free(s.seq);
}

/* With no sender, a full ring drops at once: the record is refused, nothing
 * already in the ring is overwritten, and pushes work again once drained. */
static void test_ring_full_without_sender(void **state)
{
    (void)state;
    my_ring();
    seen s = {0};
    drain(&s);
    seen_reset(&s);
    hs__consumer_set_alive(0);
    for (uint64_t i = 0; i < HS_RING_CAP; i++) assert_int_equal(push(i), 0);
    for (uint64_t i = 0; i < 100; i++) assert_int_equal(push(1000000 + i), HS_ENOSPC);
    drain(&s);
    assert_int_equal(s.n, HS_RING_CAP);
    for (size_t i = 0; i < s.n; i++) assert_true(s.seq[i] == i);
    seen_reset(&s);
    assert_int_equal(push(7), 0);
    drain(&s);
    assert_int_equal(s.n, 1);
    assert_true(s.seq[0] == 7);
    free(s.seq);
}

/* A sender that is alive but makes no progress (no heartbeat): the first
 * record past a full ring waits (a bounded time, about 3 s), then drops; the
 * following ones drop without waiting (no wake-up, the wait's first step),
 * until the sender drains. */
static void test_ring_full_stuck_sender(void **state)
{
    (void)state;
    my_ring();
    seen s = {0};
    drain(&s);
    seen_reset(&s);
    hs__consumer_set_alive(1);
    for (uint64_t i = 0; i < HS_RING_CAP; i++) assert_int_equal(push(i), 0);
    uint64_t wakes = hs__consumer_rung();
    assert_int_equal(push(HS_RING_CAP), HS_ENOSPC);
    assert_true(hs__consumer_rung() > wakes);
    wakes = hs__consumer_rung();
    for (uint64_t i = 0; i < 100; i++) {
        assert_int_equal(push(HS_RING_CAP + 1 + i), HS_ENOSPC);
        assert_true(hs__consumer_rung() == wakes);
    }
    drain(&s);
    assert_int_equal(s.n, HS_RING_CAP);
    for (size_t i = 0; i < s.n; i++) assert_true(s.seq[i] == i);
    assert_int_equal(push(1), 0);
    drain(&s);
    hs__consumer_set_alive(0);
    free(s.seq);
}

/* A producer thread and this thread as the sender, concurrently: every record
 * pushed is drained exactly once, in order; a refused one (the sender
 * starved for seconds on a loaded machine) is absent, and counted. */
typedef struct producer {
    uint64_t n, dropped;
    atomic_int done;
} producer;

static void *produce(void *arg)
{
    producer *p = arg;
    my_ring();
    uint64_t seq = 0;
    for (uint64_t i = 0; i < p->n; i++) {
        if (push(seq) == 0)
            seq++;
        else
            p->dropped++;
    }
    atomic_store(&p->done, 1);
    return NULL;
}

static void test_ring_concurrent(void **state)
{
    (void)state;
    seen s = {0};
    drain(&s);
    seen_reset(&s);
    hs__consumer_set_alive(1);
    producer p = {.n = 500000};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, produce, &p), 0);
    while (!atomic_load(&p.done)) drain(&s);
    assert_int_equal(pthread_join(th, NULL), 0);
    drain(&s);
    hs__consumer_set_alive(0);
    print_message("%llu records drained, %llu dropped\n", (unsigned long long)s.n,
                  (unsigned long long)p.dropped);
    assert_true(s.n + p.dropped == p.n);
    for (size_t i = 0; i < s.n; i++)
        if (s.seq[i] != i) fail_msg("record %zu is %llu", i, (unsigned long long)s.seq[i]);
    free(s.seq);
}

/* A thread pushes records and exits: they are drained all the same. Its ring
 * is not given to a new thread before that (the new thread would overwrite
 * them), and is afterwards. */
typedef struct pusher {
    uint64_t first, n;
    hs_ring *ring;
} pusher;

static void *push_and_exit(void *arg)
{
    pusher *p = arg;
    p->ring = my_ring();
    for (uint64_t i = 0; i < p->n; i++)
        if (push(p->first + i) != 0) return NULL;
    return NULL;
}

static hs_ring *run_pusher(uint64_t first, uint64_t n)
{
    pusher p = {first, n, NULL};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, push_and_exit, &p), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    return p.ring;
}

static void test_ring_thread_exit_and_reuse(void **state)
{
    (void)state;
    hs_ring *mine = my_ring();
    seen s = {0};
    drain(&s);
    seen_reset(&s);
    hs_ring *a = run_pusher(100, 5);
    hs_ring *b = run_pusher(200, 3); /* a is not drained: b gets another ring */
    assert_ptr_not_equal(a, b);
    assert_ptr_not_equal(a, mine);
    assert_ptr_not_equal(b, mine);
    drain(&s);
    assert_int_equal(s.rings, 2);
    assert_int_equal(s.n, 8);
    uint64_t a_seen = 0, b_seen = 0;
    for (size_t i = 0; i < s.n; i++) {
        if (s.seq[i] >= 200)
            assert_true(s.seq[i] == 200 + b_seen++);
        else
            assert_true(s.seq[i] == 100 + a_seen++);
    }
    assert_true(a_seen == 5 && b_seen == 3);
    /* Both drained: the next thread reuses one of them, not a new ring. */
    hs_ring *c = run_pusher(300, 1);
    assert_true(c == a || c == b);
    seen_reset(&s);
    drain(&s);
    assert_int_equal(s.n, 1);
    assert_true(s.seq[0] == 300);
    free(s.seq);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_order_wraps),
        cmocka_unit_test(test_ring_snapshot_bounds_drain),
        cmocka_unit_test(test_ring_wakes_at_half),
        cmocka_unit_test(test_ring_bell_wakes_sleeper),
        cmocka_unit_test(test_ring_full_without_sender),
        cmocka_unit_test(test_ring_full_stuck_sender),
        cmocka_unit_test(test_ring_concurrent),
        cmocka_unit_test(test_ring_thread_exit_and_reuse),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}

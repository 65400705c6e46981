/* Unit tests of the collector's live set (collector/hs_liveset.c), against a
 * plain model of the set kept by the test: it finds every inserted address
 * and no removed one, through table growth and backward-shift deletion; its
 * filter never answers "not sampled" for a live block, even once a page's
 * counter has saturated; a full set refuses inserts (the hooks count them)
 * and keeps what it holds; the lookup without a lock answers right while
 * another thread changes the same shard. Addresses are only keys here, never dereferenced. */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "hs_error.h"
#include "hs_liveset.h"

#define PAGE ((uintptr_t)1 << HS_FILTER_SHIFT)
/* Pages whose numbers differ by a multiple of 64 share a shard. */
#define SHARD_STRIDE (64 * PAGE)

/* The model: a flat array indexed by a dense key number. */
typedef struct model {
    uintptr_t *addr;
    uint64_t *size;
    uint8_t *live;
    size_t n, count;
} model;

static uint64_t rng_state;

static uint64_t rnd(void)
{
    uint64_t x = rng_state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_state = x;
    return x * 0x2545F4914F6CDD1Dull;
}

/* The key space of a case: blocks `gap` bytes apart packed into `pages`
 * pages, the pages `stride` apart (one shard when stride is SHARD_STRIDE). */
static void model_init(model *m, size_t pages, size_t per_page, uintptr_t stride, uintptr_t gap)
{
    m->n = pages * per_page;
    m->addr = calloc(m->n, sizeof *m->addr);
    m->size = calloc(m->n, sizeof *m->size);
    m->live = calloc(m->n, 1);
    m->count = 0;
    assert_non_null(m->addr);
    assert_non_null(m->size);
    assert_non_null(m->live);
    for (size_t i = 0; i < m->n; i++)
        m->addr[i] = 0x7f0000000000u + (i / per_page) * stride + (i % per_page) * gap;
}

static void model_free(model *m)
{
    free(m->addr);
    free(m->size);
    free(m->live);
}

static void liveset_fresh(uint64_t max_entries)
{
    hs__liveset_reset();
    hs__liveset_init(max_entries);
}

/* Every live block is found, with what was stored for it, and passes the
 * filter; every other key is absent. Removes and re-inserts each live one,
 * so the check leaves the set as it found it (except for slot order). */
static void check_against_model(model *m)
{
    assert_int_equal(hs__liveset_count(), m->count);
    for (size_t i = 0; i < m->n; i++) {
        hs_live l;
        /* Nobody changes the set meanwhile: the lock-free lookup is exact. */
        assert_int_equal(hs__liveset_has(m->addr[i]), m->live[i]);
        if (m->live[i]) {
            assert_true(hs__liveset_maybe((void *)m->addr[i]));
            assert_int_equal(hs__liveset_remove(m->addr[i], &l, 0), 1);
            assert_true(l.addr == m->addr[i]);
            assert_true(l.size == m->size[i]);
            assert_true(l.stack_id == i + 1);
            assert_int_equal(hs__liveset_insert(m->addr[i], m->size[i], i + 1), 0);
        } else {
            assert_int_equal(hs__liveset_remove(m->addr[i], &l, 0), 0);
        }
    }
}

/* Random inserts and removes over a key space, checked against the model
 * after every operation on the key it touched and on the whole set at
 * intervals. Cases vary how hard the keys collide. */
static void test_liveset_model(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        size_t pages, per_page;
        uintptr_t stride, gap;
        unsigned fill; /* percent of the keys live, about */
        size_t ops;
    } cases[] = {
        /* one shard: long probe runs, growth from 256 to 4096 slots */
        {"one shard", 24, 128, SHARD_STRIDE, 16, 50, 200000},
        /* every shard, a few blocks a page */
        {"spread", 2048, 4, PAGE, 16, 50, 200000},
        /* one page: its filter counter goes past 255 and back */
        {"one page", 1, 512, PAGE, PAGE / 512, 60, 100000},
    };
    for (size_t c = 0; c < HS_COUNTOF(cases); c++) {
        liveset_fresh(1u << 22);
        rng_state = 0x9e3779b97f4a7c15ull + c;
        model m;
        model_init(&m, cases[c].pages, cases[c].per_page, cases[c].stride, cases[c].gap);
        for (size_t op = 0; op < cases[c].ops; op++) {
            size_t i = (size_t)(rnd() % m.n);
            hs_live l;
            /* Insert more often than remove below the fill, less above. */
            int insert = (rnd() % 100) < (m.count * 100 < m.n * cases[c].fill ? 70 : 30);
            if (insert && !m.live[i]) {
                m.size[i] = 1 + rnd() % 100000;
                assert_int_equal(hs__liveset_insert(m.addr[i], m.size[i], i + 1), 0);
                m.live[i] = 1;
                m.count++;
            } else if (!insert) {
                int rc = hs__liveset_remove(m.addr[i], &l, 0);
                assert_int_equal(rc, m.live[i]);
                if (rc) {
                    assert_true(l.size == m.size[i] && l.stack_id == i + 1);
                    m.live[i] = 0;
                    m.count--;
                }
                /* Removed: gone for good. */
                assert_int_equal(hs__liveset_remove(m.addr[i], &l, 0), 0);
            }
            if (m.live[i]) assert_true(hs__liveset_maybe((void *)m.addr[i]));
            if (op % 20000 == 0) check_against_model(&m);
        }
        check_against_model(&m);
        /* Emptied, the set finds nothing. */
        for (size_t i = 0; i < m.n; i++) {
            hs_live l;
            assert_int_equal(hs__liveset_remove(m.addr[i], &l, 0), m.live[i]);
        }
        assert_int_equal(hs__liveset_count(), 0);
        model_free(&m);
    }
}

/* A block whose free was never seen (its address comes back from malloc):
 * the entry is replaced, not duplicated. */
static void test_liveset_stale_entry(void **state)
{
    (void)state;
    liveset_fresh(1u << 20);
    uintptr_t a = 0x7f0000001230u;
    assert_int_equal(hs__liveset_insert(a, 10, 1), 0);
    assert_int_equal(hs__liveset_insert(a, 20, 2), 0);
    assert_int_equal(hs__liveset_count(), 1);
    hs_live l;
    assert_int_equal(hs__liveset_remove(a, &l, 0), 1);
    assert_true(l.size == 20 && l.stack_id == 2);
    assert_int_equal(hs__liveset_remove(a, &l, 0), 0);
}

/* A page holding more live samples than its counter can count (255): the
 * counter sticks, so removing most of them never makes the filter hide the
 * rest. */
static void test_liveset_filter_saturates(void **state)
{
    (void)state;
    liveset_fresh(1u << 20);
    enum { N = 300, REMOVED = 290 };
    uintptr_t base = 0x7f0000100000u, gap = PAGE / 512; /* all in one granule */
    for (uintptr_t i = 0; i < N; i++)
        assert_int_equal(hs__liveset_insert(base + i * gap, 8, i + 1), 0);
    for (uintptr_t i = 0; i < REMOVED; i++) {
        hs_live l;
        assert_int_equal(hs__liveset_remove(base + i * gap, &l, 0), 1);
    }
    for (uintptr_t i = REMOVED; i < N; i++) {
        assert_true(hs__liveset_maybe((void *)(base + i * gap)));
        hs_live l;
        assert_int_equal(hs__liveset_remove(base + i * gap, &l, 0), 1);
    }
    /* A counter below saturation goes back to zero with its blocks. */
    assert_int_equal(hs__liveset_insert(base + PAGE, 8, 1), 0);
    assert_true(hs__liveset_maybe((void *)(base + PAGE)));
    hs_live l;
    assert_int_equal(hs__liveset_remove(base + PAGE, &l, 0), 1);
    assert_false(hs__liveset_maybe((void *)(base + PAGE)));
}

/* A full set refuses with HS_ENOSPC (the hooks count each refusal as a
 * live-set-full drop), keeps everything it holds, and takes inserts again
 * once something is removed. Table-driven over the configured maximum. */
static void test_liveset_full(void **state)
{
    (void)state;
    static const struct {
        uint64_t max_entries;
        size_t fits; /* in one shard: half of its largest table */
    } cases[] = {
        {0, 128},          /* the smallest table, 256 slots */
        {64 * 128, 128},   /* likewise */
        {64 * 256, 256},   /* grows once, to 512 */
        {64 * 1024, 1024}, /* grows three times, to 2048 */
        {64 * 1000, 1024}, /* rounded up to a power of two */
    };
    for (size_t c = 0; c < HS_COUNTOF(cases); c++) {
        liveset_fresh(cases[c].max_entries);
        size_t n = cases[c].fits + 10;
        model m;
        model_init(&m, n, 1, SHARD_STRIDE, 16);
        size_t ok = 0, refused = 0;
        for (size_t i = 0; i < n; i++) {
            int rc = hs__liveset_insert(m.addr[i], 100, i + 1);
            if (rc == 0) {
                assert_int_equal(refused, 0); /* no insert succeeds after the first refusal */
                m.live[i] = 1;
                m.size[i] = 100;
                ok++;
            } else {
                assert_int_equal(rc, HS_ENOSPC);
                refused++;
            }
        }
        assert_int_equal(ok, cases[c].fits);
        assert_int_equal(refused, n - cases[c].fits);
        m.count = ok;
        check_against_model(&m);
        /* Another shard still has room. */
        assert_int_equal(hs__liveset_insert(m.addr[0] + PAGE, 1, 1), 0);
        hs_live l;
        assert_int_equal(hs__liveset_remove(m.addr[0] + PAGE, &l, 0), 1);
        /* Room again after a free. */
        assert_int_equal(hs__liveset_remove(m.addr[0], &l, 0), 1);
        m.live[0] = 0;
        m.count--;
        size_t last = n - 1;
        assert_int_equal(hs__liveset_insert(m.addr[last], 7, last + 1), 0);
        m.live[last] = 1;
        m.size[last] = 7;
        m.count++;
        check_against_model(&m);
        model_free(&m);
    }
}

/* try_only on an unlocked shard behaves as a plain remove. */
static void test_liveset_try_only(void **state)
{
    (void)state;
    liveset_fresh(1u << 20);
    uintptr_t a = 0x7f0000002000u;
    hs_live l;
    assert_int_equal(hs__liveset_remove(a, &l, 1), 0);
    assert_int_equal(hs__liveset_insert(a, 5, 9), 0);
    assert_int_equal(hs__liveset_remove(a, &l, 1), 1);
    assert_true(l.size == 5 && l.stack_id == 9);
}

/* The lookup free() uses without a lock, while another thread changes the
 * same shard as fast as it can (inserts, backward-shift deletions, growth
 * from 256 to 8192 slots): a block that stays live is never reported absent
 * and one never inserted is never reported present; -1 (the shard was busy
 * throughout) is the only other answer. Keys share the shard and granules
 * with the writer's, so every probe crosses the writer's work. */
static int seconds_since(struct timespec t0, double s)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) * 1e-9 >= s;
}

typedef struct churn_arg {
    model *m;
    size_t first; /* the writer owns keys [first, n) */
    _Atomic int stop;
} churn_arg;

static void *churn_writer(void *arg)
{
    churn_arg *a = arg;
    model *m = a->m;
    uint64_t x = 0x243f6a8885a308d3ull;
    while (!atomic_load(&a->stop)) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        size_t i = a->first + (size_t)(x % (m->n - a->first));
        hs_live l;
        if (m->live[i]) {
            assert_int_equal(hs__liveset_remove(m->addr[i], &l, 0), 1);
            m->live[i] = 0;
        } else {
            assert_int_equal(hs__liveset_insert(m->addr[i], 1, i + 1), 0);
            m->live[i] = 1;
        }
    }
    return NULL;
}

static void test_liveset_has_concurrent(void **state)
{
    (void)state;
    liveset_fresh(1u << 22);
    model m;
    /* 64 granules of one shard, 96 keys each: 6144 keys, up to 8192 slots. */
    model_init(&m, 64, 96, SHARD_STRIDE, 8);
    enum { STABLE = 512 }; /* keys [0, STABLE): even ones live, odd never */
    for (size_t i = 0; i < STABLE; i += 2) {
        assert_int_equal(hs__liveset_insert(m.addr[i], 1, i + 1), 0);
        m.live[i] = 1;
    }
    churn_arg a = {&m, STABLE, 0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, churn_writer, &a), 0);
    unsigned long busy = 0, asked = 0;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* At least half a second (a torn read needs the two threads to meet in
     * the middle of a backward shift) and until some lookups got through.
     * On a loaded machine the writer can be preempted inside its write
     * section, and every lookup is then busy until it runs again: yield
     * after a round of only busy answers so that a shared core lets it. */
    for (int round = 1;; round++) {
        unsigned long busy_before = busy;
        for (size_t i = 0; i < STABLE; i++) {
            int rc = hs__liveset_has(m.addr[i]);
            asked++;
            if (rc < 0) {
                busy++;
                continue;
            }
            assert_int_equal(rc, i % 2 == 0);
        }
        if (busy - busy_before == STABLE) sched_yield();
        if (round % 64) continue;
        if (seconds_since(t0, 0.5) && (busy < asked || seconds_since(t0, 30.0))) break;
    }
    atomic_store(&a.stop, 1);
    pthread_join(th, NULL);
    /* Busy answers are many here (the writer does nothing else), but some
     * lookups got through. */
    print_message("lookups %lu, shard busy %lu\n", asked, busy);
    assert_true(busy < asked);
    for (size_t i = 0; i < m.n; i++) assert_int_equal(hs__liveset_has(m.addr[i]), m.live[i]);
    model_free(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_liveset_model),
        cmocka_unit_test(test_liveset_stale_entry),
        cmocka_unit_test(test_liveset_filter_saturates),
        cmocka_unit_test(test_liveset_full),
        cmocka_unit_test(test_liveset_try_only),
        cmocka_unit_test(test_liveset_has_concurrent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

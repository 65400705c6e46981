/* test_store: the store interface under the query core (hs_qstore.h), op by
 * op, on a database the server's own storage wrote (fixture.h: runs 1 and
 * 2 of "app", known to the byte). What is asserted here is what any store
 * must answer for the same runs, whatever it keeps them in: a second store
 * runs these cases against its own copy of the fixture. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "fixture.h"
#include "hs_error.h"
#include "hs_qstore.h"

static char db_path[512];
static hs_qstore *st;

static int setup(void **state)
{
    (void)state;
    fx_tmp_path(db_path, sizeof db_path, "store.db");
    if (fx_build(db_path)) return -1;
    hs_qerr err;
    if (hs_qstore_sqlite_open(&st, db_path, &err)) {
        fprintf(stderr, "open: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    hs_qstore_free(st);
    char p[600];
    unlink(db_path);
    snprintf(p, sizeof p, "%s-wal", db_path);
    unlink(p);
    snprintf(p, sizeof p, "%s-shm", db_path);
    unlink(p);
    return 0;
}

static void test_runs_find(void **state)
{
    (void)state;
    static const struct {
        hs_qstore_filter f[2];
        int nf;
        int64_t limit;
        size_t n;
        int64_t first;
    } cases[] = {
        {{{0}}, 0, 100, 2, 2}, /* newest first */
        {{{0}}, 0, 1, 1, 2},
        {{{"version", "1"}}, 1, 100, 1, 1},
        {{{"program", "app"}}, 1, 100, 2, 2}, /* a base name matches the path */
        {{{"program", "app"}, {"version", "2"}}, 2, 100, 1, 2},
        {{{"host", "elsewhere"}}, 1, 100, 0, 0},
        {{{"id", "1"}}, 1, 100, 1, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t *ids;
        size_t n;
        hs_qerr err;
        assert_int_equal(
            st->ops->runs_find(st, cases[i].f, cases[i].nf, cases[i].limit, &ids, &n, &err), 0);
        assert_int_equal(n, cases[i].n);
        if (n) assert_int_equal(ids[0], cases[i].first);
        free(ids);
    }
}

static void test_run_record(void **state)
{
    (void)state;
    hs_qstore_run r;
    hs_qerr err;
    assert_int_equal(st->ops->run(st, 1, &r, &err), 0);
    assert_int_equal(r.id, 1);
    assert_int_equal(r.peak_bytes, FX_PEAK_BYTES);
    assert_int_equal(r.peak_t_ns, FX_PEAK_NS);
    assert_int_equal(r.live_bytes, FX_END_BYTES);
    assert_int_equal(r.live_count, FX_END_COUNT);
    assert_int_equal(r.granularity_ns, 100000000);
    assert_int_equal(r.keyframe_every, 4);
    assert_int_equal(r.sample_bytes, 1);
    assert_int_equal(r.last_bucket, 19);
    assert_int_equal(strlen(r.uuid), 32);
    assert_non_null(strstr(r.program, "app"));
    char prefix[9];
    snprintf(prefix, sizeof prefix, "%s", r.uuid);
    int64_t id = 0;
    int matches = -1;
    assert_int_equal(st->ops->runs_by_uuid(st, prefix, &id, &matches, &err), 0);
    assert_int_equal(matches, 1);
    assert_int_equal(id, 1);
    assert_int_equal(st->ops->runs_by_uuid(st, "ffffffffffffffff", &id, &matches, &err), 0);
    assert_int_equal(matches, 0);
    assert_int_equal(st->ops->run(st, 9, &r, &err), HS_ENOENT);
}

static int label_row(const char *key, const char *value, void *data)
{
    char *out = data;
    size_t n = strlen(out);
    snprintf(out + n, 128 - n, "%s=%s;", key, value);
    return 0;
}

static void test_run_labels(void **state)
{
    (void)state;
    char labels[128] = "";
    hs_qerr err;
    assert_int_equal(st->ops->run_labels(st, 2, label_row, labels, &err), 0);
    assert_string_equal(labels, "version=2;");
}

/* The live bytes and blocks of a state (rows at 0 count for nothing). */
static void state_sum(const hs_qstore_moment *m, int64_t *bytes, int64_t *count)
{
    hs_qstore_live *rows;
    size_t n;
    hs_qerr err;
    assert_int_equal(st->ops->state(st, m, &rows, &n, &err), 0);
    *bytes = *count = 0;
    for (size_t i = 0; i < n; i++) {
        if (rows[i].bytes <= 0 && rows[i].count <= 0) continue;
        *bytes += rows[i].bytes;
        *count += rows[i].count;
    }
    free(rows);
}

static void test_state(void **state)
{
    (void)state;
    static const struct {
        int64_t run;
        int peak;
        int64_t bucket, bytes, count;
    } cases[] = {
        {1, 1, 11, FX_PEAK_BYTES, -1},          /* the peak's own snapshot */
        {1, 0, 19, FX_END_BYTES, FX_END_COUNT}, /* a keyframe (bucket 19) */
        {1, 0, 17, 23000, -1},                  /* keyframe 15 plus two buckets of deltas */
        {2, 0, 19, FX_V2_END_BYTES, -1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        hs_qstore_moment m = {.run = cases[i].run,
                              .granularity_ns = 100000000,
                              .peak = cases[i].peak,
                              .bucket = cases[i].bucket};
        int64_t bytes, count;
        state_sum(&m, &bytes, &count);
        assert_int_equal(bytes, cases[i].bytes);
        if (cases[i].count >= 0) assert_int_equal(count, cases[i].count);
    }
    /* the peak's snapshot holds what the run's record calls its peak */
    for (int64_t run = 1; run <= 2; run++) {
        hs_qstore_run r;
        hs_qerr err;
        assert_int_equal(st->ops->run(st, run, &r, &err), 0);
        int64_t peak = r.peak_bytes, bytes, count;
        hs_qstore_moment m = {.run = run, .granularity_ns = 100000000, .peak = 1, .bucket = 11};
        state_sum(&m, &bytes, &count);
        assert_int_equal(bytes, peak);
    }
}

/* The exact moment: bucket 9's state plus the events of (1.0 s, 1.07 s]:
 * tmp_alloc at 1.02 s and its free at 1.06 s, leak_site's block at 1.05 s
 * and big_alloc's at 1.07 s. */
static void test_state_exact(void **state)
{
    (void)state;
    hs_qstore_moment end9 = {.run = 1, .granularity_ns = 100000000, .bucket = 9};
    hs_qstore_moment exact = end9;
    exact.exact = 1;
    exact.at_ns = 1070000000;
    int64_t b9, c9, bx, cx;
    state_sum(&end9, &b9, &c9);
    state_sum(&exact, &bx, &cx);
    assert_int_equal(bx - b9, 1000 + 100000);
    assert_int_equal(cx - c9, 2);
}

static int heap_row(const hs_qstore_heap *h, void *data)
{
    hs_qstore_heap *last = data;
    assert_true(h->bucket > last->bucket);
    *last = *h;
    return 0;
}

static int stop_at_first(const hs_qstore_heap *h, void *data)
{
    (void)h;
    (void)data;
    return HS_ECORRUPT; /* a callback's code comes back as it is */
}

static void test_heap_series(void **state)
{
    (void)state;
    hs_qstore_heap last = {.bucket = -1};
    hs_qerr err;
    assert_int_equal(st->ops->heap_series(st, 1, heap_row, &last, &err), 0);
    assert_int_equal(last.bucket, 19);
    assert_int_equal(last.live_bytes, FX_END_BYTES);
    assert_int_equal(last.live_count, FX_END_COUNT);
    assert_int_equal(st->ops->heap_series(st, 1, stop_at_first, NULL, &err), HS_ECORRUPT);
}

static int delta_row(int64_t bucket, int64_t trace, int64_t bytes, void *data)
{
    (void)bucket;
    (void)trace;
    *(int64_t *)data += bytes;
    return 0;
}

static void test_deltas_and_sums(void **state)
{
    (void)state;
    int64_t sum = 0;
    hs_qerr err;
    assert_int_equal(st->ops->deltas(st, 1, -1, delta_row, &sum, &err), 0);
    assert_int_equal(sum, FX_END_BYTES);
    hs_qstore_tsums t;
    assert_int_equal(st->ops->trace_sums(st, 1, INT64_MAX, &t, &err), 0);
    int64_t live = 0, rows = 0;
    for (size_t i = 0; i < t.n; i++) {
        live += t.rows[i].s.bytes;
        rows += t.rows[i].s.rows;
        if (i) assert_true(t.rows[i - 1].s.first <= t.rows[i].s.first);
    }
    assert_int_equal(live, FX_END_BYTES);
    assert_int_equal(rows, t.delta_rows);
    free(t.rows);
}

static void test_stacks(void **state)
{
    (void)state;
    hs_qstore_moment m = {.run = 1, .granularity_ns = 100000000, .bucket = 19};
    hs_qstore_live *rows;
    size_t n;
    hs_qerr err;
    assert_int_equal(st->ops->state(st, &m, &rows, &n, &err), 0);
    assert_true(n > 0);
    for (size_t i = 0; i < n; i++) {
        int64_t node = rows[i].trace, root_frame = 0;
        int depth = 0;
        while (node) {
            hs_qstore_node nd;
            assert_int_equal(st->ops->node(st, node, &nd, &err), 0);
            assert_true(nd.depth >= 1);
            root_frame = nd.frame;
            node = nd.parent;
            depth++;
        }
        assert_true(depth >= 2);
        hs_qstore_frame f;
        assert_int_equal(st->ops->frame(st, root_frame, &f, &err), 0);
        assert_string_equal(f.function, "main"); /* every fixture stack starts there */
    }
    free(rows);
    hs_qstore_frame none;
    assert_int_equal(st->ops->frame(st, 1 << 30, &none, &err), 0);
    assert_string_equal(none.function, "");
}

typedef struct ev_count {
    int64_t allocs, frees, live;
} ev_count;

static int event_row(const hs_qstore_event *e, void *data)
{
    ev_count *c = data;
    if (e->is_free) {
        c->frees++;
        c->live -= (int64_t)e->weight;
    } else {
        c->allocs++;
        c->live += (int64_t)e->weight;
    }
    return 0;
}

static int size_row(int64_t bucket, int64_t allocs, int64_t bytes, void *data)
{
    (void)bucket;
    int64_t *sum = data;
    sum[0] += allocs;
    sum[1] += bytes;
    return 0;
}

static void test_events_and_sizes(void **state)
{
    (void)state;
    ev_count c = {0};
    hs_qerr err;
    assert_int_equal(st->ops->events(st, 1, HS_QSTORE_FROM_START, INT64_MAX, event_row, &c, &err),
                     0);
    assert_int_equal(c.allocs + c.frees, 63);
    assert_int_equal(c.live, FX_END_BYTES);
    ev_count span = {0}; /* (1.0 s, 1.07 s], as in test_state_exact */
    assert_int_equal(st->ops->events(st, 1, 1000000001, 1070000000, event_row, &span, &err), 0);
    assert_int_equal(span.allocs, 3);
    assert_int_equal(span.frees, 1);
    /* every allocation as the collector counted them (fixture.c's buckets) */
    int64_t sum[2] = {0};
    assert_int_equal(st->ops->sizes(st, 1, size_row, sum, &err), 0);
    assert_int_equal(sum[0], 40 + 21 + 1 + 1);
    assert_int_equal(sum[1], 12000 + 21000 + 5000 + 100000);
}

static void test_sql(void **state)
{
    (void)state;
    static const char body[] = "{\"sql\": \"SELECT count(*) FROM runs\"}";
    json_t *j = NULL;
    hs_qerr err;
    assert_non_null(st->ops->sql);
    assert_int_equal(st->ops->sql(st, body, sizeof body - 1, &j, &err), 0);
    json_t *rows = json_object_get(j, "rows");
    assert_int_equal(json_integer_value(json_array_get(json_array_get(rows, 0), 0)), 2);
    json_decref(j);
    st->ops->idle(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_runs_find),        cmocka_unit_test(test_run_record),
        cmocka_unit_test(test_run_labels),       cmocka_unit_test(test_state),
        cmocka_unit_test(test_state_exact),      cmocka_unit_test(test_heap_series),
        cmocka_unit_test(test_deltas_and_sums),  cmocka_unit_test(test_stacks),
        cmocka_unit_test(test_events_and_sizes), cmocka_unit_test(test_sql),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

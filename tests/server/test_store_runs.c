/* test_store_runs: who owns an in-memory run of hs_store, on a real SQLite
 * file. The writer keeps a connection's run across transactions; the store
 * may replace that run meanwhile (a broken run resumed by a newer
 * connection before the older one's DETACH). The holder of a reference must
 * then see that its run is no longer the store's by asking the run itself:
 * hs_store_has_run(), which this replaces, searched the store's list for
 * the pointer, which is wrong as soon as a later run is allocated at the
 * freed run's address. And the memory must live until the last reference
 * goes (the sanitizer tree checks use after free and leaks). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hs_error.h"
#include "hs_proto.h"
#include "hs_store.h"
#include "hs_testkit.h"

static hs_str str(const char *s)
{
    return (hs_str){s, strlen(s)};
}

static void hello(hs_hello *h, uint8_t tag, uint64_t flags)
{
    memset(h, 0, sizeof *h);
    memset(h->run_id, tag, 16);
    h->flags = flags;
    h->pid = 42;
    h->ppid = 1;
    h->start_unix_ns = 1700000000000000000ull;
    h->sample_bytes = 1;
    h->max_depth = 64;
    h->rss_interval_ms = 100;
    h->program = str("/bin/prog");
    h->hostname = str("host");
    h->collector_version = str("test");
    h->resume_key = str("store-runs-key-1");
}

/* One EVENTS frame: an allocation of stack 1 (not defined: refused) or an
 * empty frame (accepted). */
static int frame(hs_store *s, hs_run *r, uint64_t seq, int undefined_stack)
{
    uint8_t buf[64];
    hs_wr wr;
    hs_wr_init(&wr, buf, sizeof buf);
    hs_wr_varint(&wr, 1000);
    if (undefined_stack) hs_event_put(&wr, 0, 1, 0, 64, 64);
    char err[256];
    return hs_store_run_frame(s, r, seq, HS_FRAME_EVENTS, buf, hs_wr_len(&wr), err, sizeof err);
}

static void test_replaced_run_stays_valid(void **state)
{
    (void)state;
    char dir[600], db[700], err[256];
    tk_tmpdir(dir, sizeof dir, "store-runs");
    snprintf(db, sizeof db, "%s/hs.db", dir);
    hs_store *s;
    assert_int_equal(hs_store_open(&s, db, NULL, err, sizeof err), 0);

    /* connection A opens the run and keeps it, as the writer does */
    hs_hello h;
    hello(&h, 0x5a, 0);
    hs_run *a;
    assert_int_equal(hs_store_begin(s), 0);
    assert_int_equal(hs_store_run_open(s, &a, &h, err, sizeof err), 0);
    hs_run_ref(a);
    hs_run_set_holder(a, 1);
    assert_int_equal(frame(s, a, 0, 0), 0);
    assert_int_equal(hs_store_commit(s), 0);
    assert_int_equal(hs_run_next_seq(a), 1);
    assert_false(hs_run_released(a));

    /* a failed transaction breaks it */
    assert_int_equal(hs_store_begin(s), 0);
    assert_int_equal(frame(s, a, 1, 0), 0);
    hs_store_rollback(s);
    assert_true(hs_run_broken(a));
    assert_false(hs_run_released(a));

    /* connection B resumes the run before A's DETACH: the store replaces
     * the broken run with one rebuilt from the database */
    hello(&h, 0x5a, HS_HELLO_RESUMED);
    hs_run *b;
    assert_int_equal(hs_store_begin(s), 0);
    assert_int_equal(hs_store_run_open(s, &b, &h, err, sizeof err), 0);
    hs_run_ref(b);
    hs_run_set_holder(b, 2);
    assert_int_equal(hs_store_commit(s), 0);
    /* A's handle is still readable and says it is not the store's any
     * more, even when B's run reuses its address */
    assert_true(hs_run_released(a));
    assert_false(hs_run_released(b));
    assert_int_equal(hs_run_holder(a), 1);
    assert_int_equal(hs_run_holder(b), 2);
    assert_int_equal(hs_run_next_seq(b), 1); /* the committed frame only */
    assert_memory_equal(hs_run_uuid(a), hs_run_uuid(b), 16);
    /* releasing a released run again is harmless */
    hs_store_run_release(s, a);
    hs_run_unref(a); /* A's DETACH: the memory goes now */

    /* B goes on; a frame the store refuses leaves no trace */
    assert_int_equal(hs_store_begin(s), 0);
    assert_int_equal(frame(s, b, 1, 0), 0);
    assert_int_equal(frame(s, b, 2, 1), HS_EPROTO);
    assert_int_equal(hs_store_commit(s), 0);
    assert_int_equal(hs_run_next_seq(b), 2);

    /* released by the store while B still holds it: valid until unref */
    hs_store_run_release(s, b);
    assert_true(hs_run_released(b));
    assert_int_equal(hs_run_next_seq(b), 2);
    hs_run_unref(b);

    /* a run held past the store's end is freed with its last reference */
    hello(&h, 0x6b, 0);
    hs_run *c;
    assert_int_equal(hs_store_begin(s), 0);
    assert_int_equal(hs_store_run_open(s, &c, &h, err, sizeof err), 0);
    hs_run_ref(c);
    assert_int_equal(hs_store_commit(s), 0);
    hs_store_free(s);
    assert_true(hs_run_released(c));
    hs_run_unref(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replaced_run_stays_valid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_writer_conns: the writer forgets a connection when it ends. Its map
 * of connections kept an entry for every connection ever seen (RSS 4.5 ->
 * 8.5 MB over 52k connections); here thousands of connections come and go
 * through the real writer thread and store, on a real SQLite file, and the
 * writer holds no state for any of them afterwards. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "hs_testkit.h"
#include "hs_writer.h"

static void on_async(uv_async_t *a)
{
    (void)a;
}

/* Waits until a job of kind comes back; frees what comes back. */
static void wait_for(hs_writer *w, int kind)
{
    for (int tries = 0; tries < 60000; tries++) {
        int seen = 0;
        for (hs_wjob *j = hs_writer_take_done(w), *n; j; j = n) {
            n = j->next;
            if (j->kind == HS_WJOB_HELLO) assert_int_equal(j->err, 0);
            seen |= j->kind == kind;
            hs_wjob_free(j);
        }
        if (seen) return;
        usleep(1000);
    }
    fail_msg("the writer did not answer");
}

static void hello_job(hs_writer *w, uint64_t conn, uint32_t n)
{
    uint8_t id[16] = {0};
    memcpy(id, &n, sizeof n);
    id[15] = 0x77;
    tk_buf b = {0};
    tk_hello(&b, id, 1, 0, NULL);
    /* the payload: after the frame's type byte and 4-byte length */
    hs_wjob *j = hs_wjob_new(HS_WJOB_HELLO, conn, NULL);
    assert_int_equal(hs_wjob_set_data(j, b.p + 5, b.len - 5), 0);
    hs_writer_submit(w, j);
    tk_buf_free(&b);
}

static void test_conns_forgotten(void **state)
{
    (void)state;
    char dir[600], db[700], err[512];
    tk_tmpdir(dir, sizeof dir, "writer-conns");
    snprintf(db, sizeof db, "%s/hs.db", dir);
    hs_store *s;
    assert_int_equal(hs_store_open(&s, db, NULL, err, sizeof err), 0);
    uv_loop_t loop;
    uv_async_t async;
    assert_int_equal(uv_loop_init(&loop), 0);
    uv_async_init(&loop, &async, on_async);
    hs_writer *w;
    hs_writer_config cfg = {.grace_ns = 3600ull * 1000000000ull};
    assert_int_equal(hs_writer_start(&w, s, &cfg, &async), 0);
    enum { ROUNDS = 20, PER_ROUND = 250 };
    uint64_t conn = 0;
    for (uint32_t r = 0; r < ROUNDS; r++) {
        for (uint32_t i = 0; i < PER_ROUND; i++) hello_job(w, conn + i + 1, r * PER_ROUND + i);
        hs_writer_submit(w, hs_wjob_new(HS_WJOB_SYNC, 0, NULL));
        wait_for(w, HS_WJOB_SYNC);
        assert_int_equal(hs_writer_conns(w), PER_ROUND); /* all of them open */
        for (uint32_t i = 0; i < PER_ROUND; i++)
            hs_writer_submit(w, hs_wjob_new(HS_WJOB_DETACH, conn + i + 1, NULL));
        hs_writer_submit(w, hs_wjob_new(HS_WJOB_SYNC, 0, NULL));
        wait_for(w, HS_WJOB_SYNC);
        conn += PER_ROUND;
        assert_int_equal(hs_writer_conns(w), 0);
    }
    hs_writer_submit(w, hs_wjob_new(HS_WJOB_STOP, 0, NULL));
    wait_for(w, HS_WJOB_STOP);
    hs_writer_join(w);
    uv_close((uv_handle_t *)&async, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conns_forgotten),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

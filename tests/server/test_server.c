/* Integration tests of heapstore-server: the real binary on 127.0.0.1 with
 * an ephemeral port and a fresh database file, fed with streams made by the
 * common encoders, checked by reading the database with SQLite.
 *
 * The known workload: four stacks, two of them symbolizing identically (so
 * they must share a trace), allocations and frees with sizes and weights
 * drawn from a fixed seed, over ~1 s with 10 ms buckets. A model computes
 * what the rollups must say: per trace live bytes and count at the end of
 * every bucket, the peak, its time and the state at the peak. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "hs_error.h"
#include "hs_evcodec.h"
#include "hs_testkit.h"

#define G_NS    10000000ull /* --granularity 10ms */
#define Q_NS    1000000ull  /* the server's event time quantum (HS_STORE_EVENT_TIME_NS) */
#define NTR     3           /* distinct traces of the workload */
#define NSTACKS 4
#define MAXB    256

/* stack id -> model trace: stacks 1 and 3 symbolize the same. */
static const int stack_trace[NSTACKS + 1] = {-1, 0, 1, 0, 2};
static const uint64_t stack_pcs[NSTACKS + 1][3] = {{0}, {1, 2, 3}, {4, 2, 3}, {6, 7, 3}, {5}};
static const uint32_t stack_depth[NSTACKS + 1] = {0, 3, 3, 3, 1};

typedef struct model {
    tk_event *ev;
    size_t nev;
    uint64_t allocs, frees;
    int nb; /* buckets 0 .. nb-1 */
    int64_t bytes[MAXB][NTR];
    int64_t count[MAXB][NTR]; /* rounded */
    int64_t total[MAXB];
    int seen[MAXB]; /* the bucket had events */
    int64_t peak;
    uint64_t peak_t;
    int64_t peak_bytes[NTR], peak_count[NTR];
} model;

static uint64_t rng_state;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* What the server must compute from m->ev[0 .. n): counts, the state at
 * each bucket's end, the peak and its state (the peak's time as the server
 * keeps it, rounded to the quantum). */
static void model_fold(model *m, size_t n)
{
    int64_t bytes[NTR] = {0};
    double count[NTR] = {0};
    int64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        const tk_event e = m->ev[i];
        if (e.is_free)
            m->frees++;
        else
            m->allocs++;
        int tr = stack_trace[e.stack];
        double c = (double)e.weight / (double)e.size;
        if (e.is_free) {
            bytes[tr] -= (int64_t)e.weight;
            count[tr] -= c;
            total -= (int64_t)e.weight;
        } else {
            bytes[tr] += (int64_t)e.weight;
            count[tr] += c;
            total += (int64_t)e.weight;
            if (total > m->peak) {
                m->peak = total;
                m->peak_t = e.t - e.t % Q_NS; /* times are kept to the quantum */
                for (int t = 0; t < NTR; t++) {
                    m->peak_bytes[t] = bytes[t];
                    m->peak_count[t] = llround(count[t]);
                }
            }
        }
        int b = (int)(e.t / G_NS);
        assert_true(b < MAXB);
        m->seen[b] = 1;
        if (b + 1 > m->nb) m->nb = b + 1;
        /* The state at the end of bucket b (overwritten until it ends). */
        for (int bb = b; bb < MAXB; bb++) {
            for (int t = 0; t < NTR; t++) {
                m->bytes[bb][t] = bytes[t];
                m->count[bb][t] = llround(count[t]);
            }
            m->total[bb] = total;
        }
    }
    m->nev = n;
}

static void model_build(model *m, size_t n, uint64_t seed)
{
    memset(m, 0, sizeof *m);
    rng_state = seed;
    m->ev = calloc(n, sizeof *m->ev);
    tk_event *live = calloc(n, sizeof *live);
    size_t nlive = 0;
    for (size_t i = 0; i < n; i++) {
        tk_event e = {.t = 1000 + i * 450000 + (rnd() % 1000)};
        if (nlive && (rnd() % 100) < (i < n / 2 ? 35 : 60)) {
            size_t k = rnd() % nlive;
            e = (tk_event){.t = e.t,
                           .stack = live[k].stack,
                           .is_free = 1,
                           .size = live[k].size,
                           .weight = live[k].weight};
            live[k] = live[--nlive];
        } else {
            e.stack = 1 + rnd() % NSTACKS;
            e.size = 1 + rnd() % 5000;
            e.weight = e.size + ((rnd() % 3) ? 0 : rnd() % 3000);
            live[nlive++] = e;
        }
        /* Keep times non-decreasing (the jitter above could reorder). */
        if (i && e.t < m->ev[i - 1].t) e.t = m->ev[i - 1].t;
        m->ev[i] = e;
    }
    free(live);
    model_fold(m, n);
}

/* An every-allocation program's loop: the same allocations and frees over
 * and over (a block kept every 7 rounds), an event every 3 us. */
static void model_repetitive(model *m, size_t n)
{
    memset(m, 0, sizeof *m);
    m->ev = calloc(n, sizeof *m->ev);
    static const tk_event round[] = {
        {0, 1, 0, 24, 24},     {0, 2, 0, 100, 100}, {0, 1, 1, 24, 24},
        {0, 4, 0, 4096, 4096}, {0, 2, 1, 100, 100}, {0, 4, 1, 4096, 4096},
    };
    for (size_t i = 0; i < n; i++) {
        m->ev[i] = round[i % 6];
        if (i % 42 == 41) m->ev[i] = (tk_event){0, 3, 0, 40, 40}; /* kept */
        m->ev[i].t = 1000 + 3000 * i;
    }
    model_fold(m, n);
}

/* The frames after HELLO: symbols, stacks, events in frames of per_frame,
 * BYE. */
static void model_frames(const model *m, tk_buf *b, size_t per_frame, int with_bye)
{
    tk_symbols(b, 0, 7, 5);
    for (int s = 1; s <= NSTACKS; s++) tk_stack(b, (uint64_t)s, stack_pcs[s], stack_depth[s]);
    for (size_t i = 0; i < m->nev; i += per_frame) {
        size_t k = m->nev - i < per_frame ? m->nev - i : per_frame;
        tk_events(b, m->ev + i, k);
    }
    tk_extras(b);
    if (with_bye) tk_bye(b, m->ev[m->nev - 1].t + 1000, m->allocs, m->frees);
}

/* ---- database helpers -------------------------------------------------- */

static sqlite3 *db_open(const char *path)
{
    sqlite3 *db;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_busy_timeout(db, 30000);
    return db;
}

static char *q_text(sqlite3 *db, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *sql = sqlite3_vmprintf(fmt, ap);
    va_end(ap);
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    char *v = NULL;
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
        v = strdup((const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    sqlite3_free(sql);
    return v;
}

static int64_t run_id_of(sqlite3 *db, uint8_t tag)
{
    return tk_qh(db, "SELECT id FROM runs WHERE hex(uuid) = '%02X%s'", tag,
                 "000000000000000000000000000000");
}

/* The state at the end of bucket B of run, for trace: keyframe + deltas. */
static void state_at(sqlite3 *db, int64_t run, int64_t trace, int B, int64_t *bytes, int64_t *count)
{
    int64_t kb = tk_qh(db,
                       "SELECT coalesce(max(bucket), -1) FROM snapshots WHERE run = %lld AND "
                       "kind = 1 AND bucket <= %d",
                       (long long)run, B);
    int64_t kbytes = 0, kcount = 0;
    if (kb >= 0) {
        kbytes = tk_qh(db,
                       "SELECT coalesce(sum(bytes), 0) FROM snapshots WHERE run = %lld AND "
                       "kind = 1 AND bucket = %lld AND trace = %lld",
                       (long long)run, (long long)kb, (long long)trace);
        kcount = tk_qh(db,
                       "SELECT coalesce(sum(count), 0) FROM snapshots WHERE run = %lld AND "
                       "kind = 1 AND bucket = %lld AND trace = %lld",
                       (long long)run, (long long)kb, (long long)trace);
    }
    *bytes = kbytes + tk_qh(db,
                            "SELECT coalesce(sum(bytes), 0) FROM snapshots WHERE run = %lld AND "
                            "kind = 0 AND bucket > %lld AND bucket <= %d AND trace = %lld",
                            (long long)run, (long long)kb, B, (long long)trace);
    *count = kcount + tk_qh(db,
                            "SELECT coalesce(sum(count), 0) FROM snapshots WHERE run = %lld AND "
                            "kind = 0 AND bucket > %lld AND bucket <= %d AND trace = %lld",
                            (long long)run, (long long)kb, B, (long long)trace);
}

/* Everything the model says about a finished run holds in the database. */
static void check_run(const char *path, uint8_t tag, const model *m, const char *state)
{
    sqlite3 *db = db_open(path);
    int64_t run = run_id_of(db, tag);
    assert_true(run > 0);
    char *st = q_text(db, "SELECT state FROM runs WHERE id = %lld", (long long)run);
    assert_string_equal(st, state);
    free(st);
    assert_int_equal(tk_qh(db, "SELECT alloc_events FROM runs WHERE id = %lld", (long long)run),
                     m->allocs);
    assert_int_equal(tk_qh(db, "SELECT free_events FROM runs WHERE id = %lld", (long long)run),
                     m->frees);
    assert_int_equal(tk_qh(db, "SELECT sum(n_events) FROM events WHERE run = %lld", (long long)run),
                     m->nev);
    assert_int_equal(tk_qh(db, "SELECT peak_bytes FROM runs WHERE id = %lld", (long long)run),
                     m->peak);
    assert_int_equal(tk_qh(db, "SELECT peak_t_ns FROM runs WHERE id = %lld", (long long)run),
                     m->peak_t);
    assert_int_equal(tk_qh(db, "SELECT live_bytes FROM runs WHERE id = %lld", (long long)run),
                     m->total[m->nb - 1]);
    /* Traces: stacks 1 and 3 are the same symbolized stack. */
    int64_t trace[NTR];
    for (int s = 1; s <= NSTACKS; s++) {
        int64_t t = tk_qh(db, "SELECT trace FROM run_stacks WHERE run = %lld AND stack_id = %d",
                          (long long)run, s);
        assert_true(t > 0);
        trace[stack_trace[s]] = t;
    }
    assert_int_equal(
        tk_qh(db, "SELECT trace FROM run_stacks WHERE run = %lld AND stack_id = 1", (long long)run),
        tk_qh(db, "SELECT trace FROM run_stacks WHERE run = %lld AND stack_id = 3",
              (long long)run));
    assert_int_equal(tk_qh(db, "SELECT depth FROM traces WHERE id = %lld", (long long)trace[0]), 3);
    /* Every bucket's state from keyframe + deltas. */
    for (int b = 0; b < m->nb; b++) {
        for (int t = 0; t < NTR; t++) {
            int64_t bytes, count;
            state_at(db, run, trace[t], b, &bytes, &count);
            if (bytes != m->bytes[b][t] || count != m->count[b][t])
                fprintf(stderr, "bucket %d trace %d: %lld/%lld, want %lld/%lld\n", b, t,
                        (long long)bytes, (long long)count, (long long)m->bytes[b][t],
                        (long long)m->count[b][t]);
            assert_int_equal(bytes, m->bytes[b][t]);
            assert_int_equal(count, m->count[b][t]);
        }
        if (m->seen[b])
            assert_int_equal(tk_qh(db,
                                   "SELECT live_bytes FROM heap_series WHERE run = %lld AND "
                                   "bucket = %d",
                                   (long long)run, b),
                             m->total[b]);
    }
    /* Keyframes every 32 buckets and at the end. */
    assert_true(tk_qh(db,
                      "SELECT count(DISTINCT bucket) FROM snapshots WHERE run = %lld AND kind = 1",
                      (long long)run) >= m->nb / 32);
    /* The state at the peak. */
    for (int t = 0; t < NTR; t++) {
        assert_int_equal(tk_qh(db,
                               "SELECT coalesce(sum(bytes), 0) FROM snapshots WHERE run = %lld "
                               "AND kind = 2 AND trace = %lld",
                               (long long)run, (long long)trace[t]),
                         m->peak_bytes[t]);
        assert_int_equal(tk_qh(db,
                               "SELECT coalesce(sum(count), 0) FROM snapshots WHERE run = %lld "
                               "AND kind = 2 AND trace = %lld",
                               (long long)run, (long long)trace[t]),
                         m->peak_count[t]);
    }
    assert_int_equal(tk_qh(db,
                           "SELECT count(DISTINCT bucket) FROM snapshots WHERE run = %lld AND "
                           "kind = 2",
                           (long long)run),
                     1);
    assert_int_equal(tk_qh(db, "SELECT bucket FROM snapshots WHERE run = %lld AND kind = 2 LIMIT 1",
                           (long long)run),
                     (int64_t)(m->peak_t / G_NS));
    sqlite3_close(db);
}

static void run_uuid(uint8_t out[16], uint8_t tag)
{
    memset(out, 0, 16);
    out[0] = tag;
}

static const char *const base_args[] = {"--granularity", "10ms", "--grace", "300ms", NULL};

/* Streams a whole run on one connection and waits for the final ACK. */
static void send_run(int port, uint8_t tag, const model *m, size_t per_frame)
{
    uint8_t id[16];
    run_uuid(id, tag);
    tk_buf b = {0};
    tk_header(&b);
    tk_hello(&b, id, 0, 0, NULL);
    size_t start = b.len;
    model_frames(m, &b, per_frame, 1);
    size_t *offs;
    size_t nframes = tk_frame_offsets(&b, start, &offs);
    free(offs);
    int fd = tk_connect(port);
    assert_true(fd >= 0);
    assert_int_equal(tk_send(fd, b.p, b.len), 0);
    uint64_t got = 0;
    assert_int_equal(tk_wait_ack(fd, nframes, &got, NULL, 0, 30000), 0);
    assert_int_equal(got, nframes);
    /* After the ACK of BYE the server closes. */
    assert_int_equal(tk_wait_closed(fd, 30000), 1);
    close(fd);
    tk_buf_free(&b);
}

/* ---- tests ------------------------------------------------------------- */

/* An every-allocation workload: its 200000 events in one segment (codec
 * version 2) of a few hundredths of a byte an event, which decodes to the
 * events sent (times rounded to the quantum, the same order), with the
 * counts, peak and bucket states the live rollups computed. */
static void test_segments_every_allocation(void **state)
{
    (void)state;
    char dir[600], db[700];
    tk_tmpdir(dir, sizeof dir, "segments");
    snprintf(db, sizeof db, "%s/hs.db", dir);
    tk_server srv;
    assert_int_equal(tk_server_start(&srv, db, 0, base_args), 0);
    model m;
    enum { N = 200000 };
    model_repetitive(&m, N);
    send_run(srv.port, 9, &m, 500);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
    check_run(db, 9, &m, "ended");
    sqlite3 *sdb = db_open(db);
    int64_t run = run_id_of(sdb, 9);
    assert_int_equal(tk_qh(sdb, "SELECT count(*) FROM events WHERE run = %lld", (long long)run), 1);
    assert_int_equal(tk_qh(sdb, "SELECT count(*) FROM events_tail"), 0);
    assert_true(tk_qh(sdb, "SELECT length(data) FROM events WHERE run = %lld", (long long)run) <
                N / 20);
    assert_int_equal(tk_qh(sdb, "SELECT t_first_ns FROM events WHERE run = %lld", (long long)run),
                     m.ev[0].t - m.ev[0].t % Q_NS);
    assert_int_equal(tk_qh(sdb, "SELECT t_last_ns FROM events WHERE run = %lld", (long long)run),
                     m.ev[N - 1].t - m.ev[N - 1].t % Q_NS);
    sqlite3_stmt *st;
    assert_int_equal(
        sqlite3_prepare_v2(sdb, "SELECT data FROM events WHERE run = ?1", -1, &st, NULL),
        SQLITE_OK);
    sqlite3_bind_int64(st, 1, run);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    hs_evdec dec = {0};
    assert_int_equal(
        hs_evdec_open(&dec, sqlite3_column_blob(st, 0), (size_t)sqlite3_column_bytes(st, 0)), 0);
    hs_event e;
    int64_t live = 0;
    for (size_t i = 0; i < N; i++) {
        assert_int_equal(hs_evdec_next(&dec, &e), 1);
        assert_int_equal(e.t_ns, m.ev[i].t - m.ev[i].t % Q_NS);
        assert_int_equal(e.is_free, m.ev[i].is_free);
        assert_int_equal(e.size, m.ev[i].size);
        live += e.is_free ? -(int64_t)e.weight : (int64_t)e.weight;
    }
    assert_int_equal(hs_evdec_next(&dec, &e), 0);
    assert_int_equal(live, m.total[m.nb - 1]);
    hs_evdec_free(&dec);
    sqlite3_finalize(st);
    sqlite3_close(sdb);
    free(m.ev);
}

static void test_known_workload(void **state)
{
    (void)state;
    char dir[600], db[700];
    tk_tmpdir(dir, sizeof dir, "known");
    snprintf(db, sizeof db, "%s/hs.db", dir);
    tk_server srv;
    assert_int_equal(tk_server_start(&srv, db, 0, base_args), 0);
    model m;
    model_build(&m, 2400, 12345);
    send_run(srv.port, 1, &m, 100);
    check_run(db, 1, &m, "ended");
    sqlite3 *sdb = db_open(db);
    int64_t run = run_id_of(sdb, 1);
    assert_int_equal(tk_qh(sdb, "SELECT clean_exit FROM runs WHERE id = %lld", (long long)run), 1);
    assert_int_equal(
        tk_qh(sdb, "SELECT bye_alloc_events FROM runs WHERE id = %lld", (long long)run), m.allocs);
    char *argv = q_text(sdb, "SELECT argv FROM runs WHERE id = %lld", (long long)run);
    assert_string_equal(argv, "[\"testprog\",\"--quote=\\\"x\\\"\"]");
    free(argv);
    char *label = q_text(sdb, "SELECT value FROM run_labels WHERE run = %lld AND key = 'env'",
                         (long long)run);
    assert_string_equal(label, "test");
    free(label);
    /* MAPPINGS, PROCESS, SIZES, DROPS (tk_extras). */
    assert_int_equal(
        tk_qh(sdb, "SELECT count(*) FROM mappings WHERE run = %lld AND t_ns = 5", (long long)run),
        2);
    assert_int_equal(tk_qh(sdb,
                           "SELECT hex(build_id) = '0102' FROM mappings WHERE run = %lld "
                           "AND start = %lld",
                           (long long)run, 0x400000ll),
                     1);
    assert_int_equal(
        tk_qh(sdb, "SELECT sum(rss_bytes) FROM process_samples WHERE run = %lld", (long long)run),
        6000);
    assert_int_equal(
        tk_qh(sdb, "SELECT bytes FROM size_hist WHERE run = %lld AND bucket = 4", (long long)run),
        160);
    assert_int_equal(tk_qh(sdb,
                           "SELECT dropped_alloc_events * 100 + stacks_truncated FROM runs "
                           "WHERE id = %lld",
                           (long long)run),
                     703);
    sqlite3_close(sdb);
    /* A second run of the same program shares frames and traces. */
    send_run(srv.port, 2, &m, 300);
    check_run(db, 2, &m, "ended");
    sdb = db_open(db);
    assert_int_equal(tk_qh(sdb, "SELECT count(*) FROM frames"), 5);
    assert_int_equal(tk_qh(sdb, "SELECT count(*) FROM traces"), 5);
    sqlite3_close(sdb);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
    assert_true(tk_log_contains(&srv, "stopped cleanly"));
    free(m.ev);
}

typedef struct conc_arg {
    int port;
    uint8_t tag;
    const model *m;
} conc_arg;

static void *conc_main(void *p)
{
    conc_arg *a = p;
    send_run(a->port, a->tag, a->m, 50);
    return NULL;
}

static void test_concurrent_runs(void **state)
{
    (void)state;
    char dir[600], db[700];
    tk_tmpdir(dir, sizeof dir, "concurrent");
    snprintf(db, sizeof db, "%s/hs.db", dir);
    tk_server srv;
    assert_int_equal(tk_server_start(&srv, db, 0, base_args), 0);
    enum { N = 16 };
    model m;
    model_build(&m, 2000, 777);
    pthread_t th[N];
    conc_arg args[N];
    for (int i = 0; i < N; i++) {
        args[i] = (conc_arg){srv.port, (uint8_t)(10 + i), &m};
        assert_int_equal(pthread_create(&th[i], NULL, conc_main, &args[i]), 0);
    }
    for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < N; i++) check_run(db, (uint8_t)(10 + i), &m, "ended");
    sqlite3 *sdb = db_open(db);
    assert_int_equal(tk_qh(sdb, "SELECT sum(n_events) FROM events"), (int64_t)N * 2000);
    assert_int_equal(tk_qh(sdb, "SELECT count(*) FROM runs WHERE state = 'ended'"), N);
    sqlite3_close(sdb);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
    free(m.ev);
}

/* A connection that sends its bytes and must be closed with a log line. */
typedef struct bad_case {
    const char *name;
    const char *log; /* what the log line must say */
    void (*build)(tk_buf *b);
    int half_close; /* shutdown(SHUT_WR) after sending */
} bad_case;

static void start_stream(tk_buf *b, uint8_t tag)
{
    uint8_t id[16];
    run_uuid(id, tag);
    tk_header(b);
    tk_hello(b, id, 0, 0, NULL);
}

static void b_magic(tk_buf *b)
{
    tk_buf_append(b, "\x89XSP\r\n\x1a\n\x01", 9);
}
static void b_trunc(tk_buf *b)
{
    start_stream(b, 0x61);
    tk_symbols(b, 0, 3, 5);
    b->len -= 5; /* the frame stops short */
}
static void b_absurd(tk_buf *b)
{
    start_stream(b, 0x62);
    tk_buf_append(b, "\x05\xff\xff\xff\x7f", 5);
    tk_buf_append(b, "xxxxxxxxxxxxxxxxxxxx", 20);
}
static void b_badlen(tk_buf *b)
{
    start_stream(b, 0x63);
    tk_buf_append(b, "\x05\x80\x80\x80\x80\x80\x80", 7);
}
static void b_unknown(tk_buf *b)
{
    start_stream(b, 0x64);
    tk_raw_frame(b, 0x33, "abc", 3);
}
static void b_varint(tk_buf *b)
{
    start_stream(b, 0x65);
    tk_symbols(b, 0, 3, 5);
    uint64_t pcs[] = {1, 2};
    tk_stack(b, 1, pcs, 2);
    tk_raw_frame(b, 0x05, "\x01\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01", 12);
}
static void b_stack(tk_buf *b)
{
    start_stream(b, 0x66);
    tk_symbols(b, 0, 3, 5);
    uint64_t pcs[] = {1, 2};
    tk_stack(b, 1, pcs, 2);
    tk_event ev[] = {{10, 1, 0, 100, 100}, {20, 99, 0, 100, 100}};
    tk_events(b, ev, 2);
}
static void b_pc(tk_buf *b)
{
    start_stream(b, 0x67);
    tk_symbols(b, 0, 3, 5);
    uint64_t pcs[] = {1, 77};
    tk_stack(b, 1, pcs, 2);
}
static void b_nohello(tk_buf *b)
{
    tk_header(b);
    tk_symbols(b, 0, 3, 5);
}
static void b_twohellos(tk_buf *b)
{
    uint8_t id[16];
    run_uuid(id, 0x68);
    start_stream(b, 0x69);
    tk_hello(b, id, 0, 0, NULL);
}

static void test_malformed_inputs(void **state)
{
    (void)state;
    char dir[600], db[700];
    tk_tmpdir(dir, sizeof dir, "malformed");
    snprintf(db, sizeof db, "%s/hs.db", dir);
    tk_server srv;
    assert_int_equal(tk_server_start(&srv, db, 0, base_args), 0);

    /* A good run in progress on its own connection throughout. */
    model m;
    model_build(&m, 2400, 4242);
    uint8_t id[16];
    run_uuid(id, 5);
    tk_buf good = {0};
    tk_header(&good);
    tk_hello(&good, id, 0, 0, NULL);
    size_t start = good.len;
    model_frames(&m, &good, 100, 1);
    size_t *offs;
    size_t nframes = tk_frame_offsets(&good, start, &offs);
    size_t half = offs[nframes / 2];
    int gfd = tk_connect(srv.port);
    assert_true(gfd >= 0);
    assert_int_equal(tk_send(gfd, good.p, half), 0);
    uint64_t got;
    assert_int_equal(tk_wait_ack(gfd, nframes / 2, &got, NULL, 0, 60000), 0);

    static const bad_case cases[] = {
        {"bad magic", "bad magic", b_magic, 0},
        {"truncated frame", "ended inside a frame", b_trunc, 1},
        {"absurd length", "absurd frame length", b_absurd, 0},
        {"bad length varint", "bad frame length varint", b_badlen, 0},
        {"unknown type", "unknown frame type 0x33", b_unknown, 0},
        {"bad varint", "malformed EVENTS frame", b_varint, 0},
        {"undefined stack", "stack id 99 never defined", b_stack, 0},
        {"undefined pc", "pc 0x4d never defined", b_pc, 0},
        {"no hello", "not HELLO", b_nohello, 0},
        {"two hellos", "second HELLO", b_twohellos, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tk_buf b = {0};
        cases[i].build(&b);
        int fd = tk_connect(srv.port);
        assert_true(fd >= 0);
        assert_int_equal(tk_send(fd, b.p, b.len), 0);
        if (cases[i].half_close) shutdown(fd, SHUT_WR);
        int closed = tk_wait_closed(fd, 30000);
        if (!closed) fprintf(stderr, "case '%s' not closed\n", cases[i].name);
        assert_true(closed);
        close(fd);
        uint64_t deadline = tk_now_ms() + 30000;
        while (!tk_log_contains(&srv, cases[i].log) && tk_now_ms() < deadline) usleep(10000);
        if (!tk_log_contains(&srv, cases[i].log))
            fprintf(stderr, "case '%s': no log line with '%s'\n", cases[i].name, cases[i].log);
        assert_true(tk_log_contains(&srv, cases[i].log));
        tk_buf_free(&b);
    }
    /* The good connection goes on, unaffected. */
    assert_int_equal(tk_send(gfd, good.p + half, good.len - half), 0);
    assert_int_equal(tk_wait_ack(gfd, nframes, &got, NULL, 0, 60000), 0);
    close(gfd);
    check_run(db, 5, &m, "ended");
    free(offs);
    tk_buf_free(&good);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
    free(m.ev);
}

/* After a stop with run open, committed frames 0 .. next-1 (0..4 symbols
 * and stacks, then events frames of 50): their events are in the run's open
 * segment (events_tail) and the closed ones before it, no later ones. */
static void check_open_segment(sqlite3 *sdb, int64_t run, int64_t next, size_t nev)
{
    int64_t stored = (next - 5) * 50 < (int64_t)nev ? (next - 5) * 50 : (int64_t)nev;
    assert_int_equal(
        tk_qh(sdb, "SELECT sum(n_events) FROM events_all WHERE run = %lld", (long long)run),
        stored);
    assert_int_equal(
        tk_qh(sdb, "SELECT count(*) FROM events_tail WHERE run = %lld", (long long)run), 1);
}

/* Once the resumed run ended: two segments, the one open at the stop
 * (closed when the run was loaded again) and the one after; none open. */
static void check_closed_segments(const char *db, int64_t run)
{
    sqlite3 *sdb = db_open(db);
    assert_int_equal(tk_qh(sdb, "SELECT count(*) FROM events WHERE run = %lld", (long long)run), 2);
    assert_int_equal(tk_qh(sdb, "SELECT count(*) FROM events_tail"), 0);
    sqlite3_close(sdb);
}

/* A collector that loses its server mid-run: it reconnects (to the restarted
 * server) with HS_HELLO_RESUMED and resends from its oldest unacknowledged
 * frame. sig is how the server goes down. */
static void restart_case(int sig, const char *name)
{
    char dir[600], db[700];
    tk_tmpdir(dir, sizeof dir, name);
    snprintf(db, sizeof db, "%s/hs.db", dir);
    tk_server srv;
    assert_int_equal(tk_server_start(&srv, db, 0, base_args), 0);
    model m;
    model_build(&m, 4000, 99);
    uint8_t id[16];
    run_uuid(id, 7);
    tk_buf frames = {0};
    model_frames(&m, &frames, 50, 1);
    size_t *offs;
    size_t nframes = tk_frame_offsets(&frames, 0, &offs);
    tk_buf head = {0};
    tk_header(&head);
    tk_hello(&head, id, 0, 0, NULL);
    int fd = tk_connect(srv.port);
    assert_int_equal(tk_send(fd, head.p, head.len), 0);
    /* Send 60% of the frames, with no wait for ACKs, then the server dies. */
    size_t upto = nframes * 6 / 10;
    assert_int_equal(tk_send(fd, frames.p, offs[upto]), 0);
    uint64_t acked = 0, got = 0;
    tk_wait_ack(fd, upto / 3, &acked, NULL, 0, 60000);
    assert_true(acked > 0);
    assert_int_equal(tk_server_stop(&srv, sig), sig == SIGKILL ? 128 + SIGKILL : 0);
    /* Whatever ACKs were sent before the end count as acknowledged. */
    got = 0;
    tk_wait_ack(fd, UINT64_MAX, &got, NULL, 0, sig == SIGTERM ? 30000 : 1000);
    if (got > acked) acked = got;
    close(fd);
    /* The database is intact and holds every acknowledged frame. */
    sqlite3 *sdb;
    assert_int_equal(sqlite3_open_v2(db, &sdb, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
    char *ic = q_text(sdb, "PRAGMA integrity_check");
    assert_string_equal(ic, "ok");
    free(ic);
    int64_t run = run_id_of(sdb, 7);
    int64_t next = tk_qh(sdb, "SELECT next_seq FROM runs WHERE id = %lld", (long long)run);
    assert_true(next >= (int64_t)acked);
    if (sig == SIGTERM) {
        /* A drain: what was committed was acknowledged before the close,
         * and the run waits, open, for its collector. */
        assert_int_equal(next, (int64_t)acked);
        char *state = q_text(sdb, "SELECT state FROM runs WHERE id = %lld", (long long)run);
        assert_string_equal(state, "open");
        free(state);
        assert_true(tk_log_contains(&srv, "stopped cleanly"));
    }
    check_open_segment(sdb, run, next, m.nev);
    sqlite3_close(sdb);
    /* Restart on a new port; the collector resumes from what was acked. */
    assert_int_equal(tk_server_start(&srv, db, 0, base_args), 0);
    fd = tk_connect(srv.port);
    tk_buf resume = {0};
    tk_header(&resume);
    tk_hello(&resume, id, acked, 0x1, NULL);
    assert_int_equal(tk_send(fd, resume.p, resume.len), 0);
    assert_int_equal(tk_send(fd, frames.p + offs[acked], frames.len - offs[acked]), 0);
    assert_int_equal(tk_wait_ack(fd, nframes, &got, NULL, 0, 60000), 0);
    close(fd);
    check_run(db, 7, &m, "ended");
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
    check_closed_segments(db, run);
    tk_buf_free(&frames);
    tk_buf_free(&head);
    tk_buf_free(&resume);
    free(offs);
    free(m.ev);
}

static void test_restart_sigterm(void **state)
{
    (void)state;
    restart_case(SIGTERM, "restart_term");
}

static void test_restart_sigkill(void **state)
{
    (void)state;
    restart_case(SIGKILL, "restart_kill");
}

/* A connection lost without BYE: after the grace period the run is closed
 * as lost, with its final keyframe. A reconnection within the grace period
 * continues the same run. */
static void test_lost_and_resumed(void **state)
{
    (void)state;
    char dir[600], db[700];
    tk_tmpdir(dir, sizeof dir, "lost");
    snprintf(db, sizeof db, "%s/hs.db", dir);
    tk_server srv;
    const char *args[] = {"--granularity", "10ms", "--grace", "1s", NULL};
    assert_int_equal(tk_server_start(&srv, db, 0, args), 0);
    model m;
    model_build(&m, 1000, 5);
    tk_buf b = {0};
    uint8_t id[16];
    run_uuid(id, 8);
    tk_header(&b);
    tk_hello(&b, id, 0, 0, NULL);
    size_t start = b.len;
    model_frames(&m, &b, 100, 0);
    size_t *offs;
    size_t n = tk_frame_offsets(&b, start, &offs);
    /* First connection: half, then gone. */
    int fd = tk_connect(srv.port);
    assert_int_equal(tk_send(fd, b.p, offs[n / 2]), 0);
    uint64_t got;
    assert_int_equal(tk_wait_ack(fd, n / 2, &got, NULL, 0, 60000), 0);
    close(fd);
    usleep(200000);
    /* Within the grace period: resumed, the rest, no BYE, gone again. */
    tk_buf r = {0};
    tk_header(&r);
    tk_hello(&r, id, n / 2, 0x1, NULL);
    fd = tk_connect(srv.port);
    assert_int_equal(tk_send(fd, r.p, r.len), 0);
    assert_int_equal(tk_send(fd, b.p + offs[n / 2], b.len - offs[n / 2]), 0);
    assert_int_equal(tk_wait_ack(fd, n, &got, NULL, 0, 60000), 0);
    close(fd);
    uint64_t deadline = tk_now_ms() + 30000;
    sqlite3 *sdb = db_open(db);
    char *st = NULL;
    while (tk_now_ms() < deadline) {
        free(st);
        st = q_text(sdb, "SELECT state FROM runs");
        if (st && !strcmp(st, "lost")) break;
        usleep(50000);
    }
    assert_string_equal(st, "lost");
    free(st);
    assert_int_equal(tk_qh(sdb, "SELECT count(*) FROM runs"), 1);
    assert_int_equal(tk_qh(sdb, "SELECT clean_exit FROM runs"), 0);
    sqlite3_close(sdb);
    check_run(db, 8, &m, "lost");
    assert_true(tk_log_contains(&srv, "closed as lost"));
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
    tk_buf_free(&b);
    tk_buf_free(&r);
    free(offs);
    free(m.ev);
}

/* A DROPS frame of (kind, value) pairs, values as totals. */
static void drops_frame(tk_buf *b, const uint64_t (*kv)[2], size_t n)
{
    uint8_t p[256];
    size_t len = 0;
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < 2; k++) len += hs_varint_encode(p + len, kv[i][k]);
    tk_raw_frame(b, HS_FRAME_DROPS, p, len);
}

/* dropped_alloc_events, unwind_failed, stacks_truncated, and whether
 * main_end_ns is NULL, as one number (each under 100). */
static int64_t drops_row(const char *db)
{
    sqlite3 *sdb = db_open(db);
    int64_t v = tk_qh(sdb, "SELECT dropped_alloc_events * 1000000 + unwind_failed * 10000 + "
                           "stacks_truncated * 100 + (main_end_ns IS NULL) FROM runs");
    sqlite3_close(sdb);
    return v;
}

/* DROPS counters are totals: the row holds the latest value of each kind,
 * whether a frame repeats a kind unchanged (the last frame of a run repeats
 * every kind, mostly zeros, and only those that moved are written), or
 * comes to a run the server loaded again after a restart (which knows none
 * of the row's values). */
static void test_drops_counters(void **state)
{
    (void)state;
    char dir[600], db[700];
    tk_tmpdir(dir, sizeof dir, "drops");
    snprintf(db, sizeof db, "%s/hs.db", dir);
    tk_server srv;
    const char *args[] = {"--granularity", "10ms", "--grace", "60s", NULL};
    assert_int_equal(tk_server_start(&srv, db, 0, args), 0);
    uint8_t id[16];
    run_uuid(id, 9);
    tk_buf b = {0};
    tk_header(&b);
    tk_hello(&b, id, 0, 0, NULL);
    static const uint64_t d1[][2] = {{1, 5}};
    static const uint64_t d2[][2] = {{1, 5}, {2, 0}, {5, 0}, {6, 3}, {9, 0}, {10, 0}};
    drops_frame(&b, d1, HS_COUNTOF(d1));
    drops_frame(&b, d2, HS_COUNTOF(d2));
    int fd = tk_connect(srv.port);
    assert_int_equal(tk_send(fd, b.p, b.len), 0);
    uint64_t got;
    assert_int_equal(tk_wait_ack(fd, 2, &got, NULL, 0, 60000), 0);
    close(fd);
    assert_int_equal(drops_row(db), 5030001);
    /* Restarted: the run is loaded again when its collector resumes. */
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
    assert_int_equal(tk_server_start(&srv, db, 0, args), 0);
    tk_buf r = {0};
    tk_header(&r);
    tk_hello(&r, id, 2, 0x1, NULL);
    static const uint64_t d3[][2] = {{1, 5}, {5, 2}, {6, 3}, {9, 40}};
    static const uint64_t d4[][2] = {{1, 7}, {5, 2}, {6, 3}, {9, 40}};
    drops_frame(&r, d3, HS_COUNTOF(d3));
    drops_frame(&r, d4, HS_COUNTOF(d4));
    fd = tk_connect(srv.port);
    assert_int_equal(tk_send(fd, r.p, r.len), 0);
    assert_int_equal(tk_wait_ack(fd, 4, &got, NULL, 0, 60000), 0);
    close(fd);
    assert_int_equal(drops_row(db), 7030200);
    sqlite3 *sdb = db_open(db);
    assert_int_equal(tk_qh(sdb, "SELECT main_end_ns FROM runs"), 40);
    sqlite3_close(sdb);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
    tk_buf_free(&b);
    tk_buf_free(&r);
}

/* A collector that reconnects at once after the ACK of its BYE (it did not
 * see that ACK, say) resends its run with HS_HELLO_RESUMED: the server
 * answers with the run's end and stores nothing twice. The HELLO often lands
 * in the same writer batch as the first connection's end, the case where the
 * run's memory must not be released under the new connection. */
static void test_resume_after_bye(void **state)
{
    (void)state;
    char dir[600], db[700];
    tk_tmpdir(dir, sizeof dir, "resume_bye");
    snprintf(db, sizeof db, "%s/hs.db", dir);
    tk_server srv;
    assert_int_equal(tk_server_start(&srv, db, 0, base_args), 0);
    model m;
    model_build(&m, 600, 2024);
    enum { ROUNDS = 12 };
    for (int i = 0; i < ROUNDS; i++) {
        uint8_t id[16];
        run_uuid(id, (uint8_t)(0x40 + i));
        tk_buf b = {0}, r = {0};
        tk_header(&b);
        tk_hello(&b, id, 0, 0, NULL);
        size_t start = b.len;
        model_frames(&m, &b, 100, 1);
        size_t *offs;
        size_t n = tk_frame_offsets(&b, start, &offs);
        tk_header(&r);
        tk_hello(&r, id, 0, 0x1, NULL);
        tk_buf_append(&r, b.p + start, b.len - start);
        int fd = tk_connect(srv.port), fd2 = tk_connect(srv.port);
        assert_true(fd >= 0 && fd2 >= 0);
        assert_int_equal(tk_send(fd, b.p, b.len), 0);
        uint64_t got = 0;
        assert_int_equal(tk_wait_ack(fd, n, &got, NULL, 0, 30000), 0);
        assert_int_equal(tk_send(fd2, r.p, r.len), 0);
        close(fd);
        /* The resumed connection hears the run's end and is closed. */
        assert_int_equal(tk_wait_ack(fd2, n, &got, NULL, 0, 30000), 0);
        assert_int_equal(got, n);
        assert_int_equal(tk_wait_closed(fd2, 30000), 1);
        close(fd2);
        tk_buf_free(&b);
        tk_buf_free(&r);
        free(offs);
    }
    for (int i = 0; i < ROUNDS; i++) check_run(db, (uint8_t)(0x40 + i), &m, "ended");
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
    free(m.ev);
}

static void test_token_and_duplicate(void **state)
{
    (void)state;
    char dir[600], db[700];
    tk_tmpdir(dir, sizeof dir, "token");
    snprintf(db, sizeof db, "%s/hs.db", dir);
    tk_server srv;
    const char *args[] = {"--token", "s3cret", NULL};
    assert_int_equal(tk_server_start(&srv, db, 0, args), 0);
    uint8_t id[16];
    run_uuid(id, 9);
    char reason[256] = "";
    for (int good = 0; good < 2; good++) {
        tk_buf b = {0};
        tk_header(&b);
        tk_hello(&b, id, 0, 0, good ? "s3cret" : "wrong");
        int fd = tk_connect(srv.port);
        assert_int_equal(tk_send(fd, b.p, b.len), 0);
        int rc = tk_wait_ack(fd, 0, NULL, reason, sizeof reason, 30000);
        assert_int_equal(rc, good ? 0 : 1);
        if (!good) assert_string_equal(reason, "bad token");
        close(fd);
        tk_buf_free(&b);
    }
    assert_true(tk_log_contains(&srv, "refused: bad token"));
    /* The same run id again without the resumed flag: refused. */
    tk_buf b = {0};
    tk_header(&b);
    tk_hello(&b, id, 0, 0, "s3cret");
    int fd = tk_connect(srv.port);
    assert_int_equal(tk_send(fd, b.p, b.len), 0);
    assert_int_equal(tk_wait_ack(fd, 0, NULL, reason, sizeof reason, 30000), 1);
    assert_non_null(strstr(reason, "already in use"));
    close(fd);
    tk_buf_free(&b);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
}

static void test_import_and_retention(void **state)
{
    (void)state;
    char dir[600], db[700], file[700], cmd[2200];
    tk_tmpdir(dir, sizeof dir, "import");
    snprintf(db, sizeof db, "%s/hs.db", dir);
    snprintf(file, sizeof file, "%s/run.hsp", dir);
    model m;
    model_build(&m, 2400, 31337);
    tk_buf b = {0};
    uint8_t id[16];
    run_uuid(id, 0x20);
    tk_header(&b);
    tk_hello(&b, id, 0, 0, NULL);
    model_frames(&m, &b, 128, 1);
    FILE *f = fopen(file, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b.p, 1, b.len, f), b.len);
    fclose(f);
    const char *bdir = getenv("HS_BUILD_DIR");
    snprintf(cmd, sizeof cmd, "%s/bin/heapstore import --granularity 10ms --db '%s' '%s'",
             bdir ? bdir : "build", db, file);
    assert_int_equal(system(cmd), 0);
    check_run(db, 0x20, &m, "ended");
    /* Importing the same file again changes nothing. */
    assert_int_equal(system(cmd), 0);
    check_run(db, 0x20, &m, "ended");
    /* Retention: the run started in 2023; events of more than a day ago go,
     * everything else stays. */
    sqlite3 *sdb = db_open(db);
    int64_t snaps = tk_qh(sdb, "SELECT count(*) FROM snapshots");
    assert_true(tk_qh(sdb, "SELECT count(*) FROM events") > 0);
    sqlite3_close(sdb);
    tk_server srv;
    const char *args[] = {"--retain-events", "1", NULL};
    assert_int_equal(tk_server_start(&srv, db, 0, args), 0);
    uint64_t deadline = tk_now_ms() + 30000;
    sdb = db_open(db);
    while (tk_qh(sdb, "SELECT count(*) FROM events") && tk_now_ms() < deadline) usleep(50000);
    assert_int_equal(tk_qh(sdb, "SELECT count(*) FROM events"), 0);
    assert_int_equal(tk_qh(sdb, "SELECT count(*) FROM snapshots"), snaps);
    assert_int_equal(tk_qh(sdb, "SELECT count(*) FROM runs"), 1);
    sqlite3_close(sdb);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
    tk_buf_free(&b);
    free(m.ev);
}

/* heapstore import of a file cut inside a frame (the process died while
 * writing): the whole frames before the cut are stored and the run is closed
 * as lost; a file that is not a stream is refused and changes nothing. */
static void test_import_cut_and_bad(void **state)
{
    (void)state;
    char dir[600], db[700], file[700], out[700], cmd[2400];
    tk_tmpdir(dir, sizeof dir, "import_cut");
    snprintf(db, sizeof db, "%s/hs.db", dir);
    snprintf(file, sizeof file, "%s/cut.hsp", dir);
    snprintf(out, sizeof out, "%s/out.txt", dir);
    model m;
    model_build(&m, 2400, 4711);
    tk_buf b = {0};
    uint8_t id[16];
    run_uuid(id, 0x21);
    tk_header(&b);
    tk_hello(&b, id, 0, 0, NULL);
    size_t start = b.len;
    model_frames(&m, &b, 128, 1);
    size_t *offs;
    size_t n = tk_frame_offsets(&b, start, &offs);
    assert_true(n > 16);
    /* Frames 0..4 are symbols and stacks; cut inside the 11th EVENTS frame. */
    size_t cut = offs[15] + 7;
    FILE *f = fopen(file, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b.p, 1, cut, f), cut);
    fclose(f);
    const char *bdir = getenv("HS_BUILD_DIR");
    snprintf(cmd, sizeof cmd, "%s/bin/heapstore import --db '%s' '%s' > '%s' 2>&1",
             bdir ? bdir : "build", db, file, out);
    assert_int_equal(system(cmd), 0);
    assert_true(tk_file_contains(out, "partial frame"));
    assert_true(tk_file_contains(out, "stored as lost"));
    sqlite3 *sdb = db_open(db);
    int64_t run = run_id_of(sdb, 0x21);
    char *st = q_text(sdb, "SELECT state FROM runs WHERE id = %lld", (long long)run);
    assert_string_equal(st, "lost");
    free(st);
    assert_int_equal(
        tk_qh(sdb, "SELECT sum(n_events) FROM events WHERE run = %lld", (long long)run), 10 * 128);
    assert_int_equal(tk_qh(sdb, "SELECT next_seq FROM runs WHERE id = %lld", (long long)run), 15);
    sqlite3_close(sdb);
    /* Not a stream: exit 1, a message, nothing stored. */
    f = fopen(file, "wb");
    assert_non_null(f);
    fputs("this is not a heapstore stream\n", f);
    fclose(f);
    assert_int_equal(WEXITSTATUS(system(cmd)), 1);
    assert_true(tk_file_contains(out, "bad magic"));
    sdb = db_open(db);
    assert_int_equal(tk_qh(sdb, "SELECT count(*) FROM runs"), 1);
    char *ic = q_text(sdb, "PRAGMA integrity_check");
    assert_string_equal(ic, "ok");
    free(ic);
    sqlite3_close(sdb);
    free(offs);
    tk_buf_free(&b);
    free(m.ev);
}

/* Runs heapstore-server with args (a shell fragment), output to out; returns
 * the exit status. */
static int server_cmd(const char *args, const char *out)
{
    const char *bdir = getenv("HS_BUILD_DIR");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "timeout 120 %s/bin/heapstore-server %s > '%s' 2>&1",
             bdir ? bdir : "build", args, out);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_command_line(void **state)
{
    (void)state;
    char dir[600], out[700], args[1600];
    tk_tmpdir(dir, sizeof dir, "cli");
    snprintf(out, sizeof out, "%s/out.txt", dir);
    assert_int_equal(server_cmd("--help", out), 0);
    assert_true(tk_file_contains(out, "--retain-events"));
    assert_int_equal(server_cmd("--frobnicate 1", out), 2);
    assert_true(tk_file_contains(out, "unknown option '--frobnicate'"));
    assert_int_equal(server_cmd("--granularity 5parsecs", out), 2);
    assert_true(tk_file_contains(out, "bad --granularity"));
    assert_int_equal(server_cmd("--listen nocolon", out), 2);
    assert_int_equal(server_cmd("--db", out), 2);
    assert_true(tk_file_contains(out, "needs a value"));
    assert_int_equal(server_cmd("--db /proc/no/such/dir/hs.db --listen 127.0.0.1:0", out), 1);
    assert_true(tk_file_contains(out, "cannot open database"));
    /* A port in use. */
    char db[700];
    snprintf(db, sizeof db, "%s/hs.db", dir);
    tk_server srv;
    assert_int_equal(tk_server_start(&srv, db, 0, NULL), 0);
    snprintf(args, sizeof args, "--db '%s/other.db' --listen 127.0.0.1:%d", dir, srv.port);
    assert_int_equal(server_cmd(args, out), 1);
    assert_true(tk_file_contains(out, "address already in use"));
    /* The readiness handshake: a descriptor that is not open is refused; a
     * server that cannot listen closes its ready pipe by exiting, and the
     * launcher says so at once instead of waiting out its time limit. */
    assert_int_equal(server_cmd("--ready-fd 987 --listen 127.0.0.1:0", out), 2);
    assert_true(tk_file_contains(out, "bad value '987' for --ready-fd"));
    char other[700];
    snprintf(other, sizeof other, "%s/other2.db", dir);
    tk_server busy;
    uint64_t t0 = tk_now_ms();
    assert_int_equal(tk_server_start(&busy, other, srv.port, NULL), -1);
    assert_true(tk_now_ms() - t0 < 30000); /* not the kit's 60 s limit */
    assert_true(tk_log_contains(&busy, "address already in use"));
    /* The same port speaks HTTP to a client whose first byte is not 0x89. */
    int fd = tk_connect(srv.port);
    assert_true(fd >= 0);
    const char req[] = "GET /api/runs HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    assert_int_equal(tk_send(fd, req, sizeof req - 1), 0);
    char resp[64] = "";
    size_t got = 0;
    uint64_t deadline = tk_now_ms() + 30000;
    while (got < 12 && tk_now_ms() < deadline) {
        ssize_t r = recv(fd, resp + got, sizeof resp - 1 - got, 0);
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    assert_true(got >= 12);
    assert_memory_equal(resp, "HTTP/1.1 ", 9);
    assert_int_equal(tk_server_stop(&srv, SIGINT), 0);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_segments_every_allocation),
        cmocka_unit_test(test_known_workload),
        cmocka_unit_test(test_concurrent_runs),
        cmocka_unit_test(test_malformed_inputs),
        cmocka_unit_test(test_restart_sigterm),
        cmocka_unit_test(test_restart_sigkill),
        cmocka_unit_test(test_lost_and_resumed),
        cmocka_unit_test(test_drops_counters),
        cmocka_unit_test(test_token_and_duplicate),
        cmocka_unit_test(test_import_and_retention),
        cmocka_unit_test(test_resume_after_bye),
        cmocka_unit_test(test_import_cut_and_bad),
        cmocka_unit_test(test_command_line),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* fixture: the known runs of fixture.h, through hs_store. */
#include "fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "hs_error.h"
#include "hs_evcodec.h"
#include "hs_proto.h"
#include "hs_store.h"

typedef struct fx {
    hs_store *s;
    hs_run *r;
    uint64_t seq;
    uint64_t bucket; /* the rank run's next bucket */
    uint8_t buf[1 << 16];
} fx;

static int frame(fx *f, int type, hs_wr *wr)
{
    char err[256];
    int rc =
        hs_store_run_frame(f->s, f->r, f->seq++, type, wr->start, hs_wr_len(wr), err, sizeof err);
    if (rc) fprintf(stderr, "fixture: frame %d: %s\n", type, err);
    return rc;
}

/* BYE at t_end, commit, and let the store forget the run. */
static int end_run(fx *f, uint64_t t_end)
{
    hs_bye bye = {.t_end_ns = t_end, .flags = HS_BYE_CLEAN};
    hs_wr wr;
    hs_wr_init(&wr, f->buf, sizeof f->buf);
    hs_bye_encode(&wr, &bye);
    int rc = frame(f, HS_FRAME_BYE, &wr);
    if (!rc) rc = hs_store_commit(f->s);
    if (!rc) hs_store_run_release(f->s, f->r);
    return rc;
}

static int ev(fx *f, uint64_t t, uint64_t stack, int is_free, uint64_t size)
{
    hs_wr wr;
    hs_wr_init(&wr, f->buf, sizeof f->buf);
    hs_wr_varint(&wr, t);
    hs_event_put(&wr, 0, stack, is_free, size, size);
    return frame(f, HS_FRAME_EVENTS, &wr);
}

#define MS 1000000ull

static hs_str str(const char *s)
{
    return (hs_str){s, strlen(s)};
}

/* What every fixture run's HELLO says: the run id's first byte, the pid,
 * the program (and argv[0] when not NULL), every allocation sampled, on
 * testhost, starting at the fixtures' epoch. */
static void hello_init(hs_hello *h, uint8_t id0, uint64_t pid, const char *program,
                       const char *arg0)
{
    memset(h, 0, sizeof *h);
    h->run_id[0] = id0;
    h->pid = pid;
    h->ppid = 1;
    h->start_unix_ns = 1700000000000000000ull;
    h->sample_bytes = 1;
    h->max_depth = 64;
    h->program = str(program);
    if (arg0) {
        h->argc = 1;
        h->argv[0] = str(arg0);
    }
    h->hostname = str("testhost");
    h->collector_version = str("test");
}

/* Opens f's run with h, in a new transaction; 0 or the store's error. */
static int run_open(fx *f, const hs_hello *h)
{
    char err[256];
    f->seq = 0;
    int rc = hs_store_begin(f->s);
    if (!rc) rc = hs_store_run_open(f->s, &f->r, h, err, sizeof err);
    if (rc) fprintf(stderr, "fixture: hello: %s\n", err);
    return rc;
}

static int one_run(fx *f, int version)
{
    hs_hello h;
    hello_init(&h, (uint8_t)(0xa0 + version), 1000 + (uint64_t)version, "/opt/app/bin/app", "app");
    h.run_id[15] = 0x42;
    h.start_unix_ns += (uint64_t)version * 10000000000ull;
    h.rss_interval_ms = 100;
    h.nlabels = 1;
    h.labels[0].key = str("version");
    h.labels[0].value = str(version == 1 ? "1" : "2");
    int rc = run_open(f, &h);
    if (rc) return rc;
    hs_wr wr;
    /* SYMBOLS: the same code in both versions, but leak_site moved a line */
    static const struct {
        uint64_t pc;
        const char *fn;
        uint64_t line;
    } syms[] = {{0x1000, "main", 10},      {0x2000, "leak_site", 20}, {0x3000, "work", 30},
                {0x4000, "tmp_alloc", 40}, {0x5000, "big_alloc", 50}, {0x6000, "config_load", 60}};
    hs_wr_init(&wr, f->buf, sizeof f->buf);
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        hs_symbol s = {.pc = syms[i].pc + (uint64_t)version * 0x100,
                       .function = str(syms[i].fn),
                       .file = str("/src/app.c"),
                       .line = syms[i].line + (version == 2 && syms[i].line == 20),
                       .module = str("/opt/app/bin/app"),
                       .module_offset = syms[i].pc};
        hs_symbol_put(&wr, &s);
    }
    if ((rc = frame(f, HS_FRAME_SYMBOLS, &wr))) return rc;
    uint64_t o = (uint64_t)version * 0x100;
    uint64_t s1[] = {0x2000 + o, 0x1000 + o}, s2[] = {0x4000 + o, 0x3000 + o, 0x1000 + o},
             s3[] = {0x5000 + o, 0x1000 + o}, s4[] = {0x6000 + o, 0x1000 + o};
    hs_wr_init(&wr, f->buf, sizeof f->buf);
    hs_stack_put(&wr, 1, s1, 2);
    hs_stack_put(&wr, 2, s2, 3);
    hs_stack_put(&wr, 3, s3, 2);
    hs_stack_put(&wr, 4, s4, 2);
    if ((rc = frame(f, HS_FRAME_STACKS, &wr))) return rc;
    hs_wr_init(&wr, f->buf, sizeof f->buf);
    hs_size_bucket sb[] = {{8, 40, 12000}, {9, 21, 21000}, {12, 1, 5000}, {16, 1, 100000}};
    for (size_t i = 0; i < 4; i++) {
        hs_wr_varint(&wr, sb[i].bucket);
        hs_wr_varint(&wr, sb[i].allocs);
        hs_wr_varint(&wr, sb[i].bytes);
    }
    if ((rc = frame(f, HS_FRAME_SIZES, &wr))) return rc;

    if ((rc = ev(f, 10 * MS, 4, 0, 5000))) return rc;
    for (uint64_t k = 0; k < 20 && !rc; k++) {
        uint64_t t = k * 100 * MS;
        /* in time order, as a collector sends them */
        rc = ev(f, t + 20 * MS, 2, 0, 300);
        if (!rc && k == 12) rc = ev(f, t + 25 * MS, 3, 1, 100000);
        if (!rc) rc = ev(f, t + 50 * MS, 1, 0, 1000);
        if (!rc && version == 2 && k > 0) rc = ev(f, t + 50 * MS, 1, 1, 1000);
        if (!rc) rc = ev(f, t + 60 * MS, 2, 1, 300);
        if (!rc && k == 10) rc = ev(f, t + 70 * MS, 3, 0, 100000);
        /* a PROCESS sample each round */
        hs_wr_init(&wr, f->buf, sizeof f->buf);
        hs_wr_varint(&wr, t + 90 * MS);
        hs_wr_varint(&wr, 4000000 + k * 1000);
        hs_wr_varint(&wr, 9000000);
        if (!rc) rc = frame(f, HS_FRAME_PROCESS, &wr);
    }
    if (rc) return rc;
    return end_run(f, 2000 * MS);
}

/* The trend run: 5 s (50 buckets), where a line in time fits the leak
 * badly although it never shrinks. Stacks: 1 paced_leak <- main, 2
 * cache_fill <- main, 3 churn <- main. */
static int trend_run(fx *f)
{
    hs_hello h;
    hello_init(&h, 0xb7, 2000, "/opt/app/bin/trend", "trend");
    h.run_id[15] = 0x42;
    int rc = run_open(f, &h);
    if (rc) return rc;
    hs_wr wr;
    static const struct {
        uint64_t pc;
        const char *fn;
    } syms[] = {
        {0x1000, "main"}, {0x2000, "paced_leak"}, {0x3000, "cache_fill"}, {0x4000, "churn"}};
    hs_wr_init(&wr, f->buf, sizeof f->buf);
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        hs_symbol sy = {.pc = syms[i].pc,
                        .function = str(syms[i].fn),
                        .file = str("/src/trend.c"),
                        .line = 10 + i,
                        .module = str("/opt/app/bin/trend"),
                        .module_offset = syms[i].pc};
        hs_symbol_put(&wr, &sy);
    }
    if ((rc = frame(f, HS_FRAME_SYMBOLS, &wr))) return rc;
    uint64_t s1[] = {0x2000, 0x1000}, s2[] = {0x3000, 0x1000}, s3[] = {0x4000, 0x1000};
    hs_wr_init(&wr, f->buf, sizeof f->buf);
    hs_stack_put(&wr, 1, s1, 2);
    hs_stack_put(&wr, 2, s2, 2);
    hs_stack_put(&wr, 3, s3, 2);
    if ((rc = frame(f, HS_FRAME_STACKS, &wr))) return rc;
    for (uint64_t b = 0; b < 50 && !rc; b++) {
        uint64_t t = b * 100 * MS + 50 * MS;
        /* three blocks at the start, a long pause, three near the end */
        if (b < 3 || (b >= 44 && b < 47)) rc = ev(f, t, 1, 0, 1000);
        /* a cache that fills in the first half second and stays full */
        if (!rc && b < 5) rc = ev(f, t, 2, 0, 1000);
        /* up and down, a little higher each time: 3000 up, 2000 down */
        if (!rc && b % 2 == 0) rc = ev(f, t, 3, 0, 3000);
        if (!rc && b % 2 == 1) rc = ev(f, t, 3, 1, 2000);
    }
    if (rc) return rc;
    return end_run(f, 5000 * MS);
}

/* The rank run (fixture.h). Stack ids: 1 late, 2 spike, 3 leak, 4 churn,
 * 5 tie_a, 6 tie_b, 7 paced, 8 decline, 9 freed_late, 10 cache, 11 flash,
 * 11 + i filler_i, then twin_a, twin_b, reshape and busy_1..16. */
#define RANK_FILLERS 20
#define RANK_TWIN_A  (12 + RANK_FILLERS)
#define RANK_RESHAPE (RANK_TWIN_A + 2)
#define RANK_BUSY    16
#define RANK_STACKS  (RANK_RESHAPE + RANK_BUSY)

static void rank_hello(hs_hello *h, uint64_t first_seq, int resumed)
{
    memset(h, 0, sizeof *h);
    h->run_id[0] = 0xc3;
    h->run_id[15] = 0x42;
    h->flags = resumed ? HS_HELLO_RESUMED : 0;
    h->resume_key = (hs_str){"fixture-rank-key", 16};
    h->first_seq = first_seq;
    h->pid = 3000;
    h->ppid = 1;
    h->start_unix_ns = 1700000000000000000ull;
    h->sample_bytes = 1;
    h->max_depth = 64;
    h->program = str("/opt/app/bin/rank");
    h->argc = 1;
    h->argv[0] = str("rank");
    h->hostname = str("testhost");
    h->collector_version = str("test");
}

static int rank_bucket(fx *f, uint64_t b)
{
    uint64_t t = b * 100 * MS + 50 * MS;
    int rc = 0;
#define EV(stack, is_free, size)                                                                   \
    do {                                                                                           \
        if (!rc) rc = ev(f, t, stack, is_free, size);                                              \
    } while (0)
    if (b == 36) EV(1, 0, 9500);
    if (b == 38) EV(1, 1, 9500);
    if (b == 3) EV(2, 0, 9000);
    if (b == 5) EV(2, 1, 9000);
    EV(3, 0, 140);
    EV(4, b % 2, 7000);
    if (b == 10) EV(5, 0, 6000);
    if (b == 12) EV(5, 1, 6000);
    if (b == 20) EV(6, 0, 6000);
    if (b == 22) EV(6, 1, 6000);
    if (b <= 2 || (b >= 53 && b <= 55)) EV(7, 0, 1000);
    EV(8, b > 0, b ? 100 : 6000);
    EV(9, b == 59, b == 59 ? 5900 : 100);
    if (b <= 4) EV(10, 0, 1000);
    for (uint64_t i = 1; i <= RANK_FILLERS; i++)
        if (b == i + 1) EV(11 + i, 0, 50 * i);
    EV(RANK_TWIN_A, 0, 10);
    EV(RANK_TWIN_A + 1, 0, 10);
    if (b == 29) EV(RANK_RESHAPE, 0, 200);
    if (b == 30) {
        EV(RANK_RESHAPE, 1, 200);
        EV(RANK_RESHAPE, 0, 100);
        EV(RANK_RESHAPE, 0, 100);
    }
    for (int i = 1; i <= RANK_BUSY; i++) EV(RANK_RESHAPE + i, b % 2, 10);
    if (b == 15 && !rc) rc = ev(f, t - 40 * MS, 11, 0, 50000);
    if (b == 15 && !rc) rc = ev(f, t - 30 * MS, 11, 1, 50000);
#undef EV
    return rc;
}

static int rank_open(fx *f, const char *path, int resumed)
{
    char err[256];
    hs_store_config cfg = {.granularity_ns = 100 * MS, .keyframe_every = 4};
    int rc = hs_store_open(&f->s, path, &cfg, err, sizeof err);
    if (rc) {
        fprintf(stderr, "fixture: %s\n", err);
        return rc;
    }
    hs_hello h;
    rank_hello(&h, f->seq, resumed);
    if (!(rc = hs_store_begin(f->s))) rc = hs_store_run_open(f->s, &f->r, &h, err, sizeof err);
    if (rc) fprintf(stderr, "fixture: hello: %s\n", err);
    return rc;
}

static fx *rank_live; /* the rank run during its checkpoint */

int fx_rank_step(void)
{
    fx *f = rank_live;
    if (!f || f->bucket >= 59) return HS_EINVAL;
    int rc = hs_store_begin(f->s);
    if (!rc) rc = rank_bucket(f, f->bucket++);
    if (!rc) rc = hs_store_commit(f->s);
    return rc;
}

static int rank_run(fx *f, const char *path, void (*checkpoint)(const char *, void *), void *data)
{
    f->seq = 0;
    int rc = rank_open(f, path, 0);
    if (rc) return rc;
    static const char *const names[] = {"late",  "spike",   "leak",       "churn", "tie_a", "tie_b",
                                        "paced", "decline", "freed_late", "cache", "flash"};
    char fname[RANK_STACKS][16];
    hs_wr wr;
    hs_wr_init(&wr, f->buf, sizeof f->buf);
    hs_symbol m = {.pc = 0x1000,
                   .function = str("main"),
                   .file = str("/src/rank.c"),
                   .line = 1,
                   .module = str("/opt/app/bin/rank"),
                   .module_offset = 0x1000};
    hs_symbol_put(&wr, &m);
    for (int i = 1; i <= RANK_STACKS; i++) {
        if (i <= 11)
            snprintf(fname[i - 1], sizeof fname[i - 1], "%s", names[i - 1]);
        else if (i < RANK_TWIN_A)
            snprintf(fname[i - 1], sizeof fname[i - 1], "filler_%d", i - 11);
        else if (i > RANK_RESHAPE)
            snprintf(fname[i - 1], sizeof fname[i - 1], "busy_%d", i - RANK_RESHAPE);
        else
            snprintf(fname[i - 1], sizeof fname[i - 1], "%s",
                     i == RANK_TWIN_A    ? "twin_a"
                     : i == RANK_RESHAPE ? "reshape"
                                         : "twin_b");
        hs_symbol sy = {.pc = 0x2000 + (uint64_t)i * 0x10,
                        .function = str(fname[i - 1]),
                        .file = str("/src/rank.c"),
                        .line = 10 + (uint64_t)i,
                        .module = str("/opt/app/bin/rank"),
                        .module_offset = 0x2000 + (uint64_t)i * 0x10};
        hs_symbol_put(&wr, &sy);
    }
    if ((rc = frame(f, HS_FRAME_SYMBOLS, &wr))) return rc;
    hs_wr_init(&wr, f->buf, sizeof f->buf);
    for (int i = 1; i <= RANK_STACKS; i++) {
        uint64_t pcs[] = {0x2000 + (uint64_t)i * 0x10, 0x1000};
        hs_stack_put(&wr, (uint64_t)i, pcs, 2);
    }
    if ((rc = frame(f, HS_FRAME_STACKS, &wr))) return rc;
    for (f->bucket = 0; f->bucket <= 37 && !rc; f->bucket++) rc = rank_bucket(f, f->bucket);
    if (rc || (rc = hs_store_commit(f->s))) return rc;
    if (checkpoint) {
        rank_live = f;
        checkpoint(path, data);
        rank_live = NULL;
        /* a restart: the store forgets the open run, then it comes back */
        hs_store_free(f->s);
        f->s = NULL;
        if ((rc = rank_open(f, path, 1))) return rc;
    } else if ((rc = hs_store_begin(f->s))) {
        return rc;
    }
    for (; f->bucket < 60 && !rc; f->bucket++) rc = rank_bucket(f, f->bucket);
    if (rc) return rc;
    return end_run(f, 6000 * MS);
}

int fx_build_rank(const char *path, void (*checkpoint)(const char *path, void *data), void *data)
{
    fx *f = calloc(1, sizeof *f);
    unlink(path);
    int rc = rank_run(f, path, checkpoint, data);
    hs_store_free(f->s);
    free(f);
    return rc;
}

/* A run that allocated nothing: hello, then bye at 1 s. */
static int empty_run(fx *f)
{
    hs_hello h;
    hello_init(&h, 0xe0, 3000, "/opt/app/bin/empty", "empty");
    int rc = run_open(f, &h);
    return rc ? rc : end_run(f, 1000 * MS);
}

static int build_with(const char *path, int (*run)(fx *f))
{
    fx *f = calloc(1, sizeof *f);
    char err[256];
    unlink(path);
    hs_store_config cfg = {.granularity_ns = 100 * MS, .keyframe_every = 4};
    int rc = hs_store_open(&f->s, path, &cfg, err, sizeof err);
    if (rc) {
        fprintf(stderr, "fixture: %s\n", err);
        free(f);
        return rc;
    }
    rc = run(f);
    hs_store_free(f->s);
    free(f);
    return rc;
}

int fx_build_empty(const char *path)
{
    return build_with(path, empty_run);
}

int fx_build_trend(const char *path)
{
    return build_with(path, trend_run);
}

int fx_build(const char *path)
{
    fx *f = calloc(1, sizeof *f);
    char err[256];
    unlink(path);
    hs_store_config cfg = {.granularity_ns = 100 * MS, .keyframe_every = 4};
    int rc = hs_store_open(&f->s, path, &cfg, err, sizeof err);
    if (rc) {
        fprintf(stderr, "fixture: %s\n", err);
        free(f);
        return rc;
    }
    rc = one_run(f, 1);
    if (!rc) rc = one_run(f, 2);
    hs_store_free(f->s);
    free(f);
    return rc;
}

void fx_tmp_path(char *out, size_t len, const char *name)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(out, len, "%s/hsq-%d-%s", tmp && *tmp ? tmp : "/tmp", (int)getpid(), name);
}

/* One events row of fx_events_to_wire, read whole before it is rewritten. */
typedef struct wire_row {
    int64_t rowid, run, seq;
    void *data;
    int len;
} wire_row;

/* Writes piece k of row r (the events in w) in place (k = 0) or as a row of
 * its own after it (seq + k: a segment of n frames has n seqs of its own). */
static int wire_piece(sqlite3 *db, const wire_row *r, int k, const hs_wr *w, uint64_t lo,
                      uint64_t hi, int64_t n)
{
    sqlite3_stmt *st;
    const char *sql = k ? "INSERT INTO events (run, seq, t_first_ns, t_last_ns, n_events, data) "
                          "VALUES (?1, ?2, ?3, ?4, ?5, ?6)"
                        : "UPDATE events SET t_first_ns = ?3, t_last_ns = ?4, n_events = ?5, "
                          "data = ?6 WHERE run = ?1 AND seq = ?2";
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) return HS_EDB;
    sqlite3_bind_int64(st, 1, r->run);
    sqlite3_bind_int64(st, 2, r->seq + k);
    sqlite3_bind_int64(st, 3, (int64_t)lo);
    sqlite3_bind_int64(st, 4, (int64_t)hi);
    sqlite3_bind_int64(st, 5, n);
    sqlite3_bind_blob(st, 6, w->start, (int)hs_wr_len(w), SQLITE_TRANSIENT);
    int rc = sqlite3_step(st) == SQLITE_DONE ? 0 : HS_EDB;
    sqlite3_finalize(st);
    return rc;
}

/* Row r as EVENTS payloads: a new one where time goes back (a frame of
 * another thread) or the payload is full. */
static int wire_row_rewrite(sqlite3 *db, const wire_row *r, hs_evdec *dec)
{
    static uint8_t buf[HS_FRAME_MAX];
    int rc = hs_evdec_open(dec, r->data, (size_t)r->len);
    if (rc) return rc;
    hs_wr w;
    hs_event e;
    uint64_t prev = 0, lo = 0;
    int64_t n = 0;
    int k = 0, more;
    while ((more = hs_evdec_next(dec, &e)) == 1) {
        if (n && (e.t_ns < prev || hs_wr_len(&w) + 64 > sizeof buf)) {
            if ((rc = wire_piece(db, r, k++, &w, lo, prev, n))) return rc;
            n = 0;
        }
        if (!n) {
            hs_wr_init(&w, buf, sizeof buf);
            hs_wr_varint(&w, lo = prev = e.t_ns);
        }
        hs_event_put(&w, e.t_ns - prev, e.stack_id, e.is_free, e.size, e.weight);
        prev = e.t_ns;
        n++;
        if (w.err) return w.err;
    }
    if (more) return more;
    return n ? wire_piece(db, r, k, &w, lo, prev, n) : 0;
}

int fx_events_to_wire(const char *path)
{
    sqlite3 *db;
    sqlite3_stmt *rd = NULL;
    hs_evdec dec = {0};
    wire_row *rows = NULL;
    size_t nrows = 0;
    int rc = HS_EDB;
    if (sqlite3_open(path, &db) != SQLITE_OK) goto out;
    if (sqlite3_exec(db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "SELECT rowid, run, seq, data FROM events ORDER BY rowid", -1, &rd,
                           NULL) != SQLITE_OK)
        goto out;
    while (sqlite3_step(rd) == SQLITE_ROW) {
        wire_row *nr = realloc(rows, (nrows + 1) * sizeof *rows);
        if (!nr) goto out;
        rows = nr;
        wire_row *r = &rows[nrows++];
        *r = (wire_row){sqlite3_column_int64(rd, 0), sqlite3_column_int64(rd, 1),
                        sqlite3_column_int64(rd, 2), NULL, sqlite3_column_bytes(rd, 3)};
        if (!(r->data = malloc((size_t)r->len + 1))) goto out;
        memcpy(r->data, sqlite3_column_blob(rd, 3), (size_t)r->len);
    }
    for (size_t i = 0; i < nrows; i++)
        if ((rc = wire_row_rewrite(db, &rows[i], &dec))) goto out;
    rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK ? 0 : HS_EDB;
out:
    sqlite3_finalize(rd);
    sqlite3_close(db);
    hs_evdec_free(&dec);
    for (size_t i = 0; i < nrows; i++) free(rows[i].data);
    free(rows);
    return rc;
}

int fx_build_quiet(const char *path)
{
    fx *f = calloc(1, sizeof *f);
    char err[256];
    unlink(path);
    hs_store_config cfg = {.granularity_ns = 100 * MS, .keyframe_every = 4};
    int rc = hs_store_open(&f->s, path, &cfg, err, sizeof err);
    if (rc) {
        fprintf(stderr, "fixture: %s\n", err);
        free(f);
        return rc;
    }
    hs_hello h;
    hello_init(&h, 0xc1, 3000, "/opt/app/bin/quiet", NULL);
    h.rss_interval_ms = 100;
    if (!(rc = hs_store_begin(f->s))) rc = hs_store_run_open(f->s, &f->r, &h, err, sizeof err);
    hs_wr wr;
    hs_wr_init(&wr, f->buf, sizeof f->buf);
    for (uint64_t i = 0; i <= FX_QUIET_STACKS; i++) {
        char fn[32];
        snprintf(fn, sizeof fn, "site%llu", (unsigned long long)i);
        hs_symbol sym = {.pc = 0x1000 + i,
                         .function = str(fn),
                         .file = str("/src/quiet.c"),
                         .line = i + 1,
                         .module = str("/opt/app/bin/quiet"),
                         .module_offset = 0x1000 + i};
        hs_symbol_put(&wr, &sym);
    }
    if (!rc) rc = frame(f, HS_FRAME_SYMBOLS, &wr);
    hs_wr_init(&wr, f->buf, sizeof f->buf);
    for (uint64_t i = 0; i <= FX_QUIET_STACKS; i++) {
        uint64_t pc = 0x1000 + i;
        hs_stack_put(&wr, i + 1, &pc, 1);
    }
    if (!rc) rc = frame(f, HS_FRAME_STACKS, &wr);
    /* stacks 2.. hold a block each from the start; stack 1 allocates a
     * block in each bucket and frees it in the next */
    for (uint64_t i = 1; i <= FX_QUIET_STACKS && !rc; i++) rc = ev(f, MS, i + 1, 0, 100);
    for (uint64_t b = 0; b < FX_QUIET_BUCKETS && !rc; b++) {
        if (b) rc = ev(f, b * 100 * MS + 5 * MS, 1, 1, 1000);
        if (!rc) rc = ev(f, b * 100 * MS + 10 * MS, 1, 0, 1000);
    }
    if (!rc) rc = end_run(f, FX_QUIET_BUCKETS * 100 * MS - MS);
    hs_store_free(f->s);
    free(f);
    return rc;
}

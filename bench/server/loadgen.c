/* hs-loadgen: replays synthetic collector streams into a heapstore-server
 * from N connections at once and measures how fast they are stored.
 *
 * Each connection is one run: HELLO, the SYMBOLS and STACKS of S stacks, then
 * EVENTS frames of K entries alternating between a frame of allocations and
 * a frame freeing those blocks (sizes 16..4096 B, random stacks, weights of
 * the given sampling interval), then BYE. Frames are encoded with the common
 * encoders before the clock starts; each frame's t0 is written as a padded
 * varint and patched as it is sent, so a few distinct frames can be replayed
 * as a long run. The time measured runs from the first byte of events sent
 * to the last connection's final ACK, which the server sends only after the
 * commit: events/s here are events stored and queryable.
 */
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "hs_testkit.h"

typedef struct opts {
    int port, conns, stacks, per_frame, distinct;
    int first;       /* the first connection's number: runs of another invocation differ */
    uint64_t events; /* per connection */
    uint64_t sample_bytes;
} opts;

typedef struct conn {
    const opts *o;
    int idx;
    tk_buf setup;      /* header, HELLO, SYMBOLS, STACKS */
    tk_buf frames;     /* `distinct` EVENTS frames */
    size_t *offs;      /* frame starts in frames */
    size_t t0_at[256]; /* offset of each frame's padded t0 */
    uint64_t span;     /* ns covered by one frame */
    uint64_t nframes;  /* EVENTS frames to send */
    uint64_t end_ms;
    int failed;
} conn;

static pthread_barrier_t start_barrier;
static uint64_t start_ms;

static uint64_t rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static uint64_t weight_of(uint64_t size, uint64_t mean)
{
    if (mean <= 1) return size;
    double w = (double)size / (1.0 - exp(-(double)size / (double)mean));
    return (uint64_t)llround(w);
}

/* A padded 8-byte varint. */
static void put_t0(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 7; i++) p[i] = (uint8_t)(0x80 | ((v >> (7 * i)) & 0x7f));
    p[7] = (uint8_t)((v >> 49) & 0x7f);
}

static void build(conn *c)
{
    const opts *o = c->o;
    uint64_t seed = 0x9e3779b97f4a7c15ull * (uint64_t)(c->idx + 1);
    uint8_t id[16];
    for (int i = 0; i < 16; i++) id[i] = (uint8_t)rng(&seed);
    tk_header(&c->setup);
    tk_hello(&c->setup, id, 0, 0, NULL);
    /* The SYMBOLS/STACKS pair: stack s is pcs (s, 1000+s%50, 2000+s%7). */
    uint32_t npcs = (uint32_t)o->stacks + 2000 + 7;
    tk_symbols(&c->setup, 0, npcs, 0);
    for (int s = 1; s <= o->stacks; s++) {
        uint64_t pcs[3] = {(uint64_t)s, 1000 + (uint64_t)(s % 50) + 1,
                           2000 + (uint64_t)(s % 7) + 1};
        tk_stack(&c->setup, (uint64_t)s, pcs, 3);
    }
    uint64_t dt = 1000ull * (uint64_t)o->conns; /* ~1M events/s over all runs */
    c->span = dt * (uint64_t)o->per_frame;
    tk_event *ev = calloc((size_t)o->per_frame, sizeof *ev);
    for (int f = 0; f < o->distinct; f += 2) {
        for (int i = 0; i < o->per_frame; i++) {
            uint64_t size = 16 + rng(&seed) % 4081;
            ev[i] = (tk_event){.t = (uint64_t)i * dt,
                               .stack = 1 + rng(&seed) % (uint64_t)o->stacks,
                               .size = size,
                               .weight = weight_of(size, o->sample_bytes)};
        }
        for (int pass = 0; pass < 2; pass++) {
            size_t at = c->frames.len;
            hs_wr wr = tk_buf_wr(&c->frames, 64 + (size_t)o->per_frame * 40);
            size_t pos = hs_frame_begin(&wr, HS_FRAME_EVENTS);
            size_t t0 = hs_wr_len(&wr);
            uint8_t pad[8];
            put_t0(pad, 0);
            hs_wr_bytes(&wr, pad, 8);
            uint64_t t = 0;
            for (int i = 0; i < o->per_frame; i++) {
                hs_event_put(&wr, ev[i].t - t, ev[i].stack, pass, ev[i].size, ev[i].weight);
                t = ev[i].t;
            }
            hs_frame_end(&wr, pos);
            tk_buf_commit(&c->frames, &wr);
            c->t0_at[f + pass] = at + t0;
        }
    }
    free(ev);
    tk_frame_offsets(&c->frames, 0, &c->offs);
    c->nframes = (o->events + (uint64_t)o->per_frame - 1) / (uint64_t)o->per_frame;
    c->nframes = (c->nframes + 1) & ~1ull; /* whole alloc/free pairs */
}

static void *conn_main(void *arg)
{
    conn *c = arg;
    const opts *o = c->o;
    int fd = tk_connect(o->port);
    if (fd < 0 || tk_send(fd, c->setup.p, c->setup.len)) {
        c->failed = 1;
        pthread_barrier_wait(&start_barrier);
        return NULL;
    }
    uint64_t seq = 1 + (uint64_t)o->stacks; /* SYMBOLS + STACKS frames */
    uint64_t got = 0;
    pthread_barrier_wait(&start_barrier);
    for (uint64_t i = 0; i < c->nframes; i++) {
        int f = (int)(i % (uint64_t)o->distinct);
        size_t start = c->offs[f];
        size_t end = f + 1 < o->distinct ? c->offs[f + 1] : c->frames.len;
        put_t0(c->frames.p + c->t0_at[f], i * c->span);
        if (tk_send(fd, c->frames.p + start, end - start)) {
            c->failed = 1;
            break;
        }
        seq++;
    }
    tk_buf bye = {0};
    tk_bye(&bye, c->nframes * c->span, c->nframes / 2 * (uint64_t)o->per_frame,
           c->nframes / 2 * (uint64_t)o->per_frame);
    if (!c->failed && tk_send(fd, bye.p, bye.len)) c->failed = 1;
    seq++;
    if (!c->failed && tk_wait_ack(fd, seq, &got, NULL, 0, 600000) != 0) c->failed = 1;
    c->end_ms = tk_now_ms();
    tk_buf_free(&bye);
    close(fd);
    return NULL;
}

static void usage(void)
{
    fprintf(stderr, "usage: hs-loadgen --port PORT [--conns N] [--events PER_CONN] "
                    "[--per-frame K] [--stacks S] [--sample-bytes B] [--first N]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    opts o = {.conns = 16,
              .stacks = 256,
              .per_frame = 4096,
              .distinct = 32,
              .events = 1000000,
              .sample_bytes = 524288};
    signal(SIGPIPE, SIG_IGN);
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) usage();
        const char *a = argv[i], *v = argv[++i];
        if (!strcmp(a, "--port"))
            o.port = atoi(v);
        else if (!strcmp(a, "--conns"))
            o.conns = atoi(v);
        else if (!strcmp(a, "--events"))
            o.events = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--per-frame"))
            o.per_frame = atoi(v);
        else if (!strcmp(a, "--stacks"))
            o.stacks = atoi(v);
        else if (!strcmp(a, "--sample-bytes"))
            o.sample_bytes = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--first"))
            o.first = atoi(v);
        else
            usage();
    }
    if (!o.port || o.conns < 1 || o.per_frame < 1 || o.stacks < 1) usage();
    conn *cs = calloc((size_t)o.conns, sizeof *cs);
    pthread_t *th = calloc((size_t)o.conns, sizeof *th);
    for (int i = 0; i < o.conns; i++) {
        cs[i].o = &o;
        cs[i].idx = o.first + i;
        build(&cs[i]);
    }
    pthread_barrier_init(&start_barrier, NULL, (unsigned)o.conns + 1);
    for (int i = 0; i < o.conns; i++) pthread_create(&th[i], NULL, conn_main, &cs[i]);
    pthread_barrier_wait(&start_barrier);
    start_ms = tk_now_ms();
    int failed = 0;
    uint64_t end = start_ms, total = 0;
    for (int i = 0; i < o.conns; i++) {
        pthread_join(th[i], NULL);
        failed |= cs[i].failed;
        if (cs[i].end_ms > end) end = cs[i].end_ms;
        total += cs[i].nframes * (uint64_t)o.per_frame;
    }
    double secs = (double)(end - start_ms) / 1000.0;
    printf("conns=%d events=%llu seconds=%.3f events_per_s=%.0f%s\n", o.conns,
           (unsigned long long)total, secs, secs > 0 ? (double)total / secs : 0.0,
           failed ? " FAILED" : "");
    for (int i = 0; i < o.conns; i++) {
        tk_buf_free(&cs[i].setup);
        tk_buf_free(&cs[i].frames);
        free(cs[i].offs);
    }
    free(cs);
    free(th);
    return failed ? 1 : 0;
}

/* kit_stream: stream encoding and the blocking client (kit_stream.h). */
#include "hs_testkit.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

void tk_buf_free(tk_buf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

static void reserve(tk_buf *b, size_t n)
{
    if (b->len + n <= b->cap) return;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + n) cap *= 2;
    b->p = realloc(b->p, cap);
    if (!b->p) abort();
    b->cap = cap;
}

hs_wr tk_buf_wr(tk_buf *b, size_t n)
{
    reserve(b, n);
    hs_wr wr;
    hs_wr_init(&wr, b->p + b->len, b->cap - b->len);
    return wr;
}

void tk_buf_commit(tk_buf *b, const hs_wr *wr)
{
    if (wr->err) abort();
    b->len += hs_wr_len(wr);
}

void tk_buf_append(tk_buf *b, const void *p, size_t n)
{
    reserve(b, n);
    memcpy(b->p + b->len, p, n);
    b->len += n;
}

void tk_header(tk_buf *b)
{
    hs_wr wr = tk_buf_wr(b, 16);
    hs_header_encode(&wr);
    tk_buf_commit(b, &wr);
}

static hs_str str(const char *s)
{
    return (hs_str){s, s ? strlen(s) : 0};
}

static void hello(tk_buf *b, const uint8_t run_id[16], uint64_t first_seq, uint64_t flags,
                  const char *token, uint64_t sample_bytes);

void tk_hello(tk_buf *b, const uint8_t run_id[16], uint64_t first_seq, uint64_t flags,
              const char *token)
{
    hello(b, run_id, first_seq, flags, token, 1);
}

void tk_hello_sampled(tk_buf *b, const uint8_t run_id[16], uint64_t sample_bytes)
{
    hello(b, run_id, 0, 0, NULL, sample_bytes);
}

static void hello(tk_buf *b, const uint8_t run_id[16], uint64_t first_seq, uint64_t flags,
                  const char *token, uint64_t sample_bytes)
{
    hs_hello *hp = calloc(1, sizeof *hp); /* big for a thread's stack */
    if (!hp) abort();
#define h (*hp)
    memcpy(h.run_id, run_id, 16);
    h.first_seq = first_seq;
    h.flags = flags;
    h.pid = 4242;
    h.ppid = 1;
    h.start_unix_ns = 1700000000ull * 1000000000ull;
    h.sample_bytes = sample_bytes;
    h.max_depth = 64;
    h.rss_interval_ms = 100;
    h.program = str("/usr/bin/testprog");
    h.argc = 2;
    h.argv[0] = str("testprog");
    h.argv[1] = str("--quote=\"x\"");
    h.hostname = str("testhost");
    h.nlabels = 1;
    h.labels[0].key = str("env");
    h.labels[0].value = str("test");
    h.token = str(token ? token : "");
    h.collector_version = str("test");
    /* The same key for every HELLO of a run, as a collector keeps it. */
    h.resume_key = (hs_str){(const char *)run_id, 16};
    hs_wr wr = tk_buf_wr(b, 8192);
    size_t pos = hs_frame_begin(&wr, HS_FRAME_HELLO);
    hs_hello_encode(&wr, &h);
    hs_frame_end(&wr, pos);
    tk_buf_commit(b, &wr);
#undef h
    free(hp);
}

void tk_symbols(tk_buf *b, uint64_t base, uint32_t n, uint32_t modulo)
{
    hs_wr wr = tk_buf_wr(b, 64 + (size_t)n * 96);
    size_t pos = hs_frame_begin(&wr, HS_FRAME_SYMBOLS);
    for (uint32_t i = 1; i <= n; i++) {
        /* pcs `modulo` apart symbolize the same: fn1 at line 1 is pc 1, 6, 11… */
        char fn[32];
        uint64_t k = modulo ? (base + i - 1) % modulo + 1 : base + i;
        snprintf(fn, sizeof fn, "fn%llu", (unsigned long long)k);
        hs_symbol s = {.pc = base + i,
                       .function = str(fn),
                       .file = str("file.c"),
                       .line = k,
                       .module = str("/usr/bin/testprog"),
                       .module_offset = i * 16};
        hs_symbol_put(&wr, &s);
    }
    hs_frame_end(&wr, pos);
    tk_buf_commit(b, &wr);
}

void tk_stack(tk_buf *b, uint64_t id, const uint64_t *pcs, uint32_t depth)
{
    hs_wr wr = tk_buf_wr(b, 64 + (size_t)depth * 10);
    size_t pos = hs_frame_begin(&wr, HS_FRAME_STACKS);
    hs_stack_put(&wr, id, pcs, depth);
    hs_frame_end(&wr, pos);
    tk_buf_commit(b, &wr);
}

void tk_events(tk_buf *b, const tk_event *ev, size_t n)
{
    hs_wr wr = tk_buf_wr(b, 32 + n * 40);
    size_t pos = hs_frame_begin(&wr, HS_FRAME_EVENTS);
    uint64_t t = n ? ev[0].t : 0;
    hs_wr_varint(&wr, t);
    for (size_t i = 0; i < n; i++) {
        hs_event_put(&wr, ev[i].t - t, ev[i].stack, ev[i].is_free, ev[i].size, ev[i].weight);
        t = ev[i].t;
    }
    hs_frame_end(&wr, pos);
    tk_buf_commit(b, &wr);
}

void tk_bye(tk_buf *b, uint64_t t_end, uint64_t allocs, uint64_t frees)
{
    hs_wr wr = tk_buf_wr(b, 64);
    size_t pos = hs_frame_begin(&wr, HS_FRAME_BYE);
    hs_bye bye = {.t_end_ns = t_end,
                  .flags = HS_BYE_CLEAN,
                  .alloc_events = allocs,
                  .free_events = frees,
                  .collector_peak_bytes = 1000};
    hs_bye_encode(&wr, &bye);
    hs_frame_end(&wr, pos);
    tk_buf_commit(b, &wr);
}

void tk_extras(tk_buf *b)
{
    hs_wr wr = tk_buf_wr(b, 1024);
    size_t pos = hs_frame_begin(&wr, HS_FRAME_MAPPINGS);
    hs_wr_varint(&wr, 5);
    hs_mapping m1 = {.start = 0x400000,
                     .end = 0x401000,
                     .file_offset = 0,
                     .build_id = (const uint8_t *)"\x01\x02",
                     .build_id_len = 2,
                     .path = str("/usr/bin/testprog")};
    hs_mapping m2 = {.start = 0x7f0000000000,
                     .end = 0x7f0000100000,
                     .file_offset = 4096,
                     .path = str("/lib/libc.so.6")};
    hs_mapping_put(&wr, &m1);
    hs_mapping_put(&wr, &m2);
    hs_frame_end(&wr, pos);
    pos = hs_frame_begin(&wr, HS_FRAME_PROCESS);
    for (uint64_t i = 0; i < 3; i++) {
        hs_wr_varint(&wr, i * 1000);
        hs_wr_varint(&wr, 1000 * (i + 1));
        hs_wr_varint(&wr, 5000);
    }
    hs_frame_end(&wr, pos);
    pos = hs_frame_begin(&wr, HS_FRAME_SIZES);
    hs_wr_varint(&wr, 4);
    hs_wr_varint(&wr, 10);
    hs_wr_varint(&wr, 160);
    hs_frame_end(&wr, pos);
    pos = hs_frame_begin(&wr, HS_FRAME_DROPS);
    static const uint64_t drops[][2] = {{1, 7}, {5, 3}, {99, 1}};
    for (int i = 0; i < 3; i++) {
        hs_wr_varint(&wr, drops[i][0]);
        hs_wr_varint(&wr, drops[i][1]);
    }
    hs_frame_end(&wr, pos);
    tk_buf_commit(b, &wr);
}

void tk_raw_frame(tk_buf *b, uint8_t type, const void *payload, size_t len)
{
    hs_wr wr = tk_buf_wr(b, len + 16);
    size_t pos = hs_frame_begin(&wr, type);
    hs_wr_bytes(&wr, payload, len);
    hs_frame_end(&wr, pos);
    tk_buf_commit(b, &wr);
}

size_t tk_frame_offsets(const tk_buf *b, size_t start, size_t **out)
{
    size_t n = 0, cap = 64;
    size_t *offs = malloc(cap * sizeof *offs);
    size_t off = start;
    while (off < b->len) {
        hs_frame f;
        long k = hs_frame_split(b->p + off, b->len - off, &f);
        if (k <= 0) break;
        if (n == cap) offs = realloc(offs, (cap *= 2) * sizeof *offs);
        offs[n++] = off;
        off += (size_t)k;
    }
    *out = offs;
    return n;
}

int tk_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

int tk_send(int fd, const void *p, size_t n)
{
    const uint8_t *q = p;
    while (n) {
        ssize_t w = send(fd, q, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        q += w;
        n -= (size_t)w;
    }
    return 0;
}

/* What one thread has read from one connection and not taken yet: frames
 * are read into it whole, and a frame handed out stays there until the
 * next call. */
static __thread struct {
    uint8_t buf[65536];
    size_t have, used;
    int fd;
} rd = {.fd = -1};

/* The next frame from fd: 0 (*f points into rd until the next call), -1 at
 * EOF, -2 when deadline (tk_now_ms) passes first. */
static int next_frame(int fd, uint64_t deadline, hs_frame *f)
{
    if (rd.fd != fd) {
        rd.have = rd.used = 0;
        rd.fd = fd;
    }
    memmove(rd.buf, rd.buf + rd.used, rd.have - rd.used);
    rd.have -= rd.used;
    rd.used = 0;
    for (;;) {
        long k = hs_frame_split(rd.buf, rd.have, f);
        if (k > 0) {
            rd.used = (size_t)k;
            return 0;
        }
        uint64_t now = tk_now_ms();
        if (now >= deadline) return -2;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, (int)(deadline - now)) <= 0) continue;
        ssize_t r = recv(fd, rd.buf + rd.have, sizeof rd.buf - rd.have, 0);
        if (r <= 0) {
            rd.fd = -1;
            return -1;
        }
        rd.have += (size_t)r;
    }
}

int tk_read_frame(int fd, int type, uint8_t *out, size_t cap, size_t *n, int timeout_ms)
{
    uint64_t deadline = tk_now_ms() + (uint64_t)timeout_ms;
    hs_frame f;
    int rc;
    while ((rc = next_frame(fd, deadline, &f)) == 0)
        if (f.type == type && f.len <= cap) {
            memcpy(out, f.payload, f.len);
            *n = f.len;
            return 0;
        }
    return rc;
}

int tk_wait_ack(int fd, uint64_t want, uint64_t *got, char *reason, size_t rlen, int timeout_ms)
{
    uint64_t deadline = tk_now_ms() + (uint64_t)timeout_ms;
    hs_frame f;
    int rc;
    while ((rc = next_frame(fd, deadline, &f)) == 0) {
        if (f.type == HS_FRAME_ACK) {
            uint64_t v;
            if (hs_ack_decode(&v, f.payload, f.len) == 0) {
                if (got) *got = v;
                if (v >= want) return 0;
            }
        } else if (f.type == HS_FRAME_REFUSE) {
            hs_str r;
            if (reason && hs_refuse_decode(&r, f.payload, f.len) == 0)
                snprintf(reason, rlen, "%.*s", (int)r.len, r.ptr);
            return 1;
        }
    }
    return rc;
}

int tk_wait_closed(int fd, int timeout_ms)
{
    uint64_t deadline = tk_now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        uint64_t now = tk_now_ms();
        if (now >= deadline) return 0;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, (int)(deadline - now)) <= 0) continue;
        char tmp[4096];
        ssize_t r = recv(fd, tmp, sizeof tmp, 0);
        if (r <= 0) return 1;
    }
}

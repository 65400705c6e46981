/* hs_sender: the sender thread, its frame queue and the transports (see hs_sender.h). */
#include "hs_sender.h"

#include <assert.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "hs_collector.h"
#include "hs_error.h"
#include "hs_liveset.h"
#include "hs_mem.h"
#include "hs_proc.h"
#include "hs_python.h"
#include "hs_stacks.h"
#include "hs_symbolize.h"
#include "hs_symup.h"
#include "hs_thread.h"
#include "hs_unwind.h"

#define CHUNK_CAP      (1u << 20)
#define FRAME_SOFT     (128u << 10) /* a batch frame ends once past this */
#define ENTRY_MAX      (HS_FUNC_MAX + 3 * HS_STR_MAX + 128)
#define CYCLE_MS       20
#define STATS_MS       1000
#define EXACT_MS       100 /* an exact-heap observation at most this often */
#define ACTIVATE_NS    (100ull * 1000000)
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
#define CONNECT_MAX_MS 3000 /* a listed address that takes longer is skipped */
#define MAX_PROCESS    64

typedef struct chunk {
    struct chunk *next;
    uint64_t first_seq, last_seq; /* of the frames it holds (0: none yet) */
    size_t len;
    uint8_t data[];
} chunk;

typedef struct pcset {
    uint64_t *slot;
    uint64_t mask, count;
} pcset;

enum { NET_CLOSED, NET_CONNECTING, NET_OPEN };
/* Who runs the rounds: the sender thread, or the thread ending the run when
 * that one has not run yet or sleeps between rounds (take_over). It moves
 * at most once per run, from the thread to the ender, under round_lock. */
enum { OWNER_NONE, OWNER_THREAD, OWNER_ENDER };
/* Held by the sender thread during each round (not while it sleeps), and
 * for good by an ender that takes over from it: the thread, finding it
 * taken, leaves the run to the ender. */
static hs_lock round_lock;

static struct {
    pthread_t thread;
    atomic_int running;   /* the thread exists and drains */
    atomic_int stopping;  /* finish() asked for the end */
    atomic_int done;      /* the thread finished the flush */
    atomic_int activate;  /* a sample was taken: open the output */
    atomic_int finishing; /* a caller of finish() is ending the run */
    atomic_int owner;     /* OWNER_* */
    unsigned bye_flags;

    /* frame queue: head is the oldest unacknowledged frame's chunk */
    chunk *head, *tail, *spare;
    uint64_t bytes, next_seq;
    chunk *cur; /* send cursor */
    size_t cur_off;
    hs_wr wr; /* the frame being written, inside tail */
    size_t frame_pos;

    /* transport */
    int fd, net, opened_once, refused, gave_up;
    /* The run's resume key: drawn before the first HELLO, kept across
     * reconnections; a fork child's reset draws its own. */
    uint8_t resume_key[16];
    int have_key;
    uint8_t hello[HS_STR_MAX * 4];
    size_t hello_len, hello_off;
    uint64_t next_try_ns, backoff_ms;
    /* A list of addresses (hs_sender.h): the one used, whether it was
     * picked yet, failures and refusals in a row, when connect began. */
    int addr, addr_picked, addr_fails, refusals;
    uint64_t connect_ns;
    uint8_t rbuf[HS_STR_MAX + 64];
    size_t rlen;
    int last_errno;
    uint64_t acked_seq; /* every frame below it is delivered */

    /* run state */
    int active;
    pcset pcs;
    uint64_t adds, subs;
    int maps_sent;
    int statm_fd;
    uint64_t next_rss_ns, next_stats_ns, next_exact_ns;
    hs_exact exact_sent;
    hs_process_sample ps[MAX_PROCESS];
    int nps;
    uint64_t alloc_events, free_events, undelivered_frames;
    /* The size histogram, estimated from the samples (hist_add). */
    double hist_n[HS_SIZE_BUCKETS];
    uint64_t hist_b[HS_SIZE_BUCKETS];
    uint64_t drops_sent[HS_DROP_KIND_MAX + 1];
    int bye_queued;
    hs_proc_info *info;
} S = {.fd = -1, .statm_fd = -1, .next_seq = 1};

/* One line to stderr, without stdio's buffers or locks (the program may be
 * exiting, or hold them). Long lines are cut. */
static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    char msg[HS_CONFIG_STR + 400];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof msg - 1) n = (int)sizeof msg - 1;
    if (n > 0 && write(2, msg, (size_t)n)) {
    }
}

/* ---- the frame queue ---- */

static void chunk_free(chunk *c)
{
    if (!S.spare) {
        c->next = NULL;
        c->len = 0;
        c->first_seq = c->last_seq = 0;
        S.spare = c;
    } else {
        hs_mem_unmap(c, sizeof(chunk) + CHUNK_CAP);
    }
}

static chunk *chunk_new(void)
{
    chunk *c = S.spare;
    if (c)
        S.spare = NULL;
    else
        c = hs_mem_map(sizeof(chunk) + CHUNK_CAP);
    return c;
}

/* Starts a frame of the given type in the tail chunk. 0 or HS_ENOMEM. */
static int fr_begin(uint8_t type)
{
    if (!S.tail || CHUNK_CAP - S.tail->len < FRAME_SOFT + ENTRY_MAX + 64) {
        chunk *c = chunk_new();
        if (!c) return HS_ENOMEM;
        if (S.tail)
            S.tail->next = c;
        else
            S.head = c;
        S.tail = c;
        if (!S.cur) {
            S.cur = c;
            S.cur_off = 0;
        }
    }
    hs_wr_init(&S.wr, S.tail->data + S.tail->len, CHUNK_CAP - S.tail->len);
    S.frame_pos = hs_frame_begin(&S.wr, type);
    return 0;
}

static void fr_end(void)
{
    hs_frame_end(&S.wr, S.frame_pos);
    if (S.wr.err) return; /* cannot happen with ENTRY_MAX room; drop the frame */
    size_t n = hs_wr_len(&S.wr);
    S.tail->len += n;
    S.bytes += n;
    if (!S.tail->first_seq) S.tail->first_seq = S.next_seq;
    S.tail->last_seq = S.next_seq++;
}

static int fr_full(void)
{
    return hs_wr_len(&S.wr) > FRAME_SOFT;
}

/* Releases every chunk whose frames are all below next_seq and fully sent. */
static void queue_ack(uint64_t next_seq)
{
    while (S.head && S.head->last_seq < next_seq && S.head->last_seq) {
        chunk *c = S.head;
        if (c == S.tail) break; /* still being appended to (and maybe sent) */
        if (c == S.cur) {
            if (S.cur_off < c->len) break;
            S.cur = c->next;
            S.cur_off = 0;
        }
        S.head = c->next;
        S.bytes -= c->len;
        chunk_free(c);
    }
}

/* File targets: everything written is done with. */
static void queue_release_written(void)
{
    while (S.head && S.head != S.cur) {
        chunk *c = S.head;
        S.head = c->next;
        S.bytes -= c->len;
        chunk_free(c);
    }
    if (!S.cur || (S.cur_off == S.cur->len && !S.cur->next)) S.acked_seq = S.next_seq;
    if (S.cur && S.cur == S.tail && S.cur_off == S.cur->len) {
        S.bytes -= S.cur->len;
        S.cur->len = 0;
        S.cur->first_seq = S.cur->last_seq = 0;
        S.cur_off = 0;
    }
}

/* ---- pcs already defined by SYMBOLS ---- */

static int pcset_add(pcset *s, uint64_t pc) /* 1 if new */
{
    if ((s->count + 1) * 2 > s->mask + 1 || !s->slot) {
        uint64_t ncap = s->slot ? (s->mask + 1) * 2 : 8192;
        uint64_t *n = hs_mem_map(ncap * sizeof *n);
        if (!n) return 1; /* define it again rather than lose it */
        for (uint64_t i = 0; s->slot && i <= s->mask; i++) {
            if (!s->slot[i]) continue;
            uint64_t j = (s->slot[i] * 0x9E3779B97F4A7C15ull) >> 20 & (ncap - 1);
            while (n[j]) j = (j + 1) & (ncap - 1);
            n[j] = s->slot[i];
        }
        if (s->slot) hs_mem_unmap(s->slot, (s->mask + 1) * sizeof *n);
        s->slot = n;
        s->mask = ncap - 1;
    }
    uint64_t key = pc ? pc : ~0ull;
    for (uint64_t j = (key * 0x9E3779B97F4A7C15ull) >> 20 & s->mask;; j = (j + 1) & s->mask) {
        if (s->slot[j] == key) return 0;
        if (!s->slot[j]) {
            s->slot[j] = key;
            s->count++;
            return 1;
        }
    }
}

/* ---- building frames ---- */

static uint64_t rel_now(void)
{
    uint64_t n = hs_now_ns();
    return n > hs__run.start_ns ? n - hs__run.start_ns : 0;
}

static void send_mappings(void)
{
    if (fr_begin(HS_FRAME_MAPPINGS)) return;
    hs_wr_varint(&S.wr, rel_now());
    hs_proc_mappings_put(&S.wr);
    if (S.wr.err) { /* too many objects for one chunk: keep what fits is not
                       possible mid-entry, so send the empty set rather than none */
        hs_wr_init(&S.wr, S.tail->data + S.tail->len, CHUNK_CAP - S.tail->len);
        S.frame_pos = hs_frame_begin(&S.wr, HS_FRAME_MAPPINGS);
        hs_wr_varint(&S.wr, rel_now());
    }
    fr_end();
    S.maps_sent = 1;
}

static void send_stacks(void)
{
    hs_stack_rec *list = hs__stacks_take_new();
    if (!list) return;
    int open = 0;
    for (hs_stack_rec *r = list; r; r = r->next_new) {
        for (uint32_t i = 0; i < r->depth; i++) {
            uint64_t pc = r->pcs[i];
            if (!pcset_add(&S.pcs, pc)) continue;
            hs_symbol sy;
            hs__consumer_beat();
            /* Python's names come from the interpreter; a native frame is
             * its module and offset, named by the server */
            if (hs_py_is_pc(pc))
                hs_py_symbol(pc, &sy);
            else
                hs_symbolize_basic(pc, &sy);
            if (!open) {
                if (fr_begin(HS_FRAME_SYMBOLS)) return;
                open = 1;
            }
            hs_symbol_put(&S.wr, &sy);
            if (fr_full()) {
                fr_end();
                open = 0;
            }
        }
    }
    if (open) fr_end();
    open = 0;
    for (hs_stack_rec *r = list; r; r = r->next_new) {
        if (!open) {
            if (fr_begin(HS_FRAME_STACKS)) return;
            open = 1;
        }
        hs_stack_put(&S.wr, r->id, r->pcs, r->depth);
        if (fr_full()) {
            fr_end();
            open = 0;
        }
    }
    if (open) fr_end();
}

static void count_dropped(const hs_rec *rec)
{
    if (rec->head & 1) {
        hs__drop_add(HS_DROP_FREE_EVENTS, 1);
        hs__drop_add(HS_DROP_FREE_BYTES, rec->weight);
    } else {
        hs__drop_add(HS_DROP_ALLOC_EVENTS, 1);
        hs__drop_add(HS_DROP_ALLOC_BYTES, rec->weight);
    }
}

/* The size histogram (SIZES) from the sampled allocations: a sample of n
 * bytes with weight w stands for w bytes of allocations of its size, so for
 * w / n allocations. Unbiased as the weights are, and exact at every
 * allocation (w == n): the program's threads pay nothing for it, where
 * counting every request in its bucket cost every unsampled malloc six
 * instructions (a bsr and two adds to memory; 1-2% of a small-object
 * churn's wall time, within the noise of one run). Dropped samples count
 * too: what they stand for was allocated. */
static void hist_add(const hs_rec *rec)
{
    assert(!(rec->head & 1));
    unsigned b = hs_size_bucket_of(rec->size);
    S.hist_n[b] += rec->size ? (double)rec->weight / (double)rec->size : 1.0;
    S.hist_b[b] += rec->weight;
}

/* One ring's records, as EVENTS frames (or counted as dropped). */
static void send_span(const hs_ring_span *sp)
{
    int drop = S.refused || S.gave_up || S.bytes > hs__cfg.buffer_bytes;
    int open = 0;
    uint64_t prev = 0;
    for (uint64_t i = sp->tail; i != sp->head; i++) {
        const hs_rec *rec = hs__span_rec(sp, i);
        if (!(rec->head & 1)) hist_add(rec);
        if (drop || (!open && fr_begin(HS_FRAME_EVENTS))) {
            count_dropped(rec);
            continue;
        }
        uint64_t t = rec->t_ns > hs__run.start_ns ? rec->t_ns - hs__run.start_ns : 0;
        if (!open) {
            open = 1;
            prev = t;
            hs_wr_varint(&S.wr, t);
        }
        uint64_t dt = t > prev ? t - prev : 0;
        prev += dt;
        hs_event_put(&S.wr, dt, rec->head >> 1, (int)(rec->head & 1), rec->size, rec->weight);
        if (rec->head & 1)
            S.free_events++;
        else
            S.alloc_events++;
        if (fr_full()) {
            fr_end();
            open = 0;
        }
    }
    if (open) fr_end();
}

/* Every ring's records up to the snapshot. */
static void send_events(void)
{
    hs_ring_span sp;
    hs__rings_drain_begin();
    while (hs__rings_drain_next(&sp)) send_span(&sp);
    hs__rings_drain_end();
}

static void sample_process(uint64_t now)
{
    if (!hs__cfg.rss_ms || now < S.next_rss_ns || S.nps >= MAX_PROCESS) return;
    uint64_t rss, vsize;
    if (hs_proc_statm(&S.statm_fd, &rss, &vsize) == 0)
        S.ps[S.nps++] = (hs_process_sample){rel_now(), rss, vsize};
    S.next_rss_ns = now + hs__cfg.rss_ms * 1000000u;
}

static void send_process(void)
{
    if (!S.nps || fr_begin(HS_FRAME_PROCESS)) return;
    for (int i = 0; i < S.nps; i++) {
        hs_wr_varint(&S.wr, S.ps[i].t_ns);
        hs_wr_varint(&S.wr, S.ps[i].rss_bytes);
        hs_wr_varint(&S.wr, S.ps[i].vsize_bytes);
    }
    fr_end();
    S.nps = 0;
}

static void send_stats(int force)
{
    if (!fr_begin(HS_FRAME_SIZES)) {
        for (int i = 0; i < HS_SIZE_BUCKETS; i++) {
            uint64_t n = (uint64_t)(S.hist_n[i] + 0.5);
            if (!n && !S.hist_b[i]) continue;
            hs_wr_varint(&S.wr, (uint64_t)i);
            hs_wr_varint(&S.wr, n);
            hs_wr_varint(&S.wr, S.hist_b[i]);
        }
        fr_end();
    }
    int changed = force;
    uint64_t d[HS_DROP_KIND_MAX + 1];
    for (int k = 1; k <= HS_DROP_KIND_MAX; k++) {
        d[k] = atomic_load_explicit(&hs__drops[k], memory_order_relaxed);
        if (d[k] != S.drops_sent[k]) changed = 1;
    }
    if (!changed || fr_begin(HS_FRAME_DROPS)) return;
    for (int k = 1; k <= HS_DROP_KIND_MAX; k++) {
        if (!d[k] && !force) continue;
        hs_wr_varint(&S.wr, (uint64_t)k);
        hs_wr_varint(&S.wr, d[k]);
        S.drops_sent[k] = d[k];
    }
    fr_end();
}

static uint64_t rel_of(uint64_t t)
{
    return t > hs__run.start_ns ? t - hs__run.start_ns : 0;
}

/* The exact heap totals (hs_thread.h), as DROPS entries of their own
 * frame (docs/protocol.md): at most every EXACT_MS while they change, and
 * at the end. */
static void send_exact(uint64_t now, int final)
{
    int how = hs__exact_how();
    if (!how || (!final && now < S.next_exact_ns)) return;
    hs_exact x;
    hs__exact_read(&x, now);
    x.t_ns = rel_of(x.t_ns);
    x.max_t_ns = rel_of(x.max_t_ns);
    x.peak_t_ns = rel_of(x.peak_t_ns);
    if (!x.t_ns) x.t_ns = 1;
    x.flags = hs__exact_flags();
    if (!final && x.live_bytes == S.exact_sent.live_bytes && x.allocs == S.exact_sent.allocs &&
        x.frees == S.exact_sent.frees && x.max_bytes == x.live_bytes)
        return; /* nothing moved (the window is read again next time) */
    if (fr_begin(HS_FRAME_DROPS)) return;
    hs_exact_put(&S.wr, &x);
    fr_end();
    S.exact_sent = x;
    S.next_exact_ns = now + EXACT_MS * 1000000ull;
}

static void send_bye(void)
{
    if (fr_begin(HS_FRAME_BYE)) return;
    hs_bye b = {
        .t_end_ns = rel_now(),
        .flags = S.bye_flags,
        .alloc_events = S.alloc_events,
        .free_events = S.free_events,
        .collector_peak_bytes = hs_mem_peak(),
    };
    hs_bye_encode(&S.wr, &b);
    fr_end();
    S.bye_queued = 1;
}

/* One round: everything the program left since the previous one. */
static void cycle(uint64_t now, int final)
{
    /* RSS first: symbolizing a batch of new stacks (the first one loads
     * debug information) must not leave a hole at the start of the series. */
    sample_process(now);
    uint64_t adds, subs;
    hs_proc_objects_gen(&adds, &subs);
    if (!S.maps_sent || adds != S.adds || subs != S.subs) {
        /* An object went away: its unwinding rules must not serve
         * whatever gets its addresses next. */
        if (subs != S.subs) hs__unwind_invalidate();
        if (adds != S.adds) hs_py_scan(); /* an embedder's libpython */
        S.adds = adds;
        S.subs = subs;
        send_mappings();
    }
    hs__rings_snapshot();
    send_stacks();
    send_events();
    if (final || S.nps >= MAX_PROCESS / 2 || (S.nps && now >= S.next_stats_ns)) send_process();
    if (final || now >= S.next_stats_ns) {
        send_stats(final);
        S.next_stats_ns = now + STATS_MS * 1000000ull;
    }
    send_exact(now, final);
    if (final) send_bye();
}

/* ---- transport ---- */

/* The secret that lets this run, and only it, be resumed (docs/protocol.md,
 * HELLO). Without getrandom (old kernels, no entropy yet) it comes from the
 * clocks, the pid and an address: weaker, but still never shown by the
 * server, which is what keeps an API reader from resuming the run. */
static void draw_resume_key(void)
{
    if (getrandom(S.resume_key, sizeof S.resume_key, GRND_NONBLOCK) != sizeof S.resume_key) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t a = hs_now_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)&ts;
        uint64_t b = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_sec;
        for (int i = 0; i < 8; i++) S.resume_key[i] = (uint8_t)(a >> (8 * i));
        for (int i = 0; i < 8; i++) S.resume_key[8 + i] = (uint8_t)(b >> (8 * i));
    }
    S.have_key = 1;
}

static void build_hello(int resumed)
{
    if (!S.have_key) draw_resume_key();
    hs_hello *h = hs_mem_map(sizeof *h);
    if (!h) return;
    if (!S.info) {
        S.info = hs_mem_map(sizeof *S.info);
        if (!S.info) {
            hs_mem_unmap(h, sizeof *h);
            return;
        }
    }
    hs_proc_info_fill(S.info, h, hs__cfg.labels);
    memcpy(h->run_id, hs__run.run_id, 16);
    memcpy(h->parent_run_id, hs__run.parent_run_id, 16);
    h->first_seq = S.head && S.head->last_seq ? S.head->first_seq : S.next_seq;
    h->flags = (resumed ? HS_HELLO_RESUMED : 0) | hs__symup_hello_flags();
    h->pid = (uint64_t)getpid();
    h->ppid = (uint64_t)getppid();
    h->start_unix_ns = hs__run.start_unix_ns;
    h->sample_bytes = hs__cfg.sample_bytes;
    h->max_depth = hs__cfg.depth;
    h->rss_interval_ms = hs__cfg.rss_ms;
    h->token = (hs_str){hs__cfg.token, strlen(hs__cfg.token)};
    h->collector_version = (hs_str){HEAPSTORE_VERSION, strlen(HEAPSTORE_VERSION)};
    h->resume_key = (hs_str){(const char *)S.resume_key, sizeof S.resume_key};
    hs_wr wr;
    hs_wr_init(&wr, S.hello, sizeof S.hello);
    hs_header_encode(&wr);
    size_t pos = hs_frame_begin(&wr, HS_FRAME_HELLO);
    hs_hello_encode(&wr, h);
    hs_frame_end(&wr, pos);
    if (wr.err) { /* an enormous argv: send it without arguments */
        h->argc = 0;
        hs_wr_init(&wr, S.hello, sizeof S.hello);
        hs_header_encode(&wr);
        pos = hs_frame_begin(&wr, HS_FRAME_HELLO);
        hs_hello_encode(&wr, h);
        hs_frame_end(&wr, pos);
    }
    S.hello_len = wr.err ? 0 : hs_wr_len(&wr);
    S.hello_off = 0;
    hs_mem_unmap(h, sizeof *h);
}

/* The address to connect to. A list's first is picked here, not at
 * start-up: a fork child resets S and picks by its own pid. */
static const hs_config_addr *cur_addr(void)
{
    if (hs__cfg.naddr > 1 && !S.addr_picked) {
        uint64_t k = hs__cfg.seed ? hs__cfg.seed : (uint64_t)getpid();
        S.addr = (int)(k % (uint64_t)hs__cfg.naddr);
        S.addr_picked = 1;
    }
    assert(S.addr >= 0 && S.addr < (hs__cfg.naddr > 1 ? hs__cfg.naddr : 1));
    return &hs__cfg.addr[S.addr];
}

/* After a failed or lost connection on a list: the next address, tried at
 * once (1), unless every address has now failed in a row (0: back off). */
static int next_addr(void)
{
    S.addr = (S.addr + 1) % hs__cfg.naddr;
    if (++S.addr_fails % hs__cfg.naddr == 0) return 0;
    S.next_try_ns = 0;
    return 1;
}

static void net_close(void)
{
    if (S.fd >= 0) close(S.fd);
    S.fd = -1;
    S.net = NET_CLOSED;
    S.cur = S.head;
    S.cur_off = 0;
    S.rlen = 0;
    hs__symup_conn_lost();
    if (hs__cfg.naddr > 1 && next_addr()) return;
    uint64_t b = S.backoff_ms ? S.backoff_ms * 2 : BACKOFF_MIN_MS;
    S.backoff_ms = b > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : b;
    S.next_try_ns = hs_now_ns() + S.backoff_ms * 1000000ull;
}

static void net_opened(void)
{
    S.net = NET_OPEN;
    build_hello(S.opened_once);
    S.opened_once = 1;
    S.cur = S.head;
    S.cur_off = 0;
}

static void open_file(void)
{
    char path[HS_CONFIG_STR + 32];
    if (hs__run.has_parent)
        snprintf(path, sizeof path, "%s.%ld", hs__cfg.path, (long)getpid());
    else
        snprintf(path, sizeof path, "%s", hs__cfg.path);
    S.fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (S.fd < 0) {
        S.last_errno = errno;
        S.gave_up = 1; /* a file that cannot be created will not appear later */
        return;
    }
    net_opened();
}

/* A literal address (the usual 127.0.0.1 or ::1) and a numeric port: no
 * resolver, whose set-up cost 0.1-0.2 ms at the end of every process. 1
 * with *sa and *len. */
static int literal_addr(const hs_config_addr *a, struct sockaddr_storage *sa, socklen_t *len)
{
    char *end;
    unsigned long port = strtoul(a->port, &end, 10);
    if (!a->port[0] || *end || port > 65535) return 0;
    memset(sa, 0, sizeof *sa);
    struct sockaddr_in *v4 = (struct sockaddr_in *)sa;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)sa;
    if (inet_pton(AF_INET, a->host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
        *len = sizeof *v4;
        return 1;
    }
    if (inet_pton(AF_INET6, a->host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
        *len = sizeof *v6;
        return 1;
    }
    return 0;
}

/* A non-blocking connection under way to addr: 1, or 0 (errno kept). */
static int try_connect(const struct sockaddr *addr, socklen_t len)
{
    int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return 0;
    if (connect(fd, addr, len) == 0 || errno == EINPROGRESS) {
        S.fd = fd;
        S.net = NET_CONNECTING;
        if (hs__cfg.naddr > 1) S.connect_ns = hs_now_ns();
        return 1;
    }
    S.last_errno = errno;
    close(fd);
    return 0;
}

static void open_tcp(void)
{
    const hs_config_addr *to = cur_addr();
    struct sockaddr_storage sa;
    socklen_t len;
    if (literal_addr(to, &sa, &len)) {
        if (!try_connect((const struct sockaddr *)&sa, len)) net_close();
        return;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *ai = NULL;
    int rc = getaddrinfo(to->host, to->port, &hints, &ai);
    if (rc != 0 || !ai) {
        S.last_errno = EHOSTUNREACH;
        net_close();
        return;
    }
    for (struct addrinfo *a = ai; a && !try_connect(a->ai_addr, a->ai_addrlen); a = a->ai_next) {
    }
    freeaddrinfo(ai);
    if (S.fd < 0) net_close();
}

static void handle_server_frames(void)
{
    size_t off = 0;
    for (;;) {
        hs_frame f;
        long n = hs_frame_split(S.rbuf + off, S.rlen - off, &f);
        if (n == 0) break;
        if (n < 0) {
            S.last_errno = EPROTO;
            net_close();
            return;
        }
        off += (size_t)n;
        if (f.type == HS_FRAME_ACK) {
            uint64_t next;
            if (hs_ack_decode(&next, f.payload, f.len) == 0) {
                if (next > S.acked_seq) S.acked_seq = next;
                queue_ack(next);
            }
            S.backoff_ms = 0;
            S.addr_fails = S.refusals = 0;
        } else if (f.type == HS_FRAME_SYMREQ) {
            hs__symup_request(f.payload, f.len);
        } else if (f.type == HS_FRAME_REFUSE) {
            hs_str why;
            int next = hs__cfg.naddr > 1 && ++S.refusals < hs__cfg.naddr;
            if (hs_refuse_decode(&why, f.payload, f.len) == 0)
                say("heapstore: the server refused the run: %.*s%s\n",
                    (int)(why.len > 200 ? 200 : why.len), why.ptr,
                    next ? " (trying the next address)" : "");
            if (next) { /* another front end may take it */
                net_close();
                return;
            }
            S.refused = 1;
            if (S.fd >= 0) close(S.fd);
            S.fd = -1;
            S.net = NET_CLOSED;
            return;
        }
    }
    memmove(S.rbuf, S.rbuf + off, S.rlen - off);
    S.rlen -= off;
}

/* Opens the output, or finishes a connection under way: 1 once it is open. */
static int pump_open(void)
{
    if (S.fd < 0) {
        if (hs_now_ns() < S.next_try_ns) return 0;
        if (hs__cfg.target == HS_TARGET_FILE)
            open_file();
        else
            open_tcp();
        if (S.fd < 0) return 0;
    }
    if (S.net != NET_CONNECTING) return 1;
    struct pollfd p = {S.fd, POLLOUT, 0};
    if (poll(&p, 1, 0) <= 0) {
        if (hs__cfg.naddr > 1 && hs_now_ns() - S.connect_ns > CONNECT_MAX_MS * 1000000ull) {
            S.last_errno = ETIMEDOUT; /* a host that is gone: the next one */
            net_close();
        }
        return 0;
    }
    int err = 0;
    socklen_t l = sizeof err;
    getsockopt(S.fd, SOL_SOCKET, SO_ERROR, &err, &l);
    if (err) {
        S.last_errno = err;
        net_close();
        return 0;
    }
    int one = 1;
    setsockopt(S.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    net_opened();
    return 1;
}

/* The next bytes to write: HELLO's rest, a symbol upload's frame (whole,
 * and only once the run's own frames are all out: hs_symup.h), or the
 * queue's. 0 when nothing is left; *up says an upload's. */
static int next_out(const uint8_t **p, size_t *n, int *up)
{
    *up = 0;
    if (S.hello_off < S.hello_len) {
        *p = S.hello + S.hello_off;
        *n = S.hello_len - S.hello_off;
        return 1;
    }
    while (S.cur && S.cur_off == S.cur->len && S.cur->next) {
        S.cur = S.cur->next;
        S.cur_off = 0;
    }
    int idle = !S.cur || S.cur_off == S.cur->len;
    if (hs__cfg.target != HS_TARGET_FILE && (*up = hs__symup_out(p, n, idle))) return 1;
    if (!S.cur || S.cur_off >= S.cur->len) return 0;
    *p = S.cur->data + S.cur_off;
    *n = S.cur->len - S.cur_off;
    return 1;
}

/* HELLO's rest and the queue's first chunk in one write: the server then
 * reads the run's first frames with its HELLO and stores them in HELLO's
 * transaction, one commit and one ACK where two writes often cost two (at
 * every exit of a short process, which connects only then). The number of
 * bytes written, as send's. */
static ssize_t send_hello_and_frames(void)
{
    while (S.cur && S.cur_off == S.cur->len && S.cur->next) {
        S.cur = S.cur->next;
        S.cur_off = 0;
    }
    struct iovec iov[2] = {{S.hello + S.hello_off, S.hello_len - S.hello_off}, {NULL, 0}};
    if (S.cur && S.cur_off < S.cur->len)
        iov[1] = (struct iovec){S.cur->data + S.cur_off, S.cur->len - S.cur_off};
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = iov[1].iov_len ? 2 : 1};
    ssize_t w = sendmsg(S.fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w <= 0) return w;
    size_t h = (size_t)w < iov[0].iov_len ? (size_t)w : iov[0].iov_len;
    S.hello_off += h;
    S.cur_off += (size_t)w - h;
    assert(S.hello_off <= S.hello_len && (!S.cur || S.cur_off <= S.cur->len));
    return w;
}

/* Writes until everything is out or the socket would block. 0, or -1 when
 * the output failed (closed, or given up for a file). */
static int pump_write(int file)
{
    const uint8_t *p;
    size_t n;
    int up;
    while (next_out(&p, &n, &up)) {
        int hello = S.hello_off < S.hello_len;
        if (hello && !file) {
            ssize_t w = send_hello_and_frames();
            if (w >= 0) continue;
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
            S.last_errno = errno;
            net_close();
            return -1;
        }
        ssize_t w = file ? write(S.fd, p, n) : send(S.fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
            S.last_errno = errno;
            if (file)
                S.gave_up = 1;
            else
                net_close();
            return -1;
        }
        if (S.hello_off < S.hello_len)
            S.hello_off += (size_t)w;
        else if (up)
            hs__symup_wrote((size_t)w);
        else
            S.cur_off += (size_t)w;
    }
    return 0;
}

/* Reads and handles the server's frames until the socket would block. */
static void pump_read(void)
{
    for (;;) {
        ssize_t r = recv(S.fd, S.rbuf + S.rlen, sizeof S.rbuf - S.rlen, MSG_DONTWAIT);
        if (r > 0) {
            S.rlen += (size_t)r;
            handle_server_frames();
            if (S.fd < 0) return;
            if (S.rlen == sizeof S.rbuf) { /* a frame we cannot hold: not ours to parse */
                S.last_errno = EPROTO;
                net_close();
                return;
            }
            continue;
        }
        if (r == 0) {
            S.last_errno = ECONNRESET;
            net_close();
            return;
        }
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            S.last_errno = errno;
            net_close();
        }
        return;
    }
}

/* Moves bytes without blocking; returns once the socket would block. */
static void pump(void)
{
    if (S.refused || S.gave_up || !pump_open()) return;
    int file = hs__cfg.target == HS_TARGET_FILE;
    if (pump_write(file) != 0) return;
    if (file)
        queue_release_written();
    else
        pump_read();
}

/* Everything is delivered: written (file) or acknowledged (tcp). Frames
 * the server acknowledged stay delivered when it then closes the
 * connection (as it does after BYE): the ACK and the end of the stream
 * often arrive in one read, and reconnecting to send nothing new cost a
 * connection and a resumed HELLO at every exit. */
static int delivered(void)
{
    if (S.acked_seq > 0 && S.acked_seq >= S.next_seq) return 1;
    if (S.fd < 0 || S.net != NET_OPEN || S.hello_off < S.hello_len) return 0;
    return S.acked_seq >= S.next_seq;
}

/* What to wait for: 1 with *p set when the connection is to be watched. */
static int poll_set(struct pollfd *p)
{
    *p = (struct pollfd){S.fd, 0, 0};
    if (S.fd < 0 || hs__cfg.target != HS_TARGET_TCP) return 0;
    p->events = POLLIN;
    if (S.net == NET_CONNECTING || (S.cur && S.cur_off < S.cur->len) || S.hello_off < S.hello_len ||
        hs__symup_busy())
        p->events |= POLLOUT;
    return 1;
}

static void wait_events(int timeout_ms)
{
    struct pollfd p;
    int net = poll_set(&p);
    hs__consumer_wait(net ? &p : NULL, timeout_ms);
}

/* Rounds until the end of the run is asked for, the last one included.
 * The sender thread (thread: 1) runs each under round_lock and sleeps
 * without it; it returns 0 when it finds the lock taken (an ender took the
 * run over), and keeps it after the last round, for deliver(). */
static int rounds(int thread)
{
    uint64_t started = hs_now_ns();
    for (;;) {
        if (thread && !hs_lock_try(&round_lock)) return 0;
        assert(!thread || atomic_load(&S.owner) == OWNER_THREAD);
        uint64_t now = hs_now_ns();
        int stopping = atomic_load(&S.stopping);
        hs__consumer_beat();
        if (!S.active && (stopping || atomic_load(&S.activate) || hs__consumer_rung() ||
                          now - started > ACTIVATE_NS))
            S.active = 1;
        if (S.active) {
            hs__busy_enter(&hs__sender_busy);
            hs__stacks_serve_unwinder(); /* a sampling thread may wait for it */
            cycle(now, stopping);
            hs__busy_leave(&hs__sender_busy);
            pump();
        }
        if (stopping) break;
        uint64_t wait = CYCLE_MS;
        if (hs__cfg.rss_ms && hs__cfg.rss_ms < wait) wait = hs__cfg.rss_ms;
        struct pollfd p;
        int net = poll_set(&p);
        if (thread) hs_lock_release(&round_lock);
        /* (an ender may close p.fd meanwhile: the poll ends, the next
         * round finds the lock taken) */
        hs__consumer_wait(net ? &p : NULL, (int)wait);
    }
    return 1;
}

/* The end: deliver within the flush bound, then stop draining. */
static void deliver(void)
{
    hs__symup_final();
    uint64_t deadline = hs_now_ns() + hs__cfg.exit_flush_ms * 1000000ull;
    int attempts = 0;
    while ((!delivered() || hs__symup_pending()) && !S.refused && !S.gave_up &&
           hs_now_ns() < deadline) {
        if (S.fd < 0) {
            /* Never reached: one more try (one per listed address), but do
             * not hold the exit for servers that refuse connections. */
            if (attempts++ >= (hs__cfg.naddr > 1 ? hs__cfg.naddr : 1) && !S.opened_once) break;
            S.next_try_ns = 0;
        }
        pump();
        if ((delivered() && !hs__symup_pending()) || S.fd < 0) continue;
        uint64_t left = (deadline - hs_now_ns()) / 1000000u;
        wait_events(left > 50 ? 50 : (int)left + 1);
    }
    if (!delivered()) S.undelivered_frames = S.next_seq - (S.acked_seq ? S.acked_seq : 1);
    hs__consumer_set_alive(0);
    atomic_store(&S.running, 0);
    atomic_store(&S.done, 1);
    syscall(SYS_futex, (int *)&S.done, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static void *sender_main(void *arg)
{
    (void)arg;
    int none = OWNER_NONE;
    /* The run ended before this thread first ran: ended by its ender. */
    if (!atomic_compare_exchange_strong(&S.owner, &none, OWNER_THREAD)) return NULL;
    hs_tls *t = &hs__tls;
    t->state = HS_T_INTERNAL;
    hs__exact_park(t);
    t->guard = 1;
    t->countdown = 0;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    if (rounds(1)) deliver(); /* else the ender delivers */
    return NULL;
}

/* The thread ending the run does the sender's last round and delivery
 * itself when the sender thread has not run yet, or sleeps between rounds:
 * a short process on a busy machine often ends before its new thread is
 * first scheduled (2-3 ms later, measured), and waiting for it, or waking
 * it and waiting for it to be scheduled, was most of the cost of its end.
 * Not when the caller interrupted collector code (a signal handler's
 * _exit: its guard is nested), which may hold the locks a round takes, nor
 * while the thread is in a round: it waits for the thread then, as before.
 * Signals wait until it is done, as they do on the sender thread. 1 when it
 * took over. */
static int take_over(void)
{
    assert(hs__tls.guard > 0); /* hs__run_end's */
    if (hs__tls.guard != 1) return 0;
    int none = OWNER_NONE;
    if (!atomic_compare_exchange_strong(&S.owner, &none, OWNER_ENDER)) {
        /* The thread's: between its rounds, the lock is free, and the
         * thread leaves the run at its next round. */
        if (!hs_lock_try(&round_lock)) return 0;
        int thread = OWNER_THREAD;
        if (!atomic_compare_exchange_strong(&S.owner, &thread, OWNER_ENDER)) {
            hs_lock_release(&round_lock);
            return 0;
        }
    }
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    rounds(0); /* one: stopping is set */
    deliver();
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return 1;
}

int hs__sender_start(void)
{
    if (atomic_load(&S.running)) return 0;
    if (hs__consumer_open() != 0) return HS_EIO;
    atomic_store(&S.done, 0);
    atomic_store(&S.running, 1);
    hs__consumer_set_alive(1);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 1u << 20);
    int rc = pthread_create(&S.thread, &attr, sender_main, NULL);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        hs__consumer_set_alive(0);
        atomic_store(&S.running, 0);
        return HS_ENOMEM;
    }
    return 0;
}

void hs__sender_activate(void)
{
    if (!atomic_load_explicit(&S.activate, memory_order_relaxed))
        atomic_store_explicit(&S.activate, 1, memory_order_relaxed);
}

int hs__sender_alive(void)
{
    return atomic_load_explicit(&S.running, memory_order_relaxed) &&
           !atomic_load_explicit(&S.done, memory_order_relaxed);
}

/* Waits until the sender has finished, or the deadline. Woken by the sender
 * as it finishes (a futex on S.done: no polling step added to every
 * process's exit). Only system calls: a signal handler may be waiting. */
static void wait_done(uint64_t deadline)
{
    while (!atomic_load(&S.done) && hs_now_ns() < deadline) {
        long rc = syscall(SYS_futex, (int *)&S.done, FUTEX_WAIT_PRIVATE, 0,
                          &(struct timespec){0, 50 * 1000000}, NULL, 0);
        if (rc < 0 && errno != EAGAIN && errno != ETIMEDOUT && errno != EINTR)
            nanosleep(&(struct timespec){0, 1000000}, NULL); /* no futex here (seccomp) */
    }
}

void hs__sender_finish(unsigned bye_flags)
{
    /* The sender bounds its own flush; this bound only guards against a
     * sender that cannot run at all. */
    uint64_t deadline = hs_now_ns() + (hs__cfg.exit_flush_ms + 1000) * 1000000ull;
    if (atomic_exchange(&S.finishing, 1)) {
        /* Another thread is ending the run (exit while a thread calls
         * _exit), or the frame a signal handler interrupted is: wait for
         * it, so that the process does not end in the middle of the flush. */
        wait_done(deadline);
        return;
    }
    S.bye_flags = bye_flags;
    hs__exact_flush(&hs__tls); /* what the ending thread holds back */
    if (!atomic_load(&S.running) && hs__sender_start() != 0) {
        atomic_store(&S.done, 1);
        return;
    }
    atomic_store(&S.stopping, 1);
    if (!take_over()) {
        hs__consumer_kick();
        wait_done(deadline);
    }
    if (!atomic_load(&S.done)) {
        /* Say so rather than leave the run's end unexplained. */
        say("heapstore: %s: not delivered; the sender did not finish within "
            "HEAPSTORE_EXIT_FLUSH_MS=%llu (+1000) ms\n",
            hs__cfg.url, (unsigned long long)hs__cfg.exit_flush_ms);
        return;
    }

    uint64_t dropped = 0;
    for (int k = HS_DROP_ALLOC_EVENTS; k <= HS_DROP_FREE_EVENTS; k++)
        dropped += atomic_load(&hs__drops[k]);
    if (dropped || S.undelivered_frames || S.gave_up || S.refused || !delivered()) {
        say("heapstore: %s: %s%s; dropped %llu alloc and %llu free events "
            "(%llu and %llu estimated bytes); %llu frames not delivered\n",
            hs__cfg.url, delivered() ? "delivered" : "not delivered",
            S.last_errno ? (S.last_errno == ECONNREFUSED ? " (connection refused)" : " (error)")
                         : "",
            (unsigned long long)atomic_load(&hs__drops[HS_DROP_ALLOC_EVENTS]),
            (unsigned long long)atomic_load(&hs__drops[HS_DROP_FREE_EVENTS]),
            (unsigned long long)atomic_load(&hs__drops[HS_DROP_ALLOC_BYTES]),
            (unsigned long long)atomic_load(&hs__drops[HS_DROP_FREE_BYTES]),
            (unsigned long long)S.undelivered_frames);
    }
}

void hs__sender_reset_child(void)
{
    /* The parent's thread does not exist here; its queue and socket are the
     * parent's business. Chunks are unmapped (copy-on-write copies). */
    chunk *c = S.head;
    while (c) {
        chunk *n = c->next;
        hs_mem_unmap(c, sizeof(chunk) + CHUNK_CAP);
        c = n;
    }
    if (S.fd >= 0) close(S.fd);
    if (S.statm_fd >= 0) close(S.statm_fd);
    if (S.pcs.slot) hs_mem_unmap(S.pcs.slot, (S.pcs.mask + 1) * sizeof(uint64_t));
    hs_proc_info *info = S.info;
    chunk *spare = S.spare;
    /* Which pcs were sent is per run. */
    memset(&S, 0, sizeof S);
    atomic_store(&round_lock.v, 0);
    S.fd = S.statm_fd = -1;
    S.next_seq = 1;
    S.info = info;
    S.spare = spare;
}

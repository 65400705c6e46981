/* hs_server: the libuv loop: listener, collector connections, ACKs, signals. */
#include <assert.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/resource.h>
#include <jansson.h>
#include <uv.h>

#include "hs_error.h"
#include "hs_http.h"
#include "hs_http_parse.h"
#include "hs_log.h"
#include "hs_proto.h"
#include "hs_server.h"
#include "hs_spawn.h"
#include "hs_store.h"
#include "hs_symd.h"
#include "hs_text.h"
#include "hs_writer.h"
#ifdef HS_WITH_CLICKHOUSE
#include "hs_chship.h"
#include "hs_chttp.h"
#endif

enum phase {
    P_FIRST,  /* nothing read yet */
    P_HEADER, /* reading magic and version */
    P_HELLO,  /* the first frame must be HELLO */
    P_STREAM, /* frames (HELLO may still be with the writer) */
};

/* The most a connection buffers before its HELLO passed the token check:
 * the stream header and a HELLO of HS_PREAUTH_MAX bytes. */
#define PREAUTH_CAP (HS_PREAUTH_MAX + 64)

typedef struct hs_conn hs_conn;
typedef struct server server;

/* Symbol uploads (docs/protocol.md, SYMREQ and SYMDATA): builds one
 * connection may have been asked for at once, and the most it may send. */
#define SYMUP_SLOTS     4
#define SYMUP_BUILD_MAX HS_SYMDATA_FILE_MAX /* bytes of one build's file */
#define SYMUP_CONN_MAX  (1ull << 30)        /* bytes of SYMDATA pieces a connection sends */
#define SYMUP_QUEUE_MAX (64u << 20)         /* pieces waiting for the symbolizer thread */

typedef struct symup_slot {
    uint8_t bid[HS_BUILD_ID_MAX];
    uint32_t blen;  /* 0: free */
    uint64_t total; /* 0 until the first piece */
    uint64_t got;   /* bytes (uncompressed) of the pieces read */
    int dropped;    /* over SYMUP_QUEUE_MAX: the rest is read and dropped */
} symup_slot;

struct hs_conn {
    server *srv;
    hs_conn *prev, *next;
    uv_tcp_t *tcp; /* malloc'ed apart (hs_http may adopt it); NULL once closed */
    uint64_t id;
    int phase;
    uint8_t *in;
    size_t in_len, in_cap;
    uint64_t seq;       /* sequence number of the next frame read */
    uint64_t first_seq; /* HELLO's: the collector holds no frame before it */
    uint64_t acked;     /* next_seq of the last ACK sent */
    uint64_t committed; /* next_seq the writer committed (>= acked) */
    uint8_t run_id[16]; /* of its HELLO */
    uint64_t bye_seq;   /* seq of BYE + 1, 0 before BYE */
    size_t inflight;    /* bytes in jobs the writer has not returned */
    int reading;
    int closing;
    int writes; /* writes in flight */
    int close_after_writes;
    int detached; /* the DETACH job is submitted; freed when it returns */
    int eof;      /* the peer is done sending; close once all is acknowledged */
    int tcp_closing;
    int refusing; /* accepted over the limit: read its first bytes, then turn it away */
    int preauth;  /* in_cap counts in srv->preauth_bytes (HELLO not yet checked) */
    /* HELLO, from the token check until conn_parse hands it to the writer
     * with the frames read with it (one transaction: a short process's
     * HELLO and the rest of its stream often arrive together). */
    struct hs_wjob *hello_job;
    uint64_t accepted_ns;
    uint64_t accepted_iter; /* srv->iter when accepted */
    uint64_t last_read_ns;  /* when bytes last arrived (the frame timeout) */
    hs_symd_conn sym;       /* its module list, for the symbolizer thread */
    /* Its jobs that went through the symbolizer and have not come back from
     * the writer: while there are any, later jobs follow the same way (the
     * writer takes a connection's jobs in their order). The loop's alone:
     * the thread never touches a connection after it hands a job on, so the
     * connection may be freed as soon as its DETACH comes back. */
    unsigned sym_pending;
    symup_slot up[SYMUP_SLOTS]; /* builds asked for (SYMREQ) and not yet whole */
    uint64_t up_bytes;          /* SYMDATA bytes read */
    char peer[64];
};

struct server {
    uv_loop_t loop;
    uv_tcp_t listener;
    uv_signal_t sigint, sigterm;
    uv_async_t async;
    hs_writer *writer;
    hs_symd *symd; /* between the loop and the writer for SYMBOLS (hs_symd.h) */
    hs_http *http;
    const hs_server_config *cfg;
    /* --store clickhouse://: the shipper, and the async by which it says
     * that frames may be acknowledged (ACKs wait for ClickHouse) */
    struct hs_chship *ship;
    uv_async_t ship_async;
    int ship_async_on;
    hs_conn *conns;
    uint64_t next_id;
    int stopping;
    int writer_gone; /* after STOP: nothing more goes to the writer */
    hs_hello hello;  /* scratch for decoding; loop thread only */
    size_t nconns;   /* hs_conn structs (stream connections, refusing ones included) */
    size_t nrefusing;
    size_t nsockets;  /* open stream sockets, refusing ones aside: what counts at the cap */
    uv_timer_t sweep; /* closes refusing connections that say nothing */
    uint64_t refused_conns, displaced_conns, refused_logged_ns;
    uv_timer_t timeouts; /* the HELLO and frame timeouts */
    uv_check_t tick;     /* counts loop iterations (iter) */
    uint64_t iter;
    size_t preauth_bytes;  /* sum of in_cap over connections with preauth set */
    uv_async_t symd_async; /* the symbolizer thread has asks (hs_symd_take_asks) */
    size_t nslots;         /* symup slots in use, all connections */
    uint64_t symreqs;      /* SYMREQ frames sent */
};

typedef struct out_msg {
    uv_write_t req;
    hs_conn *conn;
    int close_after;
    uint8_t buf[HS_STR_MAX + 32];
} out_msg;

static void conn_close(hs_conn *c, const char *why, ...) __attribute__((format(printf, 2, 3)));
static void conn_parse(hs_conn *c);

/* ---- connections ------------------------------------------------------- */

/* The connection is past the token check (or gone): its buffer no longer
 * counts against the unauthenticated total. */
static void conn_preauth_end(hs_conn *c)
{
    if (!c->preauth) return;
    assert(c->srv->preauth_bytes >= c->in_cap);
    c->srv->preauth_bytes -= c->in_cap;
    c->preauth = 0;
}

static void conn_unlink_free(hs_conn *c)
{
    server *s = c->srv;
    if (c->prev)
        c->prev->next = c->next;
    else if (s->conns == c)
        s->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    s->nconns--;
    if (c->refusing) s->nrefusing--;
    conn_preauth_end(c);
    assert(c->sym_pending == 0);
    for (int i = 0; i < SYMUP_SLOTS; i++) {
        if (!c->up[i].blen) continue;
        assert(s->nslots > 0);
        s->nslots--;
    }
    hs_syms_stream_free(&c->sym.stream);
    free(c->in);
    free(c);
}

/* Hands a job of c to the writer, through the symbolizer when it has frames
 * to name or an earlier job of c is still there (order is kept). */
static void conn_submit(hs_conn *c, hs_wjob *j)
{
    server *s = c->srv;
    if (s->symd && (hs_symd_wants(j) || c->sym_pending)) {
        j->via_symd = 1;
        c->sym_pending++;
        hs_symd_submit(s->symd, &c->sym, j);
    } else
        hs_writer_submit(s->writer, j);
}

static void conn_detach(hs_conn *c)
{
    if (c->detached || c->srv->writer_gone) return;
    c->detached = 1;
    hs_wjob *j = hs_wjob_new(HS_WJOB_DETACH, c->id, c);
    if (!j) {
        /* Without the writer's answer the struct would leak; the writer keeps
         * the run until its next start gives it a grace period. */
        return;
    }
    conn_submit(c, j);
}

/* The handle is gone: free it, and the connection once the writer is done
 * with it (a connection that never sent HELLO has nothing there). */
static void on_tcp_closed(uv_handle_t *h)
{
    hs_conn *c = h->data;
    free(h);
    if (!c) return;
    c->tcp = NULL;
    /* no piece will come: its files not yet whole go, its jobs that wait
     * for them go on */
    if (c->sym.can_upload && c->srv->symd) hs_symd_upload_abort(c->srv->symd, c->id);
    if (c->phase <= P_HELLO && !c->inflight)
        conn_unlink_free(c);
    else
        conn_detach(c);
}

static void conn_close_now(hs_conn *c)
{
    if (!c->tcp || c->tcp_closing) return;
    c->tcp_closing = 1;
    assert(c->refusing || c->srv->nsockets > 0);
    if (!c->refusing) c->srv->nsockets--; /* uv_close closes the descriptor at once */
    uv_close((uv_handle_t *)c->tcp, on_tcp_closed);
}

static void conn_close(hs_conn *c, const char *why, ...)
{
    if (c->closing) return;
    c->closing = 1;
    if (why) {
        char msg[512];
        va_list ap;
        va_start(ap, why);
        vsnprintf(msg, sizeof msg, why, ap);
        va_end(ap);
        hs_log("collector %s (conn %" PRIu64 "): closed: %s", c->peer, c->id, msg);
    }
    if (c->tcp) uv_read_stop((uv_stream_t *)c->tcp);
    if (c->writes)
        c->close_after_writes = 1;
    else
        conn_close_now(c);
}

static void on_written(uv_write_t *req, int status)
{
    out_msg *m = req->data;
    hs_conn *c = m->conn;
    (void)status;
    c->writes--;
    int close_after = m->close_after;
    free(m);
    if (close_after && !c->closing) {
        conn_close(c, NULL); /* may free c */
        return;
    }
    if (c->close_after_writes && !c->writes) {
        c->close_after_writes = 0;
        conn_close_now(c);
    }
}

/* Sends one server frame; close_after closes the connection once written. */
static void conn_send(hs_conn *c, uint8_t type, uint64_t seq, const char *reason, int close_after)
{
    if (!c->tcp || (c->closing && !close_after)) return;
    out_msg *m = malloc(sizeof *m);
    if (!m) {
        conn_close(c, "out of memory");
        return;
    }
    m->conn = c;
    m->close_after = close_after;
    hs_wr wr;
    hs_wr_init(&wr, m->buf, sizeof m->buf);
    size_t pos = hs_frame_begin(&wr, type);
    if (type == HS_FRAME_ACK)
        hs_wr_varint(&wr, seq);
    else
        hs_wr_str(&wr, reason, strnlen(reason, HS_STR_MAX));
    hs_frame_end(&wr, pos);
    uv_buf_t b = uv_buf_init((char *)m->buf, (unsigned)hs_wr_len(&wr));
    m->req.data = m;
    if (uv_write(&m->req, (uv_stream_t *)c->tcp, &b, 1, on_written)) {
        free(m);
        conn_close(c, "write failed");
        return;
    }
    c->writes++;
}

/* ---- symbol uploads ---------------------------------------------------- */

static int conn_uploading(const hs_conn *c)
{
    for (int i = 0; i < SYMUP_SLOTS; i++)
        if (c->up[i].blen) return 1;
    return 0;
}

static symup_slot *slot_find(hs_conn *c, const uint8_t *bid, uint32_t blen)
{
    for (int i = 0; i < SYMUP_SLOTS; i++)
        if (c->up[i].blen == blen && !memcmp(c->up[i].bid, bid, blen)) return &c->up[i];
    return NULL;
}

/* An upload is over (whole, declined or dropped). After the ACK of BYE,
 * the last one ends the connection. */
static void slot_free(hs_conn *c, symup_slot *u)
{
    assert(u->blen && c->srv->nslots > 0);
    memset(u, 0, sizeof *u);
    c->srv->nslots--;
    if (c->bye_seq && c->acked >= c->bye_seq && !conn_uploading(c)) conn_close(c, NULL);
}

/* Asks c for build bid: a SYMREQ, and a slot to check its pieces against. */
static void conn_ask(hs_conn *c, const uint8_t *bid, uint32_t blen)
{
    server *s = c->srv;
    if (slot_find(c, bid, blen) || s->nslots >= HS_SYMD_UPLOADS_MAX) return;
    symup_slot *u = NULL;
    for (int i = 0; i < SYMUP_SLOTS && !u; i++)
        if (!c->up[i].blen) u = &c->up[i];
    if (!u) return;
    out_msg *m = malloc(sizeof *m);
    if (!m) return;
    m->conn = c;
    m->close_after = 0;
    hs_wr wr;
    hs_wr_init(&wr, m->buf, sizeof m->buf);
    size_t pos = hs_frame_begin(&wr, HS_FRAME_SYMREQ);
    hs_symreq_encode(&wr, bid, blen);
    hs_frame_end(&wr, pos);
    uv_buf_t b = uv_buf_init((char *)m->buf, (unsigned)hs_wr_len(&wr));
    m->req.data = m;
    if (uv_write(&m->req, (uv_stream_t *)c->tcp, &b, 1, on_written)) {
        free(m);
        return;
    }
    c->writes++;
    memcpy(u->bid, bid, blen);
    u->blen = blen;
    s->nslots++;
    s->symreqs++;
    char hex[2 * HS_BUILD_ID_MAX + 1];
    hs_hex(hex, bid, blen);
    hs_log("collector %s (conn %" PRIu64 "): asked for build %s (no file of it here)", c->peer,
           c->id, hex);
}

static void on_symd_async(uv_async_t *a)
{
    server *s = a->data;
    hs_symd_ask asks[16];
    size_t n;
    while (s->symd && (n = hs_symd_take_asks(s->symd, asks, HS_COUNTOF(asks))) > 0) {
        for (size_t i = 0; i < n; i++) {
            hs_conn *c = s->conns;
            while (c && c->id != asks[i].conn_id) c = c->next;
            if (!c || c->closing || !c->tcp || c->phase != P_STREAM) continue;
            if (asks[i].close_why[0])
                conn_close(c, "%s", asks[i].close_why);
            else if (c->sym.can_upload && !(c->bye_seq && c->acked >= c->bye_seq))
                conn_ask(c, asks[i].bid, asks[i].blen);
        }
    }
}

static void symd_notify(void *data)
{
    server *s = data;
    uv_async_send(&s->symd_async);
}

/* A SYMDATA frame: checked against what c was asked for and the bounds,
 * then queued for the symbolizer thread, which writes the file. 0, or -1
 * with c closed. */
static int symdata_frame(hs_conn *c, const hs_frame *f)
{
    server *s = c->srv;
    hs_symdata sd;
    int rc = hs_symdata_decode(&sd, f->payload, f->len);
    symup_slot *u = rc ? NULL : slot_find(c, sd.bid, sd.blen);
    if (rc) {
        conn_close(c, "malformed SYMDATA: %s", hs_strerror(rc));
        return -1;
    }
    if (!u) {
        conn_close(c, "SYMDATA for a build it was not asked for");
        return -1;
    }
    if ((c->up_bytes += f->len) > SYMUP_CONN_MAX) {
        conn_close(c, "SYMDATA: over the %llu bytes a connection may send",
                   (unsigned long long)SYMUP_CONN_MAX);
        return -1;
    }
    if (sd.total == 0) { /* declined, or given up */
        hs_symd_upload(s->symd, c->id, &sd);
        slot_free(c, u);
        return 0;
    }
    if (sd.total > SYMUP_BUILD_MAX) {
        conn_close(c, "SYMDATA: a file of %llu bytes, over the %llu a build may send",
                   (unsigned long long)sd.total, (unsigned long long)SYMUP_BUILD_MAX);
        return -1;
    }
    if (sd.offset != u->got || (u->total && sd.total != u->total)) {
        conn_close(c, "SYMDATA out of order: a piece at %llu of %llu bytes after %llu of %llu",
                   (unsigned long long)sd.offset, (unsigned long long)sd.total,
                   (unsigned long long)u->got, (unsigned long long)u->total);
        return -1;
    }
    u->total = sd.total;
    u->got += sd.size;
    if (!u->dropped && hs_symd_upload_queued(s->symd) + sd.data.len > SYMUP_QUEUE_MAX) {
        hs_log("collector %s (conn %" PRIu64 "): a symbol upload dropped: %u bytes wait for the "
               "symbolizer thread already",
               c->peer, c->id, SYMUP_QUEUE_MAX);
        u->dropped = 1;
        /* that build only, as given up (total 0): the connection's other
         * uploads go on */
        hs_symdata gave_up = sd;
        gave_up.total = gave_up.offset = gave_up.size = 0;
        gave_up.data.len = 0;
        hs_symd_upload(s->symd, c->id, &gave_up);
    }
    if (!u->dropped && hs_symd_upload(s->symd, c->id, &sd)) u->dropped = 1;
    if (u->got == u->total) slot_free(c, u);
    return 0;
}

static void conn_refuse(hs_conn *c, const char *reason)
{
    hs_log("collector %s (conn %" PRIu64 "): refused: %s", c->peer, c->id, reason);
    conn_send(c, HS_FRAME_REFUSE, 0, reason, 1);
    if (c->tcp) uv_read_stop((uv_stream_t *)c->tcp);
    c->reading = 0;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    hs_conn *c = h->data;
    server *s = c->srv;
    (void)suggested;
    /* Before the token check the buffer grows by small steps up to
     * PREAUTH_CAP (a whole HELLO and the stream header) and only while all
     * such buffers together stay within HS_PREAUTH_TOTAL_MAX. */
    size_t want = c->preauth ? 4096 : 64 * 1024;
    size_t limit = c->preauth ? PREAUTH_CAP : SIZE_MAX;
    if (c->in_cap - c->in_len < want && c->in_cap < limit) {
        size_t cap = c->in_cap ? c->in_cap : want;
        while (cap - c->in_len < want) cap *= 2;
        if (cap > limit) cap = limit;
        if (c->preauth && s->preauth_bytes - c->in_cap + cap > HS_PREAUTH_TOTAL_MAX) {
            *buf = uv_buf_init(NULL, 0); /* on_read closes it (UV_ENOBUFS) */
            return;
        }
        uint8_t *ni = realloc(c->in, cap);
        if (!ni) {
            *buf = uv_buf_init(NULL, 0); /* libuv reports UV_ENOBUFS */
            return;
        }
        if (c->preauth) s->preauth_bytes += cap - c->in_cap;
        c->in = ni;
        c->in_cap = cap;
    }
    assert(!c->preauth || c->in_cap <= PREAUTH_CAP);
    if (c->in_cap == c->in_len) {
        /* Only before HELLO, and never in practice: conn_parse closes a
         * connection whose HELLO claims more than fits. */
        *buf = uv_buf_init(NULL, 0);
        return;
    }
    *buf = uv_buf_init((char *)c->in + c->in_len, (unsigned)(c->in_cap - c->in_len));
}

static void conn_read_start(hs_conn *c);
static void conn_read_stop(hs_conn *c);

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    hs_conn *c = stream->data;
    (void)buf;
    if (nread == 0) return;
    if (nread < 0) {
        if (nread == UV_EOF) {
            if (c->in_len && c->phase != P_FIRST)
                conn_close(c, "the stream ended inside a frame (%zu bytes pending)", c->in_len);
            else if (c->phase == P_STREAM && !c->bye_seq)
                conn_close(c, "connection ended without BYE; the run waits for a reconnection");
            else if (c->inflight) {
                /* A half-close after BYE: answer what is in flight first. */
                c->eof = 1;
                conn_read_stop(c);
            } else
                conn_close(c, NULL);
        } else if (c->bye_seq && c->acked >= c->bye_seq) {
            conn_close(c, NULL); /* a reset after the last ACK: the run is complete */
        } else if (nread == UV_ENOBUFS && c->preauth) {
            conn_close(c,
                       "unauthenticated connections hold %zu bytes, the most the server "
                       "buffers before HELLO (%u)",
                       c->srv->preauth_bytes, HS_PREAUTH_TOTAL_MAX);
        } else {
            conn_close(c, "read error: %s", uv_strerror((int)nread));
        }
        return;
    }
    c->in_len += (size_t)nread;
    c->last_read_ns = uv_hrtime();
    if (c->phase == P_FIRST) {
        if (c->in[0] != hs_magic[0]) {
            /* Not a collector: the HTTP side takes the handle over (and
             * answers 503 to one accepted over the limit). */
            uv_read_stop(stream);
            uv_tcp_t *tcp = c->tcp;
            c->tcp = NULL;
            if (!c->refusing) c->srv->nsockets--; /* hs_http_clients() counts it now */
            tcp->data = NULL;
            hs_http_adopt(c->srv->http, tcp, (const char *)c->in, c->in_len, c->refusing);
            conn_unlink_free(c);
            return;
        }
        if (c->refusing) {
            conn_close(c, NULL); /* a collector retries later */
            return;
        }
        c->phase = P_HEADER;
    }
    conn_parse(c);
}

static void conn_read_start(hs_conn *c)
{
    if (c->reading || c->closing || !c->tcp || c->srv->stopping) return;
    if (c->inflight > HS_CONN_INFLIGHT_MAX) return;
    if (uv_read_start((uv_stream_t *)c->tcp, on_alloc, on_read)) {
        conn_close(c, "cannot read");
        return;
    }
    c->reading = 1;
}

static void conn_read_stop(hs_conn *c)
{
    if (!c->reading) return;
    if (c->tcp) uv_read_stop((uv_stream_t *)c->tcp);
    c->reading = 0;
}

static int hello_frame(hs_conn *c, const hs_frame *f)
{
    server *s = c->srv;
    if (f->type != HS_FRAME_HELLO) {
        conn_close(c, "the first frame is %s (0x%02x), not HELLO",
                   hs_frame_name(f->type) ? hs_frame_name(f->type) : "unknown", f->type);
        return -1;
    }
    int rc = hs_hello_decode(&s->hello, f->payload, f->len);
    if (rc) {
        conn_close(c, "malformed HELLO: %s", hs_strerror(rc));
        return -1;
    }
    const char *tok = s->cfg->token;
    if (tok && !hs_token_eq((const char *)s->hello.token.ptr, s->hello.token.len, tok)) {
        conn_refuse(c, "bad token");
        return -1;
    }
    conn_preauth_end(c);
    hs_wjob *j = hs_wjob_new(HS_WJOB_HELLO, c->id, c);
    if (!j || hs_wjob_set_data(j, f->payload, f->len)) {
        hs_wjob_free(j);
        conn_close(c, "out of memory");
        return -1;
    }
    c->seq = c->first_seq = s->hello.first_seq;
    memcpy(c->run_id, s->hello.run_id, sizeof c->run_id);
    c->sym.can_upload =
        s->symd && !s->cfg->no_symbol_uploads && (s->hello.flags & HS_HELLO_SYMDATA);
    /* The frames behind it are read on (and go to the writer after it):
     * if the writer refuses the run, they are refused with it. */
    c->phase = P_STREAM;
    j->charged = f->len;
    c->inflight += j->charged;
    c->hello_job = j;
    return 0;
}

/* The end of conn_parse: HELLO (if it was read now) and then the frames
 * job j (if any) go to the writer, HELLO with j (hs_wjob.first) so that one
 * transaction stores both and HELLO's ACK covers the frames. */
static void parse_submit(hs_conn *c, hs_wjob *j)
{
    hs_wjob *hello = c->hello_job;
    c->hello_job = NULL;
    if (c->closing) {
        if (hello) c->inflight -= hello->charged;
        hs_wjob_free(hello);
        hs_wjob_free(j);
        return;
    }
    if (hello && !j) hs_writer_submit(c->srv->writer, hello);
    if (!j) return;
    assert(!j->first);
    j->first = hello;
    j->charged = j->len + 64;
    c->inflight += j->charged;
    conn_submit(c, j);
}

/* Before the first frame is whole: 1 (and the connection closed) if it
 * cannot be a HELLO within HS_PREAUTH_MAX, known from its first bytes. */
static int hello_too_big(hs_conn *c, const uint8_t *p, size_t left)
{
    if (left && p[0] != HS_FRAME_HELLO) {
        conn_close(c, "the first frame is %s (0x%02x), not HELLO",
                   hs_frame_name(p[0]) ? hs_frame_name(p[0]) : "unknown", p[0]);
        return 1;
    }
    uint64_t n;
    int k = left > 1 ? hs_varint_decode(p + 1, p + left, &n) : 0;
    if (k > 0 && 1 + (uint64_t)k + n > HS_PREAUTH_MAX) {
        conn_close(c, "a HELLO of %" PRIu64 " bytes: over the %u allowed before authentication", n,
                   HS_PREAUTH_MAX);
        return 1;
    }
    return 0;
}

/* Splits what the buffer holds into frames and hands them to the writer. */
static void conn_parse(hs_conn *c)
{
    size_t off = 0;
    hs_wjob *j = NULL;
    while (!c->closing) {
        const uint8_t *p = c->in + off;
        size_t left = c->in_len - off;
        if (c->phase == P_HEADER) {
            uint32_t version;
            int n = hs_header_parse(p, left, &version);
            if (n == 0) break;
            if (n == HS_EVERSION) {
                conn_refuse(c, "unsupported protocol version");
                break;
            }
            if (n < 0) {
                conn_close(c, "bad magic: not a heapstore stream");
                break;
            }
            off += (size_t)n;
            c->phase = P_HELLO;
            continue;
        }
        hs_frame f;
        long n = hs_frame_split(p, left, &f);
        if (n == 0 && c->phase == P_HELLO && hello_too_big(c, p, left)) break;
        if (n == 0) break;
        if (n < 0) {
            if (n == HS_ETOOBIG)
                conn_close(c, "absurd frame length (over %u bytes)", HS_FRAME_MAX);
            else
                conn_close(c, "bad frame length varint");
            break;
        }
        off += (size_t)n;
        if (c->phase == P_HELLO) {
            if (hello_frame(c, &f)) break;
            continue;
        }
        if (f.type == HS_FRAME_SYMDATA) { /* no sequence number; may follow BYE */
            if (symdata_frame(c, &f)) break;
            continue;
        }
        if (f.type == HS_FRAME_HELLO || f.type < HS_FRAME_MAPPINGS || f.type > HS_FRAME_BYE) {
            conn_close(c, "%s frame type 0x%02x",
                       f.type == HS_FRAME_HELLO ? "second HELLO:" : "unknown", f.type);
            break;
        }
        if (c->bye_seq) {
            conn_close(c, "%s frame after BYE", hs_frame_name(f.type));
            break;
        }
        if (!j && !(j = hs_wjob_new(HS_WJOB_FRAMES, c->id, c))) {
            conn_close(c, "out of memory");
            break;
        }
        if (hs_wjob_add_frame(j, c->seq, f.type, f.payload, f.len)) {
            conn_close(c, "out of memory");
            break;
        }
        if (f.type == HS_FRAME_BYE) c->bye_seq = c->seq + 1;
        c->seq++;
    }
    parse_submit(c, j);
    if (off) {
        memmove(c->in, c->in + off, c->in_len - off);
        c->in_len -= off;
    }
    /* Keep the buffer small between frames once a big one has passed. */
    if (c->in_cap > (1u << 20) && c->in_len < (64u << 10)) {
        uint8_t *ni = realloc(c->in, 128u << 10);
        if (ni) {
            c->in = ni;
            c->in_cap = 128u << 10;
        }
    }
    if (c->inflight > HS_CONN_INFLIGHT_MAX) conn_read_stop(c);
}

/* ---- writer results ---------------------------------------------------- */

static void stop_finish(server *s);

/* ACKs what is committed, or, with a ClickHouse store, what of it is in
 * ClickHouse (hs_chship_shipped): the rest when the shipper says so
 * (on_ship). The ACK covering BYE is the last word: close after it (or
 * after the symbol uploads asked for, slot_free). */
static void conn_ack(server *s, hs_conn *c)
{
    uint64_t want = c->committed;
#ifdef HS_WITH_CLICKHOUSE
    if (s->ship) {
        uint64_t shipped = hs_chship_shipped(s->ship, c->run_id);
        if (shipped < want) want = shipped;
    }
#else
    (void)s;
#endif
    if (want <= c->acked) return;
    c->acked = want;
    int last = c->bye_seq && want >= c->bye_seq && !conn_uploading(c);
    conn_send(c, HS_FRAME_ACK, want, NULL, last);
}

/* The ACK of a HELLO: what is committed, or, with a ClickHouse store,
 * what of it is in ClickHouse, but never below the HELLO's first_seq (the
 * collector no longer holds the frames before it). */
static uint64_t hello_ack(server *s, hs_conn *c, uint64_t committed)
{
    uint64_t want = committed;
#ifdef HS_WITH_CLICKHOUSE
    if (s->ship) {
        uint64_t shipped = hs_chship_shipped(s->ship, c->run_id);
        if (shipped < c->first_seq) shipped = c->first_seq;
        if (shipped < want) want = shipped;
    }
#else
    (void)s;
    (void)c;
#endif
    return want;
}

static void job_done(server *s, hs_wjob *j)
{
    hs_conn *c = j->conn;
    if (c && j->via_symd) {
        assert(c->sym_pending > 0);
        c->sym_pending--;
    }
    switch (j->kind) {
    case HS_WJOB_HELLO:
        c->inflight -= j->charged;
        if (c->closing) break;
        if (j->err == HS_EDB || j->err == HS_ENOMEM || j->err == HS_EIO) {
            /* The server's trouble, not the run's: a close (the collector
             * retries), not REFUSE (which tells it to give up). HS_EIO is
             * ClickHouse out of reach while a resumed run is fetched back:
             * the collector keeps its frames and comes back. */
            conn_close(c, "%s", j->msg[0] ? j->msg : hs_strerror(j->err));
            break;
        }
        if (j->err) {
            conn_refuse(c, j->msg[0] ? j->msg : hs_strerror(j->err));
            break;
        }
        /* next_seq covers the frames stored in HELLO's transaction; with a
         * ClickHouse store, the ACK waits for them to be shipped too. */
        c->committed = j->next_seq;
        c->acked = hello_ack(s, c, j->next_seq);
        conn_send(c, HS_FRAME_ACK, c->acked, NULL,
                  c->bye_seq && c->acked >= c->bye_seq && !conn_uploading(c));
        if (c->eof && !c->inflight && c->acked >= c->committed)
            conn_close(c, NULL);
        else if (!c->eof)
            conn_read_start(c);
        break;
    case HS_WJOB_FRAMES:
        c->inflight -= j->charged;
        if (c->closing) break;
        if (j->err) {
            conn_close(c, "%s", j->msg[0] ? j->msg : hs_strerror(j->err));
            break;
        }
        if (j->next_seq > c->committed) c->committed = j->next_seq;
        if (j->next_seq > c->acked) {
            conn_ack(s, c);
        } else if (c->bye_seq && c->acked >= c->bye_seq && !conn_uploading(c)) {
            /* Acknowledged already by HELLO's ACK: frames stored in HELLO's
             * transaction, or a resend of frames stored before, BYE included
             * (a resumed connection of an ended run). */
            conn_close(c, NULL);
            break;
        }
        if (c->eof && !c->inflight && c->acked >= c->committed)
            conn_close(c, NULL);
        else if (!c->eof)
            conn_read_start(c);
        break;
    case HS_WJOB_DETACH:
        conn_unlink_free(c);
        break;
    case HS_WJOB_SYNC: {
        /* Everything read is committed and acknowledged: close the rest. */
        for (hs_conn *k = s->conns, *n; k; k = n) {
            n = k->next;
            conn_close(k, NULL);
        }
#ifdef HS_WITH_CLICKHOUSE
        if (s->ship) hs_chship_set_pruner(s->ship, NULL, NULL); /* it needs the writer */
#endif
        hs_wjob *stop = hs_wjob_new(HS_WJOB_STOP, 0, NULL);
        if (stop)
            hs_writer_submit(s->writer, stop);
        else
            stop_finish(s);
        break;
    }
    case HS_WJOB_STOP:
        s->writer_gone = 1;
        stop_finish(s);
        break;
    }
    hs_wjob_free(j);
}

static void on_async(uv_async_t *a)
{
    server *s = a->data;
    /* asks first: a SYMREQ goes out before the ACK of the frames that
     * caused it, so a collector that sees its BYE acknowledged has seen
     * every request of its run */
    on_symd_async(&s->symd_async);
    hs_wjob *j = hs_writer_take_done(s->writer);
    while (j) {
        hs_wjob *n = j->next;
        job_done(s, j);
        j = n;
    }
}

/* ---- listener and signals ---------------------------------------------- */

/* How many client sockets may be open, streams and HTTP alike: the
 * descriptor limit (read at each accept, so a changed limit counts at once)
 * less a reserve for the database, its readers, libuv's own descriptors and
 * the few connections being turned away. */
static size_t max_conns(void)
{
    struct rlimit nofile;
    if (getrlimit(RLIMIT_NOFILE, &nofile) != 0 || nofile.rlim_cur == RLIM_INFINITY) return 65536;
    return nofile.rlim_cur > 64 ? (size_t)nofile.rlim_cur - 32 : 32;
}

/* Connections accepted over the limit that are read (to tell HTTP, which
 * gets a 503, from a stream, which is closed) at most at once; more are
 * closed at once. Each may take 2 s to say something. */
#define REFUSING_MAX 8
#define REFUSING_NS  (2000ull * 1000000ull)

static void on_sweep(uv_timer_t *t)
{
    server *s = t->data;
    uint64_t now = uv_hrtime();
    for (hs_conn *c = s->conns, *n; c; c = n) {
        n = c->next;
        if (c->refusing && now - c->accepted_ns >= REFUSING_NS) conn_close(c, NULL);
    }
    if (!s->nrefusing) uv_timer_stop(t);
}

static void on_tick(uv_check_t *h)
{
    server *s = h->data;
    s->iter++;
}

static void on_timeouts(uv_timer_t *t)
{
    server *s = t->data;
    const hs_server_config *cfg = s->cfg;
    uint64_t now = uv_hrtime();
    for (hs_conn *c = s->conns, *n; c; c = n) {
        n = c->next;
        if (c->closing || c->refusing || !c->tcp) continue;
        if (c->phase <= P_HELLO && cfg->hello_timeout_ns &&
            now - c->accepted_ns >= cfg->hello_timeout_ns) {
            conn_close(c, "no complete %s within %.1f s of connecting (--hello-timeout)",
                       c->phase == P_FIRST ? "request" : "HELLO",
                       (double)cfg->hello_timeout_ns / 1e9);
        } else if (c->phase == P_STREAM && c->reading && c->in_len && cfg->frame_timeout_ns &&
                   now - c->last_read_ns >= cfg->frame_timeout_ns) {
            conn_close(c,
                       "a frame stayed incomplete for %.1f s (%zu bytes of it received; "
                       "--frame-timeout)",
                       (double)(now - c->last_read_ns) / 1e9, c->in_len);
        }
    }
}

/* At the limit: a connection refused, or (displaced) one that waited was
 * closed to take a new one. */
static void log_limit(server *s, size_t open, int displaced)
{
    /* At most one line a second (hs_log counts the rest). */
    if (displaced)
        s->displaced_conns++;
    else
        s->refused_conns++;
    uint64_t now = uv_hrtime();
    if (now - s->refused_logged_ns >= 1000000000ull) {
        hs_log("connection limit reached (%zu open, from RLIMIT_NOFILE): %llu connections "
               "refused and %llu that waited displaced so far",
               open, (unsigned long long)s->refused_conns, (unsigned long long)s->displaced_conns);
        s->refused_logged_ns = now;
    }
}

/* At the connection cap: closes the client that has waited longest without
 * finishing its HELLO or HTTP request head (a slow or idle peer), so that
 * the new one takes its place; 1 if one went. Streams past HELLO and
 * requests being answered are never displaced, nor a connection whose
 * first bytes the loop has not yet had a full iteration to read (in a burst
 * of accepts, a client that sent its whole request at once would otherwise
 * be displaced before it is read). Any age will do beyond that: a minimum
 * would let slow clients that reconnect in waves hold every socket while
 * they are all younger than it. */
static int make_room(server *s)
{
    hs_conn *oldest = NULL;
    for (hs_conn *c = s->conns; c; c = c->next)
        if (c->phase <= P_HELLO && !c->refusing && !c->closing && c->tcp &&
            (c->phase > P_FIRST || c->accepted_iter + 1 < s->iter) &&
            (!oldest || c->accepted_ns < oldest->accepted_ns))
            oldest = c;
    uint64_t http_since = hs_http_oldest_waiting(s->http);
    uint64_t since = oldest && oldest->accepted_ns < http_since ? oldest->accepted_ns : http_since;
    uint64_t now = uv_hrtime();
    if (since == UINT64_MAX) return 0;
    if (oldest && oldest->accepted_ns == since) {
        conn_close(oldest,
                   "at the connection limit: displaced by a new connection after %.1f s "
                   "without a complete HELLO",
                   (double)(now - since) / 1e9);
        return 1;
    }
    return hs_http_evict_oldest(s->http) == 0;
}

static void on_connection(uv_stream_t *listener, int status)
{
    server *s = listener->data;
    if (status < 0) {
        hs_log("accept failed: %s", uv_strerror(status));
        return;
    }
    /* Every open client socket counts: libuv closes new connections
     * silently once descriptors run out, so refuse before, with a log line
     * (and a 503 for HTTP). */
    size_t open = s->nsockets + hs_http_clients(s->http);
    int refusing = open >= max_conns();
    if (refusing && make_room(s)) {
        log_limit(s, open, 1);
        refusing = 0;
    }
    if (refusing && s->nrefusing >= REFUSING_MAX) {
        uv_tcp_t *t = malloc(sizeof *t);
        if (!t) return;
        uv_tcp_init(&s->loop, t);
        t->data = NULL;
        if (!uv_accept(listener, (uv_stream_t *)t)) log_limit(s, open, 0);
        uv_close((uv_handle_t *)t, on_tcp_closed);
        return;
    }
    hs_conn *c = calloc(1, sizeof *c);
    uv_tcp_t *tcp = malloc(sizeof *tcp);
    if (!c || !tcp) {
        free(c);
        free(tcp);
        hs_log("out of memory accepting a connection");
        return;
    }
    uv_tcp_init(&s->loop, tcp);
    tcp->data = NULL;
    if (uv_accept(listener, (uv_stream_t *)tcp)) {
        uv_close((uv_handle_t *)tcp, on_tcp_closed);
        free(c);
        return;
    }
    uv_tcp_nodelay(tcp, 1);
    c->srv = s;
    c->tcp = tcp;
    c->id = ++s->next_id;
    c->preauth = 1;
    c->accepted_ns = c->last_read_ns = uv_hrtime();
    c->accepted_iter = s->iter;
    tcp->data = c;
    struct sockaddr_storage ss;
    int len = sizeof ss;
    char host[48] = "?";
    int port = 0;
    if (!uv_tcp_getpeername(tcp, (struct sockaddr *)&ss, &len)) {
        if (ss.ss_family == AF_INET6) {
            uv_ip6_name((struct sockaddr_in6 *)&ss, host, sizeof host);
            port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
        } else {
            uv_ip4_name((struct sockaddr_in *)&ss, host, sizeof host);
            port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        }
    }
    snprintf(c->peer, sizeof c->peer, "%s:%d", host, port);
    c->next = s->conns;
    if (s->conns) s->conns->prev = c;
    s->conns = c;
    s->nconns++;
    if (!refusing) s->nsockets++;
    if (refusing) {
        c->refusing = 1;
        s->nrefusing++;
        log_limit(s, open, 0);
        if (!uv_is_active((uv_handle_t *)&s->sweep)) uv_timer_start(&s->sweep, on_sweep, 500, 500);
    }
    conn_read_start(c);
}

static void on_closed_noop(uv_handle_t *h)
{
    (void)h;
}

static void stop_begin(server *s)
{
    if (s->stopping) return;
    s->stopping = 1;
    hs_log("stopping: no new connections, committing what was received");
    uv_close((uv_handle_t *)&s->listener, on_closed_noop);
    for (hs_conn *c = s->conns; c; c = c->next) conn_read_stop(c);
    hs_wjob *j = hs_wjob_new(HS_WJOB_SYNC, 0, NULL);
    if (j && s->symd)
        hs_symd_submit(s->symd, NULL, j); /* after every job there */
    else if (j)
        hs_writer_submit(s->writer, j);
    else
        stop_finish(s);
}

static void stop_finish(server *s)
{
    s->writer_gone = 1;
    for (hs_conn *c = s->conns; c; c = c->next) {
        c->closing = 1;
        conn_close_now(c);
    }
    hs_http_free(s->http);
    s->http = NULL;
    uv_close((uv_handle_t *)&s->sweep, on_closed_noop);
    uv_close((uv_handle_t *)&s->timeouts, on_closed_noop);
    uv_close((uv_handle_t *)&s->tick, on_closed_noop);
    uv_close((uv_handle_t *)&s->async, on_closed_noop);
#ifdef HS_WITH_CLICKHOUSE
    if (s->ship_async_on) {
        hs_chship_set_notify(s->ship, NULL, NULL); /* no uv_async_send after this */
        uv_close((uv_handle_t *)&s->ship_async, on_closed_noop);
        s->ship_async_on = 0;
    }
#endif
    uv_close((uv_handle_t *)&s->symd_async, on_closed_noop);
    uv_close((uv_handle_t *)&s->sigint, on_closed_noop);
    uv_close((uv_handle_t *)&s->sigterm, on_closed_noop);
}

static void on_signal(uv_signal_t *h, int signum)
{
    server *s = h->data;
    hs_log("%s received", signum == SIGINT ? "SIGINT" : "SIGTERM");
    stop_begin(s);
}

/* Binds and listens; *port_out is the port bound (the one asked, or the one
 * the kernel picked for port 0). */
static int bind_listener(server *s, int *port_out)
{
    const hs_server_config *cfg = s->cfg;
    struct sockaddr_storage addr;
    int rc = strchr(cfg->host, ':')
                 ? uv_ip6_addr(cfg->host, cfg->port, (struct sockaddr_in6 *)&addr)
                 : uv_ip4_addr(cfg->host, cfg->port, (struct sockaddr_in *)&addr);
    if (rc) {
        hs_log("bad listen address %s: %s", cfg->host, uv_strerror(rc));
        return HS_EINVAL;
    }
    uv_tcp_init(&s->loop, &s->listener);
    s->listener.data = s;
    rc = uv_tcp_bind(&s->listener, (struct sockaddr *)&addr, 0);
    if (!rc) rc = uv_listen((uv_stream_t *)&s->listener, 511, on_connection);
    if (rc) {
        hs_log("cannot listen on %s:%d: %s%s", cfg->host, cfg->port, uv_strerror(rc),
               rc == UV_EADDRINUSE ? " (is another server running on that port?)" : "");
        uv_close((uv_handle_t *)&s->listener, on_closed_noop);
        return rc == UV_EADDRINUSE ? HS_EBUSY : HS_EIO;
    }
    struct sockaddr_storage bound;
    int len = sizeof bound;
    uv_tcp_getsockname(&s->listener, (struct sockaddr *)&bound, &len);
    int port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                 : ((struct sockaddr_in *)&bound)->sin_port);
    *port_out = port;
    return 0;
}

/* ---- POST /api/gc (hs_http_config's gc) ------------------------------- */

/* A GC job's waiter: the pool thread that asked, until the writer is done. */
typedef struct gc_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
} gc_wait;

static void gc_done(hs_wjob *j, void *data)
{
    (void)j;
    gc_wait *g = data;
    pthread_mutex_lock(&g->mu);
    g->done = 1;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

/* On a thread of libuv's pool: hands the body to the writer (HS_WJOB_GC)
 * and waits for its answer. */
static int gc_request(void *data, const char *body, size_t len, char **answer)
{
    server *s = data;
    hs_wjob *j = hs_wjob_new(HS_WJOB_GC, 0, NULL);
    gc_wait g = {.done = 0};
    *answer = NULL;
    if (!j || hs_wjob_set_data(j, (const uint8_t *)body, len)) {
        hs_wjob_free(j);
        return 500;
    }
    pthread_mutex_init(&g.mu, NULL);
    pthread_cond_init(&g.cv, NULL);
    j->on_done = gc_done;
    j->on_done_data = &g;
    hs_writer_submit(s->writer, j);
    pthread_mutex_lock(&g.mu);
    while (!g.done) pthread_cond_wait(&g.cv, &g.mu);
    pthread_mutex_unlock(&g.mu);
    pthread_mutex_destroy(&g.mu);
    pthread_cond_destroy(&g.cv);
    int status = j->err == 0 ? 200 : j->err == HS_EINVAL ? 400 : j->err == HS_ENOTSUP ? 405 : 500;
    if (!j->err && j->len) {
        *answer = strndup((const char *)j->data, j->len);
    } else {
        json_t *e = json_pack("{s:{s:s,s:s}}", "error", "code",
                              status == 400 ? "bad_request" : "internal", "message",
                              j->err == HS_ENOTSUP ? "the database is read-only"
                              : j->msg[0]          ? j->msg
                                                   : hs_strerror(j->err));
        *answer = e ? json_dumps(e, JSON_COMPACT) : NULL;
        json_decref(e);
    }
    hs_wjob_free(j);
    return status;
}

#ifdef HS_WITH_CLICKHOUSE
/* The shipper's thread: a pass landed. */
static void ship_notify(void *data)
{
    server *s = data;
    uv_async_send(&s->ship_async);
}

/* The writer's thread, at a HELLO: a run another front end carried on is
 * fetched back first (hs_chship_resume). s->ship is set before the loop
 * runs, hence before any HELLO. */
static int ship_before_hello(void *data, hs_store *store, const hs_hello *h, char *err,
                             size_t errlen)
{
    server *s = data;
    return s->ship ? hs_chship_resume(s->ship, store, h, err, errlen) : 0;
}

/* The shipper's thread: an ended run that ClickHouse holds whole leaves
 * the buffer (POST /api/gc's path: the writer removes it between batches). */
static int gc_request(void *data, const char *body, size_t len, char **answer);
static int ship_prune(void *data, int64_t local)
{
    char body[160], *answer = NULL;
    int n = snprintf(body, sizeof body, "{\"filters\": {\"id\": \"%lld\"}, \"vacuum\": false}",
                     (long long)local);
    int status = gc_request(data, body, (size_t)n, &answer);
    int gone = status == 200 && answer && strstr(answer, "\"runs_removed\":1");
    free(answer);
    return gone ? 0 : -1;
}

/* The loop: frames committed before may now be acknowledged. */
static void on_ship(uv_async_t *a)
{
    server *s = a->data;
    for (hs_conn *c = s->conns, *n; c; c = n) {
        n = c->next;
        if (c->phase != P_STREAM || c->closing || c->acked >= c->committed) continue;
        conn_ack(s, c);
        if (c->eof && !c->inflight && c->acked >= c->committed && !c->closing) conn_close(c, NULL);
    }
}
#endif

int hs_server_store_check(const char *url, char *err, size_t errlen)
{
#ifdef HS_WITH_CLICKHOUSE
    hs_ch *c;
    int rc = hs_ch_open(&c, url, err, errlen);
    hs_ch_free(c);
    return rc;
#else
    snprintf(err, errlen, "%s: this build has no ClickHouse store (it needs libcurl)", url);
    return HS_ENOTSUP;
#endif
}

/* The loop's timers, its check handle and the writer's async. */
static void start_handles(server *s)
{
    uv_timer_init(&s->loop, &s->sweep);
    s->sweep.data = s;
    uv_timer_init(&s->loop, &s->timeouts);
    s->timeouts.data = s;
    uint64_t tick = hs_http_tick_ms(s->cfg->hello_timeout_ns, s->cfg->frame_timeout_ns);
    uv_timer_start(&s->timeouts, on_timeouts, tick, tick);
    uv_check_init(&s->loop, &s->tick);
    s->tick.data = s;
    uv_check_start(&s->tick, on_tick);
    uv_async_init(&s->loop, &s->async, on_async);
    s->async.data = s;
}

/* With --store clickhouse://…, the shipper of the committed rows; a store
 * that cannot be written leaves nothing to run for. */
static void start_ship(server *s)
{
#ifdef HS_WITH_CLICKHOUSE
    const hs_server_config *cfg = s->cfg;
    char err[512] = "";
    hs_chship *ship = NULL;
    if (!cfg->store_url) return;
    if (!hs_chship_new(&ship, cfg->db_path, cfg->store_url, err, sizeof err)) {
        hs_chship_set_retention(ship, cfg->store_retain_months);
        uv_async_init(&s->loop, &s->ship_async, on_ship);
        s->ship_async.data = s;
        s->ship_async_on = 1;
        s->ship = ship;
        hs_chship_set_notify(ship, ship_notify, s);
        hs_chship_set_pruner(ship, ship_prune, s);
    }
    if (!ship || hs_chship_start(ship, 200)) {
        hs_log("cannot ship to ClickHouse: %s", err);
        exit(1);
    }
#else
    (void)s;
#endif
}

/* The symbolizer thread, over the files `heapstore symbols add` put next
 * to the database first, then --symbol-path. */
static void start_symbols(server *s)
{
    const hs_server_config *cfg = s->cfg;
    const char *paths[65];
    char added[4200];
    int np = 0;
    if (!hs_syms_store_dir(added, sizeof added, cfg->db_path)) paths[np++] = added;
    for (int i = 0; i < cfg->nsymbol_paths && np < (int)HS_COUNTOF(paths); i++)
        paths[np++] = cfg->symbol_paths[i];
    hs_syms_config sycfg = {.paths = paths, .npaths = np, .no_local = cfg->no_local_symbols};
    uv_async_init(&s->loop, &s->symd_async, on_symd_async);
    s->symd_async.data = s;
    if (hs_symd_start(&s->symd, &sycfg, s->writer, cfg->db_path))
        hs_log("cannot start the symbolizer thread: frames are stored as collectors name them");
    else
        hs_symd_set_notify(s->symd, symd_notify, s);
}

/* After the loop's first run (a stop): the threads, in order, then what
 * their ends left for the loop. */
static void stop_threads(server *s)
{
    hs_symd_stop(s->symd); /* idle: SYNC came through it */
    s->symd = NULL;
    if (s->symreqs) hs_log("symbols: %" PRIu64 " builds asked of collectors", s->symreqs);
    hs_writer_join(s->writer);
#ifdef HS_WITH_CLICKHOUSE
    hs_chship *ship = s->ship;
    s->ship = NULL;
    hs_chship_stop(ship); /* after the writer: its last pass sees every commit */
#endif
    uv_run(&s->loop, UV_RUN_DEFAULT);
    for (hs_conn *c = s->conns; c; c = c->next)
        c->sym_pending = 0; /* every thread has ended: jobs never answered are gone */
    while (s->conns) conn_unlink_free(s->conns);
}

/* The writer thread on store, which is the writer's once it started; on
 * failure it stays the caller's, and the loop's handles are closed for the
 * caller's last run of the loop. */
static int start_writer(server *s, hs_store *store)
{
    hs_writer_config wcfg = {.grace_ns = s->cfg->grace_ns,
                             .retain_events_ns = s->cfg->retain_events_ns};
#ifdef HS_WITH_CLICKHOUSE
    if (s->cfg->store_url) {
        wcfg.before_hello = ship_before_hello;
        wcfg.before_hello_data = s;
    }
#endif
    int rc = hs_writer_start(&s->writer, store, &wcfg, &s->async);
    if (rc) {
        hs_log("cannot start the writer thread");
        uv_close((uv_handle_t *)&s->async, on_closed_noop);
        uv_close((uv_handle_t *)&s->sweep, on_closed_noop);
        uv_close((uv_handle_t *)&s->timeouts, on_closed_noop);
        uv_close((uv_handle_t *)&s->tick, on_closed_noop);
        uv_close((uv_handle_t *)&s->listener, on_closed_noop);
    }
    return rc;
}

static void start_signals(server *s)
{
    uv_signal_init(&s->loop, &s->sigint);
    uv_signal_init(&s->loop, &s->sigterm);
    s->sigint.data = s->sigterm.data = s;
    uv_signal_start(&s->sigint, on_signal, SIGINT);
    uv_signal_start(&s->sigterm, on_signal, SIGTERM);
}

int hs_server_run(const hs_server_config *cfg)
{
    /* A peer that closes while an answer is written to it must cost that
     * connection only (EPIPE), never the process (libuv writes with write(),
     * which raises SIGPIPE). The server owns its process; a host program
     * such as `heapstore run` starts it as a process of its own. */
    struct sigaction ign = {.sa_handler = SIG_IGN};
    sigemptyset(&ign.sa_mask);
    sigaction(SIGPIPE, &ign, NULL);
    server *s = calloc(1, sizeof *s);
    if (!s) return HS_ENOMEM;
    s->cfg = cfg;
    int rc = uv_loop_init(&s->loop);
    if (rc) {
        free(s);
        return HS_EIO;
    }
    char err[512] = "";
    hs_store *store = NULL;
    hs_store_config scfg = {.granularity_ns = cfg->granularity_ns,
                            .event_time_ns = cfg->event_time_ns};
    if ((rc = hs_store_open(&store, cfg->db_path, &scfg, err, sizeof err))) {
        hs_log("%s", err[0] ? err : hs_strerror(rc));
        goto fail_loop;
    }
    hs_http_config hcfg = {.gc = gc_request,
                           .gc_data = s,
                           .db_path = cfg->store_url ? cfg->store_url : cfg->db_path,
                           .token = cfg->token,
                           .read_token = cfg->read_token,
                           .web_root = cfg->web_root,
                           .header_timeout_ns = cfg->header_timeout_ns,
                           .idle_timeout_ns = cfg->idle_timeout_ns};
    if ((rc = hs_http_new(&s->http, &s->loop, &hcfg))) {
        hs_log("cannot start the HTTP side: %s", hs_strerror(rc));
        goto fail_store;
    }
    int port;
    if ((rc = bind_listener(s, &port))) goto fail_http;
    start_handles(s);
    if ((rc = start_writer(s, store))) goto fail_http;
    store = NULL; /* the writer's now */
    start_ship(s);
    start_symbols(s);
    start_signals(s);
    /* Said only now: whoever waits for this line may stop the server at once,
     * and SIGINT/SIGTERM must find their handlers (not the default action). */
    hs_log("listening on %s:%d (database %s)", cfg->host, port, cfg->db_path);
    hs_spawn_say_ready(cfg->ready_fd, port);
    uv_run(&s->loop, UV_RUN_DEFAULT);
    stop_threads(s);
    uv_loop_close(&s->loop);
    hs_log_flush(1);
    hs_log("stopped cleanly");
    free(s);
    return 0;
fail_http:
    hs_http_free(s->http);
    uv_run(&s->loop, UV_RUN_DEFAULT);
fail_store:
    hs_store_free(store);
fail_loop:
    uv_loop_close(&s->loop);
    free(s);
    return rc;
}

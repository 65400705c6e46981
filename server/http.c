/* hs_http: the JSON API of docs/api.md and the dashboard's static files.
 *
 * Each adopted client is an http_conn. The loop thread reads and parses one
 * request at a time with hs_http_parse_request() (bounded: HS_HTTP_HEAD_MAX
 * bytes of head, HS_HTTP_BODY_MAX of body, Content-Length only), checks the
 * bearer token (--token or --read-token), then answers GET /api/health on
 * the spot (it reads no table and makes no system call: what it says was
 * found when its connection opened) and hands other work to a thread: POST
 * /api/sql to the SQL lane (one thread of its own, HS_HTTP_SQL_QUEUE
 * waiting at most), the rest to libuv's thread pool (POST /api/gc too: it
 * needs the write token, and its pool thread waits while the writer thread
 * applies it, hs_http_config's gc). API requests run
 * hs_api_handle() (queries/) on a read-only connection taken from a small
 * pool, static files are read on the pool too. So user SQL, however heavy,
 * holds one thread and one core at most, and the dashboard's own queries and
 * health never wait behind it. The answer is written back from the loop
 * thread; keep-alive is honoured, and pipelined requests wait their turn in
 * the input buffer.
 *
 * A sweep timer enforces the header and idle timeouts (hs_http.h).
 *
 * Lifetime: a conn is freed when its handle is closed AND no work of it is
 * queued or running (a running request cannot be taken back; one waiting in
 * the SQL lane is taken out of the queue). hs_http_free() closes every conn;
 * once the last is gone it stops the lane's thread, closes the timer and
 * the lane's async handle, and frees h in their close callbacks.
 */
#include "hs_http.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "hs_error.h"
#include "hs_http_parse.h"
#include "hs_log.h"
#include "hs_queries.h"
#include "hs_refill.h"

#define HTTP_FILE_MAX (64u << 20)
#define HTTP_POOL_MAX 16

typedef struct http_conn http_conn;

enum { LANE_NONE, LANE_QUEUED, LANE_TAKEN };

/* The SQL lane: one thread serving a FIFO of conns. waiting, done and each
 * conn's lane state and lane_next are guarded by mu; the loop submits, takes
 * queued conns back, and collects done ones (woken by async). */
typedef struct sql_lane {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    http_conn *head, *tail; /* waiting, oldest first */
    size_t waiting;
    http_conn *done; /* answered, for the loop */
    int stop;
    uv_async_t async;
} sql_lane;

struct hs_http {
    uv_loop_t *loop;
    char *db_path, *token, *read_token, *web_root;
    uint64_t header_timeout_ns, idle_timeout_ns;
    pthread_mutex_t mu; /* guards pool and npool (thread-pool threads take and return) */
    hs_q *pool[HTTP_POOL_MAX];
    uint64_t pool_gen[HTTP_POOL_MAX]; /* hs_refill_generation() when each was taken */
    int npool;
    hs_q *health_q; /* opened at start: GET /api/health says whether it could be */
    int (*gc)(void *data, const char *body, size_t len, char **answer); /* hs_http_config's */
    void *gc_data;
    http_conn *conns;
    size_t nclients; /* adopted handles not being closed */
    int closing;
    int handles; /* timer and lane async not yet closed (after hs_http_free) */
    uv_timer_t sweep;
    sql_lane lane;
};

struct http_conn {
    hs_http *h;
    uv_tcp_t *tcp;
    http_conn *prev, *next;
    char *in;
    size_t in_len, in_cap;
    int reading, busy, closing, closed, writing;
    /* the request being answered: its head, and the bytes of in it spans */
    hs_http_req req;
    size_t req_len;
    int keep_alive, head_only;
    /* the answer */
    int status;
    char *out; /* head + body, one buffer */
    size_t out_len;
    uv_work_t work;
    uv_write_t wreq;
    /* timeouts (uv_hrtime): waiting for a request since wait_ns; its first
     * byte came at req_ns (0: none yet); the last bytes at read_ns */
    uint64_t wait_ns, req_ns, read_ns;
    int head_done; /* the head of the request in `in` is complete */
    int is_gc;     /* the request is POST /api/gc, for the writer (cfg gc) */
    int lane;      /* LANE_*, under lane.mu */
    http_conn *lane_next;
};

static void conn_free(http_conn *c);
static void conn_parse(http_conn *c);
static void conn_close(http_conn *c);

/* ---- pool of read-only connections ---------------------------------------- */

/* A connection keeps the frames it read, across requests; frames are
 * named in place when their build comes late (hs_refill.h), so one that
 * may hold frames read before that is not used again. *gen: the generation
 * it is taken in, for pool_give. */
static hs_q *pool_take(hs_http *h, uint64_t *gen)
{
    hs_q *q = NULL;
    *gen = hs_refill_generation();
    pthread_mutex_lock(&h->mu);
    while (!q && h->npool) {
        q = h->pool[--h->npool];
        if (h->pool_gen[h->npool] != *gen) {
            hs_q_free(q);
            q = NULL;
        }
    }
    pthread_mutex_unlock(&h->mu);
    if (!q) {
        hs_qerr err;
        if (hs_q_open(&q, h->db_path, &err)) q = NULL;
    }
    return q;
}

static void pool_give(hs_http *h, hs_q *q, uint64_t gen)
{
    if (!q) return;
    pthread_mutex_lock(&h->mu);
    if (h->npool < HTTP_POOL_MAX && gen == hs_refill_generation()) {
        h->pool_gen[h->npool] = gen;
        h->pool[h->npool++] = q;
        q = NULL;
    }
    pthread_mutex_unlock(&h->mu);
    hs_q_free(q);
}

/* ---- the SQL lane ------------------------------------------------------------- */

static void serve_api(http_conn *c);
static void work_done(http_conn *c, int status);

static void *lane_main(void *arg)
{
    hs_http *h = arg;
    sql_lane *l = &h->lane;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->stop && !l->head) pthread_cond_wait(&l->cond, &l->mu);
        if (!l->head) break; /* stop, and nothing waits */
        http_conn *c = l->head;
        l->head = c->lane_next;
        if (!l->head) l->tail = NULL;
        l->waiting--;
        assert(c->lane == LANE_QUEUED);
        c->lane = LANE_TAKEN;
        pthread_mutex_unlock(&l->mu);
        serve_api(c);
        pthread_mutex_lock(&l->mu);
        c->lane_next = l->done;
        l->done = c;
        uv_async_send(&l->async);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

static void lane_stop(hs_http *h)
{
    sql_lane *l = &h->lane;
    pthread_mutex_lock(&l->mu);
    assert(!l->head && !l->done);
    l->stop = 1;
    pthread_cond_signal(&l->cond);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
}

/* Queues c for the lane; -1 when HS_HTTP_SQL_QUEUE requests already wait. */
static int lane_submit(http_conn *c)
{
    sql_lane *l = &c->h->lane;
    pthread_mutex_lock(&l->mu);
    int full = l->waiting >= HS_HTTP_SQL_QUEUE;
    if (!full) {
        c->lane = LANE_QUEUED;
        c->lane_next = NULL;
        if (l->tail)
            l->tail->lane_next = c;
        else
            l->head = c;
        l->tail = c;
        l->waiting++;
        pthread_cond_signal(&l->cond);
    }
    pthread_mutex_unlock(&l->mu);
    return full ? -1 : 0;
}

/* A closed conn's request that has not started is dropped from the queue:
 * 1 if it was (no answer will come), 0 if the lane has it or had none. */
static int lane_take_back(http_conn *c)
{
    sql_lane *l = &c->h->lane;
    int taken = 0;
    pthread_mutex_lock(&l->mu);
    if (c->lane == LANE_QUEUED) {
        http_conn **pp = &l->head, *prev = NULL;
        while (*pp != c) {
            prev = *pp;
            pp = &(*pp)->lane_next;
        }
        *pp = c->lane_next;
        if (l->tail == c) l->tail = prev;
        l->waiting--;
        c->lane = LANE_NONE;
        taken = 1;
    }
    pthread_mutex_unlock(&l->mu);
    return taken;
}

/* The loop's side: answers what the lane has served. */
static void lane_collect(uv_async_t *a)
{
    hs_http *h = a->data;
    sql_lane *l = &h->lane;
    pthread_mutex_lock(&l->mu);
    http_conn *c = l->done;
    l->done = NULL;
    for (http_conn *k = c; k; k = k->lane_next) k->lane = LANE_NONE;
    pthread_mutex_unlock(&l->mu);
    while (c) {
        http_conn *n = c->lane_next;
        work_done(c, 0);
        c = n;
    }
}

/* ---- timeouts ------------------------------------------------------------------ */

uint64_t hs_http_tick_ms(uint64_t a_ns, uint64_t b_ns)
{
    uint64_t least = UINT64_MAX;
    if (a_ns) least = a_ns;
    if (b_ns && b_ns < least) least = b_ns;
    uint64_t ms = least == UINT64_MAX ? 1000 : least / 4000000;
    return ms < 20 ? 20 : ms > 1000 ? 1000 : ms;
}

/* Since when c has waited for a request head (UINT64_MAX: it is not
 * waiting: its head is in, or it is being answered or closed). */
static uint64_t waiting_since(const http_conn *c)
{
    if (c->busy || c->writing || c->closing || c->head_done) return UINT64_MAX;
    return c->in_len ? c->req_ns : c->wait_ns;
}

static void fail_request(http_conn *c, int status, const char *code, const char *msg);

static void on_sweep(uv_timer_t *t)
{
    hs_http *h = t->data;
    uint64_t now = uv_hrtime();
    for (http_conn *c = h->conns, *n; c; c = n) {
        n = c->next;
        if (c->busy || c->writing || c->closing) continue;
        if (!c->in_len) {
            if (h->idle_timeout_ns && now - c->wait_ns >= h->idle_timeout_ns) conn_close(c);
            continue;
        }
        uint64_t from = c->head_done ? c->read_ns : c->req_ns;
        if (!h->header_timeout_ns || now - from < h->header_timeout_ns) continue;
        char msg[160];
        snprintf(msg, sizeof msg, "the request %s within %.1f s (--header-timeout)",
                 c->head_done ? "body stalled: no byte" : "head did not arrive",
                 (double)h->header_timeout_ns / 1e9);
        hs_log("http client (%zu bytes received): 408: %s", c->in_len, msg);
        fail_request(c, 408, "timeout", msg);
    }
}

uint64_t hs_http_oldest_waiting(const hs_http *h)
{
    uint64_t since = UINT64_MAX;
    for (const http_conn *c = h->conns; c; c = c->next) {
        uint64_t w = waiting_since(c);
        if (w < since) since = w;
    }
    return since;
}

int hs_http_evict_oldest(hs_http *h)
{
    http_conn *oldest = NULL;
    uint64_t since = UINT64_MAX;
    for (http_conn *c = h->conns; c; c = c->next) {
        uint64_t w = waiting_since(c);
        if (w < since) {
            since = w;
            oldest = c;
        }
    }
    if (!oldest) return -1;
    hs_log("http client: at the connection limit: displaced by a new connection after %.1f s "
           "without a complete request (%zu bytes received)",
           (double)(uv_hrtime() - since) / 1e9, oldest->in_len);
    conn_close(oldest);
    return 0;
}

/* ---- public ------------------------------------------------------------------ */

int hs_http_new(hs_http **out, uv_loop_t *loop, const hs_http_config *cfg)
{
    hs_http *h = calloc(1, sizeof *h);
    if (!h) return HS_ENOMEM;
    h->loop = loop;
    if (pthread_mutex_init(&h->mu, NULL)) {
        free(h);
        return HS_ENOMEM;
    }
    h->header_timeout_ns = cfg->header_timeout_ns;
    h->idle_timeout_ns = cfg->idle_timeout_ns;
    h->gc = cfg->gc;
    h->gc_data = cfg->gc_data;
    int rc = HS_ENOMEM;
    if ((cfg->db_path && !(h->db_path = strdup(cfg->db_path))) ||
        (cfg->token && !(h->token = strdup(cfg->token))) ||
        (cfg->read_token && !(h->read_token = strdup(cfg->read_token))) ||
        (cfg->web_root && !(h->web_root = strdup(cfg->web_root))))
        goto fail;
    sql_lane *l = &h->lane;
    if (pthread_mutex_init(&l->mu, NULL)) goto fail;
    if (pthread_cond_init(&l->cond, NULL)) goto fail_mu;
    /* The thread waits for work, so it never signals before async exists. */
    if (pthread_create(&l->thread, NULL, lane_main, h)) goto fail_cond;
    if ((rc = uv_async_init(loop, &l->async, lane_collect))) {
        lane_stop(h);
        rc = HS_EIO;
        goto fail_cond;
    }
    l->async.data = h;
    uv_timer_init(loop, &h->sweep);
    h->sweep.data = h;
    uint64_t tick = hs_http_tick_ms(h->header_timeout_ns, h->idle_timeout_ns);
    uv_timer_start(&h->sweep, on_sweep, tick, tick);
    /* Opened here, before the loop runs: the loop thread never calls SQLite. */
    hs_qerr qerr;
    if (h->db_path && hs_q_open(&h->health_q, h->db_path, &qerr)) h->health_q = NULL;
    *out = h;
    return 0;
fail_cond:
    pthread_cond_destroy(&l->cond);
fail_mu:
    pthread_mutex_destroy(&l->mu);
fail:
    free(h->db_path);
    free(h->token);
    free(h->read_token);
    free(h->web_root);
    pthread_mutex_destroy(&h->mu);
    free(h);
    return rc;
}

static void http_handle_closed(uv_handle_t *handle)
{
    hs_http *h = handle->data;
    if (--h->handles) return;
    for (int i = 0; i < h->npool; i++) hs_q_free(h->pool[i]);
    hs_q_free(h->health_q);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->lane.cond);
    pthread_mutex_destroy(&h->lane.mu);
    free(h->db_path);
    free(h->token);
    free(h->read_token);
    free(h->web_root);
    free(h);
}

/* Every conn is gone, so the lane is idle (a conn is freed only once the
 * lane has returned it): stop its thread, then close the handles; the last
 * close callback frees h. */
static void http_destroy(hs_http *h)
{
    sql_lane *l = &h->lane;
    lane_stop(h);
    h->handles = 2;
    uv_close((uv_handle_t *)&h->sweep, http_handle_closed);
    uv_close((uv_handle_t *)&l->async, http_handle_closed);
}

static void on_close(uv_handle_t *handle)
{
    http_conn *c = handle->data;
    free(handle);
    c->tcp = NULL;
    c->closed = 1;
    if (c->busy && lane_take_back(c)) c->busy = 0;
    if (!c->busy && !c->writing) conn_free(c);
}

static void conn_close(http_conn *c)
{
    if (c->closing) return;
    c->closing = 1;
    c->h->nclients--; /* its descriptor is closed now; the handle goes later */
    uv_close((uv_handle_t *)c->tcp, on_close);
}

void hs_http_free(hs_http *h)
{
    if (!h) return;
    h->closing = 1;
    if (!h->conns) {
        http_destroy(h);
        return;
    }
    for (http_conn *c = h->conns; c; c = c->next) conn_close(c);
}

static void conn_free(http_conn *c)
{
    hs_http *h = c->h;
    if (c->prev)
        c->prev->next = c->next;
    else
        h->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    free(c->in);
    free(c->out);
    free(c);
    if (h->closing && !h->conns) http_destroy(h);
}

static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    http_conn *c = handle->data;
    size_t want = c->in_len + 16384;
    if (want > c->in_cap) {
        size_t cap = c->in_cap ? c->in_cap : 16384;
        while (cap < want) cap *= 2;
        char *np = realloc(c->in, cap);
        if (!np) {
            *buf = uv_buf_init(NULL, 0);
            return;
        }
        c->in = np;
        c->in_cap = cap;
    }
    *buf = uv_buf_init(c->in + c->in_len, (unsigned)(c->in_cap - c->in_len));
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    (void)buf;
    http_conn *c = stream->data;
    if (nread < 0) {
        conn_close(c);
        return;
    }
    if (!nread) return;
    c->read_ns = uv_hrtime();
    if (!c->in_len) c->req_ns = c->read_ns;
    c->in_len += (size_t)nread;
    conn_parse(c);
}

static void read_start(http_conn *c)
{
    if (c->reading || c->closing) return;
    if (uv_read_start((uv_stream_t *)c->tcp, on_alloc, on_read)) {
        conn_close(c);
        return;
    }
    c->reading = 1;
}

static void read_stop(http_conn *c)
{
    if (!c->reading || c->closing) return;
    uv_read_stop((uv_stream_t *)c->tcp);
    c->reading = 0;
}

size_t hs_http_clients(const hs_http *h)
{
    return h->nclients;
}

static void json_error(http_conn *c, int status, const char *code, const char *msg);
static void send_out(http_conn *c);

void hs_http_adopt(hs_http *h, uv_tcp_t *client, const char *first, size_t n, int busy)
{
    http_conn *c = calloc(1, sizeof *c);
    if (!c || h->closing) {
        free(c);
        client->data = NULL;
        uv_close((uv_handle_t *)client, (uv_close_cb)free);
        return;
    }
    c->h = h;
    c->tcp = client;
    c->wait_ns = c->req_ns = c->read_ns = uv_hrtime();
    client->data = c;
    h->nclients++;
    c->next = h->conns;
    if (h->conns) h->conns->prev = c;
    h->conns = c;
    if (n) {
        c->in_cap = n > 16384 ? n : 16384;
        if (!(c->in = malloc(c->in_cap))) {
            conn_close(c);
            return;
        }
        memcpy(c->in, first, n);
        c->in_len = n;
    }
    if (busy) {
        /* At the connection limit: answered at once, whatever the request
         * (its first bytes were read, so the close does not reset it). */
        c->keep_alive = 0;
        json_error(c, 503, "busy",
                   "the server holds as many connections as it can; try again later");
        send_out(c);
        return;
    }
    conn_parse(c);
}

/* ---- answers ------------------------------------------------------------------ */

static const char *reason(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 304:
        return "Not Modified";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 411:
        return "Length Required";
    case 413:
        return "Content Too Large";
    case 414:
        return "URI Too Long";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 501:
        return "Not Implemented";
    case 503:
        return "Service Unavailable";
    default:
        return "Unknown";
    }
}

/* Builds c->out: the head (with extra header lines, each ending in \r\n) and body. */
static int build_response(http_conn *c, int status, const char *ctype, const char *extra,
                          const char *body, size_t len)
{
    char head[1024];
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %d %s\r\nServer: heapstore/%s\r\nContent-Type: %s\r\n"
                     "Content-Length: %zu\r\nConnection: %s\r\n%s\r\n",
                     status, reason(status), HEAPSTORE_VERSION, ctype, len,
                     c->keep_alive ? "keep-alive" : "close", extra ? extra : "");
    if (n < 0 || (size_t)n >= sizeof head) return -1;
    size_t blen = c->head_only ? 0 : len;
    free(c->out);
    c->out = malloc((size_t)n + blen + 1);
    if (!c->out) return -1;
    memcpy(c->out, head, (size_t)n);
    if (blen) memcpy(c->out + n, body, blen);
    c->out_len = (size_t)n + blen;
    c->status = status;
    return 0;
}

static void json_error(http_conn *c, int status, const char *code, const char *msg)
{
    json_t *j = json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", msg);
    char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    const char *extra = status == 401   ? "WWW-Authenticate: Bearer\r\nCache-Control: no-store\r\n"
                        : status == 503 ? "Retry-After: 1\r\nCache-Control: no-store\r\n"
                                        : "Cache-Control: no-store\r\n";
    if (!text || build_response(c, status, "application/json", extra, text, strlen(text))) {
        free(c->out);
        c->out = NULL;
        c->out_len = 0;
    }
    free(text);
}

static void on_written(uv_write_t *req, int status)
{
    http_conn *c = req->data;
    c->writing = 0;
    free(c->out);
    c->out = NULL;
    c->out_len = 0;
    if (c->closed) {
        if (!c->busy) conn_free(c);
        return;
    }
    if (status < 0 || !c->keep_alive || c->h->closing) {
        conn_close(c);
        return;
    }
    /* the request is answered: drop its bytes, go on with what follows */
    memmove(c->in, c->in + c->req_len, c->in_len - c->req_len);
    c->in_len -= c->req_len;
    c->req_len = 0;
    c->head_done = 0;
    c->wait_ns = c->req_ns = uv_hrtime(); /* a pipelined request's bytes are here now */
    conn_parse(c);
}

static void send_out(http_conn *c)
{
    if (c->closing) return;
    if (!c->out) { /* nothing could be built: out of memory */
        conn_close(c);
        return;
    }
    uv_buf_t b = uv_buf_init(c->out, (unsigned)c->out_len);
    c->wreq.data = c;
    c->writing = 1;
    if (uv_write(&c->wreq, (uv_stream_t *)c->tcp, &b, 1, on_written)) {
        c->writing = 0;
        conn_close(c);
    }
}

/* An error found while parsing: answer it and close. */
static void fail_request(http_conn *c, int status, const char *code, const char *msg)
{
    read_stop(c);
    c->keep_alive = 0;
    c->head_only = 0;
    json_error(c, status, code, msg);
    send_out(c);
}

/* ---- static files (on the thread pool) -------------------------------------- */

static const struct {
    const char *ext, *type;
} mime[] = {
    {".html", "text/html; charset=utf-8"},
    {".js", "text/javascript; charset=utf-8"},
    {".mjs", "text/javascript; charset=utf-8"},
    {".css", "text/css; charset=utf-8"},
    {".json", "application/json"},
    {".map", "application/json"},
    {".svg", "image/svg+xml"},
    {".png", "image/png"},
    {".jpg", "image/jpeg"},
    {".ico", "image/x-icon"},
    {".txt", "text/plain; charset=utf-8"},
    {".woff2", "font/woff2"},
    {".wasm", "application/wasm"},
};

static const char *mime_type(const char *path)
{
    const char *dot = strrchr(path, '.');
    const char *slash = strrchr(path, '/');
    if (dot && (!slash || dot > slash))
        for (size_t i = 0; i < HS_COUNTOF(mime); i++)
            if (!strcasecmp(dot, mime[i].ext)) return mime[i].type;
    return "application/octet-stream";
}

/* Reads the whole file at path; 0, or -1 (errno set). */
static int read_file(const char *path, char **out, size_t *len, struct stat *sb)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    if (fstat(fd, sb) || !S_ISREG(sb->st_mode) || (uint64_t)sb->st_size > HTTP_FILE_MAX) {
        close(fd);
        errno = ENOENT;
        return -1;
    }
    size_t n = (size_t)sb->st_size, got = 0;
    char *p = malloc(n ? n : 1);
    if (!p) {
        close(fd);
        return -1;
    }
    while (got < n) {
        ssize_t r = read(fd, p + got, n - got);
        if (r <= 0) {
            if (r < 0 && errno == EINTR) continue;
            break;
        }
        got += (size_t)r;
    }
    close(fd);
    *out = p;
    *len = got;
    return 0;
}

static void serve_static(http_conn *c)
{
    hs_http *h = c->h;
    char rel[HS_HTTP_TARGET_MAX + 16];
    if (strcmp(c->req.method, "GET") && strcmp(c->req.method, "HEAD")) {
        json_error(c, 405, "bad_request", "only GET and HEAD serve files");
        return;
    }
    if (!h->web_root) {
        json_error(c, 404, "not_found", "this server has no dashboard files (--web-root)");
        return;
    }
    if (hs_http_static_path(rel, sizeof rel, c->req.target) < 0) {
        json_error(c, 400, "bad_request", "malformed path");
        return;
    }
    char path[HS_HTTP_TARGET_MAX + 1024];
    snprintf(path, sizeof path, "%s%s", h->web_root, rel);
    char *data = NULL;
    size_t len = 0;
    struct stat sb;
    if (read_file(path, &data, &len, &sb)) {
        /* client-side routes (no extension) get the page itself */
        const char *last = strrchr(rel, '/');
        if (strchr(last, '.')) {
            json_error(c, 404, "not_found", "no such file");
            return;
        }
        snprintf(path, sizeof path, "%s/index.html", h->web_root);
        strcpy(rel, "/index.html");
        if (read_file(path, &data, &len, &sb)) {
            json_error(c, 404, "not_found", "no such file");
            return;
        }
    }
    char etag[64], extra[256];
    snprintf(etag, sizeof etag, "\"%" PRIx64 "-%" PRIx64 "\"", (uint64_t)sb.st_mtime,
             (uint64_t)sb.st_size);
    int html = strstr(rel, ".html") != NULL;
    snprintf(extra, sizeof extra,
             "Cache-Control: %s\r\nETag: %s\r\nX-Content-Type-Options: nosniff\r\n",
             html ? "no-cache" : "public, max-age=3600", etag);
    if (c->req.if_none_match[0] && !strcmp(c->req.if_none_match, etag)) {
        free(data);
        if (build_response(c, 304, mime_type(rel), extra, "", 0))
            json_error(c, 500, "internal", "out of memory");
        /* a 304 has no body, and its Content-Length describes none */
        return;
    }
    if (build_response(c, 200, mime_type(rel), extra, data, len))
        json_error(c, 500, "internal", "out of memory");
    free(data);
}

/* ---- API (on the thread pool) ------------------------------------------------ */

/* Answers c's API request on connection q (NULL: the database cannot be
 * opened; hs_api_handle() then answers only health). */
static void serve_api_with(http_conn *c, hs_q *q)
{
    hs_api_reply r;
    hs_api_handle(q, c->req.method, c->req.target, c->in + c->req.head_len, c->req.body_len, &r);
    char extra[512] = "Cache-Control: no-store\r\n";
    if (r.json) {
        char *text = json_dumps(r.json, JSON_COMPACT);
        if (!text || build_response(c, r.status, "application/json", extra, text, strlen(text)))
            json_error(c, 500, "internal", "out of memory");
        free(text);
    } else {
        if (r.filename)
            snprintf(
                extra, sizeof extra,
                "Cache-Control: no-store\r\nContent-Disposition: attachment; filename=\"%s\"\r\n",
                r.filename);
        if (build_response(c, r.status, r.content_type, extra, r.body ? r.body : "", r.len))
            json_error(c, 500, "internal", "out of memory");
    }
    hs_api_reply_clear(&r);
}

static void serve_api(http_conn *c)
{
    uint64_t gen;
    hs_q *q = pool_take(c->h, &gen);
    serve_api_with(c, q);
    pool_give(c->h, q, gen);
}

/* POST /api/gc on a thread of the pool: the writer applies it. */
static void serve_gc(http_conn *c)
{
    char *answer = NULL;
    int status = c->h->gc(c->h->gc_data, c->in + c->req.head_len, c->req.body_len, &answer);
    const char *extra = "Cache-Control: no-store\r\n";
    if (!answer || build_response(c, status, "application/json", extra, answer, strlen(answer)))
        json_error(c, 500, "internal", "out of memory");
    free(answer);
}

static void work_cb(uv_work_t *w)
{
    http_conn *c = w->data;
    if (c->is_gc)
        serve_gc(c);
    else if (c->req.is_api)
        serve_api(c);
    else
        serve_static(c);
}

static void work_done(http_conn *c, int status)
{
    c->busy = 0;
    if (c->closed) {
        if (!c->writing) conn_free(c);
        return;
    }
    if (status) {
        c->keep_alive = 0;
        json_error(c, 503, "internal", "the request was cancelled");
    }
    send_out(c);
}

static void after_work(uv_work_t *w, int status)
{
    work_done(w->data, status);
}

/* ---- parsing (loop thread) ------------------------------------------------------ */

/* Either token admits a reader; with neither configured, everyone. */
static int authorized(const hs_http *h, const hs_http_req *r)
{
    if (!h->token && !h->read_token) return 1;
    /* both compared, whichever matches: the time says nothing of which */
    int w = hs_http_bearer_ok(r->auth, r->auth_len, h->token);
    int rd = hs_http_bearer_ok(r->auth, r->auth_len, h->read_token);
    return w | rd;
}

/* The request's path as hs_api_handle() routes it (no query string, no
 * trailing slashes), cut to len - 1 bytes: enough to recognize a route. */
static void api_path(char *out, size_t len, const hs_http_req *r)
{
    size_t n = strcspn(r->target, "?");
    while (n > 1 && r->target[n - 1] == '/') n--;
    if (n >= len) n = len - 1;
    memcpy(out, r->target, n);
    out[n] = '\0';
    if (!r->is_api) out[0] = '\0';
}

static void conn_parse(http_conn *c)
{
    if (c->busy || c->writing || c->closing) return;
    hs_http_perr err;
    int rc = hs_http_parse_request(&c->req, c->in, c->in_len, &err);
    if (rc == HS_HTTP_ERROR) {
        fail_request(c, err.status, err.code, err.message);
        return;
    }
    if (rc == HS_HTTP_INCOMPLETE) {
        read_start(c);
        return;
    }
    c->keep_alive = c->req.keep_alive;
    c->head_only = c->req.head_only;
    if (rc == HS_HTTP_HEAD) {
        c->head_done = 1; /* from now on the body must keep coming */
        if (c->req.expect_continue && c->in_len == c->req.head_len && !c->reading) {
            static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
            uv_buf_t b = uv_buf_init((char *)cont, sizeof cont - 1);
            uv_try_write((uv_stream_t *)c->tcp, &b, 1);
        }
        read_start(c);
        return;
    }
    read_stop(c);
    c->head_done = 1;
    c->req_len = c->req.head_len + c->req.body_len;
    if (c->req.is_api && !authorized(c->h, &c->req)) {
        json_error(c, 401, "unauthorized",
                   c->req.auth ? "wrong token" : "this server needs Authorization: Bearer TOKEN");
        send_out(c);
        return;
    }
    char path[32];
    api_path(path, sizeof path, &c->req);
    if (!strcmp(path, "/api/health")) {
        /* On the loop: it reads no table, so nothing may keep it waiting. */
        serve_api_with(c, c->h->health_q);
        send_out(c);
        return;
    }
    c->is_gc = !strcmp(path, "/api/gc");
    if (c->is_gc && (strcmp(c->req.method, "POST") || !c->h->gc)) {
        json_error(c, 405, "bad_request", "POST /api/gc only (on a server that writes)");
        send_out(c);
        return;
    }
    /* removing runs is a writer's act: the read token does not admit it */
    if (c->is_gc && c->h->token && !hs_http_bearer_ok(c->req.auth, c->req.auth_len, c->h->token)) {
        json_error(c, 401, "unauthorized", "POST /api/gc needs the write token (--token)");
        send_out(c);
        return;
    }
    c->busy = 1;
    if (!strcmp(path, "/api/sql")) {
        if (lane_submit(c)) {
            c->busy = 0;
            c->keep_alive = 0;
            char msg[96];
            snprintf(msg, sizeof msg, "%d SQL queries are waiting already; try again later",
                     HS_HTTP_SQL_QUEUE);
            json_error(c, 503, "busy", msg);
            send_out(c);
        }
        return;
    }
    c->work.data = c;
    if (uv_queue_work(c->h->loop, &c->work, work_cb, after_work)) {
        c->busy = 0;
        fail_request(c, 503, "internal", "cannot queue the request");
    }
}

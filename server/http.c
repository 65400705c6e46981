/* hs_http: the JSON API of docs/api.md and the dashboard's static files.
 *
 * Each adopted client is an http_conn. The loop thread reads and parses one
 * request at a time with hs_http_parse_request() (bounded: HS_HTTP_HEAD_MAX
 * bytes of head, HS_HTTP_BODY_MAX of body, Content-Length only), checks the
 * bearer token, then hands the work
 * to libuv's thread pool: API requests run hs_api_handle() (queries/) on a
 * read-only connection taken from a small pool, static files are read there
 * too. The answer is written back from the loop thread; keep-alive is
 * honoured, and pipelined requests wait their turn in the input buffer.
 *
 * Lifetime: a conn is freed when its handle is closed AND no work of it is
 * queued (a work request cannot be taken back once running). hs_http_free()
 * closes every conn and frees h when the last one is gone.
 */
#include "hs_http.h"

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
#include "hs_queries.h"

#define HTTP_FILE_MAX (64u << 20)
#define HTTP_POOL_MAX 16

typedef struct http_conn http_conn;

struct hs_http {
    uv_loop_t *loop;
    char *db_path, *token, *web_root;
    pthread_mutex_t mu; /* guards pool and npool (thread-pool threads take and return) */
    hs_q *pool[HTTP_POOL_MAX];
    int npool;
    http_conn *conns;
    size_t nclients; /* adopted handles not yet closed */
    int closing;
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
};

static void conn_free(http_conn *c);
static void conn_parse(http_conn *c);

/* ---- pool of read-only connections ---------------------------------------- */

static hs_q *pool_take(hs_http *h)
{
    hs_q *q = NULL;
    pthread_mutex_lock(&h->mu);
    if (h->npool) q = h->pool[--h->npool];
    pthread_mutex_unlock(&h->mu);
    if (!q) {
        hs_qerr err;
        if (hs_q_open(&q, h->db_path, &err)) q = NULL;
    }
    return q;
}

static void pool_give(hs_http *h, hs_q *q)
{
    if (!q) return;
    pthread_mutex_lock(&h->mu);
    if (h->npool < HTTP_POOL_MAX) {
        h->pool[h->npool++] = q;
        q = NULL;
    }
    pthread_mutex_unlock(&h->mu);
    hs_q_free(q);
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
    if ((cfg->db_path && !(h->db_path = strdup(cfg->db_path))) ||
        (cfg->token && !(h->token = strdup(cfg->token))) ||
        (cfg->web_root && !(h->web_root = strdup(cfg->web_root)))) {
        free(h->db_path);
        free(h->token);
        free(h->web_root);
        pthread_mutex_destroy(&h->mu);
        free(h);
        return HS_ENOMEM;
    }
    *out = h;
    return 0;
}

static void http_destroy(hs_http *h)
{
    for (int i = 0; i < h->npool; i++) hs_q_free(h->pool[i]);
    pthread_mutex_destroy(&h->mu);
    free(h->db_path);
    free(h->token);
    free(h->web_root);
    free(h);
}

static void on_close(uv_handle_t *handle)
{
    http_conn *c = handle->data;
    free(handle);
    c->tcp = NULL;
    c->closed = 1;
    c->h->nclients--;
    if (!c->busy && !c->writing) conn_free(c);
}

static void conn_close(http_conn *c)
{
    if (c->closing) return;
    c->closing = 1;
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

static void serve_api(http_conn *c)
{
    hs_q *q = pool_take(c->h);
    hs_api_reply r;
    hs_api_handle(q, c->req.method, c->req.target, c->in + c->req.head_len, c->req.body_len, &r);
    pool_give(c->h, q);
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

static void work_cb(uv_work_t *w)
{
    http_conn *c = w->data;
    if (c->req.is_api)
        serve_api(c);
    else
        serve_static(c);
}

static void after_work(uv_work_t *w, int status)
{
    http_conn *c = w->data;
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

/* ---- parsing (loop thread) ------------------------------------------------------ */

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
        if (c->req.expect_continue && c->in_len == c->req.head_len && !c->reading) {
            static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
            uv_buf_t b = uv_buf_init((char *)cont, sizeof cont - 1);
            uv_try_write((uv_stream_t *)c->tcp, &b, 1);
        }
        read_start(c);
        return;
    }
    read_stop(c);
    c->req_len = c->req.head_len + c->req.body_len;
    if (c->req.is_api && c->h->token &&
        !hs_http_bearer_ok(c->req.auth, c->req.auth_len, c->h->token)) {
        json_error(c, 401, "unauthorized",
                   c->req.auth ? "wrong token" : "this server needs Authorization: Bearer TOKEN");
        send_out(c);
        return;
    }
    c->busy = 1;
    c->work.data = c;
    if (uv_queue_work(c->h->loop, &c->work, work_cb, after_work)) {
        c->busy = 0;
        fail_request(c, 503, "internal", "cannot queue the request");
    }
}

/* http_client: blocking HTTP/1.1 requests to heapstore-server. */
#include "http_client.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "hs_error.h"

#define ANSWER_MAX (1024u << 20)

int hs_http_url_parse(const char *url, char *host, size_t hostlen, int *port)
{
    const char *p = url;
    if (!strncmp(p, "tcp://", 6))
        p += 6;
    else if (!strncmp(p, "http://", 7))
        p += 7;
    else if (strstr(p, "://"))
        return HS_EINVAL;
    size_t n = strcspn(p, "/");
    char hp[512];
    if (!n || n >= sizeof hp) return HS_EINVAL;
    memcpy(hp, p, n);
    hp[n] = '\0';
    *port = 7459;
    char *colon;
    if (hp[0] == '[') { /* [v6]:port */
        char *rb = strchr(hp, ']');
        if (!rb) return HS_EINVAL;
        *rb = '\0';
        colon = rb[1] == ':' ? rb + 1 : NULL;
        memmove(hp, hp + 1, strlen(hp + 1) + 1);
    } else {
        colon = strrchr(hp, ':');
        if (colon) *colon = '\0';
    }
    if (colon) {
        char *end;
        long v = strtol(colon + 1, &end, 10);
        if (*end || v <= 0 || v > 65535) return HS_EINVAL;
        *port = (int)v;
    }
    if (!hp[0] || strlen(hp) >= hostlen) return HS_EINVAL;
    strcpy(host, hp);
    return 0;
}

static int connect_to(const char *host, int port, int ms, char *err, size_t errlen)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int gai = getaddrinfo(host, ps, &hints, &res);
    if (gai) {
        if (err) snprintf(err, errlen, "cannot resolve %s: %s", host, gai_strerror(gai));
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) continue;
        int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
        if (rc && errno == EINPROGRESS) {
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            int soerr = ETIMEDOUT;
            socklen_t sl = sizeof soerr;
            if (poll(&pfd, 1, ms) == 1) getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
            rc = soerr ? -1 : 0;
            errno = soerr;
        }
        if (!rc) {
            fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
            break;
        }
        close(fd);
        fd = -1;
    }
    if (fd < 0 && err)
        snprintf(err, errlen, "cannot connect to %s:%d: %s", host, port, strerror(errno));
    freeaddrinfo(res);
    return fd;
}

int hs_http_port_open(const char *host, int port, int ms)
{
    int fd = connect_to(host, port, ms, NULL, 0);
    if (fd < 0) return 0;
    close(fd);
    return 1;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* The request's head and body on fd. 0, or an HS_E code with err filled. */
static int send_request(int fd, const char *host, int port, const char *token, const char *method,
                        const char *target, const char *body, size_t body_len, char *err,
                        size_t errlen)
{
    char head[8192];
    int n =
        snprintf(head, sizeof head,
                 "%s %s HTTP/1.1\r\nHost: %s:%d\r\nUser-Agent: heapstore/%s\r\n"
                 "Accept: */*\r\nConnection: close\r\n%s%s%s",
                 method, target, host, port, HEAPSTORE_VERSION,
                 token ? "Authorization: Bearer " : "", token ? token : "", token ? "\r\n" : "");
    if (n < 0 || (size_t)n >= sizeof head - 128) {
        snprintf(err, errlen, "request too long");
        return HS_ETOOBIG;
    }
    if (body)
        n += snprintf(head + n, sizeof head - (size_t)n,
                      "Content-Type: application/json\r\nContent-Length: %zu\r\n", body_len);
    n += snprintf(head + n, sizeof head - (size_t)n, "\r\n");
    if (write_all(fd, head, (size_t)n) || (body && write_all(fd, body, body_len))) {
        snprintf(err, errlen, "cannot send to %s:%d: %s", host, port, strerror(errno));
        return HS_EIO;
    }
    return 0;
}

/* Everything fd sends until it closes (at most ANSWER_MAX bytes), NUL-
 * terminated, into *out (malloc'd) and *len. 0, or an HS_E code. */
static int read_answer(int fd, const char *host, int port, char **out, size_t *len, char *err,
                       size_t errlen)
{
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 1 >= cap) {
            if (cap >= ANSWER_MAX) break;
            char *np = realloc(buf, cap * 2);
            if (!np) break;
            buf = np;
            cap *= 2;
        }
        ssize_t r = recv(fd, buf + n, cap - n - 1, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            snprintf(err, errlen, "no answer from %s:%d: %s", host, port,
                     errno == EAGAIN ? "timed out" : strerror(errno));
            free(buf);
            return HS_EIO;
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    if (!buf) {
        snprintf(err, errlen, "out of memory");
        return HS_ENOMEM;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return 0;
}

/* The status, content type and body of the answer buf (len bytes, taken
 * over: out->body on success, freed on failure). */
static int parse_answer(hs_http_answer *out, char *buf, size_t len, const char *host, int port,
                        char *err, size_t errlen)
{
    char *hend = strstr(buf, "\r\n\r\n");
    if (!hend || strncmp(buf, "HTTP/1.", 7) || len < 12) {
        snprintf(err, errlen, "%s:%d did not answer in HTTP", host, port);
        free(buf);
        return HS_EPROTO;
    }
    out->status = atoi(buf + 9);
    size_t content_length = (size_t)-1;
    for (char *p = strstr(buf, "\r\n") + 2; p < hend;) {
        char *e = strstr(p, "\r\n");
        if (!strncasecmp(p, "Content-Type:", 13)) {
            char *v = p + 13;
            while (*v == ' ') v++;
            size_t vl = (size_t)(e - v);
            if (vl >= sizeof out->content_type) vl = sizeof out->content_type - 1;
            memcpy(out->content_type, v, vl);
            out->content_type[vl] = '\0';
        } else if (!strncasecmp(p, "Content-Length:", 15)) {
            content_length = strtoull(p + 15, NULL, 10);
        }
        p = e + 2;
    }
    size_t blen = len - (size_t)(hend + 4 - buf);
    if (content_length != (size_t)-1 && blen < content_length) {
        snprintf(err, errlen, "the answer from %s:%d was cut short", host, port);
        free(buf);
        return HS_EIO;
    }
    if (content_length != (size_t)-1) blen = content_length;
    memmove(buf, hend + 4, blen);
    buf[blen] = '\0';
    out->body = buf;
    out->len = blen;
    return 0;
}

/* The item of a comma-separated list that starts at *p, as host and port;
 * *p moves past it (and its comma). 0, or HS_EINVAL when it is malformed. */
static int list_item(const char **p, char *host, size_t hostlen, int *port)
{
    size_t n = strcspn(*p, ",");
    const char *b = *p, *e = *p + n;
    *p += (*p)[n] ? n + 1 : n;
    while (b < e && (*b == ' ' || *b == '\t')) b++;
    while (e > b && (e[-1] == ' ' || e[-1] == '\t')) e--;
    char item[512];
    if (e == b || (size_t)(e - b) >= sizeof item) return HS_EINVAL;
    memcpy(item, b, (size_t)(e - b));
    item[e - b] = '\0';
    return hs_http_url_parse(item, host, hostlen, port);
}

/* A connection to the first address of url's list that accepts one, in
 * the order listed; its host and port. -1 with err filled, or -2 when
 * some item of the list is malformed (nothing tried then). */
static int connect_listed(const char *url, char *host, size_t hostlen, int *port, char *err,
                          size_t errlen)
{
    const char *p = url;
    do {
        if (list_item(&p, host, hostlen, port)) {
            snprintf(err, errlen,
                     "HEAPSTORE_URL '%s' is not tcp://HOST:PORT, http://HOST:PORT or HOST:PORT "
                     "(or a list of them separated by commas)",
                     url);
            return -2;
        }
    } while (*p || p[-1] == ',');
    int fd = -1;
    for (p = url; fd < 0 && *p;) {
        list_item(&p, host, hostlen, port);
        fd = connect_to(host, *port, 5000, err, errlen);
    }
    return fd;
}

int hs_http_request(hs_http_answer *out, const char *url, const char *token, const char *method,
                    const char *target, const char *body, size_t body_len, int timeout_s, char *err,
                    size_t errlen)
{
    char host[256];
    int port;
    memset(out, 0, sizeof *out);
    int fd = connect_listed(url, host, sizeof host, &port, err, errlen);
    if (fd == -2) return HS_EINVAL;
    if (fd < 0) return HS_EIO;
    struct timeval tv = {.tv_sec = timeout_s};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    char *buf = NULL;
    size_t len = 0;
    int rc = send_request(fd, host, port, token, method, target, body, body_len, err, errlen);
    if (!rc) rc = read_answer(fd, host, port, &buf, &len, err, errlen);
    close(fd);
    return rc ? rc : parse_answer(out, buf, len, host, port, err, errlen);
}

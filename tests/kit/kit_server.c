/* kit_server: a child heapstore-server and HTTP (kit_server.h). */
#include "hs_testkit.h"

#include "hs_spawn.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <jansson.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* Servers still running when the test binary exits (a failed assertion
 * skips the test's own stop) are killed. */
static pid_t started[64];
static int nstarted;

static void kill_started(void)
{
    for (int i = 0; i < nstarted; i++)
        if (started[i] > 0 && kill(started[i], 0) == 0) {
            kill(started[i], SIGKILL);
            waitpid(started[i], NULL, 0);
        }
}

static void remember(pid_t pid)
{
    if (!nstarted) atexit(kill_started);
    if (nstarted < 64) started[nstarted++] = pid;
}

int tk_server_start(tk_server *s, const char *db, int port, const char *const *extra)
{
    char bin[600], listen[64];
    snprintf(bin, sizeof bin, "%s/bin/heapstore-server", tk_build_dir());
    snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
    snprintf(s->db, sizeof s->db, "%s", db);
    snprintf(s->log, sizeof s->log, "%s.log", db);
    const char *args[32] = {"--db", db, "--listen", listen};
    int n = 4;
    for (int i = 0; extra && extra[i] && n < 31; i++) args[n++] = extra[i];
    args[n] = NULL;
    /* Appends: a restarted server's lines follow the first one's. */
    int lf = open(s->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (lf < 0) return -1;
    hs_spawn_opts o = {.exe = bin, .args = args, .log_fd = lf, .timeout_ms = 60000};
    char why[256];
    pid_t pid;
    int rc = hs_spawn_server(&o, &pid, &s->port, why, sizeof why);
    close(lf);
    s->pid = rc ? 0 : pid;
    if (rc) {
        fprintf(stderr, "testkit: %s (log %s)\n", why, s->log);
        return -1;
    }
    remember(pid);
    return 0;
}

int tk_server_stop(tk_server *s, int sig)
{
    if (!s->pid) return -1;
    kill(s->pid, sig);
    int st = 0;
    waitpid(s->pid, &st, 0);
    s->pid = 0;
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    return 128 + WTERMSIG(st);
}

int tk_log_contains(const tk_server *s, const char *text)
{
    return tk_file_contains(s->log, text);
}

int tk_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int port = -1;
    if (fd >= 0 && !bind(fd, (struct sockaddr *)&a, sizeof a) &&
        !getsockname(fd, (struct sockaddr *)&a, &len))
        port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    return port;
}

/* ---- HTTP -------------------------------------------------------------- */

char *tk_exchange(int port, const char *req, size_t len, int timeout_ms)
{
    int fd = tk_connect(port);
    if (fd < 0) return NULL;
    size_t off = 0;
    while (off < len) {
        ssize_t w = send(fd, req + off, len - off, MSG_NOSIGNAL);
        if (w <= 0) break; /* the server may answer (and close) before all is sent */
        off += (size_t)w;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    struct pollfd p = {.fd = fd, .events = POLLIN};
    while (buf && poll(&p, 1, timeout_ms) == 1) {
        if (n + 1 >= cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) break;
            buf = nb;
        }
        ssize_t r = recv(fd, buf + n, cap - n - 1, 0);
        if (r <= 0) break;
        n += (size_t)r;
    }
    close(fd);
    if (buf) buf[n] = '\0';
    return buf;
}

int tk_http_status(const char *text)
{
    if (!text || strncmp(text, "HTTP/1.1 ", 9)) return -1;
    return atoi(text + 9);
}

int tk_http_header(const char *text, const char *name, char *out, size_t len)
{
    const char *end = strstr(text, "\r\n\r\n");
    size_t nl = strlen(name);
    for (const char *p = strstr(text, "\r\n"); p && p < end; p = strstr(p + 2, "\r\n")) {
        const char *h = p + 2;
        if (!strncasecmp(h, name, nl) && h[nl] == ':') {
            h += nl + 1;
            while (*h == ' ') h++;
            const char *e = strstr(h, "\r\n");
            size_t n = (size_t)(e - h);
            if (n >= len) n = len - 1;
            memcpy(out, h, n);
            out[n] = '\0';
            return 1;
        }
    }
    return 0;
}

const char *tk_http_body(const char *text)
{
    const char *e = text ? strstr(text, "\r\n\r\n") : NULL;
    return e ? e + 4 : "";
}

int tk_http(int port, const char *method, const char *target, const char *headers, const char *body,
            char **out_body)
{
    size_t blen = body ? strlen(body) : 0;
    size_t cap = blen + strlen(method) + strlen(target) + (headers ? strlen(headers) : 0) + 256;
    char *req = malloc(cap);
    int n = snprintf(req, cap, "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n%s", method,
                     target, headers ? headers : "");
    if (body) n += snprintf(req + n, cap - (size_t)n, "Content-Length: %zu\r\n", blen);
    n += snprintf(req + n, cap - (size_t)n, "\r\n");
    if (body) memcpy(req + n, body, blen);
    char *a = tk_exchange(port, req, (size_t)n + blen, 60000);
    free(req);
    int status = a ? tk_http_status(a) : -1;
    if (out_body) *out_body = strdup(a && tk_http_body(a) ? tk_http_body(a) : "");
    free(a);
    return status;
}

json_t *tk_api_json(int port, const char *path)
{
    char *body = NULL;
    int status = tk_http(port, "GET", path, NULL, NULL, &body);
    json_error_t je;
    json_t *j = status == 200 && body ? json_loads(body, 0, &je) : NULL;
    if (!j) fprintf(stderr, "GET %s: %d %.300s\n", path, status, body ? body : "");
    free(body);
    assert_non_null(j);
    return j;
}

long long tk_rows_sum(const json_t *j, const char *key, const char *name, const char *field)
{
    long long v = 0;
    size_t i;
    json_t *row;
    json_array_foreach(json_object_get(j, key), i, row)
    {
        const char *n = json_string_value(json_object_get(row, "name"));
        if (n && !strcmp(n, name)) v += json_integer_value(json_object_get(row, field));
    }
    return v;
}

/* qkit: servers, HTTP exchanges and CLI runs for the tests of queries/. */
#include "qkit.h"

#include "hs_spawn.h"

#include <arpa/inet.h>
#include <errno.h>
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
#include <time.h>
#include <unistd.h>

void qk_bin(char *out, size_t len, const char *name)
{
    const char *b = getenv("HS_BUILD_DIR");
    snprintf(out, len, "%s/bin/%s", b && *b ? b : ".", name);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int qk_server_start(qk_server *s, const char *db, const char *const *extra)
{
    char exe[512];
    qk_bin(exe, sizeof exe, "heapstore-server");
    snprintf(s->log, sizeof s->log, "%s.server.log", db);
    s->port = 0;
    s->pid = 0;
    const char *args[32] = {"--db", db, "--listen", "127.0.0.1:0"};
    int n = 4;
    for (int i = 0; extra && extra[i] && n < 31; i++) args[n++] = extra[i];
    args[n] = NULL;
    int fd = open(s->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    hs_spawn_opts o = {.exe = exe, .args = args, .log_fd = fd, .timeout_ms = 10000};
    char why[256];
    int rc = hs_spawn_server(&o, &s->pid, &s->port, why, sizeof why);
    close(fd);
    if (rc) fprintf(stderr, "qkit: the server did not start: %s (log %s)\n", why, s->log);
    return rc;
}

void qk_server_stop(qk_server *s)
{
    if (s->pid <= 0) return;
    kill(s->pid, SIGTERM);
    for (int i = 0; i < 400; i++) {
        if (waitpid(s->pid, NULL, WNOHANG) == s->pid) goto done;
        sleep_ms(25);
    }
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
done:
    unlink(s->log);
    s->pid = 0;
}

int qk_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a)) {
        if (fd >= 0) close(fd);
        return -1;
    }
    return fd;
}

char *qk_exchange(int port, const char *req, size_t len, int timeout_ms)
{
    int fd = qk_connect(port);
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

int qk_status(const char *text)
{
    if (!text || strncmp(text, "HTTP/1.1 ", 9)) return -1;
    return atoi(text + 9);
}

int qk_header(const char *text, const char *name, char *out, size_t len)
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

const char *qk_body(const char *text)
{
    const char *e = text ? strstr(text, "\r\n\r\n") : NULL;
    return e ? e + 4 : "";
}

static char *slurp(int fd)
{
    size_t cap = 4096, n = 0;
    char *b = malloc(cap);
    while (b) {
        if (n + 1 >= cap) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) break;
            b = nb;
        }
        ssize_t r = read(fd, b + n, cap - n - 1);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        n += (size_t)r;
    }
    if (b) b[n] = '\0';
    return b;
}

int qk_run(qk_out *o, const char *const *argv, const char *const *env)
{
    char outp[] = "/tmp/qk-out-XXXXXX", errp[] = "/tmp/qk-err-XXXXXX";
    int of = mkstemp(outp), ef = mkstemp(errp);
    memset(o, 0, sizeof *o);
    if (of < 0 || ef < 0) return -1;
    unlink(outp);
    unlink(errp);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(of, 1);
        dup2(ef, 2);
        for (int i = 0; env && env[i]; i++) {
            char kv[4096];
            snprintf(kv, sizeof kv, "%s", env[i]);
            char *eq = strchr(kv, '=');
            if (!eq) continue;
            *eq = '\0';
            if (eq[1])
                setenv(kv, eq + 1, 1);
            else
                unsetenv(kv);
        }
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    o->code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    lseek(of, 0, SEEK_SET);
    lseek(ef, 0, SEEK_SET);
    o->out = slurp(of);
    o->err = slurp(ef);
    close(of);
    close(ef);
    return 0;
}

void qk_out_free(qk_out *o)
{
    free(o->out);
    free(o->err);
    o->out = o->err = NULL;
}

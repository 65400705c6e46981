/* hs_spawn: start heapstore-server and wait for its readiness line. */
#include "hs_spawn.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ARGS_MAX 64

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void reap(pid_t pid, int kill_first)
{
    if (kill_first) kill(pid, SIGKILL);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
}

/* Reads the readiness line: 1 with *port, 0 at end of file, -1 on time out
 * or a malformed line. */
static int read_ready(int fd, int timeout_ms, int *port)
{
    char line[32];
    size_t n = 0;
    int64_t deadline = now_ms() + timeout_ms;
    for (;;) {
        int64_t left = deadline - now_ms();
        if (left <= 0) return -1;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = poll(&p, 1, (int)left);
        if (r < 0 && errno != EINTR) return -1;
        if (r <= 0) continue;
        ssize_t got = read(fd, line + n, sizeof line - 1 - n);
        if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (got <= 0) return n ? -1 : 0;
        n += (size_t)got;
        line[n] = 0;
        char *nl = strchr(line, '\n');
        if (!nl) {
            if (n == sizeof line - 1) return -1;
            continue;
        }
        char *end;
        long v = strtol(line, &end, 10);
        if (end != nl || v <= 0 || v > 65535) return -1;
        *port = (int)v;
        return 1;
    }
}

int hs_spawn_server(const hs_spawn_opts *o, pid_t *pid, int *port, char *err, size_t errlen)
{
    assert(o && o->exe && pid && port);
    *pid = 0;
    const char *argv[ARGS_MAX + 4];
    char fdarg[16];
    size_t n = 0;
    argv[n++] = o->exe;
    for (size_t i = 0; o->args && o->args[i]; i++) {
        if (n >= ARGS_MAX) {
            snprintf(err, errlen, "too many server arguments");
            return -1;
        }
        argv[n++] = o->args[i];
    }
    int fds[2];
    if (pipe2(fds, O_CLOEXEC)) {
        snprintf(err, errlen, "cannot create a pipe: %s", strerror(errno));
        return -1;
    }
    snprintf(fdarg, sizeof fdarg, "%d", fds[1]);
    argv[n++] = "--ready-fd";
    argv[n++] = fdarg;
    argv[n] = NULL;
    pid_t child = fork();
    if (child < 0) {
        snprintf(err, errlen, "cannot fork: %s", strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (child == 0) {
        if (o->log_fd >= 0) dup2(o->log_fd, 2);
        if (o->quiet) {
            int dn = open("/dev/null", O_RDWR);
            if (dn >= 0) {
                dup2(dn, 0);
                dup2(dn, 1);
            }
        }
        if (o->own_group) setpgid(0, 0);
        if (o->no_preload) unsetenv("LD_PRELOAD");
        fcntl(fds[1], F_SETFD, 0); /* the one descriptor the server inherits */
        execv(o->exe, (char *const *)argv);
        dprintf(2, "cannot run %s: %s\n", o->exe, strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    int r = read_ready(fds[0], o->timeout_ms > 0 ? o->timeout_ms : 10000, port);
    close(fds[0]);
    if (r == 1) {
        *pid = child;
        return 0;
    }
    if (r == 0) {
        /* it closed the pipe: normally by exiting; bounded all the same */
        int st = 0;
        int64_t until = now_ms() + 2000;
        while (waitpid(child, &st, WNOHANG) != child) {
            if (now_ms() >= until) {
                reap(child, 1);
                snprintf(err, errlen, "the server closed its readiness pipe without a port");
                return -1;
            }
            struct timespec ts = {0, 10 * 1000000L};
            nanosleep(&ts, NULL);
        }
        if (WIFEXITED(st))
            snprintf(err, errlen, "the server exited with code %d before it was ready",
                     WEXITSTATUS(st));
        else
            snprintf(err, errlen, "the server was killed by signal %d before it was ready",
                     WIFSIGNALED(st) ? WTERMSIG(st) : 0);
        return -1;
    }
    reap(child, 1);
    snprintf(err, errlen, "the server was not ready within %d ms",
             o->timeout_ms > 0 ? o->timeout_ms : 10000);
    return -1;
}

void hs_spawn_say_ready(int fd, int port)
{
    if (fd < 0) return;
    char line[16];
    int len = snprintf(line, sizeof line, "%d\n", port);
    ssize_t w;
    do w = write(fd, line, (size_t)len);
    while (w < 0 && errno == EINTR);
    close(fd);
}

/* rel_kit: helpers of the reliability tests (see rel_kit.h). */
#include "rel_kit.h"

#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "hs_testkit.h"
#include "qkit.h"

static const char *build_dir(void)
{
    const char *b = getenv("HS_BUILD_DIR");
    return b ? b : "build";
}

int rk_spawn(rk_proc *p, const char *const *args, const char *const *env, int preload,
             const char *out_path)
{
    char prog[600], lib[600];
    snprintf(prog, sizeof prog, "%s/tests/wl_rel", build_dir());
    snprintf(lib, sizeof lib, "%s/lib/libheapstore.so", build_dir());
    snprintf(p->out, sizeof p->out, "%s", out_path);
    const char *argv[32] = {prog};
    int n = 1;
    for (int i = 0; args[i] && n < 31; i++) argv[n++] = args[i];
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        for (int i = 0; env && env[i]; i++) putenv((char *)env[i]);
        if (preload) setenv("LD_PRELOAD", lib, 1);
        signal(SIGPIPE, SIG_DFL);
        execv(prog, (char *const *)argv);
        _exit(127);
    }
    p->pid = pid;
    return 0;
}

int rk_wait(rk_proc *p, int timeout_ms)
{
    uint64_t deadline = tk_now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        int st;
        pid_t r = waitpid(p->pid, &st, WNOHANG);
        if (r == p->pid) {
            p->pid = 0;
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        if (tk_now_ms() > deadline) {
            kill(p->pid, SIGKILL);
            waitpid(p->pid, NULL, 0);
            p->pid = 0;
            return -1;
        }
        usleep(10000);
    }
}

char *rk_output(const rk_proc *p)
{
    FILE *f = fopen(p->out, "r");
    char *s = calloc(1, 1 << 16);
    if (f && s) {
        size_t n = fread(s, 1, (1 << 16) - 1, f);
        s[n] = '\0';
    }
    if (f) fclose(f);
    return s;
}

static int64_t vq(const char *db, const char *fmt, va_list ap)
{
    char *sql = sqlite3_vmprintf(fmt, ap);
    sqlite3 *h;
    if (sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        fprintf(stderr, "cannot open %s\n", db);
        fail();
    }
    sqlite3_busy_timeout(h, 10000);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(h, sql, -1, &st, NULL) != SQLITE_OK) {
        fprintf(stderr, "SQL error: %s in %s\n", sqlite3_errmsg(h), sql);
        fail();
    }
    int rc = sqlite3_step(st);
    int64_t v = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : INT64_MIN;
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
        fprintf(stderr, "SQL error: %s in %s\n", sqlite3_errmsg(h), sql);
        fail();
    }
    sqlite3_finalize(st);
    sqlite3_close(h);
    sqlite3_free(sql);
    return v;
}

int64_t rk_q(const char *db, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int64_t v = vq(db, fmt, ap);
    va_end(ap);
    return v;
}

int64_t rk_poll(const char *db, int64_t want, int timeout_ms, const char *fmt, ...)
{
    uint64_t deadline = tk_now_ms() + (uint64_t)timeout_ms;
    int64_t v;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        v = rk_file_size(db) ? vq(db, fmt, ap) : INT64_MIN;
        va_end(ap);
        if ((v != INT64_MIN && v >= want) || tk_now_ms() > deadline) return v;
        usleep(20000);
    }
}

int rk_wait_text(const char *path, const char *text, int timeout_ms)
{
    uint64_t deadline = tk_now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        rk_proc p;
        snprintf(p.out, sizeof p.out, "%s", path);
        char *s = rk_output(&p);
        int found = s && strstr(s, text);
        free(s);
        if (found) return 1;
        if (tk_now_ms() > deadline) return 0;
        usleep(20000);
    }
}

int rk_http(int port, const char *method, const char *target, const char *headers, const char *body,
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
    char *a = qk_exchange(port, req, (size_t)n + blen, 60000);
    free(req);
    int status = a ? qk_status(a) : -1;
    if (out_body) *out_body = strdup(a && qk_body(a) ? qk_body(a) : "");
    free(a);
    return status;
}

int rk_prlimit(pid_t pid, int res, uint64_t soft, uint64_t hard)
{
    struct rlimit old, rl = {soft, hard};
    if (prlimit(pid, (__rlimit_resource_t)res, NULL, &old)) return -1;
    if (hard == UINT64_MAX) rl.rlim_max = old.rlim_max;
    if (soft == UINT64_MAX) rl.rlim_cur = rl.rlim_max;
    return prlimit(pid, (__rlimit_resource_t)res, &rl, NULL);
}

uint64_t rk_file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
}

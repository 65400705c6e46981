/* hs_testrun: fork/exec with the collector preloaded (see hs_testrun.h). */
#include "hs_testrun.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

static char dir[256];

const char *hs_testrun_dir(void)
{
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/hs-collector-test.XXXXXX");
        if (!mkdtemp(dir)) abort();
    }
    return dir;
}

static const char *join(const char *var, const char *rel)
{
    static char buf[8][4096];
    static int k;
    const char *base = getenv(var);
    char *b = buf[k++ % 8];
    snprintf(b, sizeof buf[0], "%s/%s", base ? base : ".", rel);
    return b;
}

const char *hs_build_path(const char *rel)
{
    return join("HS_BUILD_DIR", rel);
}

const char *hs_source_path(const char *rel)
{
    return join("HS_SOURCE_DIR", rel);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return strdup("");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)(n > 0 ? n : 0) + 1);
    size_t got = fread(s, 1, n > 0 ? (size_t)n : 0, f);
    s[got] = 0;
    fclose(f);
    return s;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

extern char **environ;

/* 1 if the NAME=VALUE strings a and b set the same name. */
static int same_name(const char *a, const char *b)
{
    size_t n = strcspn(a, "=");
    return strncmp(a, b, n) == 0 && b[n] == '=';
}

/* Appends NAME=VALUE to envp[0..*k), replacing an entry of the same name. */
static void env_set(char **envp, size_t *k, char *entry)
{
    size_t w = 0;
    for (size_t i = 0; i < *k; i++)
        if (!same_name(entry, envp[i])) envp[w++] = envp[i];
    envp[w++] = entry;
    *k = w;
}

int hs_testrun_exec(hs_testrun *r, const char *const argv[], const char *const env[], int preload,
                    int timeout_s)
{
    static int serial;
    memset(r, 0, sizeof *r);
    char out[512], err[512];
    snprintf(out, sizeof out, "%s/run%d.out", hs_testrun_dir(), serial);
    snprintf(err, sizeof err, "%s/run%d.err", hs_testrun_dir(), serial++);

    /* The program's environment is built here, before fork: the test may
     * have threads (a fake server), and a child of a threaded process may
     * only call async-signal-safe functions until it execs (another thread
     * may have held the allocator's lock at the fork: setenv in the child
     * hung, caught under ASan). The test's own sanitizer settings must not
     * leak into the program, nor a run of this process. */
    size_t n = 0, k = 0;
    while (environ[n]) n++;
    for (size_t i = 0; env && env[i]; i++) n++;
    char **envp = calloc(n + 8, sizeof *envp);
    if (!envp) return -1;
    for (size_t i = 0; environ[i]; i++)
        if (strncmp(environ[i], "LD_PRELOAD=", 11) &&
            strncmp(environ[i], "HEAPSTORE_PARENT_RUN=", 21))
            envp[k++] = environ[i];
    static char pre[4200];
    if (preload) {
        int m = snprintf(pre, sizeof pre, "LD_PRELOAD=%s", hs_build_path("lib/libheapstore.so"));
        /* The test allocator right after us: it is what we forward to. */
        if (preload == HS_PRELOAD_TEST_ALLOCATOR)
            m += snprintf(pre + m, sizeof pre - (size_t)m, ":%s",
                          hs_build_path("tests/libwl_alloc.so"));
#ifdef HS_TEST_ASAN_RUNTIME
        /* The ASan runtime after us, so that (without the test allocator)
         * the "real" malloc we forward to is ASan's; libstdc++ before it, so
         * that operator new stays libstdc++'s, which calls malloc, rather
         * than the runtime's, which would bypass us. */
        snprintf(pre + m, sizeof pre - (size_t)m, ":libstdc++.so.6:%s", HS_TEST_ASAN_RUNTIME);
        env_set(
            envp, &k,
            "ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0:abort_on_error=0:exitcode=97");
#endif
        env_set(envp, &k, pre);
        env_set(envp, &k, "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:exitcode=98");
    }
    for (size_t i = 0; env && env[i]; i++) env_set(envp, &k, (char *)env[i]);
    envp[k] = NULL;

    double t0 = now_s();
    pid_t pid = fork();
    if (pid < 0) {
        free(envp);
        return -1;
    }
    if (pid > 0) setpgid(pid, pid); /* either side may get there first */
    if (pid == 0) {
        int fo = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int fe = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fo, 1);
        dup2(fe, 2);
        setpgid(0, 0); /* so that a timeout also ends the program's children */
        if (strchr(argv[0], '/'))
            execve(argv[0], (char *const *)argv, envp);
        else
            execvpe(argv[0], (char *const *)argv, envp);
        static const char msg[] = "hs_testrun: exec failed\n";
        if (write(2, msg, sizeof msg - 1) < 0) {
        }
        _exit(127);
    }
    free(envp);
    int st = 0;
    for (;;) {
        struct rusage ru;
        pid_t w = wait4(pid, &st, WNOHANG, &ru);
        if (w == pid) r->maxrss_kb = ru.ru_maxrss;
        if (w == pid) break;
        if (now_s() - t0 > timeout_s) {
            /* A hang is a failure; say where every thread stood (to the
             * test's stderr) before ending it. */
            char cmd[512];
            snprintf(cmd, sizeof cmd,
                     "for p in $(pgrep -g %d); do echo \"== process $p\"; "
                     "gdb -p $p -batch -ex 'thread apply all bt 30' </dev/null 2>/dev/null; "
                     "done 1>&2",
                     (int)pid);
            fprintf(stderr, "hs_testrun: pid %d timed out; its process group's threads:\n",
                    (int)pid);
            if (system(cmd) != 0) fprintf(stderr, "hs_testrun: (no gdb backtrace)\n");
            kill(-pid, SIGKILL);
            waitpid(pid, &st, 0);
            r->timed_out = 1;
            break;
        }
        usleep(2000);
    }
    r->seconds = now_s() - t0;
    r->exited = WIFEXITED(st);
    r->status = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? WTERMSIG(st) : -1;
    r->out = slurp(out);
    r->err = slurp(err);
    return 0;
}

void hs_testrun_free(hs_testrun *r)
{
    free(r->out);
    free(r->err);
    r->out = r->err = NULL;
}

int hs_testrun_clean(const hs_testrun *r)
{
    return !strstr(r->err, "AddressSanitizer") && !strstr(r->err, "runtime error:") &&
           !strstr(r->err, "LeakSanitizer");
}

void hs_testrun_expect_ok(const hs_testrun *r)
{
    if (!r->exited || r->status != 0 || !hs_testrun_clean(r))
        fprintf(stderr, "program failed (exited=%d status=%d timeout=%d)\nstderr:\n%.4000s\n",
                r->exited, r->status, r->timed_out, r->err);
    assert_false(r->timed_out);
    assert_true(r->exited);
    assert_int_equal(r->status, 0);
    assert_true(hs_testrun_clean(r));
}

char *hs_testrun_env(const char *fmt, ...)
{
    static char buf[16][600];
    static int k;
    char *b = buf[k++ % 16];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b, sizeof buf[0], fmt, ap);
    va_end(ap);
    return b;
}

int hs_testrun_pyenv(unsigned lo, unsigned hi,
                     void (*fn)(const char *py, const char *version, unsigned minor, void *ctx),
                     void *ctx)
{
    const char *root = getenv("PYENV_ROOT");
    char vdir[512];
    snprintf(vdir, sizeof vdir, "%s/versions", root ? root : "/root/.pyenv");
    DIR *dp = opendir(vdir);
    if (!dp) {
        fprintf(stderr, "no pyenv versions in %s: nothing to test\n", vdir);
        return 0;
    }
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dp))) {
        unsigned major, minor;
        if (sscanf(e->d_name, "%u.%u", &major, &minor) != 2 || major != 3 || minor < lo ||
            minor > hi)
            continue;
        char py[1024];
        snprintf(py, sizeof py, "%s/%s/bin/python%u.%u", vdir, e->d_name, major, minor);
        if (access(py, X_OK) != 0) continue;
        fn(py, e->d_name, minor, ctx);
        n++;
    }
    closedir(dp);
    fprintf(stderr, "%d pyenv versions tested\n", n);
    return n;
}

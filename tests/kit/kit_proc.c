/* kit_proc: trees, files and programs of a test (kit_proc.h). */
#include "hs_testkit.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <assert.h>
#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
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
#include <jansson.h>

/* ---- trees and files --------------------------------------------------- */

const char *tk_build_dir(void)
{
    const char *b = getenv("HS_BUILD_DIR");
    return b && *b ? b : "build";
}

static const char *join(const char *base, const char *rel)
{
    static char buf[8][4096];
    static int k;
    char *b = buf[k++ % 8];
    snprintf(b, sizeof buf[0], "%s/%s", base, rel);
    return b;
}

const char *tk_build_path(const char *rel)
{
    return join(tk_build_dir(), rel);
}

const char *tk_source_path(const char *rel)
{
    const char *s = getenv("HS_SOURCE_DIR");
    return join(s && *s ? s : ".", rel);
}

void tk_tmpdir(char *out, size_t len, const char *name)
{
    const char *base = getenv("HS_BUILD_DIR");
    char dir[400];
    snprintf(dir, sizeof dir, "%s/tests/tmp", base ? base : "/tmp");
    mkdir(dir, 0700);
    snprintf(out, len, "%s/%s.%d", dir, name, (int)getpid());
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", out);
    if (system(cmd)) { /* best effort */
    }
    mkdir(out, 0700);
}

const char *tk_scratch_dir(void)
{
    static char dir[256];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/hs-test.XXXXXX");
        if (!mkdtemp(dir)) abort();
    }
    return dir;
}

uint64_t tk_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void tk_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) && errno == EINTR) {
    }
}

char *tk_read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return strdup("");
    size_t cap = 4096, n = 0;
    char *s = malloc(cap);
    for (size_t r; s && (r = fread(s + n, 1, cap - n - 1, f)) > 0;) {
        n += r;
        if (n + 1 == cap) {
            char *t = realloc(s, cap *= 2);
            if (!t) abort();
            s = t;
        }
    }
    fclose(f);
    if (!s) abort();
    s[n] = '\0';
    return s;
}

uint64_t tk_file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
}

int tk_file_contains(const char *path, const char *text)
{
    char *s = tk_read_file(path);
    int found = strstr(s, text) != NULL;
    free(s);
    return found;
}

int tk_wait_text(const char *path, const char *text, int timeout_ms)
{
    uint64_t deadline = tk_now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        if (tk_file_contains(path, text)) return 1;
        if (tk_now_ms() > deadline) return 0;
        tk_sleep_ms(20);
    }
}

/* ---- programs ---------------------------------------------------------- */

extern char **environ;

/* 1 if the NAME=VALUE strings a and b set the same name. */
static int same_name(const char *a, const char *b)
{
    size_t n = strcspn(a, "=");
    return strncmp(a, b, n) == 0 && b[n] == '=';
}

/* Sets NAME=VALUE in envp[0..*k), replacing an entry of the same name;
 * "NAME=" removes it. */
static void env_set(char **envp, size_t *k, const char *entry)
{
    size_t w = 0;
    for (size_t i = 0; i < *k; i++)
        if (!same_name(entry, envp[i])) envp[w++] = envp[i];
    const char *eq = strchr(entry, '=');
    if (eq && eq[1]) envp[w++] = (char *)entry;
    *k = w;
}

/* The LD_PRELOAD entry for preload, in pre. */
static void preload_entry(char *pre, size_t len, int preload)
{
    const char *other = getenv("HS_TEST_COLLECTOR");
    int m = snprintf(pre, len, "LD_PRELOAD=%s",
                     other && *other ? other : tk_build_path("lib/libheapstore.so"));
    /* The test allocator right after us: it is what we forward to. */
    if (preload == TK_PRELOAD_TEST_ALLOCATOR)
        m += snprintf(pre + m, len - (size_t)m, ":%s", tk_build_path("tests/libwl_alloc.so"));
#ifdef HS_TEST_ASAN_RUNTIME
    /* The ASan runtime after us, so that (without the test allocator) the
     * "real" malloc we forward to is ASan's; libstdc++ before it, so that
     * operator new stays libstdc++'s, which calls malloc, rather than the
     * runtime's, which would bypass us. */
    snprintf(pre + m, len - (size_t)m, ":libstdc++.so.6:%s", HS_TEST_ASAN_RUNTIME);
#else
    (void)m;
#endif
}

/* The program's environment (see kit_proc.h), malloc'ed; pre holds the
 * LD_PRELOAD entry it may point to. The test's own sanitizer settings must
 * not leak into the program, nor a run of this process. */
static char **program_env(const char *const env[], int preload, char *pre, size_t len)
{
    size_t n = 0, k = 0;
    while (environ[n]) n++;
    for (size_t i = 0; env && env[i]; i++) n++;
    char **envp = calloc(n + 8, sizeof *envp);
    if (!envp) return NULL;
    for (size_t i = 0; environ[i]; i++)
        if (strncmp(environ[i], "LD_PRELOAD=", 11) &&
            strncmp(environ[i], "HEAPSTORE_PARENT_RUN=", 21))
            envp[k++] = environ[i];
    if (preload) {
        preload_entry(pre, len, preload);
#ifdef HS_TEST_ASAN_RUNTIME
        env_set(
            envp, &k,
            "ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0:abort_on_error=0:exitcode=97");
#endif
        env_set(envp, &k, pre);
        env_set(envp, &k, "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:exitcode=98");
    }
    for (size_t i = 0; env && env[i]; i++) env_set(envp, &k, env[i]);
    envp[k] = NULL;
    return envp;
}

/* The child's side of tk_spawn: only async-signal-safe calls. */
static void child(const char *const argv[], char **envp, const char *out, const char *err)
{
    int fo = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int fe = err ? open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644) : fo;
    dup2(fo, 1);
    dup2(fe, 2);
    setpgid(0, 0); /* so that a timeout also ends the program's children */
    signal(SIGPIPE, SIG_DFL);
    if (strchr(argv[0], '/'))
        execve(argv[0], (char *const *)argv, envp);
    else
        execvpe(argv[0], (char *const *)argv, envp);
    static const char msg[] = "tk_spawn: exec failed\n";
    if (write(2, msg, sizeof msg - 1) < 0) {
    }
    _exit(127);
}

int tk_spawn(tk_proc *p, const char *const argv[], const char *const env[], int preload,
             const char *out_path, const char *err_path)
{
    static char pre[4200];
    char **envp = program_env(env, preload, pre, sizeof pre);
    if (!envp) return -1;
    snprintf(p->out, sizeof p->out, "%s", out_path);
    pid_t pid = fork();
    if (pid == 0) child(argv, envp, out_path, err_path);
    free(envp);
    if (pid < 0) return -1;
    setpgid(pid, pid); /* either side may get there first */
    p->pid = pid;
    return 0;
}

/* Says where every thread of the process group of pid stood (on stderr),
 * then kills the group. */
static void kill_hung(pid_t pid)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "for p in $(pgrep -g %d); do echo \"== process $p\"; "
             "gdb -p $p -batch -ex 'thread apply all bt 30' </dev/null 2>/dev/null; "
             "done 1>&2",
             (int)pid);
    fprintf(stderr, "tk_wait: pid %d timed out; its process group's threads:\n", (int)pid);
    if (system(cmd) != 0) fprintf(stderr, "tk_wait: (no gdb backtrace)\n");
    kill(-pid, SIGKILL);
}

/* Waits for pid at most timeout_ms (<= 0: no bound): 0 with its wait
 * status and peak RSS, or -1 when it was killed for outliving it. */
static int wait_bounded(pid_t pid, int timeout_ms, int *st, long *maxrss_kb)
{
    uint64_t deadline = tk_now_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0);
    for (;;) {
        struct rusage ru;
        if (wait4(pid, st, WNOHANG, &ru) == pid) {
            *maxrss_kb = ru.ru_maxrss;
            return 0;
        }
        if (timeout_ms > 0 && tk_now_ms() > deadline) {
            kill_hung(pid);
            waitpid(pid, st, 0);
            return -1;
        }
        usleep(2000);
    }
}

static int exit_code(int st)
{
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int tk_wait(tk_proc *p, int timeout_ms)
{
    int st = 0;
    long rss;
    int rc = wait_bounded(p->pid, timeout_ms, &st, &rss);
    p->pid = 0;
    return rc ? -1 : exit_code(st);
}

int tk_run(tk_out *r, const char *const argv[], const char *const env[], int preload, int timeout_s)
{
    static int serial;
    memset(r, 0, sizeof *r);
    char out[512], err[512];
    snprintf(out, sizeof out, "%s/run%d.out", tk_scratch_dir(), serial);
    snprintf(err, sizeof err, "%s/run%d.err", tk_scratch_dir(), serial++);
    uint64_t t0 = tk_now_ms();
    tk_proc p;
    if (tk_spawn(&p, argv, env, preload, out, err)) return -1;
    int st = 0;
    r->timed_out = wait_bounded(p.pid, timeout_s * 1000, &st, &r->maxrss_kb) != 0;
    if (r->timed_out) r->maxrss_kb = 0;
    r->seconds = (double)(tk_now_ms() - t0) / 1000.0;
    r->exited = WIFEXITED(st);
    r->status = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? WTERMSIG(st) : -1;
    r->code = exit_code(st);
    r->out = tk_read_file(out);
    r->err = tk_read_file(err);
    unlink(out);
    unlink(err);
    return 0;
}

int tk_cli(tk_out *r, const char *const args[], const char *const env[])
{
    const char *argv[64] = {tk_build_path("bin/heapstore")};
    size_t n = 1;
    while (args[n - 1]) {
        assert(n < 63);
        argv[n] = args[n - 1];
        n++;
    }
    argv[n] = NULL;
    return tk_run(r, argv, env, TK_PRELOAD_NONE, 0);
}

json_t *tk_cli_json(const char *const args[], const char *const env[])
{
    tk_out o;
    assert_int_equal(tk_cli(&o, args, env), 0);
    if (o.code) fprintf(stderr, "heapstore %s: %s\n", args[0], o.err);
    assert_int_equal(o.code, 0);
    json_error_t e;
    json_t *j = json_loads(o.out, 0, &e);
    assert_non_null(j);
    tk_out_free(&o);
    return j;
}

void tk_out_free(tk_out *r)
{
    free(r->out);
    free(r->err);
    r->out = r->err = NULL;
}

int tk_clean(const tk_out *r)
{
    return !strstr(r->err, "AddressSanitizer") && !strstr(r->err, "runtime error:") &&
           !strstr(r->err, "LeakSanitizer");
}

void tk_expect_ok(const tk_out *r)
{
    if (!r->exited || r->status != 0 || !tk_clean(r))
        fprintf(stderr, "program failed (exited=%d status=%d timeout=%d)\nstderr:\n%.4000s\n",
                r->exited, r->status, r->timed_out, r->err);
    assert_false(r->timed_out);
    assert_true(r->exited);
    assert_int_equal(r->status, 0);
    assert_true(tk_clean(r));
}

char *tk_env(const char *fmt, ...)
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

/* Whether HS_TEST_PYENV_ONLY (unset: all) lists major.minor. */
static int pyenv_kept(unsigned major, unsigned minor)
{
    const char *only = getenv("HS_TEST_PYENV_ONLY");
    if (!only) return 1;
    char want[32];
    snprintf(want, sizeof want, "%u.%u", major, minor);
    size_t n = strlen(want);
    for (const char *p = only; (p = strstr(p, want)); p += n)
        if ((p == only || strchr(" ,", p[-1])) && strchr(" ,", p[n])) return 1;
    return 0;
}

int tk_pyenv(unsigned lo, unsigned hi,
             void (*fn)(const char *py, const char *version, unsigned minor, void *ctx), void *ctx)
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
        if (!pyenv_kept(major, minor)) {
            fprintf(stderr, "pyenv %s: left out (HS_TEST_PYENV_ONLY)\n", e->d_name);
            continue;
        }
        fn(py, e->d_name, minor, ctx);
        n++;
    }
    closedir(dp);
    fprintf(stderr, "%d pyenv versions tested\n", n);
    return n;
}

int tk_prlimit(pid_t pid, int res, uint64_t soft, uint64_t hard)
{
    struct rlimit old, rl = {soft, hard};
    if (prlimit(pid, (__rlimit_resource_t)res, NULL, &old)) return -1;
    if (hard == UINT64_MAX) rl.rlim_max = old.rlim_max;
    if (soft == UINT64_MAX) rl.rlim_cur = rl.rlim_max;
    return prlimit(pid, (__rlimit_resource_t)res, &rl, NULL);
}

typedef struct self_id {
    uint8_t *bid;
    size_t cap, *blen;
    uint64_t *bias;
} self_id;

static int self_id_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    self_id *w = data;
    *w->bias = info->dlpi_addr; /* the first object is the executable */
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE) continue;
        const uint8_t *p = (const uint8_t *)(info->dlpi_addr + ph->p_vaddr), *end = p + ph->p_memsz;
        while (p + sizeof(ElfW(Nhdr)) <= end) {
            const ElfW(Nhdr) *n = (const ElfW(Nhdr) *)p;
            const uint8_t *name = p + sizeof *n, *desc = name + ((n->n_namesz + 3) & ~3u);
            if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 && !memcmp(name, "GNU", 4) &&
                n->n_descsz <= w->cap) {
                *w->blen = n->n_descsz;
                memcpy(w->bid, desc, n->n_descsz);
            }
            p = desc + ((n->n_descsz + 3) & ~3u);
        }
    }
    return 1;
}

void tk_self_build_id(uint8_t *bid, size_t cap, size_t *blen, uint64_t *load_bias)
{
    self_id w = {bid, cap, blen, load_bias};
    *blen = 0;
    dl_iterate_phdr(self_id_cb, &w);
}

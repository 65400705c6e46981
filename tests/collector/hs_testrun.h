/* hs_testrun: running a real program under the real collector for the tests.
 *
 * hs_testrun_exec forks and execs argv with LD_PRELOAD set to the collector
 * (build/lib/libheapstore.so, plus the ASan runtime after it in a sanitized
 * tree, see tests/collector/CMakeLists.txt), the given extra environment
 * (NAME=VALUE strings), stdout and stderr captured, and a timeout after
 * which the program is killed (a deadlock is a failure, not a hang).
 */
#ifndef HS_TESTRUN_H
#define HS_TESTRUN_H

#include <stddef.h>

typedef struct hs_testrun {
    int exited; /* 1 if the program exited (not killed, not signalled) */
    int status; /* exit code when exited, else the signal number */
    int timed_out;
    double seconds;  /* wall time */
    long maxrss_kb;  /* peak resident set of the program (0 after a timeout) */
    char *out, *err; /* captured output, NUL-terminated, owned */
} hs_testrun;

/* A scratch directory for this test binary (created once). */
const char *hs_testrun_dir(void);
/* $HS_BUILD_DIR/rel or $HS_SOURCE_DIR/rel. */
const char *hs_build_path(const char *rel);
const char *hs_source_path(const char *rel);

enum {
    HS_PRELOAD_NONE = 0,
    HS_PRELOAD_COLLECTOR = 1,
    /* The collector, forwarding to tests/libwl_alloc.so (see wl_alloc.c). */
    HS_PRELOAD_TEST_ALLOCATOR = 2,
};

/* preload: one of the above. The program runs in its own process group,
 * killed whole at the timeout. */
int hs_testrun_exec(hs_testrun *r, const char *const argv[], const char *const env[], int preload,
                    int timeout_s);
void hs_testrun_free(hs_testrun *r);

/* Fails the current test if the output holds a sanitizer report. */
int hs_testrun_clean(const hs_testrun *r);

/* Fails the current test (cmocka) unless the program exited 0, in time,
 * with no sanitizer report; prints its stderr first when it did not. */
void hs_testrun_expect_ok(const hs_testrun *r);

/* A formatted string for an environment entry ("NAME=value"), in one of 16
 * rotating static buffers: valid until 16 more calls. */
char *hs_testrun_env(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Calls fn for every pyenv CPython 3.lo to 3.hi present ($PYENV_ROOT, else
 * /root/.pyenv): its interpreter's path, its version ("3.12.1") and minor
 * number. Returns how many there were (0, said on stderr, when none). */
int hs_testrun_pyenv(unsigned lo, unsigned hi,
                     void (*fn)(const char *py, const char *version, unsigned minor, void *ctx),
                     void *ctx);

#endif

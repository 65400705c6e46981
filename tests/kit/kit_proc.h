/* kit_proc: the processes and files of a test. Where the build and source
 * trees are, a fresh directory per test, a program run to its end with its
 * output captured, a program started in the background and waited for with
 * a bound (either of them under the real collector, LD_PRELOAD), resource
 * limits of a running process, files read whole or waited on, and the
 * test's own build id.
 *
 * A program's environment is the test's, minus LD_PRELOAD and
 * HEAPSTORE_PARENT_RUN, plus the entries given ("NAME=VALUE"; "NAME=" unsets
 * NAME). It is built before fork: a test may have threads, and a child of a
 * threaded process may only call async-signal-safe functions until it
 * execs. The collector preloaded is build/lib/libheapstore.so, or the file
 * $HS_TEST_COLLECTOR names. The program runs in its own process group, killed whole (after a
 * backtrace of its threads on stderr) when it outlives its bound.
 */
#ifndef HS_KIT_PROC_H
#define HS_KIT_PROC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ---- trees and files --------------------------------------------------- */

/* The build tree ($HS_BUILD_DIR, else "build"). */
const char *tk_build_dir(void);
/* $HS_BUILD_DIR/rel, $HS_SOURCE_DIR/rel (else "build/rel", "./rel"), in
 * one of 8 rotating static buffers: valid until 8 more calls. */
const char *tk_build_path(const char *rel);
const char *tk_source_path(const char *rel);
/* A fresh directory $HS_BUILD_DIR/tests/tmp/name.PID (emptied if it was
 * there; removed by the caller if wanted). */
void tk_tmpdir(char *out, size_t len, const char *name);
/* A scratch directory for this test binary under /tmp (created once). */
const char *tk_scratch_dir(void);

/* A monotonic clock in ms, and a sleep. */
uint64_t tk_now_ms(void);
void tk_sleep_ms(int ms);

/* The whole of a file, malloc'ed and NUL-terminated ("" when it cannot be
 * read). */
char *tk_read_file(const char *path);
/* The size in bytes of a file; 0 when it does not exist. */
uint64_t tk_file_size(const char *path);
/* 1 if the file contains text. */
int tk_file_contains(const char *path, const char *text);
/* Polls the file until it contains text; 1 if it did within timeout_ms. */
int tk_wait_text(const char *path, const char *text, int timeout_ms);

/* ---- programs ---------------------------------------------------------- */

enum {
    TK_PRELOAD_NONE = 0,
    TK_PRELOAD_COLLECTOR = 1,
    /* The collector, forwarding to tests/libwl_alloc.so (see
     * tests/collector/wl_alloc.c). */
    TK_PRELOAD_TEST_ALLOCATOR = 2,
};

/* A program run to its end by tk_run. */
typedef struct tk_out {
    int code;        /* exit code, 128 + signal when killed by one */
    int exited;      /* 1 if the program exited (not killed, not signalled) */
    int status;      /* exit code when exited, else the signal number */
    int timed_out;   /* it outlived timeout_s and was killed */
    double seconds;  /* wall time */
    long maxrss_kb;  /* peak resident set of the program (0 after a timeout) */
    char *out, *err; /* captured output, NUL-terminated, owned */
} tk_out;

/* Runs argv (argv[0] a path, else looked up in PATH) with env (NULL-
 * terminated, may be NULL) and preload (TK_PRELOAD_*), captures stdout and
 * stderr, and waits at most timeout_s seconds (0: no bound). 0, or -1 when
 * it could not be started. */
int tk_run(tk_out *r, const char *const argv[], const char *const env[], int preload,
           int timeout_s);
void tk_out_free(tk_out *r);
/* tk_run of build/bin/heapstore with args (NULL-terminated, after the
 * program's name) and env, no preload and no bound. */
int tk_cli(tk_out *r, const char *const args[], const char *const env[]);
/* tk_cli for a JSON answer: fails the test (its stderr said first) unless
 * it exits 0 with JSON on stdout; the JSON, owned by the caller. */
typedef struct json_t json_t;
json_t *tk_cli_json(const char *const args[], const char *const env[]);
/* 1 unless stderr holds a sanitizer report. */
int tk_clean(const tk_out *r);
/* Fails the current test unless the program exited 0, in time, with no
 * sanitizer report; prints its stderr first when it did not. */
void tk_expect_ok(const tk_out *r);

/* A program started in the background by tk_spawn. */
typedef struct tk_proc {
    pid_t pid;
    char out[600]; /* the file of its stdout (and stderr, unless apart) */
} tk_proc;

/* Starts argv as tk_run does, stdout to out_path and stderr to err_path
 * (NULL: to out_path too). 0 or -1. */
int tk_spawn(tk_proc *p, const char *const argv[], const char *const env[], int preload,
             const char *out_path, const char *err_path);
/* Waits for it: its exit code, 128 + signal when killed by one, or -1 if
 * it did not end within timeout_ms (it is then killed; <= 0: no bound). */
int tk_wait(tk_proc *p, int timeout_ms);

/* A formatted string for an environment entry ("NAME=value"), in one of 16
 * rotating static buffers: valid until 16 more calls. */
char *tk_env(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Calls fn for every pyenv CPython 3.lo to 3.hi present ($PYENV_ROOT, else
 * /root/.pyenv): its interpreter's path, its version ("3.12.1") and minor
 * number. Returns how many there were (0, said on stderr, when none).
 * HS_TEST_PYENV_ONLY, when set, lists the minor versions to keep ("3.9 3.10"):
 * .ci/test sets it in the sanitized tree to one version for each of the
 * collector's Python code paths (see there). */
int tk_pyenv(unsigned lo, unsigned hi,
             void (*fn)(const char *py, const char *version, unsigned minor, void *ctx), void *ctx);

/* Sets the soft and hard limit of resource res of process pid; UINT64_MAX
 * keeps the hard limit as it is, or sets the soft one to the hard. 0 or -1. */
int tk_prlimit(pid_t pid, int res, uint64_t soft, uint64_t hard);

/* This executable's GNU build id (at most cap bytes, its length in *blen,
 * 0 when it has none) and its load bias, for tests that name their own
 * functions. */
void tk_self_build_id(uint8_t *bid, size_t cap, size_t *blen, uint64_t *load_bias);

#endif

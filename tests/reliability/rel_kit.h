/* rel_kit: what the reliability tests share on top of hs_testkit (streams,
 * the real server) and qkit (raw HTTP): real programs started under the
 * real collector in the background, waiting for them with a bound, polling
 * the database until a condition holds, and resource limits set on a running
 * server (prlimit), so that faults can be injected into the real processes.
 */
#ifndef REL_KIT_H
#define REL_KIT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct rk_proc {
    pid_t pid;
    char out[600]; /* stdout and stderr of the program */
} rk_proc;

/* Starts $HS_BUILD_DIR/tests/wl_rel with args (NULL-terminated) under the
 * collector (LD_PRELOAD) when preload is set, with env entries "K=V" (NULL-
 * terminated, may be NULL) added, output to out_path. 0 or -1. */
int rk_spawn(rk_proc *p, const char *const *args, const char *const *env, int preload,
             const char *out_path);
/* Waits for the program: its exit code, 128 + signal when killed, or -1 if
 * it did not end within timeout_ms (it is then killed). */
int rk_wait(rk_proc *p, int timeout_ms);
/* The program's output (malloc'ed, NUL-terminated; "" when none). */
char *rk_output(const rk_proc *p);

/* One integer from the database (opened read-only for the call);
 * INT64_MIN when the query returns no row. Fails the test on SQL errors. */
int64_t rk_q(const char *db, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Polls rk_q until its value is >= want or timeout_ms passes; the last value. */
int64_t rk_poll(const char *db, int64_t want, int timeout_ms, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Polls the file until it contains text; 1 if it did within timeout_ms. */
int rk_wait_text(const char *path, const char *text, int timeout_ms);

/* An HTTP exchange with the server on port (Connection: close): the status
 * (-1 when there was no answer) and the body (malloc'ed) in *body. */
int rk_http(int port, const char *method, const char *target, const char *headers, const char *body,
            char **out_body);

/* Sets the soft and hard limit of resource res of process pid; UINT64_MAX
 * keeps the hard limit as it is, or sets the soft one to the hard. 0 or -1. */
int rk_prlimit(pid_t pid, int res, uint64_t soft, uint64_t hard);

/* The size in bytes of a file; 0 when it does not exist. */
uint64_t rk_file_size(const char *path);

#endif

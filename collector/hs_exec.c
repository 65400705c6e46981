/* hs_exec: the exec family, so that a run ends complete when its image is
 * replaced.
 *
 * exec runs no exit handlers: without these hooks, whatever the collector had
 * not yet sent went with the old image and the run had no BYE. Each hook first
 * ends the run as exit does (hs__sender_finish: everything drained and
 * delivered within HEAPSTORE_EXIT_FLUSH_MS, then BYE with flags CLEAN|EXEC),
 * then calls the C library's function. The new image, if it keeps LD_PRELOAD,
 * starts its own run whose parent is this one (HEAPSTORE_PARENT_RUN).
 *
 * If exec fails, the process goes on with recording off (every hook forwards)
 * and says so on stderr once: its run has already ended.
 *
 * Not every caller may end the run (a vfork child may not, for one): see
 * hs__run_end in hs_exit.c, which exit and _exit share.
 * The variadic execl, execle and execlp gather their arguments into an array
 * (as the C library does) and go through execve and execvp.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <unistd.h>

#include "hs_collector.h"

#define HS_EXPORT __attribute__((visibility("default")))

extern char **environ;

static void *next_fn(const char *name)
{
    return dlsym(RTLD_NEXT, name);
}

static void exec_begin(void)
{
    hs__run_end(HS_BYE_CLEAN | HS_BYE_EXEC);
}

/* exec returned: it failed, and the run is over. */
static void exec_failed(void)
{
    static atomic_int said;
    if (getpid() != hs__run.pid || atomic_load(&hs__recording) || atomic_exchange(&said, 1)) return;
    int e = errno;
    static const char msg[] = "heapstore: exec failed after the run ended; the rest of this "
                              "process is not recorded\n";
    if (write(2, msg, sizeof msg - 1) < 0) {
    }
    errno = e;
}

#define HS_EXEC_FORWARD(type, name, params, args)                                                  \
    HS_EXPORT int name params                                                                      \
    {                                                                                              \
        static type real_;                                                                         \
        if (!real_) real_ = (type)next_fn(#name);                                                  \
        if (!real_) {                                                                              \
            errno = ENOSYS;                                                                        \
            return -1;                                                                             \
        }                                                                                          \
        exec_begin();                                                                              \
        int rc = real_ args;                                                                       \
        exec_failed();                                                                             \
        return rc;                                                                                 \
    }

typedef int (*execve_fn)(const char *, char *const[], char *const[]);
typedef int (*execv_fn)(const char *, char *const[]);
typedef int (*fexecve_fn)(int, char *const[], char *const[]);
typedef int (*execveat_fn)(int, const char *, char *const[], char *const[], int);

HS_EXEC_FORWARD(execve_fn, execve, (const char *path, char *const argv[], char *const envp[]),
                (path, argv, envp))
HS_EXEC_FORWARD(execv_fn, execv, (const char *path, char *const argv[]), (path, argv))
HS_EXEC_FORWARD(execv_fn, execvp, (const char *file, char *const argv[]), (file, argv))
HS_EXEC_FORWARD(execve_fn, execvpe, (const char *file, char *const argv[], char *const envp[]),
                (file, argv, envp))
HS_EXEC_FORWARD(fexecve_fn, fexecve, (int fd, char *const argv[], char *const envp[]),
                (fd, argv, envp))
HS_EXEC_FORWARD(execveat_fn, execveat,
                (int dirfd, const char *path, char *const argv[], char *const envp[], int flags),
                (dirfd, path, argv, envp, flags))

/* The number of arguments after arg0 up to the NULL that ends them. */
static size_t count_args(const char *arg0, va_list *ap)
{
    size_t n = 0;
    if (arg0)
        while (va_arg(*ap, const char *)) n++;
    return n;
}

/* argv[0..n+1]: arg0, the n arguments and the NULL, consumed from *ap. */
static void gather(char **argv, const char *arg0, size_t n, va_list *ap)
{
    argv[0] = (char *)arg0;
    argv[n + 1] = NULL;
    if (arg0)
        for (size_t i = 1; i <= n + 1; i++) argv[i] = va_arg(*ap, char *);
}

/* Declares char *argv[] holding arg0 and the variadic arguments after it;
 * leaves ap just past their NULL. */
#define HS_GATHER_ARGS(argv, arg0, ap)                                                             \
    va_list cp_;                                                                                   \
    va_copy(cp_, ap);                                                                              \
    size_t n_ = count_args(arg0, &cp_);                                                            \
    va_end(cp_);                                                                                   \
    char *argv[n_ + 2];                                                                            \
    gather(argv, arg0, n_, &ap)

HS_EXPORT int execl(const char *path, const char *arg0, ...)
{
    va_list ap;
    va_start(ap, arg0);
    HS_GATHER_ARGS(argv, arg0, ap);
    va_end(ap);
    return execve(path, argv, environ);
}

HS_EXPORT int execlp(const char *file, const char *arg0, ...)
{
    va_list ap;
    va_start(ap, arg0);
    HS_GATHER_ARGS(argv, arg0, ap);
    va_end(ap);
    return execvp(file, argv);
}

HS_EXPORT int execle(const char *path, const char *arg0, ...)
{
    va_list ap;
    va_start(ap, arg0);
    HS_GATHER_ARGS(argv, arg0, ap);
    char *const *envp = va_arg(ap, char *const *);
    va_end(ap);
    return execve(path, argv, envp);
}

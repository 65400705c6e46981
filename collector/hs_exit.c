/* hs_exit: the end of a run, and _exit and _Exit, which run no exit handlers.
 *
 * A run ends once, in whichever way the process goes: exit() (our atexit
 * handler, hs_hooks.c), exec (hs_exec.c), or _exit and _Exit, which shells,
 * Python's os._exit and multiprocessing's workers use and which skip every
 * handler. hs__run_end does the ending for all three: the sender drains
 * every ring, delivers within HEAPSTORE_EXIT_FLUSH_MS and sends BYE
 * (hs__sender_finish); recording is off afterwards, so the C library's exit,
 * which ends in its own internal _exit, finds nothing left to do.
 *
 * The caller only waits, on a futex, for the sender thread to finish: no
 * lock, no allocation, no stdio, so that a signal handler may call _exit.
 * (When the sender thread has not run yet, a caller that did not interrupt
 * collector code does its last round itself: see hs__sender_finish.)
 * The wait is bounded (HEAPSTORE_EXIT_FLUSH_MS plus a second) even when the
 * sender cannot make progress. Callers that must not end the run:
 * - a vfork child, or a clone that skipped the atfork handlers: it shares or
 *   copied the parent's state, and finishing there would end the parent's
 *   run or send it twice; it is recognised by its pid, which is not the
 *   run's;
 * - the sender thread itself;
 * - a signal handler that interrupted collector code, when the sender is not
 *   running: starting a thread there could wait on a lock the interrupted
 *   frame holds. (When the sender runs, the handler waits for it like any
 *   caller; a lock the interrupted frame holds can only delay the sender
 *   until the bound.)
 * syscall(SYS_exit_group) bypasses all of this; such a run ends as lost.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "hs_collector.h"
#include "hs_sender.h"
#include "hs_thread.h"

#define HS_EXPORT __attribute__((visibility("default")))

void hs__run_end(unsigned bye_flags)
{
    hs_tls *t = &hs__tls;
    if (!atomic_load(&hs__recording) || getpid() != hs__run.pid || t->state == HS_T_INTERNAL)
        return;
    if (t->guard != 0 && !hs__sender_alive()) return;
    int e = errno;
    hs__guard_enter(t);
    hs__sender_finish(bye_flags);
    atomic_store(&hs__recording, 0);
    hs__guard_leave(t);
    errno = e;
}

typedef void (*exit_fn)(int);

/* Looked up once, at load: dlsym is no call for a signal handler. Until then
 * (an _exit from an earlier library's constructor) the system call is made
 * directly, as the C library's _exit does. */
static exit_fn real_exit, real_Exit;

__attribute__((constructor(102))) static void exit_resolve(void)
{
    real_exit = (exit_fn)dlsym(RTLD_NEXT, "_exit");
    real_Exit = (exit_fn)dlsym(RTLD_NEXT, "_Exit");
}

__attribute__((noreturn)) static void leave(exit_fn real, int status)
{
    if (real) real(status);
    for (;;) syscall(SYS_exit_group, status);
}

HS_EXPORT void _exit(int status)
{
    hs__run_end(HS_BYE_CLEAN);
    leave(real_exit, status);
}

HS_EXPORT void _Exit(int status)
{
    hs__run_end(HS_BYE_CLEAN);
    leave(real_Exit ? real_Exit : real_exit, status);
}

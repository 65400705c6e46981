/* hs_pymem: Python's object allocator seen, and the end of a Python program.
 *
 * CPython serves most objects (512 bytes and less) from its own pools
 * (pymalloc), which take memory from the system in 256 KiB arenas: the
 * malloc hooks never see those objects. When hs_py_scan finds a supported
 * interpreter (CPython 3.8-3.13, not a debug or free-threaded build) whose
 * runtime has not begun initialising, hs__pymem_attach wraps its
 * PYMEM_DOMAIN_MEM and PYMEM_DOMAIN_OBJ allocators (PyMem_GetAllocator and
 * PyMem_SetAllocator, the only interpreter functions the collector calls, and
 * only then: before Python's main for python3, before Py_Initialize for an
 * embedder that dlopens libpython). The wrappers keep the original context,
 * so a thread reading the allocator while it is replaced never pairs our
 * function with a context it does not expect.
 *
 * The wrappers sample on the same countdown as the malloc hooks. pymalloc
 * serves requests of 1 to 512 bytes from its pools and hands the others to
 * PyMem_RawMalloc, where the hooks count them: a malloc or calloc wrapper
 * takes the hooks' fast path (a compare, a subtraction, a tail call) for the
 * small ones only, and calls hs_hooks.c's
 * hs__alloc_slow when the countdown runs out. A realloc may go to
 * PyMem_RawRealloc whatever the size, so its wrapper reads the thread's
 * countdown and slow-path sequence before calling the original: when
 * either moved, a hook counted the block. A free or realloc removes a
 * sampled block from the live set before the original runs (a block freed
 * below it by the free hook is then not found twice, and an address handed
 * to another thread meanwhile is never removed wrongly); a failed realloc
 * puts it back. The size histogram (SIZES), which the sender builds from the
 * samples, counts the small objects the wrappers sample like any other.
 *
 * With PYTHONMALLOC set nothing is wrapped: the interpreter installs its own
 * allocators at start-up (malloc and malloc_debug send everything to the
 * hooks; with pymalloc, debug and pymalloc_debug small objects are not
 * seen). Development mode (-X dev on python's command line, or
 * PYTHONDEVMODE) installs the debug hooks over pymalloc at start-up:
 * nothing is wrapped then either, and small objects are not seen. -E and -I
 * make python ignore both variables, and the collector with it.
 *
 * The end of a Python program: the free and realloc wrappers watch the
 * runtime's `_finalizing` word (set by Py_FinalizeEx after the main code,
 * its thread joins and atexit handlers, before any module is torn down).
 * The first call that finds it set stores the time, once, as the run's
 * HS_DROP_MAIN_END_NS, which the queries take as the run's "end".
 */
#ifndef HS_PYMEM_H
#define HS_PYMEM_H

#include <stddef.h>
#include <stdint.h>

#include "hs_liveset.h"

/* The malloc hooks' slow paths the wrappers call (hs_hooks.c hands them
 * over, so that this module needs nothing above it by name). */
typedef struct hs_pymem_hooks {
    /* The countdown ran out on an allocation of n bytes at p (maybe NULL);
     * the size histogram does not count it. */
    void (*alloc_slow)(void *p, size_t n);
    /* p is about to be freed or moved: records the free of a sampled block;
     * returns 1 with *l when p was live. */
    int (*free_forget)(void *p, hs_live *l);
    /* The move failed: p, forgotten with *l, is live again. */
    void (*put_back)(void *p, const hs_live *l);
} hs_pymem_hooks;

/* Once, from the hooks' init, before the first hs_py_scan: keeps h and
 * registers with hs_python the function that, for each supported
 * interpreter a scan finds, wraps its allocators (once per process; not
 * when its runtime has begun initialising: hs__pymem_state says so). */
void hs__pymem_init(const hs_pymem_hooks *h);

enum hs_pymem_state {
    HS_PYMEM_NONE = 0,     /* no supported interpreter seen */
    HS_PYMEM_WRAPPED = 1,  /* small objects are seen */
    HS_PYMEM_TOO_LATE = 2, /* the runtime was initialised before we found it */
};
int hs__pymem_state(void);

#endif

/* hs_python: Python frames, read from the live interpreter, merged into the
 * native stack of a sample.
 *
 * hs_py_scan finds CPython interpreters among the loaded objects (the main
 * executable, libpython3.X.so) by their symbols: `_PyRuntime`, the version
 * (`Py_Version`, or the library's name before 3.11), the address ranges of
 * `_PyEval_EvalFrameDefault` and its split parts, `PyCode_Type`. Layouts are
 * known for 3.8 to 3.13 (3.13's own `_Py_DebugOffsets` are read from
 * `_PyRuntime`); any other version, a debug build or a free-threaded one is
 * kept as "unsupported": its stacks stay native, and each sample whose stack
 * runs through its evaluation loop counts as python_fallback.
 *
 * At a sample, hs_py_merge replaces every native frame inside the evaluation
 * loop by the Python frames that invocation runs (3.8-3.10: one frame object
 * per invocation; 3.11+: the interpreter frames down to the entry frame). The
 * thread's PyThreadState is the interpreter's own per-thread key
 * (`autoTSSkey`, read with pthread_getspecific); the GIL is never taken, no
 * interpreter function is called and no object is created. A sample taken
 * by Python's allocator wrappers (hs_pymem.c) runs with the GIL held, by the
 * allocator API's contract, and CPython keeps the thread's frames, code
 * objects and strings consistent whenever an allocator runs (tracemalloc
 * reads them from its own allocator hooks): the wrapper says so through
 * hs_py_gil_held, and the walk then reads them with plain loads. Elsewhere
 * (the malloc hooks, where a C extension may have released the GIL and
 * another thread may be tearing frames down) every read of interpreter
 * memory goes through process_vm_readv on our own process (or pread of
 * /proc/self/mem where that is refused), so a pointer into memory being
 * freed or unmapped gives an error, never a fault. Every walk is bounded in
 * frames and every string in bytes, in both ways.
 *
 * A Python frame travels as a synthetic pc, HS_PY_PC_TAG | the address of an
 * immutable record of (code object, instruction) holding its qualified name,
 * file and line; records are interned and never freed during a run. The
 * sender turns such a pc into a symbol with hs_py_symbol (function, file,
 * line; no module), so the server identifies the frame by its content and two
 * runs of one script share their frames.
 */
#ifndef HS_PYTHON_H
#define HS_PYTHON_H

#include <stdint.h>

#include "hs_proto.h"

/* Synthetic pcs lie above every user-space address. */
#define HS_PY_PC_TAG 0xff00000000000000ull

static inline int hs_py_is_pc(uint64_t pc)
{
    return (pc & HS_PY_PC_TAG) == HS_PY_PC_TAG;
}

/* Set (to 1) by Python's allocator wrappers around a sample they take, and
 * only there: the calling thread holds the GIL, so hs_py_merge may read the
 * interpreter's memory directly. Never guessed elsewhere. */
extern __thread int hs_py_gil_held __attribute__((tls_model("initial-exec")));

/* What a scan calls when it finds a supported interpreter: its
 * PyMem_GetAllocator and PyMem_SetAllocator, the address of _PyRuntime's
 * finalizing word (or 0), and whether its runtime has begun initialising.
 * Set once, before the first scan, by the layer above that wraps the
 * interpreter's allocators (hs_pymem.c), which this module never calls by
 * name. Called under the scan lock and the re-entry guard. */
typedef void (*hs_py_found_fn)(void *get, void *set, uintptr_t finalizing, int initialized);
void hs_py_on_found(hs_py_found_fn fn);
/* Looks for interpreters among the loaded objects not seen yet. Takes the
 * loader's lock and allocates (libelf): call it from the constructor and from
 * the sender when objects were added, never from a hook. */
void hs_py_scan(void);
/* 1 once any interpreter (supported or not) is loaded: stacks are then
 * unwound in full so that every evaluation frame is seen. */
int hs_py_present(void);
/* Merges the raw native stack native[0..n) (innermost first) with the
 * calling thread's Python stack into out[0..cap). At most native_max native
 * frames are kept; Python frames do not count against it. native_full says
 * the unwinding stopped at its buffer's end. Returns the depth; sets
 * *truncated when frames were left out. */
uint32_t hs_py_merge(uint64_t *out, uint32_t cap, void *const *native, uint32_t n,
                     uint32_t native_max, int native_full, int *truncated);
/* The symbol of a synthetic pc (sender thread). */
void hs_py_symbol(uint64_t pc, hs_symbol *out);
/* Fork child: our pid changed (reads name the process). */
void hs_py_fork_child(void);

#endif

/* hs_stacks: capturing call stacks at a sample and interning them.
 *
 * hs__stack_capture unwinds with hs_unwind (libunwind's unw_backtrace for the
 * stacks that one cannot walk, loaded at the first of them, or always with
 * HEAPSTORE_UNWIND=libunwind, once hs__stacks_load_unwinder has loaded it),
 * within the thread's stack bounds, and cuts off every
 * frame inside libheapstore.so (the leading ones, and a Python allocator
 * wrapper further out), so pcs[0] is the return address in
 * the function that called the allocator. For C++ `new` that function is
 * libstdc++'s operator new: those frames are kept, consistently, and the
 * caller of `new` is pcs[1]. Every pc is a return address (the symbolizer
 * looks up pc - 1).
 *
 * hs__stack_intern gives each distinct stack a small id (1, 2, …) for the
 * run. Lookups are lock-free: an open-addressing table of pointers to
 * immutable records, published with release stores; inserts take one lock
 * and grow the table by doubling (the old table stays readable, a reader that
 * misses retries under the lock). New records are also pushed on a list the
 * sender takes with hs__stacks_take_new, to send them (and their symbols)
 * before the first event that uses them. Records are never freed during a
 * run; their memory counts against HS_STACKS_MEM_MAX.
 */
#ifndef HS_STACKS_H
#define HS_STACKS_H

#include <stdint.h>

#include "hs_unwind.h"

#define HS_STACKS_MEM_MAX (256u << 20)

typedef struct hs_stack_rec {
    struct hs_stack_rec *next_new; /* the sender's list, newest first */
    uint64_t hash;
    uint64_t id;
    uint32_t depth;
    uint64_t pcs[];
} hs_stack_rec;

/* With HEAPSTORE_UNWIND=libunwind, loads libunwind, from the constructor,
 * under guard. Otherwise it is loaded only once a stack needs it: a
 * sampling thread whose stack our own unwinder cannot walk asks for it and
 * waits (bounded); the consumer of the rings (the sender) calls
 * hs__stacks_serve_unwinder at each round, which loads it when asked (one
 * atomic load otherwise). Never from an allocation hook. */
void hs__stacks_load_unwinder(void);
void hs__stacks_serve_unwinder(void);
/* Range of our own code, found once at start. */
void hs__stacks_init(uintptr_t self_lo, uintptr_t self_hi);
/* Unwinds into pcs (room for pcs_cap frames, of which HEAPSTORE_DEPTH
 * native ones), with scratch[scratch_cap] as the unwinder's buffer; in a
 * process with a Python interpreter, the thread's Python frames take the
 * place of the interpreter's evaluation frames (hs_python.h) and do not count
 * against HEAPSTORE_DEPTH. Returns the depth (0 when the stack could not be
 * unwound); *truncated is set when frames were cut. */
uint32_t hs__stack_capture(void **scratch, uint32_t scratch_cap, uint64_t *pcs, uint32_t pcs_cap,
                           int *truncated, hs_stack_bounds *bounds);
/* The id of the stack, or 0 when the table is out of memory. */
uint64_t hs__stack_intern(const uint64_t *pcs, uint32_t depth);
/* All stacks interned since the previous call, in id order (oldest first). */
hs_stack_rec *hs__stacks_take_new(void);
/* Fork child: empty tables, ids from 1 again. */
void hs__stacks_reset(void);

#endif

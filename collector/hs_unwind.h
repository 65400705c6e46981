/* hs_unwind: the sampled path's own x86-64 unwinder.
 *
 * libunwind keeps its unwinding caches per thread, so every thread pays
 * again for each return address it has not seen yet (measured on the
 * collector benchmark's 4 threads: the first 170 stacks cost 9 ms, about
 * 50 us each, and a steady stack about 3 us). This unwinder keeps one table for
 * the whole process: return address -> how to find the caller's frame (the
 * CFA as rsp or rbp plus an offset, where the return address and the saved
 * rbp lie relative to it). A rule is computed once, from the object's
 * .eh_frame_hdr and .eh_frame (the same tables libunwind and the C++ runtime
 * use), on the first stack through that address; afterwards unwinding is a
 * table lookup and two loads per frame, with no lock and no system call.
 *
 * It only handles what compilers emit for ordinary code: CFA from rsp or rbp,
 * saved registers at constant offsets. Anything else (signal frames, DWARF
 * expressions, code without unwind tables, a stack other than the thread's
 * own, such as a signal alternate stack) makes hs__unwind_fast return -1, and
 * the caller unwinds that stack with libunwind instead. Every load is checked
 * first against the stack as the thread's earlier complete walks found it,
 * or else against the mapping that holds the stack pointer as
 * /proc/self/maps shows it at that moment, so a wrong rule ends a stack
 * early rather than reading memory that is not there.
 *
 * Rules of objects that were unloaded must not be used for whatever is
 * loaded at the same address later: hs__unwind_invalidate (called by the
 * sender when glibc's dlclose counter moves, and by a miss that sees it move)
 * starts a new generation; older rules are ignored from then on.
 *
 * Invariants (asserted in debug builds): a STEP rule fits its packed slot
 * (CFA offset 1 .. 2^24 - 1, register offsets multiples of 8 in
 * [-1024, 1016]) and unpacks to itself; tables are powers of two at most 7/8
 * full; the reader of .eh_frame never leaves the segment it was given (the
 * fuzzer fuzz_cfa checks that one under ASan).
 */
#ifndef HS_UNWIND_H
#define HS_UNWIND_H

#include <stdint.h>

/* Where the thread's stack lies: the mapping that held its stack pointer
 * when last looked up (in /proc/self/maps, so no pthread call, which could
 * deadlock on the thread's own lock when the program allocates inside
 * pthread_getattr_np). Zero for a new thread. A mapping can be merged with
 * neighbouring memory that is unmapped later, so words above `top` are
 * checked against a fresh lookup. A thread found outside its mapping (its
 * stack grew, or it runs on a signal stack), or reading above `top`, looks
 * again, at most HS_UNWIND_LOOKUPS times; after that such stacks go to
 * libunwind. */
#define HS_UNWIND_NEAR 64 /* the thread's own rules: a power of two */
typedef struct hs_stack_bounds {
    uintptr_t lo, hi;
    uintptr_t top;    /* end of the highest word a complete walk read (0: none) */
    uint32_t lookups; /* one is given back every 1024 walks */
    uint32_t walks;
    /* The rules of the return addresses this thread met last, direct
     * mapped: the shared table's slots are mostly evicted by the program
     * between two samples (a cache miss a frame, 11% of a std::map
     * program's time at every allocation), these 1 KiB mostly not. Each
     * keeps its generation, as the shared table's do. */
    uint64_t near_ip[HS_UNWIND_NEAR];
    uint64_t near_rule[HS_UNWIND_NEAR];
} hs_stack_bounds;

#define HS_UNWIND_LOOKUPS 16

/* Return addresses of the calling thread's stack, innermost first, the
 * caller's own frame included; at most cap. Returns the count, or -1 when
 * this stack needs libunwind. Call inside the thread's busy region (a miss
 * takes the loader's lock through dl_iterate_phdr). */
int hs__unwind_fast(void **out, int cap, hs_stack_bounds *b);

/* Rules cached so far are not to be trusted any more. */
void hs__unwind_invalidate(void);

/* How to step from a frame to its caller's, as read from the unwind tables:
 * the CFA is rsp (or rbp) plus cfa_off, the return address lies at
 * CFA + ra_off, and the caller's rbp is unchanged, at CFA + bp_off, or lost. */
enum { HS_UNW_STEP = 1, HS_UNW_END = 2, HS_UNW_FALLBACK = 3 };
enum { HS_UNW_BP_SAME = 0, HS_UNW_BP_SAVED = 1, HS_UNW_BP_LOST = 2 };
typedef struct hs_unw_rule {
    uint32_t gen; /* the generation it was computed in (the walk's) */
    uint8_t kind, cfa_rbp, bp_how;
    int32_t cfa_off;        /* STEP: 1 .. 2^24 - 1 */
    int32_t bp_off, ra_off; /* STEP: multiples of 8 in [-1024, 1016] */
} hs_unw_rule;

/* The rule for the code address pc, from an object's .eh_frame_hdr at hdr
 * and the segment [beg, end) that holds it and the .eh_frame it indexes
 * (beg <= hdr <= end). A pure function over those bytes: nothing outside the
 * segment is read, whatever it holds. Returns out->kind; anything the walk
 * cannot follow (no entry, DWARF expressions, signal frames, malformed
 * tables) is HS_UNW_FALLBACK. */
int hs__unwind_parse(hs_unw_rule *out, const uint8_t *hdr, const uint8_t *beg, const uint8_t *end,
                     uintptr_t pc);

#endif

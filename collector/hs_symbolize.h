/* hs_symbolize: program counters to function, file, line and module, and
 * the functions inlined at a pc (DWARF's inlined subroutines).
 *
 * Runs only in the sender thread (whose allocations are never sampled), once
 * per distinct pc. Uses elfutils' libdwfl over the process's own mappings;
 * when a pc falls outside every known module (an object dlopen'ed since) the
 * module list is reported again once per change of the loaded-object
 * counters. Separate debug files are looked for on this machine only (by
 * build id under /usr/lib/debug, or by .gnu_debuglink), never through
 * debuginfod servers. C++ names are demangled with __cxa_demangle, looked up at run
 * time so that a C program does not need libstdc++. The strings a lookup
 * returns are valid until the next lookup.
 */
#ifndef HS_SYMBOLIZE_H
#define HS_SYMBOLIZE_H

#include <stdint.h>

#include "hs_proto.h"

typedef struct hs_symbolizer hs_symbolizer;

/* Which modules get source file and line (HEAPSTORE_LINES). Function names
 * and module offsets are always looked up. */
enum hs_lines {
    /* DWARF inside the object itself (compressed or not), and separate debug
     * files whose DWARF is not compressed. A separate compressed file (what
     * Debian's -dbg and -dbgsym packages install under /usr/lib/debug) is
     * skipped: libdw inflates all of its DWARF on first use, about 100 ms of
     * CPU per process for glibc's, which is the whole of the collector's
     * overhead on a short program. Its function names still come through. */
    HS_LINES_AUTO = 0,
    HS_LINES_ALL = 1,  /* every module with DWARF anywhere */
    HS_LINES_NONE = 2, /* names and offsets only */
};

/* Looks up __cxa_demangle (until found: a C program may dlopen C++ later).
 * dlsym takes the loader's lock, which a program thread may hold while it
 * waits for a fork that waits for the sender's busy region, so the sender
 * calls this outside that region, before symbolizing. */
void hs_symbolize_prepare(void);
/* 0, or an error (then use hs_symbolize_basic). */
int hs_symbolizer_new(hs_symbolizer **out, int lines);
void hs_symbolizer_free(hs_symbolizer *s);
/* Fills out (pc, function, file, line, module, module_offset) for the return
 * address pc. Never fails: unknown parts are left empty. */
void hs_symbolizer_lookup(hs_symbolizer *s, uint64_t pc, hs_symbol *out);
/* The functions inlined at pc, as DWARF records them (modules whose lines
 * are read, see enum hs_lines): out[0] the innermost inlined function at the
 * line pc is on, each next one its caller (inlined too) at the line of the
 * call, out[n - 1] the function that holds the code (what
 * hs_symbolizer_lookup names) at the line of the outermost inlined call.
 * Returns n, 1 to max (1: nothing inlined there; out[0] is then
 * hs_symbolizer_lookup's answer). */
#define HS_INLINE_MAX 16
int hs_symbolizer_lookup_inline(hs_symbolizer *s, uint64_t pc, hs_symbol *out, int max);
/* A frame inlined at pc travels as a synthetic pc of its own,
 * HS_INL_PC_TAG | k << 48 | pc (k = 0 the innermost, out[k] above), defined
 * by SYMBOLS like any pc; pc itself stands for the holder. Below Python's
 * tag (hs_python.h) and above every user-space address (< 2^47). */
#define HS_INL_PC_TAG 0xfe00000000000000ull
static inline uint64_t hs_inl_pc(uint64_t pc, int k)
{
    return HS_INL_PC_TAG | (uint64_t)k << 48 | pc;
}
static inline int hs_inl_pc_ok(uint64_t pc) /* a pc that may have inlined frames */
{
    return pc && pc < (1ull << 48);
}
/* Without a symbolizer: module and module offset only. */
void hs_symbolize_basic(uint64_t pc, hs_symbol *out);
/* The set of loaded objects changed: re-read it at the next miss. */
void hs_symbolizer_invalidate(hs_symbolizer *s);

#endif

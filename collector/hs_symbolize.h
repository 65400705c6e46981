/* hs_symbolize: a program counter to its module and module offset, which is
 * all the collector says about a native frame.
 *
 * Names, files, lines and inlined frames are the server's work
 * (server/hs_symbols.h), once per build id for every run of that build, so
 * that no DWARF reader, decompressor or symbol table sort runs inside the
 * profiled process. Python frames are the exception: their names come from
 * the live interpreter (hs_python.h). Runs in the sender thread only.
 */
#ifndef HS_SYMBOLIZE_H
#define HS_SYMBOLIZE_H

#include <stdint.h>

#include "hs_proto.h"

/* HEAPSTORE_LINES (hs_config): which modules got source lines when the
 * collector read DWARF itself. Accepted for old settings; the server now
 * reads every module's lines, and the collector none. */
enum hs_lines {
    HS_LINES_AUTO = 0,
    HS_LINES_ALL = 1,
    HS_LINES_NONE = 2,
};

/* Fills out with pc, module (the object's path as the loader names it; the
 * executable's through /proc/self/exe, as MAPPINGS names it) and
 * module_offset (pc minus the object's load bias); function and file empty.
 * Through dl_iterate_phdr, not dladdr: this runs in the sender's busy
 * region, and dladdr takes the loader's lock, which a program thread may
 * hold while it waits for a fork that waits for that region. */
void hs_symbolize_basic(uint64_t pc, hs_symbol *out);

#endif

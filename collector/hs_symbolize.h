/* hs_symbolize: program counters to function, file, line and module.
 *
 * Runs only in the sender thread (whose allocations are never sampled), once
 * per distinct pc. Uses elfutils' libdwfl over the process's own mappings;
 * when a pc falls outside every known module (an object dlopen'ed since) the
 * module list is reported again once per change of the loaded-object
 * counters. C++ names are demangled with __cxa_demangle, looked up at run
 * time so that a C program does not need libstdc++. The strings a lookup
 * returns are valid until the next lookup.
 */
#ifndef HS_SYMBOLIZE_H
#define HS_SYMBOLIZE_H

#include <stdint.h>

#include "hs_proto.h"

typedef struct hs_symbolizer hs_symbolizer;

int hs_symbolizer_new(hs_symbolizer **out);
void hs_symbolizer_free(hs_symbolizer *s);
/* Fills out (pc, function, file, line, module, module_offset) for the return
 * address pc. Never fails: unknown parts are left empty. */
void hs_symbolizer_lookup(hs_symbolizer *s, uint64_t pc, hs_symbol *out);
/* The set of loaded objects changed: re-read it at the next miss. */
void hs_symbolizer_invalidate(hs_symbolizer *s);

#endif

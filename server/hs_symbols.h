/* hs_symbols: module offsets to function (demangled), file, line and the
 * functions inlined there, from ELF files and their DWARF, once per build.
 *
 * Collectors send each frame as a module (path, and through MAPPINGS its
 * build id) and an offset; this module turns those into names for the
 * server (its symbolizer thread), for `heapstore import`, `heapstore dump`
 * and the tests. A build is looked for by build id: the path the collector
 * named when the file there carries that build id (unless no_local), then
 * each directory of the search path (DIR/.build-id/xx/yyyy.debug,
 * DIR/.build-id/xx/yyyy, DIR/<file name>), then /usr/lib/debug. Its separate
 * debug file comes from /usr/lib/debug/.build-id, .gnu_debuglink (next to
 * the object, in its .debug folder, under /usr/lib/debug) or the search
 * path; compressed DWARF sections are read too. Never through debuginfod.
 *
 * An hs_syms keeps every build it opened (its ELF, sorted symbol table and
 * libdw state) until freed: a second lookup in a build costs a binary search
 * and a directed descent of one compilation unit. Not thread-safe: one
 * owner thread. The strings a lookup returns are valid until the next.
 */
#ifndef HS_SYMBOLS_H
#define HS_SYMBOLS_H

#include <stddef.h>
#include <stdint.h>

#include "hs_inlpc.h"
#include "hs_proto.h"

typedef struct hs_syms hs_syms;

typedef struct hs_syms_config {
    const char *const *paths; /* search directories, in order */
    int npaths;
    int no_local; /* never read the module's own path nor /usr/lib/debug */
} hs_syms_config;

typedef struct hs_syms_stats {
    uint64_t lookups;        /* hs_syms_lookup calls */
    uint64_t builds_opened;  /* builds whose file was found and read */
    uint64_t builds_missing; /* builds looked for and not found */
    uint64_t builds_kept;    /* builds held now, found or not (at most 256) */
    uint64_t cache_hits;     /* lookups answered by the cache (hs_syms_set_cache) */
} hs_syms_stats;

int hs_syms_new(hs_syms **out, const hs_syms_config *cfg);
void hs_syms_free(hs_syms *s);
hs_syms_stats hs_syms_get_stats(const hs_syms *s);

/* The frames at module offset off (a return address minus the module's load
 * bias, as SYMBOLS' module_offset) of build bid, a file once at path:
 * out[0] the innermost inlined function, each next its caller, out[n - 1]
 * the function that holds the code (as enum hs_symbol's docs; pc and module
 * fields left for the caller). Returns n, 1 to max (function empty: no
 * symbol covers off), or 0 when no file of that build can be found. */
#define HS_SYMS_INLINE_MAX 16
int hs_syms_lookup(hs_syms *s, const uint8_t *bid, size_t blen, const char *path, uint64_t off,
                   hs_symbol *out, int max);

/* The build id of the ELF file at path into bid (HS_BUILD_ID_MAX bytes):
 * its length (> 0), 0 when it has none, or a negative HS_E code. */
int hs_syms_file_build_id(const char *path, uint8_t *bid);

/* The folder of debug files added to the database at db_path (`heapstore
 * symbols add`), which the server searches first: "DB.symbols", holding
 * .build-id/xx/yyyy.debug. */
int hs_syms_store_dir(char *out, size_t len, const char *db_path);

/* Answers kept outside (the server's database, schema/hs_symcache.h): get
 * fills out[0..n) (strings valid until the next call) and returns n, or 0
 * when it has none; put is given every answer read from a file. Only
 * builds with a build id are cached. */
typedef struct hs_syms_cache {
    int (*get)(void *data, const uint8_t *bid, size_t blen, uint64_t off, hs_symbol *out, int max);
    void (*put)(void *data, const uint8_t *bid, size_t blen, uint64_t off, const hs_symbol *fr,
                int n);
    void *data;
} hs_syms_cache;
void hs_syms_set_cache(hs_syms *s, const hs_syms_cache *c);

/* What a stream says about its modules: the path -> build id of its latest
 * MAPPINGS frame. Zero-initialise; hs_syms_stream_free releases it. */
typedef struct hs_syms_module {
    char *path;
    uint8_t bid[HS_BUILD_ID_MAX];
    uint32_t blen;
    int missed; /* hs_syms_rewrite looked a pc of it up and found no file of the build */
} hs_syms_module;

typedef struct hs_syms_stream {
    hs_syms_module *mods;
    size_t n, cap;
} hs_syms_stream;

void hs_syms_stream_free(hs_syms_stream *st);
/* Takes the modules of a MAPPINGS payload (a malformed one changes nothing). */
void hs_syms_stream_mappings(hs_syms_stream *st, const uint8_t *p, size_t len);

/* A SYMBOLS payload with names: every entry of p that has no function but
 * a module whose build id st knows is looked up; an entry with inlined
 * frames becomes several, the inlined ones under the pcs hs_inl_pc(pc, k)
 * (innermost k = 0) and the holder under pc, as collectors that symbolized
 * themselves sent them (a STACKS reader expands pc into them). An entry
 * whose module no MAPPINGS named (a stream taken up in the middle) is
 * looked up in the file at its path, whatever its build. Entries with a
 * function, and Python's, pass unchanged.
 * Returns 1 with *out (malloc'ed, *outlen bytes) when anything changed, 0
 * when p stands as it is, or a negative HS_E code (p malformed: the reader
 * then rejects p itself; or out of memory). *nresolved counts the entries
 * looked up. */
int hs_syms_rewrite(hs_syms *s, hs_syms_stream *st, const uint8_t *p, size_t len, uint8_t **out,
                    size_t *outlen, uint64_t *nresolved);

/* Forgets what s knows of build bid, a file found or not: the next lookup
 * looks for its file again (one has just been added). */
void hs_syms_forget(hs_syms *s, const uint8_t *bid, size_t blen);

/* 1 if a file of build bid (blen > 0; once at path) can be read now: a
 * build not found is looked for again at once (the search path and, unless
 * no_local, path and /usr/lib/debug), without keeping anything of it. */
int hs_syms_available(hs_syms *s, const uint8_t *bid, size_t blen, const char *path);

/* The path of build bid's file among those added to the database at
 * db_path: "DB.symbols/.build-id/xx/yyyy.debug" (hs_syms_store_dir). 0 or
 * HS_ETOOBIG. */
int hs_syms_store_file(char *out, size_t len, const char *db_path, const uint8_t *bid, size_t blen);

/* Synthetic pcs of inlined frames: common/hs_inlpc.h. */

#endif

/* hs_proc: what the collector reads about its own process.
 *
 * The loaded objects (through dl_iterate_phdr, whose adds/subs counters tell
 * cheaply whether anything was loaded or unloaded, so dlopen needs no hook),
 * the resident and virtual size from /proc/self/statm, and the facts of the
 * HELLO frame: program path, argv (/proc/self/cmdline), host name, labels.
 * Used by the sender thread only; the HELLO buffers are owned by the caller.
 */
#ifndef HS_PROC_H
#define HS_PROC_H

#include <link.h>
#include <stdint.h>

#include "hs_proto.h"

/* 1 if address a lies in one of the loaded segments of the object that
 * dl_iterate_phdr describes in info. */
static inline int hs_proc_phdr_holds(const struct dl_phdr_info *info, uintptr_t a)
{
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && a >= lo && a - lo < ph->p_memsz) return 1;
    }
    return 0;
}

/* The GNU build id of a loaded object, read from its notes in memory: its
 * length (at most HS_BUILD_ID_MAX) with *out pointing at it, or 0. */
size_t hs_proc_build_id(const struct dl_phdr_info *info, const uint8_t **out);
/* The current (adds, subs) of the dynamic loader. */
void hs_proc_objects_gen(uint64_t *adds, uint64_t *subs);
/* Appends one MAPPINGS entry per executable segment of every loaded object. */
void hs_proc_mappings_put(hs_wr *wr);

/* RSS and virtual size in bytes; 0 when /proc is unreadable. fd is kept
 * open between calls (-1 to start; close and reset it after fork). */
int hs_proc_statm(int *fd, uint64_t *rss, uint64_t *vsize);

/* The readable mapping that contains addr, from /proc/self/maps: 0 and
 * [*lo, *hi) set, or -1. Neither allocates nor locks, so the sampled path
 * may call it (a thread's stack bounds for hs_unwind). */
int hs_proc_region_of(uintptr_t addr, uintptr_t *lo, uintptr_t *hi);

/* The facts of HELLO that do not change during a run, read into buf (which
 * the strings of h borrow). labels is HEAPSTORE_LABELS' value. */
typedef struct hs_proc_info {
    char program[HS_STR_MAX];
    char host[256];
    char cmdline[65536];
    char labels[HS_STR_MAX];
} hs_proc_info;
void hs_proc_info_fill(hs_proc_info *buf, hs_hello *h, const char *labels);

#endif

/* hs_dw: libdw and libelf, loaded by the sender when it first symbolizes.
 *
 * Linking them would load libdw, libelf, libz, liblzma and libbz2 into every
 * profiled process at start, about 1.2 ms of the program's own time per
 * process (measured on /bin/true-sized programs), also in processes that
 * never take a sample. Loaded here instead, they cost nothing until the
 * sender thread needs names, and a machine without libdw still gets every
 * stack, with module and offset for each frame.
 *
 * hs_symbolize.c calls them through hs__dw (hs__dw.dwfl_begin(...)); the
 * types come from the same headers as a normal link would use.
 */
#ifndef HS_DW_H
#define HS_DW_H

#include <elfutils/libdwelf.h>
#include <elfutils/libdwfl.h>
#include <gelf.h>

#define HS_DW_FUNCS(X)                                                                             \
    X(dwelf_elf_gnu_build_id)                                                                      \
    X(dwfl_addrmodule)                                                                             \
    X(dwfl_begin)                                                                                  \
    X(dwfl_build_id_find_debuginfo)                                                                \
    X(dwfl_end)                                                                                    \
    X(dwfl_getmodules)                                                                             \
    X(dwfl_lineinfo)                                                                               \
    X(dwfl_linux_proc_find_elf)                                                                    \
    X(dwfl_linux_proc_report)                                                                      \
    X(dwfl_module_build_id)                                                                        \
    X(dwfl_module_getelf)                                                                          \
    X(dwfl_module_getsrc)                                                                          \
    X(dwfl_module_getsym_info)                                                                     \
    X(dwfl_module_getsymtab)                                                                       \
    X(dwfl_module_info)                                                                            \
    X(dwfl_report_begin)                                                                           \
    X(dwfl_report_end)                                                                             \
    X(elf_begin)                                                                                   \
    X(elf_end)                                                                                     \
    X(elf_getshdrstrndx)                                                                           \
    X(elf_nextscn)                                                                                 \
    X(elf_strptr)                                                                                  \
    X(gelf_getshdr)

typedef struct hs_dw_api {
#define HS_DW_PTR(f) __typeof__(f) *f;
    HS_DW_FUNCS(HS_DW_PTR)
#undef HS_DW_PTR
} hs_dw_api;

extern hs_dw_api hs__dw;

/* 0 once hs__dw is filled, -1 when libdw cannot be loaded (said once on
 * stderr). Sender thread only; the first call loads. */
int hs__dw_load(void);

#endif

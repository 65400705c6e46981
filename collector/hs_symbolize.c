/* hs_symbolize: pc to module and offset (see hs_symbolize.h). */
#include "hs_symbolize.h"

#include <link.h>
#include <string.h>
#include <unistd.h>

#include "hs_proc.h"

static hs_str str_of(const char *p)
{
    hs_str r = {"", 0};
    if (p) {
        r.ptr = p;
        r.len = strnlen(p, HS_STR_MAX);
    }
    return r;
}

typedef struct basic_find {
    uintptr_t pc;
    hs_symbol *out;
} basic_find;

static int basic_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    basic_find *f = data;
    if (!hs_proc_phdr_holds(info, f->pc)) return 0;
    static char exe[HS_STR_MAX]; /* the main program has no name here */
    if (!info->dlpi_name[0] && !exe[0]) {
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        exe[n > 0 ? n : 0] = 0;
    }
    f->out->module = str_of(info->dlpi_name[0] ? info->dlpi_name : exe);
    f->out->module_offset = f->pc + 1 - info->dlpi_addr;
    return 1;
}

void hs_symbolize_basic(uint64_t pc, hs_symbol *out)
{
    memset(out, 0, sizeof *out);
    out->pc = pc;
    out->function = out->file = out->module = str_of(NULL);
    if (!pc) return;
    basic_find f = {(uintptr_t)pc - 1, out};
    dl_iterate_phdr(basic_cb, &f);
}

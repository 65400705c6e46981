/* hs_symbolize: libdwfl lookups for the sender thread (see hs_symbolize.h). */
#include "hs_symbolize.h"

#include <dlfcn.h>
#include <elfutils/libdwfl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hs_error.h"

struct hs_symbolizer {
    Dwfl *dwfl;
    int stale;       /* objects changed since the last report */
    char *demangled; /* owned result of the last demangling */
    char *debuginfo_path;
};

typedef char *(*demangle_fn)(const char *, char *, size_t *, int *);

static int report(hs_symbolizer *s)
{
    if (dwfl_linux_proc_report(s->dwfl, getpid()) != 0) return HS_EIO;
    return dwfl_report_end(s->dwfl, NULL, NULL) == 0 ? 0 : HS_EIO;
}

int hs_symbolizer_new(hs_symbolizer **out)
{
    static const Dwfl_Callbacks cb = {
        .find_elf = dwfl_linux_proc_find_elf,
        .find_debuginfo = dwfl_standard_find_debuginfo,
    };
    hs_symbolizer *s = calloc(1, sizeof *s);
    if (!s) return HS_ENOMEM;
    s->dwfl = dwfl_begin(&cb);
    if (!s->dwfl) {
        free(s);
        return HS_ENOMEM;
    }
    dwfl_report_begin(s->dwfl);
    report(s);
    *out = s;
    return 0;
}

void hs_symbolizer_free(hs_symbolizer *s)
{
    if (!s) return;
    dwfl_end(s->dwfl);
    free(s->demangled);
    free(s);
}

void hs_symbolizer_invalidate(hs_symbolizer *s)
{
    s->stale = 1;
}

static const char *demangle(hs_symbolizer *s, const char *name)
{
    if (!name || name[0] != '_' || name[1] != 'Z') return name;
    demangle_fn fn = (demangle_fn)dlsym(RTLD_DEFAULT, "__cxa_demangle");
    if (!fn) return name;
    int status = 0;
    char *d = fn(name, NULL, NULL, &status);
    if (!d || status != 0) {
        free(d);
        return name;
    }
    free(s->demangled);
    s->demangled = d;
    return d;
}

static hs_str str_of(const char *p)
{
    hs_str r = {"", 0};
    if (p) {
        r.ptr = p;
        r.len = strlen(p);
        if (r.len > HS_STR_MAX) r.len = HS_STR_MAX;
    }
    return r;
}

void hs_symbolizer_lookup(hs_symbolizer *s, uint64_t pc, hs_symbol *out)
{
    memset(out, 0, sizeof *out);
    out->pc = pc;
    out->function = out->file = out->module = str_of(NULL);
    Dwarf_Addr a = pc ? pc - 1 : 0; /* a return address: look at the call */
    Dwfl_Module *m = dwfl_addrmodule(s->dwfl, a);
    if (!m && s->stale) {
        s->stale = 0;
        dwfl_report_begin(s->dwfl);
        report(s);
        m = dwfl_addrmodule(s->dwfl, a);
    }
    if (!m) return;
    const char *mainfile = NULL, *modname = NULL;
    Dwarf_Addr start = 0;
    modname = dwfl_module_info(m, NULL, &start, NULL, NULL, NULL, &mainfile, NULL);
    Dwarf_Addr bias = start;
    dwfl_module_getelf(m, &bias);
    out->module = str_of(mainfile ? mainfile : modname);
    out->module_offset = pc - bias;
    GElf_Off off = 0;
    GElf_Sym sym;
    const char *name = dwfl_module_addrinfo(m, a, &off, &sym, NULL, NULL, NULL);
    out->function = str_of(demangle(s, name));
    if (out->function.len > HS_FUNC_MAX) out->function.len = HS_FUNC_MAX;
    Dwfl_Line *line = dwfl_module_getsrc(m, a);
    if (line) {
        int lineno = 0;
        const char *file = dwfl_lineinfo(line, NULL, &lineno, NULL, NULL, NULL);
        out->file = str_of(file);
        out->line = lineno > 0 ? (uint64_t)lineno : 0;
    }
}

/* hs_symbolize: libdwfl lookups for the sender thread (see hs_symbolize.h). */
#include "hs_symbolize.h"

#include <dlfcn.h>
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <gelf.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hs_error.h"

struct hs_symbolizer {
    Dwfl *dwfl;
    int lines;       /* enum hs_lines */
    int stale;       /* objects changed since the last report */
    char *demangled; /* owned result of the last demangling */
    char bare[1024]; /* the last symbol name without its version suffix */
    char *debuginfo_path;
};

typedef char *(*demangle_fn)(const char *, char *, size_t *, int *);

static int report(hs_symbolizer *s)
{
    if (dwfl_linux_proc_report(s->dwfl, getpid()) != 0) return HS_EIO;
    return dwfl_report_end(s->dwfl, NULL, NULL) == 0 ? 0 : HS_EIO;
}

int hs_symbolizer_new(hs_symbolizer **out, int lines)
{
    static const Dwfl_Callbacks cb = {
        .find_elf = dwfl_linux_proc_find_elf,
        .find_debuginfo = dwfl_standard_find_debuginfo,
    };
    hs_symbolizer *s = calloc(1, sizeof *s);
    if (!s) return HS_ENOMEM;
    s->lines = lines;
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

/* Symbol tables of objects linked by newer binutils name versioned symbols
 * "malloc@@GLIBC_2.2.5"; the dynamic symbol table of the same object says
 * "malloc". Keep the bare name so that a function has one name whichever
 * table it came from (and a mangled name can be demangled). */
static const char *unversioned(hs_symbolizer *s, const char *name)
{
    const char *at = name ? strchr(name, '@') : NULL;
    if (!at || at == name) return name;
    size_t n = (size_t)(at - name);
    if (n >= sizeof s->bare) n = sizeof s->bare - 1;
    memcpy(s->bare, name, n);
    s->bare[n] = 0;
    return s->bare;
}

static const char *demangle(hs_symbolizer *s, const char *name)
{
    name = unversioned(s, name);
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

/* 1 if any DWARF section of the ELF file at path is compressed. */
static int debug_compressed(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    int found = 0;
    Elf *e = elf_begin(fd, ELF_C_READ_MMAP, NULL);
    size_t shstrndx;
    if (e && elf_getshdrstrndx(e, &shstrndx) == 0) {
        for (Elf_Scn *scn = NULL; !found && (scn = elf_nextscn(e, scn));) {
            GElf_Shdr sh;
            if (!gelf_getshdr(scn, &sh)) continue;
            const char *name = elf_strptr(e, shstrndx, sh.sh_name);
            if (!name) continue;
            if (strncmp(name, ".zdebug_", 8) == 0) found = 1;
            if (strncmp(name, ".debug_", 7) == 0 && (sh.sh_flags & SHF_COMPRESSED)) found = 1;
        }
    }
    elf_end(e);
    close(fd);
    return found;
}

/* Whether to look up file and line in module m (see enum hs_lines). Decided
 * once per module and kept in its user data slot. Call after a symbol lookup,
 * which is what locates a separate debug file. */
static int want_lines(hs_symbolizer *s, Dwfl_Module *m)
{
    if (s->lines == HS_LINES_ALL) return 1;
    if (s->lines == HS_LINES_NONE) return 0;
    void **slot = NULL;
    const char *mainfile = NULL, *debugfile = NULL;
    dwfl_module_info(m, &slot, NULL, NULL, NULL, NULL, &mainfile, &debugfile);
    if (!slot) return 1;
    if (!*slot) {
        int yes = !debugfile || (mainfile && strcmp(debugfile, mainfile) == 0) ||
                  !debug_compressed(debugfile);
        *slot = (void *)(uintptr_t)(yes ? 1 : 2);
    }
    return *slot == (void *)(uintptr_t)1;
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
    Dwfl_Line *line = want_lines(s, m) ? dwfl_module_getsrc(m, a) : NULL;
    if (line) {
        int lineno = 0;
        const char *file = dwfl_lineinfo(line, NULL, &lineno, NULL, NULL, NULL);
        out->file = str_of(file);
        out->line = lineno > 0 ? (uint64_t)lineno : 0;
    }
}

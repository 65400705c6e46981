/* hs_symbolize: libdwfl lookups for the sender thread (see hs_symbolize.h). */
#include "hs_symbolize.h"

#include <dlfcn.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwelf.h>
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <gelf.h>
#include <link.h>
#include <assert.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hs_error.h"
#include "hs_proc.h"

struct hs_symbolizer {
    Dwfl *dwfl;
    int lines;       /* enum hs_lines */
    int stale;       /* objects changed since the last report */
    char *demangled; /* owned result of the last demangling */
    char bare[1024]; /* the last symbol name without its version suffix */
    char *debuginfo_path;
    char *inl_names[HS_INLINE_MAX + 1]; /* owned names of the last inline lookup */
};

typedef char *(*demangle_fn)(const char *, char *, size_t *, int *);

static int free_removed(Dwfl_Module *m, void *userdata, const char *name, Dwarf_Addr base,
                        void *arg);
static int free_each(Dwfl_Module *m, void **userdata, const char *name, Dwarf_Addr base, void *arg);

static int report(hs_symbolizer *s)
{
    if (dwfl_linux_proc_report(s->dwfl, getpid()) != 0) return HS_EIO;
    return dwfl_report_end(s->dwfl, free_removed, NULL) == 0 ? 0 : HS_EIO;
}

/* 1 if the ELF file open at fd carries the build id of module m (or m has
 * none to compare with). */
static int same_build_id(Dwfl_Module *m, int fd)
{
    const unsigned char *want;
    GElf_Addr vaddr;
    int wlen = dwfl_module_build_id(m, &want, &vaddr);
    if (wlen <= 0) return 1;
    int ok = 0;
    Elf *e = elf_begin(fd, ELF_C_READ_MMAP, NULL);
    const void *have;
    if (e && dwelf_elf_gnu_build_id(e, &have) == wlen) ok = memcmp(have, want, (size_t)wlen) == 0;
    elf_end(e);
    return ok;
}

/* Separate debug files, from this machine only: by build id under
 * /usr/lib/debug/.build-id, else by .gnu_debuglink next to the object, in
 * its .debug folder, or under /usr/lib/debug. libdwfl's standard search ends
 * by asking debuginfod servers when DEBUGINFOD_URLS is set, and a profiled
 * program must not download debug information over the network. */
static int find_debuginfo_local(Dwfl_Module *m, void **userdata, const char *modname,
                                Dwarf_Addr base, const char *file_name, const char *debuglink,
                                GElf_Word crc, char **debuginfo_file_name)
{
    int fd = dwfl_build_id_find_debuginfo(m, userdata, modname, base, file_name, debuglink, crc,
                                          debuginfo_file_name);
    if (fd >= 0 || !file_name || !debuglink || strchr(debuglink, '/')) return fd;
    const char *slash = strrchr(file_name, '/');
    if (!slash) return -1;
    int dlen = (int)(slash - file_name);
    char path[4096];
    for (int i = 0; i < 3; i++) {
        static const char *const fmt[] = {"%.*s/%s", "%.*s/.debug/%s", "/usr/lib/debug%.*s/%s"};
        int n = snprintf(path, sizeof path, fmt[i], dlen, file_name, debuglink);
        if (n <= 0 || (size_t)n >= sizeof path || strcmp(path, file_name) == 0) continue;
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        if (same_build_id(m, fd) && (*debuginfo_file_name = strdup(path))) return fd;
        close(fd);
    }
    return -1;
}

int hs_symbolizer_new(hs_symbolizer **out, int lines)
{
    static const Dwfl_Callbacks cb = {
        .find_elf = dwfl_linux_proc_find_elf,
        .find_debuginfo = find_debuginfo_local,
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
    dwfl_getmodules(s->dwfl, free_each, NULL, 0);
    dwfl_end(s->dwfl);
    free(s->demangled);
    for (int i = 0; i <= HS_INLINE_MAX; i++) free(s->inl_names[i]);
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

/* __cxa_demangle, looked up by hs_symbolize_prepare (dlsym takes the
 * loader's lock, so not here). */
static _Atomic(demangle_fn) demangler;

void hs_symbolize_prepare(void)
{
    if (!atomic_load_explicit(&demangler, memory_order_relaxed))
        atomic_store_explicit(&demangler, (demangle_fn)dlsym(RTLD_DEFAULT, "__cxa_demangle"),
                              memory_order_relaxed);
}

static const char *demangle(hs_symbolizer *s, const char *name)
{
    name = unversioned(s, name);
    if (!name || name[0] != '_' || name[1] != 'Z') return name;
    demangle_fn fn = atomic_load_explicit(&demangler, memory_order_relaxed);
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

/* What the symbolizer keeps per module, in the module's user data slot:
 * whether to read its lines, and its code symbols sorted by address.
 * libdwfl's own address-to-symbol lookup scans the whole symbol table on
 * every call (about 0.2 M instructions per pc in glibc's), which made
 * symbolizing a program with thousands of distinct pcs cost O(pcs x symbols). */
typedef struct msym {
    uint64_t addr, size;
    const char *name; /* in the module's string table: lives as long as it */
    int rank;         /* binding: global 2, weak 1, local 0 */
} msym;

typedef struct modinfo {
    int lines; /* 1 read lines, 0 don't */
    size_t n;
    msym *syms;
} modinfo;

/* 1 if a is the better name for an address than b. */
static int msym_better(const msym *a, const msym *b)
{
    return a->rank != b->rank ? a->rank > b->rank : strcmp(a->name, b->name) < 0;
}

/* Sorts v[0..n) by address, stably: a least-significant-digit radix sort,
 * one pass per byte that is not the same in every address. A comparison sort
 * through qsort's callback cost more than reading the symbols. */
static void sort_by_addr(msym *v, size_t n, msym *tmp)
{
    uint64_t all_or = 0, all_and = ~(uint64_t)0;
    for (size_t i = 0; i < n; i++) {
        all_or |= v[i].addr;
        all_and &= v[i].addr;
    }
    for (unsigned shift = 0; shift < 64; shift += 8) {
        if ((((all_or ^ all_and) >> shift) & 0xff) == 0) continue;
        size_t count[257] = {0};
        for (size_t i = 0; i < n; i++) count[((v[i].addr >> shift) & 0xff) + 1]++;
        for (int b = 0; b < 256; b++) count[b + 1] += count[b];
        for (size_t i = 0; i < n; i++) tmp[count[(v[i].addr >> shift) & 0xff]++] = v[i];
        memcpy(v, tmp, n * sizeof *v);
    }
}

static void load_syms(modinfo *mi, Dwfl_Module *m)
{
    int n = dwfl_module_getsymtab(m);
    if (n <= 0) return;
    mi->syms = malloc((size_t)n * sizeof *mi->syms);
    msym *tmp = malloc((size_t)n * sizeof *tmp);
    if (!mi->syms || !tmp) {
        free(mi->syms);
        free(tmp);
        mi->syms = NULL;
        return;
    }
    size_t k = 0;
    for (int i = 1; i < n; i++) {
        GElf_Sym sym;
        GElf_Addr addr;
        GElf_Word shndx;
        const char *name = dwfl_module_getsym_info(m, i, &sym, &addr, &shndx, NULL, NULL);
        int type = GELF_ST_TYPE(sym.st_info), bind = GELF_ST_BIND(sym.st_info);
        if (!name || !*name || shndx == SHN_UNDEF || addr == 0) continue;
        if (type != STT_FUNC && type != STT_GNU_IFUNC && type != STT_NOTYPE) continue;
        mi->syms[k++] = (msym){addr, sym.st_size, name,
                               bind == STB_GLOBAL ? 2
                               : bind == STB_WEAK ? 1
                                                  : 0};
    }
    sort_by_addr(mi->syms, k, tmp);
    free(tmp);
    size_t w = 0; /* one name per address: the preferred one */
    for (size_t i = 0; i < k; i++) {
        if (w && mi->syms[w - 1].addr == mi->syms[i].addr) {
            if (msym_better(&mi->syms[i], &mi->syms[w - 1])) mi->syms[w - 1] = mi->syms[i];
        } else {
            mi->syms[w++] = mi->syms[i];
        }
    }
    mi->n = w;
}

/* The function containing a: the symbol at or below it whose size covers it,
 * else a sizeless one just below (hand-written assembly), else NULL. */
static const char *find_sym(const modinfo *mi, uint64_t a)
{
    size_t lo = 0, hi = mi->n; /* first symbol above a */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (mi->syms[mid].addr <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0) return NULL;
    const msym *best = &mi->syms[lo - 1];
    if (best->size == 0 || a < best->addr + best->size) return best->name;
    /* A symbol further down may enclose this one (a function and a smaller
     * label inside it); look a few back. */
    for (size_t i = lo - 1, k = 0; i-- > 0 && k < 8; k++)
        if (mi->syms[i].size && a < mi->syms[i].addr + mi->syms[i].size) return mi->syms[i].name;
    return NULL;
}

static modinfo *module_info(hs_symbolizer *s, Dwfl_Module *m)
{
    void **slot = NULL;
    const char *mainfile = NULL, *debugfile = NULL;
    dwfl_module_info(m, &slot, NULL, NULL, NULL, NULL, &mainfile, NULL);
    if (!slot) return NULL;
    if (*slot) return *slot;
    modinfo *mi = calloc(1, sizeof *mi);
    if (!mi) return NULL;
    load_syms(mi, m); /* locates a separate debug file if there is one */
    dwfl_module_info(m, NULL, NULL, NULL, NULL, NULL, &mainfile, &debugfile);
    /* Lines: see enum hs_lines. */
    mi->lines = s->lines == HS_LINES_ALL ||
                (s->lines == HS_LINES_AUTO &&
                 (!debugfile || (mainfile && strcmp(debugfile, mainfile) == 0) ||
                  !debug_compressed(debugfile)));
    *slot = mi;
    return mi;
}

static void modinfo_free(modinfo *mi)
{
    if (!mi) return;
    free(mi->syms);
    free(mi);
}

static int free_removed(Dwfl_Module *m, void *userdata, const char *name, Dwarf_Addr base,
                        void *arg)
{
    /* Declared as the user data, but what libdwfl passes is its slot (as it
     * does to dwfl_getmodules' callbacks). */
    return free_each(m, userdata, name, base, arg);
}

static int free_each(Dwfl_Module *m, void **userdata, const char *name, Dwarf_Addr base, void *arg)
{
    (void)m, (void)name, (void)base, (void)arg;
    modinfo_free(*userdata);
    *userdata = NULL;
    return DWARF_CB_OK;
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
    static char exe[4096]; /* the main program has no name here */
    if (!info->dlpi_name[0] && !exe[0]) {
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        exe[n > 0 ? n : 0] = 0;
    }
    f->out->module = str_of(info->dlpi_name[0] ? info->dlpi_name : exe);
    f->out->module_offset = f->pc + 1 - info->dlpi_addr;
    return 1;
}

/* dl_iterate_phdr, not dladdr: this runs in the sender's busy region, and
 * dladdr takes the loader's lock (see hs_symbolize_prepare). */
void hs_symbolize_basic(uint64_t pc, hs_symbol *out)
{
    memset(out, 0, sizeof *out);
    out->pc = pc;
    out->function = out->file = out->module = str_of(NULL);
    if (!pc) return;
    basic_find f = {(uintptr_t)pc - 1, out};
    dl_iterate_phdr(basic_cb, &f);
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
    modinfo *mi = module_info(s, m);
    const char *name = mi ? find_sym(mi, a) : NULL;
    out->function = str_of(demangle(s, name));
    if (out->function.len > HS_FUNC_MAX) out->function.len = HS_FUNC_MAX;
    Dwfl_Line *line = mi && mi->lines ? dwfl_module_getsrc(m, a) : NULL;
    if (line) {
        int lineno = 0;
        const char *file = dwfl_lineinfo(line, NULL, &lineno, NULL, NULL, NULL);
        out->file = str_of(file);
        out->line = lineno > 0 ? (uint64_t)lineno : 0;
    }
}

/* The name of the function an inlined_subroutine DIE runs: its linkage name
 * demangled (as the symbol tables name functions: with parameters), else
 * its plain name; both found through DW_AT_abstract_origin and
 * DW_AT_specification. NULL when it has none. */
static const char *inlined_name(hs_symbolizer *s, Dwarf_Die *die)
{
    Dwarf_Attribute at;
    const char *n = NULL;
    if (dwarf_attr_integrate(die, DW_AT_linkage_name, &at) ||
        dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &at))
        n = dwarf_formstring(&at);
    if (n) return demangle(s, n);
    if (dwarf_attr_integrate(die, DW_AT_name, &at)) n = dwarf_formstring(&at);
    return n;
}

/* The scopes holding a (a CU-relative address) under parent, outermost
 * first, from chain[n] on: the subprogram, then the lexical blocks and
 * inlined subroutines inside it whose ranges hold a. A directed descent:
 * only the children of a scope that holds a (and of namespaces, which have
 * no address of their own) are looked at, and dwarf_siblingof skips a
 * child's subtree, where dwarf_getscopes walks every DIE of the unit on
 * every call (0.4 ms a pc in a unit of templates). Returns the new n. */
#define SCOPE_MAX 64
static int scope_chain(Dwarf_Die *parent, Dwarf_Addr a, Dwarf_Die *chain, int n, int nest)
{
    Dwarf_Die child;
    if (n >= SCOPE_MAX || nest > SCOPE_MAX || dwarf_child(parent, &child) != 0) return n;
    do {
        switch (dwarf_tag(&child)) {
        case DW_TAG_namespace:
        case DW_TAG_module: {
            int m = scope_chain(&child, a, chain, n, nest + 1);
            if (m > n) return m;
            break;
        }
        case DW_TAG_subprogram:
        case DW_TAG_inlined_subroutine:
        case DW_TAG_lexical_block:
        case DW_TAG_try_block:
        case DW_TAG_catch_block:
            if (dwarf_haspc(&child, a) == 1) {
                chain[n] = child;
                return scope_chain(&chain[n], a, chain, n + 1, nest + 1);
            }
            break;
        default:
            break;
        }
    } while (dwarf_siblingof(&child, &child) == 0);
    return n;
}

int hs_symbolizer_lookup_inline(hs_symbolizer *s, uint64_t pc, hs_symbol *out, int max)
{
    assert(max >= 1);
    hs_symbol outer;
    hs_symbolizer_lookup(s, pc, &outer);
    for (int i = 0; i <= HS_INLINE_MAX; i++) {
        free(s->inl_names[i]);
        s->inl_names[i] = NULL;
    }
    /* the holder's name lives in buffers the inlined names' demangling
     * reuses: keep a copy */
    if (outer.function.len &&
        (s->inl_names[HS_INLINE_MAX] = strndup(outer.function.ptr, outer.function.len)))
        outer.function.ptr = s->inl_names[HS_INLINE_MAX];
    int n = 1;
    Dwarf_Addr a = pc ? pc - 1 : 0, bias = 0;
    Dwfl_Module *m = pc ? dwfl_addrmodule(s->dwfl, a) : NULL;
    modinfo *mi = m ? module_info(s, m) : NULL;
    Dwarf_Die *cu = mi && mi->lines && outer.file.len ? dwfl_module_addrdie(m, a, &bias) : NULL;
    Dwarf_Die chain[SCOPE_MAX];
    int nc = cu ? scope_chain(cu, a - bias, chain, 0, 0) : 0;
    Dwarf_Files *files = NULL;
    size_t nfiles = 0;
    /* from the innermost scope out: the inlined subroutines (lexical
     * blocks between them skipped) up to the subprogram that holds them */
    Dwarf_Die *inl[HS_INLINE_MAX];
    int ninl = 0;
    for (int i = nc - 1; i >= 0 && ninl < max - 1 && ninl < HS_INLINE_MAX; i--) {
        int tag = dwarf_tag(&chain[i]);
        if (tag == DW_TAG_subprogram) break;
        if (tag == DW_TAG_inlined_subroutine) inl[ninl++] = &chain[i];
    }
    if (ninl == 0 || dwarf_getsrcfiles(cu, &files, &nfiles) != 0) {
        out[0] = outer;
        return 1;
    }
    /* frame k (k < ninl) runs the function of inl[k]; its location is the
     * line table's for k = 0, else the call site inl[k - 1] records; the
     * last frame is the holding function at inl[ninl - 1]'s call */
    for (int k = 0; k <= ninl; k++) {
        hs_symbol *f = &out[k];
        *f = outer;
        if (k < ninl) {
            const char *name = inlined_name(s, inl[k]);
            if (name && (s->inl_names[k] = strdup(name))) {
                f->function = str_of(s->inl_names[k]);
                if (f->function.len > HS_FUNC_MAX) f->function.len = HS_FUNC_MAX;
            }
        }
        if (k > 0) {
            Dwarf_Attribute at;
            Dwarf_Word file = 0, line = 0;
            if (dwarf_formudata(dwarf_attr(inl[k - 1], DW_AT_call_file, &at), &file) != 0) file = 0;
            if (dwarf_formudata(dwarf_attr(inl[k - 1], DW_AT_call_line, &at), &line) != 0) line = 0;
            const char *fn = file < nfiles ? dwarf_filesrc(files, file, NULL, NULL) : NULL;
            f->file = str_of(fn);
            f->line = line;
        }
    }
    n = ninl + 1;
    return n;
}

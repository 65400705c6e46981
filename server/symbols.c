/* hs_symbols: libdwfl lookups per build id (see hs_symbols.h). The symbol
 * table sort and the inline descent are the ones the collector used when it
 * symbolized in the profiled process. */
#include "hs_symbols.h"

#include <assert.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwelf.h>
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <gelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hs_error.h"

/* libstdc++'s demangler (the server links it; a C++ name is demangled as
 * the program's own runtime would). */
extern char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);

/* A module's code symbols sorted by address. libdwfl's own address-to-symbol
 * lookup scans the whole table on every call. */
typedef struct msym {
    uint64_t addr, size;
    const char *name; /* in the module's string table: lives as long as it */
    int rank;         /* binding: global 2, weak 1, local 0 */
} msym;

typedef struct build {
    struct build *next;
    uint8_t bid[HS_BUILD_ID_MAX];
    uint32_t blen;
    char *path;        /* the path it was asked for under (no build id: the key) */
    Dwfl *dwfl;        /* NULL: no file of this build was found */
    Dwfl_Module *mod;  /* the one module reported into dwfl */
    time_t missing_at; /* !mod: when it was looked for; looked for again later */
    msym *syms;
    size_t nsyms;
} build;

/* Builds kept read at once (most recently used first); a peer naming ever
 * new builds cannot grow the server's memory past this many. */
#define HS_SYMS_BUILDS_MAX 256
/* A build not found is looked for again after this many seconds. */
#define HS_SYMS_RETRY_S 5

#define NAMES_MAX (HS_SYMS_INLINE_MAX + 1)

struct hs_syms {
    hs_syms_config cfg; /* paths: owned copies */
    char **paths;
    char *debuginfo_path; /* for libdwfl's build-id search: the search path, then
                             /usr/lib/debug unless no_local */
    Dwfl_Callbacks cb;
    build *builds;
    hs_syms_stats stats;
    hs_syms_cache cache;    /* get NULL: none */
    char *names[NAMES_MAX]; /* owned names of the last lookup */
    char bare[1024];
};

/* ---- finding files ----------------------------------------------------- */

/* 1 if the ELF file open at fd carries build id (bid, blen); any file
 * matches an empty build id. */
static int fd_has_build_id(int fd, const uint8_t *bid, size_t blen)
{
    if (!blen) return 1;
    int ok = 0;
    Elf *e = elf_begin(fd, ELF_C_READ_MMAP, NULL);
    const void *have;
    if (e && dwelf_elf_gnu_build_id(e, &have) == (ssize_t)blen) ok = !memcmp(have, bid, blen);
    elf_end(e);
    return ok;
}

static int open_if_build(const char *path, const uint8_t *bid, size_t blen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    if (fd_has_build_id(fd, bid, blen)) return fd;
    close(fd);
    return -1;
}

/* "xx/yyyy…" of a build id, the layout of .build-id folders. */
static void bid_hex(char *out, const uint8_t *bid, size_t blen)
{
    static const char hx[] = "0123456789abcdef";
    char *o = out;
    for (size_t i = 0; i < blen; i++) {
        *o++ = hx[bid[i] >> 4];
        *o++ = hx[bid[i] & 15];
        if (i == 0) *o++ = '/';
    }
    *o = 0;
}

/* An ELF file of the build, or -1; its path in *found (malloc'ed). */
static int find_elf(hs_syms *s, const uint8_t *bid, size_t blen, const char *path, char **found)
{
    char p[4096], hex[2 * HS_BUILD_ID_MAX + 2];
    int fd = -1;
    if (!s->cfg.no_local && path && path[0] == '/') fd = open_if_build(path, bid, blen);
    if (fd >= 0) {
        *found = strdup(path);
        return fd;
    }
    if (!blen) return -1;
    bid_hex(hex, bid, blen);
    const char *base = path ? strrchr(path, '/') : NULL;
    base = base ? base + 1 : path;
    for (int i = 0; i < s->cfg.npaths + 1 && fd < 0; i++) {
        const char *dir = i < s->cfg.npaths ? s->cfg.paths[i] : "/usr/lib/debug";
        if (i == s->cfg.npaths && s->cfg.no_local) break;
        static const char *const fmt[] = {"%s/.build-id/%s", "%s/.build-id/%s.debug", "%s/%s"};
        for (int k = 0; k < 3 && fd < 0; k++) {
            if (k == 2 && (!base || !*base)) continue;
            int n = snprintf(p, sizeof p, fmt[k], dir, k == 2 ? base : hex);
            if (n > 0 && (size_t)n < sizeof p) fd = open_if_build(p, bid, blen);
        }
    }
    if (fd >= 0) *found = strdup(p);
    return fd;
}

/* Separate debug files: by build id under the search path and
 * /usr/lib/debug (libdwfl's debuginfo_path), else by .gnu_debuglink next to
 * the object, in its .debug folder, or under /usr/lib/debug. libdwfl's
 * standard search ends by asking debuginfod servers; this one never does. */
static int find_debuginfo(Dwfl_Module *m, void **userdata, const char *modname, Dwarf_Addr base,
                          const char *file_name, const char *debuglink, GElf_Word crc,
                          char **debuginfo_file_name)
{
    int fd = dwfl_build_id_find_debuginfo(m, userdata, modname, base, file_name, debuglink, crc,
                                          debuginfo_file_name);
    if (fd >= 0 || !file_name || !debuglink || strchr(debuglink, '/')) return fd;
    const char *slash = strrchr(file_name, '/');
    if (!slash) return -1;
    int dlen = (int)(slash - file_name);
    const unsigned char *want;
    GElf_Addr vaddr;
    int wlen = dwfl_module_build_id(m, &want, &vaddr);
    char path[4096];
    for (int i = 0; i < 3; i++) {
        static const char *const fmt[] = {"%.*s/%s", "%.*s/.debug/%s", "/usr/lib/debug%.*s/%s"};
        int n = snprintf(path, sizeof path, fmt[i], dlen, file_name, debuglink);
        if (n <= 0 || (size_t)n >= sizeof path || strcmp(path, file_name) == 0) continue;
        fd = open_if_build(path, want, wlen > 0 ? (size_t)wlen : 0);
        if (fd >= 0 && (*debuginfo_file_name = strdup(path))) return fd;
        if (fd >= 0) close(fd);
    }
    return -1;
}

/* ---- symbol tables ----------------------------------------------------- */

static int msym_better(const msym *a, const msym *b)
{
    return a->rank != b->rank ? a->rank > b->rank : strcmp(a->name, b->name) < 0;
}

/* Sorts v[0..n) by address, stably: a least-significant-digit radix sort,
 * one pass per byte that is not the same in every address. */
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

static void load_syms(build *b)
{
    int n = dwfl_module_getsymtab(b->mod);
    if (n <= 0) return;
    b->syms = malloc((size_t)n * sizeof *b->syms);
    msym *tmp = malloc((size_t)n * sizeof *tmp);
    if (!b->syms || !tmp) {
        free(b->syms);
        free(tmp);
        b->syms = NULL;
        return;
    }
    size_t k = 0;
    for (int i = 1; i < n; i++) {
        GElf_Sym sym;
        GElf_Addr addr;
        GElf_Word shndx;
        const char *name = dwfl_module_getsym_info(b->mod, i, &sym, &addr, &shndx, NULL, NULL);
        int type = GELF_ST_TYPE(sym.st_info), bind = GELF_ST_BIND(sym.st_info);
        if (!name || !*name || shndx == SHN_UNDEF || addr == 0) continue;
        if (type != STT_FUNC && type != STT_GNU_IFUNC && type != STT_NOTYPE) continue;
        b->syms[k++] = (msym){addr, sym.st_size, name,
                              bind == STB_GLOBAL ? 2
                              : bind == STB_WEAK ? 1
                                                 : 0};
    }
    sort_by_addr(b->syms, k, tmp);
    free(tmp);
    size_t w = 0; /* one name per address: the preferred one */
    for (size_t i = 0; i < k; i++) {
        if (w && b->syms[w - 1].addr == b->syms[i].addr) {
            if (msym_better(&b->syms[i], &b->syms[w - 1])) b->syms[w - 1] = b->syms[i];
        } else {
            b->syms[w++] = b->syms[i];
        }
    }
    b->nsyms = w;
}

/* The function containing a: the symbol at or below it whose size covers it,
 * else a sizeless one just below (hand-written assembly), else NULL. */
static const char *find_sym(const build *b, uint64_t a)
{
    size_t lo = 0, hi = b->nsyms; /* first symbol above a */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (b->syms[mid].addr <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0) return NULL;
    const msym *best = &b->syms[lo - 1];
    if (best->size == 0 || a < best->addr + best->size) return best->name;
    /* A symbol further down may enclose this one (a function and a smaller
     * label inside it); look a few back. */
    for (size_t i = lo - 1, k = 0; i-- > 0 && k < 8; k++)
        if (b->syms[i].size && a < b->syms[i].addr + b->syms[i].size) return b->syms[i].name;
    return NULL;
}

/* ---- builds ------------------------------------------------------------ */

static void build_free(build *b)
{
    if (b->dwfl) dwfl_end(b->dwfl);
    free(b->syms);
    free(b->path);
    free(b);
}

int hs_syms_new(hs_syms **out, const hs_syms_config *cfg)
{
    hs_syms *s = calloc(1, sizeof *s);
    if (!s) return HS_ENOMEM;
    elf_version(EV_CURRENT); /* before any elf_begin of ours */
    if (cfg) s->cfg = *cfg;
    s->paths = calloc((size_t)s->cfg.npaths + 1, sizeof *s->paths);
    for (int i = 0; s->paths && i < s->cfg.npaths; i++)
        if (!(s->paths[i] = strdup(s->cfg.paths[i]))) s->cfg.npaths = i;
    s->cfg.paths = (const char *const *)s->paths;
    if (!s->paths) {
        free(s);
        return HS_ENOMEM;
    }
    size_t len = 32;
    for (int i = 0; i < s->cfg.npaths; i++) len += strlen(s->cfg.paths[i]) + 1;
    if (!(s->debuginfo_path = malloc(len))) {
        hs_syms_free(s);
        return HS_ENOMEM;
    }
    /* a leading '-' would turn off libdwfl's CRC checks; a relative entry
     * is a folder next to the object, which find_debuginfo covers */
    char *p = s->debuginfo_path;
    *p = 0;
    for (int i = 0; i < s->cfg.npaths; i++) p += sprintf(p, "%s%s", i ? ":" : "", s->cfg.paths[i]);
    if (!s->cfg.no_local) sprintf(p, "%s/usr/lib/debug", s->cfg.npaths ? ":" : "");
    if (!s->debuginfo_path[0]) strcpy(s->debuginfo_path, "/nonexistent");
    s->cb.find_elf = dwfl_build_id_find_elf;
    s->cb.find_debuginfo = find_debuginfo;
    s->cb.debuginfo_path = &s->debuginfo_path;
    *out = s;
    return 0;
}

void hs_syms_free(hs_syms *s)
{
    if (!s) return;
    while (s->builds) {
        build *b = s->builds;
        s->builds = b->next;
        build_free(b);
    }
    for (int i = 0; i < NAMES_MAX; i++) free(s->names[i]);
    for (int i = 0; s->paths && i < s->cfg.npaths; i++) free(s->paths[i]);
    free(s->paths);
    free(s->debuginfo_path);
    free(s);
}

hs_syms_stats hs_syms_get_stats(const hs_syms *s)
{
    hs_syms_stats st = s->stats;
    st.builds_kept = 0;
    for (const build *b = s->builds; b; b = b->next) st.builds_kept++;
    return st;
}

/* Drops the least recently used builds past HS_SYMS_BUILDS_MAX. */
static void builds_trim(hs_syms *s)
{
    build **pp = &s->builds;
    for (int n = 0; *pp && n < HS_SYMS_BUILDS_MAX; n++) pp = &(*pp)->next;
    while (*pp) {
        build *b = *pp;
        *pp = b->next;
        build_free(b);
    }
}

static build *build_get(hs_syms *s, const uint8_t *bid, size_t blen, const char *path)
{
    for (build **pp = &s->builds; *pp; pp = &(*pp)->next) {
        build *b = *pp;
        if (b->blen != blen || (blen && memcmp(b->bid, bid, blen))) continue;
        if (!blen && strcmp(b->path, path ? path : "")) continue;
        *pp = b->next; /* most recently used first */
        if (!b->mod && time(NULL) - b->missing_at >= HS_SYMS_RETRY_S) {
            /* a file may have come since (heapstore symbols add) */
            build_free(b);
            break;
        }
        b->next = s->builds;
        s->builds = b;
        return b;
    }
    build *b = calloc(1, sizeof *b);
    if (!b || !(b->path = strdup(path ? path : ""))) {
        free(b);
        return NULL;
    }
    if (blen) memcpy(b->bid, bid, blen);
    b->blen = (uint32_t)blen;
    b->next = s->builds;
    s->builds = b;
    builds_trim(s);
    char *found = NULL;
    int fd = find_elf(s, bid, blen, path, &found);
    if (fd >= 0 && (b->dwfl = dwfl_begin(&s->cb))) {
        dwfl_report_begin(b->dwfl);
        /* base 0: Dwfl's addresses are the module's own (offsets for a
         * shared object, addresses for an executable), as collectors send */
        b->mod = dwfl_report_elf(b->dwfl, path && *path ? path : found, found, fd, 0, false);
        dwfl_report_end(b->dwfl, NULL, NULL);
        if (b->mod) {
            load_syms(b);
        } else {
            dwfl_end(b->dwfl);
            b->dwfl = NULL;
        }
    } else if (fd >= 0) {
        close(fd);
    }
    free(found);
    if (b->mod)
        s->stats.builds_opened++;
    else
        s->stats.builds_missing++;
    b->missing_at = time(NULL);
    return b;
}

/* ---- names ------------------------------------------------------------- */

/* Symbol tables of objects linked by newer binutils name versioned symbols
 * "malloc@@GLIBC_2.2.5"; keep the bare name so that a function has one name
 * whichever table it came from (and a mangled name can be demangled). */
static const char *unversioned(hs_syms *s, const char *name)
{
    const char *at = name ? strchr(name, '@') : NULL;
    if (!at || at == name) return name;
    size_t n = (size_t)(at - name);
    if (n >= sizeof s->bare) n = sizeof s->bare - 1;
    memcpy(s->bare, name, n);
    s->bare[n] = 0;
    return s->bare;
}

/* Keeps a copy of name (demangled when it is a C++ name) as names[k]. */
static const char *keep_name(hs_syms *s, int k, const char *name)
{
    free(s->names[k]);
    s->names[k] = NULL;
    name = unversioned(s, name);
    if (!name) return NULL;
    if (name[0] == '_' && name[1] == 'Z') {
        int status = 0;
        char *d = __cxa_demangle(name, NULL, NULL, &status);
        if (d && status == 0) return s->names[k] = d;
        free(d);
    }
    return s->names[k] = strdup(name);
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

/* The name of the function an inlined_subroutine DIE runs: its linkage name
 * (as the symbol tables name functions), else its plain name; both found
 * through DW_AT_abstract_origin and DW_AT_specification. */
static const char *inlined_raw_name(Dwarf_Die *die)
{
    Dwarf_Attribute at;
    const char *n = NULL;
    if (dwarf_attr_integrate(die, DW_AT_linkage_name, &at) ||
        dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &at))
        n = dwarf_formstring(&at);
    if (n) return n;
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

void hs_syms_set_cache(hs_syms *s, const hs_syms_cache *c)
{
    if (c)
        s->cache = *c;
    else
        memset(&s->cache, 0, sizeof s->cache);
}

static int lookup_file(hs_syms *s, const uint8_t *bid, size_t blen, const char *path, uint64_t off,
                       hs_symbol *out, int max);

int hs_syms_lookup(hs_syms *s, const uint8_t *bid, size_t blen, const char *path, uint64_t off,
                   hs_symbol *out, int max)
{
    assert(max >= 1);
    s->stats.lookups++;
    if (blen > HS_BUILD_ID_MAX) return 0;
    if (max > HS_SYMS_INLINE_MAX) max = HS_SYMS_INLINE_MAX;
    int n = blen && s->cache.get ? s->cache.get(s->cache.data, bid, blen, off, out, max) : 0;
    if (n > 0) {
        s->stats.cache_hits++;
        return n;
    }
    n = lookup_file(s, bid, blen, path, off, out, max);
    if (n > 0 && blen && s->cache.put) s->cache.put(s->cache.data, bid, blen, off, out, n);
    return n;
}

static int lookup_file(hs_syms *s, const uint8_t *bid, size_t blen, const char *path, uint64_t off,
                       hs_symbol *out, int max)
{
    build *b = build_get(s, bid, blen, path);
    if (!b || !b->mod) return 0;
    hs_symbol outer;
    memset(&outer, 0, sizeof outer);
    outer.function = outer.file = outer.module = str_of(NULL);
    Dwarf_Addr bias = 0;
    dwfl_module_getelf(b->mod, &bias);
    Dwarf_Addr a = (off ? off - 1 : 0) + bias; /* a return address: look at the call */
    outer.function = str_of(keep_name(s, HS_SYMS_INLINE_MAX, find_sym(b, a)));
    if (outer.function.len > HS_FUNC_MAX) outer.function.len = HS_FUNC_MAX;
    Dwfl_Line *line = dwfl_module_getsrc(b->mod, a);
    if (line) {
        int lineno = 0;
        outer.file = str_of(dwfl_lineinfo(line, NULL, &lineno, NULL, NULL, NULL));
        outer.line = lineno > 0 ? (uint64_t)lineno : 0;
    }
    Dwarf_Addr cbias = 0;
    Dwarf_Die *cu = outer.file.len ? dwfl_module_addrdie(b->mod, a, &cbias) : NULL;
    Dwarf_Die chain[SCOPE_MAX];
    int nc = cu ? scope_chain(cu, a - cbias, chain, 0, 0) : 0;
    /* from the innermost scope out: the inlined subroutines (lexical blocks
     * between them skipped) up to the subprogram that holds them */
    Dwarf_Die *inl[HS_SYMS_INLINE_MAX];
    int ninl = 0;
    for (int i = nc - 1; i >= 0 && ninl < max - 1; i--) {
        int tag = dwarf_tag(&chain[i]);
        if (tag == DW_TAG_subprogram) break;
        if (tag == DW_TAG_inlined_subroutine) inl[ninl++] = &chain[i];
    }
    Dwarf_Files *files = NULL;
    size_t nfiles = 0;
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
            const char *name = keep_name(s, k, inlined_raw_name(inl[k]));
            if (name) {
                f->function = str_of(name);
                if (f->function.len > HS_FUNC_MAX) f->function.len = HS_FUNC_MAX;
            }
        }
        if (k > 0) {
            Dwarf_Attribute at;
            Dwarf_Word file = 0, ln = 0;
            if (dwarf_formudata(dwarf_attr(inl[k - 1], DW_AT_call_file, &at), &file) != 0) file = 0;
            if (dwarf_formudata(dwarf_attr(inl[k - 1], DW_AT_call_line, &at), &ln) != 0) ln = 0;
            const char *fn = file < nfiles ? dwarf_filesrc(files, file, NULL, NULL) : NULL;
            f->file = str_of(fn);
            f->line = ln;
        }
    }
    return ninl + 1;
}

int hs_syms_file_build_id(const char *path, uint8_t *bid)
{
    elf_version(EV_CURRENT);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return HS_ENOENT;
    Elf *e = elf_begin(fd, ELF_C_READ_MMAP, NULL);
    int rc = HS_EINVAL; /* not an ELF file */
    const void *have;
    if (e && elf_kind(e) == ELF_K_ELF) {
        ssize_t n = dwelf_elf_gnu_build_id(e, &have);
        rc = n > 0 && n <= HS_BUILD_ID_MAX ? (int)n : 0;
        if (rc > 0) memcpy(bid, have, (size_t)n);
    }
    elf_end(e);
    close(fd);
    return rc;
}

int hs_syms_store_dir(char *out, size_t len, const char *db_path)
{
    int n = snprintf(out, len, "%s.symbols", db_path);
    return n > 0 && (size_t)n < len ? 0 : HS_ETOOBIG;
}

int hs_syms_store_file(char *out, size_t len, const char *db_path, const uint8_t *bid, size_t blen)
{
    char hex[2 * HS_BUILD_ID_MAX + 2];
    if (!blen || blen > HS_BUILD_ID_MAX) return HS_EINVAL;
    bid_hex(hex, bid, blen);
    int n = snprintf(out, len, "%s.symbols/.build-id/%s.debug", db_path, hex);
    return n > 0 && (size_t)n < len ? 0 : HS_ETOOBIG;
}

void hs_syms_forget(hs_syms *s, const uint8_t *bid, size_t blen)
{
    for (build **pp = &s->builds; *pp; pp = &(*pp)->next) {
        build *b = *pp;
        if (b->blen != blen || !blen || memcmp(b->bid, bid, blen)) continue;
        *pp = b->next;
        build_free(b);
        return;
    }
}

int hs_syms_available(hs_syms *s, const uint8_t *bid, size_t blen, const char *path)
{
    assert(blen > 0 && blen <= HS_BUILD_ID_MAX);
    for (const build *b = s->builds; b; b = b->next)
        if (b->blen == blen && !memcmp(b->bid, bid, blen)) {
            if (b->mod) return 1;
            break;
        }
    /* Only looked for: a build kept for each check would push the builds
     * in use out of the most recently used HS_SYMS_BUILDS_MAX. */
    char *found = NULL;
    int fd = find_elf(s, bid, blen, path, &found);
    free(found);
    if (fd < 0) return 0;
    close(fd);
    hs_syms_forget(s, bid, blen); /* "not found" no more: read at the next lookup */
    return 1;
}

/* ---- streams ----------------------------------------------------------- */

void hs_syms_stream_free(hs_syms_stream *st)
{
    for (size_t i = 0; i < st->n; i++) free(st->mods[i].path);
    free(st->mods);
    memset(st, 0, sizeof *st);
}

void hs_syms_stream_mappings(hs_syms_stream *st, const uint8_t *p, size_t len)
{
    hs_batch_it it;
    hs_mapping m;
    if (hs_mappings_begin(&it, p, len)) return;
    hs_syms_stream next = {0};
    int more;
    while ((more = hs_mappings_next(&it, &m)) == 1) {
        int dup = 0;
        for (size_t i = 0; i < next.n && !dup; i++)
            dup = strlen(next.mods[i].path) == m.path.len &&
                  !memcmp(next.mods[i].path, m.path.ptr, m.path.len);
        if (dup) continue;
        if (next.n == next.cap) {
            size_t cap = next.cap ? next.cap * 2 : 16;
            hs_syms_module *nm = realloc(next.mods, cap * sizeof *nm);
            if (!nm) break;
            next.mods = nm;
            next.cap = cap;
        }
        hs_syms_module *d = &next.mods[next.n];
        if (!(d->path = strndup(m.path.ptr ? m.path.ptr : "", m.path.len))) break;
        d->blen = m.build_id_len;
        d->missed = 0;
        if (m.build_id_len) memcpy(d->bid, m.build_id, m.build_id_len);
        next.n++;
    }
    if (more != 0) {
        hs_syms_stream_free(&next);
        return;
    }
    hs_syms_stream_free(st);
    *st = next;
}

static hs_syms_module *stream_module(hs_syms_stream *st, hs_str path)
{
    for (size_t i = 0; i < st->n; i++)
        if (strlen(st->mods[i].path) == path.len && !memcmp(st->mods[i].path, path.ptr, path.len))
            return &st->mods[i];
    return NULL;
}

/* One pass of hs_syms_rewrite into a buffer of cap bytes: 1, 0, HS_ETOOBIG
 * (the buffer is too small) or another error. */
static int rewrite_pass(hs_syms *s, hs_syms_stream *st, const uint8_t *p, size_t len, uint8_t *buf,
                        size_t cap, size_t *outlen, uint64_t *nresolved)
{
    hs_batch_it it;
    hs_symbol sym, fr[HS_SYMS_INLINE_MAX];
    hs_wr wr;
    char path[HS_STR_MAX + 1];
    hs_wr_init(&wr, buf, cap);
    int rc = hs_symbols_begin(&it, p, len), more, changed = 0;
    if (rc) return rc;
    *nresolved = 0;
    while ((more = hs_symbols_next(&it, &sym)) == 1) {
        hs_syms_module *m = NULL;
        int want = !sym.function.len && sym.module.len && hs_inl_pc_ok(sym.pc), n = 0;
        if (want) m = stream_module(st, sym.module);
        if (m) {
            n = hs_syms_lookup(s, m->bid, m->blen, m->path, sym.module_offset, fr,
                               HS_SYMS_INLINE_MAX);
            if (n == 0 && m->blen) m->missed = 1;
        } else if (want && sym.module.ptr[0] == '/' && sym.module.len < sizeof path) {
            /* no MAPPINGS seen for it (a stream resumed after a server
             * restart): the file at that path, whatever its build */
            memcpy(path, sym.module.ptr, sym.module.len);
            path[sym.module.len] = 0;
            n = hs_syms_lookup(s, NULL, 0, path, sym.module_offset, fr, HS_SYMS_INLINE_MAX);
        }
        if (want) ++*nresolved;
        if (n == 0 || (n == 1 && !fr[0].function.len)) {
            hs_symbol_put(&wr, &sym);
            continue;
        }
        changed = 1;
        for (int k = 0; k < n; k++) {
            fr[k].pc = k < n - 1 ? hs_inl_pc(sym.pc, k) : sym.pc;
            fr[k].module = sym.module;
            fr[k].module_offset = sym.module_offset;
            hs_symbol_put(&wr, &fr[k]);
        }
    }
    if (more < 0) return more;
    if (wr.err) return HS_ETOOBIG;
    *outlen = hs_wr_len(&wr);
    return changed;
}

int hs_syms_rewrite(hs_syms *s, hs_syms_stream *st, const uint8_t *p, size_t len, uint8_t **out,
                    size_t *outlen, uint64_t *nresolved)
{
    *out = NULL;
    *outlen = 0;
    *nresolved = 0;
    for (size_t cap = len * 4 + 4096;; cap *= 2) {
        if (cap > (size_t)HS_FRAME_MAX * 4) return HS_ETOOBIG;
        uint8_t *buf = malloc(cap);
        if (!buf) return HS_ENOMEM;
        int rc = rewrite_pass(s, st, p, len, buf, cap, outlen, nresolved);
        if (rc == 1) {
            *out = buf;
            return 1;
        }
        free(buf);
        if (rc != HS_ETOOBIG) return rc;
    }
}

/* hs_python: Python frames from the live interpreter (see hs_python.h). */
#include "hs_python.h"

#include <assert.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "hs_collector.h"
#include "hs_mem.h"
#include "hs_pymem.h"

/* ---- layouts ---------------------------------------------------------- */

enum { FR_OBJECT, FR_INTERP, FR_SHIM };   /* how frames chain, see walk() */
enum { LN_LNOTAB, LN_310, LN_LOCATIONS }; /* how a line is found */

#define NONE      0xffffffffu
#define OWNED_C   3   /* FRAME_OWNED_BY_CSTACK, 3.12 and 3.13 */
#define NAME_MAX_ 512 /* bytes kept of a qualified name */
#define FILE_MAX_ 1024

/* Offsets in bytes, from CPython's headers of each version (x86-64), or for
 * 3.13 from the interpreter's own _Py_DebugOffsets. */
typedef struct py_layout {
    int minor, frames, lines;
    uint32_t tss;        /* Py_tss_t autoTSSkey inside _PyRuntime */
    uint32_t ts_frame;   /* PyThreadState: frame, cframe or current_frame */
    uint32_t cframe_cur; /* _PyCFrame.current_frame, NONE when ts_frame is the frame */
    uint32_t f_prev, f_code, f_instr, f_owner, f_entry;
    uint32_t co_name, co_file, co_first, co_table, co_code;
    uint32_t s_ascii, s_compact, s_utf8len, s_utf8; /* unicode object sizes and fields */
} py_layout;

/* clang-format off */
static const py_layout layouts[] = {
    /* minor frames     lines         tss   ts  cframe prev code instr owner entry
     *   name file first table code  ascii compact utf8len utf8 */
    {8,  FR_OBJECT, LN_LNOTAB,    1392, 24, NONE,  24,  32,  104,  NONE, NONE,
         112, 104, 40, 120, 0,    48, 72, 48, 56},
    {9,  FR_OBJECT, LN_LNOTAB,     584, 24, NONE,  24,  32,  104,  NONE, NONE,
         112, 104, 40, 120, 0,    48, 72, 48, 56},
    {10, FR_OBJECT, LN_310,        584, 24, NONE,  24,  32,   96,  NONE, NONE,
         112, 104, 40, 120, 0,    48, 72, 48, 56},
    {11, FR_INTERP, LN_LOCATIONS,  592, 56, 8,     48,  32,   56,  69,   68,
         128, 112, 72, 136, 184,  48, 72, 48, 56},
    {12, FR_SHIM,   LN_LOCATIONS, 1544, 56, 0,      8,   0,   56,  70,   NONE,
         128, 112, 68, 136, 192,  40, 56, 40, 48},
    /* 3.13: everything but tss is replaced by the debug offsets */
    {13, FR_SHIM,   LN_LOCATIONS, 2160, 72, NONE,   8,   0,   56,  70,   NONE,
         128, 112, 68, 136, 200,  40, 56, 40, 48},
};
/* clang-format on */

/* The head of 3.13's _Py_DebugOffsets, the first member of _PyRuntime: our
 * own declaration of the fields we use, in the order CPython 3.13 puts them. */
typedef struct debug_offsets_313 {
    char cookie[8];
    uint64_t version, free_threaded;
    uint64_t runtime_state[3];
    uint64_t interpreter_state[13];
    struct {
        uint64_t size, prev, next, interp, current_frame, thread_id, native_thread_id,
            datastack_chunk, status;
    } thread_state;
    struct {
        uint64_t size, previous, executable, instr_ptr, localsplus, owner;
    } interpreter_frame;
    struct {
        uint64_t size, filename, name, qualname, linetable, firstlineno, argcount, localsplusnames,
            localspluskinds, co_code_adaptive;
    } code_object;
    uint64_t pyobject[2], type_object[4], tuple_object[3], list_object[3], dict_object[3],
        float_object[2], long_object[3], bytes_object[3];
    struct {
        uint64_t size, state, length, asciiobject_size;
    } unicode_object;
} debug_offsets_313;

#define MAX_INTERPS 4
#define MAX_EVAL    4

typedef struct py_interp {
    uintptr_t runtime, code_type;
    uintptr_t eval_lo[MAX_EVAL], eval_hi[MAX_EVAL];
    uintptr_t eval_min, eval_max; /* around all of them: most pcs are neither */
    int neval;
    int ok; /* a layout is known: walk its frames */
    py_layout L;
    uint32_t rt_fin; /* _PyRuntime's finalizing word (3.13: from the debug offsets) */
} py_interp;

static py_interp interps[MAX_INTERPS];
static _Atomic int ninterps;

/* Objects already looked at, by load address and name. */
#define MAX_SEEN 256
static struct {
    uintptr_t base;
    uint64_t name_hash;
} seen[MAX_SEEN];
static int nseen;
static hs_lock scan_lock;
static hs_lock loc_lock; /* inserts into the location table */

/* ---- reading interpreter memory without faulting ---------------------- */

static int mem_fd = -1;
static int use_vm = 1; /* process_vm_readv works; else pread(mem_fd) */

__thread int hs_py_gil_held __attribute__((tls_model("initial-exec")));

static _Atomic(hs_py_found_fn) on_found;

void hs_py_on_found(hs_py_found_fn fn)
{
    hs_py_found_fn none = NULL;
    /* Once: a second registration would be a second wrapper of the same
     * allocators. */
    int first = atomic_compare_exchange_strong(&on_found, &none, fn);
    assert(first || none == fn);
    (void)first;
}

/* 0 when all n bytes at src were read. With the GIL held (hs_py_gil_held)
 * the interpreter's objects are consistent and alive: plain loads. */
static int rd(void *dst, uintptr_t src, size_t n)
{
    if (!src || src + n < src) return -1;
    if (hs_py_gil_held) {
        memcpy(dst, (const void *)src, n);
        return 0;
    }
    if (use_vm) {
        struct iovec l = {dst, n}, r = {(void *)src, n};
        return process_vm_readv(hs__run.pid ? hs__run.pid : getpid(), &l, 1, &r, 1, 0) == (ssize_t)n
                   ? 0
                   : -1;
    }
    return mem_fd >= 0 && pread(mem_fd, dst, n, (off_t)src) == (ssize_t)n ? 0 : -1;
}

static int rd_ptr(uintptr_t *out, uintptr_t src)
{
    return rd(out, src, sizeof *out);
}

static void reader_init(void)
{
    static int done;
    if (done) return;
    done = 1;
    uint64_t probe = 0x1234, got = 0;
    if (rd(&got, (uintptr_t)&probe, sizeof got) == 0 && got == probe) return;
    use_vm = 0;
    mem_fd = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
}

void hs_py_fork_child(void)
{
    /* Nobody held them at the fork: it waits for samples and the sender's
     * cycle; reset them all the same, as hs_stacks does its own. */
    hs_lock_release(&scan_lock);
    hs_lock_release(&loc_lock);
    if (mem_fd >= 0) {
        close(mem_fd);
        mem_fd = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
    }
}

/* ---- finding interpreters --------------------------------------------- */

typedef struct syms {
    uintptr_t runtime, version, code_type;
    uintptr_t mem_get, mem_set; /* PyMem_GetAllocator, PyMem_SetAllocator */
    uintptr_t eval_lo[MAX_EVAL], eval_hi[MAX_EVAL];
    int neval, debug;
} syms;

static void sym_seen(syms *s, const char *name, uintptr_t addr, uint64_t size)
{
    if (name[0] == '_' && name[1] == 'P' && name[2] == 'y') {
        if (!strcmp(name, "_PyRuntime")) s->runtime = addr;
        if (!strncmp(name, "_PyEval_EvalFrameDefault", 24) && (name[24] == 0 || name[24] == '.') &&
            size && s->neval < MAX_EVAL) {
            for (int i = 0; i < s->neval; i++)
                if (s->eval_lo[i] == addr) return;
            s->eval_lo[s->neval] = addr;
            s->eval_hi[s->neval++] = addr + size;
        }
        if (!strcmp(name, "_Py_RefTotal") || !strcmp(name, "_Py_GetRefTotal") ||
            !strcmp(name, "_Py_GetGlobalRefTotal"))
            s->debug = 1;
    } else if (name[0] == 'P' && name[1] == 'y') {
        if (!strcmp(name, "Py_Version")) s->version = addr;
        if (!strcmp(name, "PyCode_Type")) s->code_type = addr;
        if (!strcmp(name, "PyMem_GetAllocator")) s->mem_get = addr;
        if (!strcmp(name, "PyMem_SetAllocator")) s->mem_set = addr;
    }
}

/* Reads the symbol tables of the ELF file at path (the dynamic one first:
 * an object that does not export the evaluation loop is no interpreter).
 * The file is mapped and its ELF64 tables read in place, every offset
 * checked against its size: no ELF library is loaded into the process. */
static int read_syms(const char *path, uintptr_t bias, syms *s)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) || st.st_size < (off_t)sizeof(Elf64_Ehdr)) {
        close(fd);
        return -1;
    }
    size_t size = (size_t)st.st_size;
    const uint8_t *f = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (f == MAP_FAILED) return -1;
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)f;
    int ok = !memcmp(eh->e_ident, ELFMAG, SELFMAG) && eh->e_ident[EI_CLASS] == ELFCLASS64 &&
             eh->e_shentsize == sizeof(Elf64_Shdr) && eh->e_shoff < size &&
             (size - eh->e_shoff) / sizeof(Elf64_Shdr) >= eh->e_shnum;
    const Elf64_Shdr *sh = ok ? (const Elf64_Shdr *)(f + eh->e_shoff) : NULL;
    for (int pass = 0; ok && pass < 2; pass++) {
        if (pass == 1 && !s->neval) break;
        for (unsigned k = 0; k < eh->e_shnum; k++) {
            const Elf64_Shdr *t = &sh[k];
            if (t->sh_type != (pass ? SHT_SYMTAB : SHT_DYNSYM) ||
                t->sh_entsize != sizeof(Elf64_Sym) || t->sh_link >= eh->e_shnum)
                continue;
            const Elf64_Shdr *strs = &sh[t->sh_link];
            if (t->sh_offset > size || t->sh_size > size - t->sh_offset || strs->sh_offset > size ||
                strs->sh_size > size - strs->sh_offset)
                continue;
            const Elf64_Sym *sym = (const Elf64_Sym *)(f + t->sh_offset);
            const char *str = (const char *)(f + strs->sh_offset);
            size_t n = t->sh_size / sizeof *sym;
            for (size_t i = 1; i < n; i++) {
                if (sym[i].st_shndx == SHN_UNDEF || sym[i].st_name >= strs->sh_size) continue;
                const char *name = str + sym[i].st_name;
                if (!memchr(name, 0, strs->sh_size - sym[i].st_name)) continue;
                if (name[0]) sym_seen(s, name, bias + sym[i].st_value, sym[i].st_size);
            }
        }
    }
    munmap((void *)f, size);
    return 0;
}

/* The minor version and build flavour from a name such as libpython3.9d.so
 * or python3.10: -1 when there is none, -2 for debug or free-threaded. */
static int minor_from_name(const char *path)
{
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    const char *p = strstr(b, "python3.");
    if (!p) return -1;
    p += 8;
    int m = 0, digits = 0;
    for (; *p >= '0' && *p <= '9' && digits < 3; p++, digits++) m = m * 10 + (*p - '0');
    if (!digits) return -1;
    if (*p == 'd' || *p == 't') return -2;
    return m;
}

static int setup_313(py_interp *ip)
{
    debug_offsets_313 d;
    if (rd(&d, ip->runtime, sizeof d) || memcmp(d.cookie, "xdebugpy", 8)) return -1;
    if ((d.version >> 16) != 0x030d || d.free_threaded) return -1;
    py_layout *L = &ip->L;
    L->ts_frame = (uint32_t)d.thread_state.current_frame;
    L->cframe_cur = NONE;
    L->f_prev = (uint32_t)d.interpreter_frame.previous;
    L->f_code = (uint32_t)d.interpreter_frame.executable;
    L->f_instr = (uint32_t)d.interpreter_frame.instr_ptr;
    L->f_owner = (uint32_t)d.interpreter_frame.owner;
    L->co_name = (uint32_t)d.code_object.qualname;
    L->co_file = (uint32_t)d.code_object.filename;
    L->co_first = (uint32_t)d.code_object.firstlineno;
    L->co_table = (uint32_t)d.code_object.linetable;
    L->co_code = (uint32_t)d.code_object.co_code_adaptive;
    L->s_ascii = (uint32_t)d.unicode_object.asciiobject_size;
    L->s_compact = L->s_ascii + 16;
    L->s_utf8len = L->s_ascii;
    L->s_utf8 = L->s_ascii + 8;
    ip->rt_fin = (uint32_t)d.runtime_state[1];
    /* Anything out of proportion means the offsets are not what we think. */
    uint32_t all[] = {L->ts_frame, L->f_prev,   L->f_code,   L->f_instr, L->f_owner, L->co_name,
                      L->co_file,  L->co_first, L->co_table, L->co_code, L->s_ascii};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i] > 4096) return -1;
    return 0;
}

static void add_interp(const char *path, const syms *s)
{
    int n = atomic_load_explicit(&ninterps, memory_order_relaxed);
    if (n >= MAX_INTERPS || !s->neval) return;
    py_interp *ip = &interps[n];
    memset(ip, 0, sizeof *ip);
    ip->runtime = s->runtime;
    ip->code_type = s->code_type;
    ip->neval = s->neval;
    memcpy(ip->eval_lo, s->eval_lo, sizeof ip->eval_lo);
    memcpy(ip->eval_hi, s->eval_hi, sizeof ip->eval_hi);
    ip->eval_min = UINTPTR_MAX;
    for (int j = 0; j < ip->neval; j++) {
        assert(ip->eval_lo[j] < ip->eval_hi[j]);
        if (ip->eval_lo[j] < ip->eval_min) ip->eval_min = ip->eval_lo[j];
        if (ip->eval_hi[j] > ip->eval_max) ip->eval_max = ip->eval_hi[j];
    }
    int minor = -1;
    uint64_t hex = 0;
    if (s->version && rd(&hex, s->version, sizeof hex) == 0 && (hex >> 24) == 3) {
        unsigned level = (hex >> 4) & 0xf; /* alphas and betas change layouts */
        minor = level >= 0xc ? (int)((hex >> 16) & 0xff) : -1;
    } else if (!s->version) {
        minor = minor_from_name(path);
    }
    if (s->debug || !s->code_type || !s->runtime) minor = -1;
    for (size_t i = 0; minor >= 0 && i < sizeof layouts / sizeof layouts[0]; i++) {
        if (layouts[i].minor != minor) continue;
        ip->L = layouts[i];
        /* _PyRuntime's finalizing word, checked on 3.8.18, 3.9.18, 3.10.13,
         * 3.11.2 and .7, 3.12.1: 3.8-3.10 open with four ints, 3.11 and
         * 3.12 with five (_initialized first) */
        ip->rt_fin = minor <= 10 ? 16 : 24;
        ip->ok = minor != 13 || setup_313(ip) == 0;
    }
    if (ip->ok) {
        /* The runtime has begun initialising once its thread-state key
         * exists (created by core initialisation in 3.8-3.11, by
         * _PyRuntime_Initialize, the first step of Py_Initialize and of
         * python's main, from 3.12 on). */
        struct {
            int init;
            pthread_key_t key;
        } tss = {1, 0};
        int started = rd(&tss, ip->runtime + ip->L.tss, sizeof tss) != 0 || tss.init != 0;
        hs_py_found_fn found = atomic_load_explicit(&on_found, memory_order_acquire);
        if (found)
            found((void *)s->mem_get, (void *)s->mem_set,
                  ip->rt_fin && ip->rt_fin < 4096 ? ip->runtime + ip->rt_fin : 0, started);
    }
    atomic_store_explicit(&ninterps, n + 1, memory_order_release);
}

static uint64_t str_hash(const char *p)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *p; p++) h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
    return h;
}

static int scan_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    const int *scan_exe = data;
    static char exe[4096];
    const char *path = info->dlpi_name;
    if (!path[0]) {
        if (!*scan_exe) return 0;
        if (!exe[0]) {
            ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
            exe[n > 0 ? n : 0] = 0;
        }
        path = exe;
    } else {
        /* Shared objects: only libpython carries an interpreter. */
        const char *b = strrchr(path, '/');
        if (strncmp(b ? b + 1 : path, "libpython", 9) != 0) return 0;
    }
    if (!path[0]) return 0;
    uint64_t h = str_hash(path);
    for (int i = 0; i < nseen; i++)
        if (seen[i].base == info->dlpi_addr && seen[i].name_hash == h) return 0;
    if (nseen == MAX_SEEN) return 0;
    seen[nseen].base = info->dlpi_addr;
    seen[nseen++].name_hash = h;
    syms s;
    memset(&s, 0, sizeof s);
    if (read_syms(path, info->dlpi_addr, &s) == 0) add_interp(path, &s);
    return 0;
}

/* Whether the main executable may hold an interpreter, asked once. Reading
 * its symbol tables costs milliseconds in a big program (git --version: 11.2
 * against 15.6 ms of CPU with it), which every profiled process would pay. An
 * interpreter exports _PyRuntime (python3 is linked with --export-dynamic;
 * libpython.so exports it too, and then the executable is read for nothing,
 * once), and the loader finds it without reading a file. libpython objects
 * are recognised by their names. Called from the constructor, under the
 * re-entry guard: what dlsym allocates goes to the real allocator. */
static int exe_may_hold_python(void)
{
    static int known, answer;
    if (!known) {
        answer = dlsym(RTLD_DEFAULT, "_PyRuntime") != NULL;
        known = 1;
    }
    return answer;
}

void hs_py_scan(void)
{
    hs_lock_acquire(&scan_lock);
    reader_init();
    int scan_exe = exe_may_hold_python();
    dl_iterate_phdr(scan_cb, &scan_exe);
    hs_lock_release(&scan_lock);
}

int hs_py_present(void)
{
    return atomic_load_explicit(&ninterps, memory_order_acquire) > 0;
}

/* ---- interned locations ----------------------------------------------- */

typedef struct py_loc {
    uint64_t hash;
    uintptr_t code, name, file, table;
    int32_t first, off, line;
    uint16_t name_len, file_len;
    char text[]; /* the name, then the file, not terminated */
} py_loc;

#define LOC_SLOTS   (1u << 18)
#define LOC_MEM_MAX (64u << 20)
static _Atomic(py_loc *) *loc_slot; /* mapped at the first insert */
static uint32_t loc_count;
static size_t loc_mem;
static hs_arena loc_arena;

static uint64_t loc_hash(const py_loc *k)
{
    uint64_t v[] = {k->code, k->name, k->file, k->table,
                    (uint64_t)(uint32_t)k->first << 32 | (uint32_t)k->off};
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 5; i++) {
        h ^= v[i];
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    return h;
}

static int loc_same(const py_loc *a, const py_loc *b)
{
    return a->hash == b->hash && a->code == b->code && a->name == b->name && a->file == b->file &&
           a->table == b->table && a->first == b->first && a->off == b->off;
}

static py_loc *loc_find(const py_loc *k)
{
    _Atomic(py_loc *) *slots = atomic_load_explicit(&loc_slot, memory_order_acquire);
    if (!slots) return NULL;
    for (uint32_t i = (uint32_t)k->hash & (LOC_SLOTS - 1), probes = 0; probes < LOC_SLOTS;
         i = (i + 1) & (LOC_SLOTS - 1), probes++) {
        py_loc *r = atomic_load_explicit(&slots[i], memory_order_acquire);
        if (!r) return NULL;
        if (loc_same(r, k)) return r;
    }
    return NULL;
}

/* A copy of k with its strings, or NULL when the table is full. */
static py_loc *loc_insert(const py_loc *k, const char *name, const char *file)
{
    py_loc *r = NULL;
    hs_lock_acquire(&loc_lock);
    if (!loc_slot) {
        void *m = hs_mem_map(LOC_SLOTS * sizeof(void *));
        if (!m) goto out;
        atomic_store_explicit(&loc_slot, m, memory_order_release);
    }
    if ((r = loc_find(k))) goto out;
    size_t sz = sizeof *r + k->name_len + k->file_len;
    if (loc_count + 1 > LOC_SLOTS / 4 * 3 || loc_mem + sz > LOC_MEM_MAX) goto out;
    if (!(r = hs_arena_alloc(&loc_arena, sz))) goto out;
    loc_mem += sz;
    *r = *k;
    memcpy(r->text, name, k->name_len);
    memcpy(r->text + k->name_len, file, k->file_len);
    uint32_t i = (uint32_t)k->hash & (LOC_SLOTS - 1);
    while (atomic_load_explicit(&loc_slot[i], memory_order_relaxed)) i = (i + 1) & (LOC_SLOTS - 1);
    atomic_store_explicit(&loc_slot[i], r, memory_order_release);
    loc_count++;
out:
    hs_lock_release(&loc_lock);
    return r;
}

/* ---- strings and line tables ------------------------------------------ */

static size_t put_utf8(char *out, size_t room, uint32_t c)
{
    if (c < 0x80 && room >= 1) {
        out[0] = (char)c;
        return 1;
    }
    if (c < 0x800 && room >= 2) {
        out[0] = (char)(0xc0 | c >> 6);
        out[1] = (char)(0x80 | (c & 0x3f));
        return 2;
    }
    if (c < 0x10000 && room >= 3) {
        out[0] = (char)(0xe0 | c >> 12);
        out[1] = (char)(0x80 | ((c >> 6) & 0x3f));
        out[2] = (char)(0x80 | (c & 0x3f));
        return 3;
    }
    if (c < 0x110000 && room >= 4) {
        out[0] = (char)(0xf0 | c >> 18);
        out[1] = (char)(0x80 | ((c >> 12) & 0x3f));
        out[2] = (char)(0x80 | ((c >> 6) & 0x3f));
        out[3] = (char)(0x80 | (c & 0x3f));
        return 4;
    }
    return 0;
}

/* The UTF-8 text of the str object at p, at most max bytes; -1 when it is
 * not a compact str. */
static int read_str(const py_layout *L, uintptr_t p, char *out, size_t max)
{
    uint8_t h[80];
    /* An ASCII str's header is s_ascii bytes (its text follows): read the
     * rest of a compact one's only when it is not ASCII. */
    if (L->s_compact > sizeof h || L->s_ascii < 40 || L->s_utf8 + 8 > L->s_compact ||
        L->s_utf8len + 8 > L->s_compact || rd(h, p, L->s_ascii))
        return -1;
    uint64_t len;
    uint32_t state;
    memcpy(&len, h + 16, 8);
    memcpy(&state, h + 32, 4);
    unsigned kind = (state >> 2) & 7, compact = (state >> 5) & 1, ascii = (state >> 6) & 1;
    if (!compact || (kind != 1 && kind != 2 && kind != 4) || len > (1u << 20)) return -1;
    if (ascii) {
        size_t n = len < max ? (size_t)len : max;
        return rd(out, p + L->s_ascii, n) ? -1 : (int)n;
    }
    if (rd(h + L->s_ascii, p + L->s_ascii, L->s_compact - L->s_ascii)) return -1;
    uint64_t ulen;
    uintptr_t u;
    memcpy(&ulen, h + L->s_utf8len, 8);
    memcpy(&u, h + L->s_utf8, 8);
    if (u) {
        size_t n = ulen < max ? (size_t)ulen : max;
        if (rd(out, u, n)) return -1;
        /* Cut whole characters only: names are stored and shown as UTF-8. */
        if (n < ulen) {
            size_t k = n;
            while (k > 0 && ((uint8_t)out[k - 1] & 0xc0) == 0x80) k--;
            if (k > 0 && (uint8_t)out[k - 1] >= 0xc0) k--;
            size_t whole = k, need = 0;
            if (k < n) {
                uint8_t lead = (uint8_t)out[k];
                need = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : 2;
                if (n - k >= need) whole = k + need;
            }
            n = whole;
        }
        return (int)n;
    }
    uint8_t raw[256];
    size_t o = 0;
    uintptr_t src = p + L->s_compact;
    for (uint64_t i = 0; i < len && o < max;) {
        size_t chunk = (size_t)(len - i) * kind;
        if (chunk > sizeof raw) chunk = sizeof raw / kind * kind;
        if (rd(raw, src + i * kind, chunk)) return -1;
        for (size_t j = 0; j < chunk && o < max; j += kind, i++) {
            uint32_t c = raw[j];
            if (kind == 2) {
                uint16_t c2;
                memcpy(&c2, raw + j, 2);
                c = c2;
            } else if (kind == 4) {
                memcpy(&c, raw + j, 4);
            }
            size_t w = put_utf8(out + o, max - o, c);
            if (!w) return (int)o;
            o += w;
        }
    }
    return (int)o;
}

/* Bytes of a line table, read from the interpreter a chunk at a time. */
typedef struct tbl {
    uintptr_t src;
    uint64_t left;
    uint8_t buf[256];
    uint32_t pos, len;
    int err;
} tbl;

#define TABLE_MAX (1u << 20)

static int tbl_open(tbl *t, uintptr_t bytes_obj)
{
    uint64_t size;
    if (rd(&size, bytes_obj + 16, 8) || size > TABLE_MAX) return -1;
    t->src = bytes_obj + 32; /* PyBytesObject.ob_sval, 3.8 to 3.13 */
    t->left = size;
    t->pos = t->len = 0;
    t->err = 0;
    return 0;
}

/* The next byte, or -1 at the end (or after a failed read). */
static int tbl_get(tbl *t)
{
    if (t->pos == t->len) {
        if (!t->left || t->err) return -1;
        uint32_t n = t->left < sizeof t->buf ? (uint32_t)t->left : (uint32_t)sizeof t->buf;
        if (rd(t->buf, t->src, n)) {
            t->err = 1;
            return -1;
        }
        t->src += n;
        t->left -= n;
        t->pos = 0;
        t->len = n;
    }
    return t->buf[t->pos++];
}

static int tbl_varint(tbl *t)
{
    int b = tbl_get(t);
    if (b < 0) return 0;
    unsigned v = (unsigned)b & 63, shift = 0;
    while ((b & 64) && shift < 24) {
        if ((b = tbl_get(t)) < 0) return 0;
        shift += 6;
        v |= ((unsigned)b & 63) << shift;
    }
    return (int)v;
}

static int tbl_svarint(tbl *t)
{
    unsigned v = (unsigned)tbl_varint(t);
    return v & 1 ? -(int)(v >> 1) : (int)(v >> 1);
}

/* The line of instruction off (3.8/3.9: byte offset of the last instruction;
 * 3.10: index of it; 3.11+: index of the code unit) in the code's table. */
static int32_t find_line(int kind, tbl *t, int32_t first, int32_t off)
{
    int32_t line = first;
    if (off < 0) return first;
    if (kind == LN_LNOTAB) {
        int32_t addr = 0;
        for (int a, b; (a = tbl_get(t)) >= 0 && (b = tbl_get(t)) >= 0;) {
            addr += a;
            if (addr > off) break;
            line += (int8_t)b;
        }
        return line;
    }
    if (kind == LN_310) {
        int32_t end = 0, addr = off * 2;
        for (int a, b; (a = tbl_get(t)) >= 0 && (b = tbl_get(t)) >= 0;) {
            int32_t start = end;
            end += a;
            if (b != 0x80) line += (int8_t)b;
            if (addr >= start && addr < end) return line;
        }
        return line;
    }
    int32_t addr = 0;
    for (int b; (b = tbl_get(t)) >= 0;) {
        if (!(b & 0x80)) break;
        int code = (b >> 3) & 15, len = (b & 7) + 1, delta = 0;
        if (code == 14) {
            delta = tbl_svarint(t);
            tbl_varint(t);
            tbl_varint(t);
            tbl_varint(t);
        } else if (code == 13) {
            delta = tbl_svarint(t);
        } else if (code >= 10 && code <= 12) {
            delta = code - 10;
            tbl_get(t);
            tbl_get(t);
        } else if (code < 10) {
            tbl_get(t);
        }
        line += delta;
        if (off < addr + len) return line;
        addr += len;
    }
    return line;
}

/* What a location needs of its code object. */
typedef struct code_hdr {
    uintptr_t type, name, file, table;
    int32_t first;
} code_hdr;

/* The fields a code object's location needs lie in [lo, hi) (ob_type apart). */
static void code_span(const py_layout *L, uint32_t *lo, uint32_t *hi)
{
    uint32_t f[] = {L->co_name, L->co_file, L->co_table, L->co_first};
    *lo = f[0];
    *hi = f[0] + 8;
    for (int i = 1; i < 4; i++) {
        if (f[i] < *lo) *lo = f[i];
        if (f[i] + 8 > *hi) *hi = f[i] + 8;
    }
}

#define SPAN_MAX 120

static void code_parse(const py_layout *L, uint32_t lo, uintptr_t type, const uint8_t *span,
                       code_hdr *h)
{
    h->type = type;
    memcpy(&h->name, span + L->co_name - lo, 8);
    memcpy(&h->file, span + L->co_file - lo, 8);
    memcpy(&h->table, span + L->co_table - lo, 8);
    memcpy(&h->first, span + L->co_first - lo, 4);
}

static int code_read(const py_layout *L, uintptr_t code, code_hdr *h)
{
    uint32_t lo, hi;
    code_span(L, &lo, &hi);
    uint8_t span[SPAN_MAX];
    uintptr_t type;
    if (hi - lo > sizeof span || rd(&type, code + 8, 8) || rd(span, code + lo, hi - lo)) return -1;
    code_parse(L, lo, type, span, h);
    return 0;
}

/* Each thread's last locations by (code object, instruction), in front of
 * the interned table (whose hash and probe cost more than the walk's loads).
 * An entry is used only when the code object's fields, just read, are the
 * record's: a code object freed and another made at its address is not
 * taken for it. */
#define MEMO 64
typedef struct loc_memo {
    uintptr_t code;
    int32_t off;
    py_loc *loc;
} loc_memo;
static __thread loc_memo memo[MEMO] __attribute__((tls_model("initial-exec")));

/* The interned location of (code object, instruction), or NULL. */
static py_loc *locate(const py_interp *ip, uintptr_t code, const code_hdr *h, uintptr_t instr,
                      int32_t lasti)
{
    const py_layout *L = &ip->L;
    if (h->type != ip->code_type) return NULL;
    int32_t off = lasti;
    if (L->co_code) {
        intptr_t d = (intptr_t)(instr - (code + L->co_code));
        off = d < 0 || d > (intptr_t)INT32_MAX ? -1 : (int32_t)(d / 2);
    }
    loc_memo *m = &memo[((code >> 4) ^ (code >> 12) ^ (uint32_t)off * 0x9e3779b1u) % MEMO];
    py_loc *r = m->loc;
    if (r && m->code == code && m->off == off && r->name == h->name && r->file == h->file &&
        r->table == h->table && r->first == h->first)
        return r;
    py_loc k;
    memset(&k, 0, sizeof k);
    k.code = code;
    k.name = h->name;
    k.file = h->file;
    k.table = h->table;
    k.first = h->first;
    k.off = off;
    k.hash = loc_hash(&k);
    if ((r = loc_find(&k))) goto found;
    char name[NAME_MAX_], file[FILE_MAX_];
    int nn = read_str(L, k.name, name, sizeof name);
    int fn = read_str(L, k.file, file, sizeof file);
    if (nn < 0 || fn < 0) return NULL;
    k.name_len = (uint16_t)nn;
    k.file_len = (uint16_t)fn;
    tbl t;
    k.line = k.first;
    if (tbl_open(&t, k.table) == 0) k.line = find_line(L->lines, &t, k.first, k.off);
    if (!(r = loc_insert(&k, name, file))) return NULL;
found:
    *m = (loc_memo){code, k.off, r};
    return r;
}

/* ---- walking the thread's Python stack -------------------------------- */

/* Reads are system calls (a few hundred ns on bare metal, microseconds in a
 * VM), so a walk makes few: frames from 3.11 on lie in the thread's data
 * stack, each caller below its callee, and one read of up to a page (never
 * below the page of the frame asked for, which is mapped if the frame is)
 * serves the frames under it; the code objects of a batch of frames are read
 * in one process_vm_readv. */
typedef struct frame_win {
    uintptr_t lo, hi;
    uint8_t buf[2048];
} frame_win;

static int win_read(frame_win *w, int contiguous, void *dst, uintptr_t src, size_t n)
{
    if (hs_py_gil_held) return rd(dst, src, n); /* loads: a window saves nothing */
    if (src >= w->lo && src + n <= w->hi) {
        memcpy(dst, w->buf + (src - w->lo), n);
        return 0;
    }
    uintptr_t end = src + n, page = src & ~(uintptr_t)4095;
    uintptr_t lo = end - page > sizeof w->buf ? end - sizeof w->buf : page;
    if (contiguous && end - lo > n && lo <= src && rd(w->buf, lo, end - lo) == 0) {
        w->lo = lo;
        w->hi = end;
        memcpy(dst, w->buf + (src - lo), n);
        return 0;
    }
    return rd(dst, src, n);
}

#define BATCH 16 /* frames whose code objects one read fetches (stack use) */

typedef struct pend {
    uintptr_t code, instr;
    int32_t lasti;
    int seg; /* the first frame of its evaluation-loop invocation */
} pend;

/* Turns a batch of frames into synthetic pcs at out[cap - 1 - *n] downward.
 * Returns 0, or -1 when a frame could not be read (the walk ends there). */
static int resolve(const py_interp *ip, const pend *p, int np, uint64_t *out, uint32_t cap,
                   uint32_t *n)
{
    const py_layout *L = &ip->L;
    uint32_t lo, hi;
    code_span(L, &lo, &hi);
    if (hi - lo > SPAN_MAX) return -1;
    uint8_t span[BATCH][SPAN_MAX];
    uintptr_t type[BATCH];
    int done = 0;
    if (use_vm && !hs_py_gil_held) {
        struct iovec l[2 * BATCH], r[2 * BATCH];
        for (int i = 0; i < np; i++) {
            l[2 * i] = (struct iovec){&type[i], 8};
            r[2 * i] = (struct iovec){(void *)(p[i].code + 8), 8};
            l[2 * i + 1] = (struct iovec){span[i], hi - lo};
            r[2 * i + 1] = (struct iovec){(void *)(p[i].code + lo), hi - lo};
        }
        ssize_t got = process_vm_readv(hs__run.pid ? hs__run.pid : getpid(), l,
                                       (unsigned long)(2 * np), r, (unsigned long)(2 * np), 0);
        done = got > 0 ? (int)((size_t)got / (8 + hi - lo)) : 0;
    }
    for (int i = 0; i < np; i++) {
        code_hdr h;
        if (i < done)
            code_parse(L, lo, type[i], span[i], &h);
        else if (code_read(L, p[i].code, &h))
            return -1;
        py_loc *loc = locate(ip, p[i].code, &h, p[i].instr, p[i].lasti);
        if (!loc) {
            /* 3.13 frames whose executable is not code (none so far run
             * Python) are skipped; anything else ends the walk. */
            if (L->frames == FR_SHIM) continue;
            return -1;
        }
        out[cap - 1 - (*n)++] = HS_PY_PC_TAG | (uint64_t)(uintptr_t)loc | (p[i].seg ? 1u : 0u);
    }
    return 0;
}

/* The thread-state key each interpreter last had, plus 1 (0: none yet). */
static _Atomic unsigned tss_key1[MAX_INTERPS];

/* With process_vm_readv, the key's word and the thread state's frame in one
 * call: the key last seen gives the thread state, and the word read with it
 * says whether that key is still the interpreter's (else the caller reads
 * them one after the other). tss points to the {int init; key} pair. */
static int ts_frame_known(const py_interp *ip, void *tss, uintptr_t *ts, uintptr_t *f)
{
    unsigned k1 = atomic_load_explicit(&tss_key1[ip - interps], memory_order_relaxed);
    if (hs_py_gil_held || !use_vm || !k1) return 0;
    pthread_key_t key = (pthread_key_t)(k1 - 1);
    uintptr_t t = (uintptr_t)pthread_getspecific(key);
    if (!t) return 0;
    struct {
        int init;
        pthread_key_t key;
    } got;
    _Static_assert(sizeof got == 8, "Py_tss_t is an int and a pthread_key_t");
    struct iovec l[2] = {{&got, sizeof got}, {f, 8}};
    struct iovec r[2] = {{(void *)(ip->runtime + ip->L.tss), sizeof got},
                         {(void *)(t + ip->L.ts_frame), 8}};
    if (process_vm_readv(hs__run.pid ? hs__run.pid : getpid(), l, 2, r, 2, 0) != 16 ||
        got.init != 1 || got.key != key)
        return 0;
    memcpy(tss, &got, sizeof got);
    *ts = t;
    return 1;
}

/* Writes the thread's Python frames, innermost first, at out[cap - 1],
 * out[cap - 2], ... (at most max). Each is a synthetic pc whose bit 0 says
 * the frame is the first its evaluation-loop invocation ran (the innermost
 * frame of the next invocation follows). Returns the count, or -1 when the
 * thread's state could not be read at all; *partial is set when the walk
 * stopped at a frame it could not read. */
static int walk(const py_interp *ip, uint64_t *out, uint32_t cap, uint32_t max, int *partial)
{
    const py_layout *L = &ip->L;
    /* Through rd as well: the object that had this evaluation loop may have
     * been unloaded and its addresses given to another since the sender last
     * looked. */
    struct {
        int init;
        pthread_key_t key;
    } tss;
    uintptr_t ts = 0, f = 0;
    if (!ts_frame_known(ip, &tss, &ts, &f)) {
        if (rd(&tss, ip->runtime + L->tss, sizeof tss) || tss.init != 1) return -1;
        ts = (uintptr_t)pthread_getspecific(tss.key);
        if (!ts || rd_ptr(&f, ts + L->ts_frame)) return -1;
        atomic_store_explicit(&tss_key1[ip - interps], (unsigned)tss.key + 1, memory_order_relaxed);
    }
    if (L->cframe_cur != NONE && f && rd_ptr(&f, f + L->cframe_cur)) return -1;
    uint32_t n = 0, need = L->f_instr + 8;
    if (L->f_owner != NONE && L->f_owner + 1 > need) need = L->f_owner + 1;
    if (need > 128) return -1;
    frame_win w;
    w.lo = w.hi = 0;
    pend p[BATCH];
    int np = 0;
    for (uint32_t steps = 0; f && n + (uint32_t)np < max; steps++) {
        uint8_t fr[128];
        if (steps > max + 64 || win_read(&w, L->frames != FR_OBJECT, fr, f, need)) {
            *partial = 1;
            break;
        }
        uintptr_t prev;
        memcpy(&prev, fr + L->f_prev, 8);
        if (L->frames == FR_SHIM && fr[L->f_owner] == OWNED_C) {
            if (np)
                p[np - 1].seg = 1;
            else if (n)
                out[cap - n] |= 1;
            f = prev;
            continue;
        }
        pend *e = &p[np++];
        memcpy(&e->code, fr + L->f_code, 8);
        e->instr = 0;
        e->lasti = -1;
        if (L->frames == FR_OBJECT)
            memcpy(&e->lasti, fr + L->f_instr, 4);
        else
            memcpy(&e->instr, fr + L->f_instr, 8);
        e->seg = L->frames == FR_OBJECT || (L->frames == FR_INTERP && fr[L->f_entry]);
        f = prev;
        if (np == BATCH) {
            if (resolve(ip, p, np, out, cap, &n)) {
                *partial = 1;
                return (int)n;
            }
            np = 0;
        }
    }
    if (np && resolve(ip, p, np, out, cap, &n)) *partial = 1;
    if (f && n == max) *partial = 1;
    return (int)n;
}

static uintptr_t ld_ptr(uintptr_t p)
{
    uintptr_t v;
    memcpy(&v, (const void *)p, sizeof v);
    return v;
}

/* walk() with the GIL held (hs_py_gil_held): the thread's frames, their
 * code objects and the runtime's key are consistent and alive, and are read
 * with plain loads, one frame at a time (no window, no batch). The bounds
 * are walk()'s. */
static int walk_direct(const py_interp *ip, uint64_t *out, uint32_t cap, uint32_t max, int *partial)
{
    const py_layout *L = &ip->L;
    struct {
        int init;
        pthread_key_t key;
    } tss;
    memcpy(&tss, (const void *)(ip->runtime + L->tss), sizeof tss);
    if (tss.init != 1) return -1;
    uintptr_t ts = (uintptr_t)pthread_getspecific(tss.key);
    if (!ts) return -1;
    uintptr_t f = ld_ptr(ts + L->ts_frame);
    if (L->cframe_cur != NONE && f) f = ld_ptr(f + L->cframe_cur);
    uint32_t n = 0;
    for (uint32_t steps = 0; f && n < max; steps++) {
        if (steps > max + 64) {
            *partial = 1;
            break;
        }
        const uint8_t *fr = (const uint8_t *)f;
        f = ld_ptr((uintptr_t)fr + L->f_prev);
        if (L->frames == FR_SHIM && fr[L->f_owner] == OWNED_C) {
            if (n) out[cap - n] |= 1;
            continue;
        }
        uintptr_t code = ld_ptr((uintptr_t)fr + L->f_code), instr = 0;
        int32_t lasti = -1;
        if (L->frames == FR_OBJECT)
            memcpy(&lasti, fr + L->f_instr, 4);
        else
            instr = ld_ptr((uintptr_t)fr + L->f_instr);
        int seg = L->frames == FR_OBJECT || (L->frames == FR_INTERP && fr[L->f_entry]);
        py_loc *loc = NULL;
        if (code) {
            const uint8_t *co = (const uint8_t *)code;
            code_hdr h;
            h.type = ld_ptr(code + 8);
            memcpy(&h.name, co + L->co_name, 8);
            memcpy(&h.file, co + L->co_file, 8);
            memcpy(&h.table, co + L->co_table, 8);
            memcpy(&h.first, co + L->co_first, 4);
            loc = locate(ip, code, &h, instr, lasti);
        }
        if (!loc) {
            if (L->frames == FR_SHIM) continue; /* as in resolve() */
            *partial = 1;
            return (int)n;
        }
        out[cap - 1 - n++] = HS_PY_PC_TAG | (uint64_t)(uintptr_t)loc | (seg ? 1u : 0u);
    }
    if (f && n == max) *partial = 1;
    return (int)n;
}

static const py_interp *eval_owner(uintptr_t pc, int n)
{
    uintptr_t a = pc - 1; /* a return address: look at the call */
    for (int i = 0; i < n; i++) {
        if (a < interps[i].eval_min || a >= interps[i].eval_max) continue;
        for (int j = 0; j < interps[i].neval; j++)
            if (a >= interps[i].eval_lo[j] && a < interps[i].eval_hi[j]) return &interps[i];
    }
    return NULL;
}

/* hs_py_merge for a stack that runs through no evaluation loop (start-up,
 * finalization, a thread running no Python code): the native frames as
 * they are; the thread's Python state is not read at all. */
static __attribute__((noinline)) uint32_t native_only(uint64_t *out, uint32_t cap,
                                                      void *const *native, uint32_t n,
                                                      uint32_t native_max, int native_full,
                                                      int *truncated)
{
    uint32_t lim = native_max < cap ? native_max : cap, d = 0;
    for (; d < n && d < lim; d++) out[d] = (uint64_t)(uintptr_t)native[d];
    if (d < n || native_full) *truncated = 1;
    return d;
}

uint32_t hs_py_merge(uint64_t *out, uint32_t cap, void *const *native, uint32_t n,
                     uint32_t native_max, int native_full, int *truncated)
{
    int ni = atomic_load_explicit(&ninterps, memory_order_acquire);
    const py_interp *ip = NULL;
    for (uint32_t i = 0; i < n && !ip; i++) ip = eval_owner((uintptr_t)native[i], ni);
    if (!ip) return native_only(out, cap, native, n, native_max, native_full, truncated);
    uint32_t npy = 0;
    int partial = 0, got = -1;
    if (ip->ok) {
        uint32_t pymax = cap - (native_max < cap / 2 ? native_max : cap / 2);
        got = hs_py_gil_held ? walk_direct(ip, out, cap, pymax, &partial)
                             : walk(ip, out, cap, pymax, &partial);
    }
    if (got <= 0 || partial) hs__drop_add(HS_DROP_PYTHON_FALLBACK, 1);
    if (partial) *truncated = 1;
    if (got > 0) {
        npy = (uint32_t)got;
        /* innermost first from out[cap - npy] on */
        for (uint32_t a = cap - npy, b = cap - 1; a < b; a++, b--) {
            uint64_t t = out[a];
            out[a] = out[b];
            out[b] = t;
        }
    }
    uint32_t lim = native_max < cap - npy ? native_max : cap - npy;
    uint32_t o = 0, r = cap - npy, kept = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t pc = (uint64_t)(uintptr_t)native[i];
        if (r < cap && eval_owner(pc, ni) == ip) {
            for (;;) {
                uint64_t v = out[r++];
                out[o++] = v & ~(uint64_t)1;
                if ((v & 1) || r == cap) break;
            }
            continue;
        }
        assert(o <= r);
        if (kept < lim) {
            out[o++] = pc;
            kept++;
        } else {
            *truncated = 1;
        }
    }
    /* Frames whose evaluation loop was not seen (deeper than the unwinding
     * went, or in a part of it we do not know) are the outermost ones. */
    while (r < cap) out[o++] = out[r++] & ~(uint64_t)1;
    if (native_full) *truncated = 1;
    return o;
}

void hs_py_symbol(uint64_t pc, hs_symbol *out)
{
    const py_loc *l = (const py_loc *)(uintptr_t)(pc & ~HS_PY_PC_TAG);
    memset(out, 0, sizeof *out);
    out->pc = pc;
    out->function = (hs_str){l->text, l->name_len};
    out->file = (hs_str){l->text + l->name_len, l->file_len};
    out->line = l->line > 0 ? (uint64_t)l->line : 0;
    out->module = (hs_str){"", 0};
}

/* hs_pymem: wrappers of Python's object allocator (see hs_pymem.h). */
#include "hs_pymem.h"

#include <assert.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hs_collector.h"
#include "hs_mem.h"
#include "hs_python.h"
#include "hs_thread.h"

/* CPython's PyMemAllocatorEx (3.5 and later) and its domains. */
typedef struct py_alloc {
    void *ctx;
    void *(*malloc)(void *ctx, size_t size);
    void *(*calloc)(void *ctx, size_t nelem, size_t elsize);
    void *(*realloc)(void *ctx, void *ptr, size_t new_size);
    void (*free)(void *ctx, void *ptr);
} py_alloc;

enum { DOMAIN_MEM = 1, DOMAIN_OBJ = 2 };

typedef void (*get_fn)(int domain, py_alloc *out);
typedef void (*set_fn)(int domain, py_alloc *in);

/* The originals, written once before the wrappers are installed and never
 * again: index 0 is PYMEM_DOMAIN_MEM, 1 PYMEM_DOMAIN_OBJ. */
static py_alloc orig[2];
static _Atomic int state;
/* The malloc hooks' slow paths (hs__pymem_init). */
static hs_pymem_hooks hooks;

/* The word that turns non-zero when the interpreter's teardown begins; once
 * seen, the wrappers look at a zero of ours instead. */
static const _Atomic uintptr_t zero;
static _Atomic(const _Atomic uintptr_t *) fin_word = &zero;

int hs__pymem_state(void)
{
    return atomic_load_explicit(&state, memory_order_relaxed);
}

__attribute__((noinline, cold)) static void main_ended(void)
{
    atomic_store_explicit(&fin_word, &zero, memory_order_relaxed);
    if (!atomic_load_explicit(&hs__recording, memory_order_relaxed)) return;
    uint64_t t = hs_now_ns() - hs__run.start_ns, none = 0;
    atomic_compare_exchange_strong(&hs__drops[HS_DROP_MAIN_END_NS], &none, t ? t : 1);
}

static inline void fin_check(void)
{
    const _Atomic uintptr_t *w = atomic_load_explicit(&fin_word, memory_order_relaxed);
    if (HS_UNLIKELY(atomic_load_explicit(w, memory_order_relaxed) != 0)) main_ended();
}

__attribute__((noinline, cold)) static void sampled(void *p, size_t n)
{
    fin_check();
    hooks.alloc_slow(p, n);
}

/* After the original allocated n bytes at p: c and s are the thread's
 * countdown and slow-path sequence from before the call. */
static inline void account(hs_tls *t, uint64_t c, uint32_t s, void *p, size_t n)
{
    if (t->countdown != c || t->slow_seq != s) return; /* a malloc hook counted it */
    if (HS_LIKELY(n < c)) {
        t->countdown = c - n;
        return;
    }
    sampled(p, n);
}

static inline int fin_pending(void)
{
    const _Atomic uintptr_t *w = atomic_load_explicit(&fin_word, memory_order_relaxed);
    return atomic_load_explicit(w, memory_order_relaxed) != 0;
}

__attribute__((noinline, cold)) static void free_slow(int d, void *ctx, void *p)
{
    hs_live l;
    if (hs__liveset_maybe(p)) hooks.free_forget(p, &l);
    fin_check();
    orig[d].free(ctx, p);
}

__attribute__((noinline, cold)) static void *realloc_slow(int d, void *ctx, void *p, size_t n)
{
    hs_live l;
    int was = hs__liveset_maybe(p) ? hooks.free_forget(p, &l) : 0;
    fin_check();
    hs_tls *t = &hs__tls;
    uint64_t c = t->countdown;
    uint32_t s = t->slow_seq;
    hs_py_gil_held = 1; /* as in malloc_slow */
    void *q = orig[d].realloc(ctx, p, n);
    if (!q) {
        hs_py_gil_held = 0;
        if (was) hooks.put_back(p, &l);
        return q;
    }
    account(t, c, s, q, n);
    hs_py_gil_held = 0;
    return q;
}

/* pymalloc serves requests of 1 to 512 bytes itself (3.8 to 3.13) and hands
 * the others to PyMem_RawMalloc, where the malloc hooks count them. */
#define PYMALLOC_MAX 512

/* A small request whose countdown ran out (or whose thread is new, or in
 * collector code), or a request for malloc's hooks. The caller holds the GIL
 * (the allocator API's contract) until we return, also while the original
 * calls malloc: hs_py_gil_held tells a sample taken meanwhile, by us or by
 * the hooks, that it may read the thread's Python frames directly. */
__attribute__((noinline, cold)) static void *malloc_slow(int d, void *ctx, size_t n)
{
    hs_py_gil_held = 1;
    void *p = orig[d].malloc(ctx, n);
    if (n - 1 < PYMALLOC_MAX) sampled(p, n);
    hs_py_gil_held = 0;
    return p;
}

__attribute__((noinline, cold)) static void *calloc_slow(int d, void *ctx, size_t a, size_t b)
{
    hs_py_gil_held = 1;
    void *p = orig[d].calloc(ctx, a, b);
    size_t n;
    if (!__builtin_mul_overflow(a, b, &n) && n - 1 < PYMALLOC_MAX) sampled(p, n);
    hs_py_gil_held = 0;
    return p;
}

/* One set of wrappers per domain; the context stays the original's. (NULL's
 * filter granule is always marked, hs_liveset.c: Python often frees and
 * reallocs NULL, which the test of p after the filter's keeps on the fast
 * path.) The unsampled free is a filter load, a load of the finalizing word and a tail
 * call; an unsampled small allocation the hooks' fast path (a compare and a
 * subtraction) and a tail call. A realloc, which
 * pymalloc may hand to PyMem_RawRealloc whatever the size, looks at the
 * countdown and the slow-path sequence around the call instead. */
#define WRAPPERS(D)                                                                                \
    static void *malloc_##D(void *ctx, size_t n)                                                   \
    {                                                                                              \
        hs_tls *t = &hs__tls;                                                                      \
        uint64_t c = t->countdown;                                                                 \
        if (HS_LIKELY(n - 1 < PYMALLOC_MAX && n < c)) {                                            \
            t->countdown = c - n;                                                                  \
            return orig[D].malloc(ctx, n);                                                         \
        }                                                                                          \
        return malloc_slow(D, ctx, n);                                                             \
    }                                                                                              \
    static void *calloc_##D(void *ctx, size_t a, size_t b)                                         \
    {                                                                                              \
        hs_tls *t = &hs__tls;                                                                      \
        uint64_t c = t->countdown;                                                                 \
        size_t n;                                                                                  \
        if (HS_LIKELY(!__builtin_mul_overflow(a, b, &n) && n - 1 < PYMALLOC_MAX && n < c)) {       \
            t->countdown = c - n;                                                                  \
            return orig[D].calloc(ctx, a, b);                                                      \
        }                                                                                          \
        return calloc_slow(D, ctx, a, b);                                                          \
    }                                                                                              \
    static void *realloc_##D(void *ctx, void *p, size_t n)                                         \
    {                                                                                              \
        if ((HS_UNLIKELY(hs__liveset_maybe(p)) && p) || HS_UNLIKELY(fin_pending()))                \
            return realloc_slow(D, ctx, p, n);                                                     \
        hs_tls *t = &hs__tls;                                                                      \
        uint64_t c = t->countdown;                                                                 \
        uint32_t s = t->slow_seq;                                                                  \
        hs_py_gil_held = 1; /* as in malloc_slow */                                                \
        void *q = orig[D].realloc(ctx, p, n);                                                      \
        if (HS_LIKELY(q != NULL)) account(t, c, s, q, n);                                          \
        hs_py_gil_held = 0;                                                                        \
        return q;                                                                                  \
    }                                                                                              \
    static void free_##D(void *ctx, void *p)                                                       \
    {                                                                                              \
        if (HS_UNLIKELY(hs__liveset_maybe(p))) {                                                   \
            if (p) {                                                                               \
                free_slow(D, ctx, p);                                                              \
                return;                                                                            \
            }                                                                                      \
        }                                                                                          \
        if (HS_UNLIKELY(fin_pending())) {                                                          \
            free_slow(D, ctx, p);                                                                  \
            return;                                                                                \
        }                                                                                          \
        orig[D].free(ctx, p);                                                                      \
    }

WRAPPERS(0)
WRAPPERS(1)

/* What python's own command line says of the allocators (CPython's options
 * precede the script: "-X dev" or "-Xdev", options grouped as in "-uXdev",
 * and -E or -I, which make it ignore PYTHON* variables). Read from
 * /proc/self/cmdline into a static buffer, once, with no allocation; only
 * when the program is python itself (an embedder's argv is its own). */
typedef struct py_cmdline {
    int dev;        /* -X dev */
    int ignore_env; /* -E or -I */
} py_cmdline;

static void scan_option(py_cmdline *c, const char *a, const char *next, int *skip, int *stop)
{
    for (const char *p = a + 1; *p; p++) {
        if (*p == 'E' || *p == 'I') c->ignore_env = 1;
        if (*p == 'c' || *p == 'm') { /* the rest is the program's */
            *stop = 1;
            return;
        }
        if (*p == 'X' || *p == 'W') { /* takes the rest of a, or the next argument */
            const char *v = p[1] ? p + 1 : next;
            if (!p[1]) *skip = 1;
            if (*p == 'X' && v && (!strcmp(v, "dev") || !strncmp(v, "dev=", 4))) c->dev = 1;
            return;
        }
    }
}

static py_cmdline read_cmdline(void)
{
    static char buf[4096];
    py_cmdline c = {0, 0};
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return c;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return c;
    buf[n] = 0;
    const char *end = buf + n, *a0 = strrchr(buf, '/');
    if (strncmp(a0 ? a0 + 1 : buf, "python", 6)) return c;
    for (const char *a = buf + strlen(buf) + 1; a < end; a += strlen(a) + 1) {
        if (a[0] != '-' || !a[1] || !strcmp(a, "--")) break; /* the script, "-" or "--" */
        if (a[1] == '-') {                                   /* long options */
            if (!strcmp(a, "--check-hash-based-pycs")) a += strlen(a) + 1;
            continue;
        }
        const char *next = a + strlen(a) + 1;
        int skip = 0, stop = 0;
        scan_option(&c, a, next < end ? next : NULL, &skip, &stop);
        if (stop) break;
        if (skip && next < end) a = next;
    }
    return c;
}

static void attach(void *get, void *set, uintptr_t finalizing, int initialized)
{
    if (atomic_load_explicit(&state, memory_order_relaxed) == HS_PYMEM_WRAPPED) return;
    /* PYTHONMALLOC (any value) makes the interpreter install allocators of
     * its own at start-up, over ours: malloc's hooks then see everything
     * (malloc, malloc_debug) or small objects are not seen (pymalloc,
     * debug, pymalloc_debug), but an interpreter already past that point
     * (an embedder's) must not have small requests counted twice. Dev mode
     * (-X dev, PYTHONDEVMODE) installs the debug hooks over pymalloc unless
     * PYTHONMALLOC says otherwise: small objects are not seen either. */
    py_cmdline cl = initialized ? (py_cmdline){0, 0} : read_cmdline();
    const char *pm = cl.ignore_env ? NULL : getenv("PYTHONMALLOC");
    if (pm && !*pm) pm = NULL; /* as CPython reads it */
    const char *dm = cl.ignore_env ? NULL : getenv("PYTHONDEVMODE");
    int dev = cl.dev || (dm && *dm);
    if (initialized || !get || !set || pm || dev) {
        atomic_store_explicit(&state, HS_PYMEM_TOO_LATE, memory_order_relaxed);
        if (initialized || !pm || strncmp(pm, "malloc", 6))
            atomic_store_explicit(&hs__drops[HS_DROP_PYTHON_SMALL_UNSEEN], 1, memory_order_relaxed);
        return;
    }
    get_fn g = (get_fn)get;
    set_fn st = (set_fn)set;
    g(DOMAIN_MEM, &orig[0]);
    g(DOMAIN_OBJ, &orig[1]);
    if (!orig[0].malloc || !orig[0].calloc || !orig[0].realloc || !orig[0].free ||
        !orig[1].malloc || !orig[1].calloc || !orig[1].realloc || !orig[1].free)
        return;
    py_alloc w0 = {orig[0].ctx, malloc_0, calloc_0, realloc_0, free_0};
    py_alloc w1 = {orig[1].ctx, malloc_1, calloc_1, realloc_1, free_1};
    if (finalizing)
        atomic_store_explicit(&fin_word, (const _Atomic uintptr_t *)finalizing,
                              memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst); /* orig before the wrappers are reachable */
    st(DOMAIN_MEM, &w0);
    st(DOMAIN_OBJ, &w1);
    atomic_store_explicit(&state, HS_PYMEM_WRAPPED, memory_order_relaxed);
    hs__exact_flag(HS_EXACT_F_NO_SMALL);
}

void hs__pymem_init(const hs_pymem_hooks *h)
{
    assert(h->alloc_slow && h->free_forget && h->put_back);
    hooks = *h;
    hs_py_on_found(attach);
}

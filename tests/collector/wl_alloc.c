/* libwl_alloc.so: a small allocator the tests put between the collector and
 * the C library (LD_PRELOAD=libheapstore.so:libwl_alloc.so), so that the
 * collector's dlsym(RTLD_NEXT) finds it as "the real malloc". Two programs
 * need it:
 *
 * - signal handlers that allocate. No C library allocator is reentrant, so a
 *   handler that mallocs while its thread is inside malloc may hang whoever
 *   profiles it; this one is: a thread that re-enters it (from a handler)
 *   takes fresh memory from a lock-free bump region and leaks what it frees.
 * - fork under the ASan runtime. GCC 12's ASan allocator keeps its locks
 *   across fork, so a child forked while another thread allocates may hang
 *   before the collector runs a line; this allocator takes its lock in a
 *   pthread_atfork handler, as glibc's does.
 *
 * Blocks are 64-byte aligned, of power-of-two capacities from 64 bytes, kept
 * on one free list per capacity under one spin lock. Larger alignments come
 * from the bump region and are never reused. Built without sanitizers.
 * A block that is not ours (the ASan runtime's own strdup allocates with its
 * allocator) goes back to the next allocator in line.
 */
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define EXPORT  __attribute__((visibility("default")))
#define REGION  ((size_t)64 << 30)
#define CLASSES 40
#define NOREUSE 0xff

typedef struct hdr {
    uint32_t cls; /* capacity 2^cls, or NOREUSE */
    uint32_t pad;
    uint64_t size; /* capacity in bytes */
} hdr;

typedef struct node {
    struct node *next;
} node;

static uint8_t *region;
static _Atomic size_t used;
static atomic_flag lock = ATOMIC_FLAG_INIT;
static node *lists[CLASSES];
static __thread int inside __attribute__((tls_model("initial-exec")));
static pthread_once_t once = PTHREAD_ONCE_INIT;
static void (*next_free)(void *);
static void *(*next_realloc)(void *, size_t);
static size_t (*next_usable_size)(void *);

static int ours(const void *p)
{
    return region && (const uint8_t *)p >= region && (const uint8_t *)p < region + REGION;
}

static void lock_take(void)
{
    while (atomic_flag_test_and_set_explicit(&lock, memory_order_acquire)) sched_yield();
}

static void lock_give(void)
{
    atomic_flag_clear_explicit(&lock, memory_order_release);
}

static void fork_prepare(void)
{
    inside++;
    lock_take();
}

static void fork_done(void)
{
    lock_give();
    inside--;
}

static void setup(void)
{
    void *p = mmap(NULL, REGION, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    region = p == MAP_FAILED ? NULL : p;
}

__attribute__((constructor)) static void wl_alloc_init(void)
{
    pthread_once(&once, setup);
    pthread_atfork(fork_prepare, fork_done, fork_done);
    next_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
    next_realloc = (void *(*)(void *, size_t))dlsym(RTLD_NEXT, "realloc");
    next_usable_size = (size_t(*)(void *))dlsym(RTLD_NEXT, "malloc_usable_size");
}

/* Fresh memory: n bytes at an align-aligned address with room for the header
 * before it. Lock-free, so safe from a handler. */
static void *bump(size_t n, size_t align, uint32_t cls)
{
    if (!region) {
        /* Called before our constructor (by the loader or an earlier
         * constructor); mmap is async-signal-safe, pthread_once here is
         * only ever reached from ordinary code. */
        pthread_once(&once, setup);
        if (!region) return NULL;
    }
    if (align < 64) align = 64;
    size_t need = n + align + 64;
    size_t at = atomic_fetch_add_explicit(&used, need, memory_order_relaxed);
    if (at + need > REGION) return NULL;
    uintptr_t p = ((uintptr_t)region + at + 64 + align - 1) & ~(uintptr_t)(align - 1);
    hdr *h = (hdr *)p - 1;
    h->cls = cls;
    h->size = n;
    return (void *)p;
}

static uint32_t class_of(size_t n)
{
    uint32_t c = 6;
    while (((size_t)1 << c) < n) c++;
    return c;
}

static void *alloc(size_t n, size_t align)
{
    if (n > REGION / 2) return NULL;
    if (align > 64) return bump(n, align, NOREUSE);
    uint32_t c = class_of(n ? n : 1);
    if (c >= CLASSES) return NULL;
    if (inside) return bump((size_t)1 << c, 64, c); /* re-entered: no lock */
    inside++;
    lock_take();
    node *b = lists[c];
    if (b) lists[c] = b->next;
    lock_give();
    inside--;
    return b ? (void *)b : bump((size_t)1 << c, 64, c);
}

EXPORT void free(void *p)
{
    if (!p) return;
    if (!ours(p)) {
        if (next_free) next_free(p);
        return;
    }
    hdr *h = (hdr *)p - 1;
    if (h->cls == NOREUSE || inside) return;
    inside++;
    lock_take();
    ((node *)p)->next = lists[h->cls];
    lists[h->cls] = p;
    lock_give();
    inside--;
}

EXPORT void *malloc(size_t n)
{
    void *p = alloc(n, 16);
    if (!p) errno = ENOMEM;
    return p;
}

EXPORT void *calloc(size_t n, size_t m)
{
    size_t s;
    if (__builtin_mul_overflow(n, m, &s)) {
        errno = ENOMEM;
        return NULL;
    }
    void *p = malloc(s);
    if (p) memset(p, 0, s);
    return p;
}

EXPORT size_t malloc_usable_size(void *p)
{
    if (p && !ours(p)) return next_usable_size ? next_usable_size(p) : 0;
    return p ? ((hdr *)p - 1)->size : 0;
}

EXPORT void *realloc(void *p, size_t n)
{
    if (!p) return malloc(n);
    if (!ours(p)) return next_realloc ? next_realloc(p, n) : NULL;
    size_t have = malloc_usable_size(p);
    if (n <= have && n) return p;
    void *q = malloc(n);
    if (!q) return NULL;
    memcpy(q, p, have < n ? have : n);
    free(p);
    return q;
}

EXPORT void *memalign(size_t align, size_t n)
{
    void *p = alloc(n, align);
    if (!p) errno = ENOMEM;
    return p;
}

EXPORT int posix_memalign(void **out, size_t align, size_t n)
{
    if (align < sizeof(void *) || (align & (align - 1))) return EINVAL;
    void *p = alloc(n, align);
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}

EXPORT void *aligned_alloc(size_t align, size_t n)
{
    return memalign(align, n);
}

EXPORT void *valloc(size_t n)
{
    return memalign(4096, n);
}

EXPORT void *pvalloc(size_t n)
{
    return memalign(4096, (n + 4095) & ~(size_t)4095);
}

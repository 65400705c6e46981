/* hs_hooks: the interposed allocator entry points and the collector's life.
 *
 * Every exported function here replaces the C library's. With glibc's
 * allocator the unsampled path of an allocation is a test of the mode, a
 * subtraction and a branch on the thread's countdown (hs_thread.h), the real
 * function and the block's exact count (about 24 instructions, none of them
 * locked or on a line another thread writes); the
 * unsampled path of free is one compare of the live set's filter in memory
 * and a branch (hs_liveset.h), the exact count and a tail call (about 22);
 * for the few blocks that share a filter granule with a sampled one, a
 * lookup that takes no lock. Only the free of a sampled block takes its
 * shard's lock. Everything else is in out-of-line cold functions (the
 * *_slow ones run under the thread's re-entry guard), which save and
 * restore errno and never call stdio. The size histogram is not counted
 * here: the sender builds it from the samples (hs_sender.c), so that the
 * unsampled path pays nothing for it.
 *
 * The real functions come from dlsym(RTLD_NEXT). dlsym may itself allocate;
 * until it returns, allocations are served from a bootstrap arena of mapped
 * chunks (each twice the previous, so it cannot run out before the address
 * space does). Bootstrap blocks are marked in the live set's filter, so free
 * takes the slow path for them, recognises them by address range and leaves
 * them alone.
 *
 * Exact totals (hs_thread.h): every allocating hook, after the real call,
 * adds the block's size as the allocator keeps it, and free subtracts it
 * before the real call, so the two sides cancel whatever was requested.
 * With glibc's allocator that size is one load of the chunk header the
 * allocator itself is about to read (usable size: the chunk size less its
 * 8-byte header, as malloc_usable_size says except for mmapped chunks, where
 * it is 8 bytes more); with another allocator it is a call to its
 * malloc_usable_size. Bootstrap blocks
 * are not counted on either side; realloc counts a free of the old block
 * and an allocation of the new one. Counting starts at init. The sender
 * thread's own blocks are not counted; blocks the collector allocates on a
 * program thread (the unwinder's, the loader's) are, on both sides.
 */
#include <assert.h>
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "hs_collector.h"
#include "hs_error.h"
#include "hs_liveset.h"
#include "hs_mem.h"
#include "hs_pymem.h"
#include "hs_python.h"
#include "hs_sender.h"
#include "hs_stacks.h"
#include "hs_thread.h"

#define HS_EXPORT __attribute__((visibility("default")))

/* ---- the bootstrap arena ---- */

#define BOOT_CHUNKS 40

typedef struct boot_hdr {
    uint64_t size;
    uint64_t pad;
} boot_hdr;

static struct {
    atomic_int lock;
    int n;
    uintptr_t lo[BOOT_CHUNKS], hi[BOOT_CHUNKS];
    uint8_t *cur, *end;
} boot;

/* Runs before anything else exists (even before a sanitizer runtime has set
 * up its shadow memory), so it uses only raw mmap and a plain spin flag. */
static void *boot_alloc(size_t n, size_t align)
{
    if (align < 16) align = 16;
    if (n > ((size_t)1 << 40) || align > ((size_t)1 << 20)) return NULL;
    while (atomic_exchange_explicit(&boot.lock, 1, memory_order_acquire)) sched_yield();
    size_t need = n + sizeof(boot_hdr) + align;
    if (!boot.cur || (size_t)(boot.end - boot.cur) < need) {
        size_t sz = (size_t)65536 << (boot.n < 20 ? boot.n : 20);
        while (sz < need) sz *= 2;
        void *c = boot.n < BOOT_CHUNKS
                      ? mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                      : MAP_FAILED;
        if (c == MAP_FAILED) {
            atomic_store_explicit(&boot.lock, 0, memory_order_release);
            return NULL;
        }
        boot.lo[boot.n] = (uintptr_t)c;
        boot.hi[boot.n] = (uintptr_t)c + sz;
        __atomic_store_n(&boot.n, boot.n + 1, __ATOMIC_RELEASE);
        boot.cur = c;
        boot.end = (uint8_t *)c + sz;
    }
    uintptr_t p = ((uintptr_t)boot.cur + sizeof(boot_hdr) + align - 1) & ~(uintptr_t)(align - 1);
    ((boot_hdr *)p - 1)->size = n;
    boot.cur = (uint8_t *)p + n;
    /* Make free take the slow path for it. Bootstrap happens before any
     * thread samples, so the shard lock that normally guards the counter is
     * not needed. */
    atomic_fetch_add_explicit(&hs__filter[hs__filter_index(p)], 1, memory_order_relaxed);
    atomic_store_explicit(&boot.lock, 0, memory_order_release);
    return (void *)p;
}

static int is_boot(const void *p)
{
    int n = __atomic_load_n(&boot.n, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++)
        if ((uintptr_t)p >= boot.lo[i] && (uintptr_t)p < boot.hi[i]) return 1;
    return 0;
}

static size_t boot_size(const void *p)
{
    return ((const boot_hdr *)p - 1)->size;
}

/* A fork child has a fresh filter: mark the blocks that are still ours. */
static void boot_remark(void)
{
    /* The filter counts per page: one mark for each page of the used part
     * (chunks are mapped, so page-aligned). */
    for (int i = 0; i < boot.n; i++) {
        uintptr_t end = (i == boot.n - 1) ? (uintptr_t)boot.cur : boot.hi[i];
        for (uintptr_t q = boot.lo[i]; q < end; q += (uintptr_t)1 << HS_FILTER_SHIFT)
            hs__filter_mark(q);
    }
}

/* ---- the real allocator ---- */

static void *boot_malloc(size_t n);
static void *boot_calloc(size_t n, size_t m);
static void *boot_realloc(void *p, size_t n);
static void boot_free(void *p);
static int boot_posix_memalign(void **out, size_t align, size_t n);
static void *boot_aligned_alloc(size_t align, size_t n);
static void *boot_memalign(size_t align, size_t n);
static void *boot_valloc(size_t n);
static void *boot_pvalloc(size_t n);
static size_t boot_usable_size(void *p);

static struct {
    void *(*malloc)(size_t);
    void *(*calloc)(size_t, size_t);
    void *(*realloc)(void *, size_t);
    void (*free)(void *);
    int (*posix_memalign)(void **, size_t, size_t);
    void *(*aligned_alloc)(size_t, size_t);
    void *(*memalign)(size_t, size_t);
    void *(*valloc)(size_t);
    void *(*pvalloc)(size_t);
    size_t (*usable_size)(void *);
} real = {boot_malloc,        boot_calloc,   boot_realloc, boot_free,    boot_posix_memalign,
          boot_aligned_alloc, boot_memalign, boot_valloc,  boot_pvalloc, boot_usable_size};

static atomic_int resolve_state; /* 0 not yet, 1 in progress, 2 done */

static void *sym(const char *name, const char *fallback)
{
    void *p = dlsym(RTLD_NEXT, name);
    if (!p && fallback) p = dlsym(RTLD_DEFAULT, fallback);
    return p;
}

/* 0 once the real functions are known; -1 while they are being looked up
 * (the caller then uses the bootstrap arena). */
static int resolve(void)
{
    if (HS_LIKELY(atomic_load_explicit(&resolve_state, memory_order_acquire) == 2)) return 0;
    hs_tls *t = &hs__tls;
    if (t->boot) return -1;
    int z = 0;
    if (!atomic_compare_exchange_strong(&resolve_state, &z, 1)) return -1;
    t->boot = 1;
    void *m = sym("malloc", "__libc_malloc"), *c = sym("calloc", "__libc_calloc"),
         *r = sym("realloc", "__libc_realloc"), *f = sym("free", "__libc_free"),
         *pm = sym("posix_memalign", NULL), *aa = sym("aligned_alloc", NULL),
         *ma = sym("memalign", "__libc_memalign"), *va = sym("valloc", "__libc_valloc"),
         *pv = sym("pvalloc", "__libc_pvalloc"), *us = sym("malloc_usable_size", NULL);
    t->boot = 0;
    if (!m || !c || !r || !f || !ma) {
        static const char msg[] = "heapstore: cannot find the real malloc\n";
        if (write(2, msg, sizeof msg - 1)) {
        }
        abort();
    }
    real.malloc = (void *(*)(size_t))m;
    real.calloc = (void *(*)(size_t, size_t))c;
    real.realloc = (void *(*)(void *, size_t))r;
    real.free = (void (*)(void *))f;
    real.memalign = (void *(*)(size_t, size_t))ma;
    if (pm) real.posix_memalign = (int (*)(void **, size_t, size_t))pm;
    if (aa) real.aligned_alloc = (void *(*)(size_t, size_t))aa;
    if (va) real.valloc = (void *(*)(size_t))va;
    if (pv) real.pvalloc = (void *(*)(size_t))pv;
    if (us) real.usable_size = (size_t(*)(void *))us;
    atomic_store_explicit(&resolve_state, 2, memory_order_release);
    return 0;
}

static void *boot_malloc(size_t n)
{
    return resolve() == 0 ? real.malloc(n) : boot_alloc(n, 16);
}

static void *boot_calloc(size_t n, size_t m)
{
    if (resolve() == 0) return real.calloc(n, m);
    size_t s;
    if (__builtin_mul_overflow(n, m, &s)) return NULL;
    return boot_alloc(s, 16); /* fresh mapped memory is zero */
}

static void *boot_realloc(void *p, size_t n)
{
    if (resolve() == 0) return real.realloc(p, n);
    void *q = boot_alloc(n, 16);
    if (q && p) memcpy(q, p, boot_size(p) < n ? boot_size(p) : n);
    return q;
}

static void boot_free(void *p)
{
    if (!is_boot(p) && resolve() == 0) real.free(p);
}

static void *boot_memalign(size_t align, size_t n)
{
    if (resolve() == 0) return real.memalign(align, n);
    return boot_alloc(n, align);
}

static int boot_posix_memalign(void **out, size_t align, size_t n)
{
    if (resolve() == 0 && real.posix_memalign != boot_posix_memalign)
        return real.posix_memalign(out, align, n);
    if (align < sizeof(void *) || (align & (align - 1))) return EINVAL;
    void *p = resolve() == 0 ? real.memalign(align, n) : boot_alloc(n, align);
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}

static void *boot_aligned_alloc(size_t align, size_t n)
{
    if (resolve() == 0 && real.aligned_alloc != boot_aligned_alloc)
        return real.aligned_alloc(align, n);
    return boot_memalign(align, n);
}

static void *boot_valloc(size_t n)
{
    if (resolve() == 0 && real.valloc != boot_valloc) return real.valloc(n);
    return boot_memalign(4096, n);
}

static void *boot_pvalloc(size_t n)
{
    if (resolve() == 0 && real.pvalloc != boot_pvalloc) return real.pvalloc(n);
    return boot_memalign(4096, (n + 4095) & ~(size_t)4095);
}

static size_t boot_usable_size(void *p)
{
    if (!p) return 0;
    if (is_boot(p)) return boot_size(p);
    return resolve() == 0 && real.usable_size != boot_usable_size ? real.usable_size(p) : 0;
}

/* ---- exact totals: the allocator's size of a block ---- */

/* EX_PASS: HEAPSTORE_DISABLE; allocating hooks then only forward. */
enum { EX_OFF, EX_GLIBC, EX_CALL, EX_PASS };
static _Atomic int ex_mode; /* set once, by init */

static inline int exact_on(void)
{
    int m = atomic_load_explicit(&ex_mode, memory_order_relaxed);
    return m == EX_GLIBC || m == EX_CALL;
}

/* glibc's chunk size less its 8-byte header: the usable size of an in-use
 * chunk (an mmapped one's, 8 bytes more than malloc_usable_size says, which
 * costs two instructions less on every call). The low three bits are
 * flags. */
static inline uint64_t glibc_size(const void *p)
{
    return (((const uint64_t *)p)[-1] & ~(uint64_t)7) - 8;
}

/* Only with counting on. */
static inline uint64_t exact_size(void *p)
{
    if (HS_LIKELY(atomic_load_explicit(&ex_mode, memory_order_relaxed) == EX_GLIBC))
        return glibc_size(p);
    return real.usable_size(p);
}

__attribute__((noinline, cold)) static void exact_alloc_called(hs_tls *t, void *p)
{
    if (hs__exact_alloc(t, real.usable_size(p))) hs__exact_publish(t);
}

/* p (not NULL, not a bootstrap block) was handed out, m being ex_mode. */
static inline void exact_alloc_m(hs_tls *t, void *p, int m)
{
    if (HS_LIKELY(m == EX_GLIBC)) {
        if (hs__exact_alloc(t, glibc_size(p))) hs__exact_publish(t);
    } else if (m == EX_CALL) {
        exact_alloc_called(t, p);
    }
}

static inline void exact_alloc(hs_tls *t, void *p)
{
    exact_alloc_m(t, p, atomic_load_explicit(&ex_mode, memory_order_relaxed));
}

/* The block an unsampled allocating hook got from the real function, when
 * sizes are not glibc's: counted (or not, without counting), and returned. */
__attribute__((noinline, cold)) static void *counted_other(void *p)
{
    if (p && atomic_load_explicit(&ex_mode, memory_order_relaxed) == EX_CALL)
        exact_alloc_called(&hs__tls, p);
    return p;
}

/* p (not NULL, not a bootstrap block) is about to be freed. */
static inline void exact_free(hs_tls *t, void *p)
{
    if (exact_on() && hs__exact_free(t, exact_size(p))) hs__exact_publish(t);
}

/* free's counting off the glibc path: another allocator's sizes, or a
 * publish due. Then the real free. */
__attribute__((noinline, cold)) static void free_counted(void *p, int publish)
{
    hs_tls *t = &hs__tls;
    if (publish)
        hs__exact_publish(t);
    else
        exact_free(t, p);
    real.free(p);
}

/* The load address of the object whose PT_LOAD segments hold an address
 * (dl_iterate_phdr: a walk over a handful of objects; dladdr would also
 * search the object's symbols, some 85,000 instructions a call in libc). */
typedef struct obj_of {
    uintptr_t addr, base;
    int found;
} obj_of;

static int obj_of_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    obj_of *o = data;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && o->addr >= lo && o->addr - lo < ph->p_memsz) {
            o->base = info->dlpi_addr;
            o->found = 1;
            return 1;
        }
    }
    return 0;
}

static int same_object(const void *a, const void *b)
{
    obj_of x = {(uintptr_t)a, 0, 0}, y = {(uintptr_t)b, 0, 0};
    dl_iterate_phdr(obj_of_cb, &x);
    dl_iterate_phdr(obj_of_cb, &y);
    return x.found && y.found && x.base == y.base;
}

/* Chooses how sizes are read, once the real allocator is known: the chunk
 * header only when malloc is glibc's own (the object that defines
 * gnu_get_libc_version); a preloaded allocator's or a sanitizer's through
 * its malloc_usable_size; nothing without one. */
static void exact_choose(void)
{
    int mode = real.usable_size != boot_usable_size ? EX_CALL : EX_OFF;
#if defined(__x86_64__) || defined(__aarch64__)
    void *g = dlsym(RTLD_DEFAULT, "gnu_get_libc_version");
    if (g && (void *)real.free != (void *)boot_free && same_object((void *)real.malloc, g))
        mode = EX_GLIBC;
#endif
    atomic_store_explicit(&ex_mode, mode, memory_order_relaxed);
    hs__exact_set_how(mode == EX_GLIBC  ? HS_EXACT_GLIBC
                      : mode == EX_CALL ? HS_EXACT_CALLED
                                        : HS_EXACT_OFF);
}

/* ---- life of the collector ---- */

static atomic_int init_state; /* 0 not yet, 1 in progress, 2 done */

extern char **environ;

/* Allocations the program made before the collector could start recording
 * (early_start found no environment yet): counted here, and reported as
 * dropped allocations (their count and bytes) when the run starts. */
static _Atomic uint64_t early_calls, early_bytes;

static int self_range_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    uintptr_t *r = data; /* r[0]: an address of ours; r[1], r[2]: the range */
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    int mine = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD) continue;
        uintptr_t s = info->dlpi_addr + ph->p_vaddr, e = s + ph->p_memsz;
        if (r[0] >= s && r[0] < e) mine = 1;
        if (ph->p_flags & PF_X) {
            if (s < lo) lo = s;
            if (e > hi) hi = e;
        }
    }
    if (!mine) return 0;
    r[1] = lo;
    r[2] = hi;
    return 1;
}

static void hex16(char out[33], const uint8_t id[16])
{
    static const char d[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        out[2 * i] = d[id[i] >> 4];
        out[2 * i + 1] = d[id[i] & 15];
    }
    out[32] = 0;
}

static int unhex16(uint8_t id[16], const char *s)
{
    for (int i = 0; i < 32; i++) {
        char c = s[i];
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0) return -1;
        if (i & 1)
            id[i / 2] |= (uint8_t)v;
        else
            id[i / 2] = (uint8_t)(v << 4);
    }
    return s[32] == 0 ? 0 : -1;
}

static void new_run_id(void)
{
    if (getrandom(hs__run.run_id, 16, GRND_NONBLOCK) != 16) {
        uint64_t a = hs_now_ns() ^ ((uint64_t)getpid() << 32), b = (uint64_t)(uintptr_t)&a;
        for (int i = 0; i < 8; i++) hs__run.run_id[i] = (uint8_t)(a >> (8 * i));
        for (int i = 0; i < 8; i++)
            hs__run.run_id[8 + i] = (uint8_t)((b * 0x9E3779B97F4A7C15ull) >> (8 * i));
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    hs__run.start_unix_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    hs__run.start_ns = hs_now_ns();
}

/* HEAPSTORE_RUN_ID: the launcher (`heapstore run`) chose this process's run
 * id, so that it can ask for the run by it. Only the process it started
 * takes it: the variable leaves the environment (in settle) before any fork
 * or exec could hand it on. */
static void take_given_run_id(void)
{
    const char *v = getenv("HEAPSTORE_RUN_ID");
    if (!v) return;
    uint8_t id[16];
    if (unhex16(id, v) == 0) memcpy(hs__run.run_id, id, 16);
}

/* HEAPSTORE_PARENT_RUN carries our run id to exec'd programs. It is set once
 * with setenv and afterwards rewritten in place (same length), so that a fork
 * child can update it without taking the environment lock. */
static void publish_run_id(void)
{
    char hex[33];
    hex16(hex, hs__run.run_id);
    char *v = getenv("HEAPSTORE_PARENT_RUN");
    if (v && strlen(v) == 32)
        memcpy(v, hex, 32);
    else
        setenv("HEAPSTORE_PARENT_RUN", hex, 1);
}

static void at_exit(void)
{
    hs__run_end(HS_BYE_CLEAN);
}

/* Set by the prepare handler when fork interrupted this thread's own
 * unwinding (called from a signal handler). */
static __thread int fork_self_busy __attribute__((tls_model("initial-exec")));

static void fork_prepare(void)
{
    hs__guard_enter(&hs__tls);
    fork_self_busy = atomic_load(&hs__recording) ? hs__fork_quiesce() : 0;
}

static void fork_parent(void)
{
    hs__fork_release();
    hs__guard_leave(&hs__tls);
}

static void become_child(hs_tls *t);

static void fork_child(void)
{
    hs_tls *t = &hs__tls;
    if (fork_self_busy) {
        /* The interrupted frame below the handler will go on with this
         * thread's ring and may hold our locks: the child keeps them as they
         * are and records nothing (a run of its own would need them reset). */
        atomic_store(&hs__recording, 0);
        atomic_store(&hs__fork_pending, 0);
        atomic_store(&hs__sender_busy, 0);
    } else if (atomic_load(&hs__recording)) {
        become_child(t);
        hs__sender_start();
    }
    hs__guard_leave(t);
}

/* This process is a fork child of the run's process: a run of its own,
 * the parent's as its parent. Under guard, the only thread. */
static void become_child(hs_tls *t)
{
    memcpy(hs__run.parent_run_id, hs__run.run_id, 16);
    hs__run.has_parent = 1;
    hs__run.forked = 1;
    hs__run.pid = getpid();
    new_run_id();
    char hex[33];
    hex16(hex, hs__run.run_id);
    char *v = getenv("HEAPSTORE_PARENT_RUN");
    if (v && strlen(v) == 32) memcpy(v, hex, 32);
    /* Counts start afresh; the interpreter the child shares with its
     * parent stays as it was (its small objects seen or not). */
    for (int k = 0; k <= HS_DROP_KIND_MAX; k++)
        if (k != HS_DROP_PYTHON_SMALL_UNSEEN) atomic_store(&hs__drops[k], 0);
    hs__liveset_reset();
    boot_remark();
    hs__stacks_reset();
    hs__threads_reset_child(t);
    hs__sender_reset_child();
}

static void py_alloc_slow(void *p, size_t n);
static int py_free_forget(void *p, hs_live *l);
static void py_put_back(void *p, const hs_live *l);

/* Sets the collector up, recording from then on. It may run inside the
 * program's first allocation (early_start), and so inside any C library
 * function that allocates while holding a lock of its own: setenv's (the
 * environment's), atexit's, pthread_atfork's. So it takes none of them;
 * settle does, from our constructor. */
static void init(void)
{
    int z = 0;
    if (!atomic_compare_exchange_strong(&init_state, &z, 1)) return;
    hs_tls *t = &hs__tls;
    hs__guard_enter(t);
    resolve();
    hs_config_load(&hs__cfg);
    if (hs__cfg.disabled) {
        atomic_store_explicit(&ex_mode, EX_PASS, memory_order_relaxed);
        goto done;
    }
    hs__liveset_init(hs__cfg.live_max); /* before exact_choose: free's NULL */
    exact_choose();
    uintptr_t r[3] = {(uintptr_t)&init, 0, 0};
    dl_iterate_phdr(self_range_cb, r);
    hs__stacks_init(r[1], r[2]);
    hs__sampler_init(hs__cfg.sample_bytes, hs__cfg.seed);
    if (hs__threads_init(hs__cfg.sample_bytes < HS_RING_DENSE_BELOW ? HS_RING_CAP_DENSE
                                                                    : HS_RING_CAP) != 0)
        goto done;
    hs__pymem_init(&(hs_pymem_hooks){py_alloc_slow, py_free_forget, py_put_back});
    new_run_id();
    take_given_run_id();
    hs__run.pid = getpid();
    const char *parent = getenv("HEAPSTORE_PARENT_RUN");
    if (parent && unhex16(hs__run.parent_run_id, parent) == 0)
        hs__run.has_parent = 1;
    else
        memset(hs__run.parent_run_id, 0, 16);
    uint64_t early = atomic_exchange(&early_calls, 0);
    if (early) {
        hs__drop_add(HS_DROP_ALLOC_EVENTS, early);
        hs__drop_add(HS_DROP_ALLOC_BYTES, atomic_exchange(&early_bytes, 0));
    }
    atomic_store(&hs__recording, 1);
done:
    atomic_store(&init_state, 2);
    hs__guard_leave(t);
}

/* The part of setting up that takes the C library's locks (see init), run
 * from our constructor. Until then (only when the run started in another
 * library's constructor) a fork is not handled, exit sends no BYE, and an
 * exec'd program inherits our HEAPSTORE_RUN_ID and not our run as its
 * parent. A fork child of that time finds its parent's run here and takes
 * one of its own. Under guard. */
static void settle(hs_tls *t)
{
    if (hs__run.pid != getpid()) become_child(t);
    unsetenv("HEAPSTORE_RUN_ID");
    publish_run_id();
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    atexit(at_exit);
}

__attribute__((constructor(101))) static void hs_constructor(void)
{
    hs_tls *t = &hs__tls;
    init();
    if (atomic_load(&hs__recording)) {
        hs__guard_enter(t);
        hs__stacks_load_unwinder();
        settle(t);
        hs_py_scan();
        hs__sender_start();
        hs__guard_leave(t);
    }
}

/* ---- slow paths ---- */

#ifdef HS_ASAN_RUNTIME
#include <sanitizer/asan_interface.h>
/* Sanitized trees only. This file is not instrumented, the modules it calls
 * are. A new thread calls malloc and free from inside the ASan runtime's own
 * thread set-up (pthread_getattr_np), before the runtime has cleared the
 * shadow of the thread's stack; a recycled stack still carries the poison of
 * the frames of the thread that used it before, and the instrumented code we
 * run there would report it. The stack below us is unused by definition, so
 * clearing its shadow hides nothing. */
/* A macro, so that the frame address is the slow path's own: its locals lie
 * below it, as does everything it calls. */
#define asan_fresh_stack()                                                                         \
    do {                                                                                           \
        if (atomic_load_explicit(&init_state, memory_order_acquire) == 2) {                        \
            char *fp_ = __builtin_frame_address(0);                                                \
            __asan_unpoison_memory_region(fp_ - 65536, 65536);                                     \
        }                                                                                          \
    } while (0)
#else
#define asan_fresh_stack() ((void)0)
#endif

static void push_event(hs_tls *t, uint64_t stack_id, int is_free, uint64_t size, uint64_t weight)
{
    hs_rec rec = {hs__event_now(t), stack_id << 1 | (is_free ? 1u : 0u), size, weight};
    if (hs__ring_push(t, &rec) != 0) {
        hs__drop_add(is_free ? HS_DROP_FREE_EVENTS : HS_DROP_ALLOC_EVENTS, 1);
        hs__drop_add(is_free ? HS_DROP_FREE_BYTES : HS_DROP_ALLOC_BYTES, weight);
    }
}

/* Under guard, with a ring. */
static void record_alloc(hs_tls *t, void *p, size_t n)
{
    hs_ring *r = t->ring;
    int truncated;
    /* Unwinding takes libunwind's lock and the loader's: a fork meanwhile
     * would leave them held in the child (see hs__fork_quiesce). */
    hs__busy_enter(&r->busy);
    uint32_t depth = hs__stack_capture(r->scratch, HS_COUNTOF(r->scratch), r->pcs,
                                       HS_COUNTOF(r->pcs), &truncated, &r->stack);
    hs__busy_leave(&r->busy);
    if (!depth) {
        hs__drop_add(HS_DROP_UNWIND_FAILED, 1);
        return;
    }
    if (truncated) hs__drop_add(HS_DROP_STACKS_TRUNCATED, 1);
    uint64_t w = hs__sampler_weight(n);
    uint64_t id = hs__stack_intern(r->pcs, depth);
    if (!id) {
        hs__drop_add(HS_DROP_ALLOC_EVENTS, 1);
        hs__drop_add(HS_DROP_ALLOC_BYTES, w);
        return;
    }
    if (hs__liveset_insert((uintptr_t)p, n, id) != 0) {
        hs__drop_add(HS_DROP_LIVE_SET_FULL, 1);
        return;
    }
    hs_rec rec = {hs__event_now(t), id << 1, n, w};
    if (hs__ring_push(t, &rec) != 0) {
        hs_live l;
        hs__liveset_remove((uintptr_t)p, &l, 0);
        hs__drop_add(HS_DROP_ALLOC_EVENTS, 1);
        hs__drop_add(HS_DROP_ALLOC_BYTES, w);
    }
    hs__sender_activate();
}

/* The program allocates before our constructor has run: in the constructor
 * of a library initialised before us (libstdc++'s emergency pool, and many
 * libraries' set-up). Everything init needs works once the C library is
 * initialised (the environment is set), so the run starts here and these
 * allocations are recorded like any other; the sender thread, which only
 * the constructor starts, finds their events waiting in the rings (or, past
 * a ring's capacity, counted as dropped). Not in a sanitized tree: the
 * sanitizer runtime may itself be initialising, and every module but this
 * one is instrumented; there (a test configuration, not one users run)
 * allocations before the constructor are neither recorded nor counted, as
 * the runtime's own start-up would otherwise show as drops in every run.
 * 1 once the collector is initialised. Under guard. */
static int early_start(hs_tls *t)
{
#ifdef HS_ASAN_RUNTIME
    (void)t;
    return 0;
#else
    if (t->boot || atomic_load_explicit(&resolve_state, memory_order_acquire) != 2 || !environ)
        return 0;
    init();
    return atomic_load_explicit(&init_state, memory_order_acquire) == 2;
#endif
}

/* The thread's countdown ran out (or it is new, or inside the collector).
 * p is the block the real allocator returned for n bytes (maybe NULL). */
static void alloc_slow(void *p, size_t n)
{
    hs_tls *t = &hs__tls;
    t->slow_seq++;
    if (t->guard || t->boot) return; /* collector code, or a signal handler inside it */
    asan_fresh_stack();
    hs__guard_enter(t);
    if (atomic_load_explicit(&init_state, memory_order_acquire) != 2 && !early_start(t)) {
#ifndef HS_ASAN_RUNTIME
        atomic_fetch_add_explicit(&early_calls, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&early_bytes, n, memory_order_relaxed);
#endif
        goto out;
    }
    if (!atomic_load_explicit(&hs__recording, memory_order_relaxed) || t->state == HS_T_DEAD ||
        t->state == HS_T_INTERNAL) {
        t->saved_countdown = UINT64_MAX; /* forward from now on */
        goto out;
    }
    if (t->state == HS_T_NEW) {
        if (hs__thread_attach(t) != 0) {
            t->saved_countdown = UINT64_MAX;
            goto out;
        }
        t->saved_countdown = hs__sampler_next(t);
    }
    if (n < t->saved_countdown) {
        t->saved_countdown -= n;
        goto out;
    }
    t->saved_countdown = hs__sampler_next(t);
    if (p) {
        hs__liveset_prefetch((uintptr_t)p); /* arrives while the stack is walked */
        record_alloc(t, p, n);
    }
out:
    hs__guard_leave(t);
}

/* A block that is, or might be, sampled is being freed (or moved by
 * realloc). Records its free; returns 1 with *l if it was live. */
static int free_record(hs_tls *t, void *p, hs_live *l)
{
    /* Most blocks that get here only share a filter granule with a sampled
     * one: a lookup that takes no lock tells them apart. (Not when every
     * allocation is sampled: the block is then nearly always in the set.) */
    if (hs__cfg.sample_bytes != 1 && hs__liveset_has((uintptr_t)p) == 0) return 0;
    int reentrant = t->guard != 0;
    /* Guarded from here on, the shard lock included: a signal handler that
     * allocates while this thread holds the lock must be forwarded, not
     * recorded (it would wait for the lock forever). */
    hs__guard_enter(t);
    int r = hs__liveset_remove((uintptr_t)p, l, reentrant);
    if (r == HS_EBUSY) {
        hs__drop_add(HS_DROP_FREE_EVENTS, 1);
        r = 0;
        goto out;
    }
    if (r != 1 || !atomic_load_explicit(&hs__recording, memory_order_relaxed)) goto out;
    uint64_t w = hs__sampler_weight(l->size);
    if (reentrant || t->state == HS_T_DEAD || t->state == HS_T_INTERNAL ||
        (t->state == HS_T_NEW && hs__thread_attach(t) != 0)) {
        hs__drop_add(HS_DROP_FREE_EVENTS, 1);
        hs__drop_add(HS_DROP_FREE_BYTES, w);
    } else {
        push_event(t, l->stack_id, 1, l->size, w);
    }
out:
    hs__guard_leave(t);
    return r == 1;
}

__attribute__((noinline, cold)) static void free_slow(void *p)
{
    if (!p || is_boot(p)) return;
    hs_tls *t = &hs__tls;
    asan_fresh_stack();
    if (t->state != HS_T_INTERNAL) {
        int e = errno;
        hs_live l;
        free_record(t, p, &l);
        errno = e;
    }
    exact_free(t, p);
    real.free(p);
}

/* A block whose free free_record recorded is the program's after all (a
 * failed realloc): live again, with an allocation event. */
static void put_back(hs_tls *t, void *p, const hs_live *l)
{
    int reentrant = t->guard != 0;
    hs__guard_enter(t); /* the shard lock: see free_record */
    if (hs__liveset_insert((uintptr_t)p, l->size, l->stack_id) == 0 && !reentrant && t->ring)
        push_event(t, l->stack_id, 0, l->size, hs__sampler_weight(l->size));
    hs__guard_leave(t);
}

/* ---- for the Python allocator's wrappers (hs_pymem.c) ---- */

static void py_alloc_slow(void *p, size_t n)
{
    int e = errno;
    alloc_slow(p, n);
    errno = e;
}

static int py_free_forget(void *p, hs_live *l)
{
    hs_tls *t = &hs__tls;
    if (!p || is_boot(p) || t->state == HS_T_INTERNAL) return 0;
    asan_fresh_stack();
    int e = errno;
    int was = free_record(t, p, l);
    errno = e;
    return was;
}

static void py_put_back(void *p, const hs_live *l)
{
    int e = errno;
    put_back(&hs__tls, p, l);
    errno = e;
}

/* A realloc of a block of old bytes succeeded with q (NULL: realloc(p, 0)
 * freed it): a free and, unless q is NULL, an allocation. */
static void exact_moved(hs_tls *t, uint64_t old, void *q)
{
    if (!exact_on()) return;
    if (hs__exact_free(t, old)) hs__exact_publish(t);
    if (q && hs__exact_alloc(t, exact_size(q))) hs__exact_publish(t);
}

__attribute__((noinline, cold)) static void *realloc_slow(void *p, size_t n)
{
    hs_tls *t = &hs__tls;
    if (is_boot(p)) {
        void *q = malloc(n);
        if (q) memcpy(q, p, boot_size(p) < n ? boot_size(p) : n);
        return q;
    }
    uint64_t old = exact_on() ? exact_size(p) : 0;
    if (t->state == HS_T_INTERNAL) {
        void *q = real.realloc(p, n);
        if (q || n == 0) exact_moved(t, old, q);
        return q;
    }
    asan_fresh_stack();
    int e = errno;
    hs_live l;
    int was = free_record(t, p, &l);
    errno = e;
    void *q = real.realloc(p, n);
    e = errno;
    if (!q && n != 0) {
        /* The move failed and p is still the program's: put it back. */
        if (was) put_back(t, p, &l);
        errno = e;
        return NULL;
    }
    exact_moved(t, old, q);
    uint64_t c = t->countdown;
    if (n < c) {
        t->countdown = c - n;
    } else {
        alloc_slow(q, n);
    }
    errno = e;
    return q;
}

/* ---- the interposed functions ---- */

enum alloc_kind { K_MALLOC, K_CALLOC, K_REALLOC, K_MEMALIGN, K_ALIGNED_ALLOC, K_VALLOC, K_PVALLOC };

/* The real function of kind k: a and b are calloc's count and size, or the
 * alignment in a; n is the size in bytes; p is realloc's block. */
static void *real_call(enum alloc_kind k, void *p, size_t a, size_t b, size_t n)
{
    switch (k) {
    case K_MALLOC:
        return real.malloc(n);
    case K_CALLOC:
        return real.calloc(a, b);
    case K_REALLOC:
        return real.realloc(p, n);
    case K_MEMALIGN:
        return real.memalign(a, n);
    case K_ALIGNED_ALLOC:
        return real.aligned_alloc(a, n);
    case K_VALLOC:
        return real.valloc(n);
    case K_PVALLOC:
        return real.pvalloc(n);
    }
    return NULL;
}

/* The countdown ran out (or the thread is new, or inside the collector): the
 * real call, then alloc_slow. */
__attribute__((noinline, cold)) static void *alloc_sampled(enum alloc_kind k, void *p, size_t a,
                                                           size_t b, size_t n)
{
    void *r = real_call(k, p, a, b, n);
    int e = errno;
    alloc_slow(r, n); /* first: it may be what starts the collector (early_start) */
    if (r && k != K_REALLOC) exact_alloc(&hs__tls, r); /* realloc's caller counts the move */
    errno = e;
    return r;
}

/* Every allocating hook (realloc's own aside) when sizes are not read from
 * glibc's chunk headers and the collector is not disabled: before the real
 * functions are known, with another allocator, without counting. Out of
 * line, so that the glibc path tests the mode once. */
__attribute__((noinline, cold)) static void *alloc_other(enum alloc_kind k, size_t a, size_t b,
                                                         size_t n)
{
    hs_tls *t = &hs__tls;
    uint64_t c = t->countdown;
    if (n < c) {
        t->countdown = c - n;
        return counted_other(real_call(k, NULL, a, b, n));
    }
    return alloc_sampled(k, NULL, a, b, n);
}

/* The thread's exact counts must be published; returns p (a tail call, so
 * that the fast path keeps nothing on its stack across it). */
__attribute__((noinline, cold)) static void *published(void *p)
{
    hs__exact_publish(&hs__tls);
    return p;
}

/* The unsampled path of every allocating hook with glibc's allocator: a
 * test of the mode (HEAPSTORE_DISABLE: a second one, and a tail call to the
 * real function), one subtraction and a branch on the countdown, the real
 * function, and the block's exact count, inline: a
 * header load, three adds to the thread's counters and a range check
 * (hs_thread.h). Everything else is in out-of-line cold functions. k, a, b
 * and n as for real_call. */
#define HS_ALLOC_FAST(k, a, b, n, call)                                                            \
    int m_ = atomic_load_explicit(&ex_mode, memory_order_relaxed);                                 \
    if (HS_UNLIKELY(m_ != EX_GLIBC)) {                                                             \
        if (m_ == EX_PASS) return call;                                                            \
        return alloc_other(k, a, b, n);                                                            \
    }                                                                                              \
    hs_tls *t = &hs__tls;                                                                          \
    uint64_t c = t->countdown;                                                                     \
    if (HS_LIKELY((n) < c)) {                                                                      \
        t->countdown = c - (n);                                                                    \
        void *p_ = call;                                                                           \
        if (HS_LIKELY(p_ != NULL) && HS_UNLIKELY(hs__exact_alloc(&hs__tls, glibc_size(p_))))       \
            return published(p_);                                                                  \
        return p_;                                                                                 \
    }                                                                                              \
    return alloc_sampled(k, NULL, a, b, n)

HS_EXPORT void *malloc(size_t n)
{
    HS_ALLOC_FAST(K_MALLOC, 0, 0, n, real.malloc(n));
}

HS_EXPORT void *calloc(size_t n, size_t m)
{
    size_t s;
    if (__builtin_mul_overflow(n, m, &s)) return real.calloc(n, m);
    HS_ALLOC_FAST(K_CALLOC, n, m, s, real.calloc(n, m));
}

/* The unsampled free: the filter's load and branch, the block's size from
 * its header and the thread's counts, and a tail call to the real free (the
 * rare publish and other allocators' sizes in free_counted). NULL's granule
 * is always marked (hs_liveset.c) once sizes are counted, so NULL takes the
 * slow path without a test here. */
HS_EXPORT void free(void *p)
{
    if (HS_LIKELY(!hs__liveset_maybe(p))) {
        int m = atomic_load_explicit(&ex_mode, memory_order_relaxed);
        if (HS_LIKELY(m == EX_GLIBC)) {
            assert(p != NULL);
            if (HS_UNLIKELY(hs__exact_free(&hs__tls, glibc_size(p)))) {
                free_counted(p, 1);
                return;
            }
        } else if (m == EX_CALL && p) {
            free_counted(p, 0);
            return;
        }
        real.free(p);
        return;
    }
    free_slow(p);
}

/* realloc of a block that is not sampled (nor NULL), with any allocator. */
__attribute__((noinline)) static void *realloc_unsampled(void *p, size_t n)
{
    hs_tls *t = &hs__tls;
    uint64_t old = exact_on() ? exact_size(p) : 0, c = t->countdown;
    void *q;
    if (HS_LIKELY(n < c)) {
        t->countdown = c - n;
        q = real.realloc(p, n);
    } else {
        q = alloc_sampled(K_REALLOC, p, 0, 0, n);
    }
    if (q || n == 0) exact_moved(t, old, q);
    return q;
}

/* The unsampled move with glibc's allocator, as malloc's fast path: the old
 * block's size from its header before the call, the new one's after. A
 * failed move leaves p the program's and counts nothing; realloc(p, 0) and
 * the rest go to realloc_unsampled. */
HS_EXPORT void *realloc(void *p, size_t n)
{
    if (!p) return malloc(n);
    if (HS_UNLIKELY(hs__liveset_maybe(p))) return realloc_slow(p, n);
    hs_tls *t = &hs__tls;
    uint64_t c = t->countdown;
    if (HS_UNLIKELY(atomic_load_explicit(&ex_mode, memory_order_relaxed) != EX_GLIBC) ||
        HS_UNLIKELY(n == 0) || HS_UNLIKELY(n >= c))
        return realloc_unsampled(p, n);
    uint64_t old = glibc_size(p);
    t->countdown = c - n;
    void *q = real.realloc(p, n);
    if (HS_UNLIKELY(q == NULL)) return q;
    int due = hs__exact_free(t, old);
    due |= hs__exact_alloc(t, glibc_size(q));
    if (HS_UNLIKELY(due)) return published(q);
    return q;
}

HS_EXPORT void *reallocarray(void *p, size_t n, size_t m)
{
    size_t s;
    if (__builtin_mul_overflow(n, m, &s)) {
        errno = ENOMEM;
        return NULL;
    }
    return realloc(p, s);
}

HS_EXPORT void *memalign(size_t align, size_t n)
{
    HS_ALLOC_FAST(K_MEMALIGN, align, 0, n, real.memalign(align, n));
}

HS_EXPORT void *aligned_alloc(size_t align, size_t n)
{
    HS_ALLOC_FAST(K_ALIGNED_ALLOC, align, 0, n, real.aligned_alloc(align, n));
}

HS_EXPORT void *valloc(size_t n)
{
    HS_ALLOC_FAST(K_VALLOC, 0, 0, n, real.valloc(n));
}

HS_EXPORT void *pvalloc(size_t n)
{
    HS_ALLOC_FAST(K_PVALLOC, 0, 0, n, real.pvalloc(n));
}

__attribute__((noinline, cold)) static int posix_memalign_sampled(void **out, size_t align,
                                                                  size_t n)
{
    int rc = real.posix_memalign(out, align, n);
    int e = errno;
    alloc_slow(rc == 0 ? *out : NULL, n);
    if (rc == 0 && *out) exact_alloc(&hs__tls, *out);
    errno = e;
    return rc;
}

HS_EXPORT int posix_memalign(void **out, size_t align, size_t n)
{
    hs_tls *t = &hs__tls;
    uint64_t c = t->countdown;
    if (HS_LIKELY(n < c)) {
        t->countdown = c - n;
        int rc = real.posix_memalign(out, align, n);
        if (rc == 0 && *out) exact_alloc(t, *out);
        return rc;
    }
    return posix_memalign_sampled(out, align, n);
}

HS_EXPORT size_t malloc_usable_size(void *p)
{
    if (p && HS_UNLIKELY(hs__liveset_maybe(p)) && is_boot(p)) return boot_size(p);
    return real.usable_size(p);
}

/* C23; glibc 2.39 has them. Sizes are hints, so they are plain frees. */
HS_EXPORT void free_sized(void *p, size_t n);
HS_EXPORT void free_aligned_sized(void *p, size_t align, size_t n);

HS_EXPORT void free_sized(void *p, size_t n)
{
    (void)n;
    free(p);
}

HS_EXPORT void free_aligned_sized(void *p, size_t align, size_t n)
{
    (void)align;
    (void)n;
    free(p);
}

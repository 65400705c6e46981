/* hs_proc: loaded objects, statm and HELLO facts (see hs_proc.h). */
#include "hs_proc.h"

#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static int gen_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    uint64_t *out = data;
    if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
        out[0] = info->dlpi_adds;
        out[1] = info->dlpi_subs;
    }
    return 1; /* the counters are global: one object is enough */
}

void hs_proc_objects_gen(uint64_t *adds, uint64_t *subs)
{
    uint64_t v[2] = {0, 0};
    dl_iterate_phdr(gen_cb, v);
    *adds = v[0];
    *subs = v[1];
}

size_t hs_proc_build_id(const struct dl_phdr_info *info, const uint8_t **out)
{
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE) continue;
        const uint8_t *p = (const uint8_t *)(info->dlpi_addr + ph->p_vaddr);
        const uint8_t *end = p + ph->p_memsz;
        while (p + sizeof(ElfW(Nhdr)) <= end) {
            const ElfW(Nhdr) *n = (const ElfW(Nhdr) *)p;
            const uint8_t *name = p + sizeof *n;
            const uint8_t *desc = name + ((n->n_namesz + 3) & ~3u);
            const uint8_t *next = desc + ((n->n_descsz + 3) & ~3u);
            if (next > end) break;
            if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 && !memcmp(name, "GNU", 4)) {
                *out = desc;
                return n->n_descsz > HS_BUILD_ID_MAX ? HS_BUILD_ID_MAX : n->n_descsz;
            }
            p = next;
        }
    }
    return 0;
}

static int map_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    hs_wr *wr = data;
    static char exe[HS_STR_MAX];
    const char *path = info->dlpi_name;
    if (!path || !*path) {
        if (!exe[0]) {
            ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
            exe[n > 0 ? n : 0] = 0;
        }
        path = exe;
    }
    const uint8_t *bid = NULL;
    size_t bid_len = hs_proc_build_id(info, &bid);
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X) || ph->p_memsz == 0) continue;
        hs_mapping m = {
            .start = info->dlpi_addr + ph->p_vaddr,
            .end = info->dlpi_addr + ph->p_vaddr + ph->p_memsz,
            .file_offset = ph->p_offset,
            .build_id = bid,
            .build_id_len = (uint32_t)bid_len,
            .path = {path, strnlen(path, HS_STR_MAX)},
        };
        hs_mapping_put(wr, &m);
    }
    return 0;
}

void hs_proc_mappings_put(hs_wr *wr)
{
    dl_iterate_phdr(map_cb, wr);
}

static uint64_t parse_u64(const char **p)
{
    uint64_t v = 0;
    while (**p == ' ') (*p)++;
    while (**p >= '0' && **p <= '9') v = v * 10 + (uint64_t)(*(*p)++ - '0');
    return v;
}

int hs_proc_statm(int *fd, uint64_t *rss, uint64_t *vsize)
{
    *rss = *vsize = 0;
    if (*fd < 0) *fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (*fd < 0) return -1;
    char buf[128];
    ssize_t n = pread(*fd, buf, sizeof buf - 1, 0);
    if (n <= 0) return -1;
    buf[n] = 0;
    const char *p = buf;
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    *vsize = parse_u64(&p) * page;
    *rss = parse_u64(&p) * page;
    return 0;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* One line of /proc/self/maps: "START-END PERMS ...". 1 if it holds addr. */
static int maps_line_holds(const char *p, const char *end, uintptr_t addr, uintptr_t *lo,
                           uintptr_t *hi)
{
    uintptr_t v[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        int d, n = 0;
        while (p < end && (d = hexval(*p)) >= 0) {
            v[k] = v[k] << 4 | (uintptr_t)d;
            p++;
            n++;
        }
        if (!n || p >= end || *p != (k ? ' ' : '-')) return 0;
        p++;
    }
    if (p >= end || *p != 'r' || addr < v[0] || addr >= v[1]) return 0;
    *lo = v[0];
    *hi = v[1];
    return 1;
}

/* System calls themselves, not libc's wrappers: those are cancellation
 * points (a pending pthread_cancel would unwind the thread out of malloc)
 * and a program may wrap them. */
int hs_proc_region_of(uintptr_t addr, uintptr_t *lo, uintptr_t *hi)
{
    long fd = syscall(SYS_openat, AT_FDCWD, "/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    char buf[4096];
    size_t have = 0;
    int found = 0, skipping = 0; /* skipping: the rest of a line longer than buf */
    for (;;) {
        long n = syscall(SYS_read, (int)fd, buf + have, sizeof buf - have);
        if (n <= 0) break;
        have += (size_t)n;
        char *line = buf, *nl;
        while ((nl = memchr(line, '\n', have - (size_t)(line - buf)))) {
            if (!skipping && maps_line_holds(line, nl, addr, lo, hi)) {
                found = 1;
                break;
            }
            skipping = 0;
            line = nl + 1;
        }
        if (found) break;
        have -= (size_t)(line - buf);
        memmove(buf, line, have);
        if (have == sizeof buf) {
            have = 0;
            skipping = 1;
        }
    }
    syscall(SYS_close, (int)fd);
    return found ? 0 : -1;
}

static hs_str mkstr(const char *p, size_t n)
{
    hs_str s = {p, n > HS_STR_MAX ? HS_STR_MAX : n};
    return s;
}

void hs_proc_info_fill(hs_proc_info *b, hs_hello *h, const char *labels)
{
    ssize_t n = readlink("/proc/self/exe", b->program, sizeof b->program - 1);
    b->program[n > 0 ? n : 0] = 0;
    h->program = mkstr(b->program, strlen(b->program));
    if (gethostname(b->host, sizeof b->host - 1) != 0) b->host[0] = 0;
    b->host[sizeof b->host - 1] = 0;
    h->hostname = mkstr(b->host, strlen(b->host));

    h->argc = 0;
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    size_t len = 0;
    if (fd >= 0) {
        ssize_t r;
        while (len < sizeof b->cmdline - 1 &&
               (r = read(fd, b->cmdline + len, sizeof b->cmdline - 1 - len)) > 0)
            len += (size_t)r;
        close(fd);
    }
    b->cmdline[len] = 0;
    for (size_t i = 0; i < len && h->argc < HS_HELLO_MAX_ARGS;) {
        size_t k = strnlen(b->cmdline + i, len - i);
        h->argv[h->argc++] = mkstr(b->cmdline + i, k);
        i += k + 1;
    }

    /* key=value,key=value; entries without '=' get an empty value. */
    h->nlabels = 0;
    size_t ln = strnlen(labels, sizeof b->labels - 1);
    memcpy(b->labels, labels, ln);
    b->labels[ln] = 0;
    char *p = b->labels;
    while (*p && h->nlabels < HS_HELLO_MAX_LABELS) {
        char *end = p + strcspn(p, ",");
        char *eq = memchr(p, '=', (size_t)(end - p));
        if (end > p) {
            hs_label *l = &h->labels[h->nlabels++];
            if (eq) {
                l->key = mkstr(p, (size_t)(eq - p));
                l->value = mkstr(eq + 1, (size_t)(end - eq - 1));
            } else {
                l->key = mkstr(p, (size_t)(end - p));
                l->value = mkstr("", 0);
            }
        }
        p = *end ? end + 1 : end;
    }
}

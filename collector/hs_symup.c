/* hs_symup: symbol tables sent to a server that asks (see hs_symup.h). */
#include "hs_symup.h"

#include <assert.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hs_collector.h"
#include "hs_lz.h"
#include "hs_mem.h"
#include "hs_proc.h"
#include "hs_proto.h"

#define REQ_MAX   16
#define DONE_MAX  64
#define SHDR_MAX  4096         /* sections of a file we cut down */
#define PHDR_MAX  256          /* program headers */
#define PIECE     (256u << 10) /* uncompressed bytes a frame */
#define NOTES_MAX (64u << 10)  /* bytes of a note section read for the build id */
/* Of every SLICE_NS, the sender thread spends at most SLICE_WORK_NS reading
 * and compressing pieces (about 2 ms a piece): it goes on draining the
 * program's rings every cycle while an upload is under way. */
#define SLICE_NS      (20ull * 1000000)
#define SLICE_WORK_NS (5ull * 1000000)
/* The most the end of a run waits for uploads, past the delivery of its
 * frames: a build too big to send in that time is not sent by short
 * processes (the server asks again once in 30 s). */
#define FINAL_NS (1000ull * 1000000)

typedef struct bidkey {
    uint8_t bid[HS_BUILD_ID_MAX];
    uint32_t blen;
} bidkey;

/* A stretch of the output file: from the file at src, from the synthetic
 * headers (SRC_SYNTH: at the same offset in synth's layout), or zeros. */
#define SRC_SYNTH (-1)
#define SRC_ZERO  (-2)
typedef struct span {
    uint64_t dst, len;
    int64_t src;
    uint64_t synth_off; /* SRC_SYNTH: where in synth */
} span;

/* Buffers, mapped while there is work. */
typedef struct work {
    uint8_t frame[HS_FRAME_HDR_MAX + 128 + HS_LZ_BOUND(PIECE) + 16];
    uint8_t piece[PIECE];
    uint32_t table[HS_LZ_TABLE];
    uint8_t synth[sizeof(Elf64_Ehdr) + SHDR_MAX * sizeof(Elf64_Shdr)];
    span spans[2 * SHDR_MAX + 8];
} work;

static struct {
    pid_t pid;
    int cfg_read;
    uint64_t left; /* bytes the budget still allows */
    bidkey req[REQ_MAX];
    unsigned nreq;
    bidkey done[DONE_MAX]; /* answered, in this process */
    unsigned ndone;
    work *w;
    /* the upload under way */
    int active, fd;
    bidkey cur;
    uint64_t total, pos;
    unsigned nspans, si;
    /* the frame being written */
    size_t frame_len, frame_off;
    /* the sender thread's time spent preparing pieces, per SLICE_NS */
    uint64_t slice_t0, slice_spent;
    int final;             /* the run has ended: no rings to drain, no bound per slice */
    uint64_t final_end_ns; /* ... and the process waits for uploads until then */
} U = {.fd = -1};

static int same(const bidkey *k, const uint8_t *bid, uint32_t blen)
{
    return k->blen == blen && !memcmp(k->bid, bid, blen);
}

static void forget_upload(void)
{
    if (U.fd >= 0) close(U.fd);
    U.fd = -1;
    U.active = 0;
    U.total = U.pos = 0;
    U.nspans = U.si = 0;
}

/* A fork child is a run of its own: it answers for itself, from nothing
 * (the parent's buffers are copies it may drop). */
static void check_process(void)
{
    pid_t pid = getpid();
    if (U.pid == pid) return;
    if (U.pid && U.fd >= 0) close(U.fd);
    work *w = U.w;
    memset(&U, 0, sizeof U);
    U.fd = -1;
    U.pid = pid;
    if (w) hs_mem_unmap(w, sizeof *w);
}

unsigned hs__symup_hello_flags(void)
{
    check_process();
    if (!U.cfg_read) {
        U.left = hs__cfg.symbol_upload_max;
        U.cfg_read = 1;
    }
    return hs__cfg.target == HS_TARGET_TCP && hs__cfg.symbol_upload_max ? HS_HELLO_SYMDATA : 0;
}

void hs__symup_request(const uint8_t *p, size_t len)
{
    const uint8_t *bid;
    uint32_t blen;
    check_process();
    if (!hs__symup_hello_flags() || hs_symreq_decode(&bid, &blen, p, len)) return;
    if (U.active && same(&U.cur, bid, blen)) return;
    for (unsigned i = 0; i < U.nreq; i++)
        if (same(&U.req[i], bid, blen)) return;
    if (U.nreq == REQ_MAX) return; /* the server asks again on a later run */
    memcpy(U.req[U.nreq].bid, bid, blen);
    U.req[U.nreq++].blen = blen;
}

void hs__symup_conn_lost(void)
{
    check_process();
    U.nreq = 0;
    U.frame_len = U.frame_off = 0;
    forget_upload();
}

void hs__symup_final(void)
{
    check_process();
    U.final = 1;
    U.final_end_ns = hs_now_ns() + FINAL_NS;
}

int hs__symup_pending(void)
{
    if (U.pid != getpid() || (U.final && hs_now_ns() > U.final_end_ns)) return 0;
    return U.nreq || U.active || U.frame_off < U.frame_len;
}

int hs__symup_busy(void)
{
    return U.frame_off < U.frame_len;
}

void hs__symup_wrote(size_t n)
{
    U.frame_off += n;
    if (U.frame_off < U.frame_len) return;
    U.frame_off = U.frame_len = 0;
    if (!U.active && !U.nreq && U.w) { /* nothing left to do: give the memory back */
        hs_mem_unmap(U.w, sizeof *U.w);
        U.w = NULL;
    }
}

/* ---- finding and checking the file ---- */

typedef struct find_arg {
    const bidkey *want;
    char path[HS_STR_MAX];
    int found;
} find_arg;

static int find_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    find_arg *a = data;
    const uint8_t *bid = NULL;
    size_t blen = hs_proc_build_id(info, &bid);
    if (!blen || !same(a->want, bid, (uint32_t)blen)) return 0;
    const char *name = info->dlpi_name;
    if (name && *name) {
        snprintf(a->path, sizeof a->path, "%s", name);
    } else {
        ssize_t n = readlink("/proc/self/exe", a->path, sizeof a->path - 1);
        a->path[n > 0 ? n : 0] = 0;
    }
    a->found = a->path[0] == '/';
    return 1;
}

/* 1 if the notes in buf[0..n) hold the build id k. */
static int notes_have(const uint8_t *buf, uint64_t n, const bidkey *k)
{
    const uint8_t *p = buf, *end = buf + n;
    while ((size_t)(end - p) >= sizeof(Elf64_Nhdr)) {
        Elf64_Nhdr h;
        memcpy(&h, p, sizeof h);
        uint64_t name = ((uint64_t)h.n_namesz + 3) & ~3ull,
                 desc = ((uint64_t)h.n_descsz + 3) & ~3ull;
        if (name + desc > (uint64_t)(end - p) - sizeof h) return 0;
        const uint8_t *nm = p + sizeof h;
        if (h.n_type == NT_GNU_BUILD_ID && h.n_namesz == 4 && !memcmp(nm, "GNU", 4) &&
            h.n_descsz == k->blen && !memcmp(nm + name, k->bid, k->blen))
            return 1;
        p += sizeof h + name + desc;
    }
    return 0;
}

static int add_span(uint64_t *dst, uint64_t len, int64_t src, uint64_t synth_off)
{
    if (!len) return 0;
    if (U.nspans == sizeof U.w->spans / sizeof U.w->spans[0]) return -1;
    U.w->spans[U.nspans++] = (span){*dst, len, src, synth_off};
    *dst += len;
    return 0;
}

static int pad_to(uint64_t *dst, uint64_t align)
{
    if (align < 2 || (align & (align - 1)) || align > 4096) return 0;
    uint64_t to = (*dst + align - 1) & ~(align - 1);
    return add_span(dst, to - *dst, SRC_ZERO, 0);
}

/* Sections kept with their bytes: what a symbolizer reads. The others are
 * the program's loaded code and data, kept as NOBITS headers. */
static int keep_section(const Elf64_Shdr *sh)
{
    if (sh->sh_type == SHT_NOBITS || sh->sh_type == SHT_NULL || !sh->sh_size) return 0;
    return sh->sh_type == SHT_NOTE || sh->sh_type == SHT_SYMTAB || sh->sh_type == SHT_DYNSYM ||
           sh->sh_type == SHT_STRTAB || !(sh->sh_flags & SHF_ALLOC);
}

/* Checks the ELF file at fd and lays out the file to send; 0 or -1. */
static int plan(int fd)
{
    struct stat st;
    Elf64_Ehdr eh;
    if (fstat(fd, &st) || pread(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh) return -1;
    uint64_t size = (uint64_t)st.st_size;
    if (memcmp(eh.e_ident, ELFMAG, SELFMAG) || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
        eh.e_ident[EI_DATA] != ELFDATA2LSB || eh.e_shentsize != sizeof(Elf64_Shdr) ||
        eh.e_shnum == 0 || eh.e_shnum > SHDR_MAX || eh.e_shoff > size ||
        (uint64_t)eh.e_shnum * sizeof(Elf64_Shdr) > size - eh.e_shoff || eh.e_phnum > PHDR_MAX ||
        (eh.e_phnum && eh.e_phentsize != sizeof(Elf64_Phdr)) || eh.e_phoff > size ||
        (uint64_t)eh.e_phnum * sizeof(Elf64_Phdr) > size - eh.e_phoff)
        return -1;
    Elf64_Shdr *sh = (Elf64_Shdr *)(U.w->synth + sizeof eh);
    size_t shbytes = eh.e_shnum * sizeof *sh;
    if (pread(fd, sh, shbytes, (off_t)eh.e_shoff) != (ssize_t)shbytes) return -1;
    int bid_ok = 0;
    for (unsigned i = 1; i < eh.e_shnum && !bid_ok; i++) {
        if (sh[i].sh_type != SHT_NOTE || sh[i].sh_size > NOTES_MAX || sh[i].sh_offset > size ||
            sh[i].sh_size > size - sh[i].sh_offset)
            continue;
        if (pread(fd, U.w->piece, sh[i].sh_size, (off_t)sh[i].sh_offset) == (ssize_t)sh[i].sh_size)
            bid_ok = notes_have(U.w->piece, sh[i].sh_size, &U.cur);
    }
    if (!bid_ok) return -1; /* another build there now, or none */
    uint64_t dst = 0;
    U.nspans = 0;
    add_span(&dst, sizeof eh, SRC_SYNTH, 0);
    uint64_t phoff = eh.e_phnum ? dst : 0;
    add_span(&dst, (uint64_t)eh.e_phnum * sizeof(Elf64_Phdr), (int64_t)eh.e_phoff, 0);
    for (unsigned i = 1; i < eh.e_shnum; i++) {
        if (!keep_section(&sh[i])) {
            if (sh[i].sh_type != SHT_NULL) sh[i].sh_type = SHT_NOBITS;
            sh[i].sh_offset = dst;
            continue;
        }
        if (sh[i].sh_offset > size || sh[i].sh_size > size - sh[i].sh_offset) return -1;
        if (pad_to(&dst, sh[i].sh_addralign)) return -1;
        uint64_t at = dst;
        if (add_span(&dst, sh[i].sh_size, (int64_t)sh[i].sh_offset, 0)) return -1;
        sh[i].sh_offset = at;
    }
    if (pad_to(&dst, 8)) return -1;
    eh.e_shoff = dst;
    eh.e_phoff = phoff;
    if (add_span(&dst, shbytes, SRC_SYNTH, sizeof eh)) return -1;
    memcpy(U.w->synth, &eh, sizeof eh);
    U.total = dst;
    return 0;
}

/* Opens the best file of build k and plans it: its separate debug file on
 * this machine, else the object itself. 0 or -1. */
static int start(const bidkey *k)
{
    static const char hx[] = "0123456789abcdef";
    char dbg[64 + 2 * HS_BUILD_ID_MAX + 16], *o = dbg;
    find_arg a = {.want = k};
    dl_iterate_phdr(find_cb, &a);
    if (!a.found) return -1; /* not a build this process loaded */
    o += snprintf(dbg, 32, "/usr/lib/debug/.build-id/");
    for (uint32_t i = 0; i < k->blen; i++) {
        *o++ = hx[k->bid[i] >> 4];
        *o++ = hx[k->bid[i] & 15];
        if (i == 0) *o++ = '/';
    }
    memcpy(o, ".debug", 7);
    const char *cand[2] = {dbg, a.path};
    for (int i = 0; i < 2; i++) {
        U.fd = open(cand[i], O_RDONLY | O_CLOEXEC);
        if (U.fd >= 0 && plan(U.fd) == 0) return 0;
        if (U.fd >= 0) close(U.fd);
        U.fd = -1;
    }
    return -1;
}

/* ---- frames ---- */

/* Fills piece[0..n) from the plan at U.pos; 0 or -1 (the file changed). */
static int fill(uint8_t *out, size_t n)
{
    uint64_t pos = U.pos;
    while (n) {
        while (U.si < U.nspans && U.w->spans[U.si].dst + U.w->spans[U.si].len <= pos) U.si++;
        if (U.si == U.nspans) return -1;
        const span *s = &U.w->spans[U.si];
        uint64_t in = pos - s->dst, k = s->len - in < n ? s->len - in : n;
        if (s->src == SRC_ZERO)
            memset(out, 0, k);
        else if (s->src == SRC_SYNTH)
            memcpy(out, U.w->synth + s->synth_off + in, k);
        else if (pread(U.fd, out, k, (off_t)((uint64_t)s->src + in)) != (ssize_t)k)
            return -1;
        out += k;
        pos += k;
        n -= k;
    }
    return 0;
}

/* The SYMDATA frame of build k: a piece of size bytes at offset of total
 * (in U.w->piece), or, with total 0, the refusal. */
static void put_frame(const bidkey *k, uint64_t offset, uint64_t total, uint32_t size)
{
    hs_wr wr;
    hs_wr_init(&wr, U.w->frame, sizeof U.w->frame);
    size_t pos = hs_frame_begin(&wr, HS_FRAME_SYMDATA);
    hs_symdata d = {.bid = k->bid, .blen = k->blen, .offset = offset, .total = total, .size = size};
    uint8_t *z = U.w->frame + 2 * HS_FRAME_HDR_MAX + 96 + 2 * HS_VARINT_MAX;
    size_t room = sizeof U.w->frame - (size_t)(z - U.w->frame);
    size_t zlen = size ? hs_lz_compress(z, room, U.w->piece, size, U.w->table) : 0;
    if (zlen && zlen < size) d.method = HS_SYMDATA_LZ;
    hs_symdata_head(&wr, &d);
    if (d.method == HS_SYMDATA_LZ) {
        /* the compressed bytes go just after the head and its length */
        hs_wr_varint(&wr, zlen);
        assert(wr.err || wr.p <= z);
        if (!wr.err) {
            memmove(wr.p, z, zlen);
            wr.p += zlen;
        }
    } else {
        hs_wr_str(&wr, (const char *)U.w->piece, size);
    }
    hs_frame_end(&wr, pos);
    U.frame_len = wr.err ? 0 : hs_wr_len(&wr);
    U.frame_off = 0;
}

static void finish(const bidkey *k)
{
    if (U.ndone < DONE_MAX) U.done[U.ndone++] = *k;
    forget_upload();
}

/* Prepares the next frame: the next piece of the upload under way, or the
 * start of the next request. 1 if there is one. */
static int next_frame(void)
{
    if (!U.active) {
        if (!U.nreq) return 0;
        bidkey k = U.req[0];
        memmove(U.req, U.req + 1, --U.nreq * sizeof U.req[0]);
        int answered = 0;
        for (unsigned i = 0; i < U.ndone; i++) answered |= same(&U.done[i], k.bid, k.blen);
        if (!U.w && !(U.w = hs_mem_map(sizeof *U.w))) return 0;
        U.cur = k;
        if (answered || U.ndone == DONE_MAX || start(&k) || U.total > U.left ||
            U.total > HS_SYMDATA_FILE_MAX) {
            forget_upload();
            if (!answered) finish(&k);
            put_frame(&k, 0, 0, 0);
            return U.frame_len > 0;
        }
        U.active = 1;
    }
    uint32_t n = U.total - U.pos < PIECE ? (uint32_t)(U.total - U.pos) : PIECE;
    if (fill(U.w->piece, n)) {
        bidkey k = U.cur;
        finish(&k);
        put_frame(&k, 0, 0, 0);
        return U.frame_len > 0;
    }
    put_frame(&U.cur, U.pos, U.total, n);
    U.pos += n;
    U.left = U.left > U.frame_len ? U.left - U.frame_len : 0;
    if (U.pos == U.total) {
        bidkey k = U.cur;
        finish(&k);
    }
    return U.frame_len > 0;
}

int hs__symup_out(const uint8_t **p, size_t *n, int idle)
{
    check_process();
    if (U.frame_off >= U.frame_len) {
        if (!idle || (!U.active && !U.nreq)) return 0;
        uint64_t t0 = hs_now_ns();
        if (t0 - U.slice_t0 >= SLICE_NS) {
            U.slice_t0 = t0;
            U.slice_spent = 0;
        }
        if (U.slice_spent >= SLICE_WORK_NS && !U.final) return 0; /* the next cycle goes on */
        int ok = next_frame();
        U.slice_spent += hs_now_ns() - t0;
        if (!ok) return 0;
    }
    *p = U.w->frame + U.frame_off;
    *n = U.frame_len - U.frame_off;
    return 1;
}

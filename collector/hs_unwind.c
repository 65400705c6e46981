/* hs_unwind: the sampled path's own x86-64 unwinder (see hs_unwind.h). */
#include "hs_unwind.h"

#include <assert.h>
#include <link.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "hs_error.h"
#include "hs_mem.h"
#include "hs_proc.h"
#include "hs_wire.h"

#if defined(__x86_64__)

/* DWARF register numbers on x86-64. */
#define REG_RBP 6
#define REG_RSP 7
#define REG_RA  16

enum { K_STEP = HS_UNW_STEP, K_END = HS_UNW_END, K_FALLBACK = HS_UNW_FALLBACK };
enum { BP_SAME = HS_UNW_BP_SAME, BP_SAVED = HS_UNW_BP_SAVED, BP_LOST = HS_UNW_BP_LOST };

typedef hs_unw_rule rule;

/* A table slot: 16 bytes, four to a cache line. The value packs the rule:
 * gen:16 kind:2 cfa_rbp:1 bp_how:2 (3 spare) bp_off/8:8 ra_off/8:8 cfa_off:24.
 * Rules that do not fit are K_FALLBACK. */
typedef struct slot {
    _Atomic uint64_t key; /* the return address; 0: empty */
    _Atomic uint64_t val; /* replaced whole when a new generation's rule comes */
} slot;

typedef struct table {
    uint64_t mask, used;
    slot slot[];
} table;

#define CFA_MAX     ((1 << 24) - 1)
#define TABLE_MIN   4096u
#define TABLE_MAX   65536u
#define TABLES_MAX  64 /* tables made in a process's life, at most */
#define PROBE_MAX   32
#define STATE_DEPTH 8
/* Farther below __libc_stack_end than this, sp is not taken for the main
 * thread's stack without looking (the default stack limit). */
#define HS_MAIN_STACK_MAX (8u << 20)

static _Atomic(table *) cur_tab;
static hs_lock tab_lock;
static int tables_made;
static _Atomic uint32_t cur_gen = 1;
static _Atomic unsigned long long seen_subs;

/* r[0]: the return address into the caller, r[1]: the caller's rsp once the
 * call has returned, r[2]: rbp (callee-saved, so the caller's). */
void hs__unw_here(uint64_t r[3]);
__asm__(".pushsection .text\n"
        ".globl hs__unw_here\n"
        ".hidden hs__unw_here\n"
        ".type hs__unw_here,@function\n"
        "hs__unw_here:\n"
        ".cfi_startproc\n"
        "movq (%rsp), %rax\n"
        "movq %rax, 0(%rdi)\n"
        "leaq 8(%rsp), %rax\n"
        "movq %rax, 8(%rdi)\n"
        "movq %rbp, 16(%rdi)\n"
        "ret\n"
        ".cfi_endproc\n"
        ".size hs__unw_here, .-hs__unw_here\n"
        ".popsection\n");

static void unpack(uint64_t v, rule *r)
{
    r->kind = (uint8_t)(v >> 16 & 3);
    r->cfa_rbp = (uint8_t)(v >> 18 & 1);
    r->bp_how = (uint8_t)(v >> 19 & 3);
    r->bp_off = (int8_t)(uint8_t)(v >> 24) * 8;
    r->ra_off = (int8_t)(uint8_t)(v >> 32) * 8;
    r->cfa_off = (int32_t)(v >> 40);
}

static uint64_t pack(const rule *r)
{
    uint64_t v = (uint64_t)(r->gen & 0xffff) | (uint64_t)r->kind << 16 |
                 (uint64_t)r->cfa_rbp << 18 | (uint64_t)r->bp_how << 19 |
                 (uint64_t)(uint8_t)(int8_t)(r->bp_off / 8) << 24 |
                 (uint64_t)(uint8_t)(int8_t)(r->ra_off / 8) << 32 | (uint64_t)r->cfa_off << 40;
#ifndef NDEBUG
    /* A STEP rule comes back whole (hs__unwind_parse keeps it in range). */
    rule back;
    unpack(v, &back);
    assert(back.kind == r->kind);
    assert(r->kind != K_STEP ||
           (back.cfa_rbp == r->cfa_rbp && back.bp_how == r->bp_how && back.cfa_off == r->cfa_off &&
            back.ra_off == r->ra_off && (r->bp_how != BP_SAVED || back.bp_off == r->bp_off)));
#endif
    return v;
}

/* Nearby return addresses get nearby slots, so the frames of one stack,
 * mostly in a few objects, share cache lines: the table is read at every
 * frame of every sample, usually after the program has evicted it. */
static uint64_t home(uint64_t ip)
{
    return ip >> 4;
}

/* A packed rule is of generation gen (only its low 16 bits are kept). */
static inline int of_gen(uint64_t v, uint32_t gen)
{
    return (v & 0xffff) == (gen & 0xffff);
}

/* ip's rule of generation gen in the shared table, packed into *out. */
static int lookup(uint64_t ip, uint32_t gen, uint64_t *out)
{
    table *t = atomic_load_explicit(&cur_tab, memory_order_acquire);
    if (!t) return 0;
    uint64_t i = home(ip);
    for (int k = 0; k < PROBE_MAX; k++, i++) {
        const slot *s = &t->slot[i & t->mask];
        uint64_t key = atomic_load_explicit(&s->key, memory_order_acquire);
        if (!key) return 0;
        if (key == ip) {
            uint64_t v = atomic_load_explicit(&s->val, memory_order_acquire);
            if (!of_gen(v, gen)) return 0;
            *out = v;
            return 1;
        }
    }
    return 0;
}

static table *table_new(uint64_t cap)
{
    if (tables_made == TABLES_MAX) return NULL;
    assert(cap >= TABLE_MIN && cap <= TABLE_MAX && !(cap & (cap - 1)));
    table *t = hs_mem_map(sizeof(table) + cap * sizeof(slot));
    if (t) {
        t->mask = cap - 1;
        tables_made++;
    }
    return t;
}

/* Keeps r for ip: in the slot ip already has (a rule of an older generation
 * is replaced in one store, the generation inside it), else in a free one.
 * A full table is replaced by a larger one (or, at TABLE_MAX, a fresh one);
 * the old one stays mapped, since lock-free readers may still be probing
 * it. After TABLES_MAX tables, rules that find no room are not kept. */
static void insert(uint64_t ip, const rule *r)
{
    hs_lock_acquire(&tab_lock);
    table *t = atomic_load_explicit(&cur_tab, memory_order_relaxed);
    if (!t || (t->used + 1) * 4 > (t->mask + 1) * 3) {
        uint64_t cap = !t ? TABLE_MIN : t->mask + 1 < TABLE_MAX ? (t->mask + 1) * 2 : TABLE_MAX;
        table *n = table_new(cap);
        if (n) {
            t = n;
            atomic_store_explicit(&cur_tab, n, memory_order_release);
        }
    }
    if (t && t->used * 8 < (t->mask + 1) * 7) {
        uint64_t i = home(ip);
        for (int k = 0; k < PROBE_MAX; k++, i++) {
            slot *s = &t->slot[i & t->mask];
            uint64_t key = atomic_load_explicit(&s->key, memory_order_relaxed);
            if (key == ip) {
                atomic_store_explicit(&s->val, pack(r), memory_order_release);
                break;
            }
            if (key) continue;
            atomic_store_explicit(&s->val, pack(r), memory_order_relaxed);
            atomic_store_explicit(&s->key, ip, memory_order_release);
            t->used++;
            assert(t->used * 8 <= (t->mask + 1) * 7);
            break;
        }
    }
    hs_lock_release(&tab_lock);
}

void hs__unwind_invalidate(void)
{
    /* Slots keep 16 bits of the generation: when those wrap, old slots
     * would look current again, so the table goes (a new one starts). */
    uint32_t g = atomic_fetch_add_explicit(&cur_gen, 1, memory_order_release) + 1;
    if (!(g & 0xffff)) atomic_store_explicit(&cur_tab, NULL, memory_order_release);
}

/* ---- finding and reading the unwind tables ---- */

typedef struct obj {
    uintptr_t pc; /* the address looked up */
    rule *out;
    const uint8_t *hdr, *beg, *end; /* .eh_frame_hdr and its segment */
    unsigned long long subs;
    int have_subs;
} obj;

/* The dynamic loader's entry code (_start, then _dl_start_user, which calls
 * the constructors of the libraries loaded at start-up) is written without
 * unwind tables: it is the outermost frame of those constructors, some of
 * which allocate before our own constructor has run (see early_start in
 * hs_hooks.c). pc is inside it when it lies in the loader's object, within
 * a few instructions of the loader's ELF entry point. */
static int is_loader_entry(const struct dl_phdr_info *info, uintptr_t pc)
{
    uintptr_t base = (uintptr_t)getauxval(AT_BASE);
    if (!base || info->dlpi_addr != base) return 0;
    const ElfW(Ehdr) *eh = (const ElfW(Ehdr) *)base; /* mapped: the loader is linked at 0 */
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0) return 0;
    uintptr_t entry = base + eh->e_entry;
    return pc >= entry && pc - entry < 256;
}

static int find_obj(struct dl_phdr_info *info, size_t size, void *data)
{
    obj *o = data;
    if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
        o->subs = info->dlpi_subs;
        o->have_subs = 1;
    }
    if (!hs_proc_phdr_holds(info, o->pc)) return 0;
    const ElfW(Phdr) *eh = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_GNU_EH_FRAME) eh = &info->dlpi_phdr[i];
    if (eh) {
        uintptr_t h = info->dlpi_addr + eh->p_vaddr;
        for (int i = 0; i < info->dlpi_phnum; i++) {
            const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
            uintptr_t a = info->dlpi_addr + ph->p_vaddr;
            if (ph->p_type == PT_LOAD && h >= a && h - a < ph->p_filesz) {
                o->hdr = (const uint8_t *)h;
                o->beg = (const uint8_t *)a;
                o->end = (const uint8_t *)(a + ph->p_filesz);
            }
        }
    }
    if (o->hdr) hs__unwind_parse(o->out, o->hdr, o->beg, o->end, o->pc);
    if (o->out->kind == K_FALLBACK && is_loader_entry(info, o->pc)) o->out->kind = K_END;
    return 1;
}

/* The tables are read with hs_wire's reader (bounded, first error sticks);
 * its varint is DWARF's unsigned LEB128. What DWARF adds: fixed-size
 * little-endian fields and signed LEB128. */
static void rd_bad(hs_rd *r)
{
    if (!r->err) r->err = HS_EPROTO;
    r->p = r->end;
}

static uint64_t rd_n(hs_rd *r, size_t n)
{
    uint64_t v = 0;
    const uint8_t *b = hs_rd_bytes(r, n);
    if (b) memcpy(&v, b, n); /* little-endian */
    return v;
}

static int64_t rd_sleb(hs_rd *r)
{
    uint64_t v = 0;
    int s = 0;
    uint8_t b;
    do {
        b = hs_rd_u8(r);
        if (r->err || s >= 64) {
            rd_bad(r);
            return 0;
        }
        v |= (uint64_t)(b & 0x7f) << s;
        s += 7;
    } while (b & 0x80);
    if (s < 64 && (b & 0x40)) v |= ~0ull << s;
    return (int64_t)v;
}

/* A DW_EH_PE-encoded pointer. datarel is the base for DW_EH_PE_datarel (0:
 * not allowed here). Indirect and the rarer bases are not handled. */
static uintptr_t rd_enc(hs_rd *r, uint8_t enc, uintptr_t datarel)
{
    uintptr_t field = (uintptr_t)r->p, v;
    switch (enc & 0x0f) {
    case 0x00:
        v = (uintptr_t)rd_n(r, 8);
        break;
    case 0x01:
        v = (uintptr_t)hs_rd_varint(r);
        break;
    case 0x02:
        v = (uintptr_t)rd_n(r, 2);
        break;
    case 0x03:
        v = (uintptr_t)rd_n(r, 4);
        break;
    case 0x04:
        v = (uintptr_t)rd_n(r, 8);
        break;
    case 0x09:
        v = (uintptr_t)rd_sleb(r);
        break;
    case 0x0a:
        v = (uintptr_t)(int64_t)(int16_t)rd_n(r, 2);
        break;
    case 0x0b:
        v = (uintptr_t)(int64_t)(int32_t)rd_n(r, 4);
        break;
    case 0x0c:
        v = (uintptr_t)rd_n(r, 8);
        break;
    default:
        rd_bad(r);
        return 0;
    }
    switch (enc & 0x70) {
    case 0x00:
        break;
    case 0x10:
        v += field;
        break;
    case 0x30:
        if (!datarel) rd_bad(r);
        v += datarel;
        break;
    default:
        rd_bad(r);
    }
    if (enc & 0x80) rd_bad(r);
    return v;
}

typedef struct regrule {
    uint8_t how; /* BP_SAME (or never set), BP_SAVED at cfa+off, BP_LOST */
    int64_t off;
} regrule;

typedef struct row {
    uint64_t cfa_reg;
    int64_t cfa_off;
    regrule bp, ra;
} row;

typedef struct cie {
    uint64_t code_align;
    int64_t data_align;
    uint8_t fde_enc;
    int aug_z;
    const uint8_t *insns, *end;
} cie;

static int parse_cie(const uint8_t *p, const uint8_t *lim, cie *c)
{
    hs_rd r;
    hs_rd_init(&r, p, (size_t)(lim - p));
    uint64_t len = rd_n(&r, 4);
    if (len == 0xffffffffu) return -1; /* 64-bit DWARF: not emitted on x86-64 */
    if (r.err || len > (uint64_t)(lim - r.p)) return -1;
    c->end = r.p + len;
    r.end = c->end;
    if (rd_n(&r, 4) != 0) return -1; /* a CIE's id is 0 in .eh_frame */
    uint8_t version = hs_rd_u8(&r);
    if (version != 1 && version != 3) return -1;
    const char *aug = (const char *)r.p;
    size_t alen = strnlen(aug, (size_t)(r.end - r.p));
    if (alen == (size_t)(r.end - r.p)) return -1;
    r.p += alen + 1;
    c->code_align = hs_rd_varint(&r);
    c->data_align = rd_sleb(&r);
    uint64_t ra = version == 1 ? rd_n(&r, 1) : hs_rd_varint(&r);
    if (ra != REG_RA) return -1;
    c->fde_enc = 0; /* DW_EH_PE_absptr */
    c->aug_z = aug[0] == 'z';
    if (c->aug_z) {
        uint64_t dlen = hs_rd_varint(&r);
        if (r.err || dlen > (uint64_t)(r.end - r.p)) return -1;
        const uint8_t *dend = r.p + dlen;
        for (size_t i = 1; i < alen; i++) {
            switch (aug[i]) {
            case 'R':
                c->fde_enc = hs_rd_u8(&r);
                break;
            case 'L':
                rd_n(&r, 1);
                break;
            case 'P': {
                uint8_t e = hs_rd_u8(&r);
                rd_enc(&r, (uint8_t)(e & 0x7f), 0); /* skipped; its value is not needed */
                break;
            }
            default:
                return -1; /* 'S' (a signal frame) and anything newer */
            }
        }
        r.p = dend;
    } else if (alen) {
        return -1;
    }
    c->insns = r.p;
    return r.err ? -1 : 0;
}

/* Only rbp and the return address are tracked; the caller's rsp is taken to
 * be the CFA, so a frame giving rsp a rule of its own is not ours to walk. */
static int set_reg(row *s, uint64_t reg, uint8_t how, int64_t off)
{
    if (reg == REG_RSP) return -1;
    if (reg == REG_RBP)
        s->bp = (regrule){how, off};
    else if (reg == REG_RA)
        s->ra = (regrule){how, off};
    return 0;
}

/* DW_CFA_restore: back to the rule the CIE gave the register. */
static int restore_reg(row *s, const row *init, uint64_t reg)
{
    if (reg == REG_RSP) return -1;
    if (reg == REG_RBP) s->bp = init->bp;
    if (reg == REG_RA) s->ra = init->ra;
    return 0;
}

/* A factored operand times its alignment factor: an offset in bytes. A
 * product past int64 (no compiler emits one) fails the read. */
static int64_t factored(hs_rd *r, int64_t f, int64_t align)
{
    int64_t v;
    if (__builtin_mul_overflow(f, align, &v)) {
        rd_bad(r);
        return 0;
    }
    return v;
}

/* The register's rule is one we cannot follow (an expression, a value
 * rule): fine for any register but the three we track. */
static int untracked(uint64_t reg)
{
    return reg == REG_RBP || reg == REG_RA || reg == REG_RSP ? -1 : 0;
}

/* One call frame instruction that sets a rule (a register's or the CFA's)
 * or only has operands to skip: 0 done, -1 a frame not ours to walk. The
 * ones that move the location or the state stack are run_cfa's. */
static int cfa_rule_op(hs_rd *r, const cie *c, uint8_t op, row *s, const row *init)
{
    uint64_t reg, n;
    switch (op >> 6) {
    case 2: /* DW_CFA_offset */
        return set_reg(s, op & 0x3f, BP_SAVED,
                       factored(r, (int64_t)hs_rd_varint(r), c->data_align));
    case 3: /* DW_CFA_restore */
        return restore_reg(s, init, op & 0x3f);
    }
    switch (op) {
    case 0x00: /* DW_CFA_nop */
        return 0;
    case 0x05: /* DW_CFA_offset_extended */
        reg = hs_rd_varint(r);
        return set_reg(s, reg, BP_SAVED, factored(r, (int64_t)hs_rd_varint(r), c->data_align));
    case 0x06:
        return restore_reg(s, init, hs_rd_varint(r));
    case 0x07:
        return set_reg(s, hs_rd_varint(r), BP_LOST, 0);
    case 0x08:
        return set_reg(s, hs_rd_varint(r), BP_SAME, 0);
    case 0x09: /* DW_CFA_register */
        reg = hs_rd_varint(r);
        hs_rd_varint(r);
        return untracked(reg);
    case 0x0c:
        s->cfa_reg = hs_rd_varint(r);
        s->cfa_off = (int64_t)hs_rd_varint(r);
        return 0;
    case 0x0d:
        s->cfa_reg = hs_rd_varint(r);
        return 0;
    case 0x0e:
        s->cfa_off = (int64_t)hs_rd_varint(r);
        return 0;
    case 0x10:
    case 0x16: /* DW_CFA_expression, DW_CFA_val_expression */
        reg = hs_rd_varint(r);
        n = hs_rd_varint(r);
        if (untracked(reg) || n > (uint64_t)(r->end - r->p)) return -1;
        r->p += n;
        return 0;
    case 0x11:
        reg = hs_rd_varint(r);
        return set_reg(s, reg, BP_SAVED, factored(r, rd_sleb(r), c->data_align));
    case 0x12:
        s->cfa_reg = hs_rd_varint(r);
        s->cfa_off = factored(r, rd_sleb(r), c->data_align);
        return 0;
    case 0x13:
        s->cfa_off = factored(r, rd_sleb(r), c->data_align);
        return 0;
    case 0x14:
    case 0x15: /* DW_CFA_val_offset(_sf) */
        reg = hs_rd_varint(r);
        if (op == 0x14)
            hs_rd_varint(r);
        else
            rd_sleb(r);
        return untracked(reg);
    case 0x2e: /* DW_CFA_GNU_args_size */
        hs_rd_varint(r);
        return 0;
    case 0x2f: /* DW_CFA_GNU_negative_offset_extended */
        reg = hs_rd_varint(r);
        return set_reg(s, reg, BP_SAVED,
                       factored(r, factored(r, (int64_t)hs_rd_varint(r), c->data_align), -1));
    default: /* DW_CFA_def_cfa_expression (0x0f) and anything unknown */
        return -1;
    }
}

/* Runs call frame instructions until the location passes target. init is
 * the row after the CIE's instructions (for DW_CFA_restore). */
static int run_cfa(hs_rd *r, const cie *c, uint8_t fde_enc, uintptr_t loc, uintptr_t target, row *s,
                   const row *init)
{
    row stack[STATE_DEPTH];
    int depth = 0;
    while (r->p < r->end && !r->err) {
        uint8_t op = hs_rd_u8(r);
        uint64_t delta;
        if (op >> 6 == 1) { /* DW_CFA_advance_loc */
            delta = op & 0x3f;
        } else if (op >= 0x02 && op <= 0x04) { /* DW_CFA_advance_loc1, 2, 4 */
            delta = rd_n(r, (size_t)1 << (op - 0x02));
        } else if (op == 0x01) { /* DW_CFA_set_loc */
            loc = rd_enc(r, fde_enc, 0);
            if (r->err) return -1;
            if (loc > target) return 0;
            continue;
        } else if (op == 0x0a) { /* DW_CFA_remember_state */
            if (depth == STATE_DEPTH) return -1;
            stack[depth++] = *s;
            continue;
        } else if (op == 0x0b) { /* DW_CFA_restore_state */
            if (!depth) return -1;
            *s = stack[--depth];
            continue;
        } else {
            if (cfa_rule_op(r, c, op, s, init)) return -1;
            continue;
        }
        loc += delta * c->code_align;
        if (loc > target) return 0;
    }
    return r->err ? -1 : 0;
}

/* An offset the packed rule can hold. */
static int fits8(int64_t off)
{
    return off % 8 == 0 && off >= -1024 && off <= 1016;
}

static void parse_rule(rule *out, const uint8_t *hdr, const uint8_t *beg, const uint8_t *end,
                       uintptr_t target)
{
    /* .eh_frame_hdr: version, encodings, then a sorted search table. */
    hs_rd r;
    hs_rd_init(&r, hdr, (size_t)(end - hdr));
    if (rd_n(&r, 1) != 1) return;
    uint8_t ptr_enc = hs_rd_u8(&r), cnt_enc = hs_rd_u8(&r);
    uint8_t tab_enc = hs_rd_u8(&r);
    rd_enc(&r, ptr_enc, (uintptr_t)hdr);
    uint64_t count = rd_enc(&r, cnt_enc, (uintptr_t)hdr);
    if (r.err || tab_enc != 0x3b /* datarel | sdata4 */ || !count ||
        count > (uint64_t)(r.end - r.p) / 8)
        return;
    const uint8_t *tab = r.p;
    uint64_t lo = 0, hi = count;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        int32_t start;
        memcpy(&start, tab + mid * 8, 4);
        if ((uintptr_t)hdr + (intptr_t)start <= target)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (!lo) return;
    int32_t rel;
    memcpy(&rel, tab + (lo - 1) * 8 + 4, 4);
    const uint8_t *fde = hdr + rel;
    if (fde < beg || fde >= end) return;

    /* The FDE and its CIE. The segment bounds every read. */
    hs_rd_init(&r, fde, (size_t)(end - fde));
    uint64_t len = rd_n(&r, 4);
    if (r.err || len == 0 || len == 0xffffffffu || len > (uint64_t)(end - r.p)) return;
    r.end = r.p + len;
    const uint8_t *cie_field = r.p;
    uint32_t cie_off = (uint32_t)rd_n(&r, 4);
    if (r.err || !cie_off || cie_off > (uintptr_t)(cie_field - beg)) return;
    cie c;
    if (parse_cie(cie_field - cie_off, end, &c) != 0) return;
    uintptr_t pc_begin = rd_enc(&r, c.fde_enc, 0);
    uintptr_t pc_range = rd_enc(&r, (uint8_t)(c.fde_enc & 0x0f), 0);
    if (r.err || target < pc_begin || target - pc_begin >= pc_range) return;
    if (c.aug_z) {
        uint64_t alen = hs_rd_varint(&r);
        if (r.err || alen > (uint64_t)(r.end - r.p)) return;
        r.p += alen;
    }

    row init = {REG_RSP, 8, {BP_SAME, 0}, {BP_SAME, 0}};
    hs_rd ci;
    hs_rd_init(&ci, c.insns, (size_t)(c.end - c.insns));
    if (run_cfa(&ci, &c, c.fde_enc, 0, UINTPTR_MAX, &init, &init) != 0) return;
    row s = init;
    if (run_cfa(&r, &c, c.fde_enc, pc_begin, target, &s, &init) != 0) return;

    if (s.ra.how == BP_LOST) { /* the outermost frame (_start, clone) */
        out->kind = K_END;
        return;
    }
    if (s.ra.how != BP_SAVED || (s.cfa_reg != REG_RSP && s.cfa_reg != REG_RBP)) return;
    if (s.cfa_off <= 0 || s.cfa_off > CFA_MAX || !fits8(s.ra.off) ||
        (s.bp.how == BP_SAVED && !fits8(s.bp.off)))
        return;
    out->kind = K_STEP;
    out->cfa_rbp = s.cfa_reg == REG_RBP;
    out->cfa_off = (int32_t)s.cfa_off;
    out->ra_off = (int32_t)s.ra.off;
    out->bp_how = s.bp.how;
    out->bp_off = (int32_t)s.bp.off;
}

/* On a miss it runs inside dl_iterate_phdr's callback, so the object cannot
 * be unloaded meanwhile. */
int hs__unwind_parse(hs_unw_rule *out, const uint8_t *hdr, const uint8_t *beg, const uint8_t *end,
                     uintptr_t target)
{
    assert(beg <= hdr && hdr <= end);
    *out = (rule){.kind = K_FALLBACK};
    parse_rule(out, hdr, beg, end, target);
    /* What pack() can hold, and what the walk relies on. */
    assert(out->kind != K_STEP ||
           (out->cfa_off > 0 && out->cfa_off <= CFA_MAX && fits8(out->ra_off) &&
            fits8(out->bp_off) && out->bp_how <= BP_LOST && out->cfa_rbp <= 1));
    return out->kind;
}

/* The rule for the frame whose return address (or, for the innermost frame,
 * current pc) is ip. Always fills out; K_FALLBACK when we cannot tell. */
static void compute(uint64_t ip, rule *out)
{
    memset(out, 0, sizeof *out);
    out->kind = K_FALLBACK;
    obj o = {.pc = (uintptr_t)ip - 1 /* inside the call instruction */, .out = out};
    dl_iterate_phdr(find_obj, &o);
    if (o.have_subs) {
        /* Stored plus one: 0 means not seen yet. */
        unsigned long long seen = atomic_load_explicit(&seen_subs, memory_order_relaxed);
        if (seen != o.subs + 1) {
            if (seen) hs__unwind_invalidate();
            atomic_store_explicit(&seen_subs, o.subs + 1, memory_order_relaxed);
        }
    }
    out->gen = atomic_load_explicit(&cur_gen, memory_order_acquire);
}

/* Looks up the mapping that holds sp (at most HS_UNWIND_LOOKUPS times per
 * thread). 1 when b now holds it. */
static int refresh(hs_stack_bounds *b, uintptr_t sp)
{
    if (b->lookups >= HS_UNWIND_LOOKUPS) return 0;
    b->lookups++;
    if (hs_proc_region_of(sp, &b->lo, &b->hi) != 0) {
        b->lo = b->hi = b->top = 0;
        return 0;
    }
    if (b->top > b->hi || b->top <= b->lo) b->top = 0; /* another region */
    return 1;
}

typedef struct walk {
    hs_stack_bounds *b;
    uintptr_t sp, maxread;
    int fresh; /* b was looked up during this walk */
} walk;

/* A word of the thread's own stack, above the current frame. Below b->top
 * (the highest word a complete walk read) it is the stack for sure; above,
 * only the mapping as it is now can tell, since the one looked up earlier
 * may have been merged with memory that has since been unmapped. (Not an
 * instrumented access: the words are return addresses and saved registers
 * of frames that are not ours.) */
__attribute__((no_sanitize("address"))) static inline int load(walk *w, uintptr_t a, uintptr_t *v)
{
    if (a < w->sp || a > UINTPTR_MAX - sizeof(uintptr_t)) return 0;
    if (a + sizeof(uintptr_t) > w->b->top) {
        if (!w->fresh) {
            if (!refresh(w->b, w->sp)) return 0;
            w->fresh = 1;
        }
        if (a + sizeof(uintptr_t) > w->b->hi) return 0;
    }
    if (a + sizeof(uintptr_t) > w->maxread) w->maxread = a + sizeof(uintptr_t);
    *v = *(const uintptr_t *)a;
    return 1;
}

/* A walk that reached the end of the stack vouches for what it read. */
static int complete(walk *w, int n)
{
    if (w->maxread > w->b->top) w->b->top = w->maxread;
    return n;
}

/* The kernel's stack pointer at _start (glibc's). */
extern void *__libc_stack_end;

/* The main thread's first walk: every word from sp up to __libc_stack_end
 * is its stack for sure, whatever the mappings around it, so no
 * /proc/self/maps read is needed (a process that samples once, in its
 * main thread, read it for that alone). A deeper sp later, or a read above
 * __libc_stack_end, looks the mapping up as in any other thread. */
static void main_stack_bounds(hs_stack_bounds *b, uintptr_t sp)
{
    uintptr_t end = (uintptr_t)__libc_stack_end & ~(uintptr_t)7;
    if (!end || sp >= end || end - sp > HS_MAIN_STACK_MAX) return;
    if (syscall(SYS_gettid) != getpid()) return;
    b->lo = sp & ~(uintptr_t)4095;
    b->hi = b->top = end;
    assert(b->lo <= sp && sp < b->hi);
}

__attribute__((noinline)) int hs__unwind_fast(void **out, int cap, hs_stack_bounds *b)
{
    uint64_t regs[3];
    hs__unw_here(regs);
    uintptr_t ip = regs[0], sp = regs[1], bp = regs[2];
    int bp_ok = 1;
    walk w = {b, sp, 0, 0};
    if (!(++b->walks & 1023) && b->lookups) b->lookups--;
    if (HS_UNLIKELY(!b->hi && !b->lookups)) main_stack_bounds(b, sp);
    if (sp < b->lo || sp >= b->hi) {
        if (!refresh(b, sp)) return -1;
        assert(b->lo <= sp && sp < b->hi);
        w.fresh = 1;
    }
    uint32_t gen = atomic_load_explicit(&cur_gen, memory_order_acquire);
    int n = 0;
    while (n < cap) {
        out[n++] = (void *)ip;
        rule ru;
        uint64_t v;
        unsigned near = (unsigned)(ip ^ ip >> 7) & (HS_UNWIND_NEAR - 1);
        if (b->near_ip[near] == ip && of_gen(b->near_rule[near], gen)) {
            v = b->near_rule[near];
        } else {
            if (!lookup(ip, gen, &v)) {
                compute(ip, &ru);
                gen = ru.gen; /* an object went away: newer rules from here on */
                insert(ip, &ru);
                v = pack(&ru);
            }
            b->near_ip[near] = ip;
            b->near_rule[near] = v;
        }
        unpack(v, &ru);
        if (ru.kind == K_END) return complete(&w, n);
        if (ru.kind != K_STEP || (ru.cfa_rbp && !bp_ok)) return -1;
        uintptr_t cfa = (ru.cfa_rbp ? bp : sp) + (uintptr_t)(intptr_t)ru.cfa_off;
        if (cfa <= sp) return -1;
        uintptr_t ra;
        w.sp = sp;
        if (!load(&w, cfa + (uintptr_t)(intptr_t)ru.ra_off, &ra)) return -1;
        if (ru.bp_how == BP_SAVED) {
            if (!load(&w, cfa + (uintptr_t)(intptr_t)ru.bp_off, &bp)) return -1;
            bp_ok = 1;
        } else if (ru.bp_how == BP_LOST) {
            bp_ok = 0;
        }
        if (!ra) return complete(&w, n);
        sp = cfa;
        ip = ra;
    }
    return n;
}

#else /* not x86-64: libunwind does it all */

int hs__unwind_fast(void **out, int cap, hs_stack_bounds *b)
{
    (void)out, (void)cap, (void)b;
    return -1;
}

void hs__unwind_invalidate(void)
{
}

int hs__unwind_parse(hs_unw_rule *out, const uint8_t *hdr, const uint8_t *beg, const uint8_t *end,
                     uintptr_t pc)
{
    (void)hdr, (void)beg, (void)end, (void)pc;
    *out = (hs_unw_rule){.kind = HS_UNW_FALLBACK};
    return out->kind;
}

#endif

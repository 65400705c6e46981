/* Unit tests of the collector's .eh_frame reader (hs__unwind_parse in
 * collector/hs_unwind.c) on the real tables of the objects loaded in this
 * process (libc, libm, the test itself). At the first instruction of any
 * ordinary x86-64 function the call has just pushed the return address, so
 * the rule is known without DWARF: CFA = rsp + 8, return address at CFA - 8,
 * rbp untouched. Every FDE of these objects is read at its first byte; where
 * that byte is an exported function's entry (dladdr says so) the rule must be
 * exactly that one. Other FDEs (cold parts of split functions, PLT stubs,
 * local functions) are only counted: a few END (the outermost frames) and
 * FALLBACK (signal trampolines) at most. One byte before the first FDE there
 * is no rule. (The fuzzer fuzz_cfa covers damaged tables.) */
#include <dlfcn.h>
#include <link.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "hs_error.h"
#include "hs_unwind.h"

typedef struct tally {
    const char *want; /* a substring of the object's path */
    const char *path;
    size_t fdes, entries, step, end, fallback, wrong;
    size_t before_first; /* rules found one byte before the first FDE */
} tally;

static int visit(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    tally *t = data;
    const char *name = info->dlpi_name && *info->dlpi_name ? info->dlpi_name : "(main)";
    if (!strstr(name, t->want)) return 0;
    const ElfW(Phdr) *eh = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_GNU_EH_FRAME) eh = &info->dlpi_phdr[i];
    if (!eh) return 0;
    const uint8_t *hdr = (const uint8_t *)(info->dlpi_addr + eh->p_vaddr), *beg = NULL, *end = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        const uint8_t *a = (const uint8_t *)(info->dlpi_addr + ph->p_vaddr);
        if (ph->p_type == PT_LOAD && hdr >= a && hdr < a + ph->p_filesz) {
            beg = a;
            end = a + ph->p_filesz;
        }
    }
    if (!beg) return 0;
    /* version 1, then the encodings the reader insists on for the table */
    if (hdr[0] != 1 || hdr[1] != 0x1b || hdr[2] != 0x03 || hdr[3] != 0x3b) return 0;
    uint32_t count;
    memcpy(&count, hdr + 8, 4);
    t->path = name;
    for (uint32_t k = 0; k < count; k++) {
        int32_t start;
        memcpy(&start, hdr + 12 + 8 * k, 4);
        uintptr_t pc = (uintptr_t)hdr + (intptr_t)start;
        hs_unw_rule r;
        int kind = hs__unwind_parse(&r, hdr, beg, end, pc);
        t->fdes++;
        Dl_info di;
        if (dladdr((void *)pc, &di) && di.dli_saddr == (void *)pc) {
            t->entries++;
            if (kind != HS_UNW_STEP || r.cfa_rbp || r.cfa_off != 8 || r.ra_off != -8 ||
                r.bp_how != HS_UNW_BP_SAME) {
                if (t->wrong++ < 5)
                    print_message("%s: %s: kind %d cfa %s+%d ra %d bp %d/%d\n", name, di.dli_sname,
                                  kind, r.cfa_rbp ? "rbp" : "rsp", r.cfa_off, r.ra_off, r.bp_how,
                                  r.bp_off);
            }
        }
        if (kind == HS_UNW_STEP) {
            t->step++;
        } else if (kind == HS_UNW_END) {
            t->end++;
        } else {
            t->fallback++;
        }
        if (k == 0 && hs__unwind_parse(&r, hdr, beg, end, pc - 1) != HS_UNW_FALLBACK)
            t->before_first++;
    }
    return 1;
}

static void test_unwind_entry_rules(void **state)
{
    (void)state;
    static const struct {
        const char *object;
        size_t min_entries;
    } cases[] = {
        {"libc.so", 1000},
        {"libm.so", 100},
        {"libcmocka.so", 20},
    };
    volatile double keep_libm = sqrt((double)(uintptr_t)state + 2.0); /* libm is loaded */
    (void)keep_libm;
    for (size_t c = 0; c < HS_COUNTOF(cases); c++) {
        tally t = {.want = cases[c].object};
        dl_iterate_phdr(visit, &t);
        print_message("%s: %zu FDEs, %zu at exported entries: %zu STEP, %zu END, %zu FALLBACK\n",
                      t.path ? t.path : cases[c].object, t.fdes, t.entries, t.step, t.end,
                      t.fallback);
        assert_true(t.entries >= cases[c].min_entries);
        assert_int_equal(t.wrong, 0);
        assert_int_equal(t.before_first, 0);
        /* END and FALLBACK: a handful of special frames, never the rule. */
        assert_true(t.end + t.fallback <= 8 + t.fdes / 200);
    }
}

/* Bounds the caller gives are respected: with the segment cut just after
 * the header (no .eh_frame in reach), nothing is found, and a header that
 * is not version 1 is refused. */
static int cut(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    if (!strstr(info->dlpi_name ? info->dlpi_name : "", "libc.so")) return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        if (info->dlpi_phdr[i].p_type != PT_GNU_EH_FRAME) continue;
        const uint8_t *hdr = (const uint8_t *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
        int32_t start;
        memcpy(&start, hdr + 12, 4);
        uintptr_t pc = (uintptr_t)hdr + (intptr_t)start;
        hs_unw_rule r;
        /* the header alone, and the header without its table */
        assert_int_equal(hs__unwind_parse(&r, hdr, hdr, hdr + 12, pc), HS_UNW_FALLBACK);
        assert_int_equal(hs__unwind_parse(&r, hdr, hdr, hdr, pc), HS_UNW_FALLBACK);
        *(int *)data = 1;
        return 1;
    }
    return 0;
}

static void test_unwind_bounds(void **state)
{
    (void)state;
    int seen = 0;
    dl_iterate_phdr(cut, &seen);
    assert_int_equal(seen, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unwind_entry_rules),
        cmocka_unit_test(test_unwind_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Unit test of hs_symup, the collector's answers to SYMREQ, driven as the
 * sender thread drives it: a copy of libwl_dl.so is loaded from a temporary
 * folder, its build id asked for, and the frames hs__symup_out gives are
 * decoded and put together again. The file that comes out is an ELF file
 * of that build with its symbol table; a second request, a build not
 * loaded, a file deleted or replaced by another build, a spent budget are
 * declined (total 0), and so is one cut short in the middle of its upload;
 * a lost connection drops the piece under way. Cases
 * that need a fresh process state run in a fork child (a child is a run of
 * its own to hs_symup). */
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "hs_collector.h"
#include "hs_lz.h"
#include "hs_proc.h"
#include "hs_proto.h"
#include "hs_symup.h"

hs_config hs__cfg;

static char dir[400], copy[450];
static uint8_t bid[HS_BUILD_ID_MAX];
static uint32_t blen;

static int find_copy(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size, (void)data;
    if (!info->dlpi_name || strcmp(info->dlpi_name, copy)) return 0;
    const uint8_t *p;
    blen = (uint32_t)hs_proc_build_id(info, &p);
    memcpy(bid, p, blen);
    return 1;
}

static void request(const uint8_t *b, uint32_t n)
{
    uint8_t buf[128];
    hs_wr wr;
    hs_wr_init(&wr, buf, sizeof buf);
    hs_symreq_encode(&wr, b, n);
    hs__symup_request(buf, hs_wr_len(&wr));
}

/* Takes every frame hs_symup has (idle socket), writing them whole; the
 * file they carry, put together, into *out (malloc'ed; NULL when declined).
 * Returns its total, 0 when declined. */
static uint64_t drain(uint8_t **out)
{
    const uint8_t *p;
    size_t n;
    uint64_t total = 0, got = 0;
    *out = NULL;
    int frames = 0;
    for (;;) {
        if (!hs__symup_out(&p, &n, 1)) {
            if (!hs__symup_pending()) break;
            usleep(2000); /* its work per 20 ms is spent: the next slice */
            continue;
        }
        hs_frame f;
        assert_int_equal(hs_frame_split(p, n, &f), (long)n);
        assert_int_equal(f.type, HS_FRAME_SYMDATA);
        hs_symdata d;
        assert_int_equal(hs_symdata_decode(&d, f.payload, f.len), 0);
        assert_int_equal(d.blen, blen);
        if (d.total == 0) {
            assert_int_equal(frames, 0);
            hs__symup_wrote(n);
            return 0;
        }
        if (!*out) *out = malloc(d.total);
        assert_int_equal(d.offset, got);
        if (d.method == HS_SYMDATA_LZ)
            assert_int_equal(
                hs_lz_decompress(*out + d.offset, d.size, (const uint8_t *)d.data.ptr, d.data.len),
                0);
        else
            memcpy(*out + d.offset, d.data.ptr, d.size);
        got += d.size;
        total = d.total;
        hs__symup_wrote(n / 2); /* a partial write, then the rest */
        assert_true(hs__symup_busy());
        assert_int_equal(hs__symup_out(&p, &n, 0), 1); /* goes on even when not idle */
        hs__symup_wrote(n);
        frames++;
    }
    assert_int_equal(got, total);
    assert_false(hs__symup_pending());
    return total;
}

static void test_upload(void **state)
{
    (void)state;
    request(bid, blen);
    assert_true(hs__symup_pending());
    const uint8_t *p;
    size_t n;
    assert_int_equal(hs__symup_out(&p, &n, 0), 0); /* not while the run's frames wait */
    uint8_t *file;
    uint64_t total = drain(&file);
    assert_true(total > sizeof(Elf64_Ehdr));
    char path[700], cmd[4000];
    snprintf(path, sizeof path, "%s/sent.debug", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fwrite(file, 1, total, f), total);
    fclose(f);
    free(file);
    /* the same build id, a symbol table, the loaded code left out */
    char hex[2 * HS_BUILD_ID_MAX + 1];
    for (uint32_t i = 0; i < blen; i++) snprintf(hex + 2 * i, 3, "%02x", bid[i]);
    snprintf(cmd, sizeof cmd,
             "readelf -n '%s' | grep -q 'Build ID: %s' && readelf -S -W '%s' | grep -q "
             "'\\.symtab' && readelf -S -W '%s' | grep -q '\\.text *NOBITS' && "
             "readelf -s -W '%s' | grep -q wl_dl",
             path, hex, path, path, path);
    assert_int_equal(system(cmd), 0);
    /* each build once per process */
    request(bid, blen);
    assert_int_equal(drain(&file), 0);
}

static void test_not_loaded(void **state)
{
    (void)state;
    uint8_t other[20] = {0xee, 1, 2, 3};
    request(other, sizeof other);
    uint32_t keep = blen;
    blen = sizeof other;
    uint8_t *file;
    assert_int_equal(drain(&file), 0);
    blen = keep;
}

/* In a child: prepare(), then a request of the copy's build is declined. */
static void child_declines(void (*prepare)(void))
{
    pid_t pid = fork();
    if (pid == 0) {
        prepare();
        request(bid, blen);
        uint8_t *file;
        _exit(drain(&file) == 0 ? 0 : 1);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

static void file_gone(void)
{
    unlink(copy);
}

static void file_changed(void)
{
    char cmd[2000];
    snprintf(cmd, sizeof cmd, "cp /proc/self/exe '%s.new' && mv '%s.new' '%s'", copy, copy, copy);
    if (system(cmd)) _exit(2);
}

static void budget_spent(void)
{
    hs__cfg.symbol_upload_max = 1000;
}

static void test_declines(void **state)
{
    (void)state;
    char keep[2000];
    snprintf(keep, sizeof keep, "cp '%s' '%s.keep'", copy, copy);
    assert_int_equal(system(keep), 0);
    child_declines(budget_spent);
    child_declines(file_changed);
    snprintf(keep, sizeof keep, "cp '%s.keep' '%s'", copy, copy);
    assert_int_equal(system(keep), 0);
    child_declines(file_gone);
    assert_int_equal(system(keep), 0);
}

static void test_conn_lost(void **state)
{
    (void)state;
    pid_t pid = fork();
    if (pid == 0) {
        const uint8_t *p;
        size_t n;
        request(bid, blen);
        if (hs__symup_out(&p, &n, 1) != 1) _exit(1);
        hs__symup_wrote(1);
        hs__symup_conn_lost(); /* the half-sent frame is gone with the connection */
        _exit(hs__symup_pending() || hs__symup_out(&p, &n, 1) ? 3 : 0);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_int_equal(WEXITSTATUS(st), 0);
}

static uint8_t big_bid[HS_BUILD_ID_MAX];
static uint32_t big_blen;
static char big[600];

static int find_big(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size, (void)data;
    if (!info->dlpi_name || strcmp(info->dlpi_name, big)) return 0;
    const uint8_t *p;
    big_blen = (uint32_t)hs_proc_build_id(info, &p);
    memcpy(big_bid, p, big_blen);
    return 1;
}

/* The next frame's SYMDATA, written whole; its total, or -1. */
static int64_t next_total(void)
{
    const uint8_t *p;
    size_t n;
    hs_frame f;
    hs_symdata d;
    for (int i = 0; i < 100 && !hs__symup_out(&p, &n, 1); i++) usleep(2000);
    if (hs_frame_split(p, n, &f) != (long)n || hs_symdata_decode(&d, f.payload, f.len)) return -1;
    hs__symup_wrote(n);
    return (int64_t)d.total;
}

/* A file cut short in the middle of its upload (in a child): the upload is
 * given up with a refusal, and nothing more is sent. */
static void test_file_cut_midway(void **state)
{
    (void)state;
    pid_t pid = fork();
    if (pid == 0) {
        /* a build of its own, with 1.5 MB of unloaded section: several pieces */
        char cmd[4000];
        snprintf(big, sizeof big, "%s/libbig.so", dir);
        snprintf(cmd, sizeof cmd,
                 "cd '%s' && head -c 1500000 /dev/urandom > pad && "
                 "printf '\\004\\0\\0\\0\\024\\0\\0\\0\\003\\0\\0\\0GNU\\0' > note && "
                 "head -c 20 /dev/urandom >> note && objcopy --add-section .hs_pad=pad "
                 "--update-section .note.gnu.build-id=note libcopy.so libbig.so",
                 dir);
        if (system(cmd) || !dlopen(big, RTLD_NOW)) _exit(2);
        dl_iterate_phdr(find_big, NULL);
        if (big_blen != 20 || !memcmp(big_bid, bid, 20)) _exit(3);
        request(big_bid, big_blen);
        if (next_total() < 1500000) _exit(4);
        if (truncate(big, 1000)) _exit(5);
        int64_t t = next_total(); /* the next piece cannot be read: given up */
        _exit(t != 0 ? 6 : hs__symup_pending() ? 7 : 0);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

int main(void)
{
    const char *b = getenv("HS_BUILD_DIR");
    snprintf(dir, sizeof dir, "%s/tests/tmp/symup.%d", b ? b : "build", (int)getpid());
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s/tests/libwl_dl.so' '%s/libcopy.so'", dir,
             b ? b : "build", dir);
    if (system(cmd)) return 1;
    snprintf(copy, sizeof copy, "%s/libcopy.so", dir);
    if (!dlopen(copy, RTLD_NOW)) return 1;
    dl_iterate_phdr(find_copy, NULL);
    if (blen < 8) return 1;
    hs__cfg.target = HS_TARGET_TCP;
    hs__cfg.symbol_upload_max = 64u << 20;
    if (hs__symup_hello_flags() != HS_HELLO_SYMDATA) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_declines), /* first: the children start from nothing sent */
        cmocka_unit_test(test_conn_lost), cmocka_unit_test(test_file_cut_midway),
        cmocka_unit_test(test_upload),    cmocka_unit_test(test_not_loaded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

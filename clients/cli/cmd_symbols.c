/* heapstore symbols add: files of builds the server cannot find itself.
 *
 * The server names a frame from its module's build id (server/hs_symbols.h):
 * the file the collector named, its separate debug file, --symbol-path. A
 * stripped production binary whose debug information was kept aside has
 * none of those on the server's machine; `symbols add` copies such files
 * (the debug file, or an unstripped copy of the binary) next to the
 * database, as DB.symbols/.build-id/xx/yyyy.debug, where the server looks
 * first. A build the server looked for in vain is looked for again within
 * seconds, so runs that start after the add get names; frames stored before
 * it keep their module and offset. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hs_cli.h"
#include "hs_error.h"
#include "hs_paths.h"
#include "hs_symbols.h"
#include "hs_text.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: heapstore symbols add [--db PATH] FILE…\n"
               "\n"
               "Adds ELF files (debug files, or unstripped copies of stripped programs and\n"
               "libraries) for the server to name frames of their builds from, found by\n"
               "build id. They are copied next to the database (PATH.symbols).\n"
               "\n"
               "  --db PATH  database (default $XDG_DATA_HOME/heapstore/heapstore.db)\n");
}

static int mkdirs(const char *dir)
{
    char p[8192];
    int n = snprintf(p, sizeof p, "%s/x", dir);
    if (n < 0 || (size_t)n >= sizeof p || hs_paths_mkdir_parent(p)) return -1;
    return 0;
}

/* Copies src to dst through a temporary file and a rename, so that the
 * server never reads half a file. */
static int copy_file(const char *src, const char *dst)
{
    char tmp[8192];
    int k = snprintf(tmp, sizeof tmp, "%s.%d.tmp", dst, (int)getpid());
    if (k < 0 || (size_t)k >= sizeof tmp) return -1;
    int in = open(src, O_RDONLY | O_CLOEXEC), out = -1, rc = -1;
    if (in >= 0) out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out >= 0) {
        char buf[1 << 16];
        ssize_t n;
        rc = 0;
        while (rc == 0 && (n = read(in, buf, sizeof buf)) != 0) {
            if (n < 0 || write(out, buf, (size_t)n) != n) rc = -1;
        }
        if (close(out)) rc = -1;
        if (rc == 0 && rename(tmp, dst)) rc = -1;
        if (rc) unlink(tmp);
    }
    if (in >= 0) close(in);
    return rc;
}

static int add_one(const char *dir, const char *path)
{
    uint8_t bid[HS_BUILD_ID_MAX];
    int n = hs_syms_file_build_id(path, bid);
    if (n <= 0) {
        fprintf(stderr, "heapstore symbols add: %s: %s\n", path,
                n == 0           ? "no build id (link with --build-id)"
                : n == HS_EINVAL ? "not an ELF file"
                                 : strerror(errno));
        return 1;
    }
    char hex[2 * HS_BUILD_ID_MAX + 1], sub[4400], dst[4600];
    hs_hex(hex, bid, (size_t)n);
    int a = snprintf(sub, sizeof sub, "%s/.build-id/%.2s", dir, hex);
    int b = snprintf(dst, sizeof dst, "%s/%s.debug", sub, hex + 2);
    if (a < 0 || (size_t)a >= sizeof sub || b < 0 || (size_t)b >= sizeof dst || mkdirs(sub) ||
        copy_file(path, dst)) {
        fprintf(stderr, "heapstore symbols add: %s: cannot write %s: %s\n", path, dst,
                strerror(errno));
        return 1;
    }
    printf("%s: build %s\n", path, hex);
    return 0;
}

int hs_cmd_symbols(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "add")) {
        fprintf(stderr, "heapstore symbols: unknown subcommand '%s'\n", argv[1]);
        usage(stderr);
        return 2;
    }
    const char *db = NULL;
    char db_buf[4096], dir[4200];
    int first = 2;
    for (; first < argc && argv[first][0] == '-'; first++) {
        if (!strcmp(argv[first], "--")) {
            first++;
            break;
        }
        if (!strcmp(argv[first], "--db") && first + 1 < argc) {
            db = argv[++first];
            continue;
        }
        fprintf(stderr, "heapstore symbols add: unknown option '%s'\n", argv[first]);
        usage(stderr);
        return 2;
    }
    if (first >= argc) {
        usage(stderr);
        return 2;
    }
    if (!db) {
        int rc = hs_default_db_path(db_buf, sizeof db_buf);
        if (rc) {
            fprintf(stderr, "heapstore symbols add: no default database (%s); use --db PATH\n",
                    hs_strerror(rc));
            return 1;
        }
        db = db_buf;
    }
    if (hs_syms_store_dir(dir, sizeof dir, db)) {
        fprintf(stderr, "heapstore symbols add: database path too long\n");
        return 2;
    }
    int status = 0;
    for (int i = first; i < argc; i++) status |= add_one(dir, argv[i]);
    return status;
}

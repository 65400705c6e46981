/* heapstore import: loads .hsp stream files (written by a collector with
 * HEAPSTORE_URL=file://…) into the database directly, through the same
 * hs_store_import_file() the server's store provides. An import is
 * idempotent: the HELLO is treated as a resumption, so frames already stored
 * are skipped. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hs_cli.h"
#include "hs_error.h"
#include "hs_paths.h"
#include "hs_proto.h"
#include "hs_store.h"
#include "hs_text.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: heapstore import [--db PATH] [--granularity DUR] FILE.hsp…\n"
               "\n"
               "Loads stream files written by the collector (HEAPSTORE_URL=file://PATH) into\n"
               "the database. Importing a file twice stores it once. A stream without BYE\n"
               "(the process died) is stored as a run that did not end cleanly ('lost').\n"
               "\n"
               "  --db PATH          database (default $XDG_DATA_HOME/heapstore/heapstore.db)\n"
               "  --granularity DUR  rollup bucket width for new runs: 100ms, 1s… (default 1s)\n");
}

static int import_file(hs_store *store, const char *path)
{
    hs_import_stats st;
    char err[512];
    int rc = hs_store_import_file(store, path, &st, err, sizeof err);
    if (st.partial_bytes)
        fprintf(stderr, "heapstore import: %s: the last %zu bytes are a partial frame, ignored\n",
                path, st.partial_bytes);
    if (rc && !st.run_id) {
        fprintf(stderr, "heapstore import: %s: %s\n", path, err[0] ? err : hs_strerror(rc));
        return 1;
    }
    if (rc) {
        fprintf(stderr, "heapstore import: %s: frame %" PRIu64 " after HELLO: %s\n", path,
                st.frames, err[0] ? err : hs_strerror(rc));
        return 1;
    }
    printf("%s: run %" PRId64 ": %" PRIu64 " frames (%" PRIu64 " already stored), %" PRIu64
           " events%s\n",
           path, st.run_id, st.frames, st.skipped, st.events,
           st.bye ? "" : "; no BYE: stored as lost");
    return 0;
}

int hs_cmd_import(int argc, char **argv)
{
    const char *db = NULL;
    char db_buf[4096];
    hs_store_config cfg = {0};
    int first = 1;
    for (; first < argc; first++) {
        const char *a = argv[first];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--")) {
            first++;
            break;
        }
        if (a[0] != '-') break;
        if (first + 1 >= argc) {
            fprintf(stderr, "heapstore import: %s needs a value\n", a);
            return 2;
        }
        if (!strcmp(a, "--db")) {
            db = argv[++first];
        } else if (!strcmp(a, "--granularity")) {
            /* a bucket of 1ms to about 11 days */
            uint64_t g;
            if (hs_parse_duration(argv[++first], &g) || g < 1000000 || g > 1000000000000000) {
                fprintf(stderr, "heapstore import: bad --granularity '%s' (e.g. 100ms, 1s)\n",
                        argv[first]);
                return 2;
            }
            cfg.granularity_ns = g;
        } else {
            fprintf(stderr, "heapstore import: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (first >= argc) {
        usage(stderr);
        return 2;
    }
    if (!db) {
        int rc = hs_default_db_path(db_buf, sizeof db_buf);
        if (!rc) rc = hs_paths_mkdir_parent(db_buf);
        if (rc) {
            fprintf(stderr, "heapstore import: no default database (%s); use --db PATH\n",
                    hs_strerror(rc));
            return 1;
        }
        db = db_buf;
    }
    char err[512] = "";
    hs_store *store;
    int rc = hs_store_open(&store, db, &cfg, err, sizeof err);
    if (rc) {
        fprintf(stderr, "heapstore import: %s\n", err[0] ? err : hs_strerror(rc));
        return 1;
    }
    int status = 0;
    for (int i = first; i < argc; i++) status |= import_file(store, argv[i]);
    hs_store_free(store);
    return status;
}

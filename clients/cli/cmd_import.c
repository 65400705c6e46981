/* heapstore import: loads .hsp stream files (written by a collector with
 * HEAPSTORE_URL=file://…) into the database directly, through the same
 * hs_store code the server's writer uses. An import is idempotent: the
 * HELLO is treated as a resumption, so frames already stored are skipped. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hs_cli.h"
#include "hs_error.h"
#include "hs_paths.h"
#include "hs_proto.h"
#include "hs_store.h"

#define READ_CHUNK    (1u << 20)
#define FRAMES_PER_TX 512

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

static int parse_duration(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !(v > 0) || !isfinite(v)) return HS_EINVAL;
    double mult = !*end || !strcmp(end, "s") ? 1e9
                  : !strcmp(end, "ms")       ? 1e6
                  : !strcmp(end, "us")       ? 1e3
                  : !strcmp(end, "m")        ? 60e9
                                             : -1;
    if (mult < 0 || v * mult < 1e6 || v * mult > 1e15) return HS_EINVAL;
    *out = (uint64_t)llround(v * mult);
    return 0;
}

typedef struct import_state {
    const char *path;
    hs_store *store;
    hs_run *run;
    uint64_t seq;
    uint64_t frames, skipped, events;
    int in_tx, tx_frames, bye;
    char err[512];
} import_state;

static int frame(import_state *st, const hs_frame *f)
{
    int rc;
    if (!st->in_tx) {
        if ((rc = hs_store_begin(st->store))) {
            snprintf(st->err, sizeof st->err, "database: %s", hs_store_errmsg(st->store));
            return rc;
        }
        st->in_tx = 1;
    }
    if (!st->run) {
        if (f->type != HS_FRAME_HELLO) {
            snprintf(st->err, sizeof st->err, "the first frame is not HELLO");
            return HS_EPROTO;
        }
        hs_hello *h = malloc(sizeof *h);
        if (!h) return HS_ENOMEM;
        rc = hs_hello_decode(h, f->payload, f->len);
        if (rc) {
            snprintf(st->err, sizeof st->err, "malformed HELLO: %s", hs_strerror(rc));
        } else {
            h->flags |= HS_HELLO_RESUMED; /* a second import skips what is stored */
            rc = hs_store_run_open(st->store, &st->run, h, st->err, sizeof st->err);
            st->seq = h->first_seq;
        }
        free(h);
        return rc;
    }
    if (f->type == HS_FRAME_BYE) st->bye = 1;
    if (st->seq < hs_run_next_seq(st->run)) st->skipped++;
    if (f->type == HS_FRAME_EVENTS) {
        hs_batch_it it;
        hs_event e;
        if (hs_events_begin(&it, f->payload, f->len) == 0)
            while (hs_events_next(&it, &e) == 1) st->events++;
    }
    rc = hs_store_run_frame(st->store, st->run, st->seq, f->type, f->payload, f->len, st->err,
                            sizeof st->err);
    if (rc) return rc;
    st->seq++;
    st->frames++;
    if (++st->tx_frames >= FRAMES_PER_TX) {
        st->tx_frames = 0;
        st->in_tx = 0;
        if ((rc = hs_store_commit(st->store)))
            snprintf(st->err, sizeof st->err, "database: %s", hs_store_errmsg(st->store));
    }
    return rc;
}

static int import_file(hs_store *store, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "heapstore import: %s: %s\n", path, strerror(errno));
        return 1;
    }
    import_state st = {.path = path, .store = store};
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0, off = 0;
    int header = 0, rc = 0, eof = 0;
    while (!rc) {
        /* Keep at least one chunk of room past what is buffered. */
        if (off) {
            memmove(buf, buf + off, len - off);
            len -= off;
            off = 0;
        }
        if (!eof) {
            if (cap - len < READ_CHUNK) {
                size_t ncap = cap ? cap * 2 : 4 * READ_CHUNK;
                while (ncap - len < READ_CHUNK) ncap *= 2;
                uint8_t *nb = realloc(buf, ncap);
                if (!nb) {
                    rc = HS_ENOMEM;
                    break;
                }
                buf = nb;
                cap = ncap;
            }
            size_t n = fread(buf + len, 1, cap - len, f);
            len += n;
            if (n == 0) eof = 1;
        }
        if (!header) {
            uint32_t version;
            int k = hs_header_parse(buf, len, &version);
            if (k < 0 || (k == 0 && eof)) {
                snprintf(st.err, sizeof st.err, "%s",
                         k == HS_EVERSION ? "unsupported protocol version"
                                          : "not a heapstore stream (bad magic)");
                rc = k ? k : HS_EPROTO;
                break;
            }
            if (k == 0) continue;
            off = (size_t)k;
            header = 1;
        }
        for (;;) {
            hs_frame fr;
            long k = hs_frame_split(buf + off, len - off, &fr);
            if (k < 0) {
                snprintf(st.err, sizeof st.err, "bad frame header at byte %zu", off);
                rc = (int)k;
                break;
            }
            if (k == 0) break;
            off += (size_t)k;
            if ((rc = frame(&st, &fr))) break;
        }
        if (rc) break;
        if (eof) {
            if (len - off) {
                /* A file cut short (the process died mid-write): the frames
                 * before are kept. */
                fprintf(stderr,
                        "heapstore import: %s: the last %zu bytes are a partial frame, "
                        "ignored\n",
                        path, len - off);
            }
            break;
        }
    }
    fclose(f);
    free(buf);
    if (!rc && !st.run) {
        snprintf(st.err, sizeof st.err, "no HELLO frame");
        rc = HS_EPROTO;
    }
    if (!rc && st.run && !hs_run_ended(st.run)) {
        if (!st.in_tx && !(rc = hs_store_begin(store))) st.in_tx = 1;
        if (!rc) rc = hs_store_run_lose(store, st.run);
    }
    if (st.in_tx) {
        if (rc)
            hs_store_rollback(store);
        else if ((rc = hs_store_commit(store)))
            snprintf(st.err, sizeof st.err, "database: %s", hs_store_errmsg(store));
    }
    if (rc) {
        fprintf(stderr, "heapstore import: %s: frame %" PRIu64 ": %s\n", path, st.frames,
                st.err[0] ? st.err : hs_strerror(rc));
    } else {
        printf("%s: run %" PRId64 ": %" PRIu64 " frames (%" PRIu64 " already stored), %" PRIu64
               " events%s\n",
               path, hs_run_id(st.run), st.frames, st.skipped, st.events,
               st.bye ? "" : "; no BYE: stored as lost");
    }
    if (st.run) hs_store_run_release(store, st.run);
    return rc ? 1 : 0;
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
            if (parse_duration(argv[++first], &cfg.granularity_ns)) {
                fprintf(stderr, "heapstore import: bad --granularity '%s' (e.g. 100ms, 1s)\n",
                        argv[first]);
                return 2;
            }
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

/* hs_store_import: loads one whole collector stream (the bytes a collector
 * writes with HEAPSTORE_URL=file://…) into the database through the same
 * hs_store calls the server's writer makes. Used by `heapstore import` and by
 * the import fuzzer.
 *
 * The stream is parsed incrementally (imp_feed) so that a file is read in
 * chunks and memory stays bounded by one frame plus one chunk, whatever the
 * file's size. The HELLO is treated as a resumption, so importing a stream
 * twice stores it once: frames below the run's next_seq are skipped. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hs_error.h"
#include "hs_symbols.h"
#include "store_int.h"

#define IMPORT_FRAMES_PER_TX 512
#define IMPORT_READ_CHUNK    (1u << 20)

typedef struct imp {
    hs_store *s;
    hs_run *run;
    hs_import_stats *st;
    uint64_t seq;
    int in_tx, tx_frames, header;
    uint64_t off; /* stream offset of the next unconsumed byte */
    char *err;
    size_t errlen;
    /* native frames come as module and offset: named here, on this
     * machine, as the server's symbolizer names them (hs_symbols.h) */
    hs_syms *syms;
    hs_syms_stream stream;
} imp;

static int imp_begin_tx(imp *im)
{
    if (im->in_tx) return 0;
    if (hs_store_begin(im->s)) {
        hs__store_seterr(im->err, im->errlen, "database: %s", hs_store_errmsg(im->s));
        return HS_EDB;
    }
    im->in_tx = 1;
    return 0;
}

static int imp_hello(imp *im, const hs_frame *f)
{
    hs_hello *h = malloc(sizeof *h);
    if (!h) return HS_ENOMEM;
    int rc = hs_hello_decode(h, f->payload, f->len);
    if (rc) {
        hs__store_seterr(im->err, im->errlen, "malformed HELLO: %s", hs_strerror(rc));
    } else {
        h->flags |= HS_HELLO_RESUMED; /* a second import skips what is stored */
        /* Whoever can import can write the database file anyway: the stream
         * need not hold the run's resume key (streams from collectors before
         * it have none). */
        im->s->trust_resume = 1;
        rc = hs_store_run_open(im->s, &im->run, h, im->err, im->errlen);
        im->s->trust_resume = 0;
        im->seq = h->first_seq;
        if (!rc) im->st->run_id = hs_run_id(im->run);
    }
    free(h);
    return rc;
}

static int imp_frame(imp *im, const hs_frame *f)
{
    int rc = imp_begin_tx(im);
    if (rc) return rc;
    if (!im->run) {
        if (f->type != HS_FRAME_HELLO) {
            hs__store_seterr(im->err, im->errlen, "the first frame is not HELLO");
            return HS_EPROTO;
        }
        return imp_hello(im, f);
    }
    if (im->seq < hs_run_next_seq(im->run)) im->st->skipped++;
    uint64_t n_events = 0;
    if (f->type == HS_FRAME_EVENTS) {
        hs_batch_it it;
        hs_event e;
        if (hs_events_begin(&it, f->payload, f->len) == 0)
            while (hs_events_next(&it, &e) == 1) n_events++;
    }
    hs_frame nf = *f;
    uint8_t *named = NULL;
    if (!im->syms && (f->type == HS_FRAME_MAPPINGS || f->type == HS_FRAME_SYMBOLS) &&
        hs_syms_new(&im->syms, NULL))
        im->syms = NULL; /* out of memory: stored as sent */
    if (im->syms && f->type == HS_FRAME_MAPPINGS)
        hs_syms_stream_mappings(&im->stream, f->payload, f->len);
    if (im->syms && f->type == HS_FRAME_SYMBOLS && im->seq >= hs_run_next_seq(im->run)) {
        size_t nlen;
        uint64_t looked;
        if (hs_syms_rewrite(im->syms, &im->stream, f->payload, f->len, &named, &nlen, &looked) ==
            1) {
            nf.payload = named;
            nf.len = (uint32_t)nlen;
        }
    }
    rc = hs_store_run_frame(im->s, im->run, im->seq, nf.type, nf.payload, nf.len, im->err,
                            im->errlen);
    free(named);
    if (rc) return rc;
    if (f->type == HS_FRAME_BYE) im->st->bye = 1;
    im->st->events += n_events;
    im->seq++;
    im->st->frames++;
    if (++im->tx_frames >= IMPORT_FRAMES_PER_TX) {
        im->tx_frames = 0;
        im->in_tx = 0;
        if ((rc = hs_store_commit(im->s)))
            hs__store_seterr(im->err, im->errlen, "database: %s", hs_store_errmsg(im->s));
    }
    return rc;
}

/* Consumes the header and every whole frame at the front of buf. Returns the
 * bytes consumed (>= 0) or a negative code with the reason in im->err. */
static long imp_feed(imp *im, const uint8_t *buf, size_t len)
{
    size_t off = 0;
    if (!im->header) {
        uint32_t version;
        int k = hs_header_parse(buf, len, &version);
        if (k < 0) {
            hs__store_seterr(im->err, im->errlen, "%s",
                             k == HS_EVERSION ? "unsupported protocol version"
                                              : "not a heapstore stream (bad magic)");
            return k;
        }
        if (k == 0) return 0;
        off = (size_t)k;
        im->header = 1;
    }
    for (;;) {
        hs_frame fr;
        long k = hs_frame_split(buf + off, len - off, &fr);
        if (k < 0) {
            hs__store_seterr(im->err, im->errlen, "bad frame header at byte %" PRIu64,
                             im->off + off);
            return k;
        }
        if (k == 0) break;
        int rc = imp_frame(im, &fr);
        if (rc) return rc;
        off += (size_t)k;
    }
    im->off += off;
    return (long)off;
}

/* Ends an import: a run without BYE is closed as lost, the open transaction
 * committed (or rolled back after an error), the run's memory released. */
static int imp_finish(imp *im, int rc, size_t left)
{
    if (!rc && !im->header) {
        hs__store_seterr(im->err, im->errlen, "not a heapstore stream (too short)");
        rc = HS_EPROTO;
    }
    if (!rc && !im->run) {
        hs__store_seterr(im->err, im->errlen, "no HELLO frame");
        rc = HS_EPROTO;
    }
    im->st->partial_bytes = left;
    if (!rc && !hs_run_ended(im->run)) {
        if (!(rc = imp_begin_tx(im))) rc = hs_store_run_lose(im->s, im->run);
    }
    if (im->in_tx) {
        im->in_tx = 0;
        if (rc) {
            hs_store_rollback(im->s);
        } else if ((rc = hs_store_commit(im->s))) {
            hs__store_seterr(im->err, im->errlen, "database: %s", hs_store_errmsg(im->s));
        }
    }
    if (rc && im->err && im->errlen && !im->err[0])
        hs__store_seterr(im->err, im->errlen, "%s", hs_strerror(rc));
    if (im->run) hs_store_run_release(im->s, im->run);
    im->run = NULL;
    hs_syms_stream_free(&im->stream);
    hs_syms_free(im->syms);
    im->syms = NULL;
    return rc;
}

/* 0, or HS_EINVAL when the store is inside a transaction (an import
 * commits as it goes). */
static int imp_init(imp *im, hs_store *s, hs_import_stats *st, char *err, size_t errlen)
{
    memset(st, 0, sizeof *st);
    memset(im, 0, sizeof *im);
    im->s = s;
    im->st = st;
    im->err = err;
    im->errlen = errlen;
    if (err && errlen) err[0] = '\0';
    if (s->in_tx) {
        hs__store_seterr(err, errlen, "an import cannot run inside a transaction");
        return HS_EINVAL;
    }
    return 0;
}

int hs_store_import(hs_store *s, const uint8_t *buf, size_t len, hs_import_stats *out, char *err,
                    size_t errlen)
{
    hs_import_stats dummy;
    imp im;
    int rc = imp_init(&im, s, out ? out : &dummy, err, errlen);
    if (rc) return rc;
    long k = imp_feed(&im, buf ? buf : (const uint8_t *)"", buf ? len : 0);
    rc = k < 0 ? (int)k : 0;
    return imp_finish(&im, rc, rc ? 0 : len - (size_t)k);
}

int hs_store_import_file(hs_store *s, const char *path, hs_import_stats *out, char *err,
                         size_t errlen)
{
    hs_import_stats dummy;
    imp im;
    int rc = imp_init(&im, s, out ? out : &dummy, err, errlen);
    if (rc) return rc;
    FILE *f = fopen(path, "rb");
    if (!f) {
        hs__store_seterr(err, errlen, "%s", strerror(errno));
        return HS_EIO;
    }
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        /* Room for one more chunk past what is buffered (at most a frame). */
        if (cap - len < IMPORT_READ_CHUNK) {
            size_t ncap = cap ? cap : 4 * IMPORT_READ_CHUNK;
            while (ncap - len < IMPORT_READ_CHUNK) ncap *= 2;
            uint8_t *nb = ncap != cap ? realloc(buf, ncap) : buf;
            if (!nb) {
                rc = HS_ENOMEM;
                break;
            }
            buf = nb;
            cap = ncap;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        if (n == 0) {
            if (ferror(f)) {
                hs__store_seterr(err, errlen, "read error: %s", strerror(errno));
                rc = HS_EIO;
            }
            break;
        }
        len += n;
        long k = imp_feed(&im, buf, len);
        if (k < 0) {
            rc = (int)k;
            break;
        }
        memmove(buf, buf + k, len - (size_t)k);
        len -= (size_t)k;
    }
    fclose(f);
    free(buf);
    return imp_finish(&im, rc, rc ? 0 : len);
}

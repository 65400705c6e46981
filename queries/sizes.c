/* sizes: a run's allocation size histogram (as the collector estimated it
 * from its samples: exact at every allocation) and the sample interval it
 * suggests, as a typed result (hs_core.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hs_error.h"
#include "q_internal.h"

typedef struct sizes_walk {
    hs_sizes_result *out;
    size_t cap;
    hs_qerr *err;
} sizes_walk;

static int sizes_row(int64_t b, int64_t allocs, int64_t bytes, void *data)
{
    sizes_walk *w = data;
    hs_sizes_result *out = w->out;
    if (b < 0 || b > 63) return 0;
    if (out->nbuckets == w->cap) {
        w->cap = w->cap ? w->cap * 2 : 64;
        hs_qsize_bucket *np = realloc(out->buckets, w->cap * sizeof *np);
        if (!np) return hs__err(w->err, HS_ENOMEM, "out of memory");
        out->buckets = np;
    }
    uint64_t lo = b == 0 ? 0 : 1ull << b, hi = b >= 63 ? UINT64_MAX >> 1 : (2ull << b) - 1;
    hs_qsize_bucket *k = &out->buckets[out->nbuckets++];
    *k = (hs_qsize_bucket){
        .bucket = (int)b, .lo = (int64_t)lo, .hi = (int64_t)hi, .allocs = allocs, .bytes = bytes};
    out->total_allocs += k->allocs;
    out->total_bytes += k->bytes;
    return 0;
}

static int sizes_read(hs_q *q, const hs__run *run, hs_sizes_result *out, hs_qerr *err)
{
    sizes_walk w = {.out = out, .err = err};
    return q->store->ops->sizes(q->store, run->id, sizes_row, &w, err);
}

/* Suggests the interval that gives about 20,000 samples a second over the
 * run (a few percent of overhead with stacks), rounded to a power of two,
 * and 1 (exact) when that many samples cover every allocation anyway. */
static void sizes_suggest(const hs__run *run, hs_sizes_result *out)
{
    int64_t ta = out->total_allocs, tb = out->total_bytes;
    double secs = run->end_ns > 0 ? (double)run->end_ns / 1e9 : 1.0;
    if (secs < 1) secs = 1;
    double want = 20000.0 * secs;
    int64_t median = 0, seen = 0;
    for (size_t i = 0; i < out->nbuckets && ta; i++) {
        seen += out->buckets[i].allocs;
        if (seen * 2 >= ta) {
            median = out->buckets[i].bucket == 0 ? 1 : (int64_t)1 << out->buckets[i].bucket;
            break;
        }
    }
    int64_t suggest = 1;
    if ((double)ta <= want) {
        snprintf(out->reason, sizeof out->reason,
                 "%" PRId64 " allocations in %.1f s: sampling every allocation costs little and "
                 "makes every number exact",
                 ta, secs);
    } else {
        double iv = (double)tb / want;
        while ((double)suggest < iv && suggest < ((int64_t)1 << 40)) suggest <<= 1;
        snprintf(out->reason, sizeof out->reason,
                 "%" PRId64 " bytes in %" PRId64 " allocations over %.1f s (median size about "
                 "%" PRId64 " B): one sample per %" PRId64 " bytes gives about %.0f samples a "
                 "second",
                 tb, ta, secs, median, suggest, (double)tb / (double)suggest / secs);
    }
    out->suggested_sample_bytes = suggest;
}

int hs_core_sizes(hs_q *q, const hs_run_sel *sel, hs_sizes_result *out, hs_qerr *err)
{
    memset(out, 0, sizeof *out);
    hs__run *run = calloc(1, sizeof *run);
    if (!run) return hs__err(err, HS_ENOMEM, "out of memory");
    out->own = run;
    int rc = hs__run_resolve(q, sel, run, err);
    if (!rc) rc = sizes_read(q, run, out, err);
    if (rc) {
        hs_sizes_result_clear(out);
        return rc;
    }
    hs__run_brief(&out->run, run);
    sizes_suggest(run, out);
    return 0;
}

void hs_sizes_result_clear(hs_sizes_result *r)
{
    free(r->buckets);
    if (r->own) hs__run_clear(r->own);
    free(r->own);
    hs__held_release(&r->held);
    memset(r, 0, sizeof *r);
}

/* store_acc: a moment's state built up from rows, for the stores.
 *
 * Both stores answer hs_qstore's state op the same way: a snapshot's rows
 * (a keyframe, the deltas after it, or the peak's), then, for an exact
 * moment, the stored events between the bucket's end and the instant. The
 * accumulator sums them per trace; the events' counts are summed as
 * doubles (weight / size) and rounded per trace at the end, as the
 * writer's rollups round them, so both stores give the rollups' figures.
 */
#include <assert.h>
#include <math.h>
#include <stdlib.h>

#include "hs_error.h"
#include "q_internal.h"

int hs__acc_add(hs__state_acc *a, int64_t trace, int64_t bytes, int64_t count)
{
    uint64_t i;
    if (hs_map_get(&a->idx, (uint64_t)trace, &i)) {
        assert(i < a->n && a->rows[i].trace == trace);
        a->rows[i].bytes += bytes;
        a->rows[i].count += count;
        return 0;
    }
    if (a->n == a->cap) {
        size_t ncap = a->cap ? a->cap * 2 : 256;
        hs_qstore_live *np = realloc(a->rows, ncap * sizeof *np);
        if (!np) return HS_ENOMEM;
        a->rows = np;
        a->cap = ncap;
    }
    a->rows[a->n] = (hs_qstore_live){trace, bytes, count};
    if (hs_map_put(&a->idx, (uint64_t)trace, a->n)) return HS_ENOMEM;
    a->n++;
    return 0;
}

/* The events' walk: bytes into the state at once, counts per trace. */
typedef struct ev_acc {
    hs__state_acc *a;
    hs_map cidx;
    double *cnt;
    size_t ncnt, capcnt;
    hs_qerr *err;
} ev_acc;

static int ev_add(const hs_qstore_event *e, void *data)
{
    ev_acc *x = data;
    uint64_t trace = (uint64_t)e->trace, i;
    int64_t w = (int64_t)e->weight;
    double c = e->size ? (double)e->weight / (double)e->size : 1.0;
    if (hs__acc_add(x->a, (int64_t)trace, e->is_free ? -w : w, 0)) goto oom;
    if (!hs_map_get(&x->cidx, trace, &i)) {
        if (x->ncnt == x->capcnt) {
            size_t ncap = x->capcnt ? x->capcnt * 2 : 256;
            double *np = realloc(x->cnt, ncap * sizeof *np);
            if (!np) goto oom;
            x->cnt = np;
            x->capcnt = ncap;
        }
        i = x->ncnt;
        x->cnt[x->ncnt++] = 0;
        if (hs_map_put(&x->cidx, trace, i)) goto oom;
    }
    x->cnt[i] += e->is_free ? -c : c;
    return 0;
oom:
    return hs__err(x->err, HS_ENOMEM, "out of memory");
}

int hs__acc_events(hs_qstore *s, int64_t run, int64_t from, int64_t upto, hs__state_acc *a,
                   hs_qerr *err)
{
    ev_acc x = {.a = a, .err = err};
    int rc = s->ops->events(s, run, from, upto, ev_add, &x, err);
    for (size_t k = 0; !rc && k < a->n; k++) {
        uint64_t i;
        if (hs_map_get(&x.cidx, (uint64_t)a->rows[k].trace, &i))
            a->rows[k].count += (int64_t)llround(x.cnt[i]);
    }
    free(x.cnt);
    hs_map_free(&x.cidx);
    return rc;
}

int hs__acc_finish(hs__state_acc *a, int rc, hs_qstore_live **rows, size_t *n)
{
    hs_map_free(&a->idx);
    if (rc) {
        free(a->rows);
        a->rows = NULL;
        a->n = 0;
    }
    *rows = a->rows;
    *n = a->n;
    return rc;
}

/* runs: the stored runs, newest first, filtered by what they were and
 * where they ran, and one run by its selector, as typed results
 * (hs_core.h). A run's record (hs_run_record, read by q.c) is what the
 * result lends its strings from. */
#include <stdlib.h>
#include <string.h>

#include "hs_error.h"
#include "q_internal.h"

/* What an hs_runs_result owns besides its arrays: the runs' records. */
typedef struct runs_own {
    hs__run *runs;
    size_t nruns;
} runs_own;

void hs_runs_params_init(hs_runs_params *p)
{
    memset(p, 0, sizeof *p);
    p->limit = HS_RUNS_LIMIT;
}

static int runs_filter(hs_runs_params *p, const char *key, size_t klen, const char *value,
                       hs_qerr *err, const char *text)
{
    if (!klen || klen >= sizeof p->filter[0].key || p->nfilters == HS_RUNS_MAX_FILTERS)
        return hs__err(err, HS_EINVAL, "label filter must be key=value (not '%s')", text);
    memcpy(p->filter[p->nfilters].key, key, klen);
    p->filter[p->nfilters].key[klen] = '\0';
    p->filter[p->nfilters++].value = value;
    return 0;
}

int hs_runs_param(hs_runs_params *p, const char *key, const char *value, hs_qerr *err)
{
    if (!strcmp(key, "limit")) return hs__int_text("limit", value, 1, 100000, &p->limit, err);
    if (!strcmp(key, "label")) {
        const char *eq = strchr(value, '=');
        return runs_filter(p, value, eq ? (size_t)(eq - value) : 0, eq ? eq + 1 : NULL, err, value);
    }
    static const char *const direct[] = {"program", "host", "pid",   "state",
                                         "parent",  "root", "before"};
    for (size_t i = 0; i < HS_COUNTOF(direct); i++) {
        if (strcmp(key, direct[i]) || !*value) continue;
        int digits = strspn(value, "0123456789") == strlen(value);
        if (!strcmp(key, "pid") && !digits)
            return hs__err(err, HS_EINVAL, "pid must be an integer");
        if ((!strcmp(key, "parent") || !strcmp(key, "root") || !strcmp(key, "before")) &&
            (!digits || strlen(value) > 18))
            return hs__err(err, HS_EINVAL, "%s must be a run id (an integer)", key);
        return runs_filter(p, key, strlen(key), value, err, value);
    }
    return 0;
}

static void run_info(hs_run_info *out, const hs__run *run)
{
    const hs_run_record *r = &run->rec;
    hs__run_brief(&out->brief, run);
    out->host = r->host;
    out->state = r->state;
    out->start_unix_ms = r->start_unix_ms;
    out->duration_ns = r->duration_ns;
    out->peak_bytes = run->peak_bytes;
    out->end_bytes = run->end_bytes;
    out->events = r->alloc_events + r->free_events;
    out->dropped_events =
        r->sampling.dropped[HS_RUNDROP_ALLOC_EVENTS] + r->sampling.dropped[HS_RUNDROP_FREE_EVENTS];
    out->has_clean_exit = r->clean_exit >= 0;
    out->parent_id = r->has_parent ? r->parent_id : 0;
    out->labels = r->labels;
    out->nlabels = r->nlabels;
}

/* The loaded runs' typed rows (their labels lent from the runs). */
static int runs_fill(const runs_own *o, hs_runs_result *out, hs_qerr *err)
{
    out->runs = calloc(o->nruns ? o->nruns : 1, sizeof *out->runs);
    if (!out->runs) return hs__err(err, HS_ENOMEM, "out of memory");
    for (size_t i = 0; i < o->nruns; i++) run_info(&out->runs[i], &o->runs[i]);
    out->nruns = o->nruns;
    return 0;
}

/* out->own for n runs, each to be loaded. */
static runs_own *runs_own_new(hs_runs_result *out, size_t n, hs_qerr *err)
{
    runs_own *o = calloc(1, sizeof *o);
    if (o) o->runs = calloc(n ? n : 1, sizeof *o->runs);
    if (!o || !o->runs) {
        free(o);
        hs__err(err, HS_ENOMEM, "out of memory");
        return NULL;
    }
    out->own = o;
    return o;
}

int hs_core_runs(hs_q *q, const hs_runs_params *p, hs_runs_result *out, hs_qerr *err)
{
    const char *keys[HS_RUNS_MAX_FILTERS], *values[HS_RUNS_MAX_FILTERS];
    memset(out, 0, sizeof *out);
    for (int i = 0; i < p->nfilters; i++) {
        keys[i] = p->filter[i].key;
        values[i] = p->filter[i].value;
    }
    int64_t *ids;
    size_t nids;
    /* one more than the page: whether there is a next page (keyset paging by
     * before=, the last run listed) */
    int rc = hs__runs_select(q, keys, values, p->nfilters, p->limit + 1, &ids, &nids, err);
    if (rc) return rc;
    if ((int64_t)nids > p->limit) {
        nids = (size_t)p->limit;
        out->next = ids[nids - 1];
    }
    runs_own *o = runs_own_new(out, nids, err);
    if (!o) rc = HS_ENOMEM;
    for (size_t i = 0; !rc && i < nids; i++, o->nruns++)
        if ((rc = hs__run_load(q, ids[i], &o->runs[i], err))) break;
    free(ids);
    if (!rc) rc = runs_fill(o, out, err);
    if (rc) hs_runs_result_clear(out);
    return rc;
}

int hs_core_run(hs_q *q, const hs_run_sel *sel, hs_runs_result *out, hs_qerr *err)
{
    memset(out, 0, sizeof *out);
    runs_own *o = runs_own_new(out, 1, err);
    if (!o) return HS_ENOMEM;
    int rc = hs__run_resolve(q, sel, &o->runs[0], err);
    if (!rc) {
        o->nruns = 1;
        rc = runs_fill(o, out, err);
    }
    if (rc) hs_runs_result_clear(out);
    return rc;
}

void hs_runs_result_clear(hs_runs_result *r)
{
    runs_own *o = r->own;
    if (o) {
        for (size_t i = 0; i < o->nruns; i++) hs__run_clear(&o->runs[i]);
        free(o->runs);
        free(o);
    }
    free(r->labels);
    free(r->runs);
    hs__held_release(&r->held);
    memset(r, 0, sizeof *r);
}

/* trend: the figures of many runs, one row per run or per value of a label,
 * as a typed result (hs_core.h). The store answers the runs' summaries in
 * one question (hs_qstore runs_summary); this file turns the selector and
 * options into that question, and groups by a label in its natural order
 * (numbers in values compare as numbers: 1.9 < 1.10), each group's figures
 * the mean, least and greatest over its runs. */
#include <assert.h>
#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hs_error.h"
#include "q_internal.h"

static const struct {
    const char *cli, *json;
} metric_names[HS_TM__COUNT] = {
    [HS_TM_PEAK] = {"peak", "peak_bytes"},
    [HS_TM_END] = {"end", "end_bytes"},
    [HS_TM_TOTAL] = {"total", "total_alloc_bytes"},
    [HS_TM_LEAK_RATE] = {"leak_rate", "leak_bytes_per_s"},
    [HS_TM_RSS_PEAK] = {"rss_peak", "rss_peak_bytes"},
    [HS_TM_DURATION] = {"duration", "duration_ns"},
    [HS_TM_DROPPED] = {"dropped", "dropped_events"},
    [HS_TM_CODE] = {"code", "code_bytes"},
};

const char *hs_trend_metric_name(int m)
{
    assert(m >= 0 && m < HS_TM__COUNT);
    return metric_names[m].json;
}

int hs_trend_metric_parse(const char *s, int *out)
{
    for (int m = 0; m < HS_TM__COUNT; m++)
        if (!strcmp(s, metric_names[m].cli) || !strcmp(s, metric_names[m].json)) {
            *out = m;
            return 0;
        }
    return -1;
}

void hs_trend_params_init(hs_trend_params *p)
{
    memset(p, 0, sizeof *p);
    p->all = 1;
    p->metric = -1; /* peak, or code when a code is given */
    p->limit = HS_TREND_LIMIT;
}

static int copy_param(char *dst, size_t len, const char *key, const char *v, hs_qerr *err)
{
    if (!*v || strlen(v) >= len)
        return hs__err(err, HS_EINVAL, "%s must be 1 to %zu bytes", key, len - 1);
    memcpy(dst, v, strlen(v) + 1);
    return 0;
}

/* site=FILE:LINE, or the frame label "NAME (FILE:LINE)" tables print: a
 * location; any other text is a site's function, whose frames count as
 * function= counts them. */
static int site_param(hs_trend_params *p, const char *v, hs_qerr *err)
{
    char loc[600];
    const char *open = strstr(v, " (");
    size_t n = strlen(v);
    if (open && n > 2 && v[n - 1] == ')' && n - (size_t)(open - v) - 3 < sizeof loc) {
        memcpy(loc, open + 2, n - (size_t)(open - v) - 3);
        loc[n - (size_t)(open - v) - 3] = '\0';
        v = loc;
    }
    const char *colon = strrchr(v, ':');
    int64_t line;
    hs_qerr ignored;
    p->function[0] = p->site_file[0] = '\0';
    p->site_is_function = 0;
    if (!colon || colon == v || colon - v >= (long)sizeof p->site_file ||
        hs__int_text("site's line", colon + 1, 1, INT32_MAX, &line, &ignored)) {
        if (v == loc)
            return hs__err(err, HS_EINVAL, "site must be FILE:LINE or a function (not '%s')", v);
        p->site_is_function = 1;
        return copy_param(p->function, sizeof p->function, "site", v, err);
    }
    memcpy(p->site_file, v, (size_t)(colon - v));
    p->site_file[colon - v] = '\0';
    p->site_line = line;
    return 0;
}

int hs_trend_param(hs_trend_params *p, const char *key, const char *value, hs_qerr *err)
{
    if (!strcmp(key, "runs")) {
        p->all = !strcmp(value, "all") || !*value;
        if (p->all) return 0;
        int rc = hs_sel_parse_run(&p->runs, value, err);
        if (!rc && p->runs.kind == HS_RUNSEL_UUID)
            return hs__err(err, HS_EINVAL, "runs must be key=value[,…], a run id or 'all'");
        return rc;
    }
    if (!strcmp(key, "by")) return copy_param(p->by, sizeof p->by, "by", value, err);
    if (!strcmp(key, "function")) {
        p->site_file[0] = '\0';
        p->site_is_function = 0;
        return copy_param(p->function, sizeof p->function, "function", value, err);
    }
    if (!strcmp(key, "site")) return site_param(p, value, err);
    if (!strcmp(key, "at")) {
        if (strcmp(value, "peak") && strcmp(value, "end"))
            return hs__err(err, HS_EINVAL, "trend's at must be peak or end (not '%s')", value);
        p->at_end = !strcmp(value, "end");
        return 0;
    }
    if (!strcmp(key, "metric")) {
        if (hs_trend_metric_parse(value, &p->metric))
            return hs__err(err, HS_EINVAL,
                           "metric must be peak, end, total, leak_rate, rss_peak, duration, "
                           "dropped or code (not '%s')",
                           value);
        return 0;
    }
    if (!strcmp(key, "limit")) return hs__int_text("limit", value, 1, HS_TREND_MAX, &p->limit, err);
    return 0;
}

int hs_natural_cmp(const char *a, const char *b)
{
    while (*a && *b) {
        if (isdigit((unsigned char)*a) && isdigit((unsigned char)*b)) {
            while (*a == '0' && isdigit((unsigned char)a[1])) a++;
            while (*b == '0' && isdigit((unsigned char)b[1])) b++;
            size_t na = strspn(a, "0123456789"), nb = strspn(b, "0123456789");
            if (na != nb) return na < nb ? -1 : 1;
            int c = strncmp(a, b, na);
            if (c) return c;
            a += na;
            b += nb;
            continue;
        }
        if (*a != *b) return (unsigned char)*a < (unsigned char)*b ? -1 : 1;
        a++;
        b++;
    }
    return *a ? 1 : *b ? -1 : 0;
}

/* What a result owns: its strings. */
typedef struct trend_own {
    char **strs;
    size_t n, cap;
} trend_own;

static const char *own_str(trend_own *o, const char *s)
{
    if (o->n == o->cap) {
        size_t cap = o->cap ? 2 * o->cap : 64;
        char **np = realloc(o->strs, cap * sizeof *np);
        if (!np) return NULL;
        o->strs = np;
        o->cap = cap;
    }
    char *c = strdup(s ? s : "");
    if (c) o->strs[o->n++] = c;
    return c;
}

/* The collecting walk: the runs' rows, oldest first. */
typedef struct trend_walk {
    hs_trend_result *out;
    trend_own *own;
    size_t cap;
    int oom;
} trend_walk;

static void row_figures(hs_trend_row *w, const hs_qstore_summary *s)
{
    const double v[HS_TM__COUNT] = {
        [HS_TM_PEAK] = (double)s->peak_bytes,         [HS_TM_END] = (double)s->end_bytes,
        [HS_TM_TOTAL] = (double)s->total_alloc_bytes, [HS_TM_LEAK_RATE] = s->leak_bytes_per_s,
        [HS_TM_RSS_PEAK] = (double)s->rss_peak_bytes, [HS_TM_DURATION] = (double)s->duration_ns,
        [HS_TM_DROPPED] = (double)s->dropped_events,  [HS_TM_CODE] = (double)s->code_bytes,
    };
    for (int m = 0; m < HS_TM__COUNT; m++) {
        w->v[m] = w->lo[m] = w->hi[m] = v[m];
        w->has[m] = 1;
    }
    w->has[HS_TM_RSS_PEAK] = s->has_rss;
    w->has[HS_TM_LEAK_RATE] = s->has_leak;
    w->has[HS_TM_CODE] = s->has_code;
}

static int trend_row_cb(const hs_qstore_summary *s, void *data)
{
    trend_walk *tw = data;
    hs_trend_result *r = tw->out;
    if (r->nrows == tw->cap) {
        size_t cap = tw->cap ? 2 * tw->cap : 256;
        hs_trend_row *np = realloc(r->rows, cap * sizeof *np);
        if (!np) return tw->oom = HS_ENOMEM;
        r->rows = np;
        tw->cap = cap;
    }
    hs_trend_row *w = &r->rows[r->nrows];
    memset(w, 0, sizeof *w);
    w->run = w->first_run = w->last_run = s->id;
    w->runs = 1;
    w->start_unix_ms = s->start_unix_ns / 1000000;
    w->program = own_str(tw->own, s->program);
    w->state = own_str(tw->own, s->state);
    w->value = s->label ? own_str(tw->own, s->label) : NULL;
    if (!w->program || !w->state || (s->label && !w->value)) return tw->oom = HS_ENOMEM;
    row_figures(w, s);
    r->nrows++;
    r->runs_read++;
    return 0;
}

static int cmp_group(const void *pa, const void *pb)
{
    const hs_trend_row *a = pa, *b = pb;
    int c = hs_natural_cmp(a->value, b->value);
    if (c) return c;
    if (a->start_unix_ms != b->start_unix_ms) return a->start_unix_ms < b->start_unix_ms ? -1 : 1;
    return (a->run > b->run) - (a->run < b->run);
}

/* Folds rows [i, j) (one value's runs, oldest first) into rows[k]. */
static void group_fold(hs_trend_row *rows, size_t i, size_t j, size_t k)
{
    hs_trend_row g = {.value = rows[i].value, .program = "", .state = ""};
    g.start_unix_ms = rows[i].start_unix_ms;
    g.first_run = g.last_run = rows[i].run;
    g.runs = (int64_t)(j - i);
    for (int m = 0; m < HS_TM__COUNT; m++) {
        double sum = 0;
        int64_t n = 0;
        for (size_t x = i; x < j; x++) {
            const hs_trend_row *w = &rows[x];
            if (!w->has[m]) continue;
            g.lo[m] = n ? fmin(g.lo[m], w->v[m]) : w->v[m];
            g.hi[m] = n ? fmax(g.hi[m], w->v[m]) : w->v[m];
            sum += w->v[m];
            n++;
        }
        g.has[m] = n > 0;
        g.v[m] = n ? sum / (double)n : 0;
    }
    for (size_t x = i; x < j; x++) {
        if (rows[x].run < g.first_run) g.first_run = rows[x].run;
        if (rows[x].run > g.last_run) g.last_run = rows[x].run;
    }
    rows[k] = g;
}

/* Runs -> one row per value of by, in the values' natural order. */
static void trend_group(hs_trend_result *r)
{
    if (!r->nrows) return; /* rows may be NULL */
    qsort(r->rows, r->nrows, sizeof *r->rows, cmp_group);
    size_t k = 0;
    for (size_t i = 0, j; i < r->nrows; i = j) {
        for (j = i + 1; j < r->nrows && !strcmp(r->rows[j].value, r->rows[i].value); j++) {
        }
        group_fold(r->rows, i, j, k++);
    }
    r->nrows = k;
}

/* The selector's filters for the store. */
static int trend_filters(const hs_trend_params *p, hs_qstore_filter *f, int *n, char *idbuf,
                         int64_t *limit)
{
    *n = 0;
    if (p->all) return 0;
    switch (p->runs.kind) {
    case HS_RUNSEL_LATEST:
        *limit = 1;
        return 0;
    case HS_RUNSEL_ID:
        snprintf(idbuf, 24, "%" PRId64, p->runs.id);
        f[(*n)++] = (hs_qstore_filter){"id", idbuf};
        return 0;
    case HS_RUNSEL_MATCH:
        for (int i = 0; i < p->runs.nkv; i++)
            f[(*n)++] = (hs_qstore_filter){p->runs.kv[i].key, p->runs.kv[i].value};
        return 0;
    }
    return HS_EINVAL;
}

int hs_core_trend(hs_q *q, const hs_trend_params *p, hs_trend_result *out, hs_qerr *err)
{
    memset(out, 0, sizeof *out);
    hs_qstore_filter f[HS_SEL_MAX_KV];
    char idbuf[24];
    int64_t limit = p->limit;
    hs_qstore_summary_ask ask = {.f = f};
    if (trend_filters(p, f, &ask.n, idbuf, &limit))
        return hs__err(err, HS_EINVAL, "runs must be key=value[,…], a run id or 'all'");
    trend_own *own = calloc(1, sizeof *own);
    if (!own) return hs__err(err, HS_ENOMEM, "out of memory");
    out->own = own;
    ask.limit = limit + 1; /* one more: whether older runs were left out */
    ask.by = p->by[0] ? p->by : NULL;
    ask.function = p->function[0] ? p->function : NULL;
    ask.file = p->site_file[0] ? p->site_file : NULL;
    ask.line = p->site_line;
    ask.code_at_end = p->at_end;
    out->metric = p->metric >= 0 ? p->metric : ask.function || ask.file ? HS_TM_CODE : HS_TM_PEAK;
    out->at_end = p->at_end;
    trend_walk tw = {.out = out, .own = own};
    if (!q->store->ops->runs_summary)
        return hs__err(err, HS_EINVAL, "the %s store does not answer trend questions yet",
                       q->store->ops->name);
    int rc = q->store->ops->runs_summary(q->store, &ask, trend_row_cb, &tw, err);
    if (tw.oom) rc = hs__err(err, HS_ENOMEM, "out of memory");
    if (!rc && (int64_t)out->nrows > limit) {
        memmove(out->rows, out->rows + 1, (out->nrows - 1) * sizeof *out->rows);
        out->nrows--;
        out->runs_read--;
        out->cut = 1;
    }
    char site[600];
    snprintf(site, sizeof site, "%s:%" PRId64, p->site_file, p->site_line);
    out->by = ask.by ? own_str(own, ask.by) : NULL;
    if (p->site_is_function)
        out->site = own_str(own, ask.function);
    else
        out->function = ask.function ? own_str(own, ask.function) : NULL;
    if (ask.file) out->site = own_str(own, site);
    if (!rc && ((ask.by && !out->by) || (ask.function && !out->function && !out->site) ||
                (ask.file && !out->site)))
        rc = hs__err(err, HS_ENOMEM, "out of memory");
    if (!rc && ask.by) trend_group(out);
    if (rc) hs_trend_result_clear(out);
    return rc;
}

void hs_trend_result_clear(hs_trend_result *r)
{
    trend_own *o = r->own;
    if (o) {
        for (size_t i = 0; i < o->n; i++) free(o->strs[i]);
        free(o->strs);
        free(o);
    }
    free(r->rows);
    hs__held_release(&r->held);
    memset(r, 0, sizeof *r);
}

/* check: a gate for CI (hs_core.h, "check"): budgets on the runs a
 * selector names (their peak, their bytes live at the end, their leak
 * rate) and a baseline (a group diff against it, within a tolerance).
 *
 * Budgets on estimates. A run sampled at sample_bytes S has estimated
 * peak and end bytes whose standard error se comes from the sampler's
 * weights (hs__sampling_var summed over the moment's live traces); a
 * budget fails only when value - HS_GDIFF_K·se is above it, passes when
 * value + HS_GDIFF_K·se is within it, and is a warning in between (the
 * estimate cannot tell). A run whose exact totals are its figures (the
 * collector counted every allocation, hs_qstore_exact) has an exact peak
 * and end: se = 0. The leak rate is the leak detector's (leaks.c): the
 * sum of the slopes (bytes a second, least squares over the run) of the
 * sites it judges growing; it is compared as it is.
 *
 * The baseline fails when the target's mean total grew by more than
 * tolerance · the baseline's mean and the growth is past the noise (the
 * group diff's verdict); the rows it names are the rows that grew past
 * their noise, with their share of the total's growth. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hs_error.h"
#include "q_internal.h"

#define CHECK_WHERE   10 /* rows named per check, by default */
#define WHERE_CALLERS 3  /* callers of a row's site named (via) */
#define WHERE_FRAMES  16 /* frames read per row's stack */

const char *hs_check_status_name(int s)
{
    return s == HS_CHECK_FAIL ? "fail" : s == HS_CHECK_WARN ? "warn" : "pass";
}

void hs_check_params_init(hs_check_params *p)
{
    memset(p, 0, sizeof *p);
    p->max_peak = p->max_end = -1;
    p->max_leak_rate = -1;
    p->tolerance = 0.05;
    p->at.kind = HS_TSEL_PEAK;
    p->by = HS_GROUP_SITE;
    p->limit = CHECK_WHERE;
}

/* "200MiB", "10MB", "1.5G", "4096": bytes. K, M, G, T and KiB… are
 * powers of 1024; KB, MB… powers of 1000. tail: what may follow ("/s"). */
static int parse_size(const char *v, const char *tail, double *out)
{
    char *end;
    double x = strtod(v, &end);
    if (end == v || !(x >= 0) || x > 1e18) return -1;
    static const struct {
        const char *u;
        double m;
    } units[] = {
        {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
        {"KB", 1e3},     {"MB", 1e6},        {"GB", 1e9},           {"TB", 1e12},
        {"K", 1024.0},   {"M", 1048576.0},   {"G", 1073741824.0},   {"T", 1099511627776.0},
        {"B", 1.0},      {"", 1.0}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        size_t n = strlen(units[i].u);
        if (strncmp(end, units[i].u, n)) continue;
        if (strcmp(end + n, "") && (!tail || strcmp(end + n, tail))) continue;
        *out = x * units[i].m;
        return 0;
    }
    return -1;
}

static int check_side(hs_diff_side_sel *s, const char *key, const char *value, hs_qerr *err)
{
    hs_qerr e;
    if (hs_sel_parse_run(&s->run, value, &e)) return hs__err(err, HS_EINVAL, "%s: %s", key, e.msg);
    s->given = 1;
    s->text = value;
    return 0;
}

static int check_bytes(const char *key, const char *value, const char *tail, double *out,
                       hs_qerr *err)
{
    if (parse_size(value, tail, out))
        return hs__err(err, HS_EINVAL,
                       "%s must be a size such as 200MiB, 10MB or 4096%s (not '%.64s')", key,
                       tail ? ", per second with /s" : "", value);
    return 0;
}

int hs_check_param(hs_check_params *p, const char *key, const char *value, hs_qerr *err)
{
    double x;
    int rc;
    if (!strcmp(key, "run")) return check_side(&p->run, key, value, err);
    if (!strcmp(key, "baseline")) return check_side(&p->baseline, key, value, err);
    if (!strcmp(key, "max_peak") || !strcmp(key, "max_end")) {
        if ((rc = check_bytes(key, value, NULL, &x, err))) return rc;
        *(key[4] == 'p' ? &p->max_peak : &p->max_end) = (int64_t)llround(x);
        return 0;
    }
    if (!strcmp(key, "max_leak_rate")) {
        if ((rc = check_bytes(key, value, "/s", &x, err))) return rc;
        p->max_leak_rate = x;
        return 0;
    }
    if (!strcmp(key, "tolerance")) {
        char *end;
        x = strtod(value, &end);
        int pct = end != value && *end == '%' && !end[1];
        if (pct) x /= 100, end++;
        if (end == value || *end || !(x >= 0) || x > 100 || (!pct && x > 1))
            return hs__err(err, HS_EINVAL, "tolerance must be a share such as 5%% or 0.05");
        p->tolerance = x;
        return 0;
    }
    if (!strcmp(key, "at")) return hs_sel_parse_t(&p->at, value, err);
    if (!strcmp(key, "by")) {
        if (hs_group_parse(value, &p->by))
            return hs__err(err, HS_EINVAL, "by must be site, function or stack (not '%s')", value);
        return 0;
    }
    if (!strcmp(key, "limit")) return hs__int_text(key, value, 1, 1000, &p->limit, err);
    return 0;
}

/* ---- budgets --------------------------------------------------------------- */

static hs_check_item *item_add(hs_check_result *r, const char *name, hs_qerr *err)
{
    hs_check_item *np = realloc(r->items, (r->nitems + 1) * sizeof *np);
    if (!np) {
        hs__err(err, HS_ENOMEM, "out of memory");
        return NULL;
    }
    r->items = np;
    hs_check_item *it = &r->items[r->nitems++];
    memset(it, 0, sizeof *it);
    snprintf(it->name, sizeof it->name, "%s", name);
    return it;
}

/* A budget's status: value and se against limit. */
static int budget_status(double value, double se, double limit)
{
    if (value - HS_GDIFF_K * se > limit) return HS_CHECK_FAIL;
    if (value + HS_GDIFF_K * se > limit) return HS_CHECK_WARN;
    return HS_CHECK_PASS;
}

static int run_exact(const hs__run *run)
{
    return run->rec.exact.in_figures;
}

/* A run's bytes at t (peak or end) and their standard error. */
static int run_moment(hs_q *q, const hs__run *run, int kind, double *value, double *se, int *exact,
                      hs_qerr *err)
{
    hs_t_sel t = {.kind = kind};
    hs__at at;
    hs__state s = {0};
    int rc = hs__at_resolve(q, run, &t, &at, err);
    if (!rc) rc = hs__state_at(q, run, &at, &s, err);
    if (rc) return rc;
    double var = 0;
    for (size_t i = 0; i < s.n; i++)
        if (s.rows[i].bytes > 0)
            var += hs__sampling_var(s.rows[i].bytes, s.rows[i].count, run->sample_bytes);
    *exact =
        (run_exact(run) && (kind == HS_TSEL_PEAK || !run->main_end_ns)) || run->sample_bytes <= 1;
    *value = kind == HS_TSEL_PEAK ? (double)run->peak_bytes : (double)s.total_bytes;
    if (run_exact(run) && kind != HS_TSEL_PEAK && !run->main_end_ns) /* the process's end */
        *value = (double)run->end_bytes;
    *se = *exact ? 0 : sqrt(var);
    hs__state_clear(&s);
    return 0;
}

/* A run's leak rate: the sum of its growing sites' slopes (bytes a second). */
static int run_leak_rate(hs_q *q, int64_t id, double *rate, hs_qerr *err)
{
    hs_leaks_params lp;
    hs_leaks_params_init(&lp);
    lp.run.kind = HS_RUNSEL_ID;
    lp.run.id = id;
    snprintf(lp.run.hex, sizeof lp.run.hex, "%" PRId64, id);
    lp.limit = 100000;
    lp.max_frames = WHERE_FRAMES;
    hs_leaks_result lr;
    int rc = hs_core_leaks(q, &lp, &lr, err);
    if (rc) return rc;
    *rate = 0;
    for (size_t i = 0; i < lr.ngrowing; i++)
        if (lr.growing[i].slope > 0) *rate += lr.growing[i].slope;
    hs_leaks_result_clear(&lr);
    return 0;
}

static const char *fmt_bytes(double b, char *buf, size_t len)
{
    static const char *const u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    double a = fabs(b);
    while (a >= 1024 && i < 4) a /= 1024, b /= 1024, i++;
    snprintf(buf, len, i ? "%.1f %s" : "%.0f %s", b, u[i]);
    return buf;
}

/* A row of where; st (may be NULL) gives the callers of its site. */
static int where_add(hs_check_item *it, const char *name, const char *file, int64_t line,
                     const hs_qstack *st, double bytes, double share, hs_qerr *err)
{
    hs_check_where *np = realloc(it->where, (it->nwhere + 1) * sizeof *np);
    if (!np) return hs__err(err, HS_ENOMEM, "out of memory");
    it->where = np;
    hs_check_where *w = &it->where[it->nwhere++];
    *w = (hs_check_where){
        .name = name, .file = file ? file : "", .line = line, .bytes = bytes, .share = share};
    size_t n = 0;
    for (int k = st ? st->site + 1 : 0; st && k < st->n && k <= st->site + WHERE_CALLERS; k++) {
        int m = snprintf(w->via + n, sizeof w->via - n, "%s%s", n ? " ← " : "", st->frames[k].name);
        if (m < 0 || (size_t)m >= sizeof w->via - n) break;
        n += (size_t)m;
        if (!strcmp(st->frames[k].name, "main")) break; /* not the C library's start-up */
    }
    return 0;
}

/* Where a run's bytes are at its peak or end: its largest rows by p->by. */
static int where_top(hs_q *q, const hs_check_params *p, hs_check_item *it, int kind, hs_qerr *err)
{
    hs_top_params tp;
    hs_top_params_init(&tp);
    tp.run.kind = HS_RUNSEL_ID;
    tp.run.id = it->run;
    snprintf(tp.run.hex, sizeof tp.run.hex, "%" PRId64, it->run);
    tp.at.kind = kind;
    tp.by = p->by;
    tp.limit = p->limit;
    tp.max_frames = WHERE_FRAMES;
    hs_top_result tr;
    int rc = hs_core_top(q, &tp, &tr, err);
    if (rc) return rc;
    for (size_t i = 0; !rc && i < tr.nrows; i++) {
        const hs_top_row *w = &tr.rows[i];
        int64_t b = p->by == HS_GROUP_FUNCTION ? w->self_bytes : w->total_bytes;
        rc = where_add(it, w->frame.name, w->frame.file, w->frame.line,
                       p->by == HS_GROUP_FUNCTION ? NULL : &w->stack, (double)b, w->share, err);
    }
    hs_top_result_clear(&tr);
    return rc;
}

/* Where a run leaks: its growing sites, by slope. */
static int where_leaks(hs_q *q, hs_check_item *it, int64_t limit, hs_qerr *err)
{
    hs_leaks_params lp;
    hs_leaks_params_init(&lp);
    lp.run.kind = HS_RUNSEL_ID;
    lp.run.id = it->run;
    snprintf(lp.run.hex, sizeof lp.run.hex, "%" PRId64, it->run);
    lp.limit = limit;
    lp.max_frames = WHERE_FRAMES;
    hs_leaks_result lr;
    int rc = hs_core_leaks(q, &lp, &lr, err);
    if (rc) return rc;
    for (size_t i = 0; !rc && i < lr.ngrowing; i++) {
        const hs_leak_row *w = &lr.growing[i];
        rc = where_add(it, w->site.name, w->site.file, w->site.line, &w->stack, w->slope,
                       it->value > 0 ? w->slope / it->value : 0, err);
    }
    hs_leaks_result_clear(&lr);
    return rc;
}

/* The budget named name (limit) over every run of r: the worst run's. */
static int check_budget(hs_q *q, const hs_check_params *p, hs_check_result *r, const char *name,
                        int kind, double limit, hs_qerr *err)
{
    hs_check_item *it = item_add(r, name, err);
    if (!it) return HS_ENOMEM;
    it->limit = limit;
    it->status = -1;
    for (size_t i = 0; i < r->nruns; i++) {
        hs__run run;
        double v = 0, se = 0;
        int exact = 1;
        int rc = hs__run_load(q, r->runs[i], &run, err);
        if (!rc)
            rc = kind < 0 ? run_leak_rate(q, run.id, &v, err)
                          : run_moment(q, &run, kind, &v, &se, &exact, err);
        hs__run_clear(&run);
        if (rc) return rc;
        int st = budget_status(v, se, limit);
        if (st > it->status ||
            (st == it->status && v - HS_GDIFF_K * se > it->value - HS_GDIFF_K * it->se)) {
            it->status = st;
            it->value = v;
            it->se = se;
            it->exact = exact;
            it->run = r->runs[i];
        }
    }
    char b1[32], b2[32], b3[32];
    const char *unit = kind < 0 ? "/s" : "";
    snprintf(it->message, sizeof it->message, "%s of run %" PRId64 ": %s%s%s%s %s budget %s%s",
             name, it->run, fmt_bytes(it->value, b1, sizeof b1), unit, it->se > 0 ? " ± " : "",
             it->se > 0 ? fmt_bytes(HS_GDIFF_K * it->se, b2, sizeof b2) : "",
             it->status == HS_CHECK_FAIL   ? "over its"
             : it->status == HS_CHECK_WARN ? "within the error of its"
                                           : "within its",
             fmt_bytes(limit, b3, sizeof b3), unit);
    if (it->status == HS_CHECK_PASS) return 0;
    return kind < 0 ? where_leaks(q, it, p->limit, err) : where_top(q, p, it, kind, err);
}

/* ---- the baseline ------------------------------------------------------------ */

static int check_baseline(hs_q *q, const hs_check_params *p, hs_check_result *r, hs_qerr *err)
{
    hs_diff_params dp;
    hs_diff_params_init(&dp);
    dp.a = p->baseline;
    dp.b = p->run;
    dp.a.at = dp.b.at = p->at;
    dp.by = p->by;
    dp.limit = 100000;
    dp.max_frames = WHERE_FRAMES;
    hs_gdiff_result g;
    int rc = hs_core_gdiff(q, &dp, &g, err);
    if (rc) return rc;
    hs_check_item *it = item_add(r, "baseline", err);
    if (!it) {
        hs_gdiff_result_clear(&g);
        return HS_ENOMEM;
    }
    it->value = g.delta;
    it->se = g.se;
    it->limit = p->tolerance * g.a.total.mean;
    it->exact = g.se == 0;
    it->status = g.delta <= it->limit         ? HS_CHECK_PASS
                 : g.verdict == HS_GDIFF_GREW ? HS_CHECK_FAIL
                                              : HS_CHECK_WARN;
    char b1[32], b2[32], b3[32], b4[32];
    snprintf(it->message, sizeof it->message,
             "%s at %s: %s over %zu run(s) against %s over %zu: %s%s ± %s (%.1f%%; tolerance "
             "%.1f%%, %s)%s",
             r->selector, g.b.at, fmt_bytes(g.b.total.mean, b1, sizeof b1), g.b.nruns,
             fmt_bytes(g.a.total.mean, b2, sizeof b2), g.a.nruns, g.delta > 0 ? "+" : "",
             fmt_bytes(g.delta, b3, sizeof b3), fmt_bytes(HS_GDIFF_K * g.se, b4, sizeof b4),
             g.a.total.mean > 0 ? 100 * g.delta / g.a.total.mean : 0, 100 * p->tolerance,
             hs_gdiff_verdict_name(g.verdict),
             it->status == HS_CHECK_FAIL   ? ": grew past the tolerance"
             : it->status == HS_CHECK_WARN ? ": past the tolerance, within the noise"
                                           : "");
    for (size_t i = 0; !rc && i < g.nrows && it->nwhere < (size_t)p->limit; i++) {
        const hs_gdiff_row *w = &g.rows[i];
        if (w->verdict != HS_GDIFF_GREW) continue;
        rc = where_add(it, w->name, w->file, w->line, w->stack.n ? &w->stack : NULL, w->delta,
                       w->share, err);
    }
    hs_gdiff_result_clear(&g);
    return rc;
}

int hs_core_check(hs_q *q, const hs_check_params *p, hs_check_result *out, hs_qerr *err)
{
    memset(out, 0, sizeof *out);
    if (!p->run.given) return hs__err(err, HS_EINVAL, "check needs run=RUN-OR-SELECTOR");
    if (p->max_peak < 0 && p->max_end < 0 && p->max_leak_rate < 0 && !p->baseline.given)
        return hs__err(err, HS_EINVAL,
                       "check needs a budget (max_peak, max_end, max_leak_rate) or a baseline");
    hs_gdiff_side side = {0};
    int rc = hs__gdiff_runs(q, &p->run, &side, err);
    out->runs = side.runs;
    out->nruns = side.nruns;
    out->selector = p->run.text ? p->run.text : "";
    out->baseline = p->baseline.given ? p->baseline.text : NULL;
    if (!rc && p->max_peak >= 0)
        rc = check_budget(q, p, out, "max_peak", HS_TSEL_PEAK, (double)p->max_peak, err);
    if (!rc && p->max_end >= 0)
        rc = check_budget(q, p, out, "max_end", HS_TSEL_END, (double)p->max_end, err);
    if (!rc && p->max_leak_rate >= 0)
        rc = check_budget(q, p, out, "max_leak_rate", -1, p->max_leak_rate, err);
    if (!rc && p->baseline.given) rc = check_baseline(q, p, out, err);
    for (size_t i = 0; !rc && i < out->nitems; i++)
        if (out->items[i].status > out->status) out->status = out->items[i].status;
    if (rc) hs_check_result_clear(out);
    return rc;
}

void hs_check_result_clear(hs_check_result *r)
{
    for (size_t i = 0; i < r->nitems; i++) free(r->items[i].where);
    free(r->items);
    free(r->runs);
    memset(r, 0, sizeof *r);
}

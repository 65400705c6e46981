/* api_trend: GET /api/trend of docs/api.md, the trend's typed result as
 * JSON (hs_api_trend_json) and its parameters from the query string. */
#include <math.h>
#include <string.h>

#include "hs_error.h"
#include "q_internal.h"

/* A figure as JSON: bytes, counts and times are integers (a group's mean
 * rounded), the leak rate a number; null when unknown. */
static json_t *figure_json(int m, double v, int has)
{
    if (!has) return json_null();
    if (m == HS_TM_LEAK_RATE) return json_real(v);
    return json_integer((json_int_t)llround(v));
}

static json_t *figures_json(const hs_trend_row *w, const double *v)
{
    json_t *o = json_object();
    for (int m = 0; o && m < HS_TM__COUNT; m++)
        json_object_set_new(o, hs_trend_metric_name(m), figure_json(m, v[m], w->has[m]));
    return o;
}

static json_t *trend_row_json(const hs_trend_result *r, const hs_trend_row *w)
{
    json_t *o = figures_json(w, w->v);
    if (!o) return NULL;
    json_object_set_new(o, "start_unix_ms", json_integer(w->start_unix_ms));
    if (r->by) {
        json_object_set_new(o, "value", json_string(w->value));
        json_object_set_new(o, "runs", json_integer(w->runs));
        json_object_set_new(o, "first_run", json_integer(w->first_run));
        json_object_set_new(o, "last_run", json_integer(w->last_run));
        json_object_set_new(o, "min", figures_json(w, w->lo));
        json_object_set_new(o, "max", figures_json(w, w->hi));
    } else {
        json_object_set_new(o, "run", json_integer(w->run));
        json_object_set_new(o, "program", json_string(w->program));
        json_object_set_new(o, "state", json_string(w->state));
    }
    return o;
}

json_t *hs_api_trend_json(const hs_trend_result *r)
{
    json_t *rows = json_array();
    for (size_t i = 0; rows && i < r->nrows; i++)
        if (json_array_append_new(rows, trend_row_json(r, &r->rows[i]))) {
            json_decref(rows);
            return NULL;
        }
    json_t *code = json_null();
    if (r->function)
        code = json_pack("{s:s,s:s}", "function", r->function, "at", r->at_end ? "end" : "peak");
    else if (r->site)
        code = json_pack("{s:s,s:s}", "site", r->site, "at", r->at_end ? "end" : "peak");
    return json_pack("{s:s,s:s?,s:o,s:I,s:b,s:o}", "metric", hs_trend_metric_name(r->metric), "by",
                     r->by, "code", code, "runs_read", (json_int_t)r->runs_read, "truncated",
                     r->cut, "rows", rows);
}

int hs__api_trend(hs_q *q, const hs__params *params, json_t **out, hs_qerr *err)
{
    static const char *const keys[] = {"runs", "by", "function", "site", "at", "metric", "limit"};
    hs_trend_params p;
    hs_trend_params_init(&p);
    int rc = 0;
    for (size_t i = 0; !rc && i < HS_COUNTOF(keys); i++) {
        const char *v = hs__param(params, keys[i]);
        if (v) rc = hs_trend_param(&p, keys[i], v, err);
    }
    if (!rc && hs__param(params, "function") && hs__param(params, "site"))
        rc = hs__err(err, HS_EINVAL, "give function= or site=, not both");
    hs_trend_result r;
    if (rc || (rc = hs_core_trend(q, &p, &r, err))) return rc;
    *out = hs_api_trend_json(&r);
    hs_trend_result_clear(&r);
    return *out ? 0 : hs__err(err, HS_ENOMEM, "out of memory");
}

/* api_trend: GET /api/trend of docs/api.md: the trend's typed result as
 * JSON text, and its parameters from the query string.
 *
 * The text is written directly (not built as jansson values first): an
 * answer holds a row per run, 10,000 rows and more, and building and
 * dumping that many objects costs several times the question itself. The
 * JSON value of the answer (hs_api_trend_json, for the CLI) is this text
 * parsed, so both are one encoding. Strings are escaped as JSON wants; a
 * byte that does not belong to valid UTF-8 becomes U+FFFD. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "hs_error.h"
#include "q_internal.h"

/* The length of the valid UTF-8 sequence at s (at most n bytes), 0 if none. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    size_t len = s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 ? 2 : 0;
    if (!len || s[0] >= 0xf8 || len > n) return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    if (len == 3 && ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] >= 0xa0))) return 0;
    if (len == 4 && ((s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] >= 0x90))) return 0;
    return len;
}

static void put_str(hs_buf *b, const char *str)
{
    const unsigned char *s = (const unsigned char *)(str ? str : "");
    size_t n = strlen((const char *)s), run = 0;
    hs_buf_put(b, "\"", 1);
    for (size_t i = 0; i < n; i += run ? run : 1) {
        run = 0;
        if (s[i] >= 0x20 && s[i] < 0x80 && s[i] != '"' && s[i] != '\\') {
            while (i + run < n && s[i + run] >= 0x20 && s[i + run] < 0x80 && s[i + run] != '"' &&
                   s[i + run] != '\\')
                run++;
            hs_buf_put(b, s + i, run);
        } else if (s[i] >= 0x80) {
            run = utf8_len(s + i, n - i);
            if (run)
                hs_buf_put(b, s + i, run);
            else
                hs_buf_put(b, "\\ufffd", 6);
        } else {
            hs_buf_printf(b, "\\u%04x", s[i]);
        }
    }
    hs_buf_put(b, "\"", 1);
}

/* A figure: bytes, counts and times are integers (a group's mean rounded),
 * the leak rate a number; null when unknown. */
static void put_figure(hs_buf *b, int m, double v, int has)
{
    if (!has) {
        hs_buf_put(b, "null", 4);
    } else if (m != HS_TM_LEAK_RATE) {
        hs_buf_printf(b, "%lld", (long long)llround(v));
    } else {
        char t[40];
        int n = snprintf(t, sizeof t, "%.17g", isfinite(v) ? v : 0.0);
        hs_buf_put(b, t, (size_t)n);
        if (!strpbrk(t, ".e")) hs_buf_put(b, ".0", 2);
    }
}

static void put_figures(hs_buf *b, const hs_trend_row *w, const double *v)
{
    for (int m = 0; m < HS_TM__COUNT; m++) {
        hs_buf_printf(b, "%s\"%s\":", m ? "," : "", hs_trend_metric_name(m));
        put_figure(b, m, v[m], w->has[m]);
    }
}

static void put_row(hs_buf *b, const hs_trend_result *r, const hs_trend_row *w)
{
    hs_buf_put(b, "{", 1);
    put_figures(b, w, w->v);
    hs_buf_printf(b, ",\"start_unix_ms\":%" PRId64, w->start_unix_ms);
    if (r->by) {
        hs_buf_put(b, ",\"value\":", 9);
        put_str(b, w->value);
        hs_buf_printf(b, ",\"runs\":%" PRId64 ",\"first_run\":%" PRId64 ",\"last_run\":%" PRId64,
                      w->runs, w->first_run, w->last_run);
        hs_buf_put(b, ",\"min\":{", 8);
        put_figures(b, w, w->lo);
        hs_buf_put(b, "},\"max\":{", 9);
        put_figures(b, w, w->hi);
        hs_buf_put(b, "}", 1);
    } else {
        hs_buf_printf(b, ",\"run\":%" PRId64 ",\"program\":", w->run);
        put_str(b, w->program);
        hs_buf_put(b, ",\"state\":", 9);
        put_str(b, w->state);
    }
    hs_buf_put(b, "}", 1);
}

/* The answer's text into b (b->oom when memory ran out). */
static void trend_text(hs_buf *b, const hs_trend_result *r)
{
    hs_buf_printf(b, "{\"metric\":\"%s\",\"by\":", hs_trend_metric_name(r->metric));
    if (r->by)
        put_str(b, r->by);
    else
        hs_buf_put(b, "null", 4);
    hs_buf_put(b, ",\"code\":", 8);
    if (r->function || r->site) {
        hs_buf_printf(b, "{\"%s\":", r->function ? "function" : "site");
        put_str(b, r->function ? r->function : r->site);
        hs_buf_printf(b, ",\"at\":\"%s\"}", r->at_end ? "end" : "peak");
    } else {
        hs_buf_put(b, "null", 4);
    }
    hs_buf_printf(b, ",\"runs_read\":%" PRId64 ",\"truncated\":%s,\"rows\":[", r->runs_read,
                  r->cut ? "true" : "false");
    for (size_t i = 0; i < r->nrows; i++) {
        if (i) hs_buf_put(b, ",", 1);
        put_row(b, r, &r->rows[i]);
    }
    hs_buf_put(b, "]}", 2);
}

json_t *hs_api_trend_json(const hs_trend_result *r)
{
    hs_buf b = {0};
    trend_text(&b, r);
    json_t *j = b.oom ? NULL : json_loadb(b.p, b.n, 0, NULL);
    free(b.p);
    return j;
}

int hs__api_trend(hs_q *q, const hs__params *params, hs_api_reply *out, hs_qerr *err)
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
    hs_buf b = {0};
    trend_text(&b, &r);
    hs_trend_result_clear(&r);
    if (b.oom) {
        free(b.p);
        return hs__err(err, HS_ENOMEM, "out of memory");
    }
    out->status = 200;
    out->content_type = "application/json";
    out->body = b.p;
    out->len = b.n;
    return 0;
}

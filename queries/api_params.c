/* api_params: a request's query string as decoded parameters, shared by the
 * routes of the JSON adapter (api.c, api_trend.c): percent-decoded once,
 * bounded (MAX_PARAMS pairs, MAX_QUERY bytes), looked up by key, and the
 * few parameters every route reads the same way (max_frames, min_share). */
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "hs_error.h"
#include "hs_text.h"
#include "q_internal.h"

const char *hs__param(const hs__params *p, const char *key)
{
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->k[i], key)) return p->v[i];
    return NULL;
}

int hs__min_share_param(const hs__params *p, double *out, hs_qerr *err)
{
    *out = 0;
    const char *ms = hs__param(p, "min_share");
    if (!ms) return 0;
    char *end;
    *out = strtod(ms, &end);
    if (!*ms || *end || !(*out >= 0 && *out <= 1))
        return hs__err(err, HS_EINVAL, "min_share must be a number from 0 to 1 (not '%s')", ms);
    return 0;
}

int hs__param_int(const hs__params *p, const char *key, int64_t def, int64_t lo, int64_t hi,
                  int64_t *out, hs_qerr *err)
{
    const char *v = hs__param(p, key);
    if (!v) {
        *out = def;
        return 0;
    }
    return hs__int_text(key, v, lo, hi, out, err);
}

int hs__max_frames_param(const hs__params *p, int *out, hs_qerr *err)
{
    int64_t x;
    int rc = hs__param_int(p, "max_frames", HS_STACK_FRAMES, 1, HS_MAX_DEPTH, &x, err);
    *out = (int)x;
    return rc;
}

int hs__param_count(const hs__params *p)
{
    return p->n;
}

void hs__param_at(const hs__params *p, int i, const char **k, const char **v)
{
    *k = p->k[i];
    *v = p->v[i];
}

int hs__params_parse(hs__params *p, const char *qs, hs_qerr *err)
{
    p->n = 0;
    if (!qs || !*qs) return 0;
    size_t len = strlen(qs);
    if (len > MAX_QUERY)
        return hs__err(err, HS_ETOOBIG, "query string longer than %d bytes", MAX_QUERY);
    char *w = p->buf;
    char *end = p->buf + sizeof p->buf;
    const char *s = qs;
    while (*s) {
        const char *amp = strchr(s, '&');
        size_t n = amp ? (size_t)(amp - s) : strlen(s);
        if (n) {
            if (p->n == MAX_PARAMS)
                return hs__err(err, HS_EINVAL, "more than %d parameters", MAX_PARAMS);
            const char *eq = memchr(s, '=', n);
            size_t kl = eq ? (size_t)(eq - s) : n;
            long a = hs_pct_decode(w, (size_t)(end - w), s, kl, HS_PCT_PLUS);
            if (a < 0) return hs__err(err, HS_EINVAL, "malformed query string");
            p->k[p->n] = w;
            w += a + 1;
            long b = eq ? hs_pct_decode(w, (size_t)(end - w), eq + 1, n - kl - 1, HS_PCT_PLUS)
                        : hs_pct_decode(w, (size_t)(end - w), "", 0, HS_PCT_PLUS);
            if (b < 0) return hs__err(err, HS_EINVAL, "malformed query string");
            p->v[p->n++] = w;
            w += b + 1;
        }
        if (!amp) break;
        s = amp + 1;
    }
    return 0;
}

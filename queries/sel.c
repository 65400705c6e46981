/* sel: the RUN and T selectors of docs/api.md, parsed without touching a
 * database. Pure functions over NUL-terminated strings; they copy what they
 * keep, bound every length, and say in a sentence what is wrong. */
#include <ctype.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "hs_error.h"
#include "hs_core.h"

#define SEL_MAX_LEN 2048

/* A selector's sentence quotes it: cut at SEL_MSG_LEN bytes, as the API
 * has always answered. */
#define SEL_MSG_LEN 300

static int fail(hs_qerr *err, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, SEL_MSG_LEN, fmt, ap);
        va_end(ap);
        err->code = HS_EINVAL;
    }
    return HS_EINVAL;
}

static int is_key_char(int c)
{
    return isalnum(c) || c == '_' || c == '-' || c == '.';
}

/* An id= value: digits (at most 18), or a range A..B with A <= B. */
static int id_value_ok(const char *v)
{
    size_t n = strlen(v);
    int64_t lo, hi;
    if (strspn(v, "0123456789") == n) return n > 0;
    return hs_sel_id_range(v, &lo, &hi);
}

int hs_sel_parse_run(hs_run_sel *out, const char *s, hs_qerr *err)
{
    memset(out, 0, sizeof *out);
    if (!s || !*s) return fail(err, "empty run selector");
    size_t n = strlen(s);
    if (n > SEL_MAX_LEN) return fail(err, "run selector longer than %d bytes", SEL_MAX_LEN);
    if (!strchr(s, '=')) {
        if (!strcmp(s, "latest")) {
            out->kind = HS_RUNSEL_LATEST;
            return 0;
        }
        size_t digits = strspn(s, "0123456789");
        size_t hex = strspn(s, "0123456789abcdefABCDEF");
        if (digits == n && n <= 18) {
            out->kind = HS_RUNSEL_ID;
            sscanf(s, "%" SCNd64, &out->id);
            memcpy(out->hex, s, n + 1);
            return 0;
        }
        if (hex == n && n <= 32) {
            out->kind = HS_RUNSEL_UUID;
            for (size_t i = 0; i <= n; i++) out->hex[i] = (char)tolower((unsigned char)s[i]);
            return 0;
        }
        return fail(err,
                    "malformed run selector '%s': expected a run id, a uuid prefix, 'latest' "
                    "or key=value[,key=value…][,latest]",
                    s);
    }
    out->kind = HS_RUNSEL_MATCH;
    const char *p = s;
    int latest = 0;
    while (1) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == 0) return fail(err, "malformed run selector '%s': empty element", s);
        if (len == 6 && !strncmp(p, "latest", 6)) {
            if (latest || end)
                return fail(err, "malformed run selector '%s': 'latest' must come last", s);
            latest = 1;
        } else {
            const char *eq = memchr(p, '=', len);
            if (!eq)
                return fail(err, "malformed run selector '%s': '%.*s' is not key=value", s,
                            (int)len, p);
            size_t klen = (size_t)(eq - p), vlen = len - klen - 1;
            if (klen == 0 || klen >= sizeof out->kv[0].key)
                return fail(err, "malformed run selector '%s': bad key length", s);
            if (vlen == 0 || vlen >= sizeof out->kv[0].value)
                return fail(err, "malformed run selector '%s': bad value for '%.*s'", s, (int)klen,
                            p);
            for (size_t i = 0; i < klen; i++)
                if (!is_key_char((unsigned char)p[i]))
                    return fail(err, "malformed run selector '%s': bad key '%.*s'", s, (int)klen,
                                p);
            if (memchr(eq + 1, '=', vlen))
                return fail(err, "malformed run selector '%s': two '=' in one element", s);
            if (out->nkv == HS_SEL_MAX_KV)
                return fail(err, "run selector has more than %d conditions", HS_SEL_MAX_KV);
            memcpy(out->kv[out->nkv].key, p, klen);
            out->kv[out->nkv].key[klen] = '\0';
            memcpy(out->kv[out->nkv].value, eq + 1, vlen);
            out->kv[out->nkv].value[vlen] = '\0';
            if (!strcmp(out->kv[out->nkv].key, "id") && !id_value_ok(out->kv[out->nkv].value))
                return fail(err,
                            "malformed run selector '%s': id must be an integer or a range "
                            "A..B (A <= B)",
                            s);
            out->nkv++;
        }
        if (!end) break;
        p = end + 1;
    }
    if (!out->nkv) out->kind = HS_RUNSEL_LATEST;
    out->latest = latest;
    return 0;
}

int hs_sel_id_range(const char *v, int64_t *lo, int64_t *hi)
{
    const char *dots = strstr(v, "..");
    size_t n1 = strspn(v, "0123456789");
    if (!dots || n1 != (size_t)(dots - v) || n1 == 0 || n1 > 18) return 0;
    size_t n2 = strspn(dots + 2, "0123456789");
    if (n2 == 0 || n2 > 18 || dots[2 + n2]) return 0;
    sscanf(v, "%" SCNd64, lo);
    sscanf(dots + 2, "%" SCNd64, hi);
    return *lo <= *hi;
}

int hs_sel_is_group(const hs_run_sel *sel)
{
    return sel->kind == HS_RUNSEL_MATCH && !sel->latest;
}

int hs_sel_parse_t(hs_t_sel *out, const char *s, hs_qerr *err)
{
    memset(out, 0, sizeof *out);
    if (!s || !*s) return fail(err, "empty time (expected seconds, 'peak', 'end' or 'exit')");
    if (!strcmp(s, "peak")) {
        out->kind = HS_TSEL_PEAK;
        return 0;
    }
    if (!strcmp(s, "end")) {
        out->kind = HS_TSEL_END;
        return 0;
    }
    if (!strcmp(s, "exit")) {
        out->kind = HS_TSEL_EXIT;
        return 0;
    }
    /* digits[.digits][s]: exact integer arithmetic, no locale, no float. */
    const char *p = s;
    int64_t sec = 0, frac = 0;
    int nd = 0, nf = 0;
    while (isdigit((unsigned char)*p)) {
        if (++nd > 9) goto bad; /* 31 years; more would overflow nanoseconds */
        sec = sec * 10 + (*p++ - '0');
    }
    if (*p == '.') {
        p++;
        while (isdigit((unsigned char)*p)) {
            if (nf < 9) {
                frac = frac * 10 + (*p - '0');
                nf++;
            }
            p++;
        }
    }
    if (*p == 's') p++;
    if (*p || (nd == 0 && nf == 0)) goto bad;
    for (int i = nf; i < 9; i++) frac *= 10;
    out->kind = HS_TSEL_SECONDS;
    out->ns = sec * 1000000000LL + frac;
    return 0;
bad:
    return fail(err,
                "malformed time '%.64s': expected seconds from the run's start (e.g. 1.5), "
                "'peak', 'end' or 'exit'",
                s);
}

int hs_sel_parse_at(hs_run_sel *run, hs_t_sel *t, const char *s, const char *def, hs_qerr *err)
{
    char buf[SEL_MAX_LEN + 1];
    if (!s || !*s) return fail(err, "empty RUN@T");
    size_t n = strlen(s);
    if (n > SEL_MAX_LEN) return fail(err, "RUN@T longer than %d bytes", SEL_MAX_LEN);
    memcpy(buf, s, n + 1);
    char *at = strrchr(buf, '@');
    const char *ts = def;
    if (at) {
        *at = '\0';
        ts = at + 1;
    }
    int rc = hs_sel_parse_run(run, buf, err);
    if (rc) return rc;
    return hs_sel_parse_t(t, ts, err);
}

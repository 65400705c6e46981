/* chcompare: the questions of the API asked of a SQLite store and of the
 * ClickHouse store it was shipped to, the JSON answers compared field by
 * field (chcompare.h). */
#include "chcompare.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>
#include <zlib.h>

#include "hs_chship.h"
#include "hs_queries.h"

static int mismatches;

/* ---- comparing ------------------------------------------------------------ */

static int is_id_key(const char *k)
{
    return k && (!strcmp(k, "id") || !strcmp(k, "parent_id") || !strcmp(k, "trace") ||
                 !strcmp(k, "run") || !strcmp(k, "next") || !strcmp(k, "runs[]") ||
                 !strcmp(k, "last_run") || !strcmp(k, "first_run"));
}

/* The key an array's elements are compared under: check's "runs" is a list
 * of run ids, trend's a count. */
static const char *elem_key(const char *k)
{
    return k && !strcmp(k, "runs") ? "runs[]" : k;
}

/* The run asked about (its SQLite and ClickHouse ids as text): texts that
 * name it (check's selectors and messages) are compared with one in place
 * of the other. */
static const char *cur_local, *cur_chid;

static int same_text_but_run(const char *a, const char *b)
{
    if (!cur_local || !a || !b) return 0;
    /* ClickHouse's id (long, a hash) in b becomes SQLite's: then b must be a */
    char buf[4096];
    size_t n = 0, ll = strlen(cur_local), lc = strlen(cur_chid);
    for (const char *p = b; *p && n + ll + 1 < sizeof buf;) {
        if (!strncmp(p, cur_chid, lc)) {
            memcpy(buf + n, cur_local, ll);
            n += ll;
            p += lc;
        } else {
            buf[n++] = *p++;
        }
    }
    buf[n] = 0;
    return !strcmp(buf, a);
}

static void report(const char *path, const char *what, json_t *a, json_t *b)
{
    if (mismatches++ >= 40) return;
    char *x = a ? json_dumps(a, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
    char *y = b ? json_dumps(b, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
    fprintf(stderr, "  %s: %s: sqlite %.200s, clickhouse %.200s\n", path, what, x ? x : "-",
            y ? y : "-");
    free(x);
    free(y);
}

static void compare(hs_chship *sh, const char *path, const char *key, json_t *a, json_t *b)
{
    char sub[512];
    if (json_typeof(a) != json_typeof(b) && !(json_is_number(a) && json_is_number(b))) {
        report(path, "types differ", a, b);
        return;
    }
    if (json_is_object(a)) {
        const char *k;
        json_t *v;
        json_object_foreach(a, k, v)
        {
            snprintf(sub, sizeof sub, "%s.%s", path, k);
            json_t *w = json_object_get(b, k);
            if (!w)
                report(sub, "missing", v, NULL);
            else
                compare(sh, sub, k, v, w);
        }
        json_object_foreach(b, k, v) if (!json_object_get(a, k))
        {
            snprintf(sub, sizeof sub, "%s.%s", path, k);
            report(sub, "extra", NULL, v);
        }
    } else if (json_is_array(a)) {
        if (json_array_size(a) != json_array_size(b)) {
            report(path, "lengths differ", a, b);
            return;
        }
        for (size_t i = 0; i < json_array_size(a); i++) {
            snprintf(sub, sizeof sub, "%s[%zu]", path, i);
            compare(sh, sub, elem_key(key), json_array_get(a, i), json_array_get(b, i));
        }
    } else if (json_is_integer(a) && json_is_integer(b) && is_id_key(key)) {
        json_int_t x = json_integer_value(a);
        int64_t want = hs_chship_content_id(sh, strcmp(key, "trace") ? 'r' : 't', x);
        if (want != json_integer_value(b)) report(path, "ids differ", a, b);
    } else if (json_is_number(a)) {
        double x = json_number_value(a), y = json_number_value(b);
        double tol = 1e-9 * (x < 0 ? -x : x);
        if (x - y > tol || y - x > tol) report(path, "values differ", a, b);
    } else if (!json_equal(a, b) &&
               !(json_is_string(a) &&
                 same_text_but_run(json_string_value(a), json_string_value(b)))) {
        report(path, "values differ", a, b);
    }
}

/* A file answer as bytes to compare: gunzipped when it is gzip (pprof). */
static unsigned char *file_bytes(const hs_api_reply *r, size_t *len, int *gz)
{
    const unsigned char *p = (const unsigned char *)r->body;
    *gz = r->len >= 2 && p[0] == 0x1f && p[1] == 0x8b;
    if (!*gz) {
        unsigned char *o = malloc(r->len + 1);
        memcpy(o, p, r->len);
        o[r->len] = 0;
        *len = r->len;
        return o;
    }
    size_t cap = 1 << 20;
    unsigned char *o = malloc(cap);
    z_stream z = {.next_in = (unsigned char *)p,
                  .avail_in = (uInt)r->len,
                  .next_out = o,
                  .avail_out = (uInt)cap};
    inflateInit2(&z, 16 + MAX_WBITS);
    inflate(&z, Z_FINISH);
    *len = z.total_out;
    inflateEnd(&z);
    if (*len < cap) o[*len] = 0;
    return o;
}

/* Replaces "run CHID" by "run LOCAL" in b (the exports name their run);
 * in a protobuf (pprof) the string's one-byte length before it too. */
static void unname_run(unsigned char *b, size_t *len, const char *local, const char *chid,
                       int proto)
{
    char from[64], to[64];
    snprintf(from, sizeof from, "run %s", chid);
    snprintf(to, sizeof to, "run %s", local);
    size_t nf = strlen(from), nt = strlen(to);
    for (size_t i = 0; i + nf <= *len; i++) {
        if (memcmp(b + i, from, nf)) continue;
        memcpy(b + i, to, nt);
        memmove(b + i + nt, b + i + nf, *len - i - nf);
        *len -= nf - nt;
        if (proto && i > 0 && b[i - 1] > nf - nt && b[i - 1] < 128 && b[i - 1] >= nf &&
            i + b[i - 1] - (nf - nt) <= *len)
            b[i - 1] = (unsigned char)(b[i - 1] - (nf - nt)); /* a length before the string */
    }
}

/* Asks both stores target_a / target_b (the same question with each
 * store's ids) and compares the answers. */
static void ask_both(hs_chship *sh, hs_q *qa, hs_q *qb, const char *ta, const char *tb,
                     const char *local, const char *chid)
{
    hs_api_reply ra = {0}, rb = {0};
    hs_api_handle(qa, "GET", ta, NULL, 0, &ra);
    hs_api_handle(qb, "GET", tb, NULL, 0, &rb);
    int before = mismatches;
    if (ra.status != rb.status) {
        fprintf(stderr, "  %s: status %d (sqlite) vs %d\n", tb, ra.status, rb.status);
        mismatches++;
    }
    if (ra.status != 200) {
        char *x = ra.json ? json_dumps(ra.json, JSON_COMPACT) : NULL;
        fprintf(stderr, "  %s: sqlite answers %d: %.300s\n", ta, ra.status, x ? x : "");
        free(x);
        mismatches++;
    }
    json_t *ja = ra.json ? json_incref(ra.json) : NULL, *jb = rb.json ? json_incref(rb.json) : NULL;
    if (!ja && !jb && ra.body && rb.body && ra.content_type &&
        strstr(ra.content_type, "json")) { /* JSON written as text (trend) */
        ja = json_loadb((const char *)ra.body, ra.len, 0, NULL);
        jb = json_loadb((const char *)rb.body, rb.len, 0, NULL);
    }
    cur_local = local;
    cur_chid = chid;
    if (ja && jb)
        compare(sh, "", NULL, ja, jb);
    else if (ra.body && rb.body) {
        size_t na, nb;
        int gz;
        unsigned char *fa = file_bytes(&ra, &na, &gz), *fb = file_bytes(&rb, &nb, &gz);
        if (local) unname_run(fb, &nb, local, chid, gz);
        if (na != nb || memcmp(fa, fb, na)) {
            size_t at = 0;
            while (at < na && at < nb && fa[at] == fb[at]) at++;
            fprintf(stderr, "  %s: files differ (%zu vs %zu bytes) from byte %zu: %.40s | %.40s\n",
                    tb, na, nb, at, at < na ? (const char *)fa + at : "",
                    at < nb ? (const char *)fb + at : "");
            mismatches++;
        }
        free(fa);
        free(fb);
    }
    cur_local = cur_chid = NULL;
    json_decref(ja);
    json_decref(jb);
    if (mismatches != before) fprintf(stderr, "DIFF %s\n", tb);
    hs_api_reply_clear(&ra);
    hs_api_reply_clear(&rb);
}

/* ---- the questions ----------------------------------------------------------- */

/* Every question about one run; %1$s is the run's id. */
static const char *const per_run[] = {
    "/api/runs/%1$s",
    "/api/runs/%1$s/history",
    "/api/runs/%1$s/history?top=3",
    "/api/runs/%1$s/top?at=peak",
    "/api/runs/%1$s/top?at=end",
    "/api/runs/%1$s/top?at=0.55",
    "/api/runs/%1$s/top?at=end&by=function",
    "/api/runs/%1$s/top?at=peak&by=stack",
    "/api/runs/%1$s/flame?at=peak",
    "/api/runs/%1$s/flame?at=end",
    "/api/runs/%1$s/leaks",
    "/api/runs/%1$s/sizes",
    "/api/runs/%1$s/export?format=collapsed",
    "/api/runs/%1$s/export?format=speedscope",
    "/api/runs/%1$s/export?format=dot",
    "/api/runs/%1$s/export?format=pprof",
    "/api/diff?a=%1$s@peak&b=%1$s@end",
    "/api/runs?root=%1$s",
    "/api/check?run=%1$s&max_peak=1&max_leak_rate=1",
    "/api/check?run=%1$s&baseline=%1$s",
};

static const char *const lists[] = {
    "/api/runs",
    "/api/runs?state=ended",
    "/api/runs?program=app",
    "/api/runs?label=version=2",
    "/api/runs?limit=1",
    "/api/trend",
    "/api/trend?by=version",
    "/api/trend?at=end&metric=leak_rate",
    "/api/trend?metric=rss_peak&limit=2",
    "/api/trend?function=leaky_cache_add",
    "/api/trend?function=leaky_cache_add&at=end&by=version",
    "/api/trend?function=build_index",
};

/* Ships the SQLite database at db_path into ClickHouse database chdb and
 * compares the answers of both stores; returns the mismatches. */
int ck_same_answers(const char *db_path, const char *url, const char *query_url)
{
    const char *const *qs = per_run;
    size_t nqs = sizeof per_run / sizeof *per_run;
    char err[512];
    hs_chship *sh;
    int rc = hs_chship_new(&sh, db_path, url, err, sizeof err);
    if (!rc) rc = hs_chship_pass(sh, err, sizeof err);
    if (rc) fprintf(stderr, "shipping %s: %s\n", db_path, err);
    assert_int_equal(rc, 0);
    hs_q *qa, *qb;
    hs_qerr qe;
    assert_int_equal(hs_q_open(&qa, db_path, &qe), 0);
    rc = hs_q_open(&qb, query_url ? query_url : url, &qe);
    if (rc) fprintf(stderr, "%s\n", qe.msg);
    assert_int_equal(rc, 0);
    int before = mismatches;
    fprintf(stderr, "-- %s\n", db_path);
    for (size_t i = 0; i < sizeof lists / sizeof *lists; i++)
        ask_both(sh, qa, qb, lists[i], lists[i], NULL, NULL);
    hs_api_reply r = {0};
    hs_api_handle(qa, "GET", "/api/runs", NULL, 0, &r);
    json_t *runs = json_object_get(r.json, "runs"), *run;
    size_t k;
    char prev_a[32] = "", prev_b[32] = "";
    json_array_foreach(runs, k, run)
    {
        char a[32], b[32], ta[600], tb[600];
        int64_t local = json_integer_value(json_object_get(run, "id"));
        snprintf(a, sizeof a, "%lld", (long long)local);
        snprintf(b, sizeof b, "%lld", (long long)hs_chship_content_id(sh, 'r', local));
        for (size_t i = 0; i < nqs; i++) {
            snprintf(ta, sizeof ta, qs[i], a);
            snprintf(tb, sizeof tb, qs[i], b);
            ask_both(sh, qa, qb, ta, tb, a, b);
        }
        if (prev_a[0]) { /* two runs: a diff across them */
            snprintf(ta, sizeof ta, "/api/diff?a=%s@end&b=%s@end&by=function", prev_a, a);
            snprintf(tb, sizeof tb, "/api/diff?a=%s@end&b=%s@end&by=function", prev_b, b);
            ask_both(sh, qa, qb, ta, tb, NULL, NULL);
        }
        snprintf(prev_a, sizeof prev_a, "%s", a);
        snprintf(prev_b, sizeof prev_b, "%s", b);
    }
    hs_api_reply_clear(&r);
    hs_q_free(qa);
    hs_q_free(qb);
    hs_chship_free(sh);
    return mismatches - before;
}

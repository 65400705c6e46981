/* hs_chttp: ClickHouse over HTTP with libcurl: the store URL, one keep-alive
 * connection per hs_ch, RowBinary writers and a TabSeparated reader. */
#include "hs_chttp.h"

#include <assert.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "hs_error.h"
#include "hs_wire.h"

struct hs_ch {
    CURL *curl;
    char *base; /* http[s]://host:port/?database=DB */
    char *db, *user, *password, *display, *settings;
    char *extra;                   /* ClickHouse settings given in the URL, sent with every query */
    char *sql_user, *sql_password; /* the front end's options (hs_chttp.h) */
    char *shards;                  /* HOST:PORT,… (hs_ch_shards) */
    char *url;                     /* as given, for hs_ch_open_at */
    long buffer_keep_s, downsample_after_s, downsample_by;
    int insecure;
    long timeout_s;
    struct curl_slist *headers;
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* The user's headers (X-ClickHouse-User/-Key), replacing earlier ones. */
static int user_headers(hs_ch *c)
{
    char h[512];
    curl_slist_free_all(c->headers);
    c->headers = NULL;
    snprintf(h, sizeof h, "X-ClickHouse-User: %s", c->user);
    c->headers = curl_slist_append(c->headers, h);
    snprintf(h, sizeof h, "X-ClickHouse-Key: %s", c->password ? c->password : "");
    if (c->headers) c->headers = curl_slist_append(c->headers, h);
    return c->headers ? 0 : HS_ENOMEM;
}

int hs_ch_is_url(const char *url)
{
    return url && !strncmp(url, "clickhouse://", 13);
}

/* Percent-decodes s[0..n) into a new string. */
static char *pct_dup(const char *s, size_t n)
{
    char *o = malloc(n + 1), *w = o;
    if (!o) return NULL;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        if (s[i] == '%' && i + 2 < n && sscanf(s + i + 1, "%2x", &v) == 1) {
            *w++ = (char)v;
            i += 2;
        } else {
            *w++ = s[i] == '+' ? ' ' : s[i];
        }
    }
    *w = 0;
    return o;
}

static int ident_ok(const char *s)
{
    if (!*s) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_'))
            return 0;
    return 1;
}

/* A ClickHouse setting's name: [a-z][a-z0-9_]*. */
static int setting_ok(const char *k, size_t n)
{
    if (!n || k[0] < 'a' || k[0] > 'z') return 0;
    for (size_t i = 0; i < n; i++)
        if (!((k[i] >= 'a' && k[i] <= 'z') || (k[i] >= '0' && k[i] <= '9') || k[i] == '_'))
            return 0;
    return 1;
}

/* The query string's options into c. */
static int parse_opts(hs_ch *c, const char *q, int *secure, char *err, size_t errlen)
{
    while (q && *q) {
        const char *amp = strchr(q, '&'), *end = amp ? amp : q + strlen(q);
        const char *eq = memchr(q, '=', (size_t)(end - q));
        size_t klen = eq ? (size_t)(eq - q) : (size_t)(end - q);
        char *v = eq ? pct_dup(eq + 1, (size_t)(end - eq - 1)) : strdup("1");
        if (!v) return HS_ENOMEM;
        if (klen == 4 && !memcmp(q, "user", 4)) {
            free(c->user);
            c->user = v;
        } else if (klen == 8 && !memcmp(q, "password", 8)) {
            free(c->password);
            c->password = v;
        } else if (klen == 8 && !memcmp(q, "sql_user", 8)) {
            free(c->sql_user);
            c->sql_user = v;
        } else if (klen == 12 && !memcmp(q, "sql_password", 12)) {
            free(c->sql_password);
            c->sql_password = v;
        } else if (klen == 6 && !memcmp(q, "shards", 6)) {
            free(c->shards);
            c->shards = v;
        } else if ((klen == 11 && !memcmp(q, "buffer_keep", 11)) ||
                   (klen == 16 && !memcmp(q, "downsample_after", 16)) ||
                   (klen == 13 && !memcmp(q, "downsample_by", 13))) {
            char *e;
            long n = strtol(v, &e, 10);
            int by = klen == 13, bad = e == v || *e || n < (by ? 2 : 0);
            free(v);
            if (bad) {
                snprintf(err, errlen, "%.*s takes %s", (int)klen, q,
                         by ? "a whole number of buckets >= 2" : "a number of seconds >= 0");
                return HS_EINVAL;
            }
            *(q[0] == 'b' ? &c->buffer_keep_s
              : by        ? &c->downsample_by
                          : &c->downsample_after_s) = n;
        } else if ((klen == 6 && !memcmp(q, "secure", 6)) ||
                   (klen == 8 && !memcmp(q, "insecure", 8)) ||
                   (klen == 7 && !memcmp(q, "timeout", 7))) {
            long n = strtol(v, NULL, 10);
            if (q[0] == 's')
                *secure = n != 0;
            else if (q[0] == 'i')
                c->insecure = n != 0;
            else
                c->timeout_s = n > 0 ? n : c->timeout_s;
            free(v);
        } else if (setting_ok(q, klen) && !strchr(v, '&')) {
            /* a ClickHouse setting (insert_distributed_sync=1): passed on as it is */
            size_t old = c->extra ? strlen(c->extra) : 0, n = old + klen + strlen(v) + 3;
            char *e = realloc(c->extra, n);
            if (!e) {
                free(v);
                return HS_ENOMEM;
            }
            snprintf(e + old, n - old, "%s%.*s=%s", old ? "&" : "", (int)klen, q, v);
            c->extra = e;
            free(v);
        } else {
            snprintf(err, errlen, "unknown option '%.*s' in the ClickHouse URL", (int)klen, q);
            free(v);
            return HS_EINVAL;
        }
        q = amp ? amp + 1 : NULL;
    }
    return 0;
}

static int parse_url(hs_ch *c, const char *url, char *err, size_t errlen)
{
    const char *hp = url + 13, *slash = strchr(hp, '/');
    const char *qm = strchr(hp, '?');
    if (!slash || (qm && qm < slash) || slash == hp) {
        snprintf(err, errlen, "a ClickHouse store reads clickhouse://HOST[:PORT]/DATABASE");
        return HS_EINVAL;
    }
    size_t dlen = qm ? (size_t)(qm - slash - 1) : strlen(slash + 1);
    c->db = pct_dup(slash + 1, dlen);
    if (!c->db) return HS_ENOMEM;
    if (!ident_ok(c->db)) {
        snprintf(err, errlen, "ClickHouse database name '%s' is not [A-Za-z0-9_]+", c->db);
        return HS_EINVAL;
    }
    int secure = 0, rc = parse_opts(c, qm ? qm + 1 : NULL, &secure, err, errlen);
    if (rc) return rc;
    char host[256];
    size_t hlen = (size_t)(slash - hp);
    if (hlen >= sizeof host) return HS_EINVAL;
    memcpy(host, hp, hlen);
    host[hlen] = 0;
    const char *colon = host[0] == '[' ? strstr(host, "]:") : strrchr(host, ':');
    if (colon && host[0] == '[') colon++;
    char withport[300];
    if (colon)
        snprintf(withport, sizeof withport, "%s", host);
    else
        snprintf(withport, sizeof withport, "%s:%d", host, secure ? 8443 : 8123);
    size_t n = strlen(withport) + strlen(c->db) + 64;
    if (!(c->base = malloc(n)) || !(c->display = malloc(n))) return HS_ENOMEM;
    snprintf(c->base, n, "%s://%s/?database=%s", secure ? "https" : "http", withport, c->db);
    snprintf(c->display, n, "clickhouse://%s/%s", withport, c->db);
    return 0;
}

int hs_ch_open(hs_ch **out, const char *url, char *err, size_t errlen)
{
    *out = NULL;
    if (!hs_ch_is_url(url)) {
        snprintf(err, errlen, "not a ClickHouse URL: %s", url);
        return HS_EINVAL;
    }
    pthread_once(&curl_once, curl_init);
    hs_ch *c = calloc(1, sizeof *c);
    if (!c) return HS_ENOMEM;
    c->timeout_s = 60;
    c->buffer_keep_s = c->downsample_after_s = c->downsample_by = -1;
    int rc = parse_url(c, url, err, errlen);
    if (!rc && !(c->url = strdup(url))) rc = HS_ENOMEM;
    if (!rc && !(c->curl = curl_easy_init())) rc = HS_ENOMEM;
    if (!rc && c->user) rc = user_headers(c);
    if (rc) {
        if (rc == HS_ENOMEM) snprintf(err, errlen, "out of memory");
        hs_ch_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

void hs_ch_free(hs_ch *c)
{
    if (!c) return;
    if (c->curl) curl_easy_cleanup(c->curl);
    curl_slist_free_all(c->headers);
    free(c->base);
    free(c->db);
    free(c->user);
    free(c->password);
    free(c->sql_user);
    free(c->sql_password);
    free(c->shards);
    free(c->url);
    free(c->display);
    free(c->settings);
    free(c->extra);
    free(c);
}

const char *hs_ch_database(const hs_ch *c)
{
    return c->db;
}

const char *hs_ch_display(const hs_ch *c)
{
    return c->display;
}

int hs_ch_settings(hs_ch *c, const char *params)
{
    free(c->settings);
    c->settings = params ? strdup(params) : NULL;
    return params && !c->settings ? HS_ENOMEM : 0;
}

static size_t on_body(char *p, size_t size, size_t n, void *data)
{
    hs_buf *b = data;
    size_t len = size * n;
    if (b->n + len > HS_CH_ANSWER_MAX) return 0; /* curl then fails the transfer */
    hs_buf_put(b, p, len);
    return b->oom ? 0 : len;
}

/* The URL of one query: base, the URL's settings, the caller's, and sql
 * when a body carries data. */
static char *query_url(hs_ch *c, const char *sql, int in_url)
{
    char *esc = in_url ? curl_easy_escape(c->curl, sql, 0) : NULL;
    if (in_url && !esc) return NULL;
    hs_buf u = {0};
    hs_buf_printf(&u, "%s", c->base);
    const char *sep = u.n && u.p[u.n - 1] == '?' ? "" : "&"; /* "?" alone: no database */
    if (c->extra) hs_buf_printf(&u, "%s%s", sep, c->extra), sep = "&";
    if (c->settings) hs_buf_printf(&u, "%s%s", sep, c->settings), sep = "&";
    if (esc) hs_buf_printf(&u, "%squery=%s", sep, esc);
    curl_free(esc);
    if (u.oom) hs_buf_free(&u);
    return u.p;
}

int hs_ch_create_database(hs_ch *c, char *err, size_t errlen)
{
    /* the URL names the database, which must not be required to exist yet */
    char *q = strstr(c->base, "?database=");
    assert(q);
    char save = q[1];
    q[1] = 0;
    char sql[200];
    snprintf(sql, sizeof sql, "CREATE DATABASE IF NOT EXISTS %s", c->db);
    int rc = hs_ch_query(c, sql, NULL, 0, NULL, err, errlen);
    q[1] = save;
    return rc;
}

int hs_ch_query(hs_ch *c, const char *sql, const void *data, size_t len, hs_buf *out, char *err,
                size_t errlen)
{
    hs_buf tmp = {0}, *ans = out ? out : &tmp;
    ans->n = 0;
    ans->oom = 0;
    char *url = query_url(c, sql, data != NULL);
    if (!url) return HS_ENOMEM;
    CURL *h = c->curl;
    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, data ? data : (const void *)sql);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(data ? len : strlen(sql)));
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, c->headers);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, ans);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, c->timeout_s);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 5L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    if (c->insecure) {
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    CURLcode cc = curl_easy_perform(h);
    free(url);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    int rc = 0;
    if (ans->oom) {
        rc = HS_ENOMEM;
        snprintf(err, errlen, "out of memory (or an answer over %u bytes)", HS_CH_ANSWER_MAX);
    } else if (cc != CURLE_OK) {
        rc = HS_EIO;
        snprintf(err, errlen, "ClickHouse at %s: %s", c->display, curl_easy_strerror(cc));
    } else if (status != 200) {
        rc = HS_EDB;
        size_t n = ans->n > 400 ? 400 : ans->n;
        while (n && (ans->p[n - 1] == '\n' || ans->p[n - 1] == ' ')) n--;
        snprintf(err, errlen, "ClickHouse (HTTP %ld): %.*s", status, (int)n, ans->p ? ans->p : "");
    }
    hs_buf_free(&tmp);
    return rc;
}

/* ---- SQL literals and RowBinary ------------------------------------------ */

void hs_ch_quote(hs_buf *b, const char *s, size_t n)
{
    hs_buf_put(b, "'", 1);
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\\' || s[i] == '\'') hs_buf_put(b, "\\", 1);
        hs_buf_put(b, s + i, 1);
    }
    hs_buf_put(b, "'", 1);
}

void hs_rb_u8(hs_buf *b, uint8_t v)
{
    hs_buf_put(b, &v, 1);
}

void hs_rb_u64(hs_buf *b, uint64_t v)
{
    uint8_t o[8];
    for (int i = 0; i < 8; i++) o[i] = (uint8_t)(v >> (8 * i));
    hs_buf_put(b, o, 8);
}

void hs_rb_i64(hs_buf *b, int64_t v)
{
    hs_rb_u64(b, (uint64_t)v);
}

void hs_rb_f64(hs_buf *b, double v)
{
    uint64_t u;
    memcpy(&u, &v, 8);
    hs_rb_u64(b, u);
}

void hs_rb_str(hs_buf *b, const void *p, size_t n)
{
    uint8_t v[HS_VARINT_MAX];
    hs_buf_put(b, v, hs_varint_encode(v, n));
    hs_buf_put(b, p, n);
}

/* ---- TabSeparated ------------------------------------------------------------ */

void hs_tsv_init(hs_tsv *t, hs_buf *answer)
{
    t->p = answer->p ? answer->p : (char *)"";
    t->end = t->p + answer->n;
    t->row_end = t->p;
    t->in_row = 0;
}

int hs_tsv_row(hs_tsv *t)
{
    if (t->in_row) t->p = t->row_end < t->end ? t->row_end + 1 : t->end;
    if (t->p >= t->end) return t->in_row = 0;
    char *nl = memchr(t->p, '\n', (size_t)(t->end - t->p));
    t->row_end = nl ? nl : t->end;
    t->in_row = 1;
    return 1;
}

const char *hs_tsv_field(hs_tsv *t, size_t *len)
{
    if (!t->in_row || t->p > t->row_end) return NULL;
    char *s = t->p, *w = s, *r = s;
    while (r < t->row_end && *r != '\t') {
        if (*r == '\\' && r + 1 < t->row_end) {
            r++;
            char e = *r++;
            *w++ = e == 'n'   ? '\n'
                   : e == 't' ? '\t'
                   : e == 'r' ? '\r'
                   : e == '0' ? '\0'
                   : e == 'b' ? '\b'
                   : e == 'f' ? '\f'
                              : e;
        } else {
            *w++ = *r++;
        }
    }
    t->p = r + 1; /* past the tab, or past row_end: the row has no more */
    if (len) *len = (size_t)(w - s);
    *w = 0; /* w <= r: the terminator never lands on an unread byte */
    return s;
}

int64_t hs_tsv_i64(hs_tsv *t, int *null)
{
    int isnull = t->in_row && t->p + 2 <= t->row_end && !strncmp(t->p, "\\N", 2);
    const char *f = hs_tsv_field(t, NULL);
    isnull = isnull || !f;
    if (null) *null = isnull;
    return isnull ? 0 : strtoll(f, NULL, 10);
}

double hs_tsv_f64(hs_tsv *t)
{
    const char *f = hs_tsv_field(t, NULL);
    return f ? strtod(f, NULL) : 0;
}

/* ---- content hashes ---------------------------------------------------------- */

static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t hs_ch_hash(const void *p, size_t n, uint64_t seed)
{
    const uint8_t *s = p;
    uint64_t h = mix(seed ^ 0x9e3779b97f4a7c15ull ^ n);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        h = mix(h ^ w) + 0x9e3779b97f4a7c15ull;
    }
    uint64_t tail = 0;
    for (size_t k = 0; i < n; i++, k++) tail |= (uint64_t)s[i] << (8 * k);
    h = mix(h ^ tail ^ ((uint64_t)n << 56));
    h &= HS_CH_ID_MASK;
    return h ? h : 1;
}

const char *hs_ch_sql_user(const hs_ch *c)
{
    return c->sql_user;
}

long hs_ch_front_option(const hs_ch *c, const char *name)
{
    return !strcmp(name, "buffer_keep")        ? c->buffer_keep_s
           : !strcmp(name, "downsample_after") ? c->downsample_after_s
           : !strcmp(name, "downsample_by")    ? c->downsample_by
                                               : -1;
}

const char *hs_ch_shards(const hs_ch *c)
{
    return c->shards;
}

int hs_ch_open_at(hs_ch **out, const hs_ch *like, const char *hostport, char *err, size_t errlen)
{
    *out = NULL;
    const char *path = strchr(like->url + 13, '/');
    assert(path);
    if (!*hostport || strpbrk(hostport, "/?@#&")) {
        snprintf(err, errlen, "'%s' is not HOST:PORT", hostport);
        return HS_EINVAL;
    }
    size_t n = 13 + strlen(hostport) + strlen(path) + 1;
    char *u = malloc(n);
    if (!u) return HS_ENOMEM;
    snprintf(u, n, "clickhouse://%s%s", hostport, path);
    int rc = hs_ch_open(out, u, err, errlen);
    free(u);
    return rc;
}

int hs_ch_use_sql_user(hs_ch *c)
{
    if (!c->sql_user) return 0;
    char *u = strdup(c->sql_user), *p = strdup(c->sql_password ? c->sql_password : "");
    if (!u || !p) {
        free(u);
        free(p);
        return HS_ENOMEM;
    }
    free(c->user);
    free(c->password);
    c->user = u;
    c->password = p;
    return user_headers(c);
}

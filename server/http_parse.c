/* hs_http_parse: HTTP/1.x request heads, bearer tokens and static paths;
 * pure functions, no allocation (see hs_http_parse.h). */
#include "hs_http_parse.h"

#include <string.h>
#include <strings.h>

#include "hs_text.h"

static int fail(hs_http_perr *err, int status, const char *code, const char *message)
{
    err->status = status;
    err->code = code;
    err->message = message;
    return HS_HTTP_ERROR;
}

/* 1 if the header line (line, n) is "name: value"; the value is trimmed. */
static int header_is(const char *line, size_t n, const char *name, const char **value, size_t *vlen)
{
    size_t k = strlen(name);
    if (n <= k || line[k] != ':' || strncasecmp(line, name, k)) return 0;
    const char *v = line + k + 1, *end = line + n;
    while (v < end && (*v == ' ' || *v == '\t')) v++;
    while (end > v && (end[-1] == ' ' || end[-1] == '\t')) end--;
    *value = v;
    *vlen = (size_t)(end - v);
    return 1;
}

static int is_tchar(unsigned char ch)
{
    return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
           (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

/* The request line (buf up to eol): METHOD SP TARGET SP HTTP/1.x. */
static int request_line(hs_http_req *out, const char *buf, const char *eol, hs_http_perr *err)
{
    const char *sp1 = memchr(buf, ' ', (size_t)(eol - buf));
    const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(eol - sp1 - 1)) : NULL;
    if (!sp1 || !sp2 || sp1 == buf || (size_t)(sp1 - buf) >= sizeof out->method ||
        (size_t)(eol - sp2 - 1) != 8 || strncmp(sp2 + 1, "HTTP/1.", 7) ||
        (sp2[8] != '0' && sp2[8] != '1'))
        return fail(err, 400, "bad_request", "malformed request line");
    for (const char *m = buf; m < sp1; m++)
        if (!is_tchar((unsigned char)*m)) return fail(err, 400, "bad_request", "malformed method");
    size_t tlen = (size_t)(sp2 - sp1 - 1);
    if (tlen >= sizeof out->target)
        return fail(err, 414, "too_large", "request target longer than 4 KiB");
    if (!tlen || sp1[1] != '/' || memchr(sp1 + 1, '\0', tlen))
        return fail(err, 400, "bad_request", "the request target must be a path");
    memcpy(out->method, buf, (size_t)(sp1 - buf));
    out->method[sp1 - buf] = '\0';
    memcpy(out->target, sp1 + 1, tlen);
    out->target[tlen] = '\0';
    out->http10 = sp2[8] == '0';
    out->keep_alive = !out->http10;
    out->head_only = !strcmp(out->method, "HEAD");
    out->is_api = !strncmp(out->target, "/api/", 5) || !strcmp(out->target, "/api") ||
                  !strncmp(out->target, "/api?", 5);
    return 0;
}

/* A Content-Length value; a second one must agree with the first. */
static int content_length(hs_http_req *out, const char *v, size_t vl, int *have, hs_http_perr *err)
{
    uint64_t cl = 0;
    if (!vl || vl > 12) return fail(err, 400, "bad_request", "bad Content-Length");
    for (size_t i = 0; i < vl; i++) {
        if (v[i] < '0' || v[i] > '9') return fail(err, 400, "bad_request", "bad Content-Length");
        cl = cl * 10 + (uint64_t)(v[i] - '0');
    }
    /* two different lengths are how requests get smuggled */
    if (*have && cl != out->body_len)
        return fail(err, 400, "bad_request", "conflicting Content-Length headers");
    if (cl > HS_HTTP_BODY_MAX) return fail(err, 413, "too_large", "request body larger than 1 MiB");
    out->body_len = (size_t)cl;
    *have = 1;
    return 0;
}

/* One header line (p, n), without its \r\n. */
static int header_line(hs_http_req *out, const char *p, size_t n, int *have_length,
                       hs_http_perr *err)
{
    const char *v;
    size_t vl;
    if (memchr(p, '\0', n) || memchr(p, '\r', n) || memchr(p, '\n', n))
        return fail(err, 400, "bad_request", "malformed header line");
    if (header_is(p, n, "Content-Length", &v, &vl))
        return content_length(out, v, vl, have_length, err);
    if (header_is(p, n, "Transfer-Encoding", &v, &vl))
        return fail(err, 411, "bad_request",
                    "send a Content-Length; chunked bodies are not accepted");
    if (header_is(p, n, "Connection", &v, &vl)) {
        if (vl == 5 && !strncasecmp(v, "close", 5)) out->keep_alive = 0;
        if (vl == 10 && !strncasecmp(v, "keep-alive", 10)) out->keep_alive = 1;
    } else if (header_is(p, n, "Authorization", &v, &vl)) {
        out->auth = v;
        out->auth_len = vl;
    } else if (header_is(p, n, "If-None-Match", &v, &vl)) {
        size_t k = vl < sizeof out->if_none_match ? vl : 0; /* too long: as if absent */
        memcpy(out->if_none_match, v, k);
        out->if_none_match[k] = '\0';
    } else if (header_is(p, n, "Expect", &v, &vl)) {
        out->expect_continue = vl == 12 && !strncasecmp(v, "100-continue", 12);
    }
    return 0;
}

int hs_http_parse_request(hs_http_req *out, const char *buf, size_t len, hs_http_perr *err)
{
    const char *end = len >= 4 ? memmem(buf, len, "\r\n\r\n", 4) : NULL;
    if (!end || (size_t)(end - buf) + 4 > HS_HTTP_HEAD_MAX) {
        if (!end && len <= HS_HTTP_HEAD_MAX) return HS_HTTP_INCOMPLETE;
        return fail(err, 431, "too_large", "request head larger than 16 KiB");
    }
    size_t head_len = (size_t)(end - buf) + 4;
    /* end + 2 is the last line's end */
    const char *eol = memmem(buf, head_len, "\r\n", 2);
    if (request_line(out, buf, eol, err)) return HS_HTTP_ERROR;
    out->expect_continue = 0;
    out->if_none_match[0] = '\0';
    out->auth = NULL;
    out->auth_len = 0;
    out->head_len = head_len;
    out->body_len = 0;
    int have_length = 0;
    for (const char *p = eol + 2; p < end + 2;) {
        const char *e = memmem(p, (size_t)(end + 2 - p), "\r\n", 2);
        if (header_line(out, p, (size_t)(e - p), &have_length, err)) return HS_HTTP_ERROR;
        p = e + 2;
    }
    return len - head_len >= out->body_len ? HS_HTTP_COMPLETE : HS_HTTP_HEAD;
}

int hs_token_eq(const char *v, size_t n, const char *token)
{
    return v && token && hs_ct_eq(v, n, token, strlen(token));
}

int hs_http_bearer_ok(const char *v, size_t n, const char *token)
{
    if (!v || !token || n < 7 || strncasecmp(v, "Bearer ", 7)) return 0;
    return hs_token_eq(v + 7, n - 7, token);
}

long hs_http_static_path(char *out, size_t cap, const char *target)
{
    static const char index[] = "index.html";
    size_t n = strcspn(target, "?#");
    if (!n || target[0] != '/') return -1;
    long dl = hs_pct_decode(out, cap, target, n, 0); /* '+' is itself in a path */
    if (dl < 0 || memchr(out, '\\', (size_t)dl)) return -1;
    size_t w = (size_t)dl;
    /* every segment between slashes must be a name: not empty, ".", ".." */
    for (const char *seg = out + 1;;) {
        const char *slash = strchr(seg, '/');
        size_t sl = slash ? (size_t)(slash - seg) : strlen(seg);
        if (!slash && !sl) break; /* a path ending in '/' */
        if (!sl || (sl == 1 && seg[0] == '.') || (sl == 2 && seg[0] == '.' && seg[1] == '.'))
            return -1;
        if (!slash) break;
        seg = slash + 1;
    }
    if (out[w - 1] == '/') {
        if (w + sizeof index > cap) return -1;
        memcpy(out + w, index, sizeof index);
        w += sizeof index - 1;
    }
    return (long)w;
}

/* cli_query: requests, options and rendering shared by the query commands. */
#include "cli_query.h"

#include <assert.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hs_error.h"
#include "hs_paths.h"
#include "http_client.h"

static const struct {
    const char *name;
    size_t off;
} value_opts[] = {
#define O(n, f)                                                                                    \
    {                                                                                              \
        n, offsetof(hs_cli_args, f)                                                                \
    }
    O("at", at),
    O("by", by),
    O("limit", limit),
    O("top", top),
    O("format", format),
    O("output", out_file),
    O("min-share", min_share),
    O("trace", trace),
    O("timeout-ms", timeout_ms),
    O("program", program),
    O("host", host),
    O("sample", sample),
    O("site", site),
    O("wrappers", wrappers),
#undef O
};

static int opt_allowed(const char *opts, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = opts; p && *p;) {
        const char *c = strchr(p, ',');
        size_t l = c ? (size_t)(c - p) : strlen(p);
        if (l == n && !strncmp(p, name, n)) return 1;
        p = c ? c + 1 : p + l;
    }
    return 0;
}

int hs_cli_parse(hs_cli_args *a, int argc, char **argv, const char *opts, const char *usage)
{
    memset(a, 0, sizeof *a);
    a->cmd = argv[0];
    for (int i = 1; i < argc; i++) {
        char *arg = argv[i];
        if (!strcmp(arg, "--")) {
            a->rest = argv + i + 1;
            a->nrest = argc - i - 1;
            break;
        }
        if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
            printf("usage: heapstore %s\n", usage);
            return -1;
        }
        if (!strcmp(arg, "--json")) {
            a->json = 1;
            continue;
        }
        if (!strcmp(arg, "--all") && opt_allowed(opts, "all")) {
            a->all = 1;
            continue;
        }
        if (arg[0] == '-' && arg[1] && !(arg[1] >= '0' && arg[1] <= '9')) {
            char name[64];
            const char *val = NULL;
            const char *n = arg + (arg[1] == '-' ? 2 : 1);
            const char *eq = strchr(n, '=');
            size_t nl = eq ? (size_t)(eq - n) : strlen(n);
            if (nl >= sizeof name) goto bad;
            memcpy(name, n, nl);
            name[nl] = '\0';
            if (!strcmp(name, "o")) strcpy(name, "output");
            if (eq)
                val = eq + 1;
            else if (i + 1 < argc)
                val = argv[++i];
            else {
                fprintf(stderr, "heapstore %s: option --%s needs a value\n", a->cmd, name);
                goto usage;
            }
            if (!strcmp(name, "db")) {
                a->db = val;
                continue;
            }
            if (!strcmp(name, "label") && opt_allowed(opts, "label")) {
                if (a->nlabels == (int)HS_COUNTOF(a->labels) || !strchr(val, '=')) {
                    fprintf(stderr, "heapstore %s: --label takes key=value\n", a->cmd);
                    goto usage;
                }
                a->labels[a->nlabels++] = val;
                continue;
            }
            size_t k;
            for (k = 0; k < HS_COUNTOF(value_opts); k++)
                if (!strcmp(value_opts[k].name, name)) break;
            if (k == HS_COUNTOF(value_opts) || !opt_allowed(opts, name)) goto bad;
            *(const char **)((char *)a + value_opts[k].off) = val;
            continue;
        bad:
            fprintf(stderr, "heapstore %s: unknown option '%s'\n", a->cmd, arg);
            goto usage;
        }
        if (a->npos == (int)HS_COUNTOF(a->pos)) {
            fprintf(stderr, "heapstore %s: too many arguments\n", a->cmd);
            goto usage;
        }
        a->pos[a->npos++] = arg;
    }
    return 0;
usage:
    fprintf(stderr, "usage: heapstore %s\n", usage);
    return 2;
}

void hs_cli_pct(char *dst, size_t len, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t w = strlen(dst);
    for (; *s && w + 4 < len; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            strchr("-_.~,=@:", c)) {
            dst[w++] = (char)c;
        } else {
            dst[w++] = '%';
            dst[w++] = hex[c >> 4];
            dst[w++] = hex[c & 15];
        }
    }
    dst[w] = '\0';
}

static void print_error_body(const hs_cli_args *a, const json_t *j, int status)
{
    const char *msg = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
    fprintf(stderr, "heapstore %s: %s\n", a->cmd, msg ? msg : "request failed");
    (void)status;
}

int hs_cli_direct(const hs_cli_args *a)
{
    const char *url = getenv("HEAPSTORE_URL");
    return a->db || !url || !*url;
}

int hs_cli_fail(const hs_cli_args *a, const hs_qerr *err)
{
    fprintf(stderr, "heapstore %s: %s\n", a->cmd, err->msg);
    return 1;
}

int hs_cli_open(const hs_cli_args *a, hs_q **out)
{
    char path[4096];
    const char *db = a->db;
    if (!db) {
        if (hs_default_db_path(path, sizeof path)) {
            fprintf(stderr, "heapstore %s: no home folder for the default database; use --db\n",
                    a->cmd);
            return 1;
        }
        db = path;
    }
    hs_qerr qe;
    if (!a->db && access(db, F_OK)) {
        fprintf(stderr,
                "heapstore %s: no runs yet: the default database %s does not exist\n"
                "  (profile a program with: heapstore run -- PROGRAM ARGS…; or set "
                "HEAPSTORE_URL, or use --db PATH)\n",
                a->cmd, db);
        return 1;
    }
    if (hs_q_open(out, db, &qe)) {
        fprintf(stderr, "heapstore %s: %s\n", a->cmd, qe.msg);
        if (!a->db) fprintf(stderr, "  (set HEAPSTORE_URL to ask a server, or --db PATH)\n");
        return 1;
    }
    return 0;
}

int hs_cli_call(const hs_cli_args *a, const char *method, const char *target, const char *body,
                size_t body_len, int file, hs_api_reply *out)
{
    memset(out, 0, sizeof *out);
    const char *url = getenv("HEAPSTORE_URL");
    assert(!hs_cli_direct(a)); /* direct mode calls the core, not a route */
    hs_http_answer ans;
    char err[512];
    const char *token = getenv("HEAPSTORE_TOKEN");
    if (hs_http_request(&ans, url, token && *token ? token : NULL, method, target, body, body_len,
                        120, err, sizeof err)) {
        fprintf(stderr, "heapstore %s: %s\n", a->cmd, err);
        return 1;
    }
    out->status = ans.status;
    int is_json = !strncmp(ans.content_type, "application/json", 16);
    if (ans.status == 200 && file) {
        out->body = ans.body;
        out->len = ans.len;
        return 0;
    }
    if (is_json) {
        json_error_t je;
        out->json = json_loadb(ans.body, ans.len, 0, &je);
    }
    free(ans.body);
    if (ans.status != 200 || !out->json) {
        if (out->json)
            print_error_body(a, out->json, ans.status);
        else
            fprintf(stderr, "heapstore %s: the server answered %d without JSON\n", a->cmd,
                    ans.status);
        hs_api_reply_clear(out);
        return 1;
    }
    return 0;
}

int hs_cli_get_json(const hs_cli_args *a, const char *target, json_t **out)
{
    hs_api_reply rep;
    *out = NULL;
    int rc = hs_cli_call(a, "GET", target, NULL, 0, 0, &rep);
    if (rc) return rc;
    if (a->json)
        hs_cli_print_json(rep.json);
    else
        *out = rep.json, rep.json = NULL;
    hs_api_reply_clear(&rep);
    return 0;
}

int hs_cli_print_own_json(const hs_cli_args *a, json_t *j)
{
    if (!j) return hs_cli_oom(a);
    hs_cli_print_json(j);
    json_decref(j);
    return 0;
}

int hs_cli_oom(const hs_cli_args *a)
{
    fprintf(stderr, "heapstore %s: out of memory\n", a->cmd);
    return 1;
}

const char *hs_cli_bytes(int64_t b, char *buf)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)(b < 0 ? -b : b);
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, 32, "%s%" PRId64 " B", b < 0 ? "-" : "", b < 0 ? -b : b);
    else
        snprintf(buf, 32, "%s%.*f %s", b < 0 ? "-" : "", v < 10 ? 2 : v < 100 ? 1 : 0, v, unit[u]);
    return buf;
}

const char *hs_cli_secs(int64_t ns, char *buf)
{
    snprintf(buf, 32, "%.3f s", (double)ns / 1e9);
    return buf;
}

int64_t hs_json_int(const json_t *o, const char *key)
{
    return (int64_t)json_integer_value(json_object_get(o, key));
}

const char *hs_json_str(const json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "";
}

void hs_cli_site_params(const hs_cli_args *a, char *target, size_t len)
{
    if (a->site) {
        strncat(target, strchr(target, '?') ? "&site=" : "?site=", len - strlen(target) - 1);
        hs_cli_pct(target, len, a->site);
    }
    if (a->wrappers) {
        strncat(target,
                strchr(target, '?') ? "&wrappers=" : "?wrappers=", len - strlen(target) - 1);
        hs_cli_pct(target, len, a->wrappers);
    }
}

int hs_cli_run_target(const hs_cli_args *a, const char *usage, char *target, size_t len)
{
    if (a->npos != 1) {
        fprintf(stderr, "heapstore %s: give one RUN\nusage: heapstore %s\n", a->cmd, usage);
        return 2;
    }
    snprintf(target, len, "/api/runs/");
    hs_cli_pct(target, len, a->pos[0]);
    return 0;
}

void hs_cli_site(char *buf, size_t len, const json_t *row, const char *fnkey)
{
    hs_frame_label(buf, len, hs_json_str(row, fnkey), hs_json_str(row, "file"),
                   hs_json_int(row, "line"));
}

void hs_cli_sampling(const hs_run_sampling *s)
{
    int64_t sb = s->sample_bytes;
    char b[32];
    if (sb == 1)
        printf("sampling: every allocation (exact)");
    else
        printf("sampling: one sample per %s allocated on average (estimates)", hs_cli_bytes(sb, b));
    int any = 0;
    for (int k = 0; k < HS_RUNDROP__COUNT; k++) {
        if (!s->dropped[k]) continue;
        printf("%s %s %" PRId64, any ? "," : "; dropped:", hs_run_drop_name(k), s->dropped[k]);
        any = 1;
    }
    printf("%s\n", any ? "" : "; nothing dropped");
}

static void json_release(void *j)
{
    json_decref(j);
}

hs_qheld hs_cli_held(json_t *j)
{
    return (hs_qheld){.data = j, .release = json_release};
}

void hs_cli_print_json(const json_t *j)
{
    char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (s) {
        fputs(s, stdout);
        fputc('\n', stdout);
    }
    free(s);
}

void hs_table_init(hs_table *t, int ncol, const char *const *hdr, const int *right)
{
    memset(t, 0, sizeof *t);
    t->ncol = ncol;
    for (int i = 0; i < ncol; i++) {
        t->hdr[i] = hdr[i];
        t->right[i] = right ? right[i] : 0;
    }
}

void hs_table_rowv(hs_table *t, const char *const *cells)
{
    if (t->nrows == t->cap) {
        int ncap = t->cap ? t->cap * 2 : 64;
        char **np = realloc(t->cells, (size_t)ncap * (size_t)t->ncol * sizeof *np);
        if (!np) return;
        t->cells = np;
        t->cap = ncap;
    }
    for (int i = 0; i < t->ncol; i++)
        t->cells[t->nrows * t->ncol + i] = strdup(cells[i] ? cells[i] : "");
    t->nrows++;
}

void hs_table_row(hs_table *t, ...)
{
    const char *cells[12];
    assert(t->ncol <= 12);
    va_list ap;
    va_start(ap, t);
    for (int i = 0; i < t->ncol; i++) cells[i] = va_arg(ap, const char *);
    va_end(ap);
    hs_table_rowv(t, cells);
}

/* Display width of UTF-8 text: count the bytes that start a character. */
static int width(const char *s)
{
    int w = 0;
    for (; *s; s++)
        if (((unsigned char)*s & 0xC0) != 0x80) w++;
    return w;
}

void hs_table_print(hs_table *t)
{
    int wd[12];
    for (int c = 0; c < t->ncol; c++) {
        wd[c] = width(t->hdr[c]);
        for (int r = 0; r < t->nrows; r++) {
            const char *s = t->cells[r * t->ncol + c];
            if (s && width(s) > wd[c]) wd[c] = width(s);
        }
        if (c == t->ncol - 1 && !t->right[c]) wd[c] = 0; /* last column: no padding */
    }
    for (int r = -1; r < t->nrows; r++) {
        for (int c = 0; c < t->ncol; c++) {
            const char *s = r < 0 ? t->hdr[c] : t->cells[r * t->ncol + c];
            if (!s) s = "";
            int pad = wd[c] - width(s);
            if (pad < 0) pad = 0;
            if (t->right[c]) printf("%*s", pad, "");
            fputs(s, stdout);
            if (!t->right[c] && c < t->ncol - 1) printf("%*s", pad, "");
            if (c < t->ncol - 1) fputs("  ", stdout);
        }
        fputc('\n', stdout);
    }
}

void hs_table_free(hs_table *t)
{
    for (int i = 0; i < t->nrows * t->ncol; i++) free(t->cells[i]);
    free(t->cells);
    memset(t, 0, sizeof *t);
}

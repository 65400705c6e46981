/* heapstore check: a gate for CI. Budgets (--max-peak, --max-end,
 * --max-leak-rate) and a baseline (--baseline SEL --tolerance 5%) on a run
 * or a group of runs; exit 0 when every check passes (warnings included),
 * 1 when one fails, 2 on a mistake in the arguments or any other error
 * (no such run, no server). Direct mode asks the typed core
 * (hs_core_check); HTTP mode asks /api/check and decodes its JSON into the
 * same result (cli_decode.h); one renderer (and one JUnit writer) prints
 * both. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_decode.h"
#include "cli_query.h"
#include "hs_cli.h"
#include "hs_queries.h"

static const char usage[] =
    "check RUN-OR-SELECTOR [--max-peak SIZE] [--max-end SIZE] [--max-leak-rate SIZE/s]\n"
    "    [--baseline SELECTOR [--tolerance 5%]] [--at peak|end|SECONDS] [--by "
    "site|function|stack]\n"
    "    [--limit N] [--junit FILE] [--json] [--db PATH]\n"
    "  SIZE: 200MiB, 10MB, 1.5G or bytes (K, M, G, KiB… powers of 1024; KB, MB… of 1000)\n"
    "  A selector without ',latest' names every matching run: budgets hold for each run,\n"
    "  the baseline compares the groups' means at --at (default peak).\n"
    "  Sampled figures carry an error: a budget fails when the estimate less 3 standard\n"
    "  errors is over it, warns when only the estimate plus 3 errors is; a run counted\n"
    "  exactly (sample 1, or exact totals) is compared as it is. The baseline fails when\n"
    "  the total grew by more than the tolerance and past its noise.\n"
    "  Exit: 0 pass (or warn), 1 a check failed, 2 usage or other error.\n"
    "  e.g. heapstore check version=1.4 --baseline version=1.3 --tolerance 5% --junit r.xml";

/* The options of check alone, taken out of argv before the shared parser
 * sees the rest: { option, API parameter }. */
static const char *const own_opts[][2] = {
    {"max-peak", "max_peak"}, {"max-end", "max_end"},     {"max-leak-rate", "max_leak_rate"},
    {"baseline", "baseline"}, {"tolerance", "tolerance"}, {"junit", NULL},
};
#define NOWN (sizeof own_opts / sizeof own_opts[0])

typedef struct check_opts {
    const char *v[NOWN];
} check_opts;

/* Moves check's own options from argv into o; *argc shrinks. 0 or 2. */
static int take_own(int *argc, char **argv, check_opts *o)
{
    int w = 1;
    for (int i = 1; i < *argc; i++) {
        const char *a = argv[i];
        size_t k = NOWN;
        if (!strncmp(a, "--", 2))
            for (k = 0; k < NOWN; k++) {
                size_t n = strlen(own_opts[k][0]);
                if (!strncmp(a + 2, own_opts[k][0], n) && (!a[2 + n] || a[2 + n] == '=')) break;
            }
        if (k == NOWN) {
            argv[w++] = argv[i];
            continue;
        }
        const char *eq = strchr(a, '=');
        if (!eq && i + 1 >= *argc) {
            fprintf(stderr, "heapstore check: option %s needs a value\nusage: heapstore %s\n", a,
                    usage);
            return 2;
        }
        o->v[k] = eq ? eq + 1 : argv[++i];
    }
    *argc = w;
    argv[w] = NULL;
    return 0;
}

/* "name (file.c:12) +1.5 MiB (80%)" lines of a check's where. */
static void where_lines(FILE *f, const hs_check_item *it, const char *indent, int xml);

static void xml_put(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '&':
            fputs("&amp;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        default:
            if ((unsigned char)*s < 0x20 && *s != '\n' && *s != '\t')
                fputc(' ', f);
            else
                fputc(*s, f);
        }
    }
}

static void where_lines(FILE *f, const hs_check_item *it, const char *indent, int xml)
{
    int leak = !strcmp(it->name, "max_leak_rate");
    int base = !strcmp(it->name, "baseline");
    for (size_t i = 0; i < it->nwhere; i++) {
        const hs_check_where *w = &it->where[i];
        char name[1000], line[1200], b[32];
        hs_frame_label(name, sizeof name, w->name, w->file, w->line);
        if (*w->via) snprintf(name + strlen(name), sizeof name - strlen(name), " via %s", w->via);
        snprintf(line, sizeof line, "%s%s %s%s%s (%.0f%% of the %s)\n", indent, name,
                 base && w->bytes > 0 ? "+" : "", hs_cli_bytes((int64_t)w->bytes, b),
                 leak ? "/s" : "", 100 * w->share,
                 base   ? "growth"
                 : leak ? "leak rate"
                        : "bytes");
        if (xml)
            xml_put(f, line);
        else
            fputs(line, f);
    }
}

static void print_check(const hs_check_result *r)
{
    printf("check %s (%zu run(s)): %s\n", r->selector, r->nruns, hs_check_status_name(r->status));
    for (size_t i = 0; i < r->nitems; i++) {
        const hs_check_item *it = &r->items[i];
        printf("  %-5s %s\n", hs_check_status_name(it->status), it->message);
        if (it->nwhere)
            printf("        %s:\n",
                   !strcmp(it->name, "baseline") ? "grew past the noise" : "where");
        where_lines(stdout, it, "          ", 0);
    }
}

/* The JUnit XML CI systems read: one testcase per check, a failure
 * naming what grew. 0, or 2 when the file cannot be written. */
static int write_junit(const char *path, const hs_check_result *r)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        return 2;
    }
    size_t n = r->nitems, nf = 0;
    for (size_t i = 0; i < n; i++) nf += r->items[i].status == HS_CHECK_FAIL;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f, "<testsuites name=\"heapstore check\" tests=\"%zu\" failures=\"%zu\">\n", n, nf);
    fprintf(f, "  <testsuite name=\"heapstore check ");
    xml_put(f, r->selector);
    fprintf(f, "\" tests=\"%zu\" failures=\"%zu\" errors=\"0\" skipped=\"0\">\n", n, nf);
    for (size_t i = 0; i < n; i++) {
        const hs_check_item *it = &r->items[i];
        fprintf(f, "    <testcase classname=\"heapstore.check\" name=\"%s\">\n", it->name);
        if (it->status == HS_CHECK_FAIL) {
            fprintf(f, "      <failure type=\"%s\" message=\"", it->name);
            xml_put(f, it->message);
            if (it->nwhere) {
                const hs_check_where *w0 = &it->where[0];
                char name[700];
                hs_frame_label(name, sizeof name, w0->name, w0->file, w0->line);
                fputs("; most: ", f);
                xml_put(f, name);
                if (*w0->via) {
                    fputs(" via ", f);
                    xml_put(f, w0->via);
                }
            }
            fprintf(f, "\">");
            where_lines(f, it, "", 1);
            fprintf(f, "</failure>\n");
        } else {
            fprintf(f, "      <system-out>%s: ", hs_check_status_name(it->status));
            xml_put(f, it->message);
            fprintf(f, "\n");
            where_lines(f, it, "", 1);
            fprintf(f, "</system-out>\n");
        }
        fprintf(f, "    </testcase>\n");
    }
    fprintf(f, "  </testsuite>\n</testsuites>\n");
    if (fclose(f)) {
        perror(path);
        return 2;
    }
    return 0;
}

/* The JUnit file when there was no answer (exit 2): one test case in
 * error, so that CI shows the error rather than a missing report. */
static void write_junit_error(const char *path, const char *selector)
{
    FILE *f = fopen(path, "w");
    if (!f) return;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<testsuites name=\"heapstore check\" tests=\"1\" errors=\"1\">\n"
               "  <testsuite name=\"heapstore check ");
    xml_put(f, selector);
    fprintf(f, "\" tests=\"1\" failures=\"0\" errors=\"1\" skipped=\"0\">\n"
               "    <testcase classname=\"heapstore.check\" name=\"check\">\n"
               "      <error message=\"heapstore check could not answer (see its error "
               "output)\"/>\n    </testcase>\n  </testsuite>\n</testsuites>\n");
    fclose(f);
}

/* The parameters as the API takes them, in one list: { key, value }. */
static int check_kv(const hs_cli_args *a, const check_opts *o, const char *kv[][2])
{
    int n = 0;
    kv[n][0] = "run", kv[n++][1] = a->pos[0];
    for (size_t k = 0; k < NOWN; k++)
        if (o->v[k] && own_opts[k][1]) kv[n][0] = own_opts[k][1], kv[n++][1] = o->v[k];
    if (a->at) kv[n][0] = "at", kv[n++][1] = a->at;
    if (a->by) kv[n][0] = "by", kv[n++][1] = a->by;
    if (a->limit) kv[n][0] = "limit", kv[n++][1] = a->limit;
    return n;
}

/* Prints the answer (with --json, j: the API's JSON; else r's table),
 * writes the JUnit file when asked; the exit code (0 pass or warn, 1 a
 * check failed, 2 the file could not be written). */
static int check_report(const hs_cli_args *a, const check_opts *o, const hs_check_result *r,
                        const json_t *j)
{
    if (a->json)
        hs_cli_print_json(j);
    else
        print_check(r);
    int rc = r->status == HS_CHECK_FAIL ? 1 : 0;
    if (o->v[NOWN - 1] && write_junit(o->v[NOWN - 1], r)) rc = 2;
    return rc;
}

/* Direct: the core's answer, reported before q is closed (its strings
 * live in q's caches). The exit code, or -1 when there was no answer
 * (after saying why). */
static int check_direct(const hs_cli_args *a, const check_opts *o, const char *const kv[][2], int n)
{
    hs_q *q;
    hs_check_params p;
    hs_check_result r;
    hs_qerr err = {0};
    if (hs_cli_open(a, &q)) return -1;
    hs_check_params_init(&p);
    int rc = 0;
    for (int i = 0; !rc && i < n; i++) rc = hs_check_param(&p, kv[i][0], kv[i][1], &err);
    if (rc || hs_core_check(q, &p, &r, &err)) {
        hs_q_free(q);
        hs_cli_fail(a, &err);
        return -1;
    }
    json_t *j = a->json ? hs_api_check_json(&r) : NULL;
    rc = a->json && !j ? (hs_cli_oom(a), -1) : check_report(a, o, &r, j);
    json_decref(j);
    hs_check_result_clear(&r);
    hs_q_free(q);
    return rc;
}

/* HTTP: the server's answer, decoded. As check_direct. */
static int check_http(const hs_cli_args *a, const check_opts *o, const char *const kv[][2], int n)
{
    char target[8192] = "/api/check?";
    for (int i = 0; i < n; i++) {
        if (i) strcat(target, "&");
        strcat(target, kv[i][0]);
        strcat(target, "=");
        hs_cli_pct(target, sizeof target, kv[i][1]);
    }
    hs_api_reply rep;
    hs_check_result r;
    if (hs_cli_call(a, "GET", target, NULL, 0, 0, &rep)) return -1;
    int rc =
        hs_cli_check_decode(&r, rep.json) ? (hs_cli_oom(a), -1) : check_report(a, o, &r, rep.json);
    if (rc >= 0) hs_check_result_clear(&r);
    hs_api_reply_clear(&rep);
    return rc;
}

int hs_cmd_check(int argc, char **argv)
{
    check_opts o = {0};
    char **av = calloc((size_t)argc + 1, sizeof *av);
    if (!av) return 2;
    memcpy(av, argv, (size_t)argc * sizeof *av);
    hs_cli_args a;
    int rc = take_own(&argc, av, &o);
    if (!rc) rc = hs_cli_parse(&a, argc, av, "at,by,limit", usage);
    if (rc) {
        free(av);
        return rc < 0 ? 0 : 2;
    }
    if (a.npos != 1) {
        fprintf(stderr, "heapstore check: give one RUN-OR-SELECTOR\nusage: heapstore %s\n", usage);
        free(av);
        return 2;
    }
    const char *kv[16][2];
    int n = check_kv(&a, &o, kv);
    rc = hs_cli_direct(&a) ? check_direct(&a, &o, kv, n) : check_http(&a, &o, kv, n);
    free(av);
    if (rc < 0) {
        if (o.v[NOWN - 1]) write_junit_error(o.v[NOWN - 1], a.pos[0]);
        return 2;
    }
    return rc;
}

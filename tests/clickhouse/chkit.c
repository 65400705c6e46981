/* chkit: one real ClickHouse server per test (chkit.h), on tests/kit. */
#include "chkit.h"

#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "hs_buf.h"
#include "hs_chttp.h"
#include "hs_queries.h"
#include "hs_testkit.h"

#ifndef CK_CONF_DIR
#error "CK_CONF_DIR: the folder of server.xml.in and users.xml"
#endif

static const char *server_exe(void)
{
    const char *e = getenv("HS_CLICKHOUSE_SERVER");
    return e && *e ? e : "/usr/sbin/clickhouse-server";
}

void ck_require(void)
{
    if (access(server_exe(), X_OK) == 0) return;
    fprintf(stderr,
            "SKIP: ClickHouse is not installed (%s): apt-get install clickhouse-server "
            "clickhouse-client, or set HS_CLICKHOUSE_SERVER\n",
            server_exe());
    exit(CK_SKIP);
}

/* Every server this process started, for the atexit hook. */
static ck_server *started[8];

static void stop_all(void)
{
    for (int i = 0; i < 8; i++)
        if (started[i]) ck_stop(started[i]);
}

/* The configuration: server.xml.in with its @NAMES@ filled in. */
static int write_config(const ck_server *s, int shard, const int cluster_tcp[2], char *path,
                        size_t len)
{
    char in[600], buf[8192];
    snprintf(in, sizeof in, "%s/server.xml.in", CK_CONF_DIR);
    FILE *f = fopen(in, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    snprintf(path, len, "%s/config.xml", s->dir);
    FILE *o = fopen(path, "w");
    if (!o) return -1;
    char val[600];
    for (const char *p = buf; *p;) {
        const char *at = strchr(p, '@'), *end = at ? strchr(at + 1, '@') : NULL;
        if (!at || !end) {
            fputs(p, o);
            break;
        }
        fwrite(p, 1, (size_t)(at - p), o);
        size_t k = (size_t)(end - at - 1);
        if (!strncmp(at + 1, "DIR", k))
            snprintf(val, sizeof val, "%s", s->dir);
        else if (!strncmp(at + 1, "HTTP_PORT", k))
            snprintf(val, sizeof val, "%d", s->http_port);
        else if (!strncmp(at + 1, "TCP_PORT", k))
            snprintf(val, sizeof val, "%d", s->tcp_port);
        else if (!strncmp(at + 1, "INTER_PORT", k))
            snprintf(val, sizeof val, "%d", tk_free_port());
        else if (!strncmp(at + 1, "USERS", k))
            snprintf(val, sizeof val, "%s/users.xml", CK_CONF_DIR);
        else if (!strncmp(at + 1, "SHARD1_TCP", k))
            snprintf(val, sizeof val, "%d", cluster_tcp ? cluster_tcp[0] : s->tcp_port);
        else if (!strncmp(at + 1, "SHARD2_TCP", k))
            snprintf(val, sizeof val, "%d", cluster_tcp ? cluster_tcp[1] : s->tcp_port);
        else if (!strncmp(at + 1, "SHARD", k))
            snprintf(val, sizeof val, "%d", shard ? shard : 1);
        else
            snprintf(val, sizeof val, "@%.*s@", (int)k, at + 1);
        fputs(val, o);
        p = end + 1;
    }
    return fclose(o) ? -1 : 0;
}

static int spawn_and_wait(ck_server *s);

int ck_restart(ck_server *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        int st;
        waitpid(s->pid, &st, 0);
        s->pid = 0;
    }
    return spawn_and_wait(s);
}

void ck_pause(ck_server *s)
{
    if (s->pid <= 0) return;
    kill(s->pid, SIGTERM);
    int st;
    waitpid(s->pid, &st, 0);
    s->pid = 0;
}

int ck_start(ck_server *s, const char *dir, int shard, const int cluster_tcp[2])
{
    memset(s, 0, sizeof *s);
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    char cmd[700], conf[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s/log'", dir, dir);
    if (system(cmd)) return -1;
    if (s->tcp_port <= 0)
        s->tcp_port = cluster_tcp && shard ? cluster_tcp[shard - 1] : tk_free_port();
    s->http_port = tk_free_port();
    if (write_config(s, shard, cluster_tcp, conf, sizeof conf)) return -1;
    return spawn_and_wait(s);
}

/* Starts clickhouse-server on s's configuration and waits for /ping. */
static int spawn_and_wait(ck_server *s)
{
    char conf[600], logp[600];
    snprintf(conf, sizeof conf, "%s/config.xml", s->dir);
    snprintf(logp, sizeof logp, "%s/log/stdout", s->dir);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* a test that crashes takes its server along */
        FILE *lf = freopen(logp, "a", stdout);
        (void)lf;
        dup2(1, 2);
        char arg[700];
        snprintf(arg, sizeof arg, "--config-file=%s", conf);
        execl(server_exe(), server_exe(), arg, (char *)NULL);
        _exit(127);
    }
    s->pid = pid;
    int listed = 0;
    for (int i = 0; i < 8; i++) listed |= started[i] == s;
    for (int i = 0; i < 8 && !listed; i++)
        if (!started[i]) {
            started[i] = s;
            listed = 1;
        }
    static int hooked;
    if (!hooked++) atexit(stop_all);
    /* ready when a query answers; up to 60 s on a loaded machine */
    char out[256];
    for (int i = 0; i < 600; i++) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            s->pid = 0;
            fprintf(stderr, "clickhouse-server exited at its start; see %s\n", logp);
            return -1;
        }
        if (!ck_sql(s, "SELECT 1", out, sizeof out) && !strcmp(out, "1")) return 0;
        usleep(100000);
    }
    fprintf(stderr, "clickhouse-server did not answer within 60 s; see %s\n", logp);
    ck_stop(s);
    return -1;
}

void ck_stop(ck_server *s)
{
    for (int i = 0; i < 8; i++)
        if (started[i] == s) started[i] = NULL;
    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        int st;
        for (int i = 0; i < 300 && waitpid(s->pid, &st, WNOHANG) != s->pid; i++) {
            if (i == 299) {
                kill(s->pid, SIGKILL);
                waitpid(s->pid, &st, 0);
            }
            usleep(100000);
        }
        s->pid = 0;
    }
    if (s->dir[0] && !getenv("HS_KEEP_CLICKHOUSE")) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", s->dir);
        if (system(cmd)) { /* best effort */
        }
    }
}

void ck_url(const ck_server *s, const char *db, int reader, char *out, size_t len)
{
    snprintf(out, len, "clickhouse://127.0.0.1:%d/%s?user=%s&password=%s", s->http_port, db,
             reader ? "reader" : "heapstore", reader ? "reader" : "heapstore");
}

int ck_sql(const ck_server *s, const char *sql, char *out, size_t len)
{
    char url[200], err[512];
    snprintf(url, sizeof url, "clickhouse://127.0.0.1:%d/default?timeout=10", s->http_port);
    hs_ch *c;
    hs_buf ans = {0};
    int rc = hs_ch_open(&c, url, err, sizeof err);
    if (!rc) rc = hs_ch_query(c, sql, NULL, 0, &ans, err, sizeof err);
    hs_ch_free(c);
    if (rc) {
        snprintf(out, len, "%s", err);
        hs_buf_free(&ans);
        return -1;
    }
    size_t n = ans.n;
    while (n && ans.p[n - 1] == '\n') n--;
    snprintf(out, len, "%.*s", (int)n, ans.p ? ans.p : "");
    hs_buf_free(&ans);
    return 0;
}

long long ck_int(const ck_server *s, const char *sql)
{
    char out[256];
    if (ck_sql(s, sql, out, sizeof out)) {
        fprintf(stderr, "ClickHouse: %s: %s\n", sql, out);
        return -1;
    }
    return strtoll(out, NULL, 10);
}

/* Statement st of the recipe, comment lines dropped and {cluster} named,
 * into b. */
static void recipe_statement(hs_buf *b, const char *st)
{
    for (const char *l = st; *l;) {
        size_t len = strcspn(l, "\n") + (l[strcspn(l, "\n")] == '\n');
        const char *cl = strstr(l, "{cluster}");
        if (!strncmp(l, "--", 2)) {
            /* a comment */
        } else if (cl && cl < l + len) {
            hs_buf_printf(b, "%.*sheapstore_two_shards%.*s", (int)(cl - l), l,
                          (int)(len - (size_t)(cl + 9 - l)), cl + 9);
        } else {
            hs_buf_put(b, l, len);
        }
        l += len;
    }
}

int ck_cluster_recipe(const ck_server *s, const char *db)
{
    char path[700], url[700], err[512];
    snprintf(path, sizeof path, "%s/schema/clickhouse/cluster/cluster.sql", CK_SOURCE_DIR);
    FILE *f = fopen(path, "r");
    static char sql[65536];
    size_t n = f ? fread(sql, 1, sizeof sql - 1, f) : 0;
    if (f) fclose(f);
    sql[n] = 0;
    ck_url(s, db, 0, url, sizeof url);
    hs_ch *c = NULL;
    int rc = n ? 0 : -1;
    if (!rc && (hs_ch_open(&c, url, err, sizeof err) || hs_ch_create_database(c, err, sizeof err)))
        rc = -1;
    for (char *st = sql, *end; !rc && st; st = end) { /* statements end at a line ";" */
        if ((end = strstr(st, "\n;\n"))) {
            *end = 0;
            end += 3;
        }
        hs_buf b = {0};
        recipe_statement(&b, st);
        if (b.p && strstr(b.p, "CREATE") && hs_ch_query(c, b.p, NULL, 0, NULL, err, sizeof err))
            rc = -1;
        hs_buf_free(&b);
    }
    if (rc) fprintf(stderr, "cluster recipe on %s: %s\n", db, n ? err : "cannot read cluster.sql");
    hs_ch_free(c);
    return rc;
}

json_t *ck_ask(const char *url, const char *path)
{
    hs_q *q;
    hs_qerr qe;
    assert_int_equal(hs_q_open(&q, url, &qe), 0);
    hs_api_reply r = {0};
    hs_api_handle(q, "GET", path, NULL, 0, &r);
    assert_int_equal(r.status, 200);
    json_t *j = json_incref(r.json);
    hs_api_reply_clear(&r);
    hs_q_free(q);
    return j;
}

json_t *ck_spans(const json_t *points, int64_t g, int by)
{
    json_t *out = json_array(), *p, *last = NULL;
    size_t i;
    int64_t at = -1;
    json_array_foreach(points, i, p)
    {
        int64_t t = json_integer_value(json_object_get(p, "t_ns"));
        int64_t hi = json_integer_value(json_object_get(p, "heap_max_bytes"));
        if ((t - 1) / g / by != at) {
            at = (t - 1) / g / by;
            last = json_deep_copy(p);
            json_array_append_new(out, last);
        }
        if (hi > json_integer_value(json_object_get(last, "heap_max_bytes")))
            json_object_set_new(last, "heap_max_bytes", json_integer(hi));
        const char *const now[] = {"t_ns", "heap_bytes", "heap_count"};
        for (int k = 0; k < 3; k++) json_object_set(last, now[k], json_object_get(p, now[k]));
    }
    return out;
}

int64_t ck_highest(const json_t *points)
{
    json_t *p;
    size_t i;
    int64_t m = 0;
    json_array_foreach(points, i, p)
    {
        int64_t v = json_integer_value(json_object_get(p, "heap_max_bytes"));
        m = v > m ? v : m;
    }
    return m;
}

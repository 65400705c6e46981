/* heapstore-server: command line, defaults, then hs_server_run(). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hs_error.h"
#include "hs_paths.h"
#include "hs_server.h"
#include "hs_text.h"

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: heapstore-server [OPTIONS]\n"
        "\n"
        "Receives heap profiles from collectors (libheapstore.so) and stores them in a\n"
        "SQLite database; serves the HTTP API and the dashboard on the same port.\n"
        "\n"
        "  --db PATH            database file (default $XDG_DATA_HOME/heapstore/heapstore.db,\n"
        "                       XDG_DATA_HOME defaulting to ~/.local/share)\n"
        "  --store URL          clickhouse://HOST[:PORT]/DATABASE[?user=U&password=P&secure=1]:\n"
        "                       keep runs in ClickHouse (docs/clickhouse.md); --db is then\n"
        "                       the local write-ahead buffer; sqlite (the default) keeps them\n"
        "                       in --db only\n"
        "  --retain-months N    with --store clickhouse://: drop runs that started more than\n"
        "                       N whole months ago (monthly partitions)\n"
        "  --listen HOST:PORT   address to listen on (default 127.0.0.1:%d; port 0 picks a\n"
        "                       free port, logged as \"listening on HOST:PORT\")\n"
        "  --granularity DUR    width of a rollup bucket, e.g. 100ms, 1s, 1m (default 1s)\n"
        "  --event-time DUR     keep event times to multiples of DUR, which must divide\n"
        "                       the granularity (default 1ms; 1ns: exact); events keep\n"
        "                       their order whatever DUR\n"
        "  --grace DUR          how long a run whose connection was lost waits for the\n"
        "                       collector to reconnect before it is closed as lost (default 10s)\n"
        "  --retain-events DAYS delete raw events older than DAYS (a decimal number) of runs\n"
        "                       that have ended; runs, stacks and rollups are kept\n"
        "  --token TOKEN        require TOKEN from collectors (HELLO) and HTTP clients\n"
        "                       (default: $HEAPSTORE_TOKEN when set)\n"
        "  --read-token TOKEN   also admit TOKEN on the HTTP API and dashboard, never from\n"
        "                       collectors: readers then need not hold the writers' token\n"
        "                       (default: $HEAPSTORE_READ_TOKEN when set)\n"
        "  --header-timeout DUR an HTTP request's head must arrive within DUR of its first\n"
        "                       byte, and its body must not stall that long (default 10s)\n"
        "  --idle-timeout DUR   close an idle keep-alive HTTP connection after DUR\n"
        "                       (default 30s)\n"
        "  --hello-timeout DUR  close a connection without a complete HELLO (or request)\n"
        "                       DUR after it connected (default 10s)\n"
        "  --frame-timeout DUR  close a stream whose partly sent frame gets no byte for DUR\n"
        "                       (default 60s); 0 turns any of these timeouts off\n"
        "  --web-root DIR       dashboard files (default <bindir>/../share/heapstore/web)\n"
        "  --ready-fd N         once accepting connections, write the port and a newline to\n"
        "                       the inherited descriptor N and close it (for launchers)\n"
        "  --alloc-wrappers LIST  allocation wrappers that do not name a site (comma-\n"
        "                       separated, 'prefix*' allowed; sets HEAPSTORE_ALLOC_WRAPPERS)\n"
        "  --symbol-path DIR    also look for programs' and libraries' files (by build id:\n"
        "                       DIR/.build-id/xx/yyyy[.debug], or by file name) in DIR;\n"
        "                       may be given several times\n"
        "  --no-local-symbols   never read the files collectors name, nor /usr/lib/debug:\n"
        "                       only --symbol-path (a server for other machines)\n"
        "  --no-symbol-uploads  never ask collectors for the files of builds it lacks\n"
        "  --help               this text\n",
        HS_DEFAULT_PORT);
}

static int parse_listen(char *arg, const char **host, int *port)
{
    char *colon = strrchr(arg, ':');
    if (!colon) return HS_EINVAL;
    *colon = 0;
    char *h = arg;
    if (h[0] == '[') { /* [::1]:7459 */
        size_t n = strlen(h);
        if (n < 2 || h[n - 1] != ']') return HS_EINVAL;
        h[n - 1] = 0;
        h++;
    }
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (!colon[1] || *end || p < 0 || p > 65535) return HS_EINVAL;
    *host = !*h || !strcmp(h, "localhost") ? "127.0.0.1" : h;
    *port = (int)p;
    return 0;
}

/* <dir of this executable>/../share/heapstore/web */
static char *default_web_root(void)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return NULL;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return NULL;
    *slash = 0;
    char *out = malloc(strlen(exe) + 32);
    if (out) sprintf(out, "%s/../share/heapstore/web", exe);
    return out;
}

/* What the options said beyond cfg. */
typedef struct given {
    int token, read_token;
    char listen[512];
    const char *symbol_paths[64];
} given;

/* The options whose value is a duration. 1 if name is one (0 set, or 2
 * after a message), else 0 with nothing done. */
static int set_duration(hs_server_config *cfg, const char *name, const char *val, int *status)
{
    static const struct {
        const char *name;
        size_t off;
        uint64_t min;
        const char *hint; /* what a good value is, where it is not any duration */
    } d[] = {
        {"--granularity", offsetof(hs_server_config, granularity_ns), 1000000,
         "a duration of at least 1ms, such as 100ms or 1s"},
        {"--event-time", offsetof(hs_server_config, event_time_ns), 1,
         "a duration of at least 1ns, such as 1us or 100us"},
        {"--grace", offsetof(hs_server_config, grace_ns), 0, NULL},
        {"--header-timeout", offsetof(hs_server_config, header_timeout_ns), 0, NULL},
        {"--idle-timeout", offsetof(hs_server_config, idle_timeout_ns), 0, NULL},
        {"--hello-timeout", offsetof(hs_server_config, hello_timeout_ns), 0, NULL},
        {"--frame-timeout", offsetof(hs_server_config, frame_timeout_ns), 0, NULL},
    };
    for (size_t k = 0; k < HS_COUNTOF(d); k++) {
        if (strcmp(name, d[k].name)) continue;
        uint64_t *dst = (uint64_t *)((char *)cfg + d[k].off);
        *status = hs_parse_duration(val, dst) || *dst < d[k].min ? 2 : 0;
        if (*status && d[k].hint)
            fprintf(stderr, "heapstore-server: bad %s '%s': %s\n", name, val, d[k].hint);
        else if (*status)
            fprintf(stderr, "heapstore-server: bad value '%s' for %s (see --help)\n", val, name);
        return 1;
    }
    return 0;
}

/* Every other option with a value: 0, or 2 after a message. */
static int set_option(hs_server_config *cfg, given *g, const char *name, const char *val)
{
    int bad = 0;
    char *end;
    if (!strcmp(name, "--db")) {
        cfg->db_path = val;
    } else if (!strcmp(name, "--listen")) {
        snprintf(g->listen, sizeof g->listen, "%s", val);
        bad = parse_listen(g->listen, &cfg->host, &cfg->port);
    } else if (!strcmp(name, "--retain-events")) {
        double d = strtod(val, &end);
        bad = end == val || *end || !(d > 0) || d > 1e6;
        if (!bad) cfg->retain_events_ns = (uint64_t)llround(d * 86400e9);
    } else if (!strcmp(name, "--token")) {
        cfg->token = val[0] ? val : NULL;
        g->token = 1;
    } else if (!strcmp(name, "--read-token")) {
        cfg->read_token = val[0] ? val : NULL;
        g->read_token = 1;
    } else if (!strcmp(name, "--ready-fd")) {
        long fd = strtol(val, &end, 10);
        bad = end == val || *end || fd < 0 || fd > INT_MAX || fcntl((int)fd, F_GETFD) < 0;
        if (!bad) {
            cfg->ready_fd = (int)fd;
            fcntl(cfg->ready_fd, F_SETFD, FD_CLOEXEC);
        }
    } else if (!strcmp(name, "--symbol-path")) {
        bad = !*val || cfg->nsymbol_paths == (int)HS_COUNTOF(g->symbol_paths);
        if (!bad) g->symbol_paths[cfg->nsymbol_paths++] = val;
        cfg->symbol_paths = g->symbol_paths;
    } else if (!strcmp(name, "--store")) {
        char why[300];
        if (strcmp(val, "sqlite") && hs_server_store_check(val, why, sizeof why)) {
            fprintf(stderr, "heapstore-server: bad --store: %s\n", why);
            return 2;
        }
        cfg->store_url = strcmp(val, "sqlite") ? val : NULL;
    } else if (!strcmp(name, "--retain-months")) {
        long m = strtol(val, &end, 10);
        bad = end == val || *end || m < 1 || m > 1200;
        if (!bad) cfg->store_retain_months = (int)m;
    } else if (!strcmp(name, "--web-root")) {
        cfg->web_root = val;
    } else if (!strcmp(name, "--alloc-wrappers")) {
        /* read by queries/ (site.c) on every request; set before any thread starts */
        bad = setenv("HEAPSTORE_ALLOC_WRAPPERS", val, 1) != 0;
    }
    if (bad) fprintf(stderr, "heapstore-server: bad value '%s' for %s (see --help)\n", val, name);
    return bad ? 2 : 0;
}

/* The command line into cfg and g: -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, hs_server_config *cfg, given *g)
{
    static const char *const known[] = {"--db",           "--listen",         "--granularity",
                                        "--grace",        "--retain-events",  "--token",
                                        "--read-token",   "--web-root",       "--header-timeout",
                                        "--idle-timeout", "--hello-timeout",  "--frame-timeout",
                                        "--ready-fd",     "--alloc-wrappers", "--event-time",
                                        "--symbol-path",  "--store",          "--retain-months"};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--no-local-symbols")) { /* the options without a value */
            cfg->no_local_symbols = 1;
            continue;
        }
        if (!strcmp(a, "--no-symbol-uploads")) {
            cfg->no_symbol_uploads = 1;
            continue;
        }
        if (strncmp(a, "--", 2) != 0) {
            fprintf(stderr, "heapstore-server: unexpected argument '%s' (see --help)\n", a);
            return 2;
        }
        /* Every other option takes a value, as --opt VALUE or --opt=VALUE. */
        const char *eq = strchr(a, '=');
        size_t nlen = eq ? (size_t)(eq - a) : strlen(a);
        const char *val = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        char name[32];
        snprintf(name, sizeof name, "%.*s", (int)(nlen < 31 ? nlen : 31), a);
        int ok = 0, status = 0;
        for (size_t k = 0; k < HS_COUNTOF(known); k++) ok |= !strcmp(name, known[k]);
        if (!ok) {
            fprintf(stderr, "heapstore-server: unknown option '%s' (see --help)\n", name);
            return 2;
        }
        if (!val) {
            fprintf(stderr, "heapstore-server: %s needs a value (see --help)\n", name);
            return 2;
        }
        if (!set_duration(cfg, name, val, &status)) status = set_option(cfg, g, name, val);
        if (status) return status;
    }
    return -1;
}

/* What the options left to the environment and the defaults, and the
 * checks across options: 0, or the exit status after a message. */
static int finish_config(hs_server_config *cfg, const given *g, char *db_buf, size_t db_len)
{
    /* The variable collectors and the CLI send; --token (even empty) wins. */
    const char *env_token = getenv("HEAPSTORE_TOKEN");
    if (!g->token && env_token && *env_token) cfg->token = env_token;
    const char *env_read = getenv("HEAPSTORE_READ_TOKEN");
    if (!g->read_token && env_read && *env_read) cfg->read_token = env_read;
    if (!cfg->db_path) {
        int rc = hs_default_db_path(db_buf, db_len);
        if (!rc) rc = hs_paths_mkdir_parent(db_buf);
        if (rc) {
            fprintf(stderr, "heapstore-server: no default database path (%s); use --db PATH\n",
                    hs_strerror(rc));
            return 1;
        }
        cfg->db_path = db_buf;
    }
    if (cfg->store_retain_months && !cfg->store_url) {
        fprintf(stderr, "heapstore-server: --retain-months needs --store clickhouse://…\n");
        return 2;
    }
    if (cfg->event_time_ns && cfg->granularity_ns % cfg->event_time_ns) {
        fprintf(stderr, "heapstore-server: --event-time must divide --granularity, so that a "
                        "stored event stays in the bucket it was counted in\n");
        return 2;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static given g;
    char db_buf[PATH_MAX];
    hs_server_config cfg = {
        .host = "127.0.0.1",
        .port = HS_DEFAULT_PORT,
        .granularity_ns = 1000000000ull,
        .grace_ns = 10ull * 1000000000ull,
        .hello_timeout_ns = 10ull * 1000000000ull,
        .frame_timeout_ns = 60ull * 1000000000ull,
        .header_timeout_ns = 10ull * 1000000000ull,
        .idle_timeout_ns = 30ull * 1000000000ull,
        .ready_fd = -1,
    };
    int status = parse_args(argc, argv, &cfg, &g);
    if (status >= 0) return status;
    if ((status = finish_config(&cfg, &g, db_buf, sizeof db_buf))) return status;
    char *web_root = NULL;
    if (!cfg.web_root) cfg.web_root = web_root = default_web_root();
    int rc = hs_server_run(&cfg);
    free(web_root);
    return rc ? 1 : 0;
}

/* heapstore run: profile a program and say what its heap did.
 *
 * Preloads the collector (<bindir>/../lib/libheapstore.so) into PROGRAM and
 * points it at a server: HEAPSTORE_URL when set, else a server already
 * listening on the default address, else one started for the purpose on the
 * default database (or --db PATH, which always gets its own server) and
 * stopped afterwards. Once the program has exited and its run is stored, it
 * prints a summary on stderr (the program keeps stdout) and exits with the
 * program's exit code (128 + N for a program killed by signal N).
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli_decode.h"
#include "cli_query.h"
#include "hs_cli.h"
#include "hs_paths.h"
#include "hs_spawn.h"
#include "http_client.h"

static const char usage[] =
    "run [--sample BYTES] [--label k=v]… [--site MODE] [--wrappers LIST] [--db PATH] -- PROGRAM "
    "ARGS…\n"
    "  --sample BYTES  mean bytes between samples (1: every allocation; default: the\n"
    "                  collector's, 512 KiB, or HEAPSTORE_SAMPLE_BYTES)\n"
    "  --db PATH       store the run in PATH (a server is started for it)\n"
    "  HEAPSTORE_URL   send to that server instead of the default "
    "127.0.0.1:7459\n"
    "                  (or to a list of front ends of one store: "
    "h1:7459,h2:7459)\n" HS_CLI_SITE_HELP;

/* How long `run` waits, after the program has exited, for its run to appear
 * on the server, and then for a stored run that stays open to change. */
#define NOTHING_ARRIVED_S 15
#define STALLED_S         15

#define DEFAULT_HOST "127.0.0.1"
#define DEFAULT_PORT 7459

typedef struct server_proc {
    pid_t pid;
    char log[64];
    int port;
} server_proc;

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int exe_dir(char *out, size_t len)
{
    ssize_t n = readlink("/proc/self/exe", out, len - 1);
    if (n <= 0) return -1;
    out[n] = '\0';
    char *slash = strrchr(out, '/');
    if (!slash) return -1;
    *slash = '\0';
    return 0;
}

static void print_log_tail(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[1024];
    while (fgets(line, sizeof line, f)) fprintf(stderr, "  | %s", line);
    fclose(f);
}

/* Starts bindir/heapstore-server on db, on a free loopback port. */
static int server_start(server_proc *sp, const char *bindir, const char *db)
{
    char exe[PATH_MAX + 32];
    snprintf(exe, sizeof exe, "%s/heapstore-server", bindir);
    if (access(exe, X_OK)) {
        fprintf(stderr, "heapstore run: cannot find %s to store the run\n", exe);
        return -1;
    }
    if (hs_paths_mkdir_parent(db)) {
        fprintf(stderr, "heapstore run: cannot create the folder of %s\n", db);
        return -1;
    }
    snprintf(sp->log, sizeof sp->log, "/tmp/heapstore-server-XXXXXX");
    int fd = mkstemp(sp->log);
    if (fd < 0) {
        fprintf(stderr, "heapstore run: cannot create a log file: %s\n", strerror(errno));
        return -1;
    }
    const char *args[] = {"--db",    db,   "--listen", DEFAULT_HOST ":0", "--granularity", "100ms",
                          "--grace", "2s", NULL};
    hs_spawn_opts o = {.exe = exe,
                       .args = args,
                       .log_fd = fd,
                       .quiet = 1,
                       .own_group = 1,
                       .no_preload = 1,
                       .timeout_ms = 10000};
    char why[256];
    int rc = hs_spawn_server(&o, &sp->pid, &sp->port, why, sizeof why);
    close(fd);
    if (rc == 0) return 0;
    fprintf(stderr, "heapstore run: the server for %s did not start (%s):\n", db, why);
    print_log_tail(sp->log);
    unlink(sp->log);
    sp->pid = 0;
    return -1;
}

/* Whether the server we started has exited (and is reaped). */
static int server_exited(server_proc *sp)
{
    int st;
    if (waitpid(sp->pid, &st, WNOHANG) != sp->pid) return 0;
    sp->pid = 0;
    return 1;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* What the server has stored of a run so far: it grows while the run's
 * frames are being stored. */
static int64_t run_progress(const json_t *run)
{
    hs_run_record r;
    hs_cli_record_decode(&r, run);
    return r.alloc_events + r.free_events + r.duration_ns;
}

/* Whether the run sampled any allocation (most of a shell script's helper
 * processes do not, at the default rate). */
static int has_samples(const json_t *run)
{
    hs_run_record r;
    hs_cli_record_decode(&r, run);
    /* an exact peak is not a sample: every process has one */
    if (r.exact.in_figures) return r.alloc_events > 0 || r.exact.est_peak_bytes > 0;
    return r.alloc_events > 0 || r.peak_bytes > 0;
}

static void server_stop(server_proc *sp, int show_log)
{
    if (sp->pid <= 0) return;
    kill(sp->pid, SIGTERM);
    int st;
    for (int i = 0; i < 200; i++) {
        if (waitpid(sp->pid, &st, WNOHANG) == sp->pid) goto done;
        sleep_ms(50);
    }
    kill(sp->pid, SIGKILL);
    waitpid(sp->pid, &st, 0);
done:
    if (show_log) print_log_tail(sp->log);
    unlink(sp->log);
    sp->pid = 0;
}

/* The run id the collector of the program we start will use (32 hex). */
static void new_run_id(char hex[33])
{
    uint8_t id[16];
    if (getrandom(id, sizeof id, 0) != (ssize_t)sizeof id) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t a = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
        uint64_t b = (uint64_t)getpid() * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)&ts;
        for (int i = 0; i < 8; i++) {
            id[i] = (uint8_t)(a >> (8 * i));
            id[8 + i] = (uint8_t)(b >> (8 * i));
        }
    }
    static const char d[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        hex[2 * i] = d[id[i] >> 4];
        hex[2 * i + 1] = d[id[i] & 15];
    }
    hex[32] = 0;
}

static pid_t start_program(char **argv, const char *lib, const char *url, const char *sample,
                           const char *labels, const char *run_id)
{
    pid_t pid = fork();
    if (pid != 0) return pid;
    const char *old = getenv("LD_PRELOAD");
    char preload[PATH_MAX * 3];
#ifdef HS_CLI_ASAN_RUNTIME
    /* A heapstore built with AddressSanitizer: its collector is instrumented
     * and needs the ASan runtime, loaded right after it (the collector's
     * malloc must come first, and forwards to the runtime's). The runtime
     * then is not first in the list, which it would refuse, and a program
     * that leaks on purpose must keep its exit code. The user's own
     * ASAN_OPTIONS come after ours, so they win. */
    snprintf(preload, sizeof preload, "%s:%s%s%s", lib, HS_CLI_ASAN_RUNTIME, old && *old ? ":" : "",
             old ? old : "");
    const char *asan = getenv("ASAN_OPTIONS");
    char asan_opts[4096];
    snprintf(asan_opts, sizeof asan_opts, "verify_asan_link_order=0:detect_leaks=0%s%s",
             asan && *asan ? ":" : "", asan ? asan : "");
    setenv("ASAN_OPTIONS", asan_opts, 1);
#else
    snprintf(preload, sizeof preload, "%s%s%s", lib, old && *old ? ":" : "", old ? old : "");
#endif
    setenv("LD_PRELOAD", preload, 1);
    setenv("HEAPSTORE_URL", url, 1);
    /* The collector bounds how long a program's exit may wait for the last
     * frames to be acknowledged (2 s by default, so that a profiled service
     * never hangs on a slow server). Here the user waits for the whole run
     * anyway, and a busy machine can take longer than that: a run cut short
     * would lack its end and be closed as lost. */
    if (!getenv("HEAPSTORE_EXIT_FLUSH_MS")) setenv("HEAPSTORE_EXIT_FLUSH_MS", "30000", 1);
    if (sample) setenv("HEAPSTORE_SAMPLE_BYTES", sample, 1);
    if (labels && *labels) setenv("HEAPSTORE_LABELS", labels, 1);
    setenv("HEAPSTORE_RUN_ID", run_id, 1);
    execvp(argv[0], argv);
    fprintf(stderr, "heapstore run: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

/* GET target from the server at url as JSON; NULL (and a message) on failure. */
static json_t *get_json(const char *url, const char *target, int quiet)
{
    hs_http_answer ans;
    char err[512];
    const char *token = getenv("HEAPSTORE_TOKEN");
    if (hs_http_request(&ans, url, token && *token ? token : NULL, "GET", target, NULL, 0, 60, err,
                        sizeof err)) {
        if (!quiet) fprintf(stderr, "heapstore run: %s\n", err);
        return NULL;
    }
    json_error_t je;
    json_t *j = json_loadb(ans.body, ans.len, 0, &je);
    free(ans.body);
    if (ans.status != 200 || !j) {
        if (!quiet) {
            const char *m =
                json_string_value(json_object_get(json_object_get(j, "error"), "message"));
            fprintf(stderr, "heapstore run: the server answered %d: %s\n", ans.status,
                    m ? m : "no JSON");
        }
        json_decref(j);
        return NULL;
    }
    return j;
}

/* The run of the image that replaced run's process by exec: same pid, run
 * as its parent. Returns 0 with its uuid in out, -1 when there is none. */
static int exec_successor(const char *url, const json_t *run, char *out, size_t len)
{
    char target[128];
    int64_t id = hs_json_int(run, "id"), pid = hs_json_int(run, "pid");
    snprintf(target, sizeof target, "/api/runs?pid=%" PRId64 "&limit=100", pid);
    json_t *j = get_json(url, target, 1);
    json_t *runs = json_object_get(j, "runs"), *r;
    size_t i;
    int rc = -1;
    json_array_foreach(runs, i, r)
    {
        if (hs_json_int(r, "parent_id") == id && hs_json_int(r, "pid") == pid) {
            snprintf(out, len, "%s", hs_json_str(r, "uuid"));
            rc = out[0] ? 0 : -1;
            break;
        }
    }
    json_decref(j);
    return rc;
}

static const char *sampling_text(const json_t *run, char *buf, size_t len)
{
    char b[32];
    hs_run_record r;
    hs_cli_record_decode(&r, run);
    int64_t sb = r.sampling.sample_bytes;
    if (sb == 1)
        snprintf(buf, len, "every allocation");
    else
        snprintf(buf, len, "one sample per %s", hs_cli_bytes(sb, b));
    return buf;
}

/* The exact totals' lines: what was counted, how close the live figure is,
 * and the estimate the samples alone gave. */
static void summary_exact(const hs_run_exact *ex)
{
    char b1[32], b2[32], b3[32];
    fprintf(stderr,
            "  counted      %" PRId64 " allocations (%s), %" PRId64 " frees: every one, in the "
            "allocator's usable sizes; live heap within %s\n",
            ex->allocs, hs_cli_bytes(ex->alloc_bytes, b1), ex->frees,
            hs_cli_bytes(ex->error_bytes, b2));
    fprintf(stderr, "  sampled peak %s at %s (what the samples alone estimate)\n",
            hs_cli_bytes(ex->est_peak_bytes, b1), hs_cli_secs(ex->est_peak_t_ns, b3));
}

/* What the collector dropped, and what it could not see of Python. */
static void summary_dropped(const hs_run_sampling *s)
{
    const int64_t *d = s->dropped;
    int64_t dropped = d[HS_RUNDROP_ALLOC_EVENTS] + d[HS_RUNDROP_FREE_EVENTS];
    if (dropped)
        fprintf(stderr, "  dropped      %" PRId64 " events (the numbers are lower bounds)\n",
                dropped);
    else
        fprintf(stderr, "  dropped      nothing\n");
    if (d[HS_RUNDROP_PYTHON_FALLBACK])
        fprintf(stderr,
                "  python       %" PRId64 " samples in Python code lack their Python frames (an "
                "interpreter heapstore cannot read: not CPython 3.8-3.13, or a debug or "
                "free-threaded build)\n",
                d[HS_RUNDROP_PYTHON_FALLBACK]);
    if (d[HS_RUNDROP_PYTHON_SMALL_UNSEEN])
        fprintf(stderr, "  python       small objects (pymalloc's) not seen: the interpreter was "
                        "found after its start-up, or PYTHONMALLOC or development mode (-X dev) "
                        "keeps them from malloc (unset it, or set PYTHONMALLOC=malloc)\n");
}

/* The run's heap in a few lines. code: the command's exit code when run is
 * the command's own process, else -1 (run is the largest of its tree). */
static void summary_head(const char *url, const json_t *run, int code)
{
    hs_run_record r;
    hs_cli_record_decode(&r, run);
    char t[4096], b1[32], b2[32], b3[32], sampling[64];
    sampling_text(run, sampling, sizeof sampling);
    if (code >= 0)
        fprintf(stderr, "\nheapstore: run %" PRId64 " of %s: exit code %d, %s, sampling %s\n", r.id,
                r.program, code, hs_cli_secs(r.duration_ns, b1), sampling);
    else
        fprintf(stderr, "\nheapstore: run %" PRId64 " of %s, the largest: %s, pid %" PRId64 "\n",
                r.id, r.program, hs_cli_secs(r.duration_ns, b1), r.pid);
    /* Which figures are exact: with the collector's exact totals the heap's
     * peak, its moment, the end and the counts are; only the sites are
     * estimated (summary_sites). At every-allocation sampling the samples
     * are exact themselves (in requested bytes). */
    int exact = r.exact.in_figures, every = r.sampling.sample_bytes == 1;
    const char *how = exact ? " (exact)" : every ? "" : " (estimated from samples)";
    fprintf(stderr, "  peak heap    %s at %s%s\n", hs_cli_bytes(r.peak_bytes, b2),
            hs_cli_secs(r.peak_t_ns, b3), how);
    const char *unclean = !strcmp(r.state, "ended") ? "" : " (the run did not end cleanly)";
    /* A Python program's end is its main code's, before the interpreter's
     * teardown frees its globals; the process's exit comes after. */
    json_t *main_end = NULL;
    if (r.main_end_ns) {
        snprintf(t, sizeof t, "/api/runs/%" PRId64 "/top?at=end&limit=1", r.id);
        main_end = get_json(url, t, 0);
    }
    if (main_end) {
        fprintf(stderr,
                "  at the end   %s in %" PRId64 " blocks, when the main program finished at %s "
                "(before interpreter teardown)\n",
                hs_cli_bytes(hs_json_int(main_end, "total_bytes"), b2),
                hs_json_int(main_end, "total_count"), hs_cli_secs(r.main_end_ns, b3));
        fprintf(stderr, "  at exit      %s in %" PRId64 " blocks%s\n",
                hs_cli_bytes(r.end_bytes, b2), r.end_count, unclean);
        json_decref(main_end);
    } else {
        fprintf(stderr, "  at the end   %s in %" PRId64 " blocks%s%s\n",
                hs_cli_bytes(r.end_bytes, b2), r.end_count, how, unclean);
    }
    if (exact) summary_exact(&r.exact);
    summary_dropped(&r.sampling);
}

/* The run's top sites at its peak and its likely leaks. */
static void summary_sites(const hs_cli_args *a, const char *url, const json_t *run)
{
    int64_t id = hs_json_int(run, "id");
    char t[4096], b1[32], b2[32], b3[32];
    snprintf(t, sizeof t, "/api/runs/%" PRId64 "/top?at=peak&by=site&limit=5", id);
    hs_cli_site_params(a, t, sizeof t);
    json_t *top = get_json(url, t, 0);
    size_t i;
    json_t *row;
    hs_run_record r;
    hs_cli_record_decode(&r, run);
    int64_t sb = r.sampling.sample_bytes;
    if (top && json_array_size(json_object_get(top, "rows"))) {
        /* Each sample stands for about sb bytes: a site's estimate of B
         * bytes rests on about B/sb samples, off by about sqrt(B * sb). */
        int64_t b = hs_json_int(json_array_get(json_object_get(top, "rows"), 0), "total_bytes");
        if (sb > 1)
            fprintf(stderr,
                    "\n  top allocation sites at the peak (estimated from samples: a site's "
                    "figure of B bytes is off by about sqrt(B x %s), %s on %s):\n",
                    hs_cli_bytes(sb, b1), hs_cli_bytes((int64_t)sqrt((double)b * (double)sb), b2),
                    hs_cli_bytes(b, b3));
        else
            fprintf(stderr, "\n  top allocation sites at the peak:\n");
        json_array_foreach(json_object_get(top, "rows"), i, row)
        {
            char name[600];
            hs_cli_site(name, sizeof name, row, "name");
            fprintf(stderr, "    %10s  %5.1f%%  %s\n",
                    hs_cli_bytes(hs_json_int(row, "total_bytes"), b1),
                    100.0 * json_real_value(json_object_get(row, "share")), name);
        }
    }
    json_decref(top);
    snprintf(t, sizeof t, "/api/runs/%" PRId64 "/leaks?limit=5", id);
    hs_cli_site_params(a, t, sizeof t);
    json_t *leaks = get_json(url, t, 0);
    json_t *growing = json_object_get(leaks, "growing");
    if (leaks) {
        if (json_array_size(growing)) {
            fprintf(stderr, "\n  likely leaks (live bytes grew steadily through the run):\n");
            json_array_foreach(growing, i, row)
            {
                char name[600], rate[48];
                hs_cli_site(name, sizeof name, row, "name");
                snprintf(
                    rate, sizeof rate, "+%s/s",
                    hs_cli_bytes(
                        (int64_t)json_real_value(json_object_get(row, "slope_bytes_per_s")), b2));
                fprintf(stderr, "    %10s  %12s  r²=%.2f  %s\n",
                        hs_cli_bytes(hs_json_int(row, "end_bytes"), b1), rate,
                        json_real_value(json_object_get(row, "r2")), name);
            }
        } else {
            fprintf(stderr, "\n  no allocation site grew steadily (no likely leak)\n");
            json_t *live = json_object_get(leaks, "live_at_end");
            if (json_array_size(live)) {
                fprintf(stderr, "  largest still live at the end:\n");
                json_array_foreach(live, i, row)
                {
                    if (i == 3) break;
                    char name[600];
                    hs_cli_site(name, sizeof name, row, "name");
                    fprintf(stderr, "    %10s  %s\n", hs_cli_bytes(hs_json_int(row, "bytes"), b1),
                            name);
                }
            }
        }
    }
    json_decref(leaks);
}

/* What the run allocated, and where to look next. */
static void summary_body(const hs_cli_args *a, const char *url, const json_t *run, const char *how)
{
    int64_t id = hs_json_int(run, "id");
    if (has_samples(run))
        summary_sites(a, url, run);
    else
        fprintf(stderr, "\n  no allocation was sampled (--sample 1 records every one)\n");
    fprintf(stderr,
            "\n  dig further (%s):\n"
            "    heapstore top %" PRId64 " --at peak          heapstore history %" PRId64
            " --top 5\n"
            "    heapstore leaks %" PRId64 "                  heapstore flame %" PRId64
            " > heap.folded\n"
            "    heapstore export %" PRId64 " --format pprof -o heap.pb.gz && go tool pprof -top "
            "heap.pb.gz\n",
            how, id, id, id, id, id);
}

/* ---- the process tree ------------------------------------------------------
 *
 * A program that starts others (a compiler driver, a shell script, pyenv's
 * shims) leaves one run per process image, linked by parent_id. The summary
 * speaks of the whole tree: each process's peak and what it still held at
 * its end, the largest first, and then the largest one in detail. The API has
 * no filter by parent, so the tree is gathered from /api/runs rows: every run
 * of the tree started after its root, and the listing is newest first, so a
 * listing that reaches the root holds the whole tree. */

/* At most this many processes with samples get a line of their own; the
 * rest, and the processes without samples, are folded into a line each. */
#define TREE_LINES 10
/* How many program names a folded line lists. */
#define FOLD_NAMES 6

typedef struct run_tree {
    json_t *all;  /* the /api/runs answer the rows below belong to */
    json_t **run; /* borrowed from all: the root and its descendants */
    size_t n;
} run_tree;

static void tree_clear(run_tree *t)
{
    free(t->run);
    json_decref(t->all);
    memset(t, 0, sizeof *t);
}

typedef struct id_index {
    int64_t id;
    size_t index; /* in the listing */
} id_index;

static int cmp_id(const void *a, const void *b)
{
    const id_index *x = a, *y = b;
    return (x->id > y->id) - (x->id < y->id);
}

/* The runs of root's tree: root, then its descendants, newest first. */
static int tree_fetch(run_tree *out, const char *url, int64_t root)
{
    memset(out, 0, sizeof *out);
    for (int64_t limit = 200;; limit *= 4) {
        if (limit > 100000) limit = 100000;
        char target[64];
        snprintf(target, sizeof target, "/api/runs?limit=%" PRId64, limit);
        json_t *j = get_json(url, target, 1);
        json_t *rows = json_object_get(j, "runs");
        if (!rows) {
            json_decref(j);
            return -1;
        }
        size_t n = json_array_size(rows), at = n;
        for (size_t i = 0; i < n && at == n; i++)
            if (hs_json_int(json_array_get(rows, i), "id") == root) at = i;
        if (at == n && n == (size_t)limit && limit < 100000) {
            json_decref(j); /* the root is older than the listing: ask for more */
            continue;
        }
        if (at == n) {
            json_decref(j);
            return -1;
        }
        /* Rows 0..at are newer than the root; a run is in the tree when its
         * parent is. Parents usually start first (listed later), so a pass
         * from the oldest settles most trees; repeat until nothing changes. */
        char *in = calloc(at + 1, 1);
        id_index *by_id = malloc((at + 1) * sizeof *by_id);
        if (!in || !by_id) {
            free(in);
            free(by_id);
            json_decref(j);
            return -1;
        }
        for (size_t i = 0; i <= at; i++)
            by_id[i] = (id_index){hs_json_int(json_array_get(rows, i), "id"), i};
        qsort(by_id, at + 1, sizeof *by_id, cmp_id);
        in[at] = 1;
        size_t count = 1;
        for (int changed = 1; changed;) {
            changed = 0;
            for (size_t i = at; i-- > 0;) {
                if (in[i]) continue;
                id_index key = {hs_json_int(json_array_get(rows, i), "parent_id"), 0};
                const id_index *parent = bsearch(&key, by_id, at + 1, sizeof *by_id, cmp_id);
                if (key.id && parent && in[parent->index]) {
                    in[i] = 1;
                    count++;
                    changed = 1;
                }
            }
        }
        free(by_id);
        out->run = malloc(count * sizeof *out->run);
        if (!out->run) {
            free(in);
            json_decref(j);
            return -1;
        }
        out->run[out->n++] = json_array_get(rows, at);
        for (size_t i = 0; i < at; i++)
            if (in[i]) out->run[out->n++] = json_array_get(rows, i);
        assert(out->n == count);
        free(in);
        out->all = j;
        return 0;
    }
}

/* Whether run's process still runs on this machine (a background child
 * that outlives the command: its run stays open, and is not waited for). */
static int process_alive(const json_t *run)
{
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) || strcmp(host, hs_json_str(run, "host"))) return 0;
    pid_t pid = (pid_t)hs_json_int(run, "pid");
    return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
}

/* Waits until every run of root's tree whose process has exited is stored
 * (or nothing has changed for STALLED_S), then gathers the tree. */
static int tree_wait(run_tree *out, const char *url, int64_t root)
{
    int64_t seen = -1;
    double idle_since = now_s();
    for (;;) {
        if (tree_fetch(out, url, root)) return -1;
        int64_t progress = (int64_t)out->n, pending = 0;
        for (size_t i = 0; i < out->n; i++) {
            progress += run_progress(out->run[i]);
            if (!strcmp(hs_json_str(out->run[i], "state"), "open") && !process_alive(out->run[i]))
                pending++;
        }
        if (!pending) return 0;
        if (progress != seen) {
            seen = progress;
            idle_since = now_s();
        }
        if (now_s() - idle_since >= STALLED_S) return 0;
        tree_clear(out);
        sleep_ms(200);
    }
}

/* Largest peak first; then the older run. */
static int cmp_peak(const void *a, const void *b)
{
    const json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
    int64_t px = hs_json_int(x, "peak_bytes"), py = hs_json_int(y, "peak_bytes");
    if (px != py) return px < py ? 1 : -1;
    int64_t ix = hs_json_int(x, "id"), iy = hs_json_int(y, "id");
    return (ix > iy) - (ix < iy);
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* "prog arg1 arg2…" of run, cut at about len - 4 bytes with an ellipsis. */
static void command_line(char *buf, size_t len, const json_t *run)
{
    assert(len > 8);
    size_t n = (size_t)snprintf(buf, len, "%s", base_name(hs_json_str(run, "program")));
    json_t *argv = json_object_get(run, "argv"), *arg;
    size_t i;
    json_array_foreach(argv, i, arg)
    {
        if (i == 0) continue;
        if (n >= len - 1) break;
        n += (size_t)snprintf(buf + n, len - n, " %s", json_string_value(arg));
    }
    if (n >= len - 1) strcpy(buf + len - 5, "…");
}

/* "<lead>N <more>processes <what>: bash×40, env×20, …" for runs[0..n). */
static void fold_line(json_t *const *runs, size_t n, const char *lead, const char *more,
                      const char *what)
{
    if (!n) return;
    const char **name = calloc(n, sizeof *name);
    size_t *count = calloc(n, sizeof *count), k = 0;
    if (!name || !count) {
        free(name);
        free(count);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const char *b = base_name(hs_json_str(runs[i], "program"));
        size_t j = 0;
        while (j < k && strcmp(name[j], b)) j++;
        if (j == k) name[k++] = b;
        count[j]++;
    }
    fprintf(stderr, "%s%zu %sprocess%s %s:", lead, n, more, n == 1 ? "" : "es", what);
    for (size_t shown = 0; shown < k && shown < FOLD_NAMES; shown++) {
        size_t best = shown; /* selection: the most frequent names first */
        for (size_t j = shown + 1; j < k; j++)
            if (count[j] > count[best]) best = j;
        const char *bn = name[best];
        size_t bc = count[best];
        name[best] = name[shown], count[best] = count[shown];
        name[shown] = bn, count[shown] = bc;
        fprintf(stderr, "%s %s×%zu", shown ? "," : "", bn, bc);
    }
    fprintf(stderr, "%s\n", k > FOLD_NAMES ? ", …" : "");
    free(name);
    free(count);
}

/* Live bytes and blocks at run's end: before interpreter teardown for a
 * Python program (its main code's end), else at the process's exit. */
static void end_state(const char *url, const json_t *run, int64_t *bytes, int64_t *count)
{
    *bytes = hs_json_int(run, "end_bytes");
    *count = hs_json_int(run, "end_count");
    if (!json_object_get(run, "main_end_ns")) return;
    char t[96];
    snprintf(t, sizeof t, "/api/runs/%" PRId64 "/top?at=end&limit=1", hs_json_int(run, "id"));
    json_t *j = get_json(url, t, 1);
    if (j) {
        *bytes = hs_json_int(j, "total_bytes");
        *count = hs_json_int(j, "total_count");
    }
    json_decref(j);
}

static void tree_line(const char *url, const json_t *run)
{
    char b1[32], b2[32], end[64], cmd[72];
    int64_t bytes, count;
    end_state(url, run, &bytes, &count);
    snprintf(end, sizeof end, "%s in %" PRId64 " block%s", hs_cli_bytes(bytes, b2), count,
             count == 1 ? "" : "s");
    command_line(cmd, sizeof cmd, run);
    const char *open = strcmp(hs_json_str(run, "state"), "open") ? "" : " (still running)";
    fprintf(stderr, "    %10s  %-26s  %6" PRId64 "  %7" PRId64 "  %s%s\n",
            hs_cli_bytes(hs_json_int(run, "peak_bytes"), b1), end, hs_json_int(run, "id"),
            hs_json_int(run, "pid"), cmd, open);
}

/* The tree's lines: processes with samples by peak, then the folded rest.
 * sorted: the tree's runs with samples, largest peak first (ns of them). */
static void tree_table(const char *url, const run_tree *t, json_t *const *sorted, size_t ns)
{
    fprintf(stderr, "    %10s  %-26s  %6s  %7s  %s\n", "peak heap", "live at the end", "run", "pid",
            "program");
    for (size_t i = 0; i < ns && i < TREE_LINES; i++) tree_line(url, sorted[i]);
    if (ns > TREE_LINES) {
        char b[32];
        char what[64];
        snprintf(what, sizeof what, "with samples (peaks up to %s)",
                 hs_cli_bytes(hs_json_int(sorted[TREE_LINES], "peak_bytes"), b));
        fold_line(sorted + TREE_LINES, ns - TREE_LINES, "    ", "more ", what);
    }
    fold_line(sorted + ns, t->n - ns, "    ", "more ", "without samples");
}

/* The summary of the command's process tree; last is the last image of the
 * command's own process, root the first. */
static void report(const hs_cli_args *a, const char *url, int64_t root, const json_t *last,
                   int code, const char *how)
{
    run_tree t;
    json_t **order = NULL;
    if (tree_wait(&t, url, root) || !(order = malloc(t.n * sizeof *order))) {
        tree_clear(&t);
        summary_head(url, last, code);
        summary_body(a, url, last, how);
        return;
    }
    size_t ns = 0, k = t.n;
    for (size_t i = 0; i < t.n; i++) /* with samples first, the rest from the end */
        if (has_samples(t.run[i]))
            order[ns++] = t.run[i];
        else
            order[--k] = t.run[i];
    assert(k == ns);
    qsort(order, ns, sizeof *order, cmp_peak);
    const json_t *big = ns ? order[0] : last;
    int64_t big_id = hs_json_int(big, "id");
    if (ns <= 1 && big_id == hs_json_int(last, "id")) {
        /* One process did all the allocating: its summary, as for a single
         * process, and a line for the ones without samples. */
        summary_head(url, last, code);
        size_t rest = 0; /* the others (last too may have no sample) */
        for (size_t i = ns; i < t.n; i++)
            if (hs_json_int(order[i], "id") != big_id) order[ns + rest++] = order[i];
        fold_line(order + ns, rest, "  also         ", "", "without samples");
    } else {
        char b1[32], sampling[64];
        int64_t start = hs_json_int(t.run[0], "start_unix_ms") * 1000000, span = 0, dropped = 0;
        for (size_t i = 0; i < t.n; i++) {
            int64_t e = hs_json_int(t.run[i], "start_unix_ms") * 1000000 - start +
                        hs_json_int(t.run[i], "duration_ns");
            if (e > span) span = e;
            hs_run_record r;
            hs_cli_record_decode(&r, t.run[i]);
            dropped += r.sampling.dropped[HS_RUNDROP_ALLOC_EVENTS] +
                       r.sampling.dropped[HS_RUNDROP_FREE_EVENTS];
        }
        fprintf(stderr,
                "\nheapstore: process tree of run %" PRId64
                " (%s), %zu processes: exit code %d, %s, sampling %s\n",
                root, base_name(hs_json_str(t.run[0], "program")), t.n, code, hs_cli_secs(span, b1),
                sampling_text(t.run[0], sampling, sizeof sampling));
        tree_table(url, &t, order, ns);
        if (dropped)
            fprintf(stderr, "  dropped      %" PRId64 " events (the numbers are lower bounds)\n",
                    dropped);
        else
            fprintf(stderr, "  dropped      nothing\n");
        summary_head(url, big, big_id == hs_json_int(last, "id") ? code : -1);
    }
    summary_body(a, url, big, how);
    free(order);
    tree_clear(&t);
}

/* The arguments heapstore run checks itself; labels gets HEAPSTORE_LABELS
 * and every --label joined. Returns 0, or the exit code of a mistake. */
static int check_args(const hs_cli_args *a, char *labels, size_t len)
{
    if (!a->nrest) {
        fprintf(stderr, "heapstore run: give the program after --\nusage: heapstore %s\n", usage);
        return 2;
    }
    if (a->npos) {
        fprintf(stderr, "heapstore run: put the program after -- (got '%s')\nusage: heapstore %s\n",
                a->pos[0], usage);
        return 2;
    }
    if (a->sample) {
        char *end;
        unsigned long long v = strtoull(a->sample, &end, 10);
        if (*end || !v) {
            fprintf(stderr, "heapstore run: --sample takes a positive number of bytes\n");
            return 2;
        }
    }
    const char *envl = getenv("HEAPSTORE_LABELS");
    snprintf(labels, len, "%s", envl ? envl : "");
    for (int i = 0; i < a->nlabels; i++) {
        size_t n = strlen(labels);
        snprintf(labels + n, len - n, "%s%s", n ? "," : "", a->labels[i]);
    }
    return 0;
}

/* Where the run goes: HEAPSTORE_URL, else a server already listening on the
 * default port, else one started here on --db or the default database (sp).
 * Fills url and how (what the summary tells the user to add to reach the
 * run again). Returns 0 or 1 with the reason printed. */
static int destination(const hs_cli_args *a, const char *bindir, server_proc *sp, char *url,
                       size_t ulen, char *how, size_t hlen)
{
    const char *envurl = getenv("HEAPSTORE_URL");
    if (!a->db && envurl && *envurl) {
        snprintf(url, ulen, "%s", envurl);
        snprintf(how, hlen, "HEAPSTORE_URL=%s", url);
        return 0;
    }
    if (!a->db && hs_http_port_open(DEFAULT_HOST, DEFAULT_PORT, 300)) {
        snprintf(url, ulen, "tcp://%s:%d", DEFAULT_HOST, DEFAULT_PORT);
        snprintf(how, hlen, "HEAPSTORE_URL=%s", url);
        return 0;
    }
    char dbpath[PATH_MAX];
    if (a->db)
        snprintf(dbpath, sizeof dbpath, "%s", a->db);
    else if (hs_default_db_path(dbpath, sizeof dbpath)) {
        fprintf(stderr, "heapstore run: no home folder for the default database; use --db PATH\n");
        return 1;
    }
    if (server_start(sp, bindir, dbpath)) return 1;
    snprintf(url, ulen, "tcp://%s:%d", DEFAULT_HOST, sp->port);
    snprintf(how, hlen, a->db ? "add --db %s" : "database %s", dbpath);
    return 0;
}

/* Runs the program as system() would (the terminal's Ctrl-C goes to it;
 * we wait) and returns its exit code (128+N for signal N), or -1 when no
 * process could be started. */
static int run_program(const hs_cli_args *a, const char *lib, const char *url, const char *labels,
                       const char *run_id, pid_t *pid)
{
    struct sigaction ign = {.sa_handler = SIG_IGN}, old_int, old_quit;
    sigaction(SIGINT, &ign, &old_int);
    sigaction(SIGQUIT, &ign, &old_quit);
    *pid = start_program(a->rest, lib, url, a->sample, labels, run_id);
    int status = 0;
    if (*pid >= 0)
        while (waitpid(*pid, &status, 0) < 0 && errno == EINTR) {
        }
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGQUIT, &old_quit, NULL);
    if (*pid < 0) return -1;
    /* From here on only the summary is written. If whoever reads it has gone
     * (`heapstore run … 2>&1 | head -1`), writing it fails quietly instead of
     * killing us: the server we started must still be stopped, and the
     * program's exit code is still ours to return. (Set after the fork: the
     * program keeps the disposition it was given.) */
    struct sigaction nopipe = {.sa_handler = SIG_IGN};
    sigaction(SIGPIPE, &nopipe, NULL);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* What waiting for the run found. */
typedef struct stored_run {
    json_t *run;     /* the last image of the command's process, or NULL */
    int64_t root;    /* the first image's run id */
    int stored;      /* run has ended (else still open when we gave up) */
    int server_died; /* the server we started stopped meanwhile */
} stored_run;

/* Waits until the server has stored the run (state ended or lost). The
 * server may still be working through what the collector sent before the
 * program exited, which on a busy machine takes a while: wait as long as
 * the run makes progress, and give up only when nothing has changed for a
 * while (or the server we started has died). A new image of the process
 * (exec) is a run of its own, whose parent is the one that ended: follow it
 * to the last image. */
static void wait_stored(const char *url, server_proc *sp, const char *run_id, stored_run *out)
{
    char target[256];
    snprintf(target, sizeof target, "/api/runs/%s", run_id);
    *out = (stored_run){0};
    int64_t seen_progress = -1;
    double idle_since = now_s();
    for (;;) {
        if (sp->pid > 0 && server_exited(sp)) {
            out->server_died = 1;
            return;
        }
        json_t *j = get_json(url, target, 1);
        json_t *r = json_object_get(j, "run");
        if (r) {
            if (!out->root) out->root = hs_json_int(r, "id");
            int64_t progress = run_progress(r);
            if (progress != seen_progress) {
                seen_progress = progress;
                idle_since = now_s();
            }
            json_decref(out->run);
            out->run = json_incref(r);
            out->stored = strcmp(hs_json_str(r, "state"), "open") != 0;
        }
        json_decref(j);
        if (out->stored) {
            char next[40];
            if (exec_successor(url, out->run, next, sizeof next)) return;
            snprintf(target, sizeof target, "/api/runs/%s", next);
            out->stored = 0;
            seen_progress = -1;
            idle_since = now_s();
            continue;
        }
        double idle = now_s() - idle_since;
        /* nothing at all: the collector did not run (a static program?) */
        if (!out->run && idle >= NOTHING_ARRIVED_S) return;
        if (out->run && idle >= STALLED_S) return;
        sleep_ms(100);
    }
}

/* After the program: waits for its runs and prints what they hold. Returns
 * the command's exit code. */
static int after_program(const hs_cli_args *a, const char *url, server_proc *sp, const char *run_id,
                         pid_t pid, int code, const char *how)
{
    if (!strncmp(url, "file://", 7)) { /* the collector wrote a stream file; no server */
        fprintf(stderr,
                "\nheapstore run: the profile is in %s (exit code %d); load it with: "
                "heapstore import %s\n",
                url + 7, code, url + 7);
        return code;
    }
    stored_run w;
    wait_stored(url, sp, run_id, &w);
    if (w.server_died) {
        fprintf(stderr,
                "\nheapstore run: the server storing the run stopped unexpectedly (the program "
                "exited with code %d); its log:\n",
                code);
        print_log_tail(sp->log);
        unlink(sp->log);
        json_decref(w.run);
        return code ? code : 1;
    }
    if (!w.run) {
        fprintf(stderr,
                "\nheapstore run: no run of process %d reached %s (exit code %d); was the "
                "program started, and is it dynamically linked?\n",
                (int)pid, url, code);
    } else {
        if (!w.stored)
            fprintf(stderr,
                    "\nheapstore run: run %" PRId64 " is still open (nothing new arrived for "
                    "%d s); the summary shows what is stored so far\n",
                    hs_json_int(w.run, "id"), STALLED_S);
        report(a, url, w.root, w.run, code, how);
    }
    json_decref(w.run);
    return code;
}

int hs_cmd_run(int argc, char **argv)
{
    hs_cli_args a;
    char labels[4096];
    int rc = hs_cli_parse(&a, argc, argv, "sample,label,site,wrappers", usage);
    if (rc) return rc < 0 ? 0 : rc;
    if ((rc = check_args(&a, labels, sizeof labels))) return rc;
    char bindir[PATH_MAX], lib[PATH_MAX + 64];
    if (exe_dir(bindir, sizeof bindir)) {
        fprintf(stderr, "heapstore run: cannot find where heapstore is installed\n");
        return 1;
    }
    snprintf(lib, sizeof lib, "%s/../lib/libheapstore.so", bindir);
    if (access(lib, R_OK)) {
        fprintf(stderr, "heapstore run: the collector %s is missing\n", lib);
        return 1;
    }
    char url[512], how[PATH_MAX + 64], run_id[33];
    server_proc sp = {0};
    if (destination(&a, bindir, &sp, url, sizeof url, how, sizeof how)) return 1;
    new_run_id(run_id);
    pid_t pid;
    int code = run_program(&a, lib, url, labels, run_id, &pid);
    if (code < 0) {
        fprintf(stderr, "heapstore run: cannot start a process: %s\n", strerror(errno));
        server_stop(&sp, 0);
        return 1;
    }
    code = after_program(&a, url, &sp, run_id, pid, code, how);
    server_stop(&sp, 0);
    return code;
}

/* Fuzzes the API's routing and parameter handling (hs_api_handle) against a
 * real database holding one small run. The input is "METHOD\nTARGET\nBODY".
 * Every answer must be a well-formed reply: a status in 200..599, and a JSON
 * body or a file body, never neither. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz.h"
#include "hs_queries.h"
#include "hs_schema.h"

static hs_q *q;

static const char fixture[] =
    "INSERT INTO runs(id, uuid, program, argv, host, pid, ppid, start_unix_ns, sample_bytes,"
    " max_depth, rss_interval_ms, granularity_ns, keyframe_every, state, clean_exit, end_ns,"
    " peak_bytes, peak_count, peak_t_ns, live_bytes, live_count)"
    " VALUES (1, x'000102030405060708090a0b0c0d0e0f', '/bin/prog', '[\"prog\"]', 'host', 1, 1,"
    " 1700000000000000000, 1, 64, 100, 1000000000, 60, 'ended', 1, 3000000000,"
    " 300, 3, 1500000000, 100, 1);"
    "INSERT INTO run_labels VALUES (1, 'version', '1');"
    "INSERT INTO frames (id, function, file, line, module, module_offset)"
    " VALUES (1, 'main', 'a.c', 10, '/bin/prog', 16), (2, 'leak', 'a.c', 20, '/bin/prog', 32);"
    "INSERT INTO traces VALUES (1, 0, 1, 1), (2, 1, 2, 2);"
    "INSERT INTO snapshots VALUES (1, 0, 0, 2, 200, 2), (1, 0, 1, 2, 100, 1),"
    " (1, 0, 2, 2, -200, -2), (1, 1, 2, 2, 100, 1), (1, 2, 1, 2, 300, 3);"
    "INSERT INTO heap_series VALUES (1, 0, 200, 2, 200, 200, 0), (1, 1, 300, 3, 300, 100, 0),"
    " (1, 2, 100, 1, 300, 0, 200);"
    "INSERT INTO process_samples VALUES (1, 0, 1000000, 2000000);"
    "INSERT INTO size_hist VALUES (1, 6, 3, 300);";

static void setup(void)
{
    char path[] = "/tmp/hs-fuzz-api-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) abort();
    close(fd);
    unlink(path);
    sqlite3 *db;
    char err[256];
    if (hs_schema_open(&db, path, 0, err, sizeof err) != 0) abort();
    if (sqlite3_exec(db, fixture, NULL, NULL, NULL) != SQLITE_OK) abort();
    sqlite3_close_v2(db);
    hs_qerr qerr;
    if (hs_q_open(&q, path, &qerr) != 0) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!q) setup();
    if (size > 8192) return 0;
    char *s = malloc(size + 1);
    if (!s) return 0;
    memcpy(s, data, size);
    s[size] = 0;
    char *target = strchr(s, '\n');
    if (!target) {
        free(s);
        return 0;
    }
    *target++ = 0;
    char *body = strchr(target, '\n');
    size_t body_len = 0;
    if (body) {
        *body++ = 0;
        body_len = size - (size_t)(body - s);
    }
    hs_api_reply r;
    memset(&r, 0, sizeof r);
    hs_api_handle(q, s, target, body, body_len, &r);
    if (r.status < 200 || r.status > 599 || (!r.json && !r.body && r.len)) abort();
    hs_api_reply_clear(&r);
    free(s);
    return 0;
}

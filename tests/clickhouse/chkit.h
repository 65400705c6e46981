/* chkit: a real ClickHouse server for one test: clickhouse-server started as
 * an ordinary child process with its own configuration (server.xml.in and
 * users.xml of this folder), data under a fresh directory and free
 * loopback ports; stopped (SIGTERM, then SIGKILL) and removed at the end,
 * also when the test fails (an atexit hook). Tests skip (exit 77) when
 * ClickHouse is not installed. What is not ClickHouse's (temporary
 * directories, free ports, programs under the collector) is tests/kit's.
 */
#ifndef HS_CHKIT_H
#define HS_CHKIT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define CK_SKIP 77

typedef struct ck_server {
    pid_t pid;
    int http_port, tcp_port;
    char dir[512];
} ck_server;

/* Exits with CK_SKIP, saying why on stderr, when clickhouse-server is not
 * installed (or HS_CLICKHOUSE_SERVER names no executable). */
void ck_require(void);

/* Starts a server in dir (created); shard (1 or 2) and the TCP ports of
 * the two shards of the cluster recipe go into its configuration (0, NULL:
 * a cluster of this server twice). 0 or -1 (with a message on stderr). */
int ck_start(ck_server *s, const char *dir, int shard, const int cluster_tcp[2]);
/* Stops it and keeps its data (an outage); ck_restart() starts it again
 * on the same data and ports. */
void ck_pause(ck_server *s);
int ck_restart(ck_server *s);
/* Stops it and removes its directory. */
void ck_stop(ck_server *s);

/* A store URL of database db on s, as user heapstore (or reader). */
void ck_url(const ck_server *s, const char *db, int reader, char *out, size_t len);

/* Runs sql as the default user; its answer (TabSeparated, trailing
 * newline removed) into out. 0, or -1 with ClickHouse's message in out. */
int ck_sql(const ck_server *s, const char *sql, char *out, size_t len);
/* The single integer sql answers (-1 on failure: the test then fails). */
long long ck_int(const ck_server *s, const char *sql);

/* schema/clickhouse/cluster/cluster.sql, its {cluster} named
 * heapstore_two_shards, on database db (created) of s: the recipe's
 * Distributed tables over NAME_local ones. 0, or -1 with a message on
 * stderr. */
int ck_cluster_recipe(const ck_server *s, const char *db);

/* GET path of the store at url, through the query core in this process:
 * its JSON (the caller's; fails the test unless the answer is 200). */
typedef struct json_t json_t;
json_t *ck_ask(const char *url, const char *path);
/* A fine history's points (one per bucket of g ns) as downsampling by
 * `by` makes them: per span of by buckets, its last point with the span's
 * highest heap (a new array). */
json_t *ck_spans(const json_t *points, int64_t g, int by);
/* The highest heap_max_bytes of a history's points. */
int64_t ck_highest(const json_t *points);

#endif

/* ch_base: the helpers the shipper's files (ch_ship.c, ch_marks.c,
 * ch_downsample.c, ch_resume.c) share: a run's content id, and every shard
 * of the cluster reached for the statements a Distributed table cannot
 * pass on (retention's dropped partitions, downsampling's mutations). They
 * call none of those files, so the shipper's files point one way, down to
 * this one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ch_ship_int.h"
#include "hs_buf.h"
#include "hs_error.h"

int64_t hs__chship_run_id(const uint8_t *uuid, int n)
{
    return (int64_t)hs_ch_hash(uuid ? (const void *)uuid : "", uuid ? (size_t)n : 0, 0x72);
}

/* ---- every shard of a cluster ---------------------------------------------------------------- */

#define SH_MAX_SHARDS 128

typedef struct sh_cluster {
    char name[128];                /* "" when heap_series is a plain table */
    int n;                         /* its shards */
    int num[SH_MAX_SHARDS];        /* their shard_num */
    char host[SH_MAX_SHARDS][256]; /* their first replica's host */
    int at[SH_MAX_SHARDS];         /* the connection that reaches each, -1 */
    hs_ch *conn[SH_MAX_SHARDS];    /* the connections opened */
    int nconn;
} sh_cluster;

/* The cluster behind a Distributed heap_series, and its shards. */
static int cluster_of(hs_ch *ch, sh_cluster *c, char *err, size_t errlen)
{
    hs_buf ans = {0};
    int rc = hs_ch_query(ch,
                         "SELECT engine_full FROM system.tables WHERE database = "
                         "currentDatabase() AND name = 'heap_series'",
                         NULL, 0, &ans, err, errlen);
    const char *e = ans.p && !strncmp(ans.p, "Distributed(", 12) ? ans.p + 12 : NULL;
    size_t len = 0;
    if (e) {
        e += strspn(e, " '`\"");
        len = strcspn(e, " '`\",)");
    }
    if (!rc && len >= sizeof c->name) rc = HS_EINVAL;
    for (size_t i = 0; !rc && i < len; i++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.", e[i]))
            rc = HS_EINVAL;
    if (rc == HS_EINVAL) snprintf(err, errlen, "cannot read the cluster of heap_series");
    if (!rc && len) memcpy(c->name, e, len);
    c->name[rc ? 0 : len] = 0;
    char sql[400];
    snprintf(sql, sizeof sql,
             "SELECT shard_num, host_name FROM system.clusters WHERE cluster = '%s' AND "
             "replica_num = 1 ORDER BY shard_num",
             c->name);
    if (!rc && len) rc = hs_ch_query(ch, sql, NULL, 0, &ans, err, errlen);
    hs_tsv t;
    if (!rc && len) hs_tsv_init(&t, &ans);
    while (!rc && len && hs_tsv_row(&t) && c->n < SH_MAX_SHARDS) {
        c->num[c->n] = (int)hs_tsv_i64(&t, NULL);
        size_t hl;
        const char *h = hs_tsv_field(&t, &hl);
        snprintf(c->host[c->n], sizeof c->host[0], "%s%.*s%s", memchr(h, ':', hl) ? "[" : "",
                 (int)hl, h, memchr(h, ':', hl) ? "]" : "");
        c->at[c->n++] = -1;
    }
    if (!rc && len && !c->n) {
        snprintf(err, errlen, "cluster %s of heap_series has no shards here", c->name);
        rc = HS_EINVAL;
    }
    hs_buf_free(&ans);
    return rc;
}

/* Opens addr and gives it the shards it says it is (is_local) that no
 * earlier address has; keeps it only when it got one. */
static int reach(hs_ch *like, sh_cluster *c, const char *addr, char *err, size_t errlen)
{
    hs_ch *ch;
    hs_buf ans = {0};
    char sql[300];
    int got = 0, rc = hs_ch_open_at(&ch, like, addr, err, errlen);
    snprintf(sql, sizeof sql,
             "SELECT shard_num FROM system.clusters WHERE cluster = '%s' AND is_local", c->name);
    if (!rc) rc = hs_ch_query(ch, sql, NULL, 0, &ans, err, errlen);
    hs_tsv t;
    if (!rc) hs_tsv_init(&t, &ans);
    while (!rc && hs_tsv_row(&t)) {
        int num = (int)hs_tsv_i64(&t, NULL);
        for (int i = 0; i < c->n; i++)
            if (c->num[i] == num && c->at[i] < 0) {
                c->at[i] = c->nconn;
                got = 1;
            }
    }
    hs_buf_free(&ans);
    if (rc) {
        size_t l = strlen(err);
        char msg[256];
        snprintf(msg, sizeof msg, "%.*s", (int)(l < 200 ? l : 200), err);
        snprintf(err, errlen, "shard at %s: %s", addr, msg);
    }
    if (!rc && got)
        c->conn[c->nconn++] = ch;
    else
        hs_ch_free(ch);
    return rc;
}

/* Every shard of c reached, by the store URL's shards= or by their hosts
 * at the URL's port. */
static int reach_all(hs_ch *like, sh_cluster *c, const char *what, char *err, size_t errlen)
{
    const char *list = hs_ch_shards(like), *disp = hs_ch_display(like);
    const char *slash = strchr(disp + 13, '/'), *colon = slash;
    while (colon > disp + 13 && colon[-1] != ':') colon--;
    int rc = 0;
    for (int i = 0; !rc && (list ? *list != 0 : i < c->n); i++) {
        char addr[300];
        if (list) {
            size_t len = strcspn(list, ",");
            snprintf(addr, sizeof addr, "%.*s", (int)len, list);
            list += len + (list[len] == ',');
        } else {
            snprintf(addr, sizeof addr, "%s:%.*s", c->host[i], (int)(slash - colon), colon);
        }
        if (*addr) rc = reach(like, c, addr, err, errlen);
    }
    for (int i = 0; !rc && i < c->n; i++)
        if (c->at[i] < 0) {
            snprintf(err, errlen,
                     "%s: shard %d of cluster %s is not reached; give one HTTP address "
                     "of each shard in the store URL's shards=HOST:PORT,…",
                     what, c->num[i], c->name);
            rc = HS_EINVAL;
        }
    return rc;
}

int hs__chship_each_shard(hs_ch *ch, const char *what,
                          int (*fn)(hs_ch *shard, const char *sfx, void *arg, char *err,
                                    size_t errlen),
                          void *arg, char *err, size_t errlen)
{
    sh_cluster *c = calloc(1, sizeof *c);
    if (!c) return HS_ENOMEM;
    int rc = cluster_of(ch, c, err, errlen);
    if (!rc && !c->name[0]) rc = fn(ch, "", arg, err, errlen);
    if (!rc && c->name[0]) rc = reach_all(ch, c, what, err, errlen);
    /* every shard reached first: then each one's own tables, shard by shard */
    for (int i = 0; !rc && c->name[0] && i < c->nconn; i++)
        rc = fn(c->conn[i], "_local", arg, err, errlen);
    for (int i = 0; i < c->nconn; i++) hs_ch_free(c->conn[i]);
    free(c);
    return rc;
}

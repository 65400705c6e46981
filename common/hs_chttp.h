/* hs_chttp: a ClickHouse client over its HTTP interface (libcurl), for the
 * shipper of the server (server/ch_ship.c) and the ClickHouse store of the
 * query core (queries/store_clickhouse.c).
 *
 * A store URL reads clickhouse://HOST[:PORT]/DATABASE[?user=U&password=P&
 * secure=1&insecure=1&timeout=SECONDS]: PORT defaults to 8123 (8443 with
 * secure=1, which speaks HTTPS; insecure=1 skips the certificate check;
 * any other NAME=VALUE is a ClickHouse setting sent with every query, such
 * as insert_distributed_sync=1 for a cluster), the
 * user and password travel as X-ClickHouse-User/-Key headers, never in a
 * logged URL. One hs_ch is one keep-alive connection, used by one thread at
 * a time. Answers are read whole into a buffer capped at HS_CH_ANSWER_MAX
 * (a bigger one is an error, never a partial answer); errors carry
 * ClickHouse's own message.
 *
 * RowBinary (what inserts send): integers little-endian at their width,
 * String as a LEB128 length and the bytes; the hs_rb_* writers append to
 * an hs_buf and set its oom flag instead of failing one by one.
 */
#ifndef HS_CHTTP_H
#define HS_CHTTP_H

#include <stddef.h>
#include <stdint.h>

#include "hs_buf.h"

#define HS_CH_ANSWER_MAX (256u << 20)

typedef struct hs_ch hs_ch;

/* Parses url (above) and connects lazily. 0 or HS_EINVAL with err filled. */
int hs_ch_open(hs_ch **out, const char *url, char *err, size_t errlen);
void hs_ch_free(hs_ch *c); /* accepts NULL */
/* 1 when url names a ClickHouse store (clickhouse://). */
int hs_ch_is_url(const char *url);
/* The database named by the URL, and the URL less its password, for logs. */
const char *hs_ch_database(const hs_ch *c);
const char *hs_ch_display(const hs_ch *c);
/* Settings sent with every query as URL parameters ("readonly=1&
 * max_execution_time=10"), replacing earlier ones; NULL for none. */
int hs_ch_settings(hs_ch *c, const char *params);

/* The front end's own options of the URL (never sent to ClickHouse):
 * sql_user=U&sql_password=P, the ClickHouse user /api/sql runs as (NULL:
 * the URL's user); buffer_keep=S, seconds an ended run stays in the front
 * end's buffer once shipped; downsample_after=S, the age in seconds past
 * which rollups are merged into coarser buckets, downsample_by=N buckets
 * at a time (hs_chship_downsample). hs_ch_front_option() of
 * "buffer_keep", "downsample_after" or "downsample_by": -1 when not given. */
const char *hs_ch_sql_user(const hs_ch *c);
long hs_ch_front_option(const hs_ch *c, const char *name);
/* shards=HOST:PORT,…: one HTTP address per shard of a cluster, for what
 * must run on each shard's own tables (downsampling's deletes); NULL when
 * not given. hs_ch_open_at() opens like's URL (user, options, database)
 * at another HOST:PORT. */
const char *hs_ch_shards(const hs_ch *c);
int hs_ch_open_at(hs_ch **out, const hs_ch *like, const char *hostport, char *err, size_t errlen);
/* Makes c speak as the URL's sql_user (a no-op without one). */
int hs_ch_use_sql_user(hs_ch *c);

/* Runs sql. With data (an INSERT … FORMAT RowBinary), sql travels in the
 * URL and data is the body; else sql is the body. The answer goes to out
 * (emptied first) when out is not NULL. 0, or HS_EDB (ClickHouse refused:
 * its message in err), HS_EIO (no answer: connection, timeout), HS_ENOMEM. */
int hs_ch_query(hs_ch *c, const char *sql, const void *data, size_t len, hs_buf *out, char *err,
                size_t errlen);

/* CREATE DATABASE IF NOT EXISTS of the URL's database. */
int hs_ch_create_database(hs_ch *c, char *err, size_t errlen);

/* ---- SQL literals and RowBinary ---------------------------------------------- */
/* Appends s as a quoted SQL string literal ('…' with \ and ' escaped). */
void hs_ch_quote(hs_buf *b, const char *s, size_t n);
void hs_rb_u8(hs_buf *b, uint8_t v);
void hs_rb_u64(hs_buf *b, uint64_t v);
void hs_rb_i64(hs_buf *b, int64_t v);
void hs_rb_f64(hs_buf *b, double v);
void hs_rb_str(hs_buf *b, const void *p, size_t n);

/* ---- TabSeparated answers ----------------------------------------------- */
/* A reader over a TabSeparated answer: hs_tsv_row() moves to the next row
 * (1, or 0 at the end), hs_tsv_field() unescapes its next field in place
 * (the buffer is modified) and lends it; NULL when the row has no more. */
typedef struct hs_tsv {
    char *p, *end, *row_end;
    int in_row;
} hs_tsv;
void hs_tsv_init(hs_tsv *t, hs_buf *answer);
int hs_tsv_row(hs_tsv *t);
const char *hs_tsv_field(hs_tsv *t, size_t *len);
/* The next field as an integer (0 for \N or a missing field); *null set
 * when it was \N or missing, if null is not NULL. */
int64_t hs_tsv_i64(hs_tsv *t, int *null);
double hs_tsv_f64(hs_tsv *t);

/* Content ids (runs, frames, trace nodes) keep 53 bits: JSON readers
 * such as the dashboard hold numbers as doubles, and ids travel back in
 * URLs. The odds of two of n ids colliding are about n^2 / 2^54
 * (docs/clickhouse.md). */
#define HS_CH_ID_MASK ((1ull << 53) - 1)

/* A hash of bytes masked to a content id, never 0. */
uint64_t hs_ch_hash(const void *p, size_t n, uint64_t seed);

#endif

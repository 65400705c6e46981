/* store_clickhouse: the ClickHouse store of the query core (hs_qstore.h),
 * built when the build has libcurl (HS_WITH_CLICKHOUSE). */
#ifndef HS_STORE_CLICKHOUSE_H
#define HS_STORE_CLICKHOUSE_H

#include "hs_qstore.h"

/* The version of the ClickHouse layout (schema/clickhouse/001_init.sql):
 * 2 added runs.front, key_sha and the summary figures, frames.key and the
 * span columns. What
 * /api/health calls store_schema on a ClickHouse store. */
#define HS_CH_LAYOUT_VERSION 2

/* The store at url (clickhouse://HOST[:PORT]/DATABASE?…, common/hs_chttp.h);
 * asks ClickHouse once, so that a store that cannot be reached fails here.
 * 0 or an HS_E code with err filled. */
int hs_qstore_clickhouse_open(hs_qstore **out, const char *url, hs_qerr *err);

#endif

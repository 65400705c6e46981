/* ch_base: the helpers the shipper's files (ch_ship.c, ch_marks.c,
 * ch_downsample.c, ch_resume.c) share: a run's content id and the local
 * table behind a Distributed one. They call none of those files, so the
 * shipper's files point one way, down to this one. */
#include <stdio.h>
#include <string.h>

#include "ch_ship_int.h"
#include "hs_buf.h"

int64_t hs__chship_run_id(const uint8_t *uuid, int n)
{
    return (int64_t)hs_ch_hash(uuid ? (const void *)uuid : "", uuid ? (size_t)n : 0, 0x72);
}

int hs__chship_local_table(hs_ch *ch, const char *name, char *out, size_t len, char *err,
                           size_t errlen)
{
    char sql[300];
    hs_buf ans = {0};
    snprintf(sql, sizeof sql,
             "SELECT engine FROM system.tables WHERE database = currentDatabase() AND name = '%s'",
             name);
    int rc = hs_ch_query(ch, sql, NULL, 0, &ans, err, errlen);
    int dist = !rc && ans.p && !strncmp(ans.p, "Distributed", 11);
    snprintf(out, len, "%s%s", name, dist ? "_local" : "");
    hs_buf_free(&ans);
    return rc;
}

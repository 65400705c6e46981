/* core: what every question of the typed core shares: grouping names, the
 * frame label, collapsed-stack names, and the parameters of each question
 * parsed from the text the API and the CLI take (one parser, one sentence
 * for each mistake). */
#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hs_error.h"
#include "q_internal.h"

static const char *const group_names[] = {
    [HS_GROUP_SITE] = "site", [HS_GROUP_FUNCTION] = "function", [HS_GROUP_STACK] = "stack"};

int hs_group_parse(const char *s, hs_group *out)
{
    for (size_t i = 0; s && i < HS_COUNTOF(group_names); i++)
        if (!strcmp(s, group_names[i])) {
            *out = (hs_group)i;
            return 0;
        }
    return -1;
}

const char *hs_group_name(hs_group g)
{
    assert((size_t)g < HS_COUNTOF(group_names));
    return group_names[g];
}

int hs_frame_label(char *buf, size_t len, const char *name, const char *file, int64_t line)
{
    if (!file || !*file) return snprintf(buf, len, "%s", name);
    const char *base = strrchr(file, '/');
    return snprintf(buf, len, "%s (%s:%" PRId64 ")", name, base ? base + 1 : file, line);
}

void hs__collapsed_put(hs_buf *b, const char *name)
{
    for (const char *c = name; *c;) { /* spans without ';' or ' ' whole: names rarely have them */
        size_t n = strcspn(c, "; ");
        hs_buf_put(b, c, n);
        if (!c[n]) break;
        hs_buf_put(b, c[n] == ';' ? ":" : "_", 1);
        c += n + 1;
    }
}

/* An integer parameter: a decimal in [lo, hi], else the API's sentence. */
int hs__int_text(const char *key, const char *v, int64_t lo, int64_t hi, int64_t *out, hs_qerr *err)
{
    char *end;
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || x < lo || x > hi)
        return hs__err(err, HS_EINVAL,
                       "%s must be an integer from %" PRId64 " to %" PRId64 " (not '%s')", key, lo,
                       hi, v);
    *out = x;
    return 0;
}

int hs__rows_param(const char *key, const char *value, int64_t limit_hi, int64_t *limit,
                   int *max_frames, hs_site_rules *site, hs_qerr *err)
{
    int64_t x;
    int rc = 0;
    if (!strcmp(key, "limit")) {
        if (!(rc = hs__int_text("limit", value, 1, limit_hi, &x, err))) *limit = x;
    } else if (!strcmp(key, "max_frames")) {
        if (!(rc = hs__int_text("max_frames", value, 1, HS_MAX_DEPTH, &x, err)))
            *max_frames = (int)x;
    } else if (!strcmp(key, "site")) {
        rc = hs_site_rules_parse(site, value, site->wrappers, err);
    } else if (!strcmp(key, "wrappers")) {
        site->wrappers = value;
    }
    return rc;
}

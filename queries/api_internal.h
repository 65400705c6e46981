/* api_internal: what the files of the JSON adapter (api.c, api_params.c,
 * api_trend.c) share, over the typed core (hs_core.h, q_internal.h) and
 * never seen by it: a request's decoded query parameters and the routes
 * kept in files of their own. Nothing below the adapter includes this. */
#ifndef HS_API_INTERNAL_H
#define HS_API_INTERNAL_H

#include <stdint.h>

#include "hs_core.h"
#include "hs_queries.h"

#define MAX_PARAMS 32
#define MAX_QUERY  8192

/* A request's query string, decoded: at most MAX_PARAMS pairs, keys and
 * values in buf (percent- and '+'-decoded). */
typedef struct hs__params {
    int n;
    const char *k[MAX_PARAMS], *v[MAX_PARAMS];
    char buf[2 * MAX_QUERY + 2 * MAX_PARAMS];
} hs__params;

/* Decodes qs (the part after '?', NULL or "" for none) into p. 0, or
 * HS_ETOOBIG / HS_EINVAL in err. */
int hs__params_parse(hs__params *p, const char *qs, hs_qerr *err);
/* The value of key (the first given), or NULL. */
const char *hs__param(const hs__params *p, const char *key);
int hs__param_count(const hs__params *p);
void hs__param_at(const hs__params *p, int i, const char **k, const char **v);
/* The integer parameter key, def when absent; a 400 unless a decimal in
 * [lo, hi]. */
int hs__param_int(const hs__params *p, const char *key, int64_t def, int64_t lo, int64_t hi,
                  int64_t *out, hs_qerr *err);
/* max_frames: 1 to HS_MAX_DEPTH, HS_STACK_FRAMES when absent. */
int hs__max_frames_param(const hs__params *p, int *out, hs_qerr *err);
/* min_share: a number from 0 to 1 (0 when absent). 0, or 400 in err. */
int hs__min_share_param(const hs__params *p, double *out, hs_qerr *err);

/* GET /api/trend (api_trend.c): the answer in out. */
int hs__api_trend(hs_q *q, const hs__params *params, hs_api_reply *out, hs_qerr *err);

#endif

/* core: what every question of the typed core shares: grouping names,
 * collapsed-stack names, the parameters of each question parsed from the
 * text the API and the CLI take (one parser, one sentence for each
 * mistake), and the pieces of the typed results (a run's brief, a stack
 * with its site, a moment's name). It stands on q.c and site.c and is
 * called only by the questions (top.c, views.c, diff.c, …) and the
 * adapters. */
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

/* ---- pieces of the typed results ------------------------------------------- */

const char *hs__at_name(const hs__at *at, char *buf, size_t len)
{
    if (at->kind == HS_TSEL_PEAK) return "peak";
    if (at->kind == HS_TSEL_END) return "end";
    if (at->kind == HS_TSEL_EXIT) return "exit";
    snprintf(buf, len, "%.9g", at->at_ns / 1e9);
    return buf;
}

int hs__cmp_live_bytes(const void *a, const void *b)
{
    const hs__live *x = a, *y = b;
    if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
    return (x->trace > y->trace) - (x->trace < y->trace);
}

hs_qframe hs__qframe(const hs__frame *f)
{
    return (hs_qframe){.name = f->name, .file = f->file, .module = f->module, .line = f->line};
}

int hs__qstack(hs_q *q, int64_t trace, int max_frames, hs_qstack *out, hs_qerr *err)
{
    int64_t frames[HS_MAX_DEPTH];
    memset(out, 0, sizeof *out);
    int d = hs__stack(q, trace, frames, HS_MAX_DEPTH, err);
    if (d < 0) return d;
    int n = d < max_frames ? d : max_frames;
    if (!(out->frames = malloc((size_t)(n ? n : 1) * sizeof *out->frames)))
        return hs__err(err, HS_ENOMEM, "out of memory");
    for (int k = 0; k < n; k++) {
        const hs__frame *f = hs__frame_get(q, frames[k], err);
        if (!f) return HS_EDB;
        out->frames[k] = hs__qframe(f);
    }
    out->n = n;
    out->depth = d;
    int site = hs__site_index(q, trace, frames, d, err);
    if (site < 0) return site;
    out->site = site;
    return 0;
}

const char *hs_run_drop_name(int d)
{
    static const char *const names[HS_RUNDROP__COUNT] = {
        [HS_RUNDROP_ALLOC_EVENTS] = "alloc_events",
        [HS_RUNDROP_FREE_EVENTS] = "free_events",
        [HS_RUNDROP_ALLOC_BYTES] = "alloc_bytes",
        [HS_RUNDROP_FREE_BYTES] = "free_bytes",
        [HS_RUNDROP_STACKS_TRUNCATED] = "stacks_truncated",
        [HS_RUNDROP_UNWIND_FAILED] = "unwind_failed",
        [HS_RUNDROP_LIVE_SET_FULL] = "live_set_full",
        [HS_RUNDROP_PYTHON_FALLBACK] = "python_fallback",
        [HS_RUNDROP_PYTHON_SMALL_UNSEEN] = "python_small_unseen"};
    assert(d >= 0 && d < HS_RUNDROP__COUNT);
    return names[d];
}

void hs_run_brief_of(hs_run_brief *out, const hs_run_record *record)
{
    *out = (hs_run_brief){.id = record->id,
                          .program = record->program,
                          .sample_bytes = record->sampling.sample_bytes,
                          .open = !strcmp(record->state, "open"),
                          .clean_exit = record->clean_exit == 1,
                          .record = *record};
}

int hs__run_brief(hs_run_brief *out, const hs__run *run)
{
    hs_run_brief_of(out, &run->rec);
    out->sample_bytes = run->sample_bytes;
    return 0;
}

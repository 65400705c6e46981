/* hs_config: environment parsing without allocation (see hs_config.h). */
#include "hs_config.h"

#include <stdlib.h>
#include <string.h>

#include "hs_error.h"
#include "hs_symbolize.h"

#define HS_DEFAULT_URL "tcp://127.0.0.1:7459"

static void copy_str(char *dst, size_t cap, const char *src, size_t n)
{
    if (n >= cap) n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = 0;
}

/* A decimal number, or def when the variable is unset or malformed. */
static uint64_t env_u64(const char *name, uint64_t def)
{
    const char *s = getenv(name);
    if (!s || !*s) return def;
    uint64_t v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9') return def;
        if (v > (UINT64_MAX - 9) / 10) return def;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    return v;
}

int hs_config_parse_url(hs_config *cfg, const char *url)
{
    const char *rest = url;
    if (!strncmp(url, "file://", 7)) {
        if (url[7] != '/') return HS_EINVAL;
        cfg->target = HS_TARGET_FILE;
        copy_str(cfg->path, sizeof cfg->path, url + 7, strlen(url + 7));
        return 0;
    }
    if (!strncmp(url, "tcp://", 6))
        rest = url + 6;
    else if (!strncmp(url, "http://", 7))
        rest = url + 7;
    size_t n = strcspn(rest, "/");
    const char *colon = NULL;
    for (size_t i = 0; i < n; i++)
        if (rest[i] == ':') colon = rest + i;
    if (!colon || colon == rest || (size_t)(colon - rest) >= sizeof cfg->host) return HS_EINVAL;
    size_t plen = n - (size_t)(colon + 1 - rest);
    if (plen == 0 || plen >= sizeof cfg->port) return HS_EINVAL;
    for (size_t i = 0; i < plen; i++)
        if (colon[1 + i] < '0' || colon[1 + i] > '9') return HS_EINVAL;
    const char *h = rest;
    size_t hlen = (size_t)(colon - rest);
    if (hlen >= 2 && h[0] == '[' && h[hlen - 1] == ']') { /* [::1]:7459 */
        h++;
        hlen -= 2;
    }
    cfg->target = HS_TARGET_TCP;
    copy_str(cfg->host, sizeof cfg->host, h, hlen);
    copy_str(cfg->port, sizeof cfg->port, colon + 1, plen);
    return 0;
}

void hs_config_load(hs_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    const char *s = getenv("HEAPSTORE_DISABLE");
    cfg->disabled = s && *s && strcmp(s, "0") != 0;
    cfg->sample_bytes = env_u64("HEAPSTORE_SAMPLE_BYTES", 524288);
    if (cfg->sample_bytes == 0) cfg->sample_bytes = 524288;
    uint64_t depth = env_u64("HEAPSTORE_DEPTH", 64);
    if (depth < 1) depth = 1;
    if (depth > 1024) depth = 1024;
    cfg->depth = (uint32_t)depth;
    cfg->rss_ms = env_u64("HEAPSTORE_RSS_MS", 100);
    cfg->buffer_bytes = env_u64("HEAPSTORE_BUFFER_MB", 64) << 20;
    if (cfg->buffer_bytes < (1u << 20)) cfg->buffer_bytes = 1u << 20;
    cfg->exit_flush_ms = env_u64("HEAPSTORE_EXIT_FLUSH_MS", 2000);
    cfg->live_max =
        env_u64("HEAPSTORE_LIVE_MAX", cfg->sample_bytes == 1 ? (16u << 20) : (1u << 20));
    if (cfg->live_max < 4096) cfg->live_max = 4096;
    cfg->seed = env_u64("HEAPSTORE_SEED", 0);
    if ((s = getenv("HEAPSTORE_LINES"))) {
        if (strcmp(s, "all") == 0) cfg->lines = HS_LINES_ALL;
        if (strcmp(s, "none") == 0) cfg->lines = HS_LINES_NONE;
    }

    s = getenv("HEAPSTORE_UNWIND");
    if (s && strcmp(s, "libunwind") == 0) cfg->unwind = HS_UNWIND_LIBUNWIND;
    if (s && strcmp(s, "own") == 0) cfg->unwind = HS_UNWIND_OWN;

    const char *url = getenv("HEAPSTORE_URL");
    if (!url || !*url) url = HS_DEFAULT_URL;
    copy_str(cfg->url, sizeof cfg->url, url, strlen(url));
    if (hs_config_parse_url(cfg, url) != 0) hs_config_parse_url(cfg, HS_DEFAULT_URL);
    if ((s = getenv("HEAPSTORE_LABELS"))) copy_str(cfg->labels, sizeof cfg->labels, s, strlen(s));
    if ((s = getenv("HEAPSTORE_TOKEN"))) copy_str(cfg->token, sizeof cfg->token, s, strlen(s));
}

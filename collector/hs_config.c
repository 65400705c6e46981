/* hs_config: environment parsing without allocation (see hs_config.h). */
#include "hs_config.h"

#include <assert.h>

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hs_error.h"
#include "hs_proto.h"
#include "hs_symbolize.h"

#define HS_DEFAULT_URL "tcp://127.0.0.1:7459"
#define DAY_MS         86400000ull
#define LIVE_MAX_MAX   (1ull << 32) /* 64 shards of 2^26 entries (hs_liveset.c) */
#define VALUE_SHOWN    200          /* bytes of a bad value quoted on stderr */

static void copy_str(char *dst, size_t cap, const char *src, size_t n)
{
    if (n >= cap) n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = 0;
}

/* ---- saying what was wrong ---- */

/* One line for stderr, built without stdio. */
typedef struct line {
    char buf[VALUE_SHOWN + 512];
    size_t len;
} line;

static void put(line *l, const char *s)
{
    for (; *s && l->len < sizeof l->buf - 1; s++) l->buf[l->len++] = *s;
}

static void put_u64(line *l, uint64_t v)
{
    char d[24];
    int n = 0;
    do d[n++] = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    while (n > 0 && l->len < sizeof l->buf - 1) l->buf[l->len++] = d[--n];
}

/* "heapstore: NAME='VALUE' " (the value cut, control bytes shown as '?'). */
static void begin(line *l, const char *name, const char *value)
{
    l->len = 0;
    put(l, "heapstore: ");
    put(l, name);
    put(l, "='");
    size_t i = 0;
    for (; value[i] && i < VALUE_SHOWN && l->len < sizeof l->buf - 1; i++)
        l->buf[l->len++] = (unsigned char)value[i] < 0x20 || value[i] == 0x7f ? '?' : value[i];
    if (value[i]) put(l, "...");
    put(l, "' ");
}

/* Writes the line with write(2): this runs inside the first hook call, where
 * stdio may not be used. Settings are read once per process (a fork child
 * inherits them from its parent, which has said it), so each bad value is
 * named once. */
static void say(line *l)
{
    l->buf[l->len++] = '\n'; /* put() leaves room for it */
    if (write(2, l->buf, l->len) < 0) {
    }
}

/* ---- numbers and words ---- */

/* A decimal number within [lo, hi], def when the variable is unset. A
 * malformed value is named on stderr and gives def; one out of range gives
 * the nearest bound. note follows the value used in the line. */
static uint64_t env_u64(const char *name, uint64_t def, uint64_t lo, uint64_t hi, const char *note)
{
    const char *s = getenv(name);
    if (!s || !*s) return def;
    uint64_t v = 0, used = def;
    line l;
    begin(&l, name, s);
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9') {
            put(&l, "is not a decimal number");
            goto bad;
        }
        if (v > (UINT64_MAX - 9) / 10) {
            put(&l, "is too large");
            goto bad;
        }
        v = v * 10 + (uint64_t)(*p - '0');
    }
    if (v >= lo && v <= hi) return v;
    used = v < lo ? lo : hi;
    put(&l, v < lo ? "is less than " : "is more than ");
    put_u64(&l, used);
bad:
    put(&l, "; using ");
    put_u64(&l, used);
    put(&l, note);
    say(&l);
    return used;
}

/* The index of the variable's value in words[0..n), def when unset; anything
 * else is named on stderr and gives def. */
static int env_word(const char *name, const char *const *words, int n, int def)
{
    const char *s = getenv(name);
    if (!s || !*s) return def;
    for (int i = 0; i < n; i++)
        if (!strcmp(s, words[i])) return i;
    line l;
    begin(&l, name, s);
    put(&l, "is not ");
    for (int i = 0; i < n; i++) {
        put(&l, words[i]);
        put(&l, i == n - 1 ? "" : i == n - 2 ? " or " : ", ");
    }
    put(&l, "; using ");
    put(&l, words[def]);
    say(&l);
    return def;
}

/* One TCP address of HEAPSTORE_URL, the n bytes at s: [tcp://|http://]
 * HOST:PORT, with anything from a '/' on ignored; HOST may be [v6]. 0 or
 * HS_EINVAL. */
static int parse_addr(hs_config_addr *a, const char *s, size_t n)
{
    if (n >= 6 && !strncmp(s, "tcp://", 6)) {
        s += 6;
        n -= 6;
    } else if (n >= 7 && !strncmp(s, "http://", 7)) {
        s += 7;
        n -= 7;
    } else if (memmem(s, n, "://", 3)) {
        return HS_EINVAL; /* a scheme we do not speak (or file:// in a list) */
    }
    const char *slash = memchr(s, '/', n);
    if (slash) n = (size_t)(slash - s);
    const char *colon = NULL;
    for (size_t i = 0; i < n; i++)
        if (s[i] == ':') colon = s + i;
    if (!colon || colon == s || (size_t)(colon - s) >= sizeof a->host) return HS_EINVAL;
    size_t plen = n - (size_t)(colon + 1 - s);
    if (plen == 0 || plen > 5) return HS_EINVAL;
    unsigned port = 0;
    for (size_t i = 0; i < plen; i++) {
        if (colon[1 + i] < '0' || colon[1 + i] > '9') return HS_EINVAL;
        port = port * 10 + (unsigned)(colon[1 + i] - '0');
    }
    if (port == 0 || port > 65535) return HS_EINVAL;
    const char *h = s;
    size_t hlen = (size_t)(colon - s);
    if (hlen >= 2 && h[0] == '[' && h[hlen - 1] == ']') { /* [::1]:7459 */
        h++;
        hlen -= 2;
    }
    if (hlen == 0) return HS_EINVAL;
    copy_str(a->host, sizeof a->host, h, hlen);
    copy_str(a->port, sizeof a->port, colon + 1, plen);
    return 0;
}

static int blank(char c)
{
    return c == ' ' || c == '\t';
}

int hs_config_parse_url(hs_config *cfg, const char *url)
{
    if (strlen(url) >= sizeof cfg->url) return HS_EINVAL;
    if (!strncmp(url, "file://", 7)) {
        if (url[7] != '/') return HS_EINVAL;
        cfg->target = HS_TARGET_FILE;
        copy_str(cfg->path, sizeof cfg->path, url + 7, strlen(url + 7));
        return 0;
    }
    /* ADDR[,ADDR]...: each item trimmed of blanks, none empty. */
    int n = 0;
    for (const char *p = url;; p++) {
        size_t len = strcspn(p, ",");
        const char *e = p + len;
        while (p < e && blank(*p)) p++;
        while (e > p && blank(e[-1])) e--;
        if (e == p || n == HS_CONFIG_ADDRS) return HS_EINVAL;
        if (parse_addr(&cfg->addr[n], p, (size_t)(e - p))) return HS_EINVAL;
        n++;
        p += strcspn(p, ",");
        if (!*p) break;
    }
    assert(n >= 1 && n <= HS_CONFIG_ADDRS);
    cfg->naddr = n;
    cfg->target = HS_TARGET_TCP;
    return 0;
}

void hs_config_load(hs_config *cfg)
{
    /* Zero-filled already (see hs_config.h): a memset of its 12 KiB cost
     * 13,000 instructions and three page faults in every process. */
    assert(cfg->disabled == 0 && cfg->target == 0 && cfg->url[0] == 0);
    const char *s = getenv("HEAPSTORE_DISABLE");
    cfg->disabled = s && *s && strcmp(s, "0") != 0;
    if (cfg->disabled) return; /* nothing is recorded: nothing else matters */
    line l;

    const char *url = getenv("HEAPSTORE_URL");
    if (!url || !*url) url = HS_DEFAULT_URL;
    copy_str(cfg->url, sizeof cfg->url, url, strlen(url));
    if (hs_config_parse_url(cfg, url) != 0) {
        /* Sending elsewhere than where the user meant would be worse than
         * sending nothing. */
        begin(&l, "HEAPSTORE_URL", url);
        put(&l, strchr(url, ',') ? "is not a list of at most " HS_CONFIG_ADDRS_S
                                   " addresses (tcp://HOST:PORT, http://HOST:PORT or "
                                   "HOST:PORT) separated by commas; recording is off"
                                 : "is not tcp://HOST:PORT, http://HOST:PORT, HOST:PORT or "
                                   "file:///PATH; recording is off");
        say(&l);
        cfg->disabled = 1;
        return;
    }
    if ((s = getenv("HEAPSTORE_TOKEN"))) {
        if (strlen(s) >= sizeof cfg->token) { /* a cut token would only be refused */
            l.len = 0;
            put(&l, "heapstore: HEAPSTORE_TOKEN is longer than 255 bytes; recording is off");
            say(&l);
            cfg->disabled = 1;
            return;
        }
        copy_str(cfg->token, sizeof cfg->token, s, strlen(s));
    }

    /* 0 has long meant the default. */
    cfg->sample_bytes = env_u64("HEAPSTORE_SAMPLE_BYTES", 524288, 0, UINT64_MAX, "");
    if (cfg->sample_bytes == 0) {
        begin(&l, "HEAPSTORE_SAMPLE_BYTES", getenv("HEAPSTORE_SAMPLE_BYTES"));
        put(&l, "is not an interval (1 records every allocation); using 524288");
        say(&l);
        cfg->sample_bytes = 524288;
    }
    cfg->depth = (uint32_t)env_u64("HEAPSTORE_DEPTH", 64, 1, HS_STACK_MAX_DEPTH, "");
    cfg->rss_ms = env_u64("HEAPSTORE_RSS_MS", 100, 0, DAY_MS, "");
    cfg->buffer_bytes = env_u64("HEAPSTORE_BUFFER_MB", 64, 1, UINT64_MAX >> 20, "") << 20;
    cfg->exit_flush_ms = env_u64("HEAPSTORE_EXIT_FLUSH_MS", 2000, 0, DAY_MS, "");
    cfg->symbol_upload_max = env_u64("HEAPSTORE_SYMBOL_UPLOAD_MAX", 64u << 20, 0, UINT64_MAX, "");
    cfg->live_max = env_u64("HEAPSTORE_LIVE_MAX", cfg->sample_bytes == 1 ? (16u << 20) : (1u << 20),
                            4096, LIVE_MAX_MAX, "");
    cfg->seed = env_u64("HEAPSTORE_SEED", 0, 0, UINT64_MAX, " (a random seed)");
    static const char *const lines[] = {"auto", "all", "none"};
    static const int lines_v[] = {HS_LINES_AUTO, HS_LINES_ALL, HS_LINES_NONE};
    cfg->lines = lines_v[env_word("HEAPSTORE_LINES", lines, 3, 0)];
    static const char *const unwind[] = {"fast", "libunwind", "own"};
    static const int unwind_v[] = {HS_UNWIND_FAST, HS_UNWIND_LIBUNWIND, HS_UNWIND_OWN};
    cfg->unwind = unwind_v[env_word("HEAPSTORE_UNWIND", unwind, 3, 0)];

    if ((s = getenv("HEAPSTORE_LABELS"))) {
        if (strlen(s) >= sizeof cfg->labels) {
            begin(&l, "HEAPSTORE_LABELS", s);
            put(&l, "is longer than 4095 bytes; using its first 4095");
            say(&l);
        }
        copy_str(cfg->labels, sizeof cfg->labels, s, strlen(s));
    }
}

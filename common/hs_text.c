/* hs_text: durations and percent-decoding. */
#include "hs_text.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hs_error.h"

int hs_parse_duration(const char *s, uint64_t *out)
{
    static const struct {
        const char *unit;
        double ns;
    } units[] = {{"", 1e9}, {"s", 1e9},  {"ms", 1e6},  {"us", 1e3},
                 {"ns", 1}, {"m", 60e9}, {"h", 3600e9}};
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !(v >= 0) || !isfinite(v)) return HS_EINVAL;
    for (size_t i = 0; i < HS_COUNTOF(units); i++) {
        if (strcmp(end, units[i].unit)) continue;
        double ns = v * units[i].ns;
        if (ns > 1e18) return HS_ERANGE;
        *out = (uint64_t)llround(ns);
        return 0;
    }
    return HS_EINVAL;
}

static int hexval(int ch)
{
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

long hs_pct_decode(char *out, size_t cap, const char *s, size_t n, int flags)
{
    size_t w = 0;
    if (!cap) return -1;
    for (size_t i = 0; i < n; i++) {
        int ch = (unsigned char)s[i];
        if (ch == '%') {
            int hi = i + 2 < n ? hexval(s[i + 1]) : -1;
            int lo = hi >= 0 ? hexval(s[i + 2]) : -1;
            if (lo < 0 || (hi | lo) == 0) return -1;
            ch = hi * 16 + lo;
            i += 2;
        } else if (ch == '+' && (flags & HS_PCT_PLUS)) {
            ch = ' ';
        }
        if (w + 1 >= cap) return -1;
        out[w++] = (char)ch;
    }
    out[w] = '\0';
    return (long)w;
}

int hs_ct_eq(const void *a, size_t an, const void *b, size_t bn)
{
    const unsigned char *x = a, *y = b;
    unsigned diff = (unsigned)(an != bn);
    for (size_t i = 0; i < an && i < bn; i++) diff |= (unsigned)(x[i] ^ y[i]);
    return diff == 0; /* no early exit: the time does not tell how much matched */
}

void hs_hex(char *out, const uint8_t *p, size_t n)
{
    static const char hx[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hx[p[i] >> 4];
        out[2 * i + 1] = hx[p[i] & 15];
    }
    out[2 * n] = 0;
}

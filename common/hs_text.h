/* hs_text: the small text decoders every front end shares.
 *
 * hs_parse_duration() reads the durations of command-line options (the
 * server's timeouts and granularity, `heapstore import --granularity`);
 * hs_pct_decode() undoes the percent-encoding of URL paths (the dashboard's
 * static files) and query strings (the JSON API). Each caller adds its own
 * rules on top (a minimum duration, characters a path may not hold); the
 * spelling is decided here, once. hs_ct_eq() compares secrets (tokens,
 * resume keys) for the server's every check.
 */
#ifndef HS_TEXT_H
#define HS_TEXT_H

#include <stddef.h>
#include <stdint.h>

/* Parses a non-negative duration into nanoseconds: a decimal number (strtod
 * syntax) followed by "ns", "us", "ms", "s", "m" or "h"; a bare number is
 * seconds ("100ms", "1.5s", "2m", "1h", "500us", "10ns", "30"). Returns 0,
 * HS_EINVAL for anything else (negative, NaN, infinite, other unit, trailing
 * text) or HS_ERANGE above 1e18 ns (about 31 years). *out is set only on 0. */
int hs_parse_duration(const char *s, uint64_t *out);

/* '+' decodes to a space (application/x-www-form-urlencoded query strings);
 * without it '+' stays itself (URL paths). */
#define HS_PCT_PLUS 1

/* Decodes the n bytes at s into out (cap bytes, always NUL-terminated on
 * success): "%XX" with two hex digits of either case is that byte, anything
 * else is copied. Returns the decoded length, or -1 when an escape is
 * truncated or not hex ("%4", "%zz"), decodes to NUL ("%00"), or the result
 * and its NUL do not fit in cap. flags: 0 or HS_PCT_PLUS. */
long hs_pct_decode(char *out, size_t cap, const char *s, size_t n, int flags);

/* 1 if the an bytes at a equal the bn bytes at b, compared in a time that
 * depends on the lengths only, never on how much of them matched. */
int hs_ct_eq(const void *a, size_t an, const void *b, size_t bn);

/* The n bytes at p as lower-case hex into out (2n + 1 bytes, NUL
 * included): build ids and run ids as people and paths spell them. */
void hs_hex(char *out, const uint8_t *p, size_t n);

#endif

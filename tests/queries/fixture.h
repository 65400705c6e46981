/* fixture: databases with a known heap, written through the server's own
 * storage code (hs_store) from protocol frames, so that the rollups the
 * queries read are the real ones.
 *
 * Runs "app" (labels version=1 and version=2): g = 100 ms, keyframes every 4
 * buckets, sample_bytes 1 (exact), 2.0 s long.
 *   stack 4 config_load <- main: 5000 B at 0.01 s, kept
 *   stack 1 leak_site <- main:   1000 B at k*100+50 ms, k = 0..19
 *           version=1 keeps all (20000 B at the end);
 *           version=2 frees the previous one (1000 B at the end) and its
 *           leak_site frame has another line (21), as in a rebuilt program
 *   stack 2 tmp_alloc <- work <- main: 300 B from k*100+20 to k*100+60 ms
 *   stack 3 big_alloc <- main:   100000 B from 1.07 s to 1.25 s
 * Version 1: peak 117300 B at exactly 1.15 s (config + 12 leaks + big + tmp);
 * end 25000 B in 21 blocks. Version 2: peak 106300 B, end 6000 B.
 */
#ifndef HS_TEST_FIXTURE_H
#define HS_TEST_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#define FX_PEAK_BYTES    117300
#define FX_PEAK_NS       1150000000LL
#define FX_END_BYTES     25000
#define FX_END_COUNT     21
#define FX_V2_END_BYTES  6000
#define FX_V2_PEAK_BYTES 106300

/* Writes runs 1 (version=1) and 2 (version=2) into a new database at path.
 * Returns 0 or a negative code. */
int fx_build(const char *path);

/* Writes one run (program trend, 5 s, g = 100 ms, sample_bytes 1) whose
 * sites grow in shapes a straight line in time fits badly:
 *   paced_leak: 1000 B in each of buckets 0-2 and 44-46, never freed (a leak
 *               whose program paused in between; r^2 about 0.37);
 *   cache_fill: 1000 B in each of buckets 0-4, never freed (full early);
 *   churn:      +3000 B in even buckets, -2000 B in odd ones.
 * Returns 0 or a negative code. */
int fx_build_trend(const char *path);

/* A fresh temporary path (in $TMPDIR or /tmp) ending in name. */
void fx_tmp_path(char *out, size_t len, const char *name);

#endif

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
 * end 25000 B in 21 blocks. Version 2: peak 107300 B at 1.15 s (a leaked
 * block and the one that replaces it, allocated before it is freed), end
 * 6000 B.
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
#define FX_V2_PEAK_BYTES 107300

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

/* Writes one run (program empty, 1 s, g = 100 ms) that allocated nothing.
 * Returns 0 or a negative code. */
int fx_build_empty(const char *path);

/* Writes one run (program rank, 6 s, g = 100 ms, keyframes every 4
 * buckets, sample_bytes 1) whose traces rank differently by every measure
 * but the right one. Buckets b = 0..59, events at b*100+50 ms:
 *   late        9500 B at b 36, freed at b 38     (max 9500)
 *   spike       9000 B at b 3, freed at b 5       (max 9000)
 *   leak        140 B at every b, kept            (max 8400 = end; a leak)
 *   churn       7000 B at even b, freed at odd b  (max 7000, 210000 B allocated)
 *   tie_a       6000 B at b 10, freed at b 12     (max 6000)
 *   tie_b       6000 B at b 20, freed at b 22     (max 6000)
 *   paced       1000 B at b 0-2 and 53-55, kept   (max 6000 = end; a leak by
 *                                                  steadiness, r^2 < 0.5)
 *   decline     6000 B at b 0, 100 B freed at b 1..59 (max 6000, end 100)
 *   freed_late  100 B at b 0..58, all freed at b 59 (max 5900, end 0; a leak
 *                                                  until its last bucket)
 *   cache       1000 B at b 0-4, kept             (max 5000; full early)
 *   flash       50000 B at b 15 +10 ms, freed at +20 ms (no delta row at all)
 *   filler_i    50*i B at b i+1, kept, i = 1..20  (max 50*i)
 *   twin_a      10 B at every b, kept             (max 600; a leak)
 *   twin_b      the same as twin_a                (the same score)
 *   reshape     200 B at b 29; at b 30 freed and 2 x 100 B allocated (a
 *               delta row of 0 B and +1 block)
 *   busy_1..16  10 B at even b, freed at odd b    (max 10: enough delta rows
 *               that the writer's summaries, rewritten every 16 delta rows
 *               per trace changed, are written after buckets 33 and 50)
 * Stacks are defined in this order (trace ids grow along it). Top by max:
 * late, spike, leak, churn, then decline, paced, tie_a, tie_b (6000 each, in
 * content order: by their names), freed_late, cache, filler_20 … Growing at
 * the end: leak, paced, twin_a, twin_b (equal scores in content order).
 *
 * checkpoint, when not NULL, is called once with the run open and the
 * events of buckets 0..37 committed (delta rows up to bucket 36, summaries
 * in trace_stats up to bucket 33); then the store is closed
 * and reopened, as by a server restart, and the run resumed (its rollups
 * rebuilt from its events) and finished. At the checkpoint the top is late,
 * spike, churn, decline, tie_a, tie_b, leak (5180), cache, freed_late
 * (3700), paced; growing: leak, freed_late, twin_a, twin_b.
 * Returns 0 or a negative code. */
int fx_build_rank(const char *path, void (*checkpoint)(const char *path, void *data), void *data);

/* Only from fx_build_rank's checkpoint: writes the events of the rank run's
 * next bucket and commits them (the run stays open; the checkpoint's later
 * work goes on from there). 0 or a negative code. */
int fx_rank_step(void);

/* Run 1: FX_QUIET_STACKS traces each holding a block of 100 bytes from the
 * start, and one more that allocates 1000 bytes in every one of
 * FX_QUIET_BUCKETS buckets of 100 ms (keyframe_every 4) and frees it in the
 * next: many live traces, one change a bucket. */
#define FX_QUIET_STACKS  64
#define FX_QUIET_BUCKETS 100
int fx_build_quiet(const char *path);

/* Rewrites every events row of the database at path as what schemas before
 * 6 stored (the EVENTS payload, protocol version 1), leaving user_version
 * alone: with it set below 6 the file is such a database. 0 or a negative
 * code. */
int fx_events_to_wire(const char *path);

/* A fresh temporary path (in $TMPDIR or /tmp) ending in name. */
void fx_tmp_path(char *out, size_t len, const char *name);

#endif

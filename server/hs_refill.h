/* hs_refill: names the frames stored while their build could not be found,
 * once a file of it can be read.
 *
 * A frame the symbolizer could not name is stored under module and offset
 * (frames key "\x1fmodule\x1foffset"). The symbolizer thread tells this
 * module of every build it found no file for (hs_refill_missing), and at
 * start it lists the builds the database holds such frames of (the runs'
 * mappings rows: path and build id; hs_refill_scan). Every
 * HS_REFILL_CHECK_MS, or at once after hs_refill_recheck (an upload ended),
 * it looks for their files again (a late upload, `heapstore symbols add`,
 * a file put in the search path); for a build found, it reads that path's
 * unnamed frames on the thread's read-only connection, names each from the
 * build (the innermost function at the offset, with its file and line: the
 * functions it is inlined into are not added as frames of their own) and
 * hands them to the writer in REFILL jobs of at most HS_REFILL_BATCH rows,
 * one at a time, each applied in a transaction of its own
 * (hs_store_frames_name: rows keep their id, so traces, rollups and queries
 * need no change). It goes on from where it was once the writer hands a job
 * back (hs_refill_done), and ends a build with a read that finds nothing
 * after a job came back: a frame committed late by jobs queued before the
 * refill began is named too.
 * A frame is left unnamed when a run that maps the same path under another
 * build (or under none) uses it: module and offset then name two builds'
 * code, which need not be the same function.
 *
 * Owned and used by the symbolizer thread only; db (read-only) and syms are
 * the thread's and outlive the hs_refill.
 */
#ifndef HS_REFILL_H
#define HS_REFILL_H

#include <stdint.h>

#include <sqlite3.h>

#include "hs_symbols.h"
#include "hs_writer.h"

#define HS_REFILL_CHECK_MS    1000 /* missing builds are looked for again this often */
#define HS_REFILL_BATCH       256  /* frames rows read, and at most named, per job */
#define HS_REFILL_MISSING_MAX 256  /* builds remembered as missing (the oldest go) */

typedef struct hs_refill hs_refill;

int hs_refill_new(hs_refill **out, sqlite3 *db, hs_syms *syms);
void hs_refill_free(hs_refill *f);

/* Build bid (blen > 0), mapped at path, has no file: look for it later. */
void hs_refill_missing(hs_refill *f, const uint8_t *bid, size_t blen, const char *path);
/* Lists the builds whose frames the database holds unnamed, as missing. */
void hs_refill_scan(hs_refill *f);
/* Look for the missing builds at the next step (a file has just come). */
void hs_refill_recheck(hs_refill *f);

/* The next REFILL job to submit (its on_done left for the caller to set),
 * or NULL: none now, or one is out. *due_ns (CLOCK_MONOTONIC) is when to
 * step again at the latest, 0 when only news (missing, recheck, done) can
 * bring work. */
hs_wjob *hs_refill_step(hs_refill *f, uint64_t now_ns, uint64_t *due_ns);
/* The writer applied j (the job out): takes it back and frees it. */
void hs_refill_done(hs_refill *f, hs_wjob *j);

/* How many REFILL jobs have named frames since the process started. Frames
 * rows change in place only through them: a reader that keeps frames in
 * memory across requests (the query connections pooled by server/http.c)
 * drops what it holds when this moves. Any thread. */
uint64_t hs_refill_generation(void);

#endif

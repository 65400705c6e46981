/* hs_symd: the server's symbolizer thread, a stage between the loop and the
 * writer for the jobs that carry module tables or pcs to name.
 *
 * The loop hands it the FRAMES jobs holding MAPPINGS or SYMBOLS frames, and
 * every later job of the same connection while one is still here (a
 * connection's jobs keep their order). The thread reads MAPPINGS into the
 * connection's module list, rewrites SYMBOLS frames with names
 * (hs_syms_rewrite: function, file, line, inlined frames), and submits the
 * job to the writer. It owns one hs_syms for the life of the server: every
 * build is read once and then answered from memory for every later run;
 * each answer read from a file also goes to the writer, with the job, for
 * the database's symbol_cache (schema 007), which the thread reads, on its
 * own read-only connection, before any file: a build named before a
 * restart, or by another server process on the same database, is not read
 * again.
 * Only the connection waits while its build is read; the writer and the
 * other connections go on (their jobs without SYMBOLS go straight to the
 * writer).
 *
 * The loop owns each hs_symd_conn (inside its connection); the thread
 * touches it from hs_symd_submit() until it has submitted that job to the
 * writer, and never after. The loop counts the jobs it sent here until the
 * writer returns them, and sends a connection's later jobs here while any
 * is out (so they keep their order); its DETACH, sent after them, returns
 * after them, so the struct outlives the thread's use of it.
 */
#ifndef HS_SYMD_H
#define HS_SYMD_H

#include "hs_symbols.h"
#include "hs_writer.h"

typedef struct hs_symd hs_symd;

typedef struct hs_symd_conn {
    hs_syms_stream stream; /* the thread's only */
} hs_symd_conn;

int hs_symd_start(hs_symd **out, const hs_syms_config *cfg, hs_writer *w, const char *db_path);
/* Queues j (of connection c, NULL for a job of no connection) for the
 * thread, which passes it on to the writer. */
void hs_symd_submit(hs_symd *d, hs_symd_conn *c, hs_wjob *j);
/* 1 if j must go through the thread (it has MAPPINGS or SYMBOLS). */
int hs_symd_wants(const hs_wjob *j);
/* Finishes the queued jobs, ends the thread, logs its figures, frees d. */
void hs_symd_stop(hs_symd *d);

#endif

/* hs_sender: the background thread that owns the output.
 *
 * One thread per run drains the program threads' rings, symbolizes new pcs,
 * and turns everything into protocol frames (docs/protocol.md) kept in a
 * queue of mapped chunks. For tcp:// it writes them on a non-blocking socket,
 * keeps each frame until the server's ACK covers it and, after a lost
 * connection, reconnects with backoff (100 ms doubling to 5 s) and resends
 * from the oldest unacknowledged frame under a HELLO with HS_HELLO_RESUMED.
 * The queue is bounded by HEAPSTORE_BUFFER_MB: past it, EVENTS are dropped
 * and counted (DROPS), never MAPPINGS, SYMBOLS or STACKS. For file:// frames
 * are written and forgotten. The program's threads only append to their rings
 * and, rarely, ring the rings' doorbell (hs_thread.h), on which this thread
 * sleeps; they never wait for the network, and never call this module.
 * The output is opened lazily, at the first sample, at exit, or 100 ms into
 * the run, so a fork child that execs at once leaves no trace.
 * A list of addresses in HEAPSTORE_URL (front ends of one store): the run
 * starts on address HEAPSTORE_SEED mod n, or its pid mod n when the seed
 * is random (a fork child draws again), so that a fleet spreads over the
 * list. A connection that fails (refused, unreachable, not established
 * within CONNECT_MAX_MS) or is lost moves the run to the next address at
 * once, as does a REFUSE (a front end may lack what the run needs); the
 * backoff applies only once every address has failed in a row, and the run
 * is refused for good only when every address has refused it in a row. An
 * ACK ends a row. The run resumes on its new front end as after any lost
 * connection; with one address nothing of this costs anything.
 * The server's requests for a module's symbol tables (SYMREQ) are handed to
 * hs_symup, whose frames go out between the run's own when those are all
 * sent (hs_symup.h).
 */
#ifndef HS_SENDER_H
#define HS_SENDER_H

#include <stdatomic.h>
#include <stdint.h>

/* Starts the thread if it is not running. 0 or a negative HS_E code. */
int hs__sender_start(void);
/* A sample was taken: open the output at the next round (no system call). */
void hs__sender_activate(void);
/* 1 while the thread will still drain rings. */
int hs__sender_alive(void);
/* The end of the run: drain, send BYE with bye_flags (HS_BYE_*), wait at most
 * HEAPSTORE_EXIT_FLUSH_MS for delivery. Reports undelivered data on stderr.
 * When the thread has not run yet, the caller (unless it interrupted
 * collector code) does the last round and the delivery itself instead of
 * waiting for the thread to be scheduled. Under the caller's guard. */
void hs__sender_finish(unsigned bye_flags);
/* Fork child: forget the parent's queue, socket and thread. */
void hs__sender_reset_child(void);

#endif

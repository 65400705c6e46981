/* hs_symup: the collector's answers to SYMREQ, a server's request for the
 * symbol tables of a module it has no file of (docs/protocol.md, SYMDATA).
 *
 * Owned by the sender thread and called only from it (hs_sender.c): the
 * frame reader hands it each SYMREQ, the send loop asks it for bytes to
 * put on the socket. It answers only for builds the process has loaded,
 * each build at most once per process, HEAPSTORE_SYMBOL_UPLOAD_MAX bytes in
 * all (0: it never says it can answer). What it sends is the module's file
 * cut down to what symbolization reads: the ELF header and program headers,
 * the notes, the symbol and string tables and every section the program
 * does not load (.debug_*, .gnu_debuglink), the loaded ones turned into
 * NOBITS, as `objcopy --only-keep-debug` does; taken from the build's
 * separate debug file under /usr/lib/debug/.build-id when this machine has
 * one, else from the object's path. The file's build id is checked before
 * anything is sent; a file that is gone, changed or not ELF64 little-endian
 * is declined (SYMDATA with total 0), and a read that comes up short
 * mid-way gives the upload up the same way.
 *
 * Bounds: one upload at a time, in pieces of 256 KiB read with pread and
 * compressed with hs_lz, at most 5 ms of that work in every 20 ms (so the
 * sender thread drains the program's rings as often as without an upload);
 * a piece is prepared only when the run's own frames are all on the
 * socket, so an upload never holds events back, and a piece partly written
 * goes on before anything else (frames cannot interleave).
 * At most 16 requests wait; its buffers (about 1.6 MiB, mmap'ed) exist
 * only while there is work. A lost connection forgets the requests and the
 * piece under way: the server asks again on the next one.
 */
#ifndef HS_SYMUP_H
#define HS_SYMUP_H

#include <stddef.h>
#include <stdint.h>

/* HS_HELLO_SYMDATA if the collector answers requests (a tcp target and a
 * non-zero HEAPSTORE_SYMBOL_UPLOAD_MAX), else 0. */
unsigned hs__symup_hello_flags(void);
/* A SYMREQ payload from the server. */
void hs__symup_request(const uint8_t *p, size_t len);
/* Bytes to write next: 1 with [*p, *p + *n) when a frame is partly written,
 * or when idle (every frame of the run is on the socket) and an upload
 * has a frame ready; 0 when there is nothing. */
int hs__symup_out(const uint8_t **p, size_t *n, int idle);
/* n bytes of what hs__symup_out gave were written. */
void hs__symup_wrote(size_t n);
/* 1 while a frame is partly written (the socket must be polled for room). */
int hs__symup_busy(void);
/* 1 while requests wait or an upload is under way: the end of the run
 * gives them at most 1 s past the delivery of its frames, within its flush
 * bound (HEAPSTORE_EXIT_FLUSH_MS). */
int hs__symup_pending(void);
/* The run has ended (BYE is queued): the sender thread has no rings left
 * to drain, and uploads go on without the bound per 20 ms. */
void hs__symup_final(void);
/* The connection is gone. */
void hs__symup_conn_lost(void);

#endif

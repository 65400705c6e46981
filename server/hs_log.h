/* hs_log: one line per event on stderr, "heapstore-server: <UTC time> <message>".
 * Safe from any thread (each line is one write). */
#ifndef HS_LOG_H
#define HS_LOG_H

void hs_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif

/* hs_log: one line per event on stderr, "heapstore-server: <UTC time> <message>".
 * Safe from any thread (each line is one write).
 *
 * Repeats are said once: a message like one logged less than
 * HS_LOG_REPEAT_S seconds before ("like": the same text once every run of
 * digits is taken as one, so that peers, connection ids and counts do not
 * make lines differ) is counted instead of written. When the period is over
 * the count is written as one line, "[repeated N times in the last S s]
 * <the last of them>", at the next like message, or by hs_log_flush(). So
 * the first of a burst is always written in full, nothing is lost from the
 * count, and a fault that repeats on every reconnect (a full disk) writes
 * a line or two per period instead of one per attempt.
 */
#ifndef HS_LOG_H
#define HS_LOG_H

#define HS_LOG_REPEAT_S 10

void hs_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Writes the counts of repeats whose period is over (all of them when
 * all is set: at the end). The writer thread calls it at each wakeup. */
void hs_log_flush(int all);

#endif

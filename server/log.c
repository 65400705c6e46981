/* hs_log: timestamped lines on stderr, repeats counted (hs_log.h). */
#include "hs_log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LOG_LINE 1024
#define LOG_KEYS 32 /* kinds of message remembered at once (least recent forgotten) */

typedef struct seen {
    uint64_t key;        /* 0: free */
    uint64_t since_ns;   /* start of the period (monotonic) */
    uint64_t used_ns;    /* last time seen */
    uint64_t repeats;    /* not written in this period */
    char last[LOG_LINE]; /* the last of them */
} seen;

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static seen log_seen[LOG_KEYS];

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* FNV-1a over the text with each run of digits taken as one '#'. */
static uint64_t msg_key(const char *m)
{
    uint64_t h = 1469598103934665603ull;
    int digits = 0;
    for (const unsigned char *p = (const unsigned char *)m; *p; p++) {
        int d = *p >= '0' && *p <= '9';
        if (d && digits) continue;
        digits = d;
        h = (h ^ (d ? '#' : *p)) * 1099511628211ull;
    }
    return h ? h : 1;
}

static void emit(const char *msg)
{
    char line[LOG_LINE + 64];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "heapstore-server: %04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000000, msg);
    size_t len = n < 0 ? 0 : (size_t)n;
    if (len > sizeof line - 2) len = sizeof line - 2;
    line[len++] = '\n';
    ssize_t w = write(2, line, len);
    (void)w;
}

/* Writes e's count of repeats, if any, and starts a new period. */
static void emit_repeats(seen *e, uint64_t now)
{
    if (e->repeats) {
        char msg[LOG_LINE + 96];
        snprintf(msg, sizeof msg, "[repeated %llu times in the last %llu s] %s",
                 (unsigned long long)e->repeats,
                 (unsigned long long)((now - e->since_ns + 999999999ull) / 1000000000ull), e->last);
        emit(msg);
    }
    e->repeats = 0;
    e->since_ns = now;
}

void hs_log(const char *fmt, ...)
{
    char msg[LOG_LINE];
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (m < 0) msg[0] = 0;
    uint64_t key = msg_key(msg), now = mono_ns(), period = HS_LOG_REPEAT_S * 1000000000ull;
    pthread_mutex_lock(&log_mu);
    seen *e = NULL, *victim = NULL;
    for (int i = 0; i < LOG_KEYS && !e; i++)
        if (log_seen[i].key == key) e = &log_seen[i];
    for (int i = 0; i < LOG_KEYS && !e; i++) {
        seen *k = &log_seen[i];
        if (!victim || !k->key || (victim->key && k->used_ns < victim->used_ns)) victim = k;
        if (!k->key) break;
    }
    if (!e) {
        /* A new kind: the forgotten one's repeats are written first. */
        emit_repeats(victim, now);
        e = victim;
        e->key = key;
        e->since_ns = now;
        e->used_ns = now;
        emit(msg);
    } else if (now - e->since_ns < period) {
        e->repeats++;
        e->used_ns = now;
        snprintf(e->last, sizeof e->last, "%s", msg);
    } else {
        emit_repeats(e, now);
        e->used_ns = now;
        emit(msg);
    }
    pthread_mutex_unlock(&log_mu);
}

void hs_log_flush(int all)
{
    uint64_t now = mono_ns(), period = HS_LOG_REPEAT_S * 1000000000ull;
    pthread_mutex_lock(&log_mu);
    for (int i = 0; i < LOG_KEYS; i++) {
        seen *e = &log_seen[i];
        if (e->key && e->repeats && (all || now - e->since_ns >= period)) emit_repeats(e, now);
    }
    pthread_mutex_unlock(&log_mu);
}

/* hs_clock: the clocks read as nanoseconds, and the deadlines that
 * pthread_cond_timedwait takes, for every server thread that waits with a
 * bound (the writer, the ClickHouse shipper). Header only. */
#ifndef HS_CLOCK_H
#define HS_CLOCK_H

#include <stdint.h>
#include <time.h>

/* clk (CLOCK_MONOTONIC, CLOCK_REALTIME) in nanoseconds. */
static inline uint64_t hs_clock_ns(clockid_t clk)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The CLOCK_REALTIME moment ms milliseconds from now, as a timespec. */
static inline struct timespec hs_deadline_ms(uint64_t ms)
{
    uint64_t t = hs_clock_ns(CLOCK_REALTIME) + ms * 1000000ull;
    return (struct timespec){(time_t)(t / 1000000000ull), (long)(t % 1000000000ull)};
}

#endif

/* hs-chresume: the collector's side of a moved run, for
 * bench/clickhouse/resume.sh: connects to a front end and sends the HELLO
 * of hs-loadgen's run of connection IDX (the same uuid and resume key,
 * bench/server/loadgen.c) flagged resumed, from FIRST_SEQ, then waits for
 * the answer (an ACK, or a REFUSE) and prints the time it took: on a front
 * end whose buffer lacks the run, the time to fetch it from ClickHouse and
 * open it (hs_chship_resume, then the store's resumption).
 *
 *   hs-chresume PORT IDX FIRST_SEQ
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "hs_proto.h"
#include "hs_testkit.h"

static uint64_t rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: hs-chresume PORT IDX FIRST_SEQ\n");
        return 2;
    }
    int port = atoi(argv[1]), idx = atoi(argv[2]);
    uint64_t first = strtoull(argv[3], NULL, 10);
    uint64_t seed = 0x9e3779b97f4a7c15ull * (uint64_t)(idx + 1); /* as hs-loadgen */
    uint8_t id[16];
    for (int i = 0; i < 16; i++) id[i] = (uint8_t)rng(&seed);
    tk_buf b = {0};
    tk_header(&b);
    tk_hello(&b, id, first, HS_HELLO_RESUMED, NULL);
    int fd = tk_connect(port);
    if (fd < 0) return 1;
    uint64_t t0 = tk_now_ms(), got = 0;
    char reason[256] = "";
    if (tk_send(fd, b.p, b.len)) return 1;
    int rc = tk_wait_ack(fd, first, &got, reason, sizeof reason, 600000);
    uint64_t t1 = tk_now_ms();
    printf("ms=%llu answer=%s next_seq=%llu %s\n", (unsigned long long)(t1 - t0),
           rc == 0   ? "ack"
           : rc == 1 ? "refuse"
                     : "none",
           (unsigned long long)got, reason);
    close(fd);
    tk_buf_free(&b);
    return rc == 0 ? 0 : 1;
}

/* hs_config: the collector's settings, read once from the environment.
 *
 * HEAPSTORE_URL          tcp://HOST:PORT | http://HOST:PORT | HOST:PORT | file:///PATH
 *                        (default tcp://127.0.0.1:7459), or a list of up to
 *                        HS_CONFIG_ADDRS TCP addresses separated by commas
 *                        (blanks around each allowed; file:// stands alone):
 *                        front ends of one store, which the sender spreads
 *                        over and fails over between (hs_sender.h)
 * HEAPSTORE_SAMPLE_BYTES mean sampling interval in bytes (default 524288; 1 = all)
 * HEAPSTORE_DEPTH        frames kept per stack (default 64, at most 1024)
 * HEAPSTORE_RSS_MS       period of RSS / virtual size samples (default 100; 0 = off)
 * HEAPSTORE_BUFFER_MB    bound of unsent + unacknowledged frames (default 64)
 * HEAPSTORE_EXIT_FLUSH_MS how long exit, _exit or exec waits for the flush
 *                        (default 2000)
 * HEAPSTORE_SYMBOL_UPLOAD_MAX bytes of symbol tables the collector may send to a
 *                        server that lacks a module's file (default 64 MiB; 0 = off)
 * HEAPSTORE_LABELS       key=value,key=value (sent in HELLO)
 * HEAPSTORE_TOKEN        sent in HELLO when the server demands one
 * HEAPSTORE_LIVE_MAX     most sampled blocks tracked at once (default 16M at
 *                        sample rate 1, 1M otherwise)
 * HEAPSTORE_LINES        source file and line: auto (default: DWARF in the
 *                        objects themselves, not separate compressed debug
 *                        files such as libc6-dbg's), all, or none
 * HEAPSTORE_UNWIND       fast (default: our own unwinder, libunwind for the
 *                        stacks it cannot walk), libunwind (always), or own
 *                        (ours only: stacks it cannot walk count as
 *                        unwind_failed; for diagnosis and tests)
 * HEAPSTORE_SEED         seed of the sampler (0 or unset: random); for tests
 * HEAPSTORE_DISABLE=1    forward every call, record nothing
 *
 * Parsing uses getenv and plain loops only: it runs inside the first hook call
 * and must not allocate. The strings are copied into the struct.
 *
 * A value that cannot be used is named on stderr, in one line written with
 * write(2) that says what is used instead: the default for a malformed
 * number or word, the nearest bound for a number out of range. A URL that
 * cannot be parsed (or a token too long to send) turns recording off. The
 * settings are read once per process, so a fork child does not repeat the
 * line; an exec'd program reads them again.
 */
#ifndef HS_CONFIG_H
#define HS_CONFIG_H

#include <stdint.h>

#define HS_CONFIG_STR     4096
#define HS_CONFIG_ADDRS   16 /* more front ends than this: put a balancer in front */
#define HS_CONFIG_ADDRS_S "16"

enum hs_target_kind { HS_TARGET_TCP = 1, HS_TARGET_FILE = 2 };
enum hs_unwind_mode { HS_UNWIND_FAST = 0, HS_UNWIND_LIBUNWIND = 1, HS_UNWIND_OWN = 2 };

/* One TCP address of HEAPSTORE_URL. */
typedef struct hs_config_addr {
    char host[256]; /* a name or a literal address, without [] */
    char port[8];   /* decimal, 1..65535 */
} hs_config_addr;

/* Ordered by what every process writes: the numbers, then the URL's copy,
 * then the first address, so that the few bytes written fall in as few
 * pages as may be (each page first written costs a fault); what only a
 * list, a file target, a token or labels write comes after. */
typedef struct hs_config {
    int disabled;
    int target; /* enum hs_target_kind */
    int naddr;  /* TCP: addresses listed, 1..HS_CONFIG_ADDRS */
    uint32_t depth;
    uint64_t sample_bytes;
    uint64_t rss_ms;
    uint64_t buffer_bytes;
    uint64_t exit_flush_ms;
    uint64_t symbol_upload_max; /* bytes of symbol tables sent in all; 0: none (hs_symup.h) */
    uint64_t live_max;
    uint64_t seed;
    int lines;  /* enum hs_lines (hs_symbolize.h) */
    int unwind; /* enum hs_unwind_mode */
    char url[HS_CONFIG_STR];
    /* TCP: the addresses in the order listed; only addr[0..naddr) written */
    hs_config_addr addr[HS_CONFIG_ADDRS];
    char path[HS_CONFIG_STR]; /* FILE */
    char token[256];
    char labels[HS_CONFIG_STR];
} hs_config;

/* Fills cfg, zero-filled (as a static object is), from the environment (see
 * above for bad values). */
void hs_config_load(hs_config *cfg);

/* Splits a URL (or a list) as described above into cfg's target fields
 * (target, path or naddr and addr). 0 or HS_EINVAL; on HS_EINVAL the
 * target fields are left partly written, and recording is off. */
int hs_config_parse_url(hs_config *cfg, const char *url);

#endif

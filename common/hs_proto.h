/* hs_proto: the heapstore stream protocol, version 1 (docs/protocol.md).
 *
 * One decoder and one encoder for every frame, shared by the collector (which
 * writes), the server and `heapstore import` (which read), `heapstore dump`,
 * the load generator and the fuzzers. Decoders are pure functions over
 * (bytes, len): they borrow from the payload (strings point into it), never
 * allocate, and enforce every limit below, so a hostile peer can make them
 * fail but never make them read out of bounds or allocate without bound.
 * Encoders write into an hs_wr and never allocate either.
 */
#ifndef HS_PROTO_H
#define HS_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "hs_wire.h"

#define HS_PROTO_VERSION 1
#define HS_MAGIC_LEN     8
extern const uint8_t hs_magic[HS_MAGIC_LEN]; /* 0x89 'H' 'S' 'P' '\r' '\n' 0x1a '\n' */

/* Hard limits on what a peer controls. */
#define HS_FRAME_MAX        (16u << 20) /* payload bytes of one frame */
#define HS_STR_MAX          4096        /* program, host, path, file, label, argv entry */
#define HS_FUNC_MAX         16384       /* a (demangled) function name */
#define HS_BUILD_ID_MAX     64
#define HS_HELLO_MAX_ARGS   256
#define HS_HELLO_MAX_LABELS 64
#define HS_STACK_MAX_DEPTH  1024
#define HS_RESUME_KEY_MAX   64 /* bytes of HELLO's resume_key */
#define HS_FRAME_HDR_MAX    5  /* type byte + a length varint padded to 4 bytes */

enum hs_frame_type {
    /* collector -> server; every type but HELLO has a sequence number */
    HS_FRAME_HELLO = 0x01,
    HS_FRAME_MAPPINGS = 0x02,
    HS_FRAME_SYMBOLS = 0x03,
    HS_FRAME_STACKS = 0x04,
    HS_FRAME_EVENTS = 0x05,
    HS_FRAME_PROCESS = 0x06,
    HS_FRAME_SIZES = 0x07,
    HS_FRAME_DROPS = 0x08,
    HS_FRAME_BYE = 0x09,
    /* collector -> server, without a sequence number: a module's symbol
     * tables, asked for by SYMREQ */
    HS_FRAME_SYMDATA = 0x10,
    /* server -> collector */
    HS_FRAME_ACK = 0x40,
    HS_FRAME_REFUSE = 0x41,
    HS_FRAME_SYMREQ = 0x42, /* a build the server wants the tables of */
};

/* Name of a frame type ("EVENTS"), or NULL for an unknown type. */
const char *hs_frame_name(int type);

/* Counters of the DROPS frame. Values are cumulative since the run began. */
enum hs_drop_kind {
    HS_DROP_ALLOC_EVENTS = 1,         /* sampled allocations not sent (buffer full) */
    HS_DROP_FREE_EVENTS = 2,          /* frees of sampled blocks not sent */
    HS_DROP_ALLOC_BYTES = 3,          /* estimated bytes (weights) of the dropped allocations */
    HS_DROP_FREE_BYTES = 4,           /* estimated bytes (weights) of the dropped frees */
    HS_DROP_STACKS_TRUNCATED = 5,     /* samples whose stack was deeper than the depth limit */
    HS_DROP_UNWIND_FAILED = 6,        /* samples whose stack could not be unwound */
    HS_DROP_LIVE_SET_FULL = 7,        /* sampled blocks whose free cannot be recognised */
    HS_DROP_PYTHON_FALLBACK = 8,      /* samples in Python code left with native frames only (an
                                         unsupported interpreter) or with part of their Python stack */
    HS_DROP_MAIN_END_NS = 9,          /* not a count: the time (ns from the run's start, > 0) when
                                         the program's main code finished and its Python
                                         interpreter began its teardown; 0 while it has not */
    HS_DROP_PYTHON_SMALL_UNSEEN = 10, /* 1: a Python interpreter whose small objects (pymalloc's)
                                         the collector cannot see: found after its start-up, or
                                         PYTHONMALLOC keeps them from malloc */
    HS_DROP_KIND_MAX = 10,
};
/* The name of a DROPS kind, an exact-heap kind included; NULL for an unknown one. */
const char *hs_drop_name(int kind);

/* An observation of the process's exact heap (docs/protocol.md, "Exact heap
 * totals"). It travels as DROPS entries of kinds HS_EXACT_KIND_FIRST to
 * HS_EXACT_KIND_LAST, all in one DROPS frame: readers from before it skip
 * kinds they do not know, so old servers keep taking new collectors'
 * streams. Bytes are the allocator's usable sizes of the blocks (what
 * malloc_usable_size says), not the requested sizes. */
enum hs_exact_kind {
    HS_EXACT_T_NS = 32,        /* when observed, ns from the run's start (> 0) */
    HS_EXACT_LIVE_BYTES = 33,  /* live heap then */
    HS_EXACT_MAX_BYTES = 34,   /* the highest live heap since the previous observation */
    HS_EXACT_MAX_T_NS = 35,    /* ... and when it was reached */
    HS_EXACT_PEAK_BYTES = 36,  /* the highest live heap since the run began */
    HS_EXACT_PEAK_T_NS = 37,   /* ... and when */
    HS_EXACT_ALLOCS = 38,      /* allocations since the run began */
    HS_EXACT_FREES = 39,       /* frees (of blocks other than NULL) */
    HS_EXACT_ALLOC_BYTES = 40, /* bytes of those allocations */
    HS_EXACT_FREE_BYTES = 41,  /* bytes of those frees */
    HS_EXACT_ERROR_BYTES = 42, /* bound on |live figure - true live heap| at any moment */
    HS_EXACT_FLAGS = 43,       /* HS_EXACT_F_* */
    HS_EXACT_KIND_FIRST = HS_EXACT_T_NS,
    HS_EXACT_KIND_LAST = HS_EXACT_FLAGS,
};

/* Flags of an exact observation. */
#define HS_EXACT_F_CALLED   0x1u /* sizes from the allocator's malloc_usable_size (not glibc's) */
#define HS_EXACT_F_NO_SMALL 0x2u /* samples see objects the totals leave out (pymalloc's) */

typedef struct hs_exact {
    uint64_t t_ns;
    uint64_t live_bytes;
    uint64_t max_bytes, max_t_ns;
    uint64_t peak_bytes, peak_t_ns;
    uint64_t allocs, frees, alloc_bytes, free_bytes;
    uint64_t error_bytes;
    uint64_t flags;
} hs_exact;

/* Flags of HELLO. */
#define HS_HELLO_RESUMED 0x1u /* a reconnection of a run the server may know */
#define HS_HELLO_SYMDATA 0x2u /* the collector answers SYMREQ with SYMDATA */
/* Flags of BYE. */
#define HS_BYE_CLEAN 0x1u /* the process ended through exit(), _exit() or return from main */
#define HS_BYE_EXEC  0x2u /* ... or replaced its image with exec (CLEAN is set too) */

typedef struct hs_frame {
    uint8_t type;
    uint32_t len;
    const uint8_t *payload;
} hs_frame;

/* Checks the stream header at the front of buf. Returns the header's length
 * (> 0), 0 if more bytes are needed, HS_EPROTO for a wrong magic, HS_EVERSION
 * for a version this code does not speak. */
int hs_header_parse(const uint8_t *buf, size_t len, uint32_t *version);

/* Splits one frame off the front of buf. Returns the bytes it spans (> 0), 0
 * if buf holds only part of it, HS_EPROTO for a bad length varint, HS_ETOOBIG
 * for a payload over HS_FRAME_MAX. Does not judge the type. */
long hs_frame_split(const uint8_t *buf, size_t len, hs_frame *out);

typedef struct hs_label {
    hs_str key, value;
} hs_label;

typedef struct hs_hello {
    uint8_t run_id[16];
    uint64_t first_seq; /* sequence number of the frame after this one */
    uint64_t flags;
    uint64_t pid, ppid;
    uint8_t parent_run_id[16]; /* all zero: none */
    uint64_t start_unix_ns;
    uint64_t sample_bytes; /* mean sampling interval; 1 = every allocation */
    uint64_t max_depth;
    uint64_t rss_interval_ms;
    hs_str program;
    uint32_t argc;
    hs_str argv[HS_HELLO_MAX_ARGS];
    hs_str hostname;
    uint32_t nlabels;
    hs_label labels[HS_HELLO_MAX_LABELS];
    hs_str token;
    hs_str collector_version;
    /* The secret a resumed HELLO must repeat (docs/protocol.md): chosen at
     * random by the collector when its run starts. Optional on the wire:
     * empty (len 0) when absent, and then not encoded at all. */
    hs_str resume_key;
} hs_hello;

int hs_hello_decode(hs_hello *out, const uint8_t *p, size_t len);
void hs_hello_encode(hs_wr *wr, const hs_hello *h);

/* Batches: begin reads the batch header, next yields entries. next returns 1
 * with an entry, 0 at the end of a well-formed batch, or a negative HS_E code
 * (the batch is then malformed: trailing bytes, a count that does not match,
 * a value out of range). */

typedef struct hs_mapping {
    uint64_t start, end, file_offset;
    const uint8_t *build_id;
    uint32_t build_id_len;
    hs_str path;
} hs_mapping;

typedef struct hs_batch_it {
    hs_rd rd;
    uint64_t left;
    uint64_t t;   /* EVENTS: running time; MAPPINGS: the snapshot time */
    uint64_t aux; /* EVENTS: index of the entry */
} hs_batch_it;

int hs_mappings_begin(hs_batch_it *it, const uint8_t *p, size_t len);
int hs_mappings_next(hs_batch_it *it, hs_mapping *out);

typedef struct hs_symbol {
    uint64_t pc;
    hs_str function; /* demangled; empty when unknown */
    hs_str file;     /* empty when unknown */
    uint64_t line;   /* 0 when unknown */
    hs_str module;   /* path of the object holding pc; empty when none */
    uint64_t module_offset;
} hs_symbol;

int hs_symbols_begin(hs_batch_it *it, const uint8_t *p, size_t len);
int hs_symbols_next(hs_batch_it *it, hs_symbol *out);

typedef struct hs_stack {
    uint64_t id; /* > 0, unique within the run */
    uint32_t depth;
    uint64_t pcs[HS_STACK_MAX_DEPTH]; /* [0] is the allocation site, last the outermost */
} hs_stack;

int hs_stacks_begin(hs_batch_it *it, const uint8_t *p, size_t len);
int hs_stacks_next(hs_batch_it *it, hs_stack *out);

typedef struct hs_event {
    uint64_t t_ns; /* since the run's start */
    uint64_t stack_id;
    int is_free;
    uint64_t size;   /* requested bytes of the block */
    uint64_t weight; /* estimated bytes this sample stands for (>= size) */
} hs_event;

int hs_events_begin(hs_batch_it *it, const uint8_t *p, size_t len);
int hs_events_next(hs_batch_it *it, hs_event *out);

typedef struct hs_process_sample {
    uint64_t t_ns, rss_bytes, vsize_bytes;
} hs_process_sample;

int hs_process_begin(hs_batch_it *it, const uint8_t *p, size_t len);
int hs_process_next(hs_batch_it *it, hs_process_sample *out);

typedef struct hs_size_bucket {
    uint32_t bucket; /* sizes in [2^b, 2^(b+1)); bucket 0 also holds size 0 */
    uint64_t allocs, bytes;
} hs_size_bucket;

#define HS_SIZE_BUCKETS 64

/* The SIZES bucket of a request of n bytes. */
static inline unsigned hs_size_bucket_of(uint64_t n)
{
    return 63u - (unsigned)__builtin_clzll(n | 1);
}

int hs_sizes_begin(hs_batch_it *it, const uint8_t *p, size_t len);
int hs_sizes_next(hs_batch_it *it, hs_size_bucket *out);

typedef struct hs_drop {
    uint32_t kind; /* enum hs_drop_kind; unknown kinds are kept, not rejected */
    uint64_t value;
} hs_drop;

int hs_drops_begin(hs_batch_it *it, const uint8_t *p, size_t len);
int hs_drops_next(hs_batch_it *it, hs_drop *out);

/* Writes x as DROPS entries into the payload being written. */
void hs_exact_put(hs_wr *wr, const hs_exact *x);
/* Takes one DROPS entry into *x: 1 when its kind is an exact-heap kind
 * (x->t_ns > 0 then says an observation was seen), 0 for any other kind. */
int hs_exact_take(hs_exact *x, const hs_drop *d);

typedef struct hs_bye {
    uint64_t t_end_ns;
    uint64_t flags;
    uint64_t alloc_events; /* sampled allocation events emitted over the run */
    uint64_t free_events;
    uint64_t collector_peak_bytes; /* the collector's own memory */
} hs_bye;

int hs_bye_decode(hs_bye *out, const uint8_t *p, size_t len);
void hs_bye_encode(hs_wr *wr, const hs_bye *b);

int hs_ack_decode(uint64_t *next_seq, const uint8_t *p, size_t len);

/* SYMREQ (server -> collector): the build id (1 to HS_BUILD_ID_MAX bytes)
 * of a module whose tables the server lacks. */
int hs_symreq_decode(const uint8_t **bid, uint32_t *blen, const uint8_t *p, size_t len);
void hs_symreq_encode(hs_wr *wr, const uint8_t *bid, uint32_t blen);

/* SYMDATA (collector -> server, docs/protocol.md): bytes [offset, offset +
 * size) of a file of total bytes holding the symbol tables of build bid,
 * in pieces sent in order; data is that piece stored (method 0) or
 * compressed (method 1, HS_SYMDATA_LZ: hs_lz.h). total 0 (and no data):
 * the collector will not send that build, or gives up on it. */
#define HS_SYMDATA_RAW   0
#define HS_SYMDATA_LZ    1
#define HS_SYMDATA_PIECE (1u << 20) /* bytes of a piece, uncompressed */
/* The largest file a server takes (it closes a connection that sends more):
 * a collector declines a larger build. */
#define HS_SYMDATA_FILE_MAX (512ull << 20)
typedef struct hs_symdata {
    const uint8_t *bid;
    uint32_t blen;
    uint32_t method;
    uint64_t offset, total;
    uint32_t size; /* uncompressed bytes of the piece */
    hs_str data;   /* as sent */
} hs_symdata;
int hs_symdata_decode(hs_symdata *out, const uint8_t *p, size_t len);
/* The fields before data; the caller appends data (hs_wr_str). */
void hs_symdata_head(hs_wr *wr, const hs_symdata *d);
int hs_refuse_decode(hs_str *reason, const uint8_t *p, size_t len);

/* Encoding. A frame is written as: pos = hs_frame_begin(wr, type); payload;
 * hs_frame_end(wr, pos). The length is written as a varint padded to four
 * bytes so it can be filled in afterwards. */
void hs_header_encode(hs_wr *wr);
size_t hs_frame_begin(hs_wr *wr, uint8_t type);
void hs_frame_end(hs_wr *wr, size_t pos);

void hs_mapping_put(hs_wr *wr, const hs_mapping *m);
void hs_symbol_put(hs_wr *wr, const hs_symbol *s);
void hs_stack_put(hs_wr *wr, uint64_t id, const uint64_t *pcs, uint32_t depth);
/* dt_ns: time since the previous event of the batch (or since t0 for the first). */
void hs_event_put(hs_wr *wr, uint64_t dt_ns, uint64_t stack_id, int is_free, uint64_t size,
                  uint64_t weight);

#endif

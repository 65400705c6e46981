/* hsp_model: a .hsp stream file read back into what the collector tests
 * check, with the shared decoder of common/hs_proto. Besides decoding, it
 * checks the stream's own rules as it goes (sequence numbers consecutive,
 * every pc defined before a stack uses it, every stack before an event uses
 * it, a free's weight as its allocation's, BYE last and its event counts
 * equal to what the stream holds) and records the first violation. */
#ifndef HSP_MODEL_H
#define HSP_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "hs_proto.h"

typedef struct hsp_sym {
    uint64_t pc;
    char *function, *file, *module;
    uint64_t line, module_offset;
} hsp_sym;

typedef struct hsp_stack {
    uint64_t id;
    uint32_t depth;
    uint64_t *pcs;
    uint64_t allocs, alloc_bytes, alloc_weight;
    uint64_t frees, free_bytes, free_weight;
    int exact_weights; /* every event had weight == size */
} hsp_stack;

typedef struct hsp_model {
    uint8_t *buf;
    size_t len;
    hs_hello hello; /* strings borrow buf */
    int has_hello, has_bye;
    hs_bye bye;
    hsp_sym *syms;
    size_t nsyms;
    hsp_stack *stacks; /* index = id - 1 */
    size_t nstacks;
    uint64_t alloc_events, free_events;
    uint64_t drops[HS_DROP_KIND_MAX + 1];
    uint64_t sizes_n[64], sizes_b[64];
    uint64_t process_samples, mapping_frames, frames;
    uint64_t native_named; /* SYMBOLS entries of a module that came with a function */
    uint64_t events_frames;
    uint64_t max_rss;
    /* events of exactly watch_size bytes, whatever their stack */
    uint64_t watch_size, watch_allocs, watch_frees, watch_alloc_weight, watch_free_weight;
    char error[256]; /* empty when the stream is well-formed */
} hsp_model;

/* 0, or -1 when the file cannot be read (then error says why). A malformed
 * stream still returns 0 with error set and what decoded before it.
 * watch_size: also count the events of exactly this size (0: none). */
int hsp_load(hsp_model *m, const char *path, uint64_t watch_size);
void hsp_free(hsp_model *m);
const hsp_sym *hsp_sym_of(const hsp_model *m, uint64_t pc);
/* Function name of frame i of a stack ("" when unknown or out of range). */
const char *hsp_frame_fn(const hsp_model *m, const hsp_stack *s, uint32_t i);

#endif

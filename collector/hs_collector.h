/* hs_collector: the collector's life, and the state every module shares.
 *
 * libheapstore.so is preloaded into a program; hs_hooks.c interposes the
 * allocator entry points and writes the process-wide state declared here
 * (defined in hs_state.c, below every other module, so that reading it
 * depends on no layer above): the
 * settings (read once, at the first hook call or at load), the identity of
 * the run (a random 128-bit id, its parent's id after fork or exec, its start
 * time), the counters of dropped data, and the switch that turns recording
 * off once the run has ended (after the exit flush, every hook forwards).
 * A fork child becomes a new run in the atfork child handler: fresh stack
 * ids, live set, rings and sender, so nothing the parent's other threads held
 * can be waited on. exec, _exit and _Exit end the run as exit does
 * (delivered, then BYE), and an exec'd image starts its own run linked to it.
 */
#ifndef HS_COLLECTOR_H
#define HS_COLLECTOR_H

#include <stdatomic.h>
#include <stdint.h>

#include "hs_config.h"
#include "hs_proto.h"

typedef struct hs_run {
    uint8_t run_id[16];
    uint8_t parent_run_id[16];
    uint64_t start_ns;      /* CLOCK_MONOTONIC at the run's start */
    uint64_t start_unix_ns; /* the same moment, wall clock */
    int has_parent;         /* forked or exec'd from a profiled process */
    int forked;             /* a fork child: write PATH.<pid> */
    int pid;                /* the process the run belongs to (not a vfork child) */
} hs_run;

extern hs_config hs__cfg;
extern hs_run hs__run;
extern atomic_int hs__recording; /* 0 before init, when disabled and after the run ended */
extern _Atomic uint64_t hs__drops[HS_DROP_KIND_MAX + 1];

/* Ends the run as exit does: everything delivered within
 * HEAPSTORE_EXIT_FLUSH_MS, then BYE with bye_flags (HS_BYE_*); recording is
 * off afterwards. Does nothing when the caller may not end the run (a vfork
 * child, for one: see hs_exit.c). Called by exit, exec, _exit and _Exit. */
void hs__run_end(unsigned bye_flags);

static inline void hs__drop_add(int kind, uint64_t n)
{
    atomic_fetch_add_explicit(&hs__drops[kind], n, memory_order_relaxed);
}

#endif

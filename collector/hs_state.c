/* hs_state: the process-wide state every module shares (hs_collector.h).
 *
 * Defined here, at the bottom of the collector's layers, so that every module
 * reads it without depending on the one that writes it: hs_hooks.c sets the
 * settings and the run's identity at init (and again in a fork child) and
 * switches recording on and off; any module may add to the drop counters.
 */
#include "hs_collector.h"

hs_config hs__cfg;
hs_run hs__run;
atomic_int hs__recording;
_Atomic uint64_t hs__drops[HS_DROP_KIND_MAX + 1];

/* The sender's side of the rings, played by a unit test (test_ring.c,
 * test_sampler.c link hs_thread.c without the real sender): the three
 * functions of hs_sender.h that hs_thread.c calls, answering from these
 * variables. A test that drains the rings itself moves the heartbeat the way
 * the sender's rounds do. */
#ifndef HS_UNIT_SENDER_H
#define HS_UNIT_SENDER_H

#include <stdatomic.h>

#include "hs_sender.h"

extern atomic_int unit_sender_alive; /* what hs__sender_alive answers */
extern atomic_int unit_sender_wakes; /* calls of hs__sender_wake */

#endif

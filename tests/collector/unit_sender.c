/* The sender's side of the rings, played by a unit test (see unit_sender.h). */
#include "unit_sender.h"

atomic_int unit_sender_alive;
atomic_int unit_sender_wakes;
_Atomic uint64_t hs__sender_heartbeat;

void hs__sender_wake(void)
{
    atomic_fetch_add(&unit_sender_wakes, 1);
}

int hs__sender_alive(void)
{
    return atomic_load(&unit_sender_alive);
}

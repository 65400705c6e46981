/* hs_map: an open-addressing hash map from 64-bit keys to 64-bit values.
 *
 * Used for the per-run tables the writer consults for every decoded entry
 * (collector pc -> frame id, stack id -> rollup slot) and for connection
 * ids. Linear probing over a power-of-two table kept at most half full; a
 * slot is empty when its stored value is 0 (values are kept plus one), so
 * every 64-bit key, 0 included, can be stored. The per-run maps only grow
 * for the life of their run; the writer's map of connections deletes
 * (hs_map_del shifts the entries after the hole back, so no tombstones).
 */
#ifndef HS_MAP_H
#define HS_MAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct hs_map_slot {
    uint64_t key;
    uint64_t val1; /* value + 1; 0: empty */
} hs_map_slot;

typedef struct hs_map {
    hs_map_slot *slots;
    size_t mask; /* capacity - 1; capacity 0 when slots is NULL */
    size_t count;
} hs_map;

/* Sets *out to the value of key; returns 1 when found, 0 when not. */
int hs_map_get(const hs_map *m, uint64_t key, uint64_t *out);

/* Inserts or replaces. Returns 0 or HS_ENOMEM. value must be < UINT64_MAX. */
int hs_map_put(hs_map *m, uint64_t key, uint64_t value);

/* Removes key; returns 1 when it was there, 0 when not. The table keeps its
 * capacity. */
int hs_map_del(hs_map *m, uint64_t key);

void hs_map_clear(hs_map *m);

/* Frees the table; the map is empty and usable again afterwards. */
void hs_map_free(hs_map *m);

#endif

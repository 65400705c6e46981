/* hs_map: an open-addressing hash map from 64-bit keys to 64-bit values.
 *
 * The one u64 map of heapstore: the writer's per-run tables (collector pc ->
 * frame id, stack id -> rollup slot) and its connections, and every index of
 * queries/ (trace -> row, frame -> name). Linear probing over a power-of-two
 * table kept at most half full.
 *
 * Every key and every value can be stored. A slot is empty when its key is
 * 0, so key 0 itself lives beside the table (has_zero, zero_val); callers
 * need not reserve any key or value. hs_map_del shifts the entries after the
 * hole back, so there are no tombstones and lookups never slow down with
 * deletes. A zeroed hs_map ({0}) is an empty map.
 */
#ifndef HS_MAP_H
#define HS_MAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct hs_map_slot {
    uint64_t key; /* 0: empty (key 0 is kept in hs_map.zero_val) */
    uint64_t val;
} hs_map_slot;

typedef struct hs_map {
    hs_map_slot *slots;
    size_t mask;  /* capacity - 1; capacity 0 when slots is NULL */
    size_t count; /* entries, key 0 included */
    int has_zero; /* key 0 is present, with value zero_val */
    uint64_t zero_val;
} hs_map;

/* A 64-bit key for n bytes (FNV-1a), for maps keyed by strings: equal
 * bytes, equal keys; callers compare the bytes of keys that collide. */
static inline uint64_t hs_map_hash(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ull;
    return h;
}

/* Sets *out to the value of key; returns 1 when found, 0 when not. */
int hs_map_get(const hs_map *m, uint64_t key, uint64_t *out);

/* Inserts or replaces. Returns 0 or HS_ENOMEM (the map is then unchanged). */
int hs_map_put(hs_map *m, uint64_t key, uint64_t value);

/* Removes key; returns 1 when it was there, 0 when not. The table keeps its
 * capacity. */
int hs_map_del(hs_map *m, uint64_t key);

/* Walks the entries in no particular order: start with *pos = 0; each call
 * sets *key and *val to the next entry and returns 1, or returns 0 at the
 * end. The map must not change during the walk. */
int hs_map_next(const hs_map *m, size_t *pos, uint64_t *key, uint64_t *val);

/* Removes every entry; the table keeps its capacity. */
void hs_map_clear(hs_map *m);

/* Frees the table; the map is empty and usable again afterwards. */
void hs_map_free(hs_map *m);

#endif

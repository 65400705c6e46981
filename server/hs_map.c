/* hs_map: linear probing with a multiplicative hash. */
#include "hs_map.h"

#include <stdlib.h>
#include <string.h>

#include "hs_error.h"

static inline size_t hash(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return (size_t)k;
}

int hs_map_get(const hs_map *m, uint64_t key, uint64_t *out)
{
    if (!m->slots) return 0;
    for (size_t i = hash(key) & m->mask;; i = (i + 1) & m->mask) {
        const hs_map_slot *s = &m->slots[i];
        if (!s->val1) return 0;
        if (s->key == key) {
            *out = s->val1 - 1;
            return 1;
        }
    }
}

static void insert(hs_map_slot *slots, size_t mask, uint64_t key, uint64_t val1, size_t *count)
{
    for (size_t i = hash(key) & mask;; i = (i + 1) & mask) {
        if (!slots[i].val1) {
            slots[i].key = key;
            slots[i].val1 = val1;
            (*count)++;
            return;
        }
        if (slots[i].key == key) {
            slots[i].val1 = val1;
            return;
        }
    }
}

static int grow(hs_map *m)
{
    size_t cap = m->slots ? (m->mask + 1) * 2 : 64;
    hs_map_slot *ns = calloc(cap, sizeof *ns);
    if (!ns) return HS_ENOMEM;
    size_t n = 0;
    if (m->slots)
        for (size_t i = 0; i <= m->mask; i++)
            if (m->slots[i].val1) insert(ns, cap - 1, m->slots[i].key, m->slots[i].val1, &n);
    free(m->slots);
    m->slots = ns;
    m->mask = cap - 1;
    m->count = n;
    return 0;
}

int hs_map_put(hs_map *m, uint64_t key, uint64_t value)
{
    if (!m->slots || (m->count + 1) * 2 > m->mask + 1) {
        int err = grow(m);
        if (err) return err;
    }
    insert(m->slots, m->mask, key, value + 1, &m->count);
    return 0;
}

int hs_map_del(hs_map *m, uint64_t key)
{
    if (!m->slots) return 0;
    size_t i = hash(key) & m->mask;
    while (m->slots[i].key != key || !m->slots[i].val1) {
        if (!m->slots[i].val1) return 0;
        i = (i + 1) & m->mask;
    }
    /* Backward shift: an entry after the hole moves into it when the hole
     * lies between its home slot and where it is, so that every entry stays
     * reachable from its home without crossing an empty slot. */
    for (size_t j = (i + 1) & m->mask; m->slots[j].val1; j = (j + 1) & m->mask) {
        size_t home = hash(m->slots[j].key) & m->mask;
        if (((j - home) & m->mask) >= ((j - i) & m->mask)) {
            m->slots[i] = m->slots[j];
            i = j;
        }
    }
    m->slots[i].key = 0;
    m->slots[i].val1 = 0;
    m->count--;
    return 1;
}

void hs_map_clear(hs_map *m)
{
    if (m->slots) memset(m->slots, 0, (m->mask + 1) * sizeof *m->slots);
    m->count = 0;
}

void hs_map_free(hs_map *m)
{
    free(m->slots);
    m->slots = NULL;
    m->mask = 0;
    m->count = 0;
}

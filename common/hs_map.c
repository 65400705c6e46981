/* hs_map: linear probing with a multiplicative hash; key 0 beside the
 * table. */
#include "hs_map.h"

#include <assert.h>
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
    if (!key) {
        if (m->has_zero) *out = m->zero_val;
        return m->has_zero;
    }
    if (!m->slots) return 0;
    for (size_t i = hash(key) & m->mask;; i = (i + 1) & m->mask) {
        const hs_map_slot *s = &m->slots[i];
        if (s->key == key) {
            *out = s->val;
            return 1;
        }
        if (!s->key) return 0;
    }
}

/* Returns 1 when key was added, 0 when its value was replaced. */
static int insert(hs_map_slot *slots, size_t mask, uint64_t key, uint64_t val)
{
    assert(key);
    for (size_t i = hash(key) & mask;; i = (i + 1) & mask) {
        if (!slots[i].key) {
            slots[i].key = key;
            slots[i].val = val;
            return 1;
        }
        if (slots[i].key == key) {
            slots[i].val = val;
            return 0;
        }
    }
}

static int grow(hs_map *m)
{
    size_t cap = m->slots ? (m->mask + 1) * 2 : 64;
    hs_map_slot *ns = calloc(cap, sizeof *ns);
    if (!ns) return HS_ENOMEM;
    if (m->slots)
        for (size_t i = 0; i <= m->mask; i++)
            if (m->slots[i].key) insert(ns, cap - 1, m->slots[i].key, m->slots[i].val);
    free(m->slots);
    m->slots = ns;
    m->mask = cap - 1;
    return 0;
}

int hs_map_put(hs_map *m, uint64_t key, uint64_t value)
{
    if (!key) {
        m->count += !m->has_zero;
        m->has_zero = 1;
        m->zero_val = value;
        return 0;
    }
    size_t in_table = m->count - (size_t)m->has_zero;
    if (!m->slots || (in_table + 1) * 2 > m->mask + 1) {
        int err = grow(m);
        if (err) return err;
    }
    m->count += (size_t)insert(m->slots, m->mask, key, value);
    assert((m->count - (size_t)m->has_zero) * 2 <= m->mask + 1);
    return 0;
}

int hs_map_del(hs_map *m, uint64_t key)
{
    if (!key) {
        if (!m->has_zero) return 0;
        m->has_zero = 0;
        m->count--;
        return 1;
    }
    if (!m->slots) return 0;
    size_t i = hash(key) & m->mask;
    while (m->slots[i].key != key) {
        if (!m->slots[i].key) return 0;
        i = (i + 1) & m->mask;
    }
    /* Backward shift: an entry after the hole moves into it when the hole
     * lies between its home slot and where it is, so that every entry stays
     * reachable from its home without crossing an empty slot. */
    for (size_t j = (i + 1) & m->mask; m->slots[j].key; j = (j + 1) & m->mask) {
        size_t home = hash(m->slots[j].key) & m->mask;
        if (((j - home) & m->mask) >= ((j - i) & m->mask)) {
            m->slots[i] = m->slots[j];
            i = j;
        }
    }
    m->slots[i].key = 0;
    m->slots[i].val = 0;
    m->count--;
    return 1;
}

int hs_map_next(const hs_map *m, size_t *pos, uint64_t *key, uint64_t *val)
{
    /* position 0 is key 0; position i + 1 is slot i */
    if (*pos == 0) {
        (*pos)++;
        if (m->has_zero) {
            *key = 0;
            *val = m->zero_val;
            return 1;
        }
    }
    for (; m->slots && *pos <= m->mask + 1; (*pos)++) {
        const hs_map_slot *s = &m->slots[*pos - 1];
        if (s->key) {
            (*pos)++;
            *key = s->key;
            *val = s->val;
            return 1;
        }
    }
    return 0;
}

void hs_map_clear(hs_map *m)
{
    if (m->slots) memset(m->slots, 0, (m->mask + 1) * sizeof *m->slots);
    m->count = 0;
    m->has_zero = 0;
    m->zero_val = 0;
}

void hs_map_free(hs_map *m)
{
    free(m->slots);
    *m = (hs_map){0};
}

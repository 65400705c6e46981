/* hs_inlpc: the synthetic pcs that stand for inlined frames.
 *
 * When the server names a pc whose function was inlined into others, each
 * inlined frame gets a pc of its own: HS_INL_PC_TAG | k << 48 | pc, k = 0
 * the innermost; the frame that holds them keeps pc itself. The tag sits
 * below the collector's Python tag (0xff…) and above every user-space
 * address. The server makes these pcs (server/symbols.c, store_frames.c)
 * and the exports read them back (queries/export.c): one definition for
 * both.
 */
#ifndef HS_INLPC_H
#define HS_INLPC_H

#include <stdint.h>

#define HS_INL_PC_TAG  0xfe00000000000000ull
#define HS_INL_PC_MASK ((1ull << 48) - 1) /* the pc an inlined frame stands at */

static inline uint64_t hs_inl_pc(uint64_t pc, int k)
{
    return HS_INL_PC_TAG | (uint64_t)k << 48 | pc;
}

/* A pc that may have inlined frames (a real user-space address). */
static inline int hs_inl_pc_ok(uint64_t pc)
{
    return pc && pc < (1ull << 48);
}

/* 1 if pc is an inlined frame's synthetic pc. */
static inline int hs_inl_pc_is(uint64_t pc)
{
    return (pc & 0xff00000000000000ull) == HS_INL_PC_TAG;
}

/* 1 if pc is an inlined frame's synthetic pc of the frame at base. */
static inline int hs_inl_pc_of(uint64_t pc, uint64_t base)
{
    return hs_inl_pc_is(pc) && (pc & HS_INL_PC_MASK) == base;
}

#endif

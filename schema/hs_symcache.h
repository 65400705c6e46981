/* hs_symcache: the stored form of the server's symbol cache (schema 14).
 *
 * The server names a native frame from its build's file once (function,
 * file, line and the functions inlined there: server/hs_symbols.h) and keeps
 * the answer for every later run of that build: an entry is a module offset
 * of one build and its frames, innermost first (1 to HS_SYMCACHE_FRAMES_MAX;
 * one frame with function "" when no symbol covers the offset).
 *
 * Since schema 14 the entries of a build are stored in blocks, one
 * symbol_blocks row each (build_id, seq, data), rather than a row per
 * frame: a block holds at most HS_SYMCACHE_BLOCK_ENTRIES entries and
 * HS_SYMCACHE_BLOCK_BYTES bytes of distinct strings. Only a build's last
 * block (the highest seq) grows: the writer rewrites it with each batch of
 * answers until it is full. An offset is normally in one block of its
 * build; should two hold it (a reader that forgot a build asked again
 * before the writer caught up), both hold the same answer, and readers take
 * the first.
 *
 * Blob layout, version 1 (varints LEB128):
 *
 *   u8      version (1)
 *   varint  n, entries (1 to HS_SYMCACHE_BLOCK_ENTRIES)
 *   varint  nframes, frames of all entries (n to n * FRAMES_MAX)
 *   varint  nstr, distinct strings (<= 2 * nframes)
 *   u8      method: 0 columns stored as they are, 1 one zstd frame
 *   varint  len[7], bytes of each column once decompressed
 *   ...     the columns, concatenated (compressed for method 1):
 *             SLEN    nstr string lengths
 *             STR     the strings, end to end (<= HS_SYMCACHE_BLOCK_BYTES)
 *             OFFSET  n offsets, increasing: the first, then each step (>= 1)
 *             NFR     n frame counts (1 to HS_SYMCACHE_FRAMES_MAX)
 *             FUNC    nframes function string numbers
 *             FILE    nframes file string numbers
 *             LINE    nframes line numbers
 *
 * Strings are numbered in the order the entries, by offset, first use them:
 * a file path or a function name shared by many entries is stored once a
 * block, and zstd takes the rest (paths that share their folders, numbers
 * that mostly grow by one).
 *
 * hs_symcache_block is a build's entries in memory, for encoding, decoding
 * and lookups by offset; hs_symcache_rd is the reader the symbolizer
 * thread asks, which loads a build's blocks the first time it is asked
 * about it and keeps at most a given number of bytes of them.
 */
#ifndef HS_SYMCACHE_H
#define HS_SYMCACHE_H

#include <stddef.h>
#include <stdint.h>

#include <sqlite3.h>

#include "hs_buf.h"
#include "hs_map.h"
#include "hs_proto.h"
#include "hs_wire.h"

#define HS_SYMCACHE_CODEC         1
#define HS_SYMCACHE_FRAMES_MAX    16 /* HS_SYMS_INLINE_MAX */
#define HS_SYMCACHE_BLOCK_ENTRIES 4096
#define HS_SYMCACHE_BLOCK_BYTES   (1u << 20)

typedef struct hs_symcache_frame {
    hs_str function, file;
    uint64_t line;
} hs_symcache_frame;

/* Entries in memory: offset -> frames, each offset once, strings kept once.
 * A zeroed block is empty and ready; the fields are hs_symcache.c's. */
typedef struct hs_symcache_block {
    struct hs__symc_ent *ents; /* in the order added */
    size_t n, ents_cap;
    struct hs__symc_fr *frames;
    size_t nframes, frames_cap;
    uint32_t *str_at; /* string i is chars[str_at[i], str_at[i + 1]) */
    size_t nstr, str_cap;
    char *chars;
    size_t nchars, chars_cap;
    hs_map by_off;  /* offset -> entry index */
    hs_map by_hash; /* string hash -> string number (the first of that hash) */
} hs_symcache_block;

/* Adds the frames fr[0..n) (1 <= n <= HS_SYMCACHE_FRAMES_MAX, each function
 * at most HS_FUNC_MAX bytes, file HS_STR_MAX) at off:
 * 1, or 0 when b has off already (b unchanged), or HS_ENOMEM (b as it was). */
int hs_symcache_add(hs_symcache_block *b, uint64_t off, const hs_symcache_frame *fr, int n);

/* The frames at off into out[0..n), n <= max: n, or 0 when b has none. The
 * strings point into b, valid until b changes. */
int hs_symcache_get(const hs_symcache_block *b, uint64_t off, hs_symcache_frame *out, int max);

/* 1 when b has off. */
int hs_symcache_has(const hs_symcache_block *b, uint64_t off);

/* The offset of entry i < b->n, entries in the order they were added. */
uint64_t hs_symcache_offset_at(const hs_symcache_block *b, size_t i);

/* Bytes the strings of fr[0..n) would add to b at most (their lengths):
 * with hs_symcache_str_bytes, whether an entry keeps b within
 * HS_SYMCACHE_BLOCK_BYTES. */
size_t hs_symcache_entry_bytes(const hs_symcache_frame *fr, int n);
static inline size_t hs_symcache_str_bytes(const hs_symcache_block *b)
{
    return b->nchars;
}
/* Bytes of memory b holds. */
size_t hs_symcache_mem(const hs_symcache_block *b);

/* Empties b, keeping its memory; _free gives the memory back too (b is
 * then zeroed). */
void hs_symcache_clear(hs_symcache_block *b);
void hs_symcache_free(hs_symcache_block *b);

/* ---- codec -------------------------------------------------------------- */

/* Encodes b's entries (1 to HS_SYMCACHE_BLOCK_ENTRIES of them, strings
 * within HS_SYMCACHE_BLOCK_BYTES) into out (appended), by offset. 0, or
 * HS_ENOMEM. */
int hs_symcache_encode(const hs_symcache_block *b, hs_buf *out);

/* Adds the entries of a blob to b (those at offsets b has already are
 * skipped). 0, or HS_ECORRUPT for a blob that is malformed or of another
 * version, or HS_ENOMEM; b is unchanged then. */
int hs_symcache_decode(hs_symcache_block *b, const void *blob, size_t len);

/* ---- reading ---------------------------------------------------------------- */

/* The symbolizer's view of symbol_blocks on its own connection: a build's
 * blocks are read into memory the first time it is asked about, and the
 * answers found since are added with hs_symcache_rd_add; builds that were
 * asked about least lately are let go when the whole passes max_bytes
 * (never the one being asked about). A build read once is not read again
 * while it is kept: the database's one writer is the same server, whose
 * new answers come through hs_symcache_rd_add. Not thread-safe. */
typedef struct hs_symcache_rd hs_symcache_rd;

#define HS_SYMCACHE_RD_BYTES (64u << 20)

/* 0, or HS_ENOMEM / HS_EDB (no symbol_blocks: sqlite3_errmsg(db) says why). */
int hs_symcache_rd_open(sqlite3 *db, size_t max_bytes, hs_symcache_rd **out);
/* The frames at off of build bid, as hs_symcache_get: n, 0 when none is
 * stored, or HS_EDB / HS_ENOMEM (the build is then asked again next time).
 * Strings valid until the next call. Blocks that do not decode are skipped
 * (their offsets miss). */
int hs_symcache_rd_get(hs_symcache_rd *r, const uint8_t *bid, size_t blen, uint64_t off,
                       hs_symcache_frame *out, int max);
/* An answer found elsewhere for build bid, which the writer is storing:
 * kept with the build's entries when it is held. */
void hs_symcache_rd_add(hs_symcache_rd *r, const uint8_t *bid, size_t blen, uint64_t off,
                        const hs_symcache_frame *fr, int n);
/* Builds held, and the bytes they take. */
size_t hs_symcache_rd_builds(const hs_symcache_rd *r, size_t *bytes);
void hs_symcache_rd_free(hs_symcache_rd *r);

/* ---- migration ------------------------------------------------------------ */

/* Migration 14: moves the rows of symbol_cache (schema 7) into blocks,
 * after the build's blocks symbol_blocks has already, and drops the table,
 * in the caller's transaction. 0, or HS_EDB (sqlite3_errmsg says why),
 * HS_ENOMEM. */
int hs_symcache_migrate(sqlite3 *db);

#endif

/* hs_lz: the small LZ77 format of SYMDATA pieces (docs/protocol.md).
 *
 * The collector compresses the symbol tables it uploads with it: a greedy
 * matcher over a 64 KiB window, one hash probe a position, no allocation
 * (the caller lends the hash table), no library in the profiled process.
 * It takes debug sections to about half their size at memory speed, which
 * is what a one-time upload needs; the server decodes it with
 * hs_lz_decompress, a pure function over (bytes, len) that never writes
 * past the size it is told and rejects every malformed input.
 *
 * A compressed piece is a run of sequences, each
 *     token:u8 [more literals:varint] literal bytes [offset:u16 LE [more:varint]]
 * where the token's high nibble is the literal count (15: plus the varint)
 * and its low nibble the match length minus 4 (15: plus the varint). The
 * last sequence holds literals only: the input ends after them. A match
 * copies length bytes from offset (1 to 65535) bytes back in the output,
 * overlapping copies included.
 */
#ifndef HS_LZ_H
#define HS_LZ_H

#include <stddef.h>
#include <stdint.h>

#define HS_LZ_TABLE 65536 /* entries of the compressor's hash table */

/* Most bytes hs_lz_compress may write for n bytes of input (a constant
 * expression). */
#define HS_LZ_BOUND(n) ((n) + (n) / 128 + 32)

/* Compresses in[0..n) into out (cap bytes); table holds HS_LZ_TABLE
 * entries, any contents. Returns the bytes written, or 0 when they do not
 * fit in cap. */
size_t hs_lz_compress(uint8_t *out, size_t cap, const uint8_t *in, size_t n, uint32_t *table);

/* Decodes in[0..n) into out, which must come out exactly size bytes long.
 * 0, or HS_EPROTO for input that is malformed, asks for more than size
 * bytes, or gives fewer. */
int hs_lz_decompress(uint8_t *out, size_t size, const uint8_t *in, size_t n);

#endif

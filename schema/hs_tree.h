/* hs_tree: the stored form of the stack tree (schema 11).
 *
 * The tree is shared by every run: a node is (parent, frame), a root's
 * parent is 0, and a trace is the id of its leaf node. Ids are given in
 * increasing order and a node's parent always has a smaller id than the
 * node itself (it is interned first). Nodes are never changed or deleted.
 *
 * Since schema 11 the nodes are stored in blocks of up to
 * HS_TREE_BLOCK_NODES consecutive ids, one trace_blocks row each
 * (first, last, data), rather than a row per node: data is the block's
 * nodes in a codec of their own (below), versioned apart from the wire
 * protocol. Only the last block grows: the writer rewrites it until it is
 * full, so every other row never changes once written.
 *
 * Blob layout, version 1 (varints LEB128, signed ones zigzag):
 *
 *   u8      version (1)
 *   varint  n, nodes (>= 1)
 *   varint  first, the id of the first node
 *   u8      method: 0 columns stored as they are, 1 one zstd frame
 *   varint  len[4], bytes of each column once decompressed
 *   ...     the columns, concatenated (compressed for method 1):
 *             ID     n - 1 steps id[i] - id[i-1] (>= 1)
 *             PARENT n signed id[i] - parent[i]
 *             FRAME  n signed frame[i]
 *             DEPTH  n signed depth[i] - depth[i-1] - 1 (depth[-1] = 0)
 *
 * A chain of nodes (each the child of the one before, the common case)
 * costs its frames and a byte of 1, 0 in the other columns, which zstd
 * takes to almost nothing.
 *
 * For SQL, hs_tree_sql_register() adds the read-only table `traces`
 * (id, parent, frame, depth) to a connection, as an eponymous virtual
 * table over trace_blocks; a database older than schema 11 has a real
 * `traces` table, which SQLite finds first. hs_schema_sql_auto()
 * (schema/hs_schema.h) registers it on every connection the process opens
 * from then on.
 */
#ifndef HS_TREE_H
#define HS_TREE_H

#include <stddef.h>
#include <stdint.h>

#include <sqlite3.h>

#include "hs_buf.h"

#define HS_TREE_CODEC       1
#define HS_TREE_BLOCK_NODES 4096

typedef struct hs_tree_node {
    int64_t id, parent, frame;
    int64_t depth; /* 1 for a root */
} hs_tree_node;

/* ---- codec -------------------------------------------------------------- */

/* Encodes nodes[0..n) (n >= 1, ids increasing) into out (appended). 0, or
 * HS_ENOMEM. */
int hs_tree_encode(const hs_tree_node *nodes, size_t n, hs_buf *out);

/* Decodes a blob into *nodes (malloc'd; caller frees) and *n. 0, or
 * HS_ECORRUPT for a blob that is malformed or of another version, or
 * HS_ENOMEM. */
int hs_tree_decode(const void *blob, size_t len, hs_tree_node **nodes, size_t *n);

/* ---- reading ---------------------------------------------------------------- */

/* Reads nodes of one connection's database by id, keeping the blocks it
 * decoded (a few; a block's nodes never change, and one that grew is read
 * again for ids past what was kept). On a database older than schema 11 it
 * reads the traces table. Not thread-safe; one per connection. */
typedef struct hs_tree_rd hs_tree_rd;

/* 0 or HS_ENOMEM / HS_EDB (sqlite3_errmsg(db) says why). */
int hs_tree_rd_open(sqlite3 *db, hs_tree_rd **out);
/* Node id into *out: 1, 0 when there is none, or HS_EDB / HS_ECORRUPT. */
int hs_tree_rd_node(hs_tree_rd *r, int64_t id, hs_tree_node *out);
void hs_tree_rd_free(hs_tree_rd *r);

/* Calls cb with every node whose id is above after, by id, until cb
 * returns non-zero (that value is returned). 0, or HS_EDB / HS_ECORRUPT /
 * HS_ENOMEM. */
int hs_tree_scan(sqlite3 *db, int64_t after, int (*cb)(const hs_tree_node *n, void *data),
                 void *data);

/* The whole tree in memory, for questions that walk all of it (a code's
 * subtree): nodes by id, and for each the index of its parent in nodes
 * (HS_TREE_NONE for a root). hs_tree_mem_update reads the nodes added since
 * its last call, so a store kept open reads each node once. A zeroed
 * hs_tree_mem is empty and ready. */
#define HS_TREE_NONE UINT32_MAX
typedef struct hs_tree_mem {
    hs_tree_node *nodes;
    uint32_t *up;
    size_t n, cap;
} hs_tree_mem;
/* 0, or HS_EDB / HS_ECORRUPT / HS_ENOMEM (m then as it was). */
int hs_tree_mem_update(sqlite3 *db, hs_tree_mem *m);
void hs_tree_mem_free(hs_tree_mem *m);

/* 1 when db stores its tree in blocks (schema 11 and later), 0 when it has
 * the traces table, HS_EDB when that cannot be told. */
int hs_tree_in_blocks(sqlite3 *db);

/* ---- writing ------------------------------------------------------------------ */

/* Writes nodes[0..n) as the block that starts at nodes[0].id, replacing
 * the row it had (the last block, grown). 0, HS_ENOMEM or HS_EDB. */
int hs_tree_put_block(sqlite3 *db, const hs_tree_node *nodes, size_t n);

/* The last block into *nodes (malloc'd) and *n, none: *n 0. 0 or an HS_E
 * code. */
int hs_tree_last_block(sqlite3 *db, hs_tree_node **nodes, size_t *n);

/* Migration 11: moves the rows of the traces table into blocks and drops
 * the table, in the caller's transaction. 0, or HS_EDB (sqlite3_errmsg says
 * why), HS_ECORRUPT (ids not increasing), HS_ENOMEM. */
int hs_tree_migrate(sqlite3 *db);

/* ---- SQL ---------------------------------------------------------------------- */

/* Adds the virtual table `traces` to db. SQLITE_OK or an SQLite code.
 * (hs_schema_sql_auto() adds it to every connection.) */
int hs_tree_sql_register(sqlite3 *db);

#endif

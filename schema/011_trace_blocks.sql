-- heapstore schema, version 11: the stack tree stored in blocks.
--
-- The tree's nodes (id, parent, frame, depth) were a row each in traces,
-- kept three times over (the table, its UNIQUE (parent, frame) and
-- traces_frame): 47 bytes a node, most of an every-allocation run's file.
-- They are now stored in blocks of up to 4096 consecutive ids, one row
-- each, in a codec of their own (schema/hs_tree.h): first and last are the
-- ids of the block's first and last node. Only the block with the highest
-- first ever changes (the writer appends to it until it is full).
--
-- The writer finds a node by (parent, frame) in an index it keeps in
-- memory; readers find a node by id through its block, and for SQL the
-- read-only virtual table `traces` (id, parent, frame, depth) that
-- heapstore's connections have stands where the table was.
--
-- This migration moves the rows of traces into blocks, in C after this
-- file (schema/hs_schema.c), then drops the table and its indexes, in the
-- same transaction.
CREATE TABLE IF NOT EXISTS trace_blocks (
    first INTEGER PRIMARY KEY,
    last  INTEGER NOT NULL,
    data  BLOB NOT NULL
);

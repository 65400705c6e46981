-- heapstore schema, version 14: the symbol cache stored in blocks.
--
-- symbol_cache (schema 7) kept a row per frame the server's symbolizer
-- found, with the build id and the file path again in each: 87 bytes a
-- frame, 0.44 MB of an every-allocation run of python3 (6.3 MB). The
-- answers of a build are now stored in blocks of up to 4096 offsets, one
-- row each, in a codec of their own (schema/hs_symcache.h): strings once a
-- block, offsets as steps, zstd over the whole. seq numbers a build's
-- blocks from 0; only its last block ever changes (the writer rewrites it
-- with each batch of answers until it is full).
--
-- The symbolizer reads a build's blocks into memory the first time it is
-- asked about that build, on its own connection, and asks the file only
-- for offsets they do not hold.
--
-- This migration moves the rows of symbol_cache into blocks, in C after
-- this file (schema/hs_schema.c), then drops the table, in the same
-- transaction.
CREATE TABLE IF NOT EXISTS symbol_blocks (
    build_id BLOB NOT NULL,
    seq      INTEGER NOT NULL,
    data     BLOB NOT NULL,
    PRIMARY KEY (build_id, seq)
);

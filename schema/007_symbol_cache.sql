-- heapstore schema, version 7: what the server's symbolizer found, per
-- build, kept for every later run of that build (and across restarts).
--
-- Collectors send native frames as module and offset (docs/protocol.md,
-- SYMBOLS); the server names them from the module's file once per build id
-- (server/hs_symbols.h) and stores each answer here: the frames at one
-- offset of one build, k = 0 the innermost inlined function, the last the
-- function that holds the code (one row, function '', when no symbol covers
-- the offset). A later lookup of the same build and offset reads these
-- rows instead of the file. Frames and traces are unchanged: they keep
-- holding what queries read. (IF NOT EXISTS: a file taken back to an older
-- version number by hand keeps its cache.) Since schema 14 the answers are
-- stored in blocks (014_symbol_blocks.sql) and this table is dropped.
CREATE TABLE IF NOT EXISTS symbol_cache (
    build_id BLOB NOT NULL,
    offset   INTEGER NOT NULL, -- SYMBOLS' module_offset: a return address
    k        INTEGER NOT NULL,
    function TEXT NOT NULL,    -- demangled
    file     TEXT NOT NULL,
    line     INTEGER NOT NULL,
    PRIMARY KEY (build_id, offset, k)
) WITHOUT ROWID;

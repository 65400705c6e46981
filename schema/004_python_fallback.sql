-- heapstore schema, version 4: the collector's count of samples taken in
-- Python code whose Python frames it could not read (an interpreter of an
-- unsupported version, a debug or free-threaded build, or a state it could
-- not read in full); those samples keep their native stack. DROPS kind 8.
ALTER TABLE runs ADD COLUMN python_fallback INTEGER NOT NULL DEFAULT 0;

-- heapstore schema, version 10: a run's events stored in segments of many
-- EVENTS frames rather than one row per frame.
--
-- An events row now holds a segment (codec version 2, common/hs_evcodec.h):
-- the events of consecutive frames of one run, compressed by one stream,
-- until the segment reaches 4 MiB uncompressed (HS_EVSEG_RAW_CAP) or its
-- compressed part 16 KiB at a commit, 64 KiB at any frame
-- (server/store_int.h, server/store_frames.c). seq is the seq of its
-- first frame, t_first_ns and t_last_ns the lowest and highest time of its
-- events (frames of different threads may overlap in time), n_events their
-- number. Rows of codec version 1 (one frame each) stay readable.
--
-- The segment a run is still adding to is not in events but in events_tail,
-- one row per open run, rewritten by each transaction that adds events to
-- it; it moves to events when it closes (when full, when the run ends, and
-- when the server loads the run again). So events rows never change once
-- written, and a reader that wants every event reads events_all.
--
-- This migration merges the rows already stored, in C after this file
-- (schema/hs_evrecode.c, hs_events_segment()), in the same transaction:
-- each run's rows in seq order become segments with the same events, times
-- and order; a row that cannot be decoded fails the migration, which then
-- changes nothing.
-- A run has few events rows now: its rows by (run, seq) are read whole and
-- filtered by time, and the index by time costs more than it saves.
DROP INDEX IF EXISTS events_time;

CREATE TABLE IF NOT EXISTS events_tail (
    run        INTEGER PRIMARY KEY,
    seq        INTEGER NOT NULL,
    t_first_ns INTEGER NOT NULL,
    t_last_ns  INTEGER NOT NULL,
    n_events   INTEGER NOT NULL,
    data       BLOB NOT NULL
);
CREATE VIEW IF NOT EXISTS events_all AS
    SELECT run, seq, t_first_ns, t_last_ns, n_events, data FROM events
    UNION ALL
    SELECT run, seq, t_first_ns, t_last_ns, n_events, data FROM events_tail;

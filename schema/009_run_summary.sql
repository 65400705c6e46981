-- heapstore schema, version 9: what a question across many runs reads of
-- each run in one row (queries' trend), written by the server when the run
-- ends (server/store_frames.c) and computed here for the runs stored before.
--
-- rss_peak_bytes: the highest RSS sample of the run (process_samples); NULL
-- when it has none.
-- leak_bytes_per_s: the run's leak rate, how fast the floor of its heap
-- rose: the lowest live heap at a bucket's end (heap_series.live_bytes) over
-- the last quarter of the run's buckets (bucket >= 3B/4, B its last bucket)
-- less the lowest over its second quarter (B/4 <= bucket < B/2), over the
-- time between the two (half the run), in bytes a second; 0 for a run of
-- fewer than four buckets. A buffer built and freed does not move a floor;
-- memory never given back does.
-- (The same text as HS_SCHEMA_LEAK_SQL in schema/hs_schema.h: they must agree.)
-- Open runs keep both NULL; readers compute them for such rows.
ALTER TABLE runs ADD COLUMN rss_peak_bytes INTEGER;
ALTER TABLE runs ADD COLUMN leak_bytes_per_s REAL;

UPDATE runs SET
    rss_peak_bytes = (SELECT MAX(rss_bytes) FROM process_samples WHERE run = runs.id),
    leak_bytes_per_s = (SELECT CASE WHEN m.b < 4 THEN 0.0 ELSE COALESCE((MIN(CASE WHEN
        h.bucket >= 3 * m.b / 4 THEN h.live_bytes END) - MIN(CASE WHEN h.bucket < m.b / 2 THEN
        h.live_bytes END)) * 2e9 / (m.b * runs.granularity_ns), 0.0) END FROM (SELECT MAX(bucket)
        AS b FROM heap_series WHERE run = runs.id) m JOIN heap_series h ON h.run = runs.id AND
        h.bucket >= m.b / 4)
    WHERE state <> 'open';

-- The stacks through a function (trend's --function): the nodes of its
-- frames, then their subtrees by traces(parent, frame).
CREATE INDEX IF NOT EXISTS traces_frame ON traces(frame);

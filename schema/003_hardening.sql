-- heapstore schema, version 3: what the writer needs to stay cheap and safe
-- as the runs table grows and as unauthenticated peers connect.
--
-- runs_parent_uuid: a new run adopts the runs that named it as their parent
-- before it arrived (UPDATE runs SET parent_id … WHERE parent_uuid = ?); that
-- statement runs on the writer thread for every HELLO and must not scan the
-- table. Partial: most runs have no parent.
CREATE INDEX runs_parent_uuid ON runs(parent_uuid) WHERE parent_uuid IS NOT NULL;

-- resume_key: what a collector must present to continue its run after a
-- reconnection (HELLO with HS_HELLO_RESUMED). The uuid alone is public (the
-- API lists it); the key is known only to the collector that started the run
-- and is never shown by a query. NULL for runs stored before version 3, which
-- cannot be resumed.
ALTER TABLE runs ADD COLUMN resume_key BLOB;

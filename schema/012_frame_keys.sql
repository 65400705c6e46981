-- heapstore schema, version 12: a frame's key computed from its columns.
--
-- frames.key (the frame's identity, 001_init.sql) repeated the function and
-- file that the row holds anyway, and its UNIQUE index held them a third
-- time: three quarters of the table on a Python program's frames. The key
-- is now a virtual column, the same text computed from the row, and the
-- only thing stored beyond the columns is alias: NULL, except for a frame
-- named after it was stored (server/store_frames.c, name_frame) whose
-- content another frame already held, where it is the frame's old key, so
-- that its key stays apart from the other's as before.
--
-- The writer finds a frame by frames_function, (function, its line or for
-- a frame without a function its offset), then compares keys; keys stay
-- unique because the server is the file's one writer and always looks
-- before it inserts. The index still serves "function = ?".
--
-- Rows move over unchanged; a key that did not begin with its row's
-- content (no writer of this project made one) keeps its text after
-- char(30), which keeps it apart from every other.
CREATE TABLE frames_v12 (
    id            INTEGER PRIMARY KEY,
    key           TEXT NOT NULL GENERATED ALWAYS AS (
                      CASE WHEN function <> '' THEN function || char(31) || file || char(31) || line
                           ELSE char(31) || module || char(31) || module_offset END
                      || coalesce(alias, '')) VIRTUAL,
    function      TEXT NOT NULL,   -- demangled; '' when unknown
    file          TEXT NOT NULL,   -- '' when unknown
    line          INTEGER NOT NULL,-- 0 when unknown
    module        TEXT NOT NULL,   -- path of the object (as first seen)
    module_offset INTEGER NOT NULL,
    alias         TEXT             -- see above; NULL for nearly every frame
);
INSERT INTO frames_v12 (id, function, file, line, module, module_offset, alias)
    SELECT id, function, file, line, module, module_offset,
           CASE WHEN substr(key, 1, length(c)) = c THEN nullif(substr(key, length(c) + 1), '')
                ELSE char(30) || key END
    FROM (SELECT *, CASE WHEN function <> '' THEN function || char(31) || file || char(31) || line
                         ELSE char(31) || module || char(31) || module_offset END AS c
          FROM frames);
DROP TABLE frames;
ALTER TABLE frames_v12 RENAME TO frames;
CREATE INDEX frames_function
    ON frames(function, (CASE WHEN function = '' THEN module_offset ELSE line END));

-- heapstore schema, version 5: when a program's main code finished, for the
-- runs whose collector can tell (a Python program: the moment its
-- interpreter began its teardown, after the main module, its threads and its
-- atexit handlers, before module globals are freed). Nanoseconds from the
-- run's start; NULL when not known (not Python, os._exit, an older
-- collector). The queries' "end" of such a run is this moment; "exit" is the
-- process's own end (end_ns). DROPS kind 9 (docs/protocol.md).
ALTER TABLE runs ADD COLUMN main_end_ns INTEGER;
-- DROPS kind 10: 1 when the collector found a Python interpreter whose small
-- objects (pymalloc's) it could not see (found after its start-up, or
-- PYTHONMALLOC set to a pymalloc or debug allocator).
ALTER TABLE runs ADD COLUMN python_small_unseen INTEGER NOT NULL DEFAULT 0;

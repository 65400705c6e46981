/* hs_evrecode: migration 6 (schema/006_event_codec.sql), which rewrites the
 * events rows stored as protocol version 1 EVENTS payloads in the storage
 * codec of common/hs_evcodec.h, and migration 10
 * (schema/010_event_segments.sql), which merges each run's rows of one
 * frame into segments. Both run inside their migration's transaction. */
#ifndef HS_EVRECODE_H
#define HS_EVRECODE_H

#include <stddef.h>
#include <sqlite3.h>

/* 0, or a negative HS_E* code with a message for a person in errmsg. */
int hs_events_recode(sqlite3 *db, char *errmsg, size_t errlen);
/* Migration 10: the same events, times and order, in segments (codec
 * version 2) closed as the writer closes them. 0, or a negative HS_E* code
 * with a message in errmsg. */
int hs_events_segment(sqlite3 *db, char *errmsg, size_t errlen);

#endif

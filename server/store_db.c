/* store_db: what every layer of the store uses (store.c, store_frames.c,
 * store_rollup.c, store_import.c): an error message for a person, stepping a
 * statement that returns nothing needed, and marking a run changed in the
 * open transaction. It calls none of them. */
#include <stdarg.h>
#include <stdio.h>

#include "hs_error.h"
#include "store_int.h"

void hs__store_seterr(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

int hs__store_step_done(hs_store *s, sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    if (rc == SQLITE_DONE || rc == SQLITE_ROW) return 0;
    s->db_failed = 1;
    return HS_EDB;
}

/* Marks r as changed in this transaction so that commit writes its row. */
void hs__store_touch(hs_store *s, hs_run *r)
{
    if (r->touched) return;
    r->touched = 1;
    r->touch_next = s->touched;
    s->touched = r;
}

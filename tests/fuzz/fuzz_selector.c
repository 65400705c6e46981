/* Fuzzes the RUN and T selector parsers (queries/sel.c): any string is either
 * parsed or refused with a sentence, never read past or crashed on. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "hs_error.h"
#include "hs_queries.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096) return 0;
    char *s = malloc(size + 1);
    if (!s) return 0;
    memcpy(s, data, size);
    s[size] = 0;
    hs_qerr err = {0};
    hs_run_sel run;
    hs_t_sel t;
    if (hs_sel_parse_run(&run, s, &err) != 0 && (!err.msg[0] || err.code != HS_EINVAL)) abort();
    /* an id a selector took is digits or a range A..B with A <= B */
    for (int i = 0; !err.msg[0] && run.kind == HS_RUNSEL_MATCH && i < run.nkv; i++) {
        int64_t lo, hi;
        const char *v = run.kv[i].value;
        if (!strcmp(run.kv[i].key, "id") && strspn(v, "0123456789") != strlen(v) &&
            !(hs_sel_id_range(v, &lo, &hi) && lo <= hi))
            abort();
    }
    err.msg[0] = 0;
    if (hs_sel_parse_t(&t, s, &err) != 0 && !err.msg[0]) abort();
    err.msg[0] = 0;
    if (hs_sel_parse_at(&run, &t, s, "end", &err) != 0 && !err.msg[0]) abort();
    free(s);
    return 0;
}

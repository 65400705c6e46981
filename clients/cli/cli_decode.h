/* cli_decode: the API's JSON turned back into the core's typed results.
 *
 * In HTTP mode the CLI gets docs/api.md's JSON from a server; decoding it
 * into the result the core gives in direct mode lets one renderer print
 * both. A decoded result lends its strings from the JSON, which it takes
 * over (freed by the result's _clear). Members the JSON lacks are left 0 or
 * "": a server answers what the API documents, and the renderer prints what
 * it gets.
 */
#ifndef HS_CLI_DECODE_H
#define HS_CLI_DECODE_H

#include <jansson.h>

#include "hs_core.h"

/* The API's "run" object (its own "sampling" included) into out, which
 * lends run's strings; labels and argv are left empty. */
void hs_cli_record_decode(hs_run_record *out, const json_t *run);

/* /api/runs's answer j (taken over, also on failure) into out. 0, or
 * HS_ENOMEM. */
int hs_cli_runs_decode(hs_runs_result *out, json_t *j);

/* /api/runs/RUN/top's answer j (taken over, also on failure) into out.
 * 0, or HS_ENOMEM. */
int hs_cli_top_decode(hs_top_result *out, json_t *j);

/* /api/runs/RUN/history's answer, the same way. */
int hs_cli_history_decode(hs_history_result *out, json_t *j);

/* /api/runs/RUN/leaks's answer, the same way. */
int hs_cli_leaks_decode(hs_leaks_result *out, json_t *j);
/* /api/runs/RUN/sizes's answer, the same way. */
int hs_cli_sizes_decode(hs_sizes_result *out, json_t *j);
/* /api/diff's answer, the same way (not its differential flame, which the
 * tables do not show). */
int hs_cli_diff_decode(hs_diff_result *out, json_t *j);
/* /api/diff's answer when a side names several runs ("group": true), the
 * same way (not the rows' stacks, which the table does not show). */
int hs_cli_gdiff_decode(hs_gdiff_result *out, json_t *j);
/* /api/check's answer j into out, which lends j's strings (the caller
 * keeps j until it has cleared out). 0, or HS_ENOMEM. */
int hs_cli_check_decode(hs_check_result *out, const json_t *j);

#endif

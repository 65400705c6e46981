/* kit_init: set-up every test binary gets, whether or not it uses the kit. */
#include "hs_schema.h"

/* Every connection a test opens reads the stack tree as `traces`, the
 * snapshot rows as `snapshots` and the runs' id maps as run_pcs and
 * run_stacks, as the server's and the queries'
 * connections do (schema/hs_schema.h). */
__attribute__((constructor)) static void kit_init_tables(void)
{
    hs_schema_sql_auto();
}

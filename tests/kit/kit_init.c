/* kit_init: set-up every test binary gets, whether or not it uses the kit. */
#include "hs_maps.h"
#include "hs_tree.h"

/* Every connection a test opens reads the stack tree as `traces` and the
 * runs' id maps as run_pcs and run_stacks, as the server's and the
 * queries' connections do (schema/hs_tree.h, schema/hs_maps.h). */
__attribute__((constructor)) static void kit_init_tree(void)
{
    hs_tree_sql_auto();
    hs_maps_sql_auto();
}

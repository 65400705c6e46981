/* hs_dw: libdw and libelf, loaded when first needed (see hs_dw.h). */
#include "hs_dw.h"

#include <dlfcn.h>
#include <stdio.h>

hs_dw_api hs__dw;
static int state; /* 0 not tried, 1 loaded, -1 failed */

int hs__dw_load(void)
{
    if (state) return state > 0 ? 0 : -1;
    state = -1;
    /* libelf comes with it, as its dependency, and dlsym on libdw's handle
     * searches it too. */
    void *h = dlopen("libdw.so.1", RTLD_NOW | RTLD_LOCAL);
    const char *missing = h ? NULL : "libdw.so.1";
#define HS_DW_SYM(f)                                                                               \
    if (h && !missing && !(hs__dw.f = (__typeof__(f) *)dlsym(h, #f))) missing = #f;
    HS_DW_FUNCS(HS_DW_SYM)
#undef HS_DW_SYM
    if (missing) {
        fprintf(stderr,
                "heapstore: cannot load %s (%s); frames keep their module and offset, "
                "names come from dynamic symbol tables only, no files or lines\n",
                missing, h ? "symbol not found" : dlerror());
        return -1;
    }
    state = 1;
    return 0;
}

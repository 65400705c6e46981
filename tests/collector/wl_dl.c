/* A library the stress workload dlopens and dlcloses; it allocates and frees. */
#include <stdlib.h>

void wl_dl_work(int n);

void wl_dl_work(int n)
{
    void *p[64];
    for (int i = 0; i < n && i < 64; i++) p[i] = malloc((size_t)(32 + i * 8));
    for (int i = 0; i < n && i < 64; i++) free(p[i]);
}

/* Calls into libwl_split.so (wl_split_lib.c) COUNT times (argv[1], default
 * 100), 1000 bytes each, and frees the blocks. Prints
 * "site split_site LINE ALLOCS BYTES FREES FREED" for the library's site and
 * the same line for main's own site, like wl_sites. */
#include <stdio.h>
#include <stdlib.h>

void *wl_split_work(size_t n);
int wl_split_line(void);

int main(int argc, char **argv)
{
    int count = argc > 1 ? atoi(argv[1]) : 100, main_line = 0;
    for (int i = 0; i < count; i++) {
        free(wl_split_work(1000));
        void *p = (main_line = __LINE__, malloc(2000));
        __asm__ volatile("" : : "r"(p) : "memory");
        free(p);
    }
    printf("site split_site %d %d %d %d %d\n", wl_split_line(), count, count * 1000, count,
           count * 1000);
    printf("site main %d %d %d %d %d\n", main_line, count, count * 2000, count, count * 2000);
    return 0;
}

/* Sizes of the blocks libwl_early.so allocates in its constructor (see
 * wl_early_lib.c); distinct from anything else the test program allocates. */
#ifndef WL_EARLY_H
#define WL_EARLY_H

#define WL_EARLY_KEPT     77777
#define WL_EARLY_BIG      8388731 /* 8 MiB + 123: sampled at the default rate too */
#define WL_EARLY_FREED    55555
#define WL_EARLY_MOVED    33333
#define WL_EARLY_MOVED_TO 44444

extern void *wl_early_blocks[3];

#endif

# python3 workload for tests/collector/test_python_shapes.c, run as
# `python3 -m wl_shape_mod`: N bytearrays of SIZE (malloc sees SIZE + 1)
# allocated by a function of the module run as __main__.
# Prints "mod PID N SIZE".
import os

SIZE, N = 90001, 10
kept = []


def fill_mod():
    for _ in range(N):
        kept.append(bytearray(SIZE))  # LINE fill_mod


fill_mod()  # LINE mod_call
print("mod", os.getpid(), N, SIZE, flush=True)

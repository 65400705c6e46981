# Small objects with known sizes, for tests/collector/test_pymem.c.
#
# pymem_keep makes n bytes objects of 100 bytes (133 bytes each with their
# header) and n lists of three items (a list object and its item array), all
# 512 bytes or less, so pymalloc serves them, and n / 10 bytes objects of 1033
# bytes, which pymalloc hands to malloc; it keeps them all in module globals
# made beforehand. pymem_leak adds k empty dicts to a global
# list at every iteration of the main loop, pausing between iterations so
# the growth spans many snapshot buckets. The true sizes come from
# sys.getsizeof (which counts the GC header and the list's item array).
import sys
import time

N = int(sys.argv[1])
ITER = int(sys.argv[2])
K = int(sys.argv[3])
PAUSE = float(sys.argv[4])

keep_bytes = [None] * N
keep_lists = [None] * N
keep_big = [None] * (N // 10)
leaked = []


def pymem_keep(n):
    for i in range(n):
        keep_bytes[i] = bytes(100)
        keep_lists[i] = [None, None, None]
        if i % 10 == 9:
            keep_big[i // 10] = bytes(1000)


def pymem_leak(k):
    for _ in range(k):
        leaked.append({})


pymem_keep(N)
for _ in range(ITER):
    pymem_leak(K)
    if PAUSE:
        time.sleep(PAUSE)
keep = sum(sys.getsizeof(x) for x in keep_bytes + keep_lists + keep_big)
leak = sum(sys.getsizeof(d) for d in leaked) + sys.getsizeof(leaked) - sys.getsizeof([])
print("pymem", keep, leak)

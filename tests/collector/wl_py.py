# python3 workload: N bytearrays of SIZE bytes kept alive (CPython asks malloc
# for SIZE + 1 bytes each), M more made and dropped. Prints
# "py N SIZE M".
import sys

n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
size = 100003
keep = [bytearray(size) for _ in range(n)]
m = n
for _ in range(m):
    b = bytearray(size)
    del b
print("py", n, size, m)

# app (version 1): two functions leak known bytes every round, each a
# bytearray of more than 512 bytes (so malloc, not pymalloc, holds them):
# leak_a 4096 B, leak_b 8192 B a round. The lists are kept alive past the
# interpreter's teardown (an extra reference), so what they hold is still
# live when the run ends.
import ctypes
import sys
import time

keep_a = []
keep_b = []


def leak_a():
    keep_a.append(bytearray(4096))


def leak_b():
    keep_b.append(bytearray(8192))


def main(rounds, ms):
    for _ in range(rounds):
        leak_a()
        leak_b()
        time.sleep(ms / 1000)


main(int(sys.argv[1]), int(sys.argv[2]))
ctypes.pythonapi.Py_IncRef(ctypes.py_object(keep_a))
ctypes.pythonapi.Py_IncRef(ctypes.py_object(keep_b))

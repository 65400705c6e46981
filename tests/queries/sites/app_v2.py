# app (version 2): as version 1, moved a few lines down, with leak_b
# leaking three times as much (24576 B a round) and leak_a unchanged.
import ctypes
import sys
import time

keep_a = []
keep_b = []

# a comment that moves every line below


def leak_a():
    keep_a.append(bytearray(4096))


def leak_b():
    keep_b.append(bytearray(24576))


def main(rounds, ms):
    for _ in range(rounds):
        leak_a()
        leak_b()
        time.sleep(ms / 1000)


main(int(sys.argv[1]), int(sys.argv[2]))
ctypes.pythonapi.Py_IncRef(ctypes.py_object(keep_a))
ctypes.pythonapi.Py_IncRef(ctypes.py_object(keep_b))

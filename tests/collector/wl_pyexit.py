# python3 workload for the interpreter's edges: threads that start and end
# all the time, and daemon threads still allocating (and releasing the GIL)
# while the main thread finalizes the interpreter under them. Prints
# "pyexit ROUNDS".
import sys
import threading
import time

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 20


def busy(n):
    if n:
        return busy(n - 1)
    while True:
        b = bytearray(4096)
        del b
        time.sleep(0)


def short_lived():
    return [bytearray(1000 + i) for i in range(8)]


for _ in range(ROUNDS):
    ts = [threading.Thread(target=short_lived) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
for i in range(4):
    threading.Thread(target=busy, args=(i * 10,), daemon=True).start()
time.sleep(0.05)
print("pyexit", ROUNDS)
sys.stdout.flush()

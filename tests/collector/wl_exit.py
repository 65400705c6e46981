# python3 workload for the _exit tests: N children forked with os.fork that
# leave through os._exit, and N multiprocessing workers (fork start method),
# which leave through os._exit themselves once their target returns. Each
# child makes K bytearrays of SIZE bytes (CPython asks malloc for SIZE + 1
# bytes each) and keeps them. At most WINDOW children are alive at once.
# Prints "pyexit N K SIZE FAILED" (FAILED: children that did not exit with
# status 0).
import multiprocessing
import os
import sys

SIZE = 100003
n = int(sys.argv[1]) if len(sys.argv) > 1 else 100
k = int(sys.argv[2]) if len(sys.argv) > 2 else 50
window = int(sys.argv[3]) if len(sys.argv) > 3 else 25
kept = []


def work():
    kept.extend(bytearray(SIZE) for _ in range(k))


def forked():
    failed = 0
    alive = 0
    for _ in range(n):
        if alive >= window:
            _, st = os.wait()
            failed += st != 0
            alive -= 1
        if os.fork() == 0:
            work()
            os._exit(0)
        alive += 1
    while alive:
        _, st = os.wait()
        failed += st != 0
        alive -= 1
    return failed


def workers():
    ctx = multiprocessing.get_context("fork")
    failed = 0
    started = []
    for _ in range(n):
        if len(started) >= window:
            p = started.pop(0)
            p.join()
            failed += p.exitcode != 0
        p = ctx.Process(target=work)
        p.start()
        started.append(p)
    for p in started:
        p.join()
        failed += p.exitcode != 0
    return failed


failed = forked() + workers()
print("pyexit", n, k, SIZE, failed, flush=True)

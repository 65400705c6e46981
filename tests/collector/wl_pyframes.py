# python3 workload with known bytes per function, for Python frames in stacks.
# Each marked line allocates one bytearray of a size used nowhere else
# (CPython asks malloc for SIZE + 1 bytes). Prints
# "pyframes BIG_N BIG CHURN_N CHURN DEEP DEPTH THREADS_N THREAD".
import sys
import threading

BIG, BIG_N = 1 << 20, 8
CHURN, CHURN_N = 1 << 19, 6
DEEP, DEPTH = 300007, 200
THREAD, THREADS_N = 777777, 4
keep = []


def leak_big():
    keep.append(bytearray(BIG))  # LINE leak_big


def churn():
    b = bytearray(CHURN)  # LINE churn
    del b


def deep(n):
    if n > 1:
        return deep(n - 1)  # LINE deep_call
    keep.append(bytearray(DEEP))  # LINE deep
    return 0


def worker():
    keep.append(bytearray(THREAD))  # LINE worker


class Holder:
    def grow(self):
        for _ in range(BIG_N):
            leak_big()


def main():
    Holder().grow()
    for _ in range(CHURN_N):
        churn()
    deep(DEPTH)
    threads = [threading.Thread(target=worker) for _ in range(THREADS_N)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


main()
print("pyframes", BIG_N, BIG, CHURN_N, CHURN, DEEP, DEPTH, THREADS_N, THREAD)
sys.stdout.flush()

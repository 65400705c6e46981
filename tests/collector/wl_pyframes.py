# python3 workload with known bytes per function, for Python frames in stacks.
# Each marked line allocates one bytearray of a size used nowhere else
# (CPython asks malloc for SIZE + 1 bytes). Prints
# "pyframes BIG_N BIG CHURN_N CHURN DEEP DEPTH THREADS_N THREAD GEN_N GEN CB_N CB NAMED".
import sys
import threading

BIG, BIG_N = 1 << 20, 8
CHURN, CHURN_N = 1 << 19, 6
DEEP, DEPTH = 300007, 200
THREAD, THREADS_N = 777777, 4
GEN, GEN_N = 654321, 3
CB, CB_N = 543210, 2
NAMED = 432101  # allocated by a function whose name is not ASCII
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


def gen():
    for _ in range(GEN_N):
        keep.append(bytearray(GEN))  # LINE gen
        yield 0


def via_c(x):
    keep.append(bytearray(CB))  # LINE via_c
    return x


def größe_λ():
    keep.append(bytearray(NAMED))  # LINE named


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
    list(gen())  # LINE main_gen
    list(map(via_c, range(CB_N)))  # LINE main_map
    größe_λ()
    threads = [threading.Thread(target=worker) for _ in range(THREADS_N)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


main()
print("pyframes", BIG_N, BIG, CHURN_N, CHURN, DEEP, DEPTH, THREADS_N, THREAD, GEN_N, GEN, CB_N,
      CB, NAMED)
sys.stdout.flush()

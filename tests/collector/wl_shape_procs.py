# python3 workload for tests/collector/test_python_shapes.c: child processes.
# NF multiprocessing workers with the fork start method and NS with spawn,
# one `python3 THIS child` started by subprocess, and NX children forked by
# os.fork that leave through os._exit. Each child allocates n bytearrays of
# the size of its kind (malloc sees SIZE + 1) in a function of its own and
# keeps them. Prints "procs PID N NF SF NS SS SC NX SX FAILED".
import multiprocessing
import os
import subprocess
import sys

N = 6
NF, SF = 3, 80021
NS, SS = 2, 80039
SC = 80051
NX, SX = 3, 80071
kept = []


def work_fork(n):
    for _ in range(n):
        kept.append(bytearray(SF))  # LINE work_fork


def work_spawn(n):
    for _ in range(n):
        kept.append(bytearray(SS))  # LINE work_spawn


def work_child(n):
    for _ in range(n):
        kept.append(bytearray(SC))  # LINE work_child


def work_exit(n):
    for _ in range(n):
        kept.append(bytearray(SX))  # LINE work_exit


def workers(method, target, count):
    ctx = multiprocessing.get_context(method)
    ps = [ctx.Process(target=target, args=(N,)) for _ in range(count)]
    for p in ps:
        p.start()
    for p in ps:
        p.join()
    return sum(p.exitcode != 0 for p in ps)


def forked():
    failed = 0
    pids = []
    for _ in range(NX):
        pid = os.fork()
        if pid == 0:
            work_exit(N)
            os._exit(0)
        pids.append(pid)
    for pid in pids:
        _, st = os.waitpid(pid, 0)
        failed += st != 0
    return failed


def main():
    failed = workers("fork", work_fork, NF)
    failed += workers("spawn", work_spawn, NS)
    failed += subprocess.run([sys.executable, __file__, "child"]).returncode != 0
    failed += forked()
    print("procs", os.getpid(), N, NF, SF, NS, SS, SC, NX, SX, failed, flush=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["child"]:
        work_child(N)
    else:
        main()

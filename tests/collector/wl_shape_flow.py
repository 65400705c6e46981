# python3 workload for tests/collector/test_python_shapes.c: threads, asyncio
# coroutines and generators. Each marked line ("# LINE name") allocates
# bytearrays of a size used nowhere else (CPython asks malloc for SIZE + 1
# bytes, above pymalloc's 512-byte limit). Mode "exact" keeps them all;
# mode "rate" has each thread allocate RATE_N of its size and drop each at
# once (for the default sampling rate). Prints
# "flow PID N SIZE_A SIZE_B SIZE_C RATE_N FETCH_N FETCH INNER_N INNER GEN_N GEN GX".
import asyncio
import os
import sys
import threading

SIZE_A, SIZE_B, SIZE_C = 100003, 100019, 100043
N = 12  # per thread, kept (exact)
RATE_N = 1400  # per thread, dropped (rate): about 133 MiB each
FETCH, FETCH_N = 70001, 5 * 4
INNER, INNER_N = 70003, 5
GEN, GEN_N = 60013, 8
GX = 60017  # a generator expression's, GEN_N of them
mode = sys.argv[1] if len(sys.argv) > 1 else "exact"
kept = []


def thread_a(n, keep):
    for _ in range(n):
        b = bytearray(SIZE_A)  # LINE thread_a
        if keep:
            kept.append(b)


def thread_b(n, keep):
    for _ in range(n):
        b = bytearray(SIZE_B)  # LINE thread_b
        if keep:
            kept.append(b)


def thread_c(n, keep):
    for _ in range(n):
        b = bytearray(SIZE_C)  # LINE thread_c
        if keep:
            kept.append(b)


def worker(fn, n, keep, barrier):
    barrier.wait()
    fn(n, keep)  # LINE worker


def run_threads(n, keep):
    # The three allocate at the same time, so that a stack read in one
    # thread while another runs Python code would show.
    barrier = threading.Barrier(3)
    ts = [threading.Thread(target=worker, args=(fn, n, keep, barrier))
          for fn in (thread_a, thread_b, thread_c)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


async def fetch(i):
    for _ in range(FETCH_N // 5):
        await asyncio.sleep(0)
        kept.append(bytearray(FETCH))  # LINE fetch


async def inner(i):
    await asyncio.sleep(0)
    return bytearray(INNER)  # LINE inner


async def outer(i):
    b = await inner(i)  # LINE outer
    kept.append(b)


async def amain():
    await asyncio.gather(*(fetch(i) for i in range(5)), *(outer(i) for i in range(INNER_N)))


def produce(n):
    for _ in range(n):
        yield bytearray(GEN)  # LINE produce


def relay(n):
    yield from produce(n)  # LINE relay


def consume():
    for b in relay(GEN_N):  # LINE consume
        kept.append(b)


if mode == "rate":
    run_threads(RATE_N, False)
else:
    run_threads(N, True)
    asyncio.run(amain())  # LINE arun
    consume()
    kept.extend(bytearray(GX) for _ in range(GEN_N))  # LINE genexpr
print("flow", os.getpid(), N, SIZE_A, SIZE_B, SIZE_C, RATE_N, FETCH_N, FETCH, INNER_N, INNER,
      GEN_N, GEN, GX, flush=True)

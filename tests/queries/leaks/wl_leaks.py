# Shapes of growth with known answers, for tests/queries/test_leak_shapes.c.
#
# Arguments: ROUNDS ROUND_MS SCALE. Every round of the main loop:
#   leak_a keeps a bytearray of 4000 * SCALE bytes;
#   leak_b keeps one of 6000 * SCALE bytes, called through via_1 .. via_5,
#          each for a fifth of the rounds in turn: five stacks, one site,
#          none of the five growing through the run on its own;
#   sawtooth adds a bytearray of 20000 * SCALE bytes to a list that every
#          fourth round empties (it grows and shrinks, and ends empty).
# keep_once allocates a block of 8 MiB a third of the way through and one
# more three rounds later, and keeps them: a big step up, in two. After
# the loop the program pauses as long as the loop took, allocating nothing
# (growth over half the run, then none). The program prints the true bytes leak_a and leak_b hold at
# the end (objects, buffers and the lists' item arrays, from sys.getsizeof).
import sys
import time

kept_a = []
kept_b = []
saw = []
once = []


def leak_a(n):
    kept_a.append(bytearray(n))


def leak_b(n):
    kept_b.append(bytearray(n))


def via_1(n):
    leak_b(n)


def via_2(n):
    leak_b(n)


def via_3(n):
    leak_b(n)


def via_4(n):
    leak_b(n)


def via_5(n):
    leak_b(n)


def keep_once():
    once.append(bytearray(8 << 20))


def sawtooth(i, n):
    saw.append(bytearray(n))
    if i % 4 == 3:
        saw.clear()


def held(lst):
    return sum(sys.getsizeof(x) for x in lst) + sys.getsizeof(lst) - sys.getsizeof([])


def main(rounds, ms, scale):
    callers = [via_1, via_2, via_3, via_4, via_5]
    for i in range(rounds):
        if i == rounds // 3 or i == rounds // 3 + 3:
            keep_once()
        leak_a(4000 * scale)
        callers[i * 5 // rounds](6000 * scale)
        sawtooth(i, 20000 * scale)
        time.sleep(ms / 1000)
    time.sleep(rounds * ms / 1000)
    print("truth", held(kept_a), held(kept_b), flush=True)


main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))

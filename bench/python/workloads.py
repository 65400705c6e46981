"""Python workloads for bench/python/run.py (run by hand; not part of the tests).

    python3 workloads.py NAME [SCALE]

json     encode and decode a document of about 4 MiB (nested dicts, lists,
         strings and numbers), through json's C accelerator
regex    compile a few patterns and run findall, sub and split over 2 MiB of
         generated log text
churn    build and drop object graphs: trees of small class instances, dicts
         and lists (most of them pymalloc's small objects)
numeric  a pure-Python numeric loop (an n-body step on floats): almost no
         allocation beyond the floats it makes and drops
empty    nothing: the interpreter's start-up and exit alone (what the others
         pay per process, apart from their steady state)

SCALE multiplies the work (default 1: about 0.3 s each on the VM the
benchmark was written on). Deterministic: the same input every run.
"""
import json
import random
import re
import sys


def wl_json(scale):
    rng = random.Random(1)
    doc = {
        "users": [
            {
                "id": i,
                "name": "user%06d" % i,
                "email": "user%d@example.org" % i,
                "score": rng.random() * 1000,
                "tags": ["t%d" % rng.randrange(100) for _ in range(5)],
                "address": {"street": "%d Main St" % i, "city": "City%d" % (i % 97),
                            "zip": "%05d" % (i % 99999)},
                "active": i % 3 == 0,
            }
            for i in range(12000)
        ]
    }
    total = 0
    for _ in range(scale):
        text = json.dumps(doc)
        back = json.loads(text)
        total += len(text) + len(back["users"])
    return total


def wl_regex(scale):
    rng = random.Random(2)
    levels = ["INFO", "WARN", "ERROR", "DEBUG"]
    lines = []
    for i in range(30000):
        lines.append("2024-05-%02d 12:%02d:%02d %s [worker-%d] request id=%08x took %dms path=/api/v1/"
                     "item/%d user=%s" % (1 + i % 28, i % 60, (i * 7) % 60, rng.choice(levels),
                                          i % 16, rng.getrandbits(32), rng.randrange(2000),
                                          rng.randrange(10 ** 6), "u%d" % rng.randrange(5000)))
    text = "\n".join(lines)
    total = 0
    for k in range(scale):
        pats = [re.compile(r"id=([0-9a-f]{8}) took (\d+)ms"),
                re.compile(r"^(\S+ \S+) (ERROR|WARN) \[worker-(\d+)\]", re.M),
                re.compile(r"path=(/api/v1/item/\d+) user=(u\d+)")]
        total += len(pats[0].findall(text))
        total += sum(1 for _ in pats[1].finditer(text))
        total += len(pats[2].sub(r"\2:\1", text))
        total += len(re.split(r"\s+", text))
        re.purge()
    return total


class Node:
    __slots__ = ("key", "left", "right", "payload")

    def __init__(self, key, payload):
        self.key = key
        self.left = None
        self.right = None
        self.payload = payload


def insert(root, node):
    cur = root
    while True:
        if node.key < cur.key:
            if cur.left is None:
                cur.left = node
                return
            cur = cur.left
        else:
            if cur.right is None:
                cur.right = node
                return
            cur = cur.right


def wl_churn(scale):
    rng = random.Random(3)
    total = 0
    for _ in range(10 * scale):
        root = Node(0.5, None)
        for i in range(10000):
            insert(root, Node(rng.random(), {"i": i, "l": [i, i + 1], "s": "x%d" % i}))
        graph = {i: [j for j in range(i % 7)] for i in range(5000)}
        total += len(graph)
        del root, graph
    return total


def wl_numeric(scale):
    bodies = [[1.0 * i, 0.5 * i, -0.25 * i, 0.01, 0.02, -0.01, 1.0 + i] for i in range(5)]
    dt = 0.001
    for _ in range(40000 * scale):
        for i in range(5):
            bi = bodies[i]
            for j in range(i + 1, 5):
                bj = bodies[j]
                dx, dy, dz = bi[0] - bj[0], bi[1] - bj[1], bi[2] - bj[2]
                d2 = dx * dx + dy * dy + dz * dz + 0.01
                mag = dt / (d2 * d2 ** 0.5)
                bi[3] -= dx * bj[6] * mag
                bi[4] -= dy * bj[6] * mag
                bi[5] -= dz * bj[6] * mag
                bj[3] += dx * bi[6] * mag
                bj[4] += dy * bi[6] * mag
                bj[5] += dz * bi[6] * mag
        for b in bodies:
            b[0] += dt * b[3]
            b[1] += dt * b[4]
            b[2] += dt * b[5]
    return int(sum(b[0] for b in bodies) * 1000)


def wl_empty(scale):
    return scale


WORKLOADS = {"json": wl_json, "regex": wl_regex, "churn": wl_churn, "numeric": wl_numeric,
             "empty": wl_empty}

if __name__ == "__main__":
    name = sys.argv[1]
    scale = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    print(name, WORKLOADS[name](scale))

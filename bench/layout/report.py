#!/usr/bin/env python3
"""How the code is laid out (run by hand; not part of the tests).

    python3 bench/layout/report.py [--build DIR] [--long N] [--list]

Prints, per folder of the product (tests and bench apart):

    lines      every line of its C, header, JavaScript and SQL files
    files      how many such files
    long fns   C and JavaScript functions longer than N lines (default 80),
               from the line of the name to the closing brace
    cycles     groups of C files that call each other round a loop, from the
               built objects (nm: which file defines a global symbol that
               another file uses), so only real calls count, not includes;
               one group per strongly connected component of two or more
               files

--list names the long functions and the files of each cycle. The build tree
(default build) must be built; the source is read from this checkout.
"""
import argparse
import os
import re
import subprocess
import sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FOLDERS = ["collector", "server", "queries", "common", "schema", "clients/cli", "clients/web",
           "tests", "bench"]
EXTS = (".c", ".h", ".cpp", ".js", ".mjs", ".sql")


def files_of(folder):
    out = []
    for d, _, names in os.walk(os.path.join(ROOT, folder)):
        if "node_modules" in d or "/corpus" in d:
            continue
        out += [os.path.join(d, n) for n in names if n.endswith(EXTS)]
    return sorted(out)


C_START = re.compile(r"^[A-Za-z_][\w\s\*,()\[\]]*?\b(\w+)\s*\(")
JS_START = re.compile(r"^\s*(?:export\s+)?(?:async\s+)?function\s*\*?\s*(\w+)\s*\(|"
                      r"^\s*(?:const|let|var)\s+(\w+)\s*=\s*(?:async\s*)?\([^)]*\)\s*=>\s*\{\s*$|"
                      r"^\s{2,}(?:async\s+)?(\w+)\s*\([^)]*\)\s*\{\s*$")


def c_functions(path, lines):
    """(name, first line, length) of each function: a declaration at column
    0 followed, at its end, by a brace at column 0, up to the "}" at
    column 0 (the clang-format layout this repository keeps)."""
    out, i = [], 0
    while i < len(lines):
        m = C_START.match(lines[i])
        if m and not lines[i].startswith(("static inline", "#", "typedef", "struct ", "enum ")) or (
                m and lines[i].startswith("static inline")):
            j = i
            while j < len(lines) and j < i + 8 and not lines[j].startswith("{") and \
                    not lines[j].rstrip().endswith(";"):
                j += 1
            if j < len(lines) and lines[j].startswith("{"):
                k = j + 1
                while k < len(lines) and not lines[k].startswith("}"):
                    k += 1
                out.append((m.group(1), i + 1, k - i + 1))
                i = k + 1
                continue
        i += 1
    return out


def js_functions(path, lines):
    """(name, first line, length) of each function or method whose body
    opens on its line, up to the brace that closes it (strings and comments
    are not parsed: good enough for this code's layout)."""
    out = []
    for i, l in enumerate(lines):
        m = JS_START.match(l)
        if not m or not l.rstrip().endswith("{"):
            continue
        name = next(g for g in m.groups() if g)
        if name in ("if", "for", "while", "switch", "catch", "return"):
            continue
        depth = 0
        for k in range(i, len(lines)):
            depth += lines[k].count("{") - lines[k].count("}")
            if depth <= 0:
                out.append((name, i + 1, k - i + 1))
                break
    return out


def objects(build):
    """source path (relative) -> object path, for the product's C objects."""
    out = {}
    for d, _, names in os.walk(build):
        for n in names:
            if not n.endswith(".c.o") or ".dir" not in d:
                continue
            rel = os.path.relpath(d, build)
            parts = rel.split(os.sep)
            k = next(i for i, p in enumerate(parts) if p == "CMakeFiles")
            src_dir = os.sep.join(parts[:k])
            src = os.path.join(src_dir, os.path.relpath(os.path.join(d, n[:-2]),
                                                        os.path.join(build, rel)))
            if os.path.exists(os.path.join(ROOT, src)):
                out.setdefault(src, os.path.join(d, n))
    return out


def symbols(obj):
    r = subprocess.run(["nm", "--defined-only", "-g", obj], capture_output=True, text=True)
    defs = {l.split()[-1] for l in r.stdout.splitlines() if len(l.split()) == 3}
    r = subprocess.run(["nm", "-u", obj], capture_output=True, text=True)
    uses = {l.split()[-1] for l in r.stdout.splitlines() if l.strip()}
    return defs, uses


def sccs(nodes, edges):
    """Tarjan's strongly connected components."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def cycles(build, folder, objs):
    mine = {s: o for s, o in objs.items() if s.startswith(folder + "/")}
    syms = {s: symbols(o) for s, o in mine.items()}
    owner = {}
    for s, (defs, _) in syms.items():
        for d in defs:
            owner.setdefault(d, s)
    edges = defaultdict(set)
    for s, (_, uses) in syms.items():
        for u in uses:
            if u in owner and owner[u] != s:
                edges[s].add(owner[u])
    return [c for c in sccs(list(mine), edges) if len(c) > 1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--long", type=int, default=80)
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args()
    objs = objects(a.build)
    rows, listing = [], []
    for folder in FOLDERS:
        fs = files_of(folder)
        nlines, long_fns = 0, []
        for f in fs:
            lines = open(f, encoding="utf-8", errors="replace").read().split("\n")
            nlines += len(lines) - 1
            fns = c_functions(f, lines) if f.endswith((".c", ".cpp")) else \
                js_functions(f, lines) if f.endswith((".js", ".mjs")) else []
            long_fns += [(os.path.relpath(f, ROOT), name, at, n) for name, at, n in fns
                         if n > a.long]
        cyc = cycles(a.build, folder, objs) if folder not in ("clients/web", "schema") else []
        rows.append((folder, len(fs), nlines, len(long_fns), len(cyc)))
        listing.append((folder, long_fns, cyc))
    print(f"{'folder':<13} {'files':>5} {'lines':>7} {'long fns':>8} {'cycles':>6}")
    for r in rows:
        print(f"{r[0]:<13} {r[1]:>5} {r[2]:>7} {r[3]:>8} {r[4]:>6}")
    prod = [r for r in rows if r[0] not in ("tests", "bench")]
    print(f"{'product':<13} {sum(r[1] for r in prod):>5} {sum(r[2] for r in prod):>7} "
          f"{sum(r[3] for r in prod):>8} {sum(r[4] for r in prod):>6}")
    if a.list:
        for folder, long_fns, cyc in listing:
            for f, name, at, n in sorted(long_fns, key=lambda x: -x[3]):
                print(f"long  {n:4d}  {f}:{at} {name}")
            for c in cyc:
                print(f"cycle {folder}: " + " <-> ".join(os.path.basename(x) for x in c))


if __name__ == "__main__":
    main()

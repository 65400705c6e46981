#!/usr/bin/env python3
"""Python overhead benchmark (run by hand; not part of the tests).

Runs the workloads of workloads.py (JSON, regular expressions, object-graph
churn, a numeric loop) on Debian's python3:

    alone          python3 workloads.py NAME
    hs default     under the collector at the default rate (512 KiB)
    hs sample 1    under the collector at every allocation
    tracemalloc    python3 -X tracemalloc=25 (Python frames only, 25 deep)
    heaptrack      heaptrack python3 … (when installed: apt-get install heaptrack)
    hs run (CLI)   `heapstore run -- python3 …` end to end, default rate

The collector configurations give the program exactly the environment that
`heapstore run` gives it (LD_PRELOAD, HEAPSTORE_URL of a server this script
starts once on a loopback port, HEAPSTORE_EXIT_FLUSH_MS, the sampling), and
time the program alone; "hs run (CLI)" times the command a user types,
which adds its start-up and the summary it prints after the program.

Each round runs, per workload, alone before and after every other
configuration (A X A Y A …); a configuration's ratio in that round is its
wall time over the mean of the two alone runs around it. The table shows
the median ratio over the rounds with its range (min-max), the overhead of
every allocation (ratio - 1) over tracemalloc's, and then, from one more
run at every allocation per workload: the stream bytes and the database
bytes per event (the stream imported with `heapstore import` into a fresh
file), the share of the run's stacks that hold Python frames, and, with
perf installed, the process_vm_readv calls per sample (perf stat), the CPU
per sample of the Python walk (perf record: hs_python.c's functions, their
system calls and the rest of the kernel's time, an upper bound) and the
run's whole CPU per sample (the interpreter's own work included).

    python3 bench/python/run.py [--build DIR] [--rounds N] [--scale K]
                                [--workloads json,regex,…] [--no-heaptrack] [--no-perf]
                                [--counters N] [--before DIR]

--counters N then runs, per workload, N interleaved rounds of python3 alone
and at the default rate (and at the default rate with the collector of
--before DIR, to compare a change) under perf stat, each to a file:
user-space instructions (median) and cycles (minimum), and their ratios
over python3 alone. A loaded machine disturbs these far less than wall
time. The "empty" workload (start-up and exit only) tells the per-process
part of each workload's figure from its steady state. --rounds 0 runs the
counters only.
"""
import argparse
import json
import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

PYTHON = "/usr/bin/python3"
HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = os.path.join(HERE, "workloads.py")


def wall(argv, env_extra, out_dir):
    """Runs argv with env_extra added; returns its wall time in seconds."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env.update(env_extra)
    t0 = time.monotonic()
    p = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL,
                       stderr=open(os.path.join(out_dir, "stderr"), "ab"), cwd=out_dir)
    t = time.monotonic() - t0
    if p.returncode != 0:
        sys.exit(f"{' '.join(argv[:4])} failed (status {p.returncode}); see {out_dir}/stderr")
    return t


def start_server(build, db, log):
    """heapstore-server on an ephemeral loopback port; returns (process, port)."""
    p = subprocess.Popen([os.path.join(build, "bin/heapstore-server"), "--db", db, "--listen",
                          "127.0.0.1:0"], stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", open(log).read())
        if m:
            return p, int(m.group(1))
        time.sleep(0.05)
    p.kill()
    sys.exit(f"heapstore-server did not start; see {log}")


def bye_of(cli, path):
    out = subprocess.run([cli, "dump", path], capture_output=True, text=True).stdout
    m = re.search(r"BYE .*alloc_events=(\d+) free_events=(\d+)", out)
    if not m:
        sys.exit(f"no BYE in {path}")
    return int(m.group(1)), int(m.group(2))


def python_walk_functions():
    """Names of the functions defined in collector/hs_python.c: the walk."""
    src = os.path.join(HERE, "..", "..", "collector", "hs_python.c")
    names = set()
    for line in open(src):
        m = re.match(r"^(?:static\s+)?[A-Za-z_][\w\s\*]*?\b(\w+)\([^;]*$", line)
        if m and not line.startswith((" ", "\t", "#", "/")):
            names.add(m.group(1))
    return names


def perf_costs(argv, env, tmp, samples):
    """What the Python walk costs per sampled allocation, from perf, on one
    run at every allocation: (process_vm_readv calls a sample, µs of CPU a
    sample in the walk, µs of CPU a sample in all). The walk's CPU is that of
    perf's samples in hs_python.c's functions, in process_vm_readv and in the
    kernel (the kernel's share is nearly all those system calls at every
    allocation: an upper bound). None when perf cannot record."""
    data = os.path.join(tmp, "perf.data")
    stat = os.path.join(tmp, "perf.stat")
    cmd = ["env"] + [f"{k}={v}" for k, v in env.items()] + argv
    st = subprocess.run(["perf", "stat", "-x,", "-o", stat, "-e",
                         "syscalls:sys_enter_process_vm_readv,task-clock", "--"] + cmd,
                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    rec = subprocess.run(["perf", "record", "-q", "-F", "999", "-o", data, "--"] + cmd,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if st.returncode != 0 or rec.returncode != 0:
        print(f"perf failed: {(st.stderr + rec.stderr).strip()[:200]}", file=sys.stderr)
        return None
    readv = task_ms = None
    for line in open(stat):
        f = line.strip().split(",")
        if len(f) > 2 and f[2].startswith("syscalls:sys_enter_process_vm_readv"):
            readv = float(f[0])
        elif len(f) > 2 and f[2] == "task-clock":
            task_ms = float(f[0])
    rep = subprocess.run(["perf", "report", "-i", data, "--comm", "python3", "--sort",
                          "dso,symbol", "--stdio"], capture_output=True, text=True).stdout
    walk_fns = python_walk_functions()
    walk = total = 0.0
    for line in rep.splitlines():
        m = re.match(r"^\s+([\d.]+)%\s+(\S+)\s+\[([.k])\]\s+(\S+)", line)
        if not m:
            continue
        pct, dso, kind, sym = float(m.group(1)), m.group(2), m.group(3), m.group(4)
        total += pct
        if kind == "k" or sym == "process_vm_readv" or (
                dso.startswith("libheapstore") and sym in walk_fns):
            walk += pct
    if readv is None or task_ms is None or not total or not samples:
        return None
    return (readv / samples, walk / total * task_ms * 1e3 / samples,
            task_ms * 1e3 / samples)


def db_bytes(path):
    c = sqlite3.connect(path)
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    n = c.execute("PRAGMA page_count").fetchone()[0] * c.execute("PRAGMA page_size").fetchone()[0]
    c.close()
    return n


def perf_counts(argv, env_extra, out_dir):
    """User-space (instructions, cycles) of one run, from perf stat."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env.update(env_extra)
    out = subprocess.run(["perf", "stat", "-x", ",", "-e", "instructions:u,cycles:u", "--"] + argv,
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         cwd=out_dir).stderr
    got = {}
    for line in out.splitlines():
        f = line.split(",")
        if len(f) > 2 and f[0].isdigit():
            got[f[2].split(":")[0]] = int(f[0])
    return got.get("instructions", 0), got.get("cycles", 0)


def counters(n, names, scale, libs, tmp):
    """N interleaved rounds per workload of python3 alone and under each
    collector of libs (label, path) at the default rate, writing to a file;
    prints instructions (median) and cycles (minimum) and their ratios."""
    print(f"\nuser space, {n} interleaved runs each (perf stat): instructions (median) and "
          f"cycles (minimum), ratios over python3 alone")
    print(f"{'workload':<9} {'configuration':<16} {'instructions':>14} {'ratio':>7} "
          f"{'cycles':>14} {'ratio':>7}")
    for name in names:
        wl = [PYTHON, WORKLOADS, name, str(scale)]
        cfgs = [("alone", {})] + [
            (label, {"LD_PRELOAD": path, "HEAPSTORE_URL": "file://" + os.path.join(tmp, "c.hsp")})
            for label, path in libs]
        ins = {c: [] for c, _ in cfgs}
        cyc = {c: [] for c, _ in cfgs}
        for _ in range(n):
            for c, env in cfgs:
                i, y = perf_counts(wl, env, tmp)
                ins[c].append(i)
                cyc[c].append(y)
        bi, bc = statistics.median(ins["alone"]), min(cyc["alone"])
        for c, _ in cfgs:
            mi, mc = statistics.median(ins[c]), min(cyc[c])
            print(f"{name:<9} {c:<16} {mi:>14,.0f} {mi / bi:>7.3f} {mc:>14,} {mc / bc:>7.3f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--scale", type=int, default=1)
    ap.add_argument("--workloads", default="json,regex,churn,numeric")
    ap.add_argument("--no-heaptrack", action="store_true")
    ap.add_argument("--no-perf", action="store_true")
    ap.add_argument("--counters", type=int, default=0, metavar="N")
    ap.add_argument("--before", metavar="DIR", help="another build for --counters")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    lib = os.path.join(build, "lib/libheapstore.so")
    cli = os.path.join(build, "bin/heapstore")
    for f in (lib, cli, os.path.join(build, "bin/heapstore-server"), PYTHON):
        if not os.path.exists(f):
            sys.exit(f"missing {f}")
    names = a.workloads.split(",")
    tmp = tempfile.mkdtemp(prefix="hs-bench-python.")
    libs = [("hs default", lib)]
    if a.before:
        libs.append(("before default", os.path.join(os.path.abspath(a.before),
                                                    "lib/libheapstore.so")))
    if a.rounds == 0:
        counters(a.counters, names, a.scale, libs, tmp)
        shutil.rmtree(tmp, ignore_errors=True)
        return
    srv, port = start_server(build, os.path.join(tmp, "bench.db"), os.path.join(tmp, "server.log"))
    url = f"tcp://127.0.0.1:{port}"
    heaptrack = None if a.no_heaptrack else shutil.which("heaptrack")
    hs_env = {"LD_PRELOAD": lib, "HEAPSTORE_URL": url, "HEAPSTORE_EXIT_FLUSH_MS": "30000"}

    def configs(name):
        wl = [PYTHON, WORKLOADS, name, str(a.scale)]
        c = [("hs default", wl, hs_env),
             ("hs sample 1", wl, dict(hs_env, HEAPSTORE_SAMPLE_BYTES="1")),
             ("tracemalloc", [PYTHON, "-X", "tracemalloc=25"] + wl[1:], {})]
        if heaptrack:
            c.append(("heaptrack", [heaptrack, "-o", os.path.join(tmp, "ht")] + wl, {}))
        c.append(("hs run (CLI)", [cli, "run", "--"] + wl, {"HEAPSTORE_URL": url}))
        return c

    cols = [c[0] for c in configs(names[0])]
    alone = {n: [] for n in names}
    ratios = {n: {c: [] for c in cols} for n in names}
    t_start = time.monotonic()
    try:
        for r in range(a.rounds):
            for n in names:
                wl = [PYTHON, WORKLOADS, n, str(a.scale)]
                before = wall(wl, {}, tmp)
                alone[n].append(before)
                for col, argv, env in configs(n):
                    for f in os.listdir(tmp):
                        if f.startswith("ht"):
                            os.unlink(os.path.join(tmp, f))
                    t = wall(argv, env, tmp)
                    after = wall(wl, {}, tmp)
                    alone[n].append(after)
                    ratios[n][col].append(t / ((before + after) / 2))
                    before = after
            print(f"round {r + 1}/{a.rounds} done ({time.monotonic() - t_start:.0f} s)",
                  file=sys.stderr)

        # One more run of each at every allocation, to a file: its bytes.
        extra = {}
        for n in names:
            wl = [PYTHON, WORKLOADS, n, str(a.scale)]
            hsp = os.path.join(tmp, f"{n}.hsp")
            env = dict(hs_env, HEAPSTORE_URL="file://" + hsp, HEAPSTORE_SAMPLE_BYTES="1")
            wall(wl, env, tmp)
            allocs, frees = bye_of(cli, hsp)
            db = os.path.join(tmp, f"{n}.db")
            subprocess.run([cli, "import", "--db", db, hsp], check=True,
                           stdout=subprocess.DEVNULL)
            # through the CLI: traces and run_stacks are heapstore's own tables
            # (virtual, over blocks: schema/hs_schema.h), which Python's sqlite3 lacks
            out = subprocess.run(
                [cli, "sql", "--db", db, "--json",
                 "SELECT (SELECT count(*) FROM run_stacks s WHERE EXISTS (WITH RECURSIVE "
                 "up(node) AS (SELECT s.trace UNION ALL SELECT t.parent FROM up JOIN traces t "
                 "ON t.id = up.node WHERE t.parent != 0) SELECT 1 FROM up JOIN traces t ON "
                 "t.id = up.node JOIN frames f ON f.id = t.frame WHERE f.module = '' AND "
                 "f.file != '')), (SELECT count(*) FROM run_stacks)"],
                check=True, capture_output=True, text=True).stdout
            with_py, stacks = json.loads(out)["rows"][0]
            events = allocs + frees
            extra[n] = {"events": events, "stream": os.path.getsize(hsp) / max(events, 1),
                        "db": db_bytes(db) / max(events, 1),
                        "py_stacks": with_py / max(stacks, 1), "perf": None}
            if not a.no_perf and shutil.which("perf"):
                for f in os.listdir(tmp):
                    if f.startswith("perf"):
                        os.unlink(os.path.join(tmp, f))
                penv = dict(env, HEAPSTORE_URL="file://" + os.path.join(tmp, "perf.hsp"))
                extra[n]["perf"] = perf_costs(wl, penv, tmp, allocs)
    finally:
        srv.terminate()
        srv.wait()

    med = statistics.median

    def cell(xs):
        return f"{med(xs):.2f} [{min(xs):.2f}-{max(xs):.2f}]"

    version = subprocess.run([PYTHON, "--version"], capture_output=True, text=True).stdout.split()
    print(f"\n{PYTHON} {version[-1]}, {os.cpu_count()} CPUs, "
          f"{a.rounds} rounds, scale {a.scale}; wall ratio over python3 alone, "
          f"median [min-max]\n")
    head = f"{'workload':<9} {'alone s':>18}" + "".join(f" {c:>20}" for c in cols)
    head += f" {'ovh s1/tm':>10}"
    print(head)
    for n in names:
        row = f"{n:<9} {cell(alone[n]):>18}"
        for c in cols:
            row += f" {cell(ratios[n][c]):>20}"
        o1 = med(ratios[n]["hs sample 1"]) - 1
        otm = med(ratios[n]["tracemalloc"]) - 1
        row += f" {o1 / otm if otm > 0 else float('nan'):>10.2f}"
        print(row)
    print("\n(ovh s1/tm: overhead (ratio - 1) at every allocation over tracemalloc's; "
          "<= 1 means no more costly)\n")
    print(f"{'workload':<9} {'events':>9} {'stream B/ev':>12} {'db B/ev':>9} "
          f"{'py stacks':>10} {'readv/sample':>13} {'walk us/sample':>15} {'CPU us/sample':>14}")
    for n in names:
        e = extra[n]
        p = e["perf"]
        readv, walk, cpu = (f"{p[0]:.1f}", f"{p[1]:.1f}", f"{p[2]:.1f}") if p else ("-",) * 3
        print(f"{n:<9} {e['events']:>9} {e['stream']:>12.1f} {e['db']:>9.1f} "
              f"{100 * e['py_stacks']:>9.0f}% {readv:>13} {walk:>15} {cpu:>14}")
    print("\n(events: sampled allocations and their frees at every allocation; B/ev: whole "
          "stream or database file over them, stacks and symbols included; py stacks: share "
          "of the run's stacks holding Python frames; readv: process_vm_readv calls per "
          "sampled allocation; walk: CPU per sampled allocation in the Python walk (its "
          "functions, its system calls and the rest of the kernel's time: an upper bound); "
          "CPU: the whole run's CPU over its sampled allocations, the interpreter's own "
          "work included)")
    if a.counters:
        counters(a.counters, names, a.scale, libs, tmp)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

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
file), the share of sampled allocations whose stack holds Python frames,
and, with perf installed, what the Python walk (hs_py_merge, its system
calls included) and the whole stack capture cost per sample.

    python3 bench/python/run.py [--build DIR] [--rounds N] [--scale K]
                                [--workloads json,regex,…] [--no-heaptrack] [--no-perf]
"""
import argparse
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


def perf_costs(argv, env, tmp):
    """(µs per sample in hs_py_merge, µs per sample in the whole stack
    capture, samples) from perf's DWARF call graphs of one run at every
    allocation: each function's inclusive share of the CPU time, over the
    sampled allocations. None when perf cannot record."""
    data = os.path.join(tmp, "perf.data")
    hsp = env["HEAPSTORE_URL"][len("file://"):]
    rec = subprocess.run(["perf", "record", "-q", "-F", "1999", "--call-graph", "dwarf,8192", "-o",
                          data, "--", "env"] + [f"{k}={v}" for k, v in env.items()] + argv,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if rec.returncode != 0:
        print(f"perf record failed: {rec.stderr.strip()[:200]}", file=sys.stderr)
        return None
    rep = subprocess.run(["perf", "report", "-i", data, "--children", "--sort", "symbol",
                          "--stdio", "-g", "none"], capture_output=True, text=True).stdout
    m = re.search(r"Event count \(approx\.\): (\d+)", rep)
    if not m:
        return None
    cpu_ns = int(m.group(1))  # cpu-clock counts nanoseconds

    def share(fn):
        m = re.search(r"^\s+([\d.]+)%\s+[\d.]+%\s+\[\.\]\s+" + re.escape(fn) + r"\s", rep, re.M)
        return float(m.group(1)) / 100 if m else 0.0

    # env's run ends at its exec; python's goes on in a file of its own
    # (PATH.<pid>): the python run is the one with the most samples.
    d, base = os.path.dirname(hsp), os.path.basename(hsp)
    samples = max([bye_of(perf_costs.cli, os.path.join(d, f))[0] for f in os.listdir(d)
                   if f.startswith(base)] or [0])
    if not samples:
        return None
    return (share("hs_py_merge") * cpu_ns / 1e3 / samples,
            share("hs__stack_capture") * cpu_ns / 1e3 / samples, samples)


def db_bytes(path):
    c = sqlite3.connect(path)
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    n = c.execute("PRAGMA page_count").fetchone()[0] * c.execute("PRAGMA page_size").fetchone()[0]
    c.close()
    return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--scale", type=int, default=1)
    ap.add_argument("--workloads", default="json,regex,churn,numeric")
    ap.add_argument("--no-heaptrack", action="store_true")
    ap.add_argument("--no-perf", action="store_true")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    lib = os.path.join(build, "lib/libheapstore.so")
    cli = os.path.join(build, "bin/heapstore")
    for f in (lib, cli, os.path.join(build, "bin/heapstore-server"), PYTHON):
        if not os.path.exists(f):
            sys.exit(f"missing {f}")
    perf_costs.cli = cli
    names = a.workloads.split(",")
    tmp = tempfile.mkdtemp(prefix="hs-bench-python.")
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
            c = sqlite3.connect(db)
            with_py = c.execute(
                "SELECT count(*) FROM run_stacks s WHERE EXISTS (WITH RECURSIVE up(node) AS "
                "(SELECT s.trace UNION ALL SELECT t.parent FROM up JOIN traces t ON t.id = "
                "up.node WHERE t.parent != 0) SELECT 1 FROM up JOIN traces t ON t.id = up.node "
                "JOIN frames f ON f.id = t.frame WHERE f.module = '' AND f.file != '')"
            ).fetchone()[0]
            stacks = c.execute("SELECT count(*) FROM run_stacks").fetchone()[0]
            c.close()
            events = allocs + frees
            extra[n] = {"events": events, "stream": os.path.getsize(hsp) / max(events, 1),
                        "db": db_bytes(db) / max(events, 1),
                        "py_stacks": with_py / max(stacks, 1), "perf": None}
            if not a.no_perf and shutil.which("perf"):
                for f in os.listdir(tmp):
                    if f.startswith("perf"):
                        os.unlink(os.path.join(tmp, f))
                penv = dict(env, HEAPSTORE_URL="file://" + os.path.join(tmp, "perf.hsp"))
                extra[n]["perf"] = perf_costs(wl, penv, tmp)
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
          f"{'py stacks':>10} {'walk us/sample':>15} {'capture us/sample':>18}")
    for n in names:
        e = extra[n]
        p = e["perf"]
        walk = f"{p[0]:.1f}" if p else "-"
        cap = f"{p[1]:.1f}" if p else "-"
        print(f"{n:<9} {e['events']:>9} {e['stream']:>12.1f} {e['db']:>9.1f} "
              f"{100 * e['py_stacks']:>9.0f}% {walk:>15} {cap:>18}")
    print("\n(events: sampled allocations and their frees at every allocation; B/ev: whole "
          "stream or database file over them, stacks and symbols included; py stacks: share "
          "of the run's stacks holding Python frames; walk: hs_py_merge, capture: "
          "hs__stack_capture (native unwinding and the walk), inclusive CPU per sampled "
          "allocation from perf's call graphs)")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The collector on real programs, against heaptrack and jemalloc's profiler
(run by hand; not part of the tests).

Workloads (--workloads, default all):
    cxx_map  cxx_map.cpp built with g++ -O2: std::map<std::string,
             std::string> built, searched, rewritten and erased
    cc1      gcc's cc1 -O2 on collector/hs_python.c
    sqlite3  the sqlite3 shell inserting --rows rows (default 200000) into
             a fresh database file
    git      `git log -p` on this repository

Each round runs, for each workload, every configuration right after a run
of the program alone (A X A Y ...); a configuration's ratio in a round is
its wall time (and CPU time) over that alone run's. Configurations:

    hs default   libheapstore.so, default rate, file://
    hs rate 1    libheapstore.so, HEAPSTORE_SAMPLE_BYTES=1, file://
    before ...   the same with --before DIR's collector, when given
    heaptrack    heaptrack -o FILE (every allocation)
    je prof      jemalloc with prof:true,lg_prof_sample:19 (512 KiB),
                 against jemalloc alone

The table gives median ratios over the rounds and the load average.

    python3 bench/collector/real.py [--build build] [--before DIR] [--rounds 7]
                                    [--workloads cxx_map,cc1,sqlite3,git]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def run(argv, env_extra, cwd, stdin_path=None):
    """(wall s, CPU s of the process and its waited-for children)."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env.update(env_extra)
    stdin = open(stdin_path, "rb") if stdin_path else subprocess.DEVNULL
    t0 = time.monotonic()
    p = subprocess.Popen(argv, env=env, stdin=stdin, stdout=subprocess.DEVNULL,
                         stderr=open(os.path.join(cwd, "stderr"), "ab"), cwd=cwd)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.monotonic() - t0
    if stdin_path:
        stdin.close()
    if status != 0:
        sys.exit(f"{argv} failed (status {status}); see {cwd}/stderr")
    return wall, ru.ru_utime + ru.ru_stime


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--before")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--rows", type=int, default=200000)
    ap.add_argument("--workloads", default="cxx_map,cc1,sqlite3,git")
    ap.add_argument("--no-default", action="store_true", help="leave out the default-rate runs")
    a = ap.parse_args()
    lib = os.path.join(os.path.abspath(a.build), "lib/libheapstore.so")
    if not os.path.exists(lib):
        sys.exit(f"build first: {lib}")
    blib = os.path.join(os.path.abspath(a.before), "lib/libheapstore.so") if a.before else None
    tmp = tempfile.mkdtemp(prefix="hs-bench-real.")
    work = os.path.join(tmp, "work")
    os.mkdir(work)
    cxx = os.path.join(tmp, "cxx_map")
    subprocess.check_call(["g++", "-O2", "-g", "-o", cxx, os.path.join(HERE, "cxx_map.cpp")])
    cc1 = subprocess.check_output(["gcc", "-print-prog-name=cc1"], text=True).strip()
    multiarch = subprocess.check_output(["gcc", "-print-multiarch"], text=True).strip()
    sql = os.path.join(tmp, "insert.sql")
    with open(sql, "w") as f:
        f.write(f"""CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT, c REAL);
BEGIN;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {a.rows})
INSERT INTO t SELECT i, 'row' || i, i * 0.5 FROM n;
COMMIT;
""")
    workloads = {
        "cxx_map": ([cxx], None),
        "cc1": ([cc1, "-quiet", "-imultiarch", multiarch, "-D_GNU_SOURCE", "-O2",
                 "-I" + os.path.join(ROOT, "common"), "-I" + os.path.join(ROOT, "collector"),
                 os.path.join(ROOT, "collector/hs_python.c"), "-o", os.path.join(work, "o.s")],
                None),
        "sqlite3": (["sqlite3", os.path.join(work, "w.db")], sql),
        "git": (["git", "-C", ROOT, "log", "-p"], None),
    }
    names = [w for w in a.workloads.split(",") if w]
    heaptrack = shutil.which("heaptrack")
    hsp = os.path.join(tmp, "run.hsp")
    confs = []
    if not a.no_default:
        confs.append(("hs default", lambda argv: (argv, {"LD_PRELOAD": lib,
                                                         "HEAPSTORE_URL": "file://" + hsp})))
    confs.append(("hs rate 1", lambda argv: (argv, {"LD_PRELOAD": lib, "HEAPSTORE_URL":
                                                    "file://" + hsp,
                                                    "HEAPSTORE_SAMPLE_BYTES": "1"})))
    if blib:
        if not a.no_default:
            confs.append(("before default", lambda argv: (argv, {
                "LD_PRELOAD": blib, "HEAPSTORE_URL": "file://" + hsp})))
        confs.append(("before rate 1", lambda argv: (argv, {
            "LD_PRELOAD": blib, "HEAPSTORE_URL": "file://" + hsp,
            "HEAPSTORE_SAMPLE_BYTES": "1"})))
    if heaptrack:
        confs.append(("heaptrack", lambda argv: ([heaptrack, "-o", os.path.join(tmp, "ht")] + argv,
                                                 {})))
    have_je = os.path.exists(JEMALLOC)
    ratios = {(w, c[0]): ([], []) for w in names for c in confs}
    je = {w: ([], []) for w in names}
    load0 = os.getloadavg()
    t_start = time.monotonic()

    def clean():
        for f in os.listdir(tmp):
            if f.startswith("run") or f.startswith("ht"):
                os.unlink(os.path.join(tmp, f))
        for f in os.listdir(work):
            os.unlink(os.path.join(work, f))

    for r in range(a.rounds):
        for w in names:
            argv, stdin = workloads[w]
            for cname, make in confs:
                clean()
                base_w, base_c = run(argv, {}, work, stdin)
                clean()
                cargv, env = make(argv)
                cw, cc = run(cargv, env, work, stdin)
                ratios[(w, cname)][0].append(cw / base_w)
                ratios[(w, cname)][1].append(cc / max(base_c, 1e-6))
            if have_je:
                clean()
                base_w, base_c = run(argv, {"LD_PRELOAD": JEMALLOC}, work, stdin)
                clean()
                cw, cc = run(argv, {"LD_PRELOAD": JEMALLOC,
                                    "MALLOC_CONF": "prof:true,lg_prof_sample:19"}, work, stdin)
                je[w][0].append(cw / base_w)
                je[w][1].append(cc / max(base_c, 1e-6))
        print(f"round {r + 1}/{a.rounds} done ({time.monotonic() - t_start:.0f} s)",
              file=sys.stderr)
    med = statistics.median
    print(f"\nmedian ratios over {a.rounds} rounds of interleaved pairs (wall / CPU); "
          f"{os.cpu_count()} CPUs; load average {load0} before, {os.getloadavg()} after\n")
    cols = [c[0] for c in confs] + (["je prof"] if have_je else [])
    print(f"{'program':<10}" + "".join(f"{c:>22}" for c in cols))
    for w in names:
        line = f"{w:<10}"
        for c in cols:
            ws, cs = je[w] if c == "je prof" else ratios[(w, c)]
            line += f"{med(ws):>13.2f} / {med(cs):<6.2f}"
        print(line)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

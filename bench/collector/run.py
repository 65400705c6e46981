#!/usr/bin/env python3
"""Collector overhead benchmark (run by hand; not part of the tests).

Builds the workload, bench_wl.c (--workload mixed: a multi-threaded
malloc-heavy workload of sizes up to 1 MiB, see its header) or churn_wl.c
(--workload churn: two threads churning small blocks with ~100 ns of work
per malloc/free pair, the steady state of a program of small objects), then
runs ROUNDS rounds; each round runs, one after the other,

    alone, heapstore at the default rate,
    alone, heapstore at HEAPSTORE_SAMPLE_BYTES=1,
    alone, heaptrack,
    jemalloc alone, jemalloc with prof:true,lg_prof_sample:19

so that every profiled run is paired with a baseline run just before it
(A B A B ...). The table shows the median wall time of each configuration
and the median of the per-pair ratios. Then it reports the collector's own
peak memory (from the BYE frame), the peak RSS of the profiled process
against the workload alone, and the bytes written per sampled event.

    python3 bench/collector/run.py [--build DIR] [--rounds N] [--threads T] [--ops N]
                                   [--workload mixed|churn] [--before DIR] [--counters N]

--counters N adds N interleaved runs of each full-length configuration
under perf stat: user-space instructions (median) and cycles (minimum),
which a loaded machine disturbs far less than wall time.

For churn, --ops is the pairs per thread (default 3500000, ~0.7 s alone)
and --ops-full the pairs per thread of the every-allocation pairs (default
100000).

DIR defaults to ./build (it needs lib/libheapstore.so and bin/heapstore).
Needs: cc, heaptrack and libjemalloc2 (Debian packages); a configuration
whose tool is missing is skipped.
"""
import argparse
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"


def run(argv, env_extra, out_dir):
    """Runs argv with env_extra added; returns (wall s, CPU s, peak RSS KiB).
    CPU time (user + system, the process and its waited-for children) is
    also shown because wall time on a shared machine is noisy."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env.update(env_extra)
    t0 = time.monotonic()
    p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                         stderr=open(os.path.join(out_dir, "stderr"), "ab"), cwd=out_dir)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.monotonic() - t0
    if status != 0:
        sys.exit(f"{argv[0]} failed (status {status}); see {out_dir}/stderr")
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss


def median_ci(xs, reps=2000):
    """95% bootstrap interval of the median of xs: on a shared 2-core
    machine the per-pair ratios of a 0.4 s workload spread by several
    percent, so the median alone overstates what a run can tell."""
    if len(xs) < 3:
        return (float("nan"), float("nan"))
    rng = random.Random(1)
    meds = sorted(statistics.median(rng.choices(xs, k=len(xs))) for _ in range(reps))
    return meds[int(0.025 * reps)], meds[int(0.975 * reps) - 1]


def bye_of(path, cli):
    """alloc_events, free_events, collector_peak_bytes of a .hsp file."""
    out = subprocess.run([cli, "dump", path], capture_output=True, text=True).stdout
    m = re.search(r"BYE .*alloc_events=(\d+) free_events=(\d+) collector_peak_bytes=(\d+)", out)
    if not m:
        sys.exit(f"no BYE in {path}")
    return tuple(int(x) for x in m.groups())


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


def counters(n, configs, tmp):
    """The instructions the process executes in user space do not depend on
    the machine's load; its user cycles barely do, at their minimum over
    runs (a run the others disturbed only takes more). On a shared machine
    these say more than wall time."""
    ins = {c[0]: [] for c in configs}
    cyc = {c[0]: [] for c in configs}
    for _ in range(n):
        for name, argv, env, _ in configs:
            i, c = perf_counts(argv, env, tmp)
            ins[name].append(i)
            cyc[name].append(c)
    print(f"\nuser space, {n} interleaved runs each (perf stat): instructions (median) and "
          f"cycles (minimum), and their ratios over the baseline")
    print(f"{'configuration':<20} {'instructions':>14} {'ratio':>7} {'cycles':>14} {'ratio':>7}")
    for name, _, _, base in configs:
        mi, mc = statistics.median(ins[name]), min(cyc[name])
        ri = f"{mi / statistics.median(ins[base]):.3f}" if base else "-"
        rc = f"{mc / min(cyc[base]):.3f}" if base else "-"
        print(f"{name.strip():<20} {mi:>14,.0f} {ri:>7} {mc:>14,} {rc:>7}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--before", help="another build whose collector runs in the same rounds "
                    "(at the default rate and at rate 1), to compare a change")
    ap.add_argument("--workload", choices=("mixed", "churn"), default="mixed")
    ap.add_argument("--counters", type=int, default=0, metavar="N",
                    help="then N interleaved runs of each default-length configuration "
                    "under perf stat: user-space instructions (median) and cycles (minimum)")
    ap.add_argument("--threads", type=int)
    ap.add_argument("--ops", type=int, help="operations per thread")
    ap.add_argument("--ops-full", type=int,
                    help="operations per thread for the every-allocation pairs (heaptrack "
                    "1.4 slows down super-linearly past ~20000 calls on this workload)")
    a = ap.parse_args()
    churn = a.workload == "churn"
    if a.threads is None:
        a.threads = 2 if churn else 4
    if a.ops is None:
        a.ops = 3500000 if churn else 150000
    if a.ops_full is None:
        a.ops_full = 100000 if churn else 8000
    build = os.path.abspath(a.build)
    lib = os.path.join(build, "lib/libheapstore.so")
    cli = os.path.join(build, "bin/heapstore")
    for f in (lib, cli):
        if not os.path.exists(f):
            sys.exit(f"build first: {f}")
    tmp = tempfile.mkdtemp(prefix="hs-bench-collector.")
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                       "churn_wl.c" if churn else "bench_wl.c")
    wl = os.path.join(tmp, "bench_wl")
    subprocess.check_call(["cc", "-O2", "-g", "-fno-omit-frame-pointer", "-pthread", "-o", wl, src])
    wl_argv = [wl, str(a.threads), str(a.ops)]
    wl_full = [wl, str(a.threads), str(a.ops_full)]
    heaptrack = shutil.which("heaptrack")
    have_je = os.path.exists(JEMALLOC)
    hsp = os.path.join(tmp, "run.hsp")
    hsp1 = os.path.join(tmp, "run1.hsp")

    # name -> (argv, env, baseline name)
    configs = [
        ("alone", wl_argv, {}, None),
        ("heapstore default", wl_argv, {"LD_PRELOAD": lib, "HEAPSTORE_URL": "file://" + hsp},
         "alone"),
        ("alone   ", wl_argv, {}, None),
        ("heapstore disabled", wl_argv, {"LD_PRELOAD": lib, "HEAPSTORE_DISABLE": "1"},
         "alone   "),
        ("alone ", wl_full, {}, None),
        ("heapstore rate 1", wl_full,
         {"LD_PRELOAD": lib, "HEAPSTORE_URL": "file://" + hsp1, "HEAPSTORE_SAMPLE_BYTES": "1"},
         "alone "),
    ]
    if a.before:
        blib = os.path.join(os.path.abspath(a.before), "lib/libheapstore.so")
        configs[2:2] = [
            ("alone    ", wl_argv, {}, None),
            ("before default", wl_argv,
             {"LD_PRELOAD": blib, "HEAPSTORE_URL": "file://" + os.path.join(tmp, "runb.hsp")},
             "alone    "),
        ]
        configs += [
            ("alone     ", wl_full, {}, None),
            ("before rate 1", wl_full,
             {"LD_PRELOAD": blib, "HEAPSTORE_URL": "file://" + os.path.join(tmp, "runb1.hsp"),
              "HEAPSTORE_SAMPLE_BYTES": "1"}, "alone     "),
        ]
    if heaptrack:
        configs += [
            ("alone  ", wl_full, {}, None),
            ("heaptrack", [heaptrack, "-o", os.path.join(tmp, "ht")] + wl_full, {}, "alone  "),
        ]
    if have_je:
        configs += [
            ("jemalloc alone", wl_argv, {"LD_PRELOAD": JEMALLOC}, None),
            ("jemalloc prof", wl_argv,
             {"LD_PRELOAD": JEMALLOC, "MALLOC_CONF": "prof:true,lg_prof_sample:19"},
             "jemalloc alone"),
        ]
    walls = {c[0]: [] for c in configs}
    cpus = {c[0]: [] for c in configs}
    cpu_ratios = {c[0]: [] for c in configs}
    rss = {c[0]: [] for c in configs}
    ratios = {c[0]: [] for c in configs}
    byes = {"heapstore default": [], "heapstore rate 1": []}
    sizes = {"heapstore default": [], "heapstore rate 1": []}
    t_start = time.monotonic()
    load0 = os.getloadavg()
    for r in range(a.rounds):
        last, last_cpu = {}, {}
        for name, argv, env, base in configs:
            for f in os.listdir(tmp):
                if f.startswith("run") or f.startswith("ht"):
                    os.unlink(os.path.join(tmp, f))
            w, cpu, m = run(argv, env, tmp)
            walls[name].append(w)
            cpus[name].append(cpu)
            last_cpu[name] = cpu
            rss[name].append(m)
            last[name] = w
            if base:
                ratios[name].append(w / last[base])
                cpu_ratios[name].append(cpu / max(last_cpu[base], 1e-6))
            if name in byes:
                path = hsp if name == "heapstore default" else hsp1
                byes[name].append(bye_of(path, cli))
                sizes[name].append(os.path.getsize(path))
        print(f"round {r + 1}/{a.rounds} done ({time.monotonic() - t_start:.0f} s)", file=sys.stderr)

    med = statistics.median
    if churn:
        print(f"\nworkload: churn, {a.threads} threads x {a.ops} malloc/free pairs ({a.ops_full} "
              f"for rate 1 and heaptrack), 8-512 B, ~100 ns of work a pair, stacks 4-7 deep; "
              f"{os.cpu_count()} CPUs; medians of {a.rounds} rounds; load average "
              f"{load0} before, {os.getloadavg()} after\n")
    else:
        print(f"\nworkload: {a.threads} threads x {a.ops} operations ({a.ops_full} for rate 1 and "
              f"heaptrack), 16 B - 1 MiB, "
              f"malloc/calloc/realloc/posix_memalign, stacks 5-15 deep; "
              f"{os.cpu_count()} CPUs; medians of {a.rounds} rounds; load average "
              f"{load0} before, {os.getloadavg()} after\n")
    print(f"{'configuration':<20} {'wall s':>8} {'ratio':>7} {'95% CI':>13} {'CPU s':>8} "
          f"{'CPU ratio':>10} {'95% CI':>13} {'peak RSS MiB':>13}")

    def ci(xs):
        lo, hi = median_ci(xs)
        return f"{lo:.3f}-{hi:.3f}"

    for name, _, _, base in configs:
        ratio = f"{med(ratios[name]):.3f}" if base else "-"
        cratio = f"{med(cpu_ratios[name]):.3f}" if base else "-"
        wci = ci(ratios[name]) if base else "-"
        cci = ci(cpu_ratios[name]) if base else "-"
        print(f"{name.strip():<20} {med(walls[name]):>8.3f} {ratio:>7} {wci:>13} "
              f"{med(cpus[name]):>8.3f} {cratio:>10} {cci:>13} {med(rss[name]) / 1024:>13.1f}")
    print()

    def ovh(name):
        return med(ratios[name]) - 1 if ratios.get(name) else float("nan")

    print("targets:")
    print(f"  default rate ratio {med(ratios['heapstore default']):.3f} wall, "
          f"{med(cpu_ratios['heapstore default']):.3f} CPU (target <= 1.05)", end="")
    if have_je:
        print(f"; jemalloc prof ratio {med(ratios['jemalloc prof']):.3f} wall, "
              f"{med(cpu_ratios['jemalloc prof']):.3f} CPU (ours must be lower)")
    else:
        print()
    if heaptrack:
        print(f"  rate 1 overhead {ovh('heapstore rate 1'):.3f} vs heaptrack {ovh('heaptrack'):.3f}"
              f" (target: ours <= half of heaptrack's = {ovh('heaptrack') / 2:.3f})")
    print()
    print(f"{'collector':<20} {'samples':>10} {'events':>10} {'file bytes':>12} "
          f"{'bytes/event':>12} {'collector peak':>15}")
    for name in byes:
        a_ev = med([b[0] for b in byes[name]])
        ev = med([b[0] + b[1] for b in byes[name]])
        size = med(sizes[name])
        peak = med([b[2] for b in byes[name]])
        print(f"{name:<20} {a_ev:>10.0f} {ev:>10.0f} {size:>12.0f} {size / max(ev, 1):>12.1f} "
              f"{peak / 1048576:>12.1f} MiB")
    print("\n(events = sampled allocations + their frees; bytes/event = whole file, "
          "stacks and symbols included)")
    if a.counters and shutil.which("perf"):
        counters(a.counters, [c for c in configs if c[1] is wl_argv], tmp)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

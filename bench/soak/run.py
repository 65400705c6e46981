#!/usr/bin/env python3
"""Soak: many real programs under the real collector against one server,
with queries running in parallel, for a set time; then the books must
balance.

    python3 bench/soak/run.py [--build DIR] [--seconds 60] [--collectors 64]
                              [--rate 1000] [--query-threads 4] [--rss-limit-mb 1024]

Each collector is a real process: tests/reliability's wl_rel ("churn") under
LD_PRELOAD=libheapstore.so with every allocation sampled
(HEAPSTORE_SAMPLE_BYTES=1), allocating --rate blocks a second (and freeing as
many) for --seconds, started a little apart. Query threads ask the JSON API
(runs, top, history, flame, leaks and /api/sql) the whole time and time each
answer. The server's RSS is sampled every half second.

At the end, for every run: events sent (what the collector counted: BYE's
alloc_events + free_events, plus its dropped counts) = events stored +
events dropped, and what each program says it did is within a small slack of
sent (its C library's own startup allocations). It checks that no query
failed, that none of the programs' own events was dropped (unless
--allow-drops; events after the collector's exit handler can only be counted
as dropped, and are reported apart), and that the RSS
stayed under --rss-limit-mb, and prints events/s, query p50/p99 and RSS.
Exit status 0 when every check holds.
"""
import argparse
import json
import os
import re
import select
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

SLACK = 50  # startup allocations of the C library per program


def rss_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def start_server(build, db, log_path):
    """Starts the server; its port comes through its readiness pipe."""
    log = open(log_path, "w")
    rfd, wfd = os.pipe()
    proc = subprocess.Popen(
        [f"{build}/bin/heapstore-server", "--db", db, "--listen", "127.0.0.1:0",
         "--ready-fd", str(wfd)],
        stderr=log, stdout=subprocess.DEVNULL, pass_fds=(wfd,))
    os.close(wfd)
    line = b""
    deadline = time.time() + 30
    while time.time() < deadline and not line.endswith(b"\n"):
        r, _, _ = select.select([rfd], [], [], max(0.0, deadline - time.time()))
        if not r:
            break
        chunk = os.read(rfd, 32)
        if not chunk:
            break
        line += chunk
    os.close(rfd)
    if line.endswith(b"\n"):
        return proc, int(line)
    proc.kill()
    sys.exit(f"the server did not start; see {log_path}")


class Queries:
    """Query threads: each loops over the API until stopped."""

    def __init__(self, port, threads):
        self.base = f"http://127.0.0.1:{port}"
        self.lat = []
        self.failed = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.loop, args=(i,)) for i in range(threads)]

    def ask(self, method, path, body=None):
        req = urllib.request.Request(self.base + path, method=method,
                                     data=json.dumps(body).encode() if body else None)
        t0 = time.monotonic()
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                data = r.read()
                ok = r.status == 200
        except urllib.error.HTTPError as e:
            data, ok = e.read(), False
        except Exception as e:  # connection refused, timeout: a failure
            data, ok = str(e).encode(), False
        dt = time.monotonic() - t0
        with self.lock:
            self.lat.append(dt)
            if not ok:
                self.failed.append(f"{method} {path}: {data[:200]!r}")
        return data if ok else None

    def loop(self, i):
        k = i
        while not self.stop.is_set():
            runs = self.ask("GET", "/api/runs?limit=100")
            ids = [r["id"] for r in json.loads(runs)["runs"]] if runs else []
            if ids:
                rid = ids[k % len(ids)]
                which = k % 6
                if which == 0:
                    self.ask("GET", f"/api/runs/{rid}/top?at=end&limit=20")
                elif which == 1:
                    self.ask("GET", f"/api/runs/{rid}/history?top=5")
                elif which == 2:
                    self.ask("GET", f"/api/runs/{rid}/flame?at=end")
                elif which == 3:
                    self.ask("GET", f"/api/runs/{rid}/leaks")
                elif which == 4:
                    self.ask("POST", "/api/sql",
                             {"sql": "SELECT count(*), sum(alloc_events) FROM runs"})
                else:
                    self.ask("GET", f"/api/runs/{rid}")
            else:
                self.ask("GET", "/api/health")
            k += 1


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(root, "build"))
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--collectors", type=int, default=64)
    ap.add_argument("--rate", type=int, default=1000, help="allocations a second per program")
    ap.add_argument("--query-threads", type=int, default=4)
    ap.add_argument("--rss-limit-mb", type=int, default=1024)
    ap.add_argument("--allow-drops", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    wl = f"{build}/tests/wl_rel"
    lib = f"{build}/lib/libheapstore.so"
    for p in (wl, lib, f"{build}/bin/heapstore-server"):
        if not os.path.exists(p):
            sys.exit(f"build first: {p} is missing")

    tmp = tempfile.mkdtemp(prefix="hs-soak-")
    db = f"{tmp}/soak.db"
    server, port = start_server(build, db, f"{tmp}/server.log")
    rss = [rss_kb(server.pid)]
    sampling = threading.Event()

    def sample_rss():
        while not sampling.is_set():
            rss.append(rss_kb(server.pid))
            time.sleep(0.5)

    sampler = threading.Thread(target=sample_rss)
    sampler.start()
    queries = Queries(port, a.query_threads)
    for t in queries.threads:
        t.start()

    env = dict(os.environ, LD_PRELOAD=lib, HEAPSTORE_URL=f"tcp://127.0.0.1:{port}",
               HEAPSTORE_SAMPLE_BYTES="1", HEAPSTORE_EXIT_FLUSH_MS="60000")
    procs = []
    t0 = time.monotonic()
    for i in range(a.collectors):
        out = open(f"{tmp}/wl-{i}.out", "w")
        procs.append((subprocess.Popen([wl, "churn", str(a.seconds), str(a.rate)], env=env,
                                       stdout=out, stderr=subprocess.STDOUT), out, i))
        time.sleep(min(0.05, a.seconds / 100))
    codes = [p.wait() for p, _, _ in procs]
    t_prog = time.monotonic() - t0
    # every run ends once its collector's BYE is stored
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    deadline = time.time() + 120
    while time.time() < deadline:
        if con.execute("SELECT count(*) FROM runs WHERE state = 'ended'").fetchone()[0] >= len(procs):
            break
        time.sleep(0.2)
    t_all = time.monotonic() - t0
    queries.stop.set()
    for t in queries.threads:
        t.join()
    sampling.set()
    sampler.join()

    said = {}
    for p, out, i in procs:
        out.close()
        with open(f"{tmp}/wl-{i}.out") as f:
            m = re.search(r"allocs (\d+) frees (\d+)", f.read())
        said[p.pid] = (int(m.group(1)), int(m.group(2))) if m else None
    rows = con.execute(
        "SELECT pid, state, alloc_events, free_events, bye_alloc_events, bye_free_events,"
        " dropped_alloc_events, dropped_free_events FROM runs").fetchall()
    con.close()
    server.send_signal(signal.SIGTERM)
    server.wait(timeout=120)

    problems = []
    if any(codes):
        problems.append(f"programs failed: exit codes {sorted(set(codes))}")
    if len(rows) != len(procs):
        problems.append(f"{len(rows)} runs stored for {len(procs)} programs")
    stored = dropped = sent = own_dropped = 0
    for pid, state, al, fr, bal, bfr, dal, dfr in rows:
        stored += al + fr
        dropped += (dal or 0) + (dfr or 0)
        s = said.get(pid)
        # Drops of the program's own events: fewer stored than it made.
        # (Events after the collector's exit handler, the C library's own
        # at exit, can only be counted as dropped; they are not the
        # program's and do not mean the server fell behind.)
        if s:
            own_dropped += max(0, s[0] - al) + max(0, s[1] - fr)

        if state != "ended":
            problems.append(f"run of pid {pid} is {state}")
            continue
        sent += bal + bfr + dal + dfr
        if (al, fr) != (bal, bfr):
            problems.append(f"pid {pid}: stored {al}/{fr} events, the collector sent {bal}/{bfr}")
        s = said.get(pid)
        # a free of a block whose allocation was dropped is not recognised
        # as sampled, so it is neither sent nor counted
        if not s or not (s[0] <= bal + dal <= s[0] + SLACK and
                         s[1] <= bfr + dfr + dal and bfr + dfr <= s[1] + SLACK):
            problems.append(f"pid {pid}: the program made {s}, the collector counted "
                            f"{bal + dal}/{bfr + dfr}")
    if sent != stored + dropped:
        problems.append(f"sent {sent} != stored {stored} + dropped {dropped}")
    if own_dropped and not a.allow_drops:
        problems.append(f"{own_dropped} of the programs' own events dropped")
    if queries.failed:
        problems.append(f"{len(queries.failed)} queries failed, e.g. {queries.failed[0]}")
    peak_mb = max(rss) / 1024
    if peak_mb > a.rss_limit_mb:
        problems.append(f"server RSS peaked at {peak_mb:.0f} MB (limit {a.rss_limit_mb})")

    lat_ms = [x * 1000 for x in queries.lat]
    print(f"collectors {a.collectors} x {a.rate} allocs/s for {a.seconds:g} s "
          f"(programs done after {t_prog:.1f} s, all runs ended after {t_all:.1f} s)")
    print(f"events sent {sent}  stored {stored}  dropped {dropped} "
          f"(of the programs' own: {own_dropped})  "
          f"events/s {stored / t_all:.0f} (stored over the whole soak)")
    print(f"queries {len(lat_ms)}  failed {len(queries.failed)}  "
          f"p50 {pct(lat_ms, 50):.1f} ms  p99 {pct(lat_ms, 99):.1f} ms  max {max(lat_ms or [0]):.1f} ms")
    half = len(rss) // 2
    print(f"server RSS MB: start {rss[0] / 1024:.0f}  peak {peak_mb:.0f}  "
          f"peak of the first half {max(rss[:half] or [0]) / 1024:.0f}  "
          f"of the second half {max(rss[half:] or [0]) / 1024:.0f}  "
          f"end {rss[-1] / 1024:.0f}")
    print(f"database {os.path.getsize(db) / 1e6:.1f} MB")
    for p in problems[:20]:
        print("PROBLEM:", p)
    print("OK" if not problems else f"FAILED ({len(problems)} problems)")
    if not a.keep:
        subprocess.run(["rm", "-rf", tmp])
    else:
        print("kept", tmp)
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())

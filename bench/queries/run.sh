#!/usr/bin/env bash
# Query benchmark: records synthetic runs with the server's load generator
# (bench/server, hs-loadgen) at two run lengths and two numbers of distinct
# stacks, then times each question through the CLI on the database file
# (direct) and through the HTTP API of a running server (curl), cold (the
# first request after the server starts: empty statement and frame caches)
# and warm (median of REPEAT). Targets: runs and history < 50 ms; top, flame
# and diff at any T < 150 ms; time should follow distinct stacks, not events.
#
#   bash bench/queries/run.sh [BUILD_DIR]        (default: build)
# Environment: LENGTHS ("2500000 10000000" events), STACKS_LIST ("256 4096"),
# REPEAT (5), GRANULARITY (1s).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
server=$build/bin/heapstore-server
loadgen=$build/bin/hs-loadgen
cli=$build/bin/heapstore
for b in "$server" "$loadgen" "$cli"; do
    [ -x "$b" ] || { echo "build first: $b" >&2; exit 1; }
done
command -v curl >/dev/null || { echo "curl is needed" >&2; exit 1; }
LENGTHS=${LENGTHS:-"2500000 10000000"}
STACKS_LIST=${STACKS_LIST:-"256 4096"}
REPEAT=${REPEAT:-5}
GRANULARITY=${GRANULARITY:-1s}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/hs-qbench.XXXXXX")
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

now_ns() { date +%s%N; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

start_server() { # db
    rm -f "$tmp/server.log" # a stale log would name the previous server's port
    "$server" --db "$1" --listen 127.0.0.1:0 --granularity "$GRANULARITY" 2> "$tmp/server.log" &
    pid=$!
    port=
    for _ in $(seq 200); do
        # the log appears when the server's shell has opened it: maybe not yet
        port=$(sed -n 's/.*listening on [^ ]*:\([0-9][0-9]*\) .*/\1/p' "$tmp/server.log" \
            2> /dev/null | head -1 || true)
        [ -n "$port" ] && break
        sleep 0.05
    done
    [ -n "$port" ] || { echo "server did not start" >&2; cat "$tmp/server.log" >&2; exit 1; }
}
stop_server() { kill -TERM "$pid"; wait "$pid" || true; pid=; }

# Times a query REPEAT+1 times: the first is the cold one. Prints
# "cold_wall warm_wall warm_cpu" in ms (warm: medians). cpu is the CPU time
# (user + system) the query cost: of the CLI process (direct), or of the
# server's threads (API, from /proc/PID/task/*/schedstat), which a loaded
# machine inflates far less than the wall clock.
timer() { # cli ARGS… | api PATH
    python3 - "$REPEAT" "$cli" "$db" "${port:-0}" "${pid:-0}" "$@" <<'PY'
import glob, os, resource, statistics, subprocess, sys, time, urllib.request
repeat, cli, db, port, spid, mode, args = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6], sys.argv[7:]
def server_cpu():
    t = 0
    for f in glob.glob(f"/proc/{spid}/task/*/schedstat"):
        try:
            t += int(open(f).read().split()[0])
        except OSError:
            pass
    return t / 1e6
def one():
    if mode == "cli":
        env = dict(os.environ, HEAPSTORE_URL="")
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run([cli] + args[0].split() + ["--db", db, "--json"], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        t1 = time.perf_counter()
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) * 1000
    else:
        c0 = server_cpu()
        t0 = time.perf_counter()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{args[0]}") as r:
            r.read()
        t1 = time.perf_counter()
        cpu = server_cpu() - c0
    return (t1 - t0) * 1000, cpu
cold = one()
warm = [one() for _ in range(repeat)]
print("%.1f %.1f %.1f" % (cold[0], statistics.median(w[0] for w in warm), statistics.median(w[1] for w in warm)))
PY
}

fmt='%-9s %-6s %-6s %-22s %9s %9s %9s %9s %9s %9s\n'
# shellcheck disable=SC2059
printf "$fmt" events stacks db_MB query cli_cold cli_warm cli_cpu api_cold api_warm api_cpu |
    tee "$tmp/table"
for events in $LENGTHS; do
    for stacks in $STACKS_LIST; do
        db=$tmp/q-$events-$stacks.db
        start_server "$db"
        "$loadgen" --port "$port" --conns 1 --events "$events" --stacks "$stacks" > /dev/null
        stop_server
        mb=$(du -m "$db" | cut -f1)
        dur=$(sqlite3 "$db" 'SELECT end_ns FROM runs WHERE id = 1')
        mid=$(awk -v d="$dur" 'BEGIN {printf "%.3f", d / 2e9}')
        late=$(awk -v d="$dur" 'BEGIN {printf "%.3f", d * 0.9 / 1e9}')
        queries=("runs|runs|/api/runs"
                 "history|history 1|/api/runs/1/history"
                 "top peak|top 1 --at peak|/api/runs/1/top?at=peak"
                 "top mid|top 1 --at $mid|/api/runs/1/top?at=$mid"
                 "top by function late|top 1 --at $late --by function|/api/runs/1/top?at=$late&by=function"
                 "flame peak|flame 1 --at peak|/api/runs/1/flame?at=peak"
                 "flame mid|flame 1 --at $mid|/api/runs/1/flame?at=$mid"
                 "diff peak..mid|diff 1@peak 1@$mid|/api/diff?a=1@peak&b=1@$mid"
                 "diff mid..end|diff 1@$mid 1@end|/api/diff?a=1@$mid&b=1@end"
                 "leaks|leaks 1|/api/runs/1/leaks"
                 "sizes|sizes 1|/api/runs/1/sizes")
        for q in "${queries[@]}"; do
            IFS='|' read -r name args path <<<"$q"
            read -r cold_cli warm_cli cpu_cli < <(timer cli "$args")
            start_server "$db"
            read -r cold_api warm_api cpu_api < <(timer api "$path")
            stop_server
            # shellcheck disable=SC2059
            printf "$fmt" "$events" "$stacks" "$mb" "$name" "$cold_cli" "$warm_cli" "$cpu_cli" \
                "$cold_api" "$warm_api" "$cpu_api" | tee -a "$tmp/table"
        done
        rm -f "$db" "$db-wal" "$db-shm"
    done
done

# Scaling: each query's warm times at the longest run over the shortest, for
# the same number of stacks (1.0: independent of the number of events).
first=${LENGTHS%% *}
last=${LENGTHS##* }
if [ "$first" != "$last" ]; then
    echo
    echo "ratios, $last events over $first (same stacks): 1.0 = independent of events"
    printf '%-6s %-22s %9s %9s %9s %9s\n' stacks query cli_warm cli_cpu api_warm api_cpu
    awk -v f="$first" -v l="$last" 'NR > 1 {
            q = substr($0, 25, 22); sub(/ +$/, "", q); k = $2 SUBSEP q
            for (i = 0; i < 4; i++) v[$1, k, i] = $(NF - (i < 2 ? 4 - i : 3 - i))
            if ($1 == f) order[++n] = k
        }
        function r(a, b) { return b > 0 ? a / b : 0 }
        END {
            for (i = 1; i <= n; i++) {
                k = order[i]; split(k, p, SUBSEP)
                printf "%-6s %-22s %9.2f %9.2f %9.2f %9.2f\n", p[1], p[2],
                    r(v[l, k, 0], v[f, k, 0]), r(v[l, k, 1], v[f, k, 1]),
                    r(v[l, k, 2], v[f, k, 2]), r(v[l, k, 3], v[f, k, 3])
            }
        }' "$tmp/table"
fi

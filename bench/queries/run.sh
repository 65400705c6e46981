#!/usr/bin/env bash
# Query benchmark: records synthetic runs with the server's load generator
# (bench/server, hs-loadgen) at two run lengths and two numbers of distinct
# stacks, plus one long run of many buckets, then times each question
# through the CLI on the database file (direct) and through the HTTP API of a
# running server (curl), cold (the first request after the server starts:
# empty statement and frame caches) and warm (median of REPEAT). Targets:
# runs and history < 50 ms; top, flame, diff, history's top N and leaks at
# any T < 150 ms; time should follow distinct stacks, not events or buckets.
#
#   bash bench/queries/run.sh [BUILD_DIR]        (default: build)
#   bash bench/queries/run.sh --compare BEFORE.tsv AFTER.tsv
# Environment: LENGTHS ("2500000 10000000" events), STACKS_LIST ("256 4096"),
# GRANULARITY (1s) for those; LONG ("10000000:20000:10ms": events, stacks
# and granularity of the long run, about 1000 buckets; empty for none);
# CASES (instead of all of those: "EVENTS:STACKS:GRANULARITY ..."); REPEAT
# (5); OUT (a file to keep the table in, tab-separated, for --compare, which
# puts two such tables side by side with the ratio after/before).
# The "ingest" row gives the load generator's seconds for the run (x1000,
# in the cli_warm column) and the database's size.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/bench/server_start.sh"
if [ "${1:-}" = --compare ]; then
    [ $# -eq 3 ] || { echo "usage: $0 --compare BEFORE.tsv AFTER.tsv" >&2; exit 2; }
    # Rows of both tables with the same run and query; warm medians and CPU,
    # before, after and after/before.
    awk -F '\t' 'FNR == 1 { next }
        { k = $1 "\t" $2 "\t" $3 "\t" $5 }
        NR == FNR { b[k] = $0; next }
        k in b {
            split(b[k], o, "\t")
            printf "%-9s %-6s %-5s %-20s", $1, $2, $3, $5
            for (i = 7; i <= 11; i += (i == 8 ? 2 : 1)) {
                r = o[i] > 0 ? sprintf("%.2f", $i / o[i]) : "-"
                printf " %9s %9s %6s", o[i], $i, r
            }
            printf "\n"
        }' "$2" "$3" | {
        printf '%-44s %-26s %-26s %-26s %s\n' "" "cli_warm (ms)" "cli_cpu (ms)" \
            "api_warm (ms)" "api_cpu (ms)"
        printf '%-9s %-6s %-5s %-20s' events stacks gran query
        for _ in 1 2 3 4; do printf ' %9s %9s %6s' before after ratio; done
        echo
        cat
    }
    exit 0
fi
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
LONG=${LONG-10000000:20000:10ms}
scaling=
if [ -z "${CASES:-}" ]; then
    scaling=1
    CASES=
    for events in $LENGTHS; do
        for stacks in $STACKS_LIST; do CASES="$CASES $events:$stacks:$GRANULARITY"; done
    done
    CASES="$CASES $LONG"
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/hs-qbench.XXXXXX")
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

now_ns() { date +%s%N; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

start_server() { # db
    hs_bench_server "$server" "$tmp/server.log" --db "$1" --listen 127.0.0.1:0 --granularity "$gran"
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

fmt='%-9s %-6s %-5s %-6s %-22s %9s %9s %9s %9s %9s %9s\n'
row() { # the pretty table, and a tab-separated copy for the ratios and OUT
    # shellcheck disable=SC2059
    printf "$fmt" "$@" | tee -a "$tmp/table"
    (IFS=$'\t'; echo "$*") >> "$tmp/table.tsv"
}
row events stacks gran db_MB query cli_cold cli_warm cli_cpu api_cold api_warm api_cpu
for c in $CASES; do
    IFS=: read -r events stacks gran <<<"$c"
    db=$tmp/q-$events-$stacks.db
    start_server "$db"
    secs=$("$loadgen" --port "$port" --conns 1 --events "$events" --stacks "$stacks" |
        sed -n 's/.* seconds=\([0-9.]*\).*/\1/p')
    stop_server
    mb=$(du -m "$db" | cut -f1)
    row "$events" "$stacks" "$gran" "$mb" ingest - "$(awk -v s="$secs" 'BEGIN {printf "%.1f", s * 1000}')" - - - -
    dur=$(sqlite3 "$db" 'SELECT end_ns FROM runs WHERE id = 1')
    mid=$(awk -v d="$dur" 'BEGIN {printf "%.3f", d / 2e9}')
    late=$(awk -v d="$dur" 'BEGIN {printf "%.3f", d * 0.9 / 1e9}')
    queries=("runs|runs|/api/runs"
             "history|history 1|/api/runs/1/history"
             "history top 5|history 1 --top 5|/api/runs/1/history?top=5"
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
        row "$events" "$stacks" "$gran" "$mb" "$name" "$cold_cli" "$warm_cli" "$cpu_cli" \
            "$cold_api" "$warm_api" "$cpu_api"
    done
    rm -f "$db" "$db-wal" "$db-shm"
done
[ -n "${OUT:-}" ] && cp "$tmp/table.tsv" "$OUT"

# Scaling: each query's warm times at the longest run over the shortest, for
# the same number of stacks and granularity (1.0: independent of the number
# of events).
first=${LENGTHS%% *}
last=${LENGTHS##* }
if [ -n "$scaling" ] && [ "$first" != "$last" ]; then
    echo
    echo "ratios, $last events over $first (same stacks): 1.0 = independent of events"
    printf '%-6s %-22s %9s %9s %9s %9s\n' stacks query cli_warm cli_cpu api_warm api_cpu
    awk -F '\t' -v f="$first" -v l="$last" -v g="$GRANULARITY" 'NR > 1 && $3 == g && $5 != "ingest" {
            k = $2 SUBSEP $5
            for (i = 0; i < 4; i++) v[$1, k, i] = $(i < 2 ? 7 + i : 8 + i)
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
        }' "$tmp/table.tsv"
fi

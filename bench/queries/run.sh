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
tmp=$(mktemp -d)
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
        port=$(sed -n 's/.*listening on [^ ]*:\([0-9][0-9]*\) .*/\1/p' "$tmp/server.log" | head -1)
        [ -n "$port" ] && break
        sleep 0.05
    done
    [ -n "$port" ] || { echo "server did not start" >&2; cat "$tmp/server.log" >&2; exit 1; }
}
stop_server() { kill -TERM "$pid"; wait "$pid" || true; pid=; }

# ms of one CLI command (direct, on the file)
cli_ms() {
    local t0 t1
    t0=$(now_ns)
    HEAPSTORE_URL= "$cli" "$@" --db "$db" --json > /dev/null
    t1=$(now_ns)
    awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f\n", (b - a) / 1e6}'
}
# ms of one API request
api_ms() {
    curl -s -o /dev/null -w '%{http_code} %{time_total}\n' "http://127.0.0.1:$port$1" |
        awk '$1 != 200 {print "HTTP " $1 > "/dev/stderr"; exit 1} {printf "%.1f\n", $2 * 1000}'
}

printf '%-9s %-6s %-9s %-26s %9s %9s %9s %9s\n' events stacks db_MB query cli_cold cli_warm api_cold api_warm
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
                 "flame mid|flame 1 --at $mid|/api/runs/1/flame?at=$mid"
                 "diff mid..end|diff 1@$mid 1@end|/api/diff?a=1@$mid&b=1@end"
                 "leaks|leaks 1|/api/runs/1/leaks")
        for q in "${queries[@]}"; do
            IFS='|' read -r name args path <<<"$q"
            # shellcheck disable=SC2086
            cold_cli=$(cli_ms $args)
            : > "$tmp/w"
            # shellcheck disable=SC2086
            for _ in $(seq "$REPEAT"); do cli_ms $args >> "$tmp/w"; done
            warm_cli=$(median < "$tmp/w")
            start_server "$db"
            cold_api=$(api_ms "$path")
            : > "$tmp/w"
            for _ in $(seq "$REPEAT"); do api_ms "$path" >> "$tmp/w"; done
            warm_api=$(median < "$tmp/w")
            stop_server
            printf '%-9s %-6s %-9s %-26s %9s %9s %9s %9s\n' "$events" "$stacks" "$mb" "$name" \
                "$cold_cli" "$warm_cli" "$cold_api" "$warm_api"
        done
        rm -f "$db" "$db-wal" "$db-shm"
    done
done

#!/usr/bin/env bash
# Group diff benchmark: 2 x N runs recorded by the server's load generator
# (bench/server, hs-loadgen: S stacks, events in frames of K allocations
# then K frees, sizes 16 B to 4 KiB sampled at 512 KiB), so that each run's
# state at its peak holds several thousand live stacks; then the group diff
# of runs 1..N against N+1..2N at the peak (`heapstore diff id=1..N
# id=N+1..2N --at peak`, as the dashboard's runs page asks it) is timed by
# grouping (function, site, stack), through the CLI on the database file
# (direct) and through the HTTP API of a running server (curl, warm: median
# of REPEAT after one request), and `heapstore check --baseline` likewise.
# Target: 20 runs against 20 within 500 ms.
#
#   bash bench/queries/gdiff.sh [BUILD_DIR]       (default: build)
# Environment: N (20), STACKS (4000), PER_FRAME (8000), EVENTS (200000 per
# run), REPEAT (5), EXTRA (0: small runs recorded first, 200 at a time, so
# that the 2 x N runs sit in a store of EXTRA + 2N runs).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/bench/server_start.sh"
build=${1:-$root/build}
server=$build/bin/heapstore-server
loadgen=$build/bin/hs-loadgen
cli=$build/bin/heapstore
for b in "$server" "$loadgen" "$cli"; do
    [ -x "$b" ] || { echo "build first: $b" >&2; exit 1; }
done
command -v curl >/dev/null || { echo "curl is needed" >&2; exit 1; }
N=${N:-20}
STACKS=${STACKS:-4000}
PER_FRAME=${PER_FRAME:-8000}
EVENTS=${EVENTS:-200000}
REPEAT=${REPEAT:-5}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/hs-gdbench.XXXXXX")
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
now_ns() { date +%s%N; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

db=$tmp/gdiff.db
hs_bench_server "$server" "$tmp/server.log" --db "$db" --listen 127.0.0.1:0 --granularity 100ms
EXTRA=${EXTRA:-0}
for ((done = 0; done < EXTRA; done += 200)); do
    "$loadgen" --port "$port" --conns $((EXTRA - done < 200 ? EXTRA - done : 200)) \
        --events 2000 --per-frame 500 --stacks 200 --sample-bytes 524288 --first "$done" \
        > /dev/null
done
"$loadgen" --port "$port" --conns $((2 * N)) --events "$EVENTS" --per-frame "$PER_FRAME" \
    --stacks "$STACKS" --sample-bytes 524288 --first "$EXTRA" > "$tmp/loadgen.txt"
a="id=$((EXTRA + 1))..$((EXTRA + N))" b="id=$((EXTRA + N + 1))..$((EXTRA + 2 * N))"
echo "a: $a, b: $b of $((EXTRA + 2 * N)) runs; $STACKS stacks, frames of $PER_FRAME, $EVENTS events a run"
"$cli" diff "$a" "$b" --by stack --at peak --limit 1 --json --db "$db" > "$tmp/one.json"
python3 - "$tmp/one.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
print("group:", d["group"], "runs:", len(d["a"]["runs"]), len(d["b"]["runs"]),
      "stack rows:", d["rows_total"])
EOF

# ms of one command, REPEAT times after one unmeasured run; the median.
time_cmd() {
    "$@" > /dev/null || true
    for _ in $(seq "$REPEAT"); do
        local t0 t1
        t0=$(now_ns)
        "$@" > /dev/null || true
        t1=$(now_ns)
        echo $(((t1 - t0) / 1000000))
    done | median
}

printf '%-28s %10s %10s\n' query "cli ms" "api ms"
for by in function site stack; do
    c=$(time_cmd "$cli" diff "$a" "$b" --by "$by" --at peak --json --db "$db")
    h=$(time_cmd curl -sf "http://127.0.0.1:$port/api/diff?a=$a@peak&b=$b@peak&by=$by")
    printf '%-28s %10s %10s\n' "diff by $by" "$c" "$h"
done
c=$(time_cmd "$cli" check "$b" --baseline "$a" --json --db "$db")
h=$(time_cmd curl -s "http://127.0.0.1:$port/api/check?run=$b&baseline=$a")
printf '%-28s %10s %10s\n' "check --baseline" "$c" "$h"

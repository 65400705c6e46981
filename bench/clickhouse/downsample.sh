#!/usr/bin/env bash
# Downsampling's effect on a month-long history (docs/clickhouse.md,
# "Downsampling"): starts a local ClickHouse (tests/clickhouse/server.xml.in,
# loopback, a temporary folder) and a front end on it, writes a synthetic
# run of DAYS days at 1 s buckets straight into ClickHouse (its runs row and
# one heap_series row per bucket, RSS samples every 10 s), and prints the
# warm median latency (REPEAT requests through the HTTP API) of its history
# and the heap_series rows it reads, before and after a front end started
# with downsample_after=3600&downsample_by=BY has merged it.
#
#   bash bench/clickhouse/downsample.sh [BUILD_DIR]      (default: build)
# Environment: DAYS (30), BY (65: a divisor of the 260 buckets a point of a
# 30-day history), REPEAT (5), CLICKHOUSE.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/bench/server_start.sh"
. "$root/bench/clickhouse/ch_start.sh"
build=${1:-$root/build}
server=$build/bin/heapstore-server
CLICKHOUSE=${CLICKHOUSE:-/usr/sbin/clickhouse-server}
[ -x "$server" ] || { echo "build first: $server" >&2; exit 1; }
[ -x "$CLICKHOUSE" ] || { echo "no ClickHouse: apt-get install clickhouse-server" >&2; exit 1; }
DAYS=${DAYS:-30}
BY=${BY:-65}
REPEAT=${REPEAT:-5}
tmp=$(mktemp -d "$build/bench-ds.XXXXXX")
chpid=
cleanup() {
    hs_bench_clickhouse_stop
    rm -rf "$tmp"
}
trap cleanup EXIT

hs_bench_clickhouse "$root" "$tmp/ch"
median() { sort -g | awk '{a[NR]=$1} END {printf "%.4g\n", (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

url="clickhouse://127.0.0.1:$http/ds"
# a front end creates the tables
hs_bench_server "$server" "$tmp/server0.log" --db "$tmp/buf.db" --listen 127.0.0.1:0 --store "$url"
for _ in $(seq 100); do [ "$(chq "EXISTS TABLE ds.runs")" = 1 ] && break; sleep 0.1; done
kill -TERM "$pid"; wait "$pid" || true

n=$((DAYS * 86400))
start=$(( ($(date +%s) - DAYS * 86400 - 7200) * 1000000000 ))
# a heap that saws up and down, with a slow leak, and a peak in the middle
chq "INSERT INTO ds.runs (id, uuid, program, host, start_unix_ns, sample_bytes, granularity_ns,
     keyframe_every, state, clean_exit, end_ns, next_seq, peak_bytes, peak_t_ns, live_bytes, day, ver)
     VALUES (77, 'ds0077', '/usr/bin/service', 'h', $start, 524288, 1000000000, 32, 'ended', 1,
     $n * 1000000000, 1, 300000000, ($n / 2) * 1000000000 + 1, 100000000,
     toDate(intDiv($start, 1000000000)), 1)"
chq "INSERT INTO ds.heap_series (run, day, bucket, live_bytes, live_count, max_bytes, alloc_bytes,
     free_bytes, ver) SELECT 77, toDate(intDiv($start, 1000000000)), number,
     100000000 + number * 10 + (number % 600) * 1000, 1000 + number % 600,
     if(number = intDiv($n, 2), 300000000, 100000000 + number * 10 + (number % 600) * 1000 + 500),
     1000000, 990000, 1 FROM system.numbers LIMIT $n"
chq "INSERT INTO ds.process_samples (run, day, t_ns, rss_bytes, vsize_bytes)
     SELECT 77, toDate(intDiv($start, 1000000000)), number * 10000000000,
     200000000 + (number % 97) * 100000, 400000000 FROM system.numbers LIMIT $((n / 10))"

measure() {
    hs_bench_server "$server" "$tmp/server-$1.log" --db "$tmp/buf-$1.db" --listen 127.0.0.1:0 \
        --store "$2"
    if [ "$1" = after ]; then # the merge runs at the start; then ClickHouse deletes (a mutation)
        for _ in $(seq 600); do
            [ "$(chq "SELECT count() FROM ds.heap_series WHERE span = 1")" = 0 ] && break
            sleep 0.2
        done
    fi
    curl -s -o /dev/null "http://127.0.0.1:$port/api/runs/77/history" # warm
    ms=$(for _ in $(seq "$REPEAT"); do
        curl -s -o /dev/null -w '%{time_total}\n' "http://127.0.0.1:$port/api/runs/77/history"
    done | median)
    curl -s "http://127.0.0.1:$port/api/runs/77/history" > "$tmp/history-$1.json"
    rows=$(chq "SELECT count() FROM ds.heap_series FINAL WHERE run = 77")
    kill -TERM "$pid"; wait "$pid" || true
    printf '%-7s %10s %12.1f\n' "$1" "$rows" "$(awk -v s="$ms" 'BEGIN {print s * 1000}')"
}
printf '%-7s %10s %12s\n' when rows history_ms
measure before "$url"
measure after "$url?downsample_after=3600&downsample_by=$BY"
python3 - "$tmp/history-before.json" "$tmp/history-after.json" <<'EOF'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
pa, pb = a["points"], b["points"]
same = pa == pb
print(f"points {len(pa)} and {len(pb)}, {a['truncated']['buckets_per_point'] if a['truncated'] else 1}"
      f" buckets a point; identical: {same}; peak {max(p['heap_max_bytes'] for p in pb)}"
      f" (run's {b['run']['peak_bytes']})")
EOF

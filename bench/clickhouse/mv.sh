#!/usr/bin/env bash
# Rollups kept by ClickHouse (materialized views) against rollups kept by
# the front end (what heapstore does), measured on one local ClickHouse
# (tests/clickhouse/server.xml.in, loopback, a temporary folder):
#
#   front end: heapstore-server --store clickhouse://… takes one run of
#     EVENTS events from hs-loadgen (bench/server) and ships its rows
#     (events as codec blobs, rollups as rows); measured until ClickHouse
#     holds every event.
#   view: the same shape of run (one run, an event every 1 µs, allocations
#     and frees in alternate frames of PER_FRAME, STACKS stacks, sizes
#     16..4096 B weighted at SAMPLE_BYTES) as decoded events, one row per
#     allocation or free (run, t_ns, trace, bytes, count), inserted as
#     RowBinary in batches of BATCH rows (a front end's shipping pass) into
#     a MergeTree, with a materialized view into a SummingMergeTree per
#     (run, bucket, trace) keeping the bytes and counts allocated and freed.
#     The rows are made by ClickHouse beforehand (not measured); what is
#     measured is the INSERTs (ClickHouse's CPU, and curl's, standing in
#     for a front end's sending), not the decoding a front end would do.
#
# Prints per way: ingest CPU per million events (front end and ClickHouse),
# stored bytes per event (active parts after OPTIMIZE … FINAL: events and
# rollups), and the warm median latency (REPEAT requests) of a history and
# of the top stacks at the peak: through the front end's HTTP API for the
# front end's way (what a user waits for), as SQL over ClickHouse's HTTP
# interface for the view (the front end's JSON work not included).
#
#   bash bench/clickhouse/mv.sh [BUILD_DIR]      (default: build)
# Environment: EVENTS (2000000), PER_FRAME (4096), STACKS (256),
# SAMPLE_BYTES (524288), BATCH (400000), REPEAT (5), CLICKHOUSE; LONG_BUCKETS
# (0): when set, the view's events are also written as a run spread over
# that many buckets, and its history and top are timed (not the front end's).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/bench/server_start.sh"
. "$root/bench/clickhouse/ch_start.sh"
build=${1:-$root/build}
server=$build/bin/heapstore-server
loadgen=$build/bin/hs-loadgen
CLICKHOUSE=${CLICKHOUSE:-/usr/sbin/clickhouse-server}
[ -x "$server" ] && [ -x "$loadgen" ] || { echo "build first: $server, $loadgen" >&2; exit 1; }
[ -x "$CLICKHOUSE" ] || { echo "no ClickHouse: apt-get install clickhouse-server" >&2; exit 1; }
EVENTS=${EVENTS:-2000000}
PER_FRAME=${PER_FRAME:-4096}
STACKS=${STACKS:-256}
SAMPLE_BYTES=${SAMPLE_BYTES:-524288}
BATCH=${BATCH:-400000}
REPEAT=${REPEAT:-5}
tmp=$(mktemp -d "$build/bench-mv.XXXXXX")
chpid=
cleanup() {
    hs_bench_clickhouse_stop
    rm -rf "$tmp"
}
trap cleanup EXIT

hs_bench_clickhouse "$root" "$tmp/ch"
tck=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
median() { sort -g | awk '{a[NR]=$1} END {printf "%.4g\n", (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
per_m() { awk -v t="$1" -v h="$tck" -v e="$2" 'BEGIN {printf "%.3f", t / h / (e / 1e6)}'; }
stored() { # bytes of database $1's active parts, merged
    for t in $(chq "SELECT name FROM system.tables WHERE database = '$1' AND engine NOT LIKE 'Materialized%'"); do
        chq "OPTIMIZE TABLE $1.\`$t\` FINAL" > /dev/null
    done
    chq "SELECT sum(bytes_on_disk) FROM system.parts WHERE database = '$1' AND active"
}
rollups() { # bytes of database $1's parts whose table passes $2 (after stored)
    chq "SELECT sum(bytes_on_disk) FROM system.parts WHERE database = '$1' AND active AND $2"
}
ms_median() { # URL [DATA]: warm median of REPEAT requests, ms
    curl -s -o /dev/null ${2:+--data-binary "$2"} "$1"
    for _ in $(seq "$REPEAT"); do
        curl -s -o /dev/null -w '%{time_total}\n' ${2:+--data-binary "$2"} "$1"
    done | median | awk '{printf "%.1f", $1 * 1000}'
}

# ---- the front end's way ----
hs_bench_server "$server" "$tmp/server.log" --db "$tmp/buf.db" --listen 127.0.0.1:0 \
    --store "clickhouse://127.0.0.1:$http/fe"
ch0=$(ticks "$chpid")
out=$("$loadgen" --port "$port" --conns 1 --events "$EVENTS" --per-frame "$PER_FRAME" \
      --stacks "$STACKS" --sample-bytes "$SAMPLE_BYTES")
case $out in *FAILED*) echo "load generator failed: $out" >&2; exit 1 ;; esac
total=$(sed -n 's/.*events=\([0-9]*\).*/\1/p' <<<"$out")
until [ "$(chq "SELECT sum(n_events) FROM fe.events FINAL" 2>/dev/null)" = "$total" ]; do
    sleep 0.05
done
fe_fe=$(per_m "$(ticks "$pid")" "$total")
fe_ch=$(per_m $(( $(ticks "$chpid") - ch0 )) "$total")
run=$(curl -s "http://127.0.0.1:$port/api/runs?limit=1" | python3 -c \
      'import json,sys; print(json.load(sys.stdin)["runs"][0]["id"])')
g=$(chq "SELECT any(granularity_ns) FROM fe.runs FINAL")
fe_hist=$(ms_median "http://127.0.0.1:$port/api/runs/$run/history")
fe_top=$(ms_median "http://127.0.0.1:$port/api/runs/$run/top?at=peak&by=stack")
kill -TERM "$pid"
wait "$pid" || true
fe_bytes=$(awk -v b="$(stored fe)" -v e="$total" 'BEGIN {printf "%.2f", b / e}')
fe_roll=$(awk -v b="$(rollups fe "table != 'events'")" -v e="$total" 'BEGIN {printf "%.2f", b / e}')

# ---- the view's way ----
chq "CREATE DATABASE mv"
chq "CREATE TABLE mv.events (run UInt64, t_ns UInt64, trace UInt64, bytes Int64, count Int32)
     ENGINE = MergeTree ORDER BY (run, t_ns)"
chq "CREATE MATERIALIZED VIEW mv.rollup ENGINE = SummingMergeTree ORDER BY (run, bucket, trace)
     AS SELECT run, intDiv(t_ns, $g) AS bucket, trace,
        sumIf(bytes, bytes > 0) AS alloc_bytes, -sumIf(bytes, bytes < 0) AS free_bytes,
        sumIf(count, count > 0) AS alloc_count, -sumIf(count, count < 0) AS free_count
     FROM mv.events GROUP BY run, bucket, trace"
# event i: frame f = i / PER_FRAME; odd frames free the previous frame's blocks
src="toUInt64(number - if(intDiv(number, $PER_FRAME) % 2 = 1, $PER_FRAME, 0))"
gen() { # RUN STEP_NS: the run's rows, an event every STEP_NS
    echo "SELECT toUInt64($1), toUInt64(number * $2), toUInt64(1 + intHash64($src) % $STACKS),
        (if(intDiv(number, $PER_FRAME) % 2 = 1, -1, 1) * toInt64(round(
          (16 + intHash64($src + 7) % 4081) / (1 - exp(-(16 + intHash64($src + 7) % 4081) / $SAMPLE_BYTES))))),
        toInt32(if(intDiv(number, $PER_FRAME) % 2 = 1, -1, 1))
     FROM system.numbers LIMIT $total"
}
chq "$(gen 1 1000) FORMAT RowBinary" > "$tmp/rows.bin"
[ "$(stat -c %s "$tmp/rows.bin")" = $((36 * total)) ] || { head -c 300 "$tmp/rows.bin" >&2; exit 1; }
split -b $((36 * BATCH)) "$tmp/rows.bin" "$tmp/batch."
rm -f "$tmp/rows.bin"
ch0=$(ticks "$chpid")
self0=$(awk '{print $16 + $17}' /proc/$$/stat) # children's CPU: curl
for b in "$tmp"/batch.*; do
    curl -sS "http://127.0.0.1:$http/?query=INSERT%20INTO%20mv.events%20FORMAT%20RowBinary" \
        --data-binary @"$b"
done
mv_ch=$(per_m $(( $(ticks "$chpid") - ch0 )) "$total")
mv_fe=$(per_m $(( $(awk '{print $16 + $17}' /proc/$$/stat) - self0 )) "$total")
rm -f "$tmp"/batch.*
[ "$(chq "SELECT count() FROM mv.events")" = "$total" ] || { echo "view: rows lost" >&2; exit 1; }
view_ms() { # RUN: the warm median ms of its history and of its top at the peak
    local deltas hist peak top
    deltas="SELECT bucket AS b, sum(alloc_bytes) - sum(free_bytes) AS d FROM mv.rollup
            WHERE run = $1 GROUP BY b ORDER BY b"
    hist="SELECT groupArray(b) AS bs, arrayCumSum(groupArray(d)) AS cs FROM ($deltas)"
    peak=$(chq "SELECT bs[indexOf(cs, arrayReduce('max', cs))] FROM ($hist)")
    top="SELECT trace, sum(alloc_bytes) - sum(free_bytes) AS live, sum(alloc_count) -
         sum(free_count) AS n FROM mv.rollup WHERE run = $1 AND bucket <= $peak GROUP BY trace
         ORDER BY live DESC LIMIT 50"
    echo "$(ms_median "http://127.0.0.1:$http/" "$hist") $(ms_median "http://127.0.0.1:$http/" "$top")"
}
read -r mv_hist mv_top <<<"$(view_ms 1)"
mv_bytes=$(awk -v b="$(stored mv)" -v e="$total" 'BEGIN {printf "%.2f", b / e}')
mv_roll=$(awk -v b="$(rollups mv "table LIKE '.inner%'")" -v e="$total" 'BEGIN {printf "%.2f", b / e}')

f='%-10s %10s %14s %14s %12s %14s %12s %10s\n'
printf "$f" way events fe_cpu_s/Mev ch_cpu_s/Mev bytes/event rollup_b/event history_ms top_ms
printf "$f" front_end "$total" "$fe_fe" "$fe_ch" "$fe_bytes" "$fe_roll" "$fe_hist" "$fe_top"
printf "$f" view "$total" "$mv_fe" "$mv_ch" "$mv_bytes" "$mv_roll" "$mv_hist" "$mv_top"
echo "(view: fe_cpu is curl sending the rows; a front end would also decode the frames)"
# the same events spread over LONG_BUCKETS buckets (run 2): the view's questions on a long run
if [ "${LONG_BUCKETS:-0}" -gt 0 ]; then
    chq "INSERT INTO mv.events $(gen 2 $((LONG_BUCKETS * g / total)))"
    chq "OPTIMIZE TABLE mv.\`.inner.rollup\` FINAL"
    rows=$(chq "SELECT count() FROM mv.rollup WHERE run = 2")
    read -r h t <<<"$(view_ms 2)"
    echo "view over $LONG_BUCKETS buckets ($rows rollup rows): history $h ms, top at the peak $t ms"
fi

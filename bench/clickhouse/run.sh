#!/usr/bin/env bash
# ClickHouse store benchmark, side by side with SQLite: starts a local
# ClickHouse (tests/clickhouse/server.xml.in, loopback, a temporary
# folder), then for N connections replays synthetic collector streams with
# hs-loadgen (bench/server) into
#   sqlite:  heapstore-server --db FILE
#   ch:      heapstore-server --db FILE --store clickhouse://…
# and prints: events/s acknowledged (the load generator's), for ch also
# events/s shipped (from the start of the load until ClickHouse holds every
# event), the front end's CPU per million events, ClickHouse's CPU per
# million events, and stored bytes per event (SQLite: the file; ClickHouse:
# its active parts after OPTIMIZE … FINAL). Then the warm median latency
# (REPEAT requests through the HTTP API) of runs, history, top, flame and
# diff at the peak on the last run of each store.
#
#   bash bench/clickhouse/run.sh [BUILD_DIR]      (default: build)
# With TWO=1, each N also runs through two front ends at once (two servers,
# each its own buffer, N/2 connections each, one ClickHouse server): the
# row "ch x2" (events/s over the wall time of both load generators; CPU
# of both front ends). hs-loadgen names its runs by connection number, so
# the two front ends write two databases: the same runs in one would be one.
# Environment: EVENTS (total per N, default 4000000), CONNS ("16 64"), TWO,
# REPEAT (5), PER_FRAME (4096), STACKS (256), SAMPLE_BYTES (524288),
# CLICKHOUSE (/usr/sbin/clickhouse-server); OPTIMIZED=1 times ClickHouse's
# questions again once its parts are merged (OPTIMIZE … FINAL): "ch+opt".
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
EVENTS=${EVENTS:-4000000}
CONNS=${CONNS:-"16 64"}
REPEAT=${REPEAT:-5}
PER_FRAME=${PER_FRAME:-4096}
STACKS=${STACKS:-256}
SAMPLE_BYTES=${SAMPLE_BYTES:-524288}
tmp=$(mktemp -d "$build/bench-ch.XXXXXX")
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
now() { date +%s.%N; }

optimize() { # every table of database $1, its parts merged
    for t in $(chq "SELECT name FROM system.tables WHERE database = '$1'"); do
        chq "OPTIMIZE TABLE $1.$t FINAL" > /dev/null
    done
}
latencies() { # STORE N RUN: warm medians through the API on the server at $port
    local q
    for q in "runs" "runs/$3/history" "runs/$3/top?at=peak" "runs/$3/flame?at=peak" \
             "diff?a=$3@peak&b=$3@end"; do
        for _ in $(seq "$REPEAT"); do
            curl -s -o /dev/null -w '%{time_total}\n' "http://127.0.0.1:$port/api/$q"
        done | median | awk -v s="$1" -v n="$2" -v q="$(sed "s/$3/RUN/g; s/?.*//" <<<"$q")" \
            '{printf "%s\t%s\t%s\t%.1f\n", s, n, q, $1 * 1000}' >> "$tmp/latency"
    done
}

printf '%-7s %-6s %12s %12s %12s %14s %12s %14s\n' store conns events ack_ev/s ship_ev/s \
    fe_cpu_s/Mev ch_cpu_s/Mev bytes/event
for n in $CONNS; do
    for store in sqlite ch; do
        db=$tmp/$store-$n.db
        args=(--db "$db" --listen 127.0.0.1:0)
        chdb=bench_$n
        [ $store = ch ] && args+=(--store "clickhouse://127.0.0.1:$http/$chdb")
        hs_bench_server "$server" "$tmp/server-$store-$n.log" "${args[@]}"
        ch0=$(ticks "$chpid")
        t0=$(now)
        out=$("$loadgen" --port "$port" --conns "$n" --events $((EVENTS / n)) \
              --per-frame "$PER_FRAME" --stacks "$STACKS" --sample-bytes "$SAMPLE_BYTES")
        case $out in *FAILED*) echo "load generator failed: $out" >&2; exit 1 ;; esac
        total=$(sed -n 's/.*events=\([0-9]*\).*/\1/p' <<<"$out")
        rate=$(sed -n 's/.*events_per_s=\([0-9]*\).*/\1/p' <<<"$out")
        ship=- chcpu=-
        if [ $store = ch ]; then
            until [ "$(chq "SELECT sum(n_events) FROM $chdb.events FINAL" 2>/dev/null)" = "$total" ]; do
                sleep 0.05
            done
            ship=$(awk -v e="$total" -v a="$t0" -v b="$(now)" 'BEGIN {printf "%d", e / (b - a)}')
            chcpu=$(awk -v t="$(( $(ticks "$chpid") - ch0 ))" -v h="$tck" -v e="$total" \
                    'BEGIN {printf "%.3f", t / h / (e / 1e6)}')
        fi
        fecpu=$(awk -v t="$(ticks "$pid")" -v h="$tck" -v e="$total" \
                'BEGIN {printf "%.3f", t / h / (e / 1e6)}')
        # query latencies on this store's run (the API reads the store)
        run=$(curl -s "http://127.0.0.1:$port/api/runs?limit=1" | python3 -c \
              'import json,sys; print(json.load(sys.stdin)["runs"][0]["id"])')
        latencies $store "$n" "$run"
        if [ $store = ch ] && [ "${OPTIMIZED:-0}" = 1 ]; then # again, its parts merged
            optimize "$chdb"
            latencies ch+opt "$n" "$run"
        fi
        kill -TERM "$pid"
        wait "$pid" || true
        if [ $store = ch ]; then
            optimize "$chdb"
            bytes=$(chq "SELECT sum(bytes_on_disk) FROM system.parts WHERE database = '$chdb' AND active")
        else
            bytes=$(stat -c %s "$db")
        fi
        bpe=$(awk -v b="$bytes" -v e="$total" 'BEGIN {printf "%.2f", b / e}')
        printf '%-7s %-6s %12s %12s %12s %14s %12s %14s\n' $store "$n" "$total" "$rate" "$ship" \
            "$fecpu" "$chcpu" "$bpe"
    done
done
# two front ends, one database
for n in $([ "${TWO:-0}" = 1 ] && echo "$CONNS"); do
    pids=() ports=()
    for f in 1 2; do
        hs_bench_server "$server" "$tmp/server2-$n-$f.log" --db "$tmp/two-$n-$f.db" \
            --listen 127.0.0.1:0 --store "clickhouse://127.0.0.1:$http/bench2_${n}_$f"
        pids+=("$pid")
        ports+=("$port")
    done
    ch0=$(ticks "$chpid")
    t0=$(now)
    lgs=()
    for f in 0 1; do
        "$loadgen" --port "${ports[$f]}" --conns $((n / 2)) --events $((EVENTS / n)) \
            --per-frame "$PER_FRAME" --stacks "$STACKS" --sample-bytes "$SAMPLE_BYTES" \
            > "$tmp/lg-$n-$f.out" &
        lgs+=($!)
    done
    wait "${lgs[@]}"
    t1=$(now)
    total=0
    for f in 0 1; do
        e=$(sed -n 's/.*events=\([0-9]*\).*/\1/p' "$tmp/lg-$n-$f.out")
        total=$((total + e))
    done
    both="SELECT (SELECT sum(n_events) FROM bench2_${n}_1.events FINAL) + (SELECT sum(n_events) FROM bench2_${n}_2.events FINAL)"
    until [ "$(chq "$both" 2>/dev/null)" = "$total" ]; do
        sleep 0.05
    done
    t2=$(now)
    fet=0
    for p in "${pids[@]}"; do fet=$((fet + $(ticks "$p"))); done
    rate=$(awk -v e="$total" -v a="$t0" -v b="$t1" 'BEGIN {printf "%d", e / (b - a)}')
    ship=$(awk -v e="$total" -v a="$t0" -v b="$t2" 'BEGIN {printf "%d", e / (b - a)}')
    fecpu=$(awk -v t="$fet" -v h="$tck" -v e="$total" 'BEGIN {printf "%.3f", t / h / (e / 1e6)}')
    chcpu=$(awk -v t="$(( $(ticks "$chpid") - ch0 ))" -v h="$tck" -v e="$total" \
            'BEGIN {printf "%.3f", t / h / (e / 1e6)}')
    for p in "${pids[@]}"; do kill -TERM "$p"; wait "$p" || true; done
    printf '%-7s %-6s %12s %12s %12s %14s %12s %14s\n' "ch x2" "$n" "$total" "$rate" "$ship" \
        "$fecpu" "$chcpu" -
done

echo
printf '%-7s %-6s %-20s %s\n' store conns query warm_ms
sort -t $'\t' -k3,3 -k2,2n -k1,1 "$tmp/latency" | awk -F '\t' '{printf "%-7s %-6s %-20s %s\n", $1, $2, $3, $4}'

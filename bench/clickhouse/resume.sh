#!/usr/bin/env bash
# A moved run's fetch time (server/ch_resume.c): starts a local ClickHouse
# (tests/clickhouse/server.xml.in, loopback, a temporary folder); per size
# in SIZES, front end A takes one run of that many events from hs-loadgen
# (bench/server) and ships it; then, REPEAT times, a fresh front end B (an
# empty buffer, the same database) gets the run's HELLO flagged resumed
# (hs-chresume, as a collector that lost A sends it) and the time from the
# HELLO to its answer is taken: B fetches the run from ClickHouse into its
# buffer (hs_chship_resume) and opens it (the store replays its events).
# Prints per size: events, the runs' rows fetched (events rows, i.e. codec
# segments), and the median and each time in ms.
#
#   bash bench/clickhouse/resume.sh [BUILD_DIR]      (default: build)
# Environment: SIZES ("1000000 10000000"), REPEAT (3), PER_FRAME (4096),
# STACKS (256), SAMPLE_BYTES (524288), CLICKHOUSE.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/bench/server_start.sh"
. "$root/bench/clickhouse/ch_start.sh"
build=${1:-$root/build}
server=$build/bin/heapstore-server
loadgen=$build/bin/hs-loadgen
resume=$build/bin/hs-chresume
CLICKHOUSE=${CLICKHOUSE:-/usr/sbin/clickhouse-server}
for b in "$server" "$loadgen" "$resume"; do [ -x "$b" ] || { echo "build first: $b" >&2; exit 1; }; done
[ -x "$CLICKHOUSE" ] || { echo "no ClickHouse: apt-get install clickhouse-server" >&2; exit 1; }
SIZES=${SIZES:-"1000000 10000000"}
REPEAT=${REPEAT:-3}
PER_FRAME=${PER_FRAME:-4096}
STACKS=${STACKS:-256}
SAMPLE_BYTES=${SAMPLE_BYTES:-524288}
tmp=$(mktemp -d "$build/bench-resume.XXXXXX")
chpid=
cleanup() {
    hs_bench_clickhouse_stop
    rm -rf "$tmp"
}
trap cleanup EXIT

hs_bench_clickhouse "$root" "$tmp/ch"
median() { sort -g | awk '{a[NR]=$1} END {printf "%.4g\n", (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

printf '%-10s %12s %10s %s\n' events events_rows median_ms each_ms
i=0
for n in $SIZES; do
    i=$((i + 1))
    db=mv_$i url="clickhouse://127.0.0.1:$http/mv_$i"
    hs_bench_server "$server" "$tmp/a-$i.log" --db "$tmp/a-$i.db" --listen 127.0.0.1:0 --store "$url"
    out=$("$loadgen" --port "$port" --conns 1 --first "$i" --events "$n" --per-frame "$PER_FRAME" \
          --stacks "$STACKS" --sample-bytes "$SAMPLE_BYTES")
    total=$(sed -n 's/.*events=\([0-9]*\).*/\1/p' <<<"$out")
    until [ "$(chq "SELECT sum(n_events) FROM $db.events FINAL" 2>/dev/null)" = "$total" ]; do
        sleep 0.05
    done
    kill -TERM "$pid"
    wait "$pid" || true
    next=$(chq "SELECT max(next_seq) FROM $db.runs")
    rows=$(chq "SELECT count() FROM $db.events FINAL")
    times=()
    for r in $(seq "$REPEAT"); do
        hs_bench_server "$server" "$tmp/b-$i-$r.log" --db "$tmp/b-$i-$r.db" --listen 127.0.0.1:0 \
            --store "$url"
        ans=$("$resume" "$port" "$i" "$next") || { echo "resume failed: $ans" >&2; cat "$tmp/b-$i-$r.log" >&2; exit 1; }
        grep -q "resumed here: fetched from ClickHouse" "$tmp/b-$i-$r.log" ||
            { echo "not fetched: $ans" >&2; cat "$tmp/b-$i-$r.log" >&2; exit 1; }
        times+=("$(sed -n 's/^ms=\([0-9]*\).*/\1/p' <<<"$ans")")
        kill -TERM "$pid"
        wait "$pid" || true
        rm -f "$tmp/b-$i-$r.db"*
    done
    printf '%-10s %12s %10s %s\n' "$total" "$rows" "$(printf '%s\n' "${times[@]}" | median)" \
        "$(IFS=/; echo "${times[*]}")"
done

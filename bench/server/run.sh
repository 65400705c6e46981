#!/usr/bin/env bash
# Server ingest benchmark: for N = 1, 16, 64 connections, starts a fresh
# heapstore-server on a loopback ephemeral port with a new database, replays
# synthetic collector streams with hs-loadgen (events stored = committed and
# acknowledged), then prints events/s, database bytes per event (the whole
# file after a clean stop: events plus rollups, runs, stacks), the
# server's peak RSS and the server's CPU time (user + system) per million
# events, which, unlike events/s, does not depend on what else the machine
# is running. Each N runs REPEAT times (default 3); the table shows medians.
#
#   bash bench/server/run.sh [BUILD_DIR]      (default: build)
# Environment: EVENTS (total events per N, default 16000000), REPEAT, CONNS
# ("1 16 64"), PER_FRAME (4096), STACKS (256), SAMPLE_BYTES (524288).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/bench/server_start.sh"
build=${1:-$root/build}
server=$build/bin/heapstore-server
loadgen=$build/bin/hs-loadgen
[ -x "$server" ] && [ -x "$loadgen" ] || { echo "build first: $server, $loadgen" >&2; exit 1; }
EVENTS=${EVENTS:-16000000}
REPEAT=${REPEAT:-3}
CONNS=${CONNS:-"1 16 64"}
PER_FRAME=${PER_FRAME:-4096}
STACKS=${STACKS:-256}
SAMPLE_BYTES=${SAMPLE_BYTES:-524288}
tmp=$(mktemp -d "$build/bench-server.XXXXXX") # not /tmp: kept apart from tmp cleaners
trap 'rm -rf "$tmp"' EXIT

median() { sort -g | awk '{a[NR]=$1} END {printf "%.10g\n", (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

tck=$(getconf CLK_TCK)
printf '%-6s %12s %12s %14s %11s %14s\n' conns events events/s db_bytes/event peak_rss_MB \
    cpu_s/Mevent
for n in $CONNS; do
    : > "$tmp/rate" ; : > "$tmp/bpe" ; : > "$tmp/rss" ; : > "$tmp/cpu"
    for r in $(seq "$REPEAT"); do
        db=$tmp/bench-$n-$r.db
        log=$tmp/server-$n-$r.log
        hs_bench_server "$server" "$log" --db "$db" --listen 127.0.0.1:0
        per_conn=$(( EVENTS / n ))
        out=$("$loadgen" --port "$port" --conns "$n" --events "$per_conn" \
              --per-frame "$PER_FRAME" --stacks "$STACKS" --sample-bytes "$SAMPLE_BYTES")
        rss_kb=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
        ticks=$(awk '{print $14 + $15}' "/proc/$pid/stat")
        kill -TERM "$pid"
        wait "$pid"
        case $out in *FAILED*) echo "load generator failed: $out" >&2; exit 1 ;; esac
        total=$(sed -n 's/.*events=\([0-9]*\).*/\1/p' <<<"$out")
        rate=$(sed -n 's/.*events_per_s=\([0-9]*\).*/\1/p' <<<"$out")
        stored=$(sqlite3 "$db" 'SELECT sum(n_events) FROM events')
        [ "$stored" = "$total" ] || { echo "stored $stored events of $total" >&2; exit 1; }
        bytes=$(stat -c %s "$db")
        for f in "$db-wal" "$db-shm"; do [ -f "$f" ] && bytes=$((bytes + $(stat -c %s "$f"))); done
        echo "$rate" >> "$tmp/rate"
        awk -v b="$bytes" -v e="$total" 'BEGIN {printf "%.2f\n", b / e}' >> "$tmp/bpe"
        awk -v k="$rss_kb" 'BEGIN {printf "%.1f\n", k / 1024}' >> "$tmp/rss"
        awk -v t="$ticks" -v h="$tck" -v e="$total" 'BEGIN {printf "%.3f\n", t / h / (e / 1e6)}' \
            >> "$tmp/cpu"
        rm -f "$db" "$db-wal" "$db-shm"
    done
    printf '%-6s %12s %12s %14s %11s %14s\n' "$n" "$total" "$(median < "$tmp/rate")" \
        "$(median < "$tmp/bpe")" "$(median < "$tmp/rss")" "$(median < "$tmp/cpu")"
done

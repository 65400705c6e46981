#!/bin/sh
# Per-process cost of the collector (issue 14, "Performance"): a program
# that makes one 4 MiB allocation (always sampled at the default rate) and
# exits, run alone and under libheapstore.so, paired round by round.
#
#   bench/collector/per_process.sh [BUILD_DIR] [ROUNDS] [BASELINE_LIB] [BASELINE_SERVER]
#
# BUILD_DIR (default ./build) holds lib/libheapstore.so, bin/heapstore-server.
# Each round times, one after the other, BATCH runs of each configuration
# (the program alone; preloaded with HEAPSTORE_DISABLE=1; preloaded at the
# default rate sending to a server on 127.0.0.1; and, when BASELINE_LIB is
# given, that library the same way, e.g. one built from an older commit,
# sending to a server of BASELINE_SERVER's binary when that is given, so
# that both halves of the older build are measured) and divides by BATCH. A configuration's figure is the median over the
# rounds of (its time - the program alone's time in the same round).
#
# Then the server started for the purpose reports, at its stop, what its
# symbolizer did for all those runs: pcs named, the time spent, builds read
# and lookups answered without reading a file (the cache hit ratio); and
# one more server is fed three python3 start-ups (thousands of native pcs
# each) at every allocation, for the symbolization throughput in frames per
# second and the hit ratio over repeated runs of the same builds.
#
# With valgrind installed, the instructions the profiled process executes
# (callgrind, user space, env's exec included in every row) under each
# configuration with file:// (no server): steadier than wall time on a
# loaded machine. With perf installed, the same configurations' user and
# kernel instructions and page faults (perf stat, mean of 50 runs, the
# baseline's too): the kernel's part (mapping and relocating libraries,
# page faults) is most of what a process's start costs.
set -eu
BUILD=${1:-build}
ROUNDS=${2:-21}
BASE=${3:-}
BASE_SERVER=${4:-}
BATCH=${BATCH:-20}
BUILD=$(cd "$BUILD" && pwd)
LIB=$BUILD/lib/libheapstore.so
SERVER=$BUILD/bin/heapstore-server
T=$(mktemp -d)
BSPID=
trap 'kill $SPID $BSPID 2>/dev/null || true; rm -rf "$T"' EXIT

cat > "$T/one.c" <<'C'
#include <stdlib.h>
#include <string.h>
int main(void) { char *volatile p = malloc(4 << 20); memset(p, 1, 4096); return p[100] - 1; }
C
# -fno-builtin: the compiler must not drop the allocation
cc -O2 -g -fno-builtin -o "$T/one" "$T/one.c"

# A server on an ephemeral loopback port; its port comes on --ready-fd.
start_server() { # $1: database, $2: log[, $3: server binary]; sets SPID and PORT
    rm -f "$T/port"
    "${3:-$SERVER}" --db "$1" --listen 127.0.0.1:0 --ready-fd 3 3>"$T/port" 2>"$2" &
    SPID=$!
    for _ in $(seq 100); do [ -s "$T/port" ] && break; sleep 0.05; done
    PORT=$(head -1 "$T/port")
}
BURL=
if [ -n "$BASE_SERVER" ]; then
    start_server "$T/b.db" "$T/bserver.log" "$BASE_SERVER"
    BSPID=$SPID BURL=tcp://127.0.0.1:$PORT
fi
start_server "$T/h.db" "$T/server.log"
URL=tcp://127.0.0.1:$PORT
BURL=${BURL:-$URL}

now() { date +%s%N; }
batch() { # $@: env assignments, or nothing; prints ns per run
    t0=$(now)
    i=0
    while [ $i -lt "$BATCH" ]; do env "$@" "$T/one"; i=$((i + 1)); done
    echo $(( ($(now) - t0) / BATCH ))
}

: > "$T/rows"
r=0
while [ $r -lt "$ROUNDS" ]; do
    a=$(batch)
    d=$(batch LD_PRELOAD="$LIB" HEAPSTORE_DISABLE=1)
    s=$(batch LD_PRELOAD="$LIB" HEAPSTORE_URL="$URL")
    b=0
    [ -n "$BASE" ] && b=$(batch LD_PRELOAD="$BASE" HEAPSTORE_URL="$BURL")
    echo "$a $d $s $b" >> "$T/rows"
    r=$((r + 1))
done

median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
ms() { awk -v v="$1" 'BEGIN {printf "%.2f ms", v / 1e6}'; }
delta() { awk -v v="$1" 'BEGIN {printf "%+.2f ms", v / 1e6}'; }

A=$(awk '{print $1}' "$T/rows" | median)
echo "one 4 MiB allocation per process; medians of $ROUNDS interleaved rounds of $BATCH runs;"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-46s %10s %14s\n' "what is preloaded" "per process" "over alone"
printf '%-46s %10s %14s\n' "nothing" "$(ms "$A")" "-"
row() { # $1: label, $2: column
    m=$(awk -v c="$2" '{print $c}' "$T/rows" | median)
    dd=$(awk -v c="$2" '{print $c - $1}' "$T/rows" | median)
    printf '%-46s %10s %14s\n' "$1" "$(ms "$m")" "$(delta "$dd")"
}
row "libheapstore.so, HEAPSTORE_DISABLE=1" 2
row "libheapstore.so, default, server on 127.0.0.1" 3
[ -n "$BASE" ] && row "baseline lib, default, ${BASE_SERVER:+baseline }server on 127.0.0.1" 4
[ -n "$BASE" ] && echo "this build - baseline, paired: $(delta "$(awk '{print $3 - $4}' "$T/rows" | median)")"

[ -n "$BSPID" ] && { kill -TERM $BSPID; wait $BSPID || true; }
kill -TERM $SPID; wait $SPID || true
echo "runs stored with their allocation: $("$BUILD/bin/heapstore" sql --db "$T/h.db" \
    "select count(*) from runs where alloc_events = 1" | sed -n 2p | tr -d ' ')"
echo
SENT=$((ROUNDS * BATCH))
[ -n "$BASE" ] && [ -z "$BASE_SERVER" ] && SENT=$((SENT * 2))
echo "server, after $SENT runs sent to it (the same build):"
grep "symbols:" "$T/server.log" | sed 's/^[^ ]* [^ ]* /  /'

# Throughput: python3 start-ups at every allocation, on a fresh server.
PY=$(readlink -f /usr/bin/python3)
start_server "$T/p.db" "$T/py.log"
for _ in 1 2 3; do
    LD_PRELOAD="$LIB" HEAPSTORE_URL=tcp://127.0.0.1:$PORT HEAPSTORE_SAMPLE_BYTES=1 \
        "$PY" -c 'import json, decimal, sqlite3' || true
done
kill -TERM $SPID; wait $SPID || true
echo "3 x $PY -c 'import json, decimal, sqlite3' at every allocation, fresh server:"
grep "symbols:" "$T/py.log" | sed 's/^[^ ]* [^ ]* /  /'

if command -v valgrind >/dev/null; then
ir() { # instructions of a command and its children
    rm -f "$T"/cg.*
    valgrind --tool=callgrind --trace-children=yes --callgrind-out-file="$T/cg.%p" "$@" \
        >/dev/null 2>&1 || true
    cat "$T"/cg.* | awk '/^totals:/ {s += $2} END {print s}'
}
echo
echo "instructions per process (callgrind), file:// instead of a server:"
a=$(ir env "$T/one")
printf '  %-40s %12s\n' "alone" "$a"
for cfg in "HEAPSTORE_DISABLE=1" "default"; do
    v=$(ir env LD_PRELOAD="$LIB" HEAPSTORE_URL="file://$T/x.hsp" ${cfg%default} "$T/one")
    printf '  %-40s %12s (+%s)\n' "libheapstore.so, $cfg" "$v" $((v - a))
done
if [ -n "$BASE" ]; then
    v=$(ir env LD_PRELOAD="$BASE" HEAPSTORE_URL="file://$T/y.hsp" "$T/one")
    printf '  %-40s %12s (+%s)\n' "baseline lib, default" "$v" $((v - a))
fi
fi

# User and kernel instructions and page faults (perf stat, mean of 50 runs,
# env's exec included in every row): the kernel's share (mapping and
# relocating libraries, page faults) is what callgrind does not see.
command -v perf >/dev/null || exit 0
pst() { # prints "user kernel faults"
    perf stat -r 50 -x, -e instructions:u,instructions:k,page-faults "$@" 2>&1 >/dev/null |
        awk -F, '/instructions:u/ {u = $1} /instructions:k/ {k = $1} /page-faults/ {f = $1}
                 END {printf "%d %d %d", u, k, f}'
}
echo
echo "instructions per process (perf stat, mean of 50), file:// instead of a server:"
printf '  %-40s %12s %12s %8s\n' "" "user" "kernel" "faults"
set -- $(pst env "$T/one")
printf '  %-40s %12s %12s %8s\n' "alone" "$1" "$2" "$3"
au=$1 ak=$2 af=$3
for cfg in "HEAPSTORE_DISABLE=1" "default"; do
    set -- $(pst env LD_PRELOAD="$LIB" HEAPSTORE_URL="file://$T/z.hsp" ${cfg%default} "$T/one")
    printf '  %-40s %12s %12s %8s\n' "libheapstore.so, $cfg" "+$(($1 - au))" "+$(($2 - ak))" \
        "+$(($3 - af))"
done
if [ -n "$BASE" ]; then
    for cfg in "HEAPSTORE_DISABLE=1" "default"; do
        set -- $(pst env LD_PRELOAD="$BASE" HEAPSTORE_URL="file://$T/w.hsp" ${cfg%default} "$T/one")
        printf '  %-40s %12s %12s %8s\n' "baseline lib, $cfg" "+$(($1 - au))" "+$(($2 - ak))" \
            "+$(($3 - af))"
    done
fi

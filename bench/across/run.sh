#!/usr/bin/env bash
# Questions across many runs: a database of N runs (default 10000) of
# realistic size, then the median of REPEAT answers of each question (the
# typed core alone, in process: hs-bench-trend; and whole answers: the CLI
# on the file, process start and JSON included, and the API of a running
# server, curl's total), and what gc of half the runs costs and gives back.
# Prints tables.
#
#   bash bench/across/run.sh [BUILD_DIR]          (default: build)
# Environment: N (10000 runs), REPEAT (5), WORK (a folder for the database;
# default a new one under /tmp, removed at the end unless KEEP=1).
#
# How the database is made, fast: six real runs of tests/queries/trend/
# wl_trend.c under the collector (`heapstore run --sample 1`: 2048 call paths
# each, so about 2050 stacks, 6000 snapshot rows, 2000 trace_stats rows and
# 2000 run_stacks rows a run; versions 1.2, 1.9 and 1.10, the last with 8 MiB
# more in regressed_cache), then every other run is a copy of one of those
# six made by SQL with a new id, uuid and start time (one second apart) and a
# label build=K/100: INSERT … SELECT of the seed's rows of every per-run table
# in one transaction. The stacks (traces, frames) are the seeds' own, as runs
# of the same program share them. Copies keep their seed's summaries
# (schema 9's rss_peak_bytes and leak_bytes_per_s), as the server would have
# written them.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
cli=$build/bin/heapstore
server=$build/bin/heapstore-server
[ -x "$build/bin/hs-bench-trend" ] || { echo "build first: $build/bin/hs-bench-trend" >&2; exit 1; }
wl=$build/tests/wl_trend
for b in "$cli" "$server" "$wl"; do
    [ -x "$b" ] || { echo "build first: $b" >&2; exit 1; }
done
for t in sqlite3 curl; do command -v $t >/dev/null || { echo "$t is needed" >&2; exit 1; }; done
. "$root/bench/server_start.sh"
N=${N:-10000}
REPEAT=${REPEAT:-5}
WORK=${WORK:-$(mktemp -d /tmp/hs-across.XXXXXX)}
db=$WORK/across.db
srv_pid=
cleanup() {
    [ -n "$srv_pid" ] && kill "$srv_pid" 2>/dev/null && wait "$srv_pid" 2>/dev/null || true
    [ "${KEEP:-0}" = 1 ] || rm -rf "$WORK"
}
trap cleanup EXIT

# ---- the database ---------------------------------------------------------
rm -f "$db" "$db"-*
export HEAPSTORE_URL=
for v in 1.9 1.9 1.10 1.10 1.2 1.2; do
    extra=0
    [ "$v" = 1.10 ] && extra=8192
    "$cli" run --db "$db" --sample 1 --label "version=$v" -- "$wl" 4096 "$extra" 800 >/dev/null 2>&1
done
# the server `heapstore run` started for the purpose lets go of the file
# (taking the file out of WAL mode needs it alone)
for _ in $(seq 120); do
    sqlite3 "$db" "PRAGMA journal_mode = DELETE" >/dev/null 2>&1 && break
    sleep 0.5
done
cols() { # the columns of table $1 but those listed in $2 (comma-separated)
    sqlite3 "$db" "SELECT group_concat(name, ', ') FROM pragma_table_info('$1')
                   WHERE NOT (',' || '$2' || ',' LIKE '%,' || name || ',%')"
}
t0=$(date +%s%N)
{
    # no WAL while copying: the pages go to the file once (a 2 GB transaction
    # through the WAL would be written twice); the server's mode after
    echo "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF;"
    echo "PRAGMA cache_size = -262144; BEGIN;"
    echo "CREATE TEMP TABLE copies (id INTEGER PRIMARY KEY, seed INTEGER NOT NULL);"
    echo "WITH RECURSIVE k(i) AS (SELECT 7 UNION ALL SELECT i + 1 FROM k WHERE i < $N)"
    echo "  INSERT INTO temp.copies SELECT i, (i - 1) % 6 + 1 FROM k;"
    rc=$(cols runs 'id,uuid,start_unix_ns,parent_uuid,parent_id')
    echo "INSERT INTO runs (id, uuid, start_unix_ns, $rc) SELECT c.id, randomblob(16),"
    echo "  (SELECT start_unix_ns FROM runs WHERE id = 1) + c.id * 1000000000, $rc"
    echo "  FROM temp.copies c JOIN runs r ON r.id = c.seed ORDER BY c.id;"
    # the per-run tables as stored: snapshots in blocks since schema 15 (and
    # by window and trace since 16), the
    # id maps in chunks since 13 (the plain sqlite3 shell sees no virtual
    # tables); an older file's own tables otherwise
    for t in events snapshots snapshot_blocks snapshot_series heap_series trace_stats run_labels run_pcs \
        run_stacks run_maps mappings process_samples size_hist run_exact heap_exact; do
        [ "$(sqlite3 "$db" "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = '$t'")" = 1 ] || continue
        tc=$(cols $t 'run')
        echo "INSERT INTO $t (run, $tc) SELECT c.id, $tc FROM temp.copies c JOIN $t s ON s.run = c.seed ORDER BY c.id;"
    done
    echo "INSERT INTO run_labels (run, key, value) SELECT id, 'build', CAST(id / 100 AS TEXT) FROM temp.copies;"
    echo "COMMIT; PRAGMA journal_mode = WAL;"
} | sqlite3 "$db" >/dev/null
t1=$(date +%s%N)
runs=$(sqlite3 "$db" "SELECT COUNT(*) FROM runs")
stacks=$("$cli" sql --db "$db" --json "SELECT COUNT(*) AS n FROM run_stacks WHERE run = 1" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["rows"][0][0])')
size_mb() { echo "$(( $(stat -c %s "$1") / 1048576 ))"; }
printf "database: %s runs (%s stacks a run), %s MiB, made in %s s (copies by SQL)\n" \
    "$runs" "$stacks" "$(size_mb "$db")" "$(awk -v d=$((t1 - t0)) 'BEGIN { printf "%.1f", d / 1e9 }')"

# ---- timings --------------------------------------------------------------
median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
time_cli() { # ms of one `heapstore ARGS --db db`, REPEAT times, the median
    for _ in $(seq "$REPEAT"); do
        local a b
        a=$(date +%s%N)
        "$cli" "$@" --db "$db" >/dev/null
        b=$(date +%s%N)
        echo $(((b - a) / 1000000))
    done | median
}
start_server() {
    hs_bench_server "$server" "$WORK/server.log" --db "$db" --listen 127.0.0.1:0
    srv_pid=$pid
}
time_api() { # ms of GET $1 (curl's total), the median of REPEAT after one
    curl -s -o /dev/null "http://127.0.0.1:$port$1"
    for _ in $(seq "$REPEAT"); do
        curl -s -o /dev/null -w '%{time_total}\n' "http://127.0.0.1:$port$1"
    done | awk '{ printf "%d\n", $1 * 1000 }' | median
}
# the typed core alone (hs_core_trend: the one store question and the
# grouping), and the API's whole answer (the core and its JSON text), in
# one process: hs-bench-trend
printf '\n%-58s %10s %10s\n' "in process (median of $REPEAT)" "core (ms)" "answer (ms)"
core() {
    local out
    out=$("$build/bin/hs-bench-trend" "$db" "$REPEAT" "${@:2}")
    printf '%-58s %10s %10s\n' "$1" "$(echo "$out" | awk '{ print $2 }')" "$(echo "$out" | awk '{ print $4 }')"
}
core "trend all ($runs runs)"
core "trend program=wl_trend --by version" runs=program=wl_trend by=version
core "trend all --by build (100 groups)" by=build
core "trend all --function regressed_cache" function=regressed_cache

printf '\n%-58s %10s %10s\n' "whole answers (median of $REPEAT)" "cli (ms)" "api (ms)"
row() { printf '%-58s %10s %10s\n' "$1" "$2" "$3"; }
start_server
row "trend all ($runs runs)" "$(time_cli trend all --json)" "$(time_api '/api/trend?runs=all')"
row "trend program=wl_trend --by version" "$(time_cli trend program=wl_trend --by version --json)" \
    "$(time_api '/api/trend?runs=program%3Dwl_trend&by=version')"
row "trend all --by build (100 groups)" "$(time_cli trend all --by build --json)" \
    "$(time_api '/api/trend?runs=all&by=build')"
row "trend all --function regressed_cache" "$(time_cli trend all --function regressed_cache --json)" \
    "$(time_api '/api/trend?runs=all&function=regressed_cache')"
row "trend version=1.10 --function regressed_cache --at end" \
    "$(time_cli trend version=1.10 --function regressed_cache --at end --json)" \
    "$(time_api '/api/trend?runs=version%3D1.10&function=regressed_cache&at=end')"
mid=$((runs / 2))
row "runs: first page (100)" "$(time_cli runs --limit 100 --json)" "$(time_api '/api/runs?limit=100')"
row "runs: a page in the middle (before=$mid)" "-" "$(time_api "/api/runs?limit=100&before=$mid")"
row "runs: label=version=1.10, first page" "$(time_cli runs --label version=1.10 --limit 100 --json)" \
    "$(time_api '/api/runs?limit=100&label=version%3D1.10')"
kill "$srv_pid"
wait "$srv_pid" 2>/dev/null || true
srv_pid=

# ---- gc of half the runs ---------------------------------------------------
before=$(stat -c %s "$db")
a=$(date +%s%N)
"$cli" gc --keep $((runs / 2)) --db "$db" --json >"$WORK/gc.json"
b=$(date +%s%N)
after=$(stat -c %s "$db")
printf '\ngc --keep %d (half the runs): %d ms; database %d MiB -> %d MiB (file size, after VACUUM)\n' \
    $((runs / 2)) $(((b - a) / 1000000)) $((before / 1048576)) $((after / 1048576))
grep -o '"runs_removed": *[0-9]*\|"rows_deleted": *[0-9]*' "$WORK/gc.json" | tr '\n' ' '
echo

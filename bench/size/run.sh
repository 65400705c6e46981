#!/usr/bin/env bash
# Size benchmark: what an every-allocation run (--sample 1) costs on disk,
# against heaptrack's file for the same program. For each workload, runs
# the program once under `heapstore run --sample 1` (a server started for
# the purpose on a fresh database) and once under heaptrack, then prints
# the events stored, heaptrack's file (zstd-compressed, as it writes it),
# the database after a clean stop (file plus -wal), the ratio of the two,
# and where the database's bytes are (dbstat: events rows, rollups,
# stacks and frames, the rest).
#
#   bash bench/size/run.sh [BUILD_DIR]          (default: build)
# Environment: WORKLOADS (a subset of "sqlite3 cc1 python3"), ROWS (sqlite3
# rows inserted, default 1000000), PY_ITEMS (records the Python script builds,
# serializes and parses, default 50000), NO_HEAPTRACK=1 (skip heaptrack),
# KEEP=DIR (keep each workload's database there, as DIR/WORKLOAD.db, for
# a look at its tables: sqlite3 DIR/WORKLOAD.db 'SELECT name, sum(pgsize)
# FROM dbstat GROUP BY name').
# Needs: sqlite3, gcc (cc1), python3, heaptrack (apt-get install heaptrack).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
cli=$build/bin/heapstore
[ -x "$cli" ] || { echo "build first: $cli" >&2; exit 1; }
WORKLOADS=${WORKLOADS:-"sqlite3 cc1 python3"}
ROWS=${ROWS:-1000000}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/hs-size.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cc1=$(gcc -print-prog-name=cc1)
# the interpreter itself, not a wrapper script (pyenv's shims are bash)
python=$(python3 -c 'import sys; print(sys.executable)')
PY_ITEMS=${PY_ITEMS:-50000}

cat > "$tmp/insert.sql" <<SQL
CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT, c REAL);
BEGIN;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $ROWS)
INSERT INTO t SELECT i, 'row' || i, i * 0.5 FROM n;
COMMIT;
SQL
cat > "$tmp/work.py" <<'PY'
import collections, json, sys
rows = [{"id": i, "name": "item%d" % i, "tags": ["t%d" % (i % 7), "u%d" % (i % 13)]} for i in range(int(sys.argv[1]))]
text = json.dumps(rows)
back = json.loads(text)
count = collections.Counter(t for r in back for t in r["tags"])
print(len(text), len(count))
PY

# The workload's command, run in $tmp/work (a fresh directory each time).
workload() {
    case $1 in
    sqlite3) echo "sqlite3 $tmp/work/w.db" ;;
    cc1) echo "$cc1 -quiet -imultiarch $(gcc -print-multiarch) -D_GNU_SOURCE -O2 -I$root/common $root/common/hs_wire.c -o $tmp/work/w.s" ;;
    python3) echo "$python $tmp/work.py $PY_ITEMS" ;; # with PYTHONMALLOC=malloc (below)
    esac
}
stdin_of() { [ "$1" = sqlite3 ] && echo "$tmp/insert.sql" || echo /dev/null; }

printf '%-8s %10s %14s %14s %7s %10s %10s %10s %10s\n' program events heaptrack_B db_B ratio \
    events_B rollups_B stacks_B other_B
for w in $WORKLOADS; do
    # every allocation through malloc; exported, since heaptrack follows no exec (env)
    if [ "$w" = python3 ]; then export PYTHONMALLOC=malloc; else unset PYTHONMALLOC; fi
    rm -rf "$tmp/work" && mkdir "$tmp/work"
    db=$tmp/$w.db
    # shellcheck disable=SC2046
    HEAPSTORE_URL=tcp://127.0.0.1:1 "$cli" run --sample 1 --db "$db" -- $(workload "$w") \
        < "$(stdin_of "$w")" > "$tmp/$w.run.log" 2>&1 || { cat "$tmp/$w.run.log" >&2; exit 1; }
    bytes=$(stat -c %s "$db")
    for f in "$db-wal"; do [ -f "$f" ] && bytes=$((bytes + $(stat -c %s "$f"))); done
    events=$(sqlite3 "$db" 'SELECT sum(alloc_events + free_events) FROM runs')
    read -r ev ro st ot < <(sqlite3 -separator ' ' "$db" "SELECT
        sum(CASE WHEN name IN ('events', 'events_time', 'sqlite_autoindex_events_1', 'events_tail') THEN pgsize END),
        sum(CASE WHEN name IN ('snapshots', 'snapshot_blocks', 'snapshot_series', 'heap_series', 'trace_stats') THEN pgsize END),
        sum(CASE WHEN name IN ('traces', 'sqlite_autoindex_traces_1', 'trace_blocks', 'frames',
                               'sqlite_autoindex_frames_1', 'frames_function', 'run_pcs',
                               'run_stacks', 'run_maps', 'sqlite_autoindex_run_maps_1') THEN pgsize END),
        sum(CASE WHEN name NOT IN ('events', 'events_time', 'sqlite_autoindex_events_1', 'events_tail',
                                   'snapshots', 'snapshot_blocks', 'snapshot_series', 'heap_series', 'trace_stats', 'traces',
                                   'sqlite_autoindex_traces_1', 'trace_blocks', 'frames',
                                   'sqlite_autoindex_frames_1', 'frames_function', 'run_pcs',
                                   'run_stacks', 'run_maps', 'sqlite_autoindex_run_maps_1') THEN pgsize END)
        FROM dbstat")
    ht=-
    ratio=-
    if [ -z "${NO_HEAPTRACK:-}" ]; then
        rm -rf "$tmp/work" && mkdir "$tmp/work"
        # shellcheck disable=SC2046
        heaptrack -o "$tmp/ht-$w" $(workload "$w") < "$(stdin_of "$w")" > "$tmp/$w.ht.log" 2>&1 ||
            { cat "$tmp/$w.ht.log" >&2; exit 1; }
        ht=$(stat -c %s "$tmp/ht-$w".*)
        ratio=$(awk -v a="$bytes" -v b="$ht" 'BEGIN {printf "%.1f", a / b}')
    fi
    printf '%-8s %10s %14s %14s %7s %10s %10s %10s %10s\n' "$w" "$events" "$ht" "$bytes" "$ratio" \
        "$ev" "$ro" "$st" "$ot"
    if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$db" "$KEEP/$w.db"; fi
done

# Sourced by the ClickHouse benchmarks: a local ClickHouse server for the
# duration of a script (tests/clickhouse/server.xml.in, loopback ports, a
# folder of its own), stopped with the script.
#
#   hs_bench_clickhouse ROOT DIR      (CLICKHOUSE: the server binary)
# Sets http and tcp (its ports) and chpid, and defines chq SQL (a query over
# its HTTP interface); returns once it answers. The caller's EXIT trap must
# kill "$chpid" (see hs_bench_clickhouse_stop).
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
chq() { curl -sS "http://127.0.0.1:$http/" --data-binary "$1"; }
hs_bench_clickhouse() {
    local root=$1 dir=$2 inter
    http=$(freeport); tcp=$(freeport); inter=$(freeport)
    mkdir -p "$dir/log"
    sed -e "s#@DIR@#$dir#g" -e "s#@HTTP_PORT@#$http#" -e "s#@TCP_PORT@#$tcp#" \
        -e "s#@INTER_PORT@#$inter#" -e "s#@USERS@#$root/tests/clickhouse/users.xml#" \
        -e "s#@SHARD1_TCP@#$tcp#" -e "s#@SHARD2_TCP@#$tcp#" -e "s#@SHARD@#1#" \
        "$root/tests/clickhouse/server.xml.in" > "$dir/config.xml"
    "$CLICKHOUSE" --config-file="$dir/config.xml" > "$dir/log/stdout" 2>&1 &
    chpid=$!
    for _ in $(seq 100); do [ "$(chq 'SELECT 1' 2>/dev/null)" = 1 ] && break; sleep 0.2; done
}
hs_bench_clickhouse_stop() {
    [ -n "${chpid:-}" ] && kill -TERM "$chpid" 2>/dev/null && wait "$chpid" 2>/dev/null
    return 0
}

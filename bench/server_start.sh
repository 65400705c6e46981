# Sourced by the benchmark scripts: starts heapstore-server and learns its
# port through its readiness pipe (--ready-fd, common/hs_spawn.h).
#
#   hs_bench_server SERVER LOG ARGS...   sets $pid and $port, or exits 1

hs_bench_server() {
    local server=$1 log=$2 fifo
    shift 2
    fifo=$(mktemp -u "${TMPDIR:-/tmp}/hs-ready.XXXXXX")
    mkfifo "$fifo"
    "$server" "$@" --ready-fd 3 2> "$log" 3> "$fifo" &
    pid=$!
    port=
    # end of file (the server exited) or 30 s without a line: not started
    read -r -t 30 port < "$fifo" || true
    rm -f "$fifo"
    [ -n "$port" ] || { echo "server did not start:" >&2; cat "$log" >&2; exit 1; }
}
